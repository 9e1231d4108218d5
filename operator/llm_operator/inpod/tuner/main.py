"""``python -m llm_operator.inpod.tuner``: the tuner's command line (what the tuning Job runs).

Runs under the vLLM image's Python with this package on ``PYTHONPATH``. Either starts
its own vLLM servers (``--model``) or measures one it is given (``--url``; no restarts,
so the best cap is predicted from the concurrency sweep, not verified).

Outputs: progress on stderr (log lines; a progress bar on a terminal), the trial table
on stdout, the full result as JSON in ``--output``, and the compact result JSON in the
termination-message file (``$LLMOP_TERMINATION_LOG``, or ``/dev/termination-log`` when
it exists) for the operator. Exit code 0 when a result was found (also partial), 1 when
the run failed, 2 on bad arguments.

Stopping early keeps what was measured: on SIGTERM (a preempted or deleted pod; the
kubelet waits ``terminationGracePeriodSeconds``) and when ``--deadline-seconds`` is
near (before the Job's ``activeDeadlineSeconds`` would kill the pod and its message with
it), the running trial is cut, its server stopped, and the best result so far is written
with ``state: Partial``, the number of trials and why it stopped.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from .measure import Interrupted
from .result import TuningResult, failed_result, result_from_outcome

log = logging.getLogger("llm_operator.inpod.tuner")

TERMINATION_ENV = "LLMOP_TERMINATION_LOG"
DEFAULT_TERMINATION_LOG = "/dev/termination-log"


def _levels(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    try:
        vals = tuple(sorted({int(x) for x in text.split(",") if x.strip()}))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}") from None
    if not vals or vals[0] < 1:
        raise argparse.ArgumentTypeError(f"levels must be positive integers, got {text!r}")
    return vals


def build_parser(add_help: bool = True) -> argparse.ArgumentParser:
    """The tuner's arguments (``llm-operator tune`` takes the same ones)."""
    p = argparse.ArgumentParser(
        prog="python -m llm_operator.inpod.tuner", add_help=add_help,
        description="Search vLLM batch settings for the most goodput within a latency SLO.",
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="model folder or hub id: start vLLM servers with it")
    src.add_argument("--url", help="base URL of a running vLLM server (no restarts)")
    p.add_argument("--served-model-name", help="model name the server serves (--url mode; "
                   "default: the first of /v1/models)")
    p.add_argument("--tokenizer", help="tokenizer folder or id (default: the model)")
    p.add_argument("--input-tokens", type=int, default=512)
    p.add_argument("--shared-prefix-tokens", type=int, default=0,
                   help="tokens at the start of every prompt shared by all requests of a "
                   "run (a system prompt; part of --input-tokens)")
    p.add_argument("--output-tokens", type=int, default=256)
    p.add_argument("--concurrency", type=int, default=32, help="clients of the workload")
    p.add_argument("--slo-ttft-ms", type=float, default=2000.0)
    p.add_argument("--slo-itl-ms", type=float, default=100.0)
    p.add_argument("--max-trials", type=int, default=12,
                   help="trials at most (each a server start unless --live-cap-engine "
                   "sweeps caps on one server)")
    p.add_argument("--max-seconds", type=float, default=3600.0, help="wall time budget")
    p.add_argument("--repeats", type=int, default=3,
                   help="pairs of measurements a comparison starts with (and the baseline's "
                   "runs)")
    p.add_argument("--waves", type=float, default=2.0,
                   help="prompts per measurement = waves x concurrency")
    p.add_argument("--min-prompts", type=int, default=24,
                   help="prompts per measurement at least (short runs are noisy)")
    p.add_argument("--noise-threshold", type=float, default=0.15,
                   help="(max - min) / median of the repeats above which a trial is noisy")
    p.add_argument("--sweep-points", type=int, default=5,
                   help="client concurrencies below the workload's to probe on the baseline")
    p.add_argument("--min-gain", type=float, default=0.05,
                   help="a configuration replaces the incumbent only when the lower end of "
                   "its paired interval is above 1 + this (default 0.05: 5%%)")
    p.add_argument("--confidence", type=float, default=0.90,
                   help="confidence of that interval (exact Wilcoxon signed-rank on the "
                   "paired goodput ratios; default 0.90)")
    p.add_argument("--max-pairs", type=int, default=12,
                   help="pairs of measurements at most for one comparison, spent only while "
                   "its interval straddles 1 + min-gain (default 12)")
    p.add_argument("--server-args", default="",
                   help="fixed vLLM flags for every server (pins, parallelism, KV size), "
                   "one shell-quoted string; a searched flag given here is pinned")
    p.add_argument("--max-num-seqs-levels", help="comma-separated levels to search "
                   "(default: a ladder up to the concurrency)")
    p.add_argument("--max-num-batched-tokens-levels", help="comma-separated levels "
                   "(default: vLLM's default / 4 ... x 4)")
    p.add_argument("--search-chunked-prefill", action="store_true",
                   help="also try chunked prefill off (short prompts only; vLLM 0.32 does not "
                        "officially support it for generate models, so the Job never asks)")
    p.add_argument("--hint-max-num-seqs", type=int, help="the planner's predicted cap")
    p.add_argument("--default-max-num-seqs", type=int,
                   help="vLLM's default max-num-seqs here (default: ask the installed vLLM)")
    p.add_argument("--default-max-num-batched-tokens", type=int)
    p.add_argument("--grid", action="store_true",
                   help="run the exhaustive grid over the same space instead (comparison)")
    p.add_argument("--fingerprint", help="tuning fingerprint, echoed into the result")
    p.add_argument("--output", type=Path, help="write the full result JSON here")
    p.add_argument("--log-dir", type=Path, default=Path("/tmp/llmop-tuning"),
                   help="server and benchmark logs")
    p.add_argument("--vllm-python", default=None,
                   help="Python that has vLLM, to run the servers (default: this one)")
    p.add_argument("--start-timeout", type=float, default=900.0,
                   help="seconds one vLLM server may take to load and become healthy "
                   "(the operator passes the plan's startup budget for the model's size)")
    p.add_argument("--deadline-seconds", type=float, default=None,
                   help="hard wall time from start: the run stops this long after it "
                   "started, even mid-trial, and reports the best result so far as partial")
    p.add_argument("--live-cap-engine", default=None, metavar="DIR",
                   help="a folder holding llm_operator/inpod/engine (the server pod's "
                        "admission controller): sweep max-num-seqs on one running server "
                        "through its live cap instead of one server start per value (--model "
                        "mode); an engine reporting llmop_admission_live other than 1 falls "
                        "back to one start per value")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--progress", choices=("auto", "bar", "log"), default="auto")
    p.add_argument("-v", "--verbose", action="store_true")
    return p


