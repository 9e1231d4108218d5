"""The tuning Job sweeps max-num-seqs on one server through the live admission cap
(issue 12), and the tuner refuses to sweep an engine that cannot take a cap live.

The Job part is pure (the rendered manifest, and its init container's own command run
on this machine). The evaluator part runs :class:`LiveCapEvaluator` against a stand-in
for vLLM: a local HTTP server answering ``/metrics`` the way the engine module does
(``llmop_admission_live``, ``llmop_admission_cap`` from the cap file); the real engine
is exercised in tests/vllm/test_tuner_live_cap.py and tests/vllm/test_tuner.py."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from tests.unit.test_tuning_job import BODY, _job

from llm_operator.inpod.tuner import runner
from llm_operator.inpod.tuner.bench import BenchTarget
from llm_operator.inpod.tuner.main import build_parser
from llm_operator.inpod.tuner.search import SLO, Config
from llm_operator.inpod.tuner.server import ServerStartError
from llm_operator.knowledge.vllm_version import LiveCapSupport, live_cap_verdict
from llm_operator.tuning.job import CODE_PATH, COPY_SCRIPT

ROOT = Path(__file__).resolve().parents[2]


def _args(job: dict[str, Any]) -> list[str]:
    return list(job["spec"]["template"]["spec"]["containers"][0]["args"])


def _body(**engine: Any) -> dict[str, Any]:
    body = copy.deepcopy(BODY)
    body["spec"]["engine"] = {**body["spec"]["engine"], **engine}
    return body


def test_the_default_image_sweeps_caps_live_on_the_copied_engine(tmp_path: Path) -> None:
    job = _job()
    args = _args(job)
    assert args[args.index("--live-cap-engine") + 1] == CODE_PATH
    assert build_parser().parse_args(args).live_cap_engine == CODE_PATH
    # The init container copies the engine next to the tuner: run its command here.
    (init,) = [c for c in job["spec"]["template"]["spec"]["initContainers"]
               if c["name"] == "copy-tuner"]
    assert init["command"][2] == COPY_SCRIPT
    dst = tmp_path / "code"
    subprocess.run([sys.executable, "-c", COPY_SCRIPT.replace(CODE_PATH, str(dst))],
                   check=True, timeout=60, capture_output=True,
                   env={**os.environ, "PYTHONPATH": str(ROOT / "operator")})
    pkg = dst / "llm_operator"
    assert sorted(p.name for p in pkg.iterdir()) == ["__init__.py", "inpod", "knowledge"]
    assert sorted(p.name for p in (pkg / "knowledge").iterdir()) == [
        "__init__.py", "data", "engine_rules.py", "serve_args.py"]
    assert sorted(p.name for p in (pkg / "inpod").iterdir()) == ["__init__.py", "engine", "tuner"]
    assert (pkg / "inpod" / "engine" / "scheduler.py").exists()
    assert (pkg / "inpod" / "tuner" / "__main__.py").exists()
    # The copy alone runs the tuner's check of its candidates against vLLM's rules.
    probe = ("from llm_operator.inpod.tuner.search import Config, Space; "
             "s = Space(server_args=('--max-model-len', '4096', '--no-enable-chunked-prefill'));"
             " print(s.valid(Config(8, 2048)), s.valid(Config(8, 4096)))")
    out = subprocess.run([sys.executable, "-c", probe], check=True, timeout=60,
                         capture_output=True, text=True, cwd=dst,
                         env={**os.environ, "PYTHONPATH": str(dst)})
    assert out.stdout.split() == ["False", "True"], out.stderr
    assert not list(pkg.rglob("__pycache__"))


@pytest.mark.parametrize("image", [
    # The demo's image: built here, its tag a version and a hash (not a release number).
    "127.0.0.1:5000/llmop/vllm-cpu:0.32.0-0123456789ab",
    "registry.example/vllm:custom",
    "vllm/vllm-openai:v0.31.0",  # a release the live cap's table says works
])
def test_a_custom_image_sweeps_live_as_its_server_pods_run_the_cap(image: str) -> None:
    """The Job follows the server pods' rule (the image's tag, read against the live
    cap's table): an unknown version is tried live, the tuner falling back at run time."""
    assert live_cap_verdict(image, "spec.image").support is not LiveCapSupport.UNSUPPORTED
    body = copy.deepcopy(BODY)
    body["spec"]["image"] = image
    args = _args(_job(body))
    assert args[args.index("--live-cap-engine") + 1] == CODE_PATH


