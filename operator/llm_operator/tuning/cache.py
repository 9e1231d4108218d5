"""The tuning result cache (pure): one ConfigMap entry per fingerprint, written,
read back and evicted oldest first."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..api.models import LLMService
from ..api.timestamps import rfc3339
from ..inpod.tuner.result import ResultParseError, TuningResult, parse_result
from .status import JSON

CACHE_CONFIGMAP = "llm-operator-tuning-cache"
CACHE_MAX_ENTRIES = 100  # ~4.5 KB each: far below a ConfigMap's 1 MiB


def cache_entry(result: TuningResult, svc: LLMService, now: float) -> JSON:
    """The cache record of one result (compact JSON under its fingerprint)."""
    return {"at": rfc3339(now), "service": f"{svc.metadata.namespace}/{svc.metadata.name}",
            "result": json.loads(result.to_message())}


def cache_text(entry: Mapping[str, Any]) -> str:
    """A cache entry as the ConfigMap value (compact JSON)."""
    return json.dumps(entry, separators=(",", ":"), sort_keys=True)


def parse_cache_value(text: str | None) -> JSON | None:
    """A ConfigMap value back into a cache entry (None when absent or unreadable)."""
    if not text:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _cached_result(cached: Mapping[str, Any] | None, fingerprint: str) -> TuningResult | None:
    if not cached or not isinstance(cached.get("result"), dict):
        return None
    try:
        result = parse_result(json.dumps(cached["result"]))
    except ResultParseError:
        return None
    if result.state == "Failed" or result.best is None or result.fingerprint not in (
            None, fingerprint):
        return None
    return result


def cache_evictions(data: Mapping[str, str], keep: int = CACHE_MAX_ENTRIES) -> list[str]:
    """Keys to drop so that at most ``keep - 1`` entries stay before one is added (the
    oldest first, by their ``at``)."""
    if len(data) < keep:
        return []
    def when(key: str) -> str:
        return str((parse_cache_value(data[key]) or {}).get("at") or "")
    ordered = sorted(data, key=lambda k: (when(k), k))
    return ordered[: len(data) - keep + 1]
