"""The bad-input corpus (``tests/unit/data/bad_input.yaml``) and how each case is judged.

Each case is a mistake a user could make in an LLMService manifest (or in the file given
to the command line), run through every stage that could meet it:

- ``crd``: what the API server says on create: the CRD's schema and CEL rules, as
  :mod:`tests.support.crd` evaluates them (not a real API server);
- ``plan``: what the operator (and ``llm-operator plan/render``) does with the object:
  parse, plan, render, and then check that what it renders is valid: strictly against
  the Kubernetes schemas (``kubernetes-validate``), against the name, label and
  resource-name rules a real API server applies (:mod:`llm_operator_sandbox.k8s_rules`)
  and, for the engine's arguments, against vLLM's option table;
- ``cli``: ``llm-operator plan`` and ``render`` on the file, through their ``main()``
  with captured output.

A stage ends in one of: ``refused`` (with the message), ``accepted`` (everything it
produced is valid), ``invalid`` (it accepted the input but produced an object the API
server or vLLM would refuse) or ``traceback`` (an exception that is not a refusal). The
corpus's promise: every case is refused by the stage it names, with a message naming its
field, and no stage ends in ``invalid`` or ``traceback``.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import kubernetes_validate
import kubernetes_validate.utils
import yaml

from llm_operator.api.errors import SpecError, SpecErrors
from llm_operator.api.models import ints_beyond_int64, parse_llmservice
from llm_operator.health.status import live_cap_in_use
from llm_operator.knowledge.extra_args import Flag, flag_table, is_value, vllm_spelling
from llm_operator.planning import make_plan
from llm_operator.rendering import render_all
from llm_operator.rendering.placement import with_placement
from llm_operator.settings import Settings
from llm_operator_sandbox.k8s_rules import object_errors
from tests.support.crd import apply_defaults, crd_schema, load_crd, validate_resource

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "unit" / "data" / "bad_input.yaml"
K8S_VERSION = kubernetes_validate.utils.latest_version()
STAGES = ("crd", "plan", "cli")


@dataclass(frozen=True)
class Case:
    """One corpus row."""

    id: str
    kind: str  # the class of mistake: types, ranges, names, ...
    mistake: str  # in words, as the docs table shows it
    refused_by: str  # crd | plan | cli
    field: str  # what the refusal must name
    manifest: Any  # the document (None for a cli case given as text)
    text: str  # the file the command line reads
    example: str = ""  # what the corpus row gives, on one line, for the docs table


@dataclass
class Outcome:
    """What one stage did with one case."""

    stage: str
    result: str  # refused | accepted | invalid | traceback | skipped
    messages: list[str] = field(default_factory=list)
    how: str = ""  # for a refusal: what refused it (schema, CEL rule, planner, ...)

    def names(self, what: str) -> bool:
        return any(what in m for m in self.messages)


def _merge(base: Any, patch: Any) -> Any:
    """``patch`` deep-merged into ``base`` (a null value removes the key)."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for key, value in patch.items():
            if value is None:
                out.pop(key, None)
            else:
                out[key] = _merge(base.get(key), value)
        return out
    return copy.deepcopy(patch)


def _expand(value: Any) -> Any:
    """``__BIG__`` stands for a 60,000-character string (kept out of the corpus file)."""
    if value == "__BIG__":
        return "x" * 60000
    if isinstance(value, dict):
        return {k: _expand(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v) for v in value]
    return value


@cache
def _raw() -> dict[str, Any]:
    raw = yaml.safe_load(CORPUS.read_text())
    assert isinstance(raw, dict)
    return raw


def _case(row: Mapping[str, Any], base: Mapping[str, Any]) -> Case:
    if "text" in row:
        text, manifest = str(row["text"]), None
        if text == "__BINARY__":  # bytes that are not UTF-8
            text = "\udcff\udcfe\x00\x01apiVersion"
        elif text.startswith("__DEEP__"):  # lists nested 3,000 deep
            text = text.replace("__DEEP__", "").replace("NESTED", "[" * 3000 + "]" * 3000)
    else:
        manifest = row["manifest"] if "manifest" in row else _merge(base, row.get("patch") or {})
        manifest = _expand(manifest)
        text = yaml.safe_dump(manifest, sort_keys=False, allow_unicode=True)
    return Case(id=row["id"], kind=row["kind"], mistake=row["mistake"],
                refused_by=row.get("refusedBy", "crd"), field=row["field"],
                manifest=manifest, text=text, example=_example(row))


