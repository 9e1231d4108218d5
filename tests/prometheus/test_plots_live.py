"""The adaptation timeline plotted from a LIVE run: a real vLLM CPU engine with the live
admission cap under vLLM's benchmark, a real Prometheus scraping it and the operator's own
metrics, the adaptation policy deciding on what Prometheus observes and its moves written
to the engine's cap file; then ``llm-operator plot timeline`` reads it all back with range
queries and writes the PNG.

The decisions are the operator's code: :func:`fetch_observations` and :func:`decide` as
the adaptation loop calls them each tick, counted by :class:`OperatorMetrics.decision`
(the counter and gauge Prometheus scrapes from the operator); a move reaches the engine as
the kubelet delivers the ConfigMap (the cap file replaced). The loop's timer and that file
write are this test's. ``LLMOP_PLOTS_DIR=DIR`` keeps the PNG there (docs/using.md's
docs/images/adaptation-timeline.png is the demo's, ``bash tools/demo.sh``, which writes the
same plot from the operator's own run).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest

from llm_operator.adaptation import prometheus
from llm_operator.adaptation.policy import AdaptationState, CapLimits, decide, policy_for_scrape
from llm_operator.api.models import LLMServiceSpec, ModelSpec
from llm_operator.cli import main
from llm_operator.cli.plots import timeline_from_matrices
from llm_operator.controller.metrics import OperatorMetrics
from llm_operator.inpod.tuner.server import VLLMServer, free_port
from llm_operator.rendering.admission import ADMISSION_KEY
from tests.conftest import vllm_python
from tests.prometheus.conftest import MODEL_CACHE, NAMESPACE
from tests.support.engine import LIVE_FLAGS, copy_engine_code, live_env, write_cap
from tests.support.plots import assert_png_drawn
from tests.support.prometheus import Target, start_prometheus
from tests.support.tiny_model import ensure_tiny_llama
from tests.support.vllm_load import Load, LoadRun

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]

NAME = "timeline"
CAP = 2  # the live cap at the start; the server's --max-num-seqs is its capacity
CAPACITY = 16
FLAGS = ["--kv-cache-memory-bytes", str(64 * 1024 * 1024), "--max-num-seqs", str(CAPACITY),
         "--max-model-len", "1024", *LIVE_FLAGS]
# The queueing scenario's engine and load (tests/prometheus/test_queueing.py): 8 clients
# against a cap of 2 keep requests waiting; the load is stopped after LOAD_S.
LOAD = Load(concurrency=8, num_prompts=2000, input_len=128, output_len=256)
LOAD_S = 60.0
WINDOW_S = 10.0


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, float, int]]:
    """Load a real engine capped at 2 with 8 clients while the policy decides every 3 s;
    yields (Prometheus URL, start time, decisions taken)."""
    model = ensure_tiny_llama(MODEL_CACHE, vllm_python(), hidden=512, layers=8, heads=8,
                              kv_heads=4, intermediate=2048)
    base = tmp_path_factory.mktemp("timeline")
    code = copy_engine_code(base / "code")
    cap_file = base / ADMISSION_KEY
    write_cap(cap_file, str(CAP))  # the ConfigMap exists before the pod starts
    server = VLLMServer(model=str(model), python=str(vllm_python()), flags=FLAGS,
                        log_path=base / "vllm.log", start_timeout_s=300,
                        env=live_env(code, cap_file, base / "prom"))
    metrics = OperatorMetrics()
    op_port = free_port()
    server.start()
    try:
        assert metrics.serve(op_port, addr="127.0.0.1")
        prom = start_prometheus([
            Target(f"127.0.0.1:{server.port}", {"llmservice": NAME, "namespace": NAMESPACE}),
            Target(f"127.0.0.1:{op_port}", {"job": "llm-operator"}),
        ])
        try:
            prom.wait_for_series(f'llmop_admission_cap{{llmservice="{NAME}"}} == {CAP}', 90)
            start = time.time()
            client = prometheus.connect(prom.url)
            spec = LLMServiceSpec(model=ModelSpec(name=NAME))
            policy = policy_for_scrape(WINDOW_S, 1.0)
            state = AdaptationState(current=CAP)
            metrics.max_num_seqs.labels(NAMESPACE, NAME).set(CAP)
            run = LoadRun(vllm_python(), server.url, str(model), LOAD)
            taken = 0
            try:
                prom.wait_for_series(f'vllm:num_requests_running{{llmservice="{NAME}"}} > 0',
                                     120)
                t0 = time.monotonic()
                while run.running() and time.monotonic() - t0 < LOAD_S:
                    time.sleep(3)
                    now = time.time()
                    obs = prometheus.fetch_observations(client, [(NAMESPACE, NAME)], now,
                                                        WINDOW_S).get((NAMESPACE, NAME))
                    d = decide(obs, state, spec, now, namespace=NAMESPACE, name=NAME,
                               limits=CapLimits(plan_max_num_seqs=CAPACITY), settings=policy)
                    metrics.decision(NAMESPACE, NAME, d.action.value, "Apply",
                                     d.cause.value, d.value)
                    taken += 1
                    if d.value is not None and d.value != state.current:  # Apply: a move
                        write_cap(cap_file, str(d.value))
                        state = AdaptationState(current=d.value, last_change_at=now,
                                                history=state.history)
            finally:
                run.kill()
            time.sleep(3)  # one more scrape of the last decision
            yield prom.url, start, taken
        finally:
            prom.stop()
    finally:
        metrics.stop()
        server.stop()


def test_timeline_png_from_live_prometheus(live: tuple[str, float, int], tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    url, start, taken = live
    assert taken >= 10, "the load ended before the policy decided ten times"
    out = tmp_path / "timeline.png"
    since = f"{time.time() - start + 20:.0f}s"
    code = main(["plot", "timeline", "--service", f"{NAMESPACE}/{NAME}", "--prometheus", url,
                 "--since", since, "--scrape-interval", "1", "-o", str(out)])
    assert code == 0, capsys.readouterr().err
    assert f"wrote {out}" in capsys.readouterr().out
    assert_png_drawn(out, min_width=800, min_height=600)
    if os.environ.get("LLMOP_PLOTS_DIR"):
        shutil.copy(out, Path(os.environ["LLMOP_PLOTS_DIR"]) / "adaptation-timeline.png")

    # What the picture shows, read back the same way: the load and every decision.
    client = cast(prometheus.RangeQueryClient, prometheus.connect(url))
    matrices = prometheus.fetch_timeline(client, NAMESPACE, NAME, start - 10, time.time(),
                                         1.0, 5.0)
    tl = timeline_from_matrices(NAMESPACE, NAME, start - 10, time.time(), 1.0, matrices)
    assert tl.running is not None and max(tl.running.values) >= 1.5  # the cap is 2
    assert tl.waiting is not None and max(tl.waiting.values) >= 3  # 8 clients, cap 2
    assert tl.cap_decided is not None
    assert sum(d.count for d in tl.decisions) == taken
    # 8 clients against a cap of 2 and room in the KV cache: the policy raised the cap,
    # and the engine reported the raised cap in force.
    assert any(d.direction == "raise" for d in tl.decisions)
    assert tl.cap_in_force is not None and max(tl.cap_in_force.values) > CAP


def test_timeline_of_a_service_prometheus_does_not_have(live: tuple[str, float, int],
                                                        tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    url, _start, _taken = live
    code = main(["plot", "timeline", "--service", f"{NAMESPACE}/no-such-service",
                 "--prometheus", url, "--since", "5m", "-o", str(tmp_path / "x.png")])
    err = " ".join(capsys.readouterr().err.split())  # rich wraps at the terminal's width
    assert code == 2
    assert f"{NAMESPACE}/no-such-service" in err and "no vLLM series" in err
    assert "Traceback" not in err
    assert not (tmp_path / "x.png").exists()
