"""kopf's diff base (``last-handled-configuration``), built at less cost per event.

kopf compares each event's object with the last handled one through an "essence": the
object without ``status`` and without the system metadata. Its stock
:meth:`kopf.AnnotationsDiffBaseStorage.build` deep-copies the whole object first and
drops those parts afterwards; an LLMService's status (plan, conditions, tuning) is most
of the object, so most of that copy is thrown away, on every event of every service
(each status write is one more event). In a burst of new services that copy was the
largest single item of kopf's own CPU (cProfile: ``benchmarks/RESULTS.md``, "Scale",
"What was profiled and changed").

:class:`SlimDiffBaseStorage` hands kopf's build only what the essence keeps (everything
but ``status`` and ``metadata``, plus the metadata kopf reads: labels, annotations, and
the kind and owner references its key convention looks at), so the essence, the stored
annotation and every diff are the same as kopf's, byte for byte.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, cast

import kopf

# The metadata kopf's essence and its storage key convention read; the rest it drops.
_KEPT_METADATA = ("labels", "annotations", "ownerReferences")


def essence_source(body: Mapping[str, Any]) -> kopf.Body:
    """The part of ``body`` that kopf's essence is built from (no status, no system
    metadata); shares its values with ``body`` (kopf's build deep-copies them)."""
    meta = body.get("metadata") or {}
    slim: dict[str, Any] = {k: v for k, v in body.items() if k not in ("status", "metadata")}
    slim["metadata"] = {k: meta[k] for k in _KEPT_METADATA if k in meta}
    return kopf.Body(cast(kopf.RawBody, slim))


class SlimDiffBaseStorage(kopf.AnnotationsDiffBaseStorage):
    """:class:`kopf.AnnotationsDiffBaseStorage` whose essence is built without copying
    what it then drops (see the module docstring). With ``extra_fields`` (a handler that
    follows a status field; none of ours does) it falls back to kopf's own build."""

    def build(self, *, body: kopf.Body,
              extra_fields: Iterable[Any] | None = None) -> kopf.BodyEssence:
        if extra_fields:
            return super().build(body=body, extra_fields=extra_fields)
        return super().build(body=essence_source(body), extra_fields=extra_fields)
