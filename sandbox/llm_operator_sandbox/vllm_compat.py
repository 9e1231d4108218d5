"""Static checks of a vLLM release's Python sources against what the live admission cap
relies on (issue 60), read with :mod:`ast`, never imported (pure: source text in, findings
out). ``tools/check_live_cap_compat.py`` is the I/O edge: it downloads each release's
wheel and hands its ``vllm/**.py`` files here.

What :mod:`llm_operator.inpod.engine.scheduler` (the ``--scheduler-cls`` class) and the
operator rely on, one check each:

- ``base_class``: ``vllm.v1.core.sched.async_scheduler.AsyncScheduler``, a subclass of
  ``vllm.v1.core.sched.scheduler.Scheduler`` (the class subclasses the first, else the
  second).
- ``constructor``: the class forwards ``*args, **kwargs`` to the base, so what must hold is
  that ``AsyncScheduler.__init__`` forwards them too (or is absent), that the engine core's
  call of the scheduler class passes only keywords ``Scheduler.__init__`` accepts, and that
  ``Scheduler.__init__`` sets ``self.max_num_running_reqs`` (the class reads it as the
  runner capacity).
- ``active_cap``: ``Scheduler.__init__`` sets ``self.max_num_active_reqs`` and
  ``schedule()`` (or a method it calls) reads it: the attribute the class sets live. Where
  it is absent the class still serves and reports ``llmop_admission_live 0``; the finding
  lists the ``self.max_num_*`` attributes ``schedule()`` reads, where a replacement would
  show.
- ``scheduler_cls``: ``SchedulerConfig.scheduler_cls`` exists and ``get_scheduler_cls()``
  resolves a string with ``resolve_obj_by_qualname`` (what ``--scheduler-cls`` does), and
  the engine core calls ``get_scheduler_cls()``.
- ``metrics``: every vLLM series the operator reads is named in vLLM's sources (a counter
  without its ``_total``), and vLLM serves ``PROMETHEUS_MULTIPROC_DIR``'s multiprocess
  collector (how the class's gauges, set in the engine-core process, reach ``/metrics``).
- ``termination``: the scheduler class is constructed inside ``EngineCore.__init__`` (the
  engine-core process, where the class's ``__init__`` writes its ``llmop-live-cap:`` line
  to ``$LLMOP_TERMINATION_LOG`` before re-raising), and no vLLM source names the
  termination-message file (``/dev/termination-log``), which would overwrite that line.

A release whose checks all pass is ``live``; one that fails ``active_cap`` only is
``no-hook`` (the class loads and serves, the cap moves by rollouts); any other failure is
``incompatible`` (the class would crash the engine at start).

One more fact, outside the verdict (issue 60, item 3): ``active_seqs_flag``, whether
``vllm serve`` takes ``--max-num-active-seqs`` (vLLM #56758): ``vllm/engine/arg_utils.py``
names the flag, ``SchedulerConfig`` has the field ``max_num_active_seqs``, and
``Scheduler.__init__`` reads it (into ``max_num_active_reqs``). Where it holds, the
operator renders the active cap as that flag when the live cap is not in use
(``llm_operator.rendering.admission.uses_active_seqs_flag``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

ASYNC_SCHEDULER = "vllm/v1/core/sched/async_scheduler.py"
SCHEDULER = "vllm/v1/core/sched/scheduler.py"
SCHEDULER_CONFIG = "vllm/config/scheduler.py"
ENGINE_CORE = "vllm/v1/engine/core.py"
ARG_UTILS = "vllm/engine/arg_utils.py"
ACTIVE_SEQS_FLAG = "--max-num-active-seqs"
METRICS_PROMETHEUS = "vllm/v1/metrics/prometheus.py"
METRICS_DIR = "vllm/v1/metrics/"
TERMINATION_FILE = "/dev/termination-log"
# The files the checks read besides the metrics and the termination scan.
KEY_FILES = (ASYNC_SCHEDULER, SCHEDULER, SCHEDULER_CONFIG, ENGINE_CORE, METRICS_PROMETHEUS)

CHECKS = ("base_class", "constructor", "active_cap", "scheduler_cls", "metrics",
          "termination")
LIVE, NO_HOOK, INCOMPATIBLE = "live", "no-hook", "incompatible"


@dataclass(frozen=True)
class Finding:
    """One check's verdict on one release, with where in the sources it was seen."""

    check: str
    ok: bool
    evidence: str  # "file:line what", or what is missing


