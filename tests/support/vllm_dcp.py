"""Ask vLLM which decode-context-parallel sizes it takes, and what KV capacity it counts.

Run under vLLM's Python (``.venv-vllm``): ``python vllm_dcp.py CASES.json``. The file
holds a list of cases ``{"folder": DIR, "tp": N, "page_bytes": P, "kind": "mla"|"full",
"head_size": H, "kv_heads": K, "layers": L, "memory": M}``: for every divisor d of N,
vLLM builds its ``VllmConfig`` for the config.json in DIR at ``--tensor-parallel-size N
--decode-context-parallel-size d`` (``EngineArgs.create_engine_config``, config only: no
devices, no weights), which runs its parallelism checks (vllm/config/parallel.py and
``ModelConfig.verify_with_parallel_config``). For a size it takes, the KV capacity vLLM's
engine core computes from M bytes per GPU for L layers of one rank's spec
(``MLAAttentionSpec`` or ``FullAttentionSpec`` of K heads of H, bf16, 16-token blocks):
``get_kv_cache_configs`` then ``get_kv_cache_capacity`` (vllm/v1/core/kv_cache_utils.py),
the "KV cache size: N tokens" vLLM logs. The block size is given (16, the default of
vLLM's NVIDIA backends and the planner's ``BLOCK_SIZE``): left to it, vLLM's CPU platform
picks one by the machine, 128 for full attention, and for latent attention 16 without
AMX but 128 with it (a machine with AMX counted 209,664 tokens in 128-token blocks
against the planner's 209,712 in 16-token ones, 2026-12-03). Prints one line
``DCP {json}``: per case, per size, ``{"ok": true, "tokens": n, "blocks": b,
"block_size": s}`` or ``{"ok": false, "error": text}``. Imports nothing of the operator.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def _capacity(cfg: Any, case: dict[str, Any]) -> dict[str, int]:
    import torch
    from vllm.v1.attention.backends.utils import resolve_kv_cache_layout
    from vllm.v1.core.kv_cache_utils import get_kv_cache_capacity, get_kv_cache_configs
    from vllm.v1.kv_cache_interface import FullAttentionSpec, MLAAttentionSpec

    block = cfg.cache_config.block_size
    if case["kind"] == "mla":
        spec: Any = MLAAttentionSpec(block_size=block, num_kv_heads=1,
                                     head_size=case["head_size"], dtype=torch.bfloat16)
    else:
        spec = FullAttentionSpec(block_size=block, num_kv_heads=case["kv_heads"],
                                 head_size=case["head_size"], dtype=torch.bfloat16)
    specs = {f"model.layers.{i}.self_attn.attn": spec for i in range(case["layers"])}
    # The engine core resolves the layout from what the workers' backends support before
    # it sizes the cache; the default layout of every NVIDIA backend here.
    resolve_kv_cache_layout(cfg, [["NHD"]], list(specs.values()))
    config = get_kv_cache_configs(cfg, [specs], [case["memory"]])[0]
    tokens, _ = get_kv_cache_capacity(cfg, config)
    return {"tokens": int(tokens), "blocks": int(config.num_blocks), "block_size": block}


def main(path: str) -> None:
    from vllm.engine.arg_utils import EngineArgs

    out: list[dict[str, Any]] = []
    for case in json.loads(open(path).read()):
        sizes: dict[str, Any] = {}
        for d in range(1, case["tp"] + 1):
            if case["tp"] % d:
                continue
            try:
                cfg = EngineArgs(model=case["folder"], skip_tokenizer_init=True,
                                 load_format="dummy", max_model_len=4096, dtype="bfloat16",
                                 enforce_eager=True, tensor_parallel_size=case["tp"],
                                 block_size=16,
                                 decode_context_parallel_size=d).create_engine_config()
            except Exception as exc:  # noqa: BLE001 - vLLM's refusal is the answer
                sizes[str(d)] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:400]}
                continue
            sizes[str(d)] = {"ok": True, **_capacity(cfg, case)}
        out.append(sizes)
    sys.stdout.write("DCP " + json.dumps(out) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