def termination_log_path() -> Path | None:
    """Where the compact result goes: ``$LLMOP_TERMINATION_LOG``, else
    ``/dev/termination-log`` when it exists (inside a pod), else nowhere."""
    env = os.environ.get(TERMINATION_ENV)
    if env:
        return Path(env)
    default = Path(DEFAULT_TERMINATION_LOG)
    return default if default.exists() else None


def write_termination(result: TuningResult) -> None:
    """Write the compact JSON for the operator (if there is a place for it)."""
    path = termination_log_path()
    if path is None:
        return
    try:
        path.write_text(result.to_message())
    except OSError as exc:
        log.warning("Could not write the termination message to %s: %s", path, exc)


DEADLINE_MARGIN_SECONDS = 5.0  # stop this much before --deadline-seconds


def install_stop_handlers(deadline_s: float | None) -> None:
    """Turn SIGTERM, and the deadline (SIGALRM), into :class:`~.measure.Interrupted` in
    the main thread, once: a second signal while the run winds down is ignored, so that
    stopping the server and writing the result are not cut short."""
    fired = False

    def stop(signum: int, _frame: object) -> None:
        nonlocal fired
        if fired:
            return
        fired = True
        signal.setitimer(signal.ITIMER_REAL, 0)
        what = ("terminated (SIGTERM)" if signum == signal.SIGTERM
                else f"deadline of {deadline_s:g} s near")
        log.warning("Stopping: %s; reporting the best result so far", what)
        raise Interrupted(what)

    signal.signal(signal.SIGTERM, stop)
    # The vLLM servers it starts are stopped with SIGINT: a SIGINT the tuner inherited as
    # ignored (started in the background by a non-interactive shell, `nohup ... &`) would
    # pass to them, and each stop would wait its whole timeout (30 s) before SIGKILL.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if deadline_s is not None:
        signal.signal(signal.SIGALRM, stop)
        after = max(0.1, deadline_s - DEADLINE_MARGIN_SECONDS)
        signal.setitimer(signal.ITIMER_REAL, after)
        log.info("Deadline armed: stopping by itself in %.1f s (--deadline-seconds %g less "
                 "%g s to report)", after, deadline_s, DEADLINE_MARGIN_SECONDS)