@dataclass(frozen=True)
class Report:
    """Every check of one release."""

    version: str
    findings: tuple[Finding, ...] = field(default_factory=tuple)
    # Whether ``vllm serve`` takes --max-num-active-seqs (not part of the verdict).
    active_seqs: Finding | None = None

    @property
    def verdict(self) -> str:
        failed = {f.check for f in self.findings if not f.ok}
        if not failed:
            return LIVE
        return NO_HOOK if failed == {"active_cap"} else INCOMPATIBLE

    def finding(self, check: str) -> Finding:
        return next(f for f in self.findings if f.check == check)


def _short(path: str) -> str:
    return path.removeprefix("vllm/")


def _parse(sources: Mapping[str, str], path: str) -> ast.Module | None:
    text = sources.get(path)
    if text is None:
        return None
    try:
        return ast.parse(text, filename=path)
    except SyntaxError:
        return None


def _class(tree: ast.Module | None, name: str) -> ast.ClassDef | None:
    if tree is None:
        return None
    return next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)


def _method(cls: ast.ClassDef | None, name: str) -> ast.FunctionDef | None:
    if cls is None:
        return None
    return next((n for n in cls.body
                 if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name),
                None)  # type: ignore[return-value]


def _base_names(cls: ast.ClassDef) -> list[str]:
    return [b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute)
            else ast.unparse(b) for b in cls.bases]


def _self_attrs(node: ast.AST, ctx: type[ast.expr_context]) -> list[ast.Attribute]:
    """``self.X`` nodes in ``node`` with the given context (Load or Store)."""
    return [n for n in ast.walk(node) if isinstance(n, ast.Attribute)
            and isinstance(n.value, ast.Name) and n.value.id == "self"
            and isinstance(n.ctx, ctx)]


def _signature(fn: ast.FunctionDef) -> str:
    a = fn.args
    parts = [p.arg for p in a.posonlyargs + a.args]
    if a.vararg:
        parts.append("*" + a.vararg.arg)
    parts += [p.arg for p in a.kwonlyargs]
    if a.kwarg:
        parts.append("**" + a.kwarg.arg)
    return f"({', '.join(parts)})"


def check_base_class(sources: Mapping[str, str]) -> Finding:
    sched = _class(_parse(sources, SCHEDULER), "Scheduler")
    if sched is None:
        return Finding("base_class", False, f"no class Scheduler in {_short(SCHEDULER)}")
    asched = _class(_parse(sources, ASYNC_SCHEDULER), "AsyncScheduler")
    if asched is None:
        return Finding("base_class", False,
                       f"no class AsyncScheduler in {_short(ASYNC_SCHEDULER)} (the class "
                       "would fall back to Scheduler: async scheduling off)")
    if "Scheduler" not in _base_names(asched):
        return Finding("base_class", False,
                       f"{_short(ASYNC_SCHEDULER)}:{asched.lineno} AsyncScheduler"
                       f"({', '.join(_base_names(asched))}) no longer extends Scheduler")
    return Finding("base_class", True,
                   f"{_short(ASYNC_SCHEDULER)}:{asched.lineno} AsyncScheduler(Scheduler); "
                   f"{_short(SCHEDULER)}:{sched.lineno} Scheduler")


def _scheduler_call(core: ast.Module | None) -> ast.Call | None:
    """The engine core's call of the class ``get_scheduler_cls()`` returned."""
    if core is None:
        return None
    names: set[str] = set()
    for node in ast.walk(core):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Attribute)
                and node.value.func.attr == "get_scheduler_cls"):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    for node in ast.walk(core):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in names):
            return node
    return None


