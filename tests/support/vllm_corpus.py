"""Write a default config.json for every text-generation model type that the installed
transformers and vLLM both know, and what vLLM reads from each config alone.

Run under vLLM's Python (``.venv-vllm``): ``python vllm_corpus.py OUT``. For each model
type of transformers' ``CONFIG_MAPPING`` whose causal-LM or image-text-to-text
architecture (transformers' auto mappings) vLLM's model registry lists as a generative
model (``_TEXT_GENERATION_MODELS``, ``_MULTIMODAL_MODELS``, or served through its
transformers backend, ``_TRANSFORMERS_SUPPORTED_MODELS``), it writes the config class's
defaults (``to_dict()``, ``architectures`` set to that architecture) to
``OUT/<type>/config.json``, then reads the file back as vLLM does (``get_config``,
``get_hf_text_config``) and converts it with vLLM's own
``ModelArchConfigConvertor`` (``ModelConfig.get_model_arch_config``'s path: head size,
total KV heads, layers, MLA), and counts the attention layers with
``ModelConfig.get_num_layers_by_block_type``; for a hybrid or attention-free class, the
per-layer state shapes its ``get_mamba_state_shape_from_config`` computes (the model's
module imported, no weights built); and each config class's ``tie_word_embeddings``
default. Whether the model class is hybrid,
attention-free or has no-op layers (``IsHybrid``, ``IsAttentionFree``, ``HasNoOps``)
is read from the class's bases in vLLM's source (``ast``): importing every model
module, as ``ModelConfig`` does through the registry's inspection, takes minutes.
Prints one line ``CORPUS {json}``. Imports nothing of the operator.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import sys
import traceback
from functools import cache
from pathlib import Path
from typing import Any

_FLAGS = {"IsHybrid": "is_hybrid", "IsAttentionFree": "is_attention_free",
          "HasNoOps": "has_noops"}


@cache
def _module_tree(module: str) -> tuple[Path, ast.Module] | None:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    path = Path(spec.origin)
    return path, ast.parse(path.read_text())


def _resolve(source: str, package: str) -> str:
    """The absolute module of ``from <source> import ...`` written in ``package``."""
    if not source.startswith("."):
        return source
    level = len(source) - len(source.lstrip("."))
    parts = package.split(".")
    rest = source.lstrip(".")
    return ".".join(parts[:len(parts) - level + 1] + ([rest] if rest else []))


def _flags(module: str, cls: str, depth: int = 0) -> set[str]:
    """The interface flags among ``module.cls``'s bases, followed through the bases
    defined in the same module or imported into it (a package's re-export included:
    its first import of the name, e.g. the ``TYPE_CHECKING`` branch), at most 8 deep."""
    found: set[str] = set()
    tree = _module_tree(module)
    if tree is None or depth > 8:
        return found
    path, body = tree
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    imports: dict[str, str] = {}
    for node in ast.walk(body):
        if isinstance(node, ast.ImportFrom):
            source = "." * node.level + (node.module or "")
            for alias in node.names:
                imports.setdefault(alias.asname or alias.name, _resolve(source, package))
    classes = [node for node in body.body if isinstance(node, ast.ClassDef)
               and node.name == cls]
    if not classes and cls in imports:
        return _flags(imports[cls], cls, depth + 1)
    for node in classes:
        for base in node.bases:
            name = base.id if isinstance(base, ast.Name) else (
                base.attr if isinstance(base, ast.Attribute) else None)
            if name is None:
                continue
            if name in _FLAGS:
                found.add(_FLAGS[name])
            elif name in imports:
                found |= _flags(imports[name], name, depth + 1)
            elif name != cls:
                found |= _flags(module, name, depth + 1)
        for item in node.body:  # a class attribute set directly (is_hybrid = True)
            if isinstance(item, ast.Assign | ast.AnnAssign):
                targets = item.targets if isinstance(item, ast.Assign) else [item.target]
                for target in targets:
                    if isinstance(target, ast.Name) and target.id in _FLAGS.values() \
                            and isinstance(item.value, ast.Constant) \
                            and item.value.value is True:
                        found.add(target.id)
    return found


def _types() -> dict[str, tuple[str, str]]:
    """model type -> (architecture, how vLLM serves it: native | transformers)."""
    from transformers import CONFIG_MAPPING
    from transformers.models.auto import modeling_auto
    from vllm.model_executor.models import registry

    native = {**registry._TEXT_GENERATION_MODELS, **registry._MULTIMODAL_MODELS}
    backend = registry._TRANSFORMERS_SUPPORTED_MODELS
    out = {}
    for model_type in CONFIG_MAPPING.keys():  # noqa: SIM118 - a lazy mapping
        candidates: list[str] = []
        for mapping in (modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
                        modeling_auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES):
            names = mapping.get(model_type)
            candidates += [names] if isinstance(names, str) else list(names or ())
        for arch in candidates:
            if arch in native:
                out[model_type] = (arch, "native")
                break
            if arch in backend:
                out[model_type] = (arch, "transformers")
                break
    return out


class _Stub:
    """What ``ModelConfig.get_num_layers_by_block_type`` reads of a ModelConfig."""

    def __init__(self, hf_config: Any, hf_text_config: Any, arch: Any,
                 flags: set[str]) -> None:
        from vllm.config import ModelConfig

        self.hf_config, self.hf_text_config, self.model_arch_config = \
            hf_config, hf_text_config, arch
        self.is_hybrid = "is_hybrid" in flags
        self.is_attention_free = "is_attention_free" in flags
        self.has_noops = "has_noops" in flags
        for name in ("get_total_num_hidden_layers", "get_layers_start_end_indices",
                     "get_num_layers", "get_num_layers_by_block_type"):
            setattr(self, name, getattr(ModelConfig, name).__get__(self))


def _read(folder: Path, arch_name: str) -> dict[str, Any]:
    from vllm.config import ParallelConfig
    from vllm.model_executor.models import registry
    from vllm.transformers_utils.config import get_config, get_hf_text_config
    from vllm.transformers_utils.model_arch_config_convertor import (
        MODEL_ARCH_CONFIG_CONVERTORS,
        ModelArchConfigConvertorBase,
    )

    hf_config = get_config(str(folder), trust_remote_code=False)
    text = get_hf_text_config(hf_config)
    convertor = MODEL_ARCH_CONFIG_CONVERTORS.get(hf_config.model_type,
                                                 ModelArchConfigConvertorBase)
    arch = convertor(hf_config, text).convert(supports_multimodal=False)
    module, cls = registry._VLLM_MODELS[arch_name]
    if not module.startswith("vllm."):
        module = f"vllm.model_executor.models.{module}"
    flags = _flags(module, cls)
    out: dict[str, Any] = {
        "layers": arch.total_num_hidden_layers, "head_size": arch.head_size,
        "kv_heads": arch.total_num_kv_heads, "mla": bool(arch.is_deepseek_mla),
        "flags": sorted(flags)}
    try:
        stub: Any = _Stub(hf_config, text, arch, flags)  # ModelConfig's methods, bound
        out["attention_layers"] = stub.get_num_layers_by_block_type(ParallelConfig(),
                                                                    "attention")
    except Exception as exc:  # noqa: BLE001 - vLLM cannot count them from the config
        out["attention_layers_error"] = f"{type(exc).__name__}: {exc}"[:300]
    return out


def _tie_default(config: Any) -> dict[str, bool]:
    """model type -> its config class's tie_word_embeddings default, for the config and
    its text config (what vLLM reads where config.json does not write the key)."""
    out = {}
    for c in (config, config.get_text_config()):
        default = getattr(type(c)(), "tie_word_embeddings", None)
        out[c.model_type] = bool(default)
    return out


def _state_shapes(hf_config: Any, text: Any, arch_name: str) -> list[list[int]]:
    """The per-layer state shapes at TP 1 that vLLM's model class computes from the
    config (``get_mamba_state_shape_from_config``: MambaStateShapeCalculator), with the
    engine's defaults (mamba cache dtypes auto, no speculative tokens, no ReplaySSM).
    Imports the model's module (seconds; a module needing what the CPU build lacks,
    e.g. torchvision, raises and is reported)."""
    import importlib
    from types import SimpleNamespace

    import torch
    from vllm.model_executor.models import registry

    module, cls = registry._VLLM_MODELS[arch_name]
    if not module.startswith("vllm."):
        module = f"vllm.model_executor.models.{module}"
    klass = getattr(importlib.import_module(module), cls)
    stub = SimpleNamespace(
        model_config=SimpleNamespace(hf_config=hf_config, hf_text_config=text,
                                     dtype=torch.bfloat16),
        parallel_config=SimpleNamespace(tensor_parallel_size=1),
        cache_config=SimpleNamespace(mamba_cache_dtype="auto", mamba_ssm_cache_dtype="auto",
                                     cache_dtype="auto", use_replayssm=False),
        num_speculative_tokens=0, speculative_config=None)
    return [list(shape) for shape in klass.get_mamba_state_shape_from_config(stub)]


def main(root: str) -> int:
    from transformers import CONFIG_MAPPING, __version__

    import vllm

    result: dict[str, Any] = {}
    for model_type, (arch, how) in sorted(_types().items()):
        row: dict[str, Any] = {"architecture": arch, "served": how}
        result[model_type] = row
        try:
            config = CONFIG_MAPPING[model_type]().to_dict()
        except Exception as exc:  # noqa: BLE001 - a class without usable defaults
            row["no_defaults"] = f"{type(exc).__name__}: {exc}"[:300]
            continue
        config["architectures"] = [arch]
        folder = Path(root) / model_type
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(config, default=str))
        row["folder"] = str(folder)
        try:
            row["tie_default"] = _tie_default(CONFIG_MAPPING[model_type]())
        except Exception as exc:  # noqa: BLE001 - reported per type, the test decides
            row["tie_default_error"] = f"{type(exc).__name__}: {exc}"[:300]
        try:
            row["vllm"] = _read(folder, arch)
        except Exception as exc:  # noqa: BLE001 - reported per type, the test decides
            row["vllm_error"] = f"{type(exc).__name__}: {exc}"[:300]
            row["trace"] = traceback.format_exc()[-1500:]
            continue
        if {"is_hybrid", "is_attention_free"} & set(row["vllm"]["flags"]):
            from vllm.transformers_utils.config import get_config, get_hf_text_config
            try:
                hf_config = get_config(str(folder), trust_remote_code=False)
                row["vllm"]["state_shapes"] = _state_shapes(
                    hf_config, get_hf_text_config(hf_config), arch)
            except Exception as exc:  # noqa: BLE001 - reported per type
                row["vllm"]["state_error"] = f"{type(exc).__name__}: {exc}"[:300]
    sys.stdout.write("CORPUS " + json.dumps({
        "transformers": __version__, "vllm": vllm.__version__, "types": result}) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.exit(main(sys.argv[1]))