def disarm_stop_handlers() -> None:
    """Once the search has returned: the result is being written, nothing to cut."""
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _check(args: argparse.Namespace) -> str | None:
    for name in ("input_tokens", "output_tokens", "concurrency", "max_trials", "repeats",
                 "min_prompts", "sweep_points"):
        if getattr(args, name) < 1:
            return f"--{name.replace('_', '-')} must be at least 1"
    if not 0 <= args.shared_prefix_tokens < args.input_tokens:
        return "--shared-prefix-tokens must be at least 0 and below --input-tokens"
    if args.deadline_seconds is not None and args.deadline_seconds <= 0:
        return "--deadline-seconds must be positive"
    if not 0.5 <= args.confidence < 1:
        return "--confidence must be at least 0.5 and below 1 (e.g. 0.90)"
    if args.min_gain < 0:
        return "--min-gain must be 0 or more (e.g. 0.05 for 5%)"
    if args.max_pairs < args.repeats:
        return "--max-pairs must be at least --repeats"
    for name in ("slo_ttft_ms", "slo_itl_ms", "max_seconds", "waves", "start_timeout"):
        if getattr(args, name) <= 0:
            return f"--{name.replace('_', '-')} must be positive"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the tuner; see the module docstring for outputs and exit codes."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO, stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(message)s",
    )
    # vLLM's own loggers are chatty at INFO; the tuner's lines are what a reader wants.
    logging.getLogger("vllm").setLevel(logging.WARNING)
    problem = _check(args)
    try:
        mns_levels = _levels(args.max_num_seqs_levels)
        mnbt_levels = _levels(args.max_num_batched_tokens_levels)
    except argparse.ArgumentTypeError as exc:
        problem = str(exc)
    if problem:
        write_termination(failed_result(f"bad arguments: {problem}", args.fingerprint))
        parser.error(problem)
    install_stop_handlers(args.deadline_seconds)
    try:
        return _run(args, mns_levels, mnbt_levels)
    except Interrupted as exc:  # before the search began: nothing measured
        write_termination(failed_result(f"stopped before any trial: {exc}",
                                        args.fingerprint))
        return 1
    except Exception as exc:
        log.exception("Tuning failed")
        write_termination(failed_result(f"{type(exc).__name__}: {exc}"[:1000],
                                        args.fingerprint))
        return 1