def check_constructor(sources: Mapping[str, str]) -> Finding:
    sched = _class(_parse(sources, SCHEDULER), "Scheduler")
    init = _method(sched, "__init__")
    if init is None:
        return Finding("constructor", False, f"no Scheduler.__init__ in {_short(SCHEDULER)}")
    where = f"{_short(SCHEDULER)}:{init.lineno} Scheduler.__init__{_signature(init)}"
    ainit = _method(_class(_parse(sources, ASYNC_SCHEDULER), "AsyncScheduler"), "__init__")
    if ainit is not None and not (ainit.args.vararg and ainit.args.kwarg):
        return Finding("constructor", False,
                       f"{_short(ASYNC_SCHEDULER)}:{ainit.lineno} AsyncScheduler.__init__"
                       f"{_signature(ainit)} does not forward *args, **kwargs")
    call = _scheduler_call(_parse(sources, ENGINE_CORE))
    if call is None:
        return Finding("constructor", False,
                       f"{_short(ENGINE_CORE)}: no call of the class get_scheduler_cls() "
                       "returns")
    params = {p.arg for p in init.args.args + init.args.kwonlyargs}
    passed = [k.arg for k in call.keywords if k.arg is not None]
    unknown = [k for k in passed if k not in params]
    if call.args or unknown:
        what = (f"keywords {unknown} not accepted" if unknown
                else f"{len(call.args)} positional argument(s)")
        return Finding("constructor", False,
                       f"{_short(ENGINE_CORE)}:{call.lineno} passes {what}; {where}")
    if "max_num_running_reqs" not in {a.attr for a in _self_attrs(init, ast.Store)}:
        return Finding("constructor", False,
                       f"{where} no longer sets self.max_num_running_reqs")
    return Finding("constructor", True,
                   f"{where}; {_short(ENGINE_CORE)}:{call.lineno} passes {len(passed)} "
                   "keywords, all accepted; sets self.max_num_running_reqs")


def _reads_from(cls: ast.ClassDef, start: str, depth: int = 3) -> dict[str, list[int]]:
    """``self.X`` loads in method ``start`` and the methods of ``cls`` it calls as
    ``self.m(...)``, ``depth`` calls deep: attribute -> lines."""
    seen: set[str] = set()
    out: dict[str, list[int]] = {}
    todo = [(start, 0)]
    while todo:
        name, level = todo.pop()
        fn = _method(cls, name)
        if fn is None or name in seen:
            continue
        seen.add(name)
        for attr in _self_attrs(fn, ast.Load):
            out.setdefault(attr.attr, []).append(attr.lineno)
        if level < depth:
            todo += [(n.func.attr, level + 1) for n in ast.walk(fn)
                     if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                     and isinstance(n.func.value, ast.Name) and n.func.value.id == "self"]
    return out


def check_active_cap(sources: Mapping[str, str], attr: str = "max_num_active_reqs") -> Finding:
    sched = _class(_parse(sources, SCHEDULER), "Scheduler")
    init = _method(sched, "__init__")
    if sched is None or init is None:
        return Finding("active_cap", False, f"no Scheduler.__init__ in {_short(SCHEDULER)}")
    stored = [a.lineno for a in _self_attrs(init, ast.Store) if a.attr == attr]
    reads = _reads_from(sched, "schedule")
    path = _short(SCHEDULER)
    asched = _class(_parse(sources, ASYNC_SCHEDULER), "AsyncScheduler")
    override = _method(asched, "schedule")
    if asched is not None and override is not None:  # read where AsyncScheduler schedules
        calls_super = any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                          and n.func.attr == "schedule" and isinstance(n.func.value, ast.Call)
                          for n in ast.walk(override))
        own = _reads_from(asched, "schedule")
        reads = {k: own.get(k, []) + (reads.get(k, []) if calls_super else [])
                 for k in set(own) | (set(reads) if calls_super else set())}
        path = _short(ASYNC_SCHEDULER) if attr in own else path
    if stored and attr in reads:
        return Finding("active_cap", True,
                       f"{_short(SCHEDULER)}:{stored[0]} sets self.{attr}; "
                       f"{path}:{min(reads[attr])} schedule() reads it")
    others = sorted(k for k in reads if k.startswith("max_num_"))
    if not stored:
        why = f"Scheduler.__init__ sets no self.{attr}"
    else:
        why = f"{_short(SCHEDULER)}:{stored[0]} sets self.{attr} but schedule() never reads it"
    read = ", ".join("self." + o for o in others) or "no self.max_num_*"
    return Finding("active_cap", False, f"{why}; schedule() reads {read}")


