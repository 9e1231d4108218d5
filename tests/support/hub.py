"""A local stand-in for the Hugging Face Hub (HF_ENDPOINT), for the tests that read a
model's config.json: ``llm-operator plan --model-config hub`` (tests/unit) and the
operator's facts Job (tests/integration). No test reaches the internet.

The server is the sandbox's (:mod:`llm_operator_sandbox.hub`), here with one model's
config; a gated repository answers 401 without the right token.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from llm_operator_sandbox.hub import COMMIT
from llm_operator_sandbox.hub import LocalHub as Hub

# openai/gpt-oss-20b's config.json as published (the committed corpus fixture).
GPT_OSS_20B: dict[str, Any] = json.loads(
    (Path(__file__).resolve().parents[1] / "fixtures" / "model_configs"
     / "openai--gpt-oss-20b_config.json").read_text())
INDEX = {"metadata": {"total_size": 13_761_300_000}, "weight_map": {}}
TOKEN = "hf_test_token"
REPOS = {"openai/gpt-oss-20b": False, "gated/gpt-oss-20b": True}  # name -> gated
GATED = frozenset(name for name, gated in REPOS.items() if gated)  # need TOKEN


class _Hub:
    """The paths the running stand-in was asked for (``_Hub.requests``)."""

    requests: list[str] = []


def gpt_oss_repos() -> dict[str, dict[str, bytes | Path]]:
    """gpt-oss-20b's config (and a weights index) under three names: public, gated (the
    token :data:`TOKEN`), and without an index."""
    files: dict[str, bytes | Path] = {"config.json": json.dumps(GPT_OSS_20B).encode()}
    with_index = {**files, "model.safetensors.index.json": json.dumps(INDEX).encode()}
    return {"openai/gpt-oss-20b": with_index, "gated/gpt-oss-20b": with_index,
            "nosafetensors/gpt-oss-20b": files}


class LocalHub(Hub):
    """The stand-in with gpt-oss-20b's config, on a free local port, in a thread:
    ``with LocalHub() as hub:``; ``hub.endpoint`` is the HF_ENDPOINT."""

    def __init__(self) -> None:
        super().__init__(gpt_oss_repos(), gated=GATED, token=TOKEN)

    def __enter__(self) -> LocalHub:
        _Hub.requests = self.requests
        super().__enter__()
        return self


__all__ = ["COMMIT", "GATED", "GPT_OSS_20B", "INDEX", "REPOS", "TOKEN", "LocalHub",
           "gpt_oss_repos"]