def _example(row: Mapping[str, Any]) -> str:
    if "text" in row:
        shown = {"__BINARY__": "(bytes that are not UTF-8)"}.get(row["text"], repr(row["text"]))
        shown = shown.replace("__DEEP__", "").replace("NESTED", "[[[...]]] (3,000 deep)")
    else:
        given = row["manifest"] if "manifest" in row else row.get("patch") or {}
        shown = json.dumps(given, ensure_ascii=False, separators=(", ", ": "))
    shown = shown.replace('"__BIG__"', '"x" * 60000')
    return shown if len(shown) <= 140 else shown[:137] + "..."


def load_cases() -> list[Case]:
    """The bad-input cases, in corpus order."""
    raw = _raw()
    return [_case(row, raw["base"]) for row in raw["cases"]]


def load_accepted() -> list[Case]:
    """The accepted edge cases: specs that must be served, and rendered validly."""
    raw = _raw()
    return [_case({**row, "kind": "accepted", "refusedBy": "none", "field": ""}, raw["base"])
            for row in raw["accepted"]]


@cache
def _crd() -> dict[str, Any]:
    return load_crd()


# --- stages ------------------------------------------------------------------------

def run_crd(case: Case) -> Outcome:
    """The CRD's schema and CEL rules on the manifest (as the API server would)."""
    if not isinstance(case.manifest, dict):
        return Outcome("crd", "skipped", ["not one object: kubectl refuses it first"])
    too_big = list(ints_beyond_int64(case.manifest.get("spec"), "spec"))
    if too_big:  # the API server cannot even decode the request
        return Outcome("crd", "refused", [f"{path}: {value} cannot be decoded as an int64"
                                          for path, value in too_big], "request decoding")
    found = validate_resource(_crd(), case.manifest)
    if found:
        how = "CRD CEL rule" if found[0].source.startswith("cel") else "CRD schema"
        return Outcome("crd", "refused", [f"{v.field}: {v.message}" for v in found], how)
    return Outcome("crd", "accepted")


def _engine_arg_errors(args: list[str], known_only: bool) -> list[str]:
    """Engine arguments vLLM's parser would refuse: an option it does not know (or only
    as an ambiguous prefix), a value where a flag should be, a flag short of the values
    its arity asks for, or a flag given twice (argparse keeps the last: one of them was
    silently lost). ``known_only`` False: an unknown option is not counted (another
    image's vLLM may know it)."""
    table = flag_table()
    errors: list[str] = []
    seen: set[str] = set()
    args = vllm_spelling(args)
    i = 1 if args and is_value(args[0]) else 0  # `vllm serve MODEL ...`
    while i < len(args):
        arg = args[i]
        i += 1
        if is_value(arg):
            errors.append(f"engine argument {arg!r} is a value no flag takes")
            continue
        key = arg.split("=", 1)[0]
        head = "--" + key[2:].split(".", 1)[0].replace("_", "-") if key.startswith("--") else key
        option, _ = table.resolve(head)
        if option is None:
            if known_only:
                errors.append(f"engine argument {arg!r} is not an option of vllm serve")
            while i < len(args) and is_value(args[i]):
                i += 1
            continue
        flag = table.options[option]
        if flag.dest in seen and "." not in key and flag.takes_value and not flag.appends:
            errors.append(f"engine argument {option} is given twice")
        seen.add(flag.dest)
        if "=" in arg:
            continue
        arity = Flag("", 1) if "." in key else flag
        given = 0
        while i < len(args) and is_value(args[i]) and arity.wants_more(given):
            given, i = given + 1, i + 1
        if arity.short_of(given):
            errors.append(f"engine argument {option} is short of values")
    return errors


def _vllm_args(doc: Mapping[str, Any]) -> Iterator[list[str]]:
    spec = doc.get("spec") or {}
    templates = [spec.get("template")]
    templates += list((spec.get("leaderWorkerTemplate") or {}).values())
    for t in templates:
        if not isinstance(t, Mapping):
            continue
        for c in (t.get("spec") or {}).get("containers") or []:
            if c.get("name") == "vllm" and c.get("args") and "--port" in c["args"]:
                yield [str(a) for a in c["args"]]


def validate_rendered(doc: Mapping[str, Any], known_only: bool = True) -> list[str]:
    """Why the API server (or vLLM) would refuse one rendered object; empty when valid."""
    from tests.unit.test_rendering import validate_manifest  # one validator for all

    problems = [f"{doc.get('kind')}: {e}" for e in object_errors(doc)]
    try:
        validate_manifest(dict(doc))
    except Exception as exc:  # kubernetes_validate and jsonschema errors
        problems.append(f"{doc.get('kind')}: {str(exc).splitlines()[0]}")
    for args in _vllm_args(doc):
        problems += _engine_arg_errors(args, known_only)
    return problems