def check_scheduler_cls(sources: Mapping[str, str]) -> Finding:
    cfg = _class(_parse(sources, SCHEDULER_CONFIG), "SchedulerConfig")
    if cfg is None:
        return Finding("scheduler_cls", False,
                       f"no class SchedulerConfig in {_short(SCHEDULER_CONFIG)}")
    fields = {n.target.id: n.lineno for n in cfg.body
              if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    getter = _method(cfg, "get_scheduler_cls")
    if "scheduler_cls" not in fields or getter is None:
        return Finding("scheduler_cls", False,
                       f"{_short(SCHEDULER_CONFIG)}: SchedulerConfig has no "
                       + ("scheduler_cls field" if "scheduler_cls" not in fields
                          else "get_scheduler_cls()"))
    resolves = any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                   and n.func.id == "resolve_obj_by_qualname" for n in ast.walk(getter))
    if not resolves:
        return Finding("scheduler_cls", False,
                       f"{_short(SCHEDULER_CONFIG)}:{getter.lineno} get_scheduler_cls() does "
                       "not resolve a class name (resolve_obj_by_qualname)")
    call = _scheduler_call(_parse(sources, ENGINE_CORE))
    if call is None:
        return Finding("scheduler_cls", False,
                       f"{_short(ENGINE_CORE)} does not call get_scheduler_cls()")
    return Finding("scheduler_cls", True,
                   f"{_short(SCHEDULER_CONFIG)}:{fields['scheduler_cls']} scheduler_cls, "
                   f":{getter.lineno} get_scheduler_cls() resolves it by name")


def _string_lines(text: str) -> dict[str, int]:
    """Every string constant in ``text`` -> its first line (empty on a syntax error)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return {}
    out: dict[str, int] = {}
    for n in ast.walk(tree):
        if isinstance(n, ast.Constant) and isinstance(n.value, str):
            out.setdefault(n.value, n.lineno)
    return out


def check_metrics(sources: Mapping[str, str], names: Iterable[str]) -> Finding:
    """Each of ``names`` (series as Prometheus shows them) named in ``vllm/v1/metrics/``;
    a ``_total`` series is found by its counter's name."""
    found: dict[str, str] = {}
    for path in sorted(p for p in sources if p.startswith(METRICS_DIR)):
        for s, line in _string_lines(sources[path]).items():
            found.setdefault(s, f"{_short(path)}:{line}")
    wanted = sorted(set(names))
    missing = [n for n in wanted
               if n not in found and n.removesuffix("_total") not in found]
    multiproc = _string_lines(sources.get(METRICS_PROMETHEUS, "")).get("PROMETHEUS_MULTIPROC_DIR")
    collector = "MultiProcessCollector" in sources.get(METRICS_PROMETHEUS, "")
    if missing:
        return Finding("metrics", False, f"not in {METRICS_DIR}: {', '.join(missing)}")
    if multiproc is None or not collector:
        return Finding("metrics", False,
                       f"{_short(METRICS_PROMETHEUS)} has no PROMETHEUS_MULTIPROC_DIR "
                       "multiprocess collector: the class's gauges would not reach /metrics")
    first = wanted[0] if wanted else ""
    at = found.get(first) or found.get(first.removesuffix("_total"), "")
    return Finding("metrics", True,
                   f"{len(wanted)} series named (e.g. {first} at {at}); "
                   f"{_short(METRICS_PROMETHEUS)}:{multiproc} PROMETHEUS_MULTIPROC_DIR")


def check_termination(sources: Mapping[str, str]) -> Finding:
    core = _parse(sources, ENGINE_CORE)
    engine = _class(core, "EngineCore")
    init = _method(engine, "__init__")
    call = _scheduler_call(core)
    if init is None or call is None or not (
            init.lineno <= call.lineno <= (init.end_lineno or init.lineno)):
        return Finding("termination", False,
                       f"{_short(ENGINE_CORE)}: the scheduler class is not constructed in "
                       "EngineCore.__init__")
    writers = sorted(f"{_short(p)}:{line}" for p, text in sources.items()
                     if p.endswith(".py") and TERMINATION_FILE in text  # parse only those
                     for s, line in _string_lines(text).items() if TERMINATION_FILE in s)
    if writers:
        return Finding("termination", False,
                       f"vLLM names {TERMINATION_FILE} at {', '.join(writers)}")
    return Finding("termination", True,
                   f"{_short(ENGINE_CORE)}:{call.lineno} constructed in EngineCore.__init__; "
                   f"no {TERMINATION_FILE} in {sum(p.endswith('.py') for p in sources)} files")