def _run(args: argparse.Namespace, mns_levels: tuple[int, ...] | None,
         mnbt_levels: tuple[int, ...] | None) -> int:
    from .bench import BenchTarget
    from .report import LogProgress, print_result
    from .runner import (
        LiveCapEvaluator,
        ServerEvaluator,
        UrlEvaluator,
        accepted_flags,
        pinned_flags,
        served_model,
        split_args,
        sweep_of,
        vllm_batch_defaults,
    )
    from .search import grid_search, search
    from .space import (
        DEFAULT_MNBT_LADDER,
        SLO,
        Budget,
        Config,
        Options,
        Space,
        Workload,
        chunked_prefill_searchable,
        ladder,
    )

    args.vllm_python = args.vllm_python or sys.executable
    wl = Workload(args.input_tokens, args.output_tokens, args.concurrency)
    slo = SLO(args.slo_ttft_ms, args.slo_itl_ms)
    server_args = split_args(args.server_args)
    pins = pinned_flags(server_args)
    # A given server (--url) is never restarted: no flags to check.
    accepted = accepted_flags(args.vllm_python) if args.url is None else None
    notes: list[str] = []
    if accepted is not None:
        unknown = [a.split("=", 1)[0] for a in server_args
                   if a.startswith("--") and a.split("=", 1)[0] not in accepted]
        if unknown:
            raise ValueError(f"the installed vLLM rejects these server flags: {unknown}")
    tp = _int_flag(server_args, "--tensor-parallel-size", 1)
    pp = _int_flag(server_args, "--pipeline-parallel-size", 1)
    d_mns, d_mnbt = vllm_batch_defaults(tp * pp)
    d_mns = args.default_max_num_seqs or d_mns
    d_mnbt = args.default_max_num_batched_tokens or d_mnbt

    search_mns = "--max-num-seqs" not in pins and (accepted is None
                                                   or "--max-num-seqs" in accepted)
    search_mnbt = args.url is None and "--max-num-batched-tokens" not in pins and (
        accepted is None or "--max-num-batched-tokens" in accepted)
    mns_space: tuple[int, ...] = ()
    if search_mns:
        top = wl.concurrency if d_mns is None else min(wl.concurrency, d_mns)
        mns_space = mns_levels or ladder(1, max(1, top))
    mnbt_space: tuple[int, ...] = ()
    if search_mnbt:
        if mnbt_levels:
            mnbt_space = mnbt_levels
        elif d_mnbt:
            mnbt_space = tuple(v for v in (d_mnbt // 4, d_mnbt // 2, d_mnbt, d_mnbt * 2,
                                           d_mnbt * 4) if v >= 64)
        else:
            mnbt_space = DEFAULT_MNBT_LADDER[1:6]
    if "--max-num-seqs" in pins:
        notes.append("max-num-seqs is pinned by the user: not searched")
    if "--max-num-batched-tokens" in pins:
        notes.append("max-num-batched-tokens is pinned by the user: not searched")
    cp_pinned = bool(pins & {"--enable-chunked-prefill", "--no-enable-chunked-prefill"})
    search_cp, cp_why = chunked_prefill_searchable(
        args.search_chunked_prefill and args.url is None, cp_pinned, wl.input_tokens, d_mnbt)
    if args.search_chunked_prefill or cp_pinned:
        notes.append(cp_why)
    space = Space(max_num_seqs=mns_space, max_num_batched_tokens=mnbt_space,
                  default_max_num_seqs=d_mns, default_max_num_batched_tokens=d_mnbt,
                  server_args=tuple(server_args),
                  chunked_prefill=(True, False) if search_cp else (),
                  # A pinned budget is never raised: off is then tried only where the
                  # rules take it with the pin.
                  max_model_len=None if "--max-num-batched-tokens" in pins
                  else _int_flag(server_args, "--max-model-len", 0) or None)
    cells = [Config(a, b) for a in mns_space or (None,) for b in mnbt_space or (None,)]
    cells += [space.without_chunking(c) for c in cells] if search_cp else []
    refused = [(c, space.refusals(c)) for c in cells if c != Config() and not space.valid(c)]
    if refused:
        notes.append(f"{len(refused)} of {len(cells)} configurations not tried, vLLM would "
                     f"refuse to start them: e.g. {refused[0][0].label()}: {refused[0][1][0]}")
    log.info("Workload: %d in / %d out tokens at %d clients; SLO: TTFT <= %g ms, ITL p95 <= "
             "%g ms; budget %d trials / %.0f s", wl.input_tokens, wl.output_tokens,
             wl.concurrency, slo.ttft_ms, slo.itl_ms, args.max_trials, args.max_seconds)
    log.info("Search space: max-num-seqs %s (vLLM default %s), max-num-batched-tokens %s "
             "(vLLM default %s), chunked prefill %s; fixed server args: %s",
             list(mns_space) or "pinned/not searched", d_mns,
             list(mnbt_space) or "pinned/not searched", d_mnbt,
             "on/off" if search_cp else "not searched", " ".join(server_args) or "none")

    args.log_dir.mkdir(parents=True, exist_ok=True)
    if args.url:
        base_url = args.url.rstrip("/")
        model = args.served_model_name or served_model(base_url)
        target = BenchTarget(base_url, model, args.tokenizer or model, wl.input_tokens,
                             wl.output_tokens, slo, waves=args.waves,
                             min_prompts=args.min_prompts, seed=args.seed,
                             log_path=args.log_dir / "bench.log",
                             shared_prefix_tokens=args.shared_prefix_tokens)
        evaluator: UrlEvaluator | ServerEvaluator | LiveCapEvaluator = UrlEvaluator(target)
    else:
        model = args.model
        template = BenchTarget("", args.served_model_name or model, args.tokenizer or model,
                               wl.input_tokens, wl.output_tokens, slo, waves=args.waves,
                               min_prompts=args.min_prompts, seed=args.seed,
                               shared_prefix_tokens=args.shared_prefix_tokens)
        if args.served_model_name:
            server_args += ["--served-model-name", args.served_model_name]
        if args.live_cap_engine and search_mns:
            # One server per max-num-batched-tokens; caps move live (issue 12).
            capacity = max([*mns_space, d_mns or 0, 1])
            evaluator = LiveCapEvaluator(model, template, capacity, args.live_cap_engine,
                                         server_args, default_max_num_seqs=d_mns,
                                         default_max_num_batched_tokens=d_mnbt,
                                         python=args.vllm_python, log_dir=args.log_dir,
                                         start_timeout_s=args.start_timeout)
        else:
            evaluator = ServerEvaluator(model, template, server_args, python=args.vllm_python,
                                        log_dir=args.log_dir, start_timeout_s=args.start_timeout)

    opts = Options(repeats=args.repeats, noise_threshold=args.noise_threshold,
                   sweep_points=args.sweep_points, confidence=args.confidence,
                   max_pairs=args.max_pairs, min_gain=args.min_gain,
                   hint_max_num_seqs=args.hint_max_num_seqs,
                   can_restart=args.url is None)
    budget = Budget(max_trials=args.max_trials, max_seconds=args.max_seconds)
    use_rich = {"auto": None, "bar": True, "log": False}[args.progress]
    progress = LogProgress(args.max_trials if not args.grid else len(space.grid()) + 1,
                           use_rich=use_rich)
    try:
        if args.grid:
            outcome = grid_search(evaluator, space, wl, slo, budget, opts, progress=progress)
        else:
            outcome = search(evaluator, space, wl, slo, budget, opts, progress=progress)
    finally:
        disarm_stop_handlers()
        progress.close()
        if isinstance(evaluator, LiveCapEvaluator):
            evaluator.close()
            notes += evaluator.notes  # swept live, or why not
    outcome.notes[:0] = notes
    result = result_from_outcome(
        outcome,
        server_starts=None if isinstance(evaluator, UrlEvaluator) else evaluator.starts,
        sweep=sweep_of(evaluator, search_mns),
        slo={"ttftMs": slo.ttft_ms, "itlP95Ms": slo.itl_ms},
        workload={"inputTokens": wl.input_tokens, "outputTokens": wl.output_tokens,
                  "concurrency": wl.concurrency,
                  **({"sharedPrefixTokens": args.shared_prefix_tokens}
                     if args.shared_prefix_tokens else {})},
        fingerprint=args.fingerprint,
    )
    print_result(outcome)
    if args.output:
        full = {
            "result": result.model_dump(by_alias=True),
            "space": asdict(space),
            "notes": outcome.notes,
            "predictions": outcome.predictions,
            "trials": [
                {"index": t.index, "phase": t.phase, "config": asdict(t.config),
                 "score": t.score, "median": t.median, "spread": t.spread,
                 "noisy": t.noisy, "startup_s": t.startup_s, "wall_s": t.wall_s,
                 "error": t.error, "against": t.against, "pairs": t.pairs,
                 "versus": (t.comparison.to_dict() if t.comparison is not None
                            and t.pairs else None),
                 "runs": [_m(m) for m in t.runs], "probes": [_m(m) for m in t.probes]}
                for t in outcome.trials
            ],
        }
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(full, indent=1))
    write_termination(result)
    # The compact result is also the log's last line, so FallbackToLogsOnError finds it.
    sys.stdout.write(result.to_message() + "\n")
    sys.stdout.flush()
    return 0 if result.state != "Failed" else 1


def _m(m: object) -> dict[str, object]:
    d = asdict(m)  # type: ignore[call-overload]
    d.pop("requests", None)
    return d


def _int_flag(args: Sequence[str], name: str, default: int) -> int:
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return int(args[i + 1])
        if a.startswith(name + "="):
            return int(a.split("=", 1)[1])
    return default