def run_plan(case: Case, manifest: Any = None) -> Outcome:
    """Parse, plan and render as the operator does, then validate what it rendered."""
    body = case.manifest if manifest is None else manifest
    if not isinstance(body, dict):
        return Outcome("plan", "skipped", ["not one object"])
    settings = Settings()
    try:
        svc = parse_llmservice(body)
        plan = with_placement(make_plan(svc.spec, gpus_per_node=settings.gpus_per_node),
                              svc.spec, settings)
        docs = render_all(svc, plan, settings, live_cap=live_cap_in_use(svc.spec, None))
    except SpecErrors as exc:
        return Outcome("plan", "refused", [str(e) for e in exc.errors], "planner")
    except SpecError as exc:
        return Outcome("plan", "refused", [str(exc)], "planner")
    except Exception as exc:
        return Outcome("plan", "traceback", [f"{exc.__class__.__name__}: {exc}"])
    problems = [p for d in docs for p in validate_rendered(d, svc.spec.image is None)]
    return Outcome("plan", "invalid" if problems else "accepted", problems)


def run_cli(case: Case) -> Outcome:
    """``llm-operator render`` and ``plan`` on the case's file, through ``main()``
    (``plan`` only for the file-level cases and the accepted ones, to keep the unit tier
    fast: for the others it runs the same parse and planner as ``render``)."""
    from llm_operator.cli import main

    results: list[Outcome] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{case.id}.yaml"
        path.write_bytes(case.text.encode("utf-8", "surrogateescape"))
        for command in ("render", "plan") if case.refused_by in ("cli", "none") else ("render",):
            out, err = io.StringIO(), io.StringIO()
            env_before = os.environ.pop("LLMOP_TRACEBACK", None)
            try:
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                    args = [command, str(path)] + (["--no-curve"] if command == "plan" else [])
                    code = main(args)
            except BaseException as exc:  # what would reach the user as a traceback
                results.append(Outcome("cli", "traceback", [f"{command}: {exc!r}"]))
                continue
            finally:
                if env_before is not None:
                    os.environ["LLMOP_TRACEBACK"] = env_before
            text = " ".join(err.getvalue().replace(str(path), path.name).split())
            if code == 0:
                results.append(Outcome("cli", "accepted"))
            elif code == 2 and text.startswith("error ") and "Traceback" not in text:
                results.append(Outcome("cli", "refused", [f"{command}: {text}"]))
            else:  # exit 1 is the "bug in llm-operator" line
                results.append(Outcome("cli", "traceback", [f"{command} exit {code}: {text}"]))
    for result in ("traceback", "refused"):
        hits = [r for r in results if r.result == result]
        if hits:
            return Outcome("cli", result, [m for r in hits for m in r.messages], "exit 2")
    return Outcome("cli", "accepted")


@dataclass
class Judged:
    case: Case
    outcomes: dict[str, Outcome]

    @property
    def refused_by(self) -> str | None:
        """The first stage that refuses it: crd, else plan, else cli."""
        for stage in STAGES:
            if self.outcomes[stage].result == "refused":
                return stage
        return None

    def message(self) -> str:
        stage = self.case.refused_by
        msgs = self.outcomes[stage].messages
        named = [m for m in msgs if self.case.field in m]
        return (named or msgs or [""])[0]

    def problems(self) -> list[str]:
        """Why this case breaks the corpus's promise (empty: it keeps it)."""
        out: list[str] = []
        for stage, o in self.outcomes.items():
            if o.result in ("traceback", "invalid"):
                out.append(f"{stage}: {o.result}: {o.messages}")
        expected = self.outcomes[self.case.refused_by]
        if expected.result != "refused":
            out.append(f"{self.case.refused_by} did not refuse it ({expected.result})")
        elif not expected.names(self.case.field):
            out.append(f"{self.case.refused_by} refused it without naming "
                       f"{self.case.field}: {expected.messages}")
        return out


def judge(case: Case) -> Judged:
    """Every stage on one case. The plan stage runs on the object as the API server
    would store it (defaults applied) when the CRD admits it, as the operator sees it."""
    crd = run_crd(case)
    plan = run_plan(case)
    if crd.result == "accepted" and plan.result != "traceback":
        stored = run_plan(case, apply_defaults(crd_schema(_crd()), case.manifest))
        if stored.result in ("traceback", "invalid") or plan.result == "accepted":
            plan = stored if stored.result != "accepted" else plan
    return Judged(case, {"crd": crd, "plan": plan, "cli": run_cli(case)})