def check_active_seqs_flag(sources: Mapping[str, str]) -> Finding:
    """Whether ``vllm serve`` takes ``--max-num-active-seqs``: the engine arguments name
    the flag, ``SchedulerConfig`` has ``max_num_active_seqs`` and ``Scheduler.__init__``
    reads it. Not part of the verdict (the live cap does not use the flag)."""
    check = "active_seqs_flag"
    named = _string_lines(sources.get(ARG_UTILS, "")).get(ACTIVE_SEQS_FLAG)
    if named is None:
        return Finding(check, False, f"{_short(ARG_UTILS)} does not name {ACTIVE_SEQS_FLAG}")
    cfg = _class(_parse(sources, SCHEDULER_CONFIG), "SchedulerConfig")
    fields = {} if cfg is None else {
        n.target.id: n.lineno for n in cfg.body
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    if "max_num_active_seqs" not in fields:
        return Finding(check, False, f"{_short(ARG_UTILS)}:{named} names {ACTIVE_SEQS_FLAG} "
                       f"but {_short(SCHEDULER_CONFIG)} SchedulerConfig has no "
                       "max_num_active_seqs field")
    init = _method(_class(_parse(sources, SCHEDULER), "Scheduler"), "__init__")
    reads = [] if init is None else [
        n.lineno for n in ast.walk(init) if isinstance(n, ast.Attribute)
        and n.attr == "max_num_active_seqs" and isinstance(n.ctx, ast.Load)]
    if not reads:
        return Finding(check, False, f"{_short(SCHEDULER)} Scheduler.__init__ never reads "
                       "scheduler_config.max_num_active_seqs")
    return Finding(check, True,
                   f"{_short(ARG_UTILS)}:{named} {ACTIVE_SEQS_FLAG}; {_short(SCHEDULER_CONFIG)}:"
                   f"{fields['max_num_active_seqs']} SchedulerConfig.max_num_active_seqs; "
                   f"{_short(SCHEDULER)}:{reads[0]} Scheduler.__init__ reads it")


def check_release(version: str, sources: Mapping[str, str], metric_names: Iterable[str]
                  ) -> Report:
    """Every check on one release's sources (``vllm/...py`` path -> text)."""
    return Report(version, (
        check_base_class(sources), check_constructor(sources), check_active_cap(sources),
        check_scheduler_cls(sources), check_metrics(sources, metric_names),
        check_termination(sources)), check_active_seqs_flag(sources))


def matrix_markdown(reports: Iterable[Report], dist: str) -> str:
    """The matrix as Markdown: one row per release, each check pass/fail with its
    evidence."""
    rows = [f"| {dist} | verdict | " + " | ".join(CHECKS) + f" | {ACTIVE_SEQS_FLAG} |",
            "|---|---|" + "---|" * (len(CHECKS) + 1)]
    for r in reports:
        cells = []
        for check in CHECKS:
            f = r.finding(check)
            cells.append(("pass: " if f.ok else "**FAIL**: ") + f.evidence.replace("|", "\\|"))
        a = r.active_seqs
        cells.append("not checked" if a is None else ("yes: " if a.ok else "no: ")
                     + a.evidence.replace("|", "\\|"))
        rows.append(f"| {r.version} | {r.verdict} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def compat_table(reports: Iterable[Report], dist: str, date: str) -> dict[str, object]:
    """The table the operator consults (``llm_operator/knowledge/data/live_cap_compat.json``): per
    minor release, the verdict, the release it was measured on and whether ``vllm serve``
    takes ``--max-num-active-seqs`` (``activeSeqsFlag``: :func:`check_active_seqs_flag`)."""
    return {
        "measured": f"statically from the published {dist} wheels on {date}",
        "command": "python tools/check_live_cap_compat.py --write VERSION...",
        "releases": {".".join(r.version.split(".")[:2]): {
            "verdict": r.verdict, "checked": r.version,
            "activeSeqsFlag": r.active_seqs is not None and r.active_seqs.ok}
            for r in reports},
    }