@pytest.mark.parametrize("change, why", [
    ({"image": "vllm/vllm-openai:v0.28.0"}, "its vLLM has no hook (the table says so)"),
    ({"engine": {"maxNumSeqs": 32}}, "max-num-seqs is pinned: nothing to sweep"),
    ({"engine": {"extraArgs": ["--scheduler-cls", "my.Scheduler"]}}, "the user's scheduler"),
    ({"engine": {"extraArgs": ["--max-num-active-seqs=8"]}}, "the user's active cap"),
])
def test_one_start_per_value_where_the_live_sweep_is_not_safe(
        change: dict[str, Any], why: str) -> None:
    body = copy.deepcopy(BODY)
    for key, value in change.items():
        body["spec"][key] = ({**body["spec"][key], **value} if isinstance(value, dict)
                             else value)
    if "image" in change:  # the premise: the table says this release cannot take it
        verdict = live_cap_verdict(change["image"], "spec.image")
        assert verdict.support is LiveCapSupport.UNSUPPORTED, verdict.message
    assert "--live-cap-engine" not in _args(_job(body)), why


# --------------------------------------------------------------------------- the tuner
class _Engine(BaseHTTPRequestHandler):
    live: str | None = "1"  # llmop_admission_live as the engine module reports it
    cap_file: Path | None = None
    # A start that fails: the log it writes, for servers with the scheduler class (live)
    # or for every server (all).
    fail_live: str | None = None
    fail_all: str | None = None

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        lines = []
        if self.live is not None:
            lines.append(f"llmop_admission_live {self.live}")
        if self.live == "1" and self.cap_file is not None and self.cap_file.exists():
            lines.append(f"llmop_admission_cap {float(self.cap_file.read_text())}")
        body = ("\n".join(lines) + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        return None


@pytest.fixture
def engine() -> Iterator[tuple[type[_Engine], list[Any]]]:
    """A stand-in vLLM: every "started" server answers on one local port."""
    handler = type("Engine", (_Engine,), {})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    started: list[Any] = []

    class FakeServer:
        def __init__(self, model: str, flags: list[str], python: str = "", log_path: Any = None,
                     start_timeout_s: float = 0.0, env: dict[str, str] | None = None) -> None:
            self.flags, self.env, self.log_path = flags, env or {}, log_path
            self.url = f"http://127.0.0.1:{httpd.server_address[1]}"
            self.startup_s = self.lock_wait_s = 0.0
            self.stopped = False

        def start(self) -> FakeServer:
            started.append(self)
            live = runner.ENGINE_SCHEDULER_CLS in self.flags
            fail = handler.fail_all or (handler.fail_live if live else None)
            if fail is not None:
                self.log_path.parent.mkdir(parents=True, exist_ok=True)
                self.log_path.write_text(fail)
                raise ServerStartError("vLLM exited with code 1 while starting", fail)
            cap_file = self.env.get(runner.ENGINE_CAP_FILE_ENV)
            handler.cap_file = Path(cap_file) if cap_file else None
            return self

        def stop(self) -> None:
            self.stopped = True

    mp = pytest.MonkeyPatch()
    mp.setattr(runner, "VLLMServer", FakeServer)
    try:
        yield handler, started
    finally:
        mp.undo()
        httpd.shutdown()


def _evaluator(tmp_path: Path) -> runner.LiveCapEvaluator:
    template = BenchTarget("", "m", "m", 32, 32, SLO(ttft_ms=1000, itl_ms=100))
    return runner.LiveCapEvaluator("m", template, 16, str(tmp_path / "code"), ["--enforce-eager"],
                                   log_dir=tmp_path / "logs", report_timeout_s=2.0)


def test_a_live_engine_takes_every_cap_on_one_server(
        engine: tuple[type[_Engine], list[Any]], tmp_path: Path) -> None:
    _, started = engine
    ev = _evaluator(tmp_path)
    assert ev.needs_start(Config(max_num_seqs=4))
    for cap in (4, 8, 2):
        session = ev.start(Config(max_num_seqs=cap))
        assert isinstance(session, runner._LiveSession)
        assert int(ev.cap_file.read_text()) == cap
        # What the search's time budget counts on: the next cap costs no model load.
        assert not ev.needs_start(Config(max_num_seqs=cap * 2))
    assert ev.needs_start(Config(max_num_seqs=4, max_num_batched_tokens=512))
    assert ev.starts == 1 and len(started) == 1
    assert runner.ENGINE_SCHEDULER_CLS in started[0].flags
    assert ev.fallback_reason is None and "swept live" in ev.notes[0]


def _first_trial_falls_back(ev: runner.LiveCapEvaluator, started: list[Any]) -> Any:
    """The first trial (cap 4) runs on a server of its own, without the scheduler class,
    after the live server (returned) that could not take it."""
    session = ev.start(Config(max_num_seqs=4))
    assert isinstance(session, runner._ServerSession)
    live_server, server_4 = started
    assert runner.ENGINE_SCHEDULER_CLS in live_server.flags
    assert runner.ENGINE_SCHEDULER_CLS not in server_4.flags
    assert server_4.flags[-2:] == ["--max-num-seqs", "4"]
    return live_server


@pytest.mark.parametrize("live", ["0", None])
def test_an_engine_without_the_hook_falls_back_to_one_start_per_value(
        engine: tuple[type[_Engine], list[Any]], tmp_path: Path, live: str | None) -> None:
    """A cap written to an engine that reports ``llmop_admission_live 0`` (or nothing)
    would not apply, so every trial would measure the same batch limit: the tuner stops
    that server and starts one per value, with the value as ``--max-num-seqs``."""
    handler, started = engine
    handler.live = live
    ev = _evaluator(tmp_path)
    live_server = _first_trial_falls_back(ev, started)
    assert live_server.stopped
    assert ev.needs_start(Config(max_num_seqs=8))  # one start per value now
    second = ev.start(Config(max_num_seqs=8))
    assert isinstance(second, runner._ServerSession)
    assert started[2].flags[-2:] == ["--max-num-seqs", "8"]
    assert ev.starts == 3  # the failed live start counts: it cost a model load
    # Log files are numbered on from the live server's.
    assert [s.log_path.name for s in started] == ["server-01.log", "server-02.log",
                                                   "server-03.log"]
    assert ev.fallback_reason is not None and "llmop_admission_live" in ev.fallback_reason
    (note,) = ev.notes
    assert "not swept live" in note and "one server start per value" in note


# A vLLM whose scheduler interface differs: the scheduler's own line, then vLLM's
# (abridged; the same failure on the real engine: tests/vllm/test_live_cap_failure.py).
INTERFACE_LOG = """(EngineCore pid=1) ERROR 12-07 10:00:01 [cap.py:49] llmop-live-cap: \
AdmissionCapScheduler cannot start on this vLLM (TypeError("__init__() got an unexpected \
keyword argument 'llmop_moved'")): start vLLM without --scheduler-cls
(EngineCore pid=1) ERROR 12-07 10:00:01 [core.py:700] EngineCore failed to start.
RuntimeError: Engine core initialization failed. See root cause above.
"""
# The scheduler's code not on PYTHONPATH: Python's own words, in vLLM's log.
NOT_IMPORTABLE_LOG = """(EngineCore pid=1) ERROR 12-07 10:00:01 [core.py:700] ModuleNotFoundError: \
No module named 'llm_operator'
RuntimeError: Engine core initialization failed. See root cause above.
"""


@pytest.mark.parametrize("log_text, said", [
    (INTERFACE_LOG, "llmop-live-cap: AdmissionCapScheduler cannot start on this vLLM"),
    (NOT_IMPORTABLE_LOG, "ModuleNotFoundError: No module named 'llm_operator'"),
])
def test_a_server_the_scheduler_stops_at_start_falls_back_to_one_start_per_value(
        engine: tuple[type[_Engine], list[Any]], tmp_path: Path, log_text: str,
        said: str) -> None:
    """A custom image whose vLLM the scheduler class does not fit (its tag says no
    version) stops at start: the tuner says so and measures each value on a server of
    its own, without the scheduler, rather than failing the trial."""
    handler, started = engine
    handler.fail_live = log_text
    ev = _evaluator(tmp_path)
    _first_trial_falls_back(ev, started)
    assert ev.starts == 2
    assert ev.fallback_reason is not None and said in ev.fallback_reason
    (note,) = ev.notes
    assert "not swept live" in note and said in note


def test_a_start_that_fails_for_another_reason_fails_the_trial_once(
        engine: tuple[type[_Engine], list[Any]], tmp_path: Path) -> None:
    """A failure the scheduler did not cause (here vLLM's own refusal of the memory)
    would fail without it too: the trial fails with vLLM's words, after one start."""
    handler, started = engine
    handler.fail_all = ("(EngineCore pid=1) ERROR [core.py:700] ValueError: To serve at "
                        "least one request with the models's max seq len (1024), (0.03 GiB "
                        "KV cache is needed, which is larger than the available KV cache "
                        "memory (0.01 GiB)\n")
    ev = _evaluator(tmp_path)
    with pytest.raises(runner.TrialFailed, match="server did not start: ValueError"):
        ev.start(Config(max_num_seqs=4))
    assert len(started) == 1 and ev.fallback_reason is None
