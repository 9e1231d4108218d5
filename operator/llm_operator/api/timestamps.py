"""Times as status and Events write them: RFC 3339 in UTC, whole seconds.

Pure deciders take the time as ``now: float`` (seconds since the epoch) and format it
here; only the I/O edge (:mod:`llm_operator.controller`) reads the clock.
"""

from __future__ import annotations

from datetime import UTC, datetime

RFC3339 = "%Y-%m-%dT%H:%M:%SZ"


def rfc3339(t: float) -> str:
    """``t`` (seconds since the epoch) as ``2026-01-31T12:00:00Z``."""
    return datetime.fromtimestamp(t, UTC).strftime(RFC3339)


def parse_rfc3339(text: str) -> float:
    """Seconds since the epoch of an RFC 3339 time (``Z`` or an offset; a time without
    either, as kopf writes its retry times, is taken as UTC)."""
    when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return (when if when.tzinfo is not None else when.replace(tzinfo=UTC)).timestamp()


def parse_rfc3339_or_none(value: object) -> float | None:
    """:func:`parse_rfc3339` of a value read from an object's status: None when it is
    absent or not such a time."""
    try:
        return parse_rfc3339(str(value)) if value else None
    except ValueError:
        return None
