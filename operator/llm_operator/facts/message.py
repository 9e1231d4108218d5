"""The facts Job's result, as its termination message (pure; the standard library only).

``llm-operator facts`` (in the Job's pod) reads the three files the parser
(:func:`llm_operator.knowledge.modelfacts.facts_from_hf_config`) needs: ``config.json``,
``model.safetensors.index.json`` and modelopt's ``hf_quant_config.json``. They go back to
the operator as the container's termination message, which the kubelet cuts at
:data:`MESSAGE_LIMIT` bytes, so they are first reduced to what the parser reads and then
compressed:

1. the index keeps its ``metadata`` only (``total_size``, ``total_parameters``); its
   ``weight_map`` (one entry per tensor: 50-500 KB for large checkpoints) is not read;
2. keys the parser never reads and that can be long are dropped (``id2label``,
   ``label2id``, ``task_specific_params``, ``auto_map``);
3. the JSON of what is left is zlib-compressed and base64-encoded (a config.json of
   10 KB, long ``layer_types`` lists included, compresses to about 1.5 KB);
4. only if that is still too long: the quantization config's lists of modules left
   unquantized (``ignore``, ``modules_to_not_convert``, ...), which the parser reads only
   for whether attention is among them, become ``["attn"]`` or ``[]``.

A result still over the limit is an error naming ``spec.model.architecture`` as the way
round. The operator decodes the message with :func:`decode` and parses it with the same
pure parser as ``llm-operator plan --model-config``: the message is data, never code.
"""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Mapping
from typing import Any

MESSAGE_LIMIT = 4096  # bytes of a termination message the kubelet keeps
VERSION = 1
UNREAD_KEYS = ("id2label", "label2id", "task_specific_params", "auto_map")
SKIP_LISTS = ("modules_to_not_convert", "ignore", "exclude_modules", "ignored_layers")
WRAPPERS = ("text_config", "llm_config", "language_config")

# Kinds of failure the Job reports (the operator turns each into a condition and a fix).
GATED = "gated"  # 401/403: a gated or private repository, no token or a wrong one
NO_REVISION = "revision"
NO_REPOSITORY = "repository"
NO_CONFIG = "config"  # no config.json (a repository or folder without one)
INVALID = "invalid"  # a config.json the parser refuses (names the key)
TOO_BIG = "too-big"
HTTP = "http"  # another answer of the Hub (5xx, a mirror that is down)
INTERNAL = "internal"  # an exception llm-operator did not expect (a bug)


class MessageError(ValueError):
    """A termination message that is not a facts result (cut, or not ours)."""


def _compact_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _without_unread(config: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in config.items() if k not in UNREAD_KEYS}
    for key in WRAPPERS:
        if isinstance(out.get(key), Mapping):
            out[key] = {k: v for k, v in out[key].items() if k not in UNREAD_KEYS}
    return out


def _skip_lists_marked(q: Any) -> Any:
    """A quantization config with its skip lists reduced to what the parser reads: whether
    an attention module is among them."""
    if not isinstance(q, Mapping):
        return q
    out = dict(q)
    for key in SKIP_LISTS:
        if isinstance(out.get(key), list):
            out[key] = ["attn"] if any("attn" in str(m) for m in out[key]) else []
    return out


def _marked(config: dict[str, Any], quant: Any) -> tuple[dict[str, Any], Any]:
    config = dict(config)
    config["quantization_config"] = _skip_lists_marked(config.get("quantization_config"))
    if config["quantization_config"] is None:
        del config["quantization_config"]
    for key in WRAPPERS:
        if isinstance(config.get(key), Mapping) and "quantization_config" in config[key]:
            config[key] = {**config[key], "quantization_config":
                           _skip_lists_marked(config[key]["quantization_config"])}
    if isinstance(quant, Mapping) and isinstance(quant.get("quantization"), Mapping):
        quant = {**quant, "quantization": _skip_lists_marked(quant["quantization"])}
    return config, quant


def _pack(config: Any, index: Any, quant: Any) -> str:
    raw = _compact_json({"config": config, "index": index, "quant": quant}).encode()
    return base64.b64encode(zlib.compress(raw, 9)).decode("ascii")


def encode_facts(config: Mapping[str, Any], index: Mapping[str, Any] | None,
                 quant: Mapping[str, Any] | None, *, source: str,
                 commit: str | None = None) -> str:
    """The termination message of a successful read (see the module docstring).
    ``source``: where the files came from (``repo@revision``, or the folder). Raises
    :class:`MessageError` (kind :data:`TOO_BIG`) when even the reduced form is too long."""
    meta = index.get("metadata") if isinstance(index, Mapping) else None
    small_index = {"metadata": dict(meta)} if isinstance(meta, Mapping) else None
    small_config = _without_unread(config)
    head = {"v": VERSION, "source": source, "commit": commit}
    for cfg, qnt in ((small_config, quant), _marked(small_config, quant)):
        text = _compact_json({**head, "z": _pack(cfg, small_index, qnt)})
        if len(text.encode()) <= MESSAGE_LIMIT:
            return text
    raise MessageError(f"config.json of {source} is too long for a termination message "
                       f"even compressed ({len(text.encode())} > {MESSAGE_LIMIT} bytes)")


def encode_error(kind: str, source: str, problem: str, fix: str,
                 status: int | None = None) -> str:
    """The termination message of a failed read: what failed, where, and the fix."""
    text = _compact_json({"v": VERSION, "error": {
        "kind": kind, "source": source, "problem": problem, "fix": fix, "status": status}})
    if len(text.encode()) > MESSAGE_LIMIT:  # a problem text that long is cut, not lost
        keep = MESSAGE_LIMIT - len(text.encode()) + len(problem) - 16
        return encode_error(kind, source, problem[:max(0, keep)] + " ...", fix, status)
    return text


def decode(message: str) -> dict[str, Any]:
    """The facts Job's message as ``{"source", "commit", "config", "index", "quant"}``, or
    ``{"error": {"kind", "source", "problem", "fix", "status"}}``. Raises
    :class:`MessageError` for a message that is neither (cut, from another program)."""
    try:
        doc = json.loads(message)
    except ValueError as exc:
        raise MessageError(f"not JSON ({exc})") from exc
    if not isinstance(doc, dict) or doc.get("v") != VERSION:
        raise MessageError(f"not a version-{VERSION} facts result")
    if isinstance(doc.get("error"), dict):
        return {"error": dict(doc["error"])}
    try:
        inner = json.loads(zlib.decompress(base64.b64decode(str(doc["z"]))))
    except (KeyError, ValueError, zlib.error) as exc:
        raise MessageError(f"its packed files cannot be read ({exc})") from exc
    if not isinstance(inner, dict) or not isinstance(inner.get("config"), dict):
        raise MessageError("it holds no config.json")
    return {"source": doc.get("source"), "commit": doc.get("commit"),
            "config": inner["config"], "index": inner.get("index"),
            "quant": inner.get("quant")}
