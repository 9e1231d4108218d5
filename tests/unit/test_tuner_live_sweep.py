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


@pytest.mark.parametrize("change, why", [
    ({"image": "registry.example/vllm:custom"}, "a custom image may lack the hook"),
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
    assert "--live-cap-engine" not in _args(_job(body)), why


# --------------------------------------------------------------------------- the tuner
class _Engine(BaseHTTPRequestHandler):
    live: str | None = "1"  # llmop_admission_live as the engine module reports it
    cap_file: Path | None = None

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


@pytest.mark.parametrize("live", ["0", None])
def test_an_engine_without_the_hook_falls_back_to_one_start_per_value(
        engine: tuple[type[_Engine], list[Any]], tmp_path: Path, live: str | None) -> None:
    """A cap written to an engine that reports ``llmop_admission_live 0`` (or nothing)
    would not apply, so every trial would measure the same batch limit: the tuner stops
    that server and starts one per value, with the value as ``--max-num-seqs``."""
    handler, started = engine
    handler.live = live
    ev = _evaluator(tmp_path)
    first = ev.start(Config(max_num_seqs=4))
    assert isinstance(first, runner._ServerSession)
    live_server, server_4 = started
    assert live_server.stopped and runner.ENGINE_SCHEDULER_CLS in live_server.flags
    assert runner.ENGINE_SCHEDULER_CLS not in server_4.flags
    assert server_4.flags[-2:] == ["--max-num-seqs", "4"]
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
