"""``llm-operator plot``: the tuning-trials PNG from stored runs, the timeline's pieces, and
clear errors for input that cannot be drawn (the live timeline is
tests/prometheus/test_plots_live.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from benchmarks.tune_plot import main as tune_plot_main
from benchmarks.tune_plot import trials_from_paired
from prometheus_client import generate_latest
from tests.support.plots import assert_png_drawn
from tests.support.tuning_results import failed_tuner_result, kv_constrained_result

from llm_operator.adaptation import prometheus
from llm_operator.cli import main
from llm_operator.cli.plots import (
    PlotInputError,
    decisions_from_counters,
    timeline_from_matrices,
    trials_from_document,
)
from llm_operator.controller.metrics import OperatorMetrics
from llm_operator.tuning.control import score_summary, trial_table

ROOT = Path(__file__).resolve().parents[2]
STORED = ROOT / "benchmarks" / "data" / "tune_wide_1.json"


def test_tuning_png_from_the_stored_paired_run(tmp_path: Path) -> None:
    """benchmarks/data/tune_wide_1.json (real vLLM CPU, 17 configurations, 3 rounds)."""
    doc = json.loads(STORED.read_text())
    trials = trials_from_paired(doc, str(STORED))
    assert len(trials.points) == 17  # vLLM's defaults and the 4 x 4 grid
    assert trials.chosen == (4, 2048, None)
    assert trials.slo_itl_ms == 60 and trials.default_max_num_seqs == 128
    out = tmp_path / "tuning.png"
    assert tune_plot_main([str(STORED), str(out)]) == 0
    assert_png_drawn(out, min_width=1000, min_height=800)


def test_tuning_png_from_the_compact_result_the_job_writes(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]
                                                           ) -> None:
    result = kv_constrained_result("fp-1")
    path = tmp_path / "termination-message"
    # As the tuner's log ends: lines, then the compact result as the last line.
    path.write_text("INFO trial 3 done\n" + result.to_message() + "\n")
    out = tmp_path / "t.png"
    assert main(["plot", "tuning", str(path), "-o", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    assert_png_drawn(out, min_width=1000, min_height=800)
    trials = trials_from_document(json.loads(result.to_message()), "x")
    assert [p.max_num_seqs for p in trials.points] == [None, 16, 24]
    assert trials.chosen == (24, None, None)
    assert trials.slo_ttft_ms == 15000.0 and trials.slo_itl_ms == 100.0
    # Throughput is kept for the configurations the result summarises (best, baseline).
    assert trials.points[2].throughput == result.best.throughput  # type: ignore[union-attr]


def test_tuning_png_from_an_llmservice_status(tmp_path: Path) -> None:
    """The form `kubectl get llms NAME -o json` gives (status.tuning as the operator
    writes it: trial_table and score_summary)."""
    result = kv_constrained_result("fp-1")
    svc = {"apiVersion": "llmops.dev/v1alpha1", "kind": "LLMService",
           "metadata": {"name": "llama", "namespace": "default"},
           "status": {"tuning": {"state": "Succeeded", "table": trial_table(result.table),
                                 "best": score_summary(result.best),
                                 "baseline": score_summary(result.baseline),
                                 "slo": result.slo, "workload": result.workload}}}
    path = tmp_path / "llama.yaml"
    path.write_text(json.dumps(svc))
    out = tmp_path / "s.png"
    assert main(["plot", "tuning", str(path), "-o", str(out)]) == 0
    assert_png_drawn(out, min_width=1000, min_height=800)


@pytest.mark.parametrize(("doc", "says"), [
    (json.loads(failed_tuner_result("fp").model_copy(update={"table": []}).to_message()),
     "has no trials (state Failed: baseline failed"),
    ({"kind": "LLMService", "metadata": {"name": "llama"}, "status": {}},
     "LLMService llama has no status.tuning"),
    ({"hello": "world"}, "not a tuning result"),
])
def test_bad_tuning_input_names_what_is_missing(doc: object, says: str, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "in.json"
    path.write_text(json.dumps(doc))
    assert main(["plot", "tuning", str(path), "-o", str(tmp_path / "x.png")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert says in err and "fix:" in err
    assert "Traceback" not in err
    assert not (tmp_path / "x.png").exists()


def test_a_run_whose_every_trial_failed(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "failed.json"
    path.write_text(failed_tuner_result("fp").to_message())
    assert main(["plot", "tuning", str(path), "-o", str(tmp_path / "x.png")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "no trial of the run was measured" in err and "CUDA out of memory" in err


def test_missing_file_and_both_sources(tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plot", "tuning", str(tmp_path / "nope.json")]) == 2
    assert "cannot read it" in " ".join(capsys.readouterr().err.split())  # rich wraps
    assert main(["plot", "tuning", "a.json", "--service", "default/x"]) == 2
    assert "one of them" in capsys.readouterr().err
    assert main(["plot", "tuning", "--service", "llama"]) == 2
    assert "NAMESPACE/NAME" in capsys.readouterr().err


def test_without_matplotlib_the_verb_names_the_extra(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    path = tmp_path / "r.json"
    path.write_text(kv_constrained_result("fp").to_message())
    assert main(["plot", "tuning", str(path), "-o", str(tmp_path / "x.png")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "pip install 'llm-operator[plots]'" in err
    assert not (tmp_path / "x.png").exists()


# ----------------------------------------------------------------------------- timeline
def test_a_service_prometheus_has_no_series_for_is_named() -> None:
    empty: dict[str, list[dict[str, object]]] = {k: [] for k in prometheus.timeline_queries(
        "default", "llama", 30)}
    with pytest.raises(PlotInputError) as exc:
        timeline_from_matrices("default", "llama", 0, 600, 5, empty, source="http://prom:9090")
    text = str(exc.value)
    assert text.startswith("default/llama: Prometheus at http://prom:9090 has no vLLM series")
    assert "vllm:num_requests_running" in text and "PodMonitor" in text


def test_decisions_from_the_raw_counters() -> None:
    """A counter's first value counts when it appears inside the range (the first decision
    of a direction creates its series); a drop is a restart."""
    lower = {"metric": {"direction": "lower"},
             "values": [[130, "1"], [135, "1"], [140, "2"], [145, "2"]]}
    hold = {"metric": {"direction": "hold"},
            "values": [[100, "7"], [105, "9"], [110, "1"], [115, "1"]]}
    got = decisions_from_counters([lower, hold], start=100, step=5)
    assert [(d.time, d.direction, d.count) for d in got] == [
        (105, "hold", 2), (110, "hold", 1), (130, "lower", 1), (140, "lower", 1)]


def test_timeline_queries_are_the_adaptation_loops() -> None:
    """The timeline reads the signals with the loop's own PromQL, and the operator's series
    by the names the operator exports (a rename in either breaks this test)."""
    signals = prometheus.signal_queries(30)
    queries = prometheus.timeline_queries("default", "llama", 30)
    for key in prometheus.TIMELINE_SIGNALS:
        assert queries[key] == signals[key]
    m = OperatorMetrics()
    m.decision("default", "llama", "lower", "Apply", "queue", 8)
    text = generate_latest(m.registry).decode()
    assert f"{prometheus.OPERATOR_DECISIONS_SERIES}{{" in text
    assert f'{prometheus.OPERATOR_CAP_SERIES}{{llmservice="llama",namespace="default"}} 8.0' \
        in text
    assert 'namespace="default",llmservice="llama"' in queries["decisions"]


def test_the_png_check_fails_on_an_empty_figure(tmp_path: Path) -> None:
    """The check the tests above rely on notices a plot with nothing drawn."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 9))
    fig.subplots(3, 1)
    fig.savefig(tmp_path / "blank.png")
    with pytest.raises(AssertionError, match="blank plot|no series"):
        assert_png_drawn(tmp_path / "blank.png", min_width=1000, min_height=800)
