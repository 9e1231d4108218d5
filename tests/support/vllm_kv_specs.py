"""Print vLLM's own KV cache spec of each layer of the models named, without weights.

Run under vLLM's Python (``.venv-vllm``): ``python vllm_kv_specs.py DIR [DIR ...]``, each
DIR holding a ``config.json``. For each, vLLM builds its ``VllmConfig`` (``EngineArgs``,
``load_format="dummy"``) and the model's layers on the CPU
(``model_loader.utils.initialize_model``: modules only, no weights read), then asks each
attention / Mamba layer for its ``get_kv_cache_spec`` as the model runner does
(``v1/worker/gpu_model_runner.py``, ``GPUModelRunner.get_kv_cache_spec``). Prints one
line ``KVSPECS {json}``: per folder, per layer, the spec's class, page size, block size,
window and heads, and the parameters of the model vLLM built, or the error that stopped
vLLM building it. Imports nothing of the
operator.
"""

from __future__ import annotations

import json
import socket
import sys
import traceback
from typing import Any


def _specs(folder: str, state: dict[str, bool]) -> dict[str, Any]:
    import torch
    from vllm.config import get_layers_from_vllm_config, set_current_vllm_config
    from vllm.distributed import (
        destroy_model_parallel,
        init_distributed_environment,
        initialize_model_parallel,
    )
    from vllm.engine.arg_utils import EngineArgs
    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase
    from vllm.model_executor.model_loader.utils import initialize_model

    cfg = EngineArgs(model=folder, skip_tokenizer_init=True, load_format="dummy",
                     max_model_len=4096, dtype="bfloat16",
                     enforce_eager=True).create_engine_config()
    with set_current_vllm_config(cfg):
        if not state.get("distributed"):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            init_distributed_environment(1, 0, f"tcp://127.0.0.1:{port}", 0, backend="gloo")
            state["distributed"] = True
        # Per model: the expert-parallel group exists only for a MoE model's config.
        destroy_model_parallel()
        initialize_model_parallel(1, 1)
        with torch.device("cpu"):
            model = initialize_model(vllm_config=cfg)
        parameters = sum(p.numel() for p in model.parameters())
        layers = get_layers_from_vllm_config(cfg, AttentionLayerBase)
        out = {}
        for name, layer in layers.items():
            spec = layer.get_kv_cache_spec(cfg)
            if spec is None:
                continue
            out[name] = {"kind": type(spec).__name__,
                         "page_size_bytes": spec.page_size_bytes,
                         "real_page_size_bytes": getattr(spec, "real_page_size_bytes",
                                                         spec.page_size_bytes),
                         "block_size": spec.block_size,
                         "sliding_window": getattr(spec, "sliding_window", None),
                         "num_kv_heads": getattr(spec, "num_kv_heads", None),
                         "head_size": getattr(spec, "head_size", None),
                         "head_size_v": getattr(spec, "head_size_v", None),
                         "tokens_per_state": getattr(spec, "tokens_per_state", 1)}
    return {"specs": out, "parameters": parameters}


def main(folders: list[str]) -> int:
    result: dict[str, Any] = {}
    state: dict[str, bool] = {}
    for folder in folders:
        try:
            result[folder] = _specs(folder, state)
        except Exception as exc:  # noqa: BLE001 - reported per model, the test decides
            result[folder] = {"error": f"{type(exc).__name__}: {exc}",
                              "trace": traceback.format_exc()[-2000:]}
    sys.stdout.write("KVSPECS " + json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
