"""Load from vLLM's own benchmark (``vllm.benchmarks.serve``, what ``vllm bench serve``
runs), in-process, turned into a :class:`~.measure.Measurement`.

Runs under the vLLM image's Python. The benchmark's own report (it prints) goes to a
log file, not to stdout, so a pod log stays readable.

Goodput here is output tokens per second of the requests that met the SLO: TTFT at most
``slo.ttft_ms`` and the p95 of the request's own inter-token gaps at most ``slo.itl_ms``.
vLLM's ``--goodput`` is passed too (``ttft`` and ``tpot``, the closest per-request
objectives it has); its ``request_goodput`` (requests/s) is kept as a cross-check.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .measure import Measurement, RequestSample, gap_p95, summarize
from .server import EngineReportedNothing, MetricsSampler
from .space import SLO

log = logging.getLogger(__name__)

# Measurements so far in this process: each one's prompts come from its own seed.
_MEASUREMENTS = itertools.count()


@dataclass(frozen=True)
class BenchTarget:
    """Where and what to benchmark."""

    base_url: str
    model: str  # the served model name (what requests carry)
    tokenizer: str  # a tokenizer folder or id (the model folder for a local model)
    input_tokens: int
    output_tokens: int
    slo: SLO
    waves: float = 2.0  # prompts = waves x concurrency (at least min_prompts)
    min_prompts: int = 24
    seed: int = 0
    log_path: Path | None = None
    # Tokens at the start of every prompt of one run that are the same for all its
    # requests (part of input_tokens): vLLM's prefix cache serves them after the first.
    shared_prefix_tokens: int = 0


def bench_args(target: BenchTarget, concurrency: int) -> list[str]:
    """The ``vllm bench serve`` arguments of one measurement (pure)."""
    n = max(target.min_prompts, round(target.waves * concurrency))
    return [
        "--backend", "vllm",
        "--base-url", target.base_url,
        "--endpoint", "/v1/completions",
        "--model", target.model,
        "--tokenizer", target.tokenizer,
        "--dataset-name", "random",
        "--random-input-len", str(target.input_tokens - target.shared_prefix_tokens),
        # One random prefix per run, the same for all its requests (vLLM's RandomDataset);
        # each run's seed differs, so no run reuses another's prefix.
        *(["--random-prefix-len", str(target.shared_prefix_tokens)]
          if target.shared_prefix_tokens else []),
        "--random-output-len", str(target.output_tokens),
        "--random-range-ratio", "0",
        "--num-prompts", str(n),
        "--max-concurrency", str(concurrency),
        "--request-rate", "inf",
        "--ignore-eos",
        "--temperature", "0",
        "--seed", str(target.seed),
        "--disable-tqdm",
        "--save-detailed",
        "--num-warmups", "0",
        "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--metric-percentiles", "50,95,99",
        "--goodput", f"ttft:{target.slo.ttft_ms:g}", f"tpot:{target.slo.itl_ms:g}",
        # No initial test request: the tuner waited for /health itself, and that request
        # would run inside the engine's counter window but outside the benchmark's timed
        # duration (inflating the mean running batch) and warm the prefix cache for the
        # first prompt. vLLM 0.32's own default is 0; older benchmarks lack the option.
        "--ready-check-timeout-sec", "0",
    ]


def requests_from_result(result: dict[str, Any]) -> list[RequestSample]:
    """Per-request samples from the dict ``vllm.benchmarks.serve.main`` returns (needs
    ``--save-detailed``); each request's ITL p95 as :func:`~.measure.gap_p95`."""
    ttfts = result.get("ttfts") or []
    itls = result.get("itls") or []
    outs = result.get("output_lens") or []
    errors = result.get("errors") or [""] * len(ttfts)
    samples = []
    for ttft, gaps, n, err in zip(ttfts, itls, outs, errors, strict=False):
        ok = not err and n > 0
        samples.append(RequestSample(
            ttft_s=float(ttft or 0.0),
            itl_p95_s=gap_p95([float(g) for g in gaps]),
            output_tokens=int(n),
            ok=ok,
        ))
    return samples


# Options this tuner can do without when an older vLLM's benchmark lacks them.
_OPTIONAL = {"--ready-check-timeout-sec", "--num-warmups", "--random-range-ratio",
             "--temperature", "--goodput", "--percentile-metrics", "--metric-percentiles"}


def known_args(argv: list[str], accepted: set[str]) -> list[str]:
    """``argv`` without the optional options (and their values) the installed benchmark
    does not accept (pure)."""
    out: list[str] = []
    skipping = False
    for a in argv:
        if a.startswith("--"):
            skipping = a in _OPTIONAL and a not in accepted
            if skipping:
                log.info("The installed vLLM benchmark has no %s; measuring without it", a)
                continue
        elif skipping:
            continue
        out.append(a)
    return out


def run_vllm_bench(argv: list[str], log_path: Path | None = None) -> dict[str, Any]:
    """Run ``vllm.benchmarks.serve`` in this process; its printout goes to ``log_path``."""
    from vllm.benchmarks import serve

    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # vLLM before 0.11.1
        from vllm.utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    serve.add_cli_args(parser)
    args = parser.parse_args(known_args(argv, set(parser._option_string_actions)))
    sink: Any = io.StringIO()
    with contextlib.ExitStack() as stack:
        if log_path is not None:
            sink = stack.enter_context(open(log_path, "a", encoding="utf-8"))  # noqa: SIM115
        stack.enter_context(contextlib.redirect_stdout(sink))
        # Progress bars some vLLM versions draw while sampling prompts go to stderr.
        stack.enter_context(contextlib.redirect_stderr(sink))
        result: dict[str, Any] = serve.main(args)
    return result


def measure(target: BenchTarget, concurrency: int, sample_metrics: bool = True) -> Measurement:
    """One benchmark run at ``concurrency`` clients. Running and waiting requests,
    preemptions and the engine's ITL p95 are what the engine counted over the run's window
    (its /metrics read at the start and the end); a run the engine reports nothing for
    raises :class:`~.server.EngineReportedNothing` (the trial fails), never a zero.

    Its prompts are new to the server: the seed is ``target.seed`` plus the number of
    measurements this process made before. vLLM's prefix cache is on by default (and so in
    the configuration being tuned); prompts an earlier trial sent would be served from it,
    and every later trial on the same server (the live cap sweeps them all on one) would
    look faster than it is."""
    argv = bench_args(replace(target, seed=target.seed + next(_MEASUREMENTS)), concurrency)
    sampler = MetricsSampler(target.base_url) if sample_metrics else None
    with sampler if sampler is not None else contextlib.nullcontext():
        result = run_vllm_bench(argv, target.log_path)
    reqs = requests_from_result(result)
    all_gaps = [float(g) for gaps in (result.get("itls") or []) for g in (gaps or [])]
    m = summarize(
        concurrency, reqs, float(result.get("duration") or 0.0), target.slo,
        itls_s=all_gaps,
        server=(sampler.summary(float(result.get("duration") or 0.0) or None)
                if sampler is not None else None),
    )
    log.debug("vLLM request_goodput %.2f req/s", result.get("request_goodput") or 0.0)
    if m.completed and target.output_tokens > 1 and not all_gaps and (
            m.engine_itl_p95_ms is None):
        raise EngineReportedNothing(
            f"no inter-token gap was measured at {concurrency} clients (the benchmark "
            "returned none and the engine's histogram holds none): the run is not measured")
    return m
