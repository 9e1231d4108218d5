"""Tuning results built with the tuner's own code (``llm_operator.inpod.tuner.search`` records,
``llm_operator.inpod.tuner.result.result_from_outcome`` and ``TuningResult.to_message``), so
the operator-side tests read exactly the termination message a tuning Job writes.

The measurements are shaped on what the real CPU engine showed (see docs/TESTING.md): a
KV-constrained server whose default max-num-seqs preempts heavily, and a lower cap that
delivers more goodput. They are test inputs, not benchmark claims.
"""

from __future__ import annotations

from llm_operator.inpod.tuner.result import TuningResult, result_from_outcome
from llm_operator.inpod.tuner.search import Config, Measurement, Outcome, Trial

SLO = {"ttftP95Ms": 15000.0, "itlP95Ms": 100.0}
WORKLOAD = {"inputTokens": 128, "outputTokens": 256, "concurrency": 48}


def _measurement(goodput: float, preemptions: float, ttft: float, itl: float) -> Measurement:
    return Measurement(concurrency=48, duration_s=30.0, goodput_tps=goodput,
                       output_tps=goodput * 1.05, request_rate=goodput / 256,
                       ttft_p95_ms=ttft, itl_p95_ms=itl, completed=96,
                       preemptions=preemptions)


def _trial(index: int, cfg: Config, phase: str, goodputs: tuple[float, ...],
           preemptions: float = 0.0, ttft: float = 4000.0, itl: float = 40.0,
           against: tuple[float, ...] = ()) -> Trial:
    """A trial; with ``against``, compared with the baseline (index 0) in pairs, the
    baseline's goodputs of each pair given."""
    return Trial(index=index, config=cfg, phase=phase, startup_s=35.0, wall_s=95.0,
                 runs=[_measurement(g, preemptions, ttft, itl) for g in goodputs],
                 against=0 if against else None,
                 pairs=list(zip(against, goodputs, strict=True)) if against else [],
                 measured=2 * len(against))


# What a LiveCapEvaluator says of a run on one server (llm_operator.inpod.tuner.runner).
LIVE_SWEEP = ("max-num-seqs swept live on one server per max-num-batched-tokens (runner "
              "capacity 32, admission cap moved per trial)")


def kv_constrained_result(fingerprint: str | None, *, best_max_num_seqs: int = 24,
                          best_batched_tokens: int | None = None,
                          defaults_best: bool = False, complete: bool = True) -> TuningResult:
    """A search over max-num-seqs where the defaults preempt and a lower cap wins
    (``defaults_best``: every candidate is worse than vLLM's defaults)."""
    base = _trial(0, Config(), "baseline", (820.0, 860.0, 840.0), preemptions=87.0,
                  ttft=9000.0)
    ref = (830.0, 850.0, 845.0, 825.0, 855.0)  # the defaults, interleaved with each candidate

    def runs(good: float, bad: float) -> tuple[float, ...]:
        g = good if not defaults_best else bad
        return (g, g + 20.0, g - 10.0, g + 5.0, g - 15.0)

    trials = [
        base,
        _trial(1, Config(max_num_seqs=16), "verify", runs(1150.0, 700.0), against=ref),
        _trial(2, Config(max_num_seqs=best_max_num_seqs,
                         max_num_batched_tokens=best_batched_tokens), "refine",
               runs(1310.0, 760.0), preemptions=3.0, against=ref),
    ]
    best = base if defaults_best else trials[2]
    outcome = Outcome(trials=trials, baseline=base, best=best, complete=complete,
                      stop_reason="converged" if complete else "budget: 3 of 3 trials",
                      predictions={16: 1140.0, 24: 1280.0, 32: 1100.0}, wall_s=291.0)
    return result_from_outcome(outcome, SLO, WORKLOAD, fingerprint=fingerprint,
                               server_starts=1, sweep=LIVE_SWEEP)


def slo_unmet_result(fingerprint: str | None) -> TuningResult:
    """A search where no request met the SLO with vLLM's defaults nor with the cap it
    compared with them (both arms without goodput in every pair): the defaults are kept."""
    base = _trial(0, Config(), "baseline", (0.0, 0.0, 0.0), ttft=40000.0, itl=180.0)
    cand = _trial(1, Config(max_num_seqs=16), "verify", (0.0, 0.0, 0.0), ttft=52000.0,
                  itl=120.0, against=(0.0, 0.0, 0.0))
    outcome = Outcome(trials=[base, cand], baseline=base, best=base, complete=True,
                      stop_reason="converged", wall_s=190.0)
    return result_from_outcome(outcome, SLO, WORKLOAD, fingerprint=fingerprint)


def slo_unmet_typical_result(fingerprint: str | None) -> TuningResult:
    """A search where vLLM's defaults met the SLO in one run of three (their median
    goodput 0) and the cap compared with them in none: the defaults are kept."""
    base = _trial(0, Config(), "baseline", (0.0, 0.0, 0.0), ttft=40000.0, itl=180.0)
    base.runs[1] = _measurement(700.0, 0.0, 9000.0, 95.0)
    cand = _trial(1, Config(max_num_seqs=16), "verify", (0.0, 0.0, 0.0), ttft=52000.0,
                  itl=120.0, against=(0.0, 700.0, 0.0))
    outcome = Outcome(trials=[base, cand], baseline=base, best=base, complete=True,
                      stop_reason="converged", wall_s=190.0)
    return result_from_outcome(outcome, SLO, WORKLOAD, fingerprint=fingerprint)


def slo_missed_result(fingerprint: str | None) -> TuningResult:
    """A search where vLLM's defaults met the SLO in two runs of three (ITL p95 90, 150
    and 98 ms against 100) and the cap compared with them did not win: the defaults are
    kept, though their runs miss the SLO on average."""
    base = Trial(index=0, config=Config(), phase="baseline", startup_s=35.0, wall_s=95.0,
                 runs=[_measurement(g, 0.0, 4000.0, itl)
                       for g, itl in ((800.0, 90.0), (0.0, 150.0), (760.0, 98.0))])
    cand = _trial(1, Config(max_num_seqs=16), "verify", (600.0, 0.0, 610.0),
                  against=(800.0, 0.0, 0.0))
    outcome = Outcome(trials=[base, cand], baseline=base, best=base, complete=True,
                      stop_reason="converged", wall_s=190.0)
    return result_from_outcome(outcome, SLO, WORKLOAD, fingerprint=fingerprint)


def failed_tuner_result(fingerprint: str | None) -> TuningResult:
    """What the tuner reports when even vLLM's defaults could not be measured."""
    base = Trial(index=0, config=Config(), phase="baseline",
                 error="server exited during startup: CUDA out of memory")
    outcome = Outcome(trials=[base], baseline=base, best=None, complete=False,
                      stop_reason="baseline failed: server exited during startup")
    return result_from_outcome(outcome, SLO, WORKLOAD, fingerprint=fingerprint)
