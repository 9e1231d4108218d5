"""Issue 60 item 3 on the real vLLM CPU engine (one server start):

- the server args the operator renders for a vLLM that takes ``--max-num-active-seqs``
  (not live, the cap below the runner's capacity) start the engine, and the engine admits
  no more than the active cap into RUNNING while ``--max-num-seqs`` stays the capacity;
- the runtime-config adapter (llm_operator.adaptation.runtime_config) says a released
  vLLM has no ``PATCH /v1/runtime_config`` (RFC #54816 is unmerged): its /openapi.json
  does not list the path, so the operator's behaviour does not change.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from pathlib import Path

import pytest
from tests.support import admission
from tests.support.streams import stream_completions
from tests.support.tiny_model import ensure_tiny_llama
from tests.unit.test_rendering import args_of, flag_value, hand_plan, make_svc

from llm_operator import rendering
from llm_operator.adaptation import runtime_config as rc
from llm_operator.inpod.tuner.server import VLLMServer
from llm_operator.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = Path(os.environ.get("LLMOP_VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python"))
CAPACITY, CAP, CLIENTS, TOKENS = 8, 2, 6, 1000

pytestmark = pytest.mark.skipif(not VLLM_PYTHON.exists(), reason=f"no vLLM at {VLLM_PYTHON}")


def rendered_cap_flags() -> list[str]:
    """``--max-num-seqs C --max-num-active-seqs N`` as the operator renders them for the
    CPU engine's release (0.32.0) in Recommend mode with an adapted cap."""
    svc = make_svc({"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
                    "image": "vllm/vllm-openai:v0.32.0"})
    docs = rendering.render_all(svc, hand_plan(max_num_seqs=CAPACITY), Settings(),
                                overrides={"maxNumSeqs": CAP})
    args = args_of(docs[0])
    at = args.index("--max-num-seqs")
    return args[at:at + 4]


def test_the_rendered_active_cap_holds_and_no_runtime_config_is_advertised(
        tmp_path: Path) -> None:
    flags = rendered_cap_flags()
    assert flags == ["--max-num-seqs", str(CAPACITY), "--max-num-active-seqs", str(CAP)]
    assert flag_value(flags, "--max-num-active-seqs") == str(CAP)
    model = ensure_tiny_llama(tmp_path / "models", VLLM_PYTHON)
    srv = VLLMServer(model=str(model), python=str(VLLM_PYTHON),
                     log_path=tmp_path / "vllm.log",
                     flags=[*flags, "--max-model-len", "1024",
                            "--kv-cache-memory-bytes", str(64 * 1024 * 1024)])
    with srv:
        # the adapter: no such endpoint on a released vLLM
        with urllib.request.urlopen(srv.url + rc.OPENAPI_PATH, timeout=30) as resp:
            paths = json.loads(resp.read())["paths"]
        assert "/v1/completions" in paths and rc.RUNTIME_CONFIG_PATH not in paths
        found = rc.detect(srv.url, timeout_seconds=30)
        assert found.support is rc.Support.UNSUPPORTED, found
        assert rc.call(srv.url, rc.GET_REQUEST, 30).status == 404
        # the active cap: CLIENTS long requests sent at once, at most CAP running. Read
        # from the engine's own queue and running times (tests/support/admission.py), not
        # from the client, which the API server's lag on 2 shared cores can mislead.
        before = admission.sums(srv.url)
        streams = stream_completions(srv.url, str(model), CLIENTS, prompt="cap " * 8,
                                     max_tokens=TOKENS, timeout_s=300)
        streams.join(300)
        assert streams.completion_tokens() == [TOKENS] * CLIENTS, (streams.usage, srv.log_tail(30))
        ran = admission.after_round(srv.url, before, CLIENTS)
        sys.stderr.write(f"--max-num-active-seqs {CAP}: {ran.queued_s:.2f} s queued and "
                         f"{ran.running_s:.2f} s running over {CLIENTS} requests: "
                         f"{ran.concurrency():.2f} at once\n")
        # --max-num-active-seqs 2 read 2.00 (2026-12-06); the live cap at 2 read 1.81-2.20
        # (test_live_cap_release.py). An uncapped round reads 6 and CAP + 1 would read 3;
        # the lower margin is wider: only a cap that does not hold must fail here
        assert CAP - 0.8 < ran.concurrency() < CAP + 0.5, ran
