"""kopf's progress storage, with each handler's outcome tied to the generation it handled.

kopf runs the changing handlers of one cause (``reconcile``, then ``tuning``) and keeps
each one's outcome in a progress annotation until all of them are done; only then does it
store the diff base (``last-handled-configuration``), built from the object **as of that
last cycle**. A handler that succeeded in an earlier cycle is not run again in the later
ones. So when the spec changes while the cycle is still open (``tuning`` failed
temporarily, an API fault; its retry runs some seconds later on the new body), the
earlier success of ``reconcile`` counts for the new spec too: kopf then records the new
spec as handled, and nothing ever renders it. The service keeps the children of the old
spec and ``status.observedGeneration`` stays one behind, for good (the churn under
faults found it: ``benchmarks/churn.py``). kopf's own issue: nolar/kopf#641 (a fix in
kopf, per-handler digests, was reverted: it re-ran field handlers endlessly).

:class:`GenerationProgressStorage` records, with each handler's outcome, the
``metadata.generation`` of the object it ran on, and forgets a **success** recorded for
another generation when kopf reads it back: that handler runs again, on the new spec, in
the same cycle (every handler here is idempotent). Only a change of the spec bumps the
generation, so a status write or a label changes nothing. Records without a generation
(written before this storage, or by a handler kopf re-stores without running it: see
:func:`record_generation`) keep kopf's behaviour.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import kopf

GENERATION_KEY = "generation"


def _generation(body: Mapping[str, Any]) -> int | None:
    value = (body.get("metadata") or {}).get("generation")
    return value if isinstance(value, int) else None


def outdated_success(record: Mapping[str, Any], generation: int | None) -> bool:
    """Whether ``record`` (a stored progress record) is a success kopf must not count for
    an object at ``generation``: it succeeded on another generation (another spec)."""
    recorded = record.get(GENERATION_KEY)
    return (bool(record.get("success")) and isinstance(recorded, int)
            and generation is not None and recorded != generation)


def record_generation(new: Mapping[str, Any], stored: Mapping[str, Any] | None,
                      generation: int | None) -> int | None:
    """The generation to store with the record ``new`` (kopf's, without one) for an object
    at ``generation``, whose stored record is ``stored`` (with its generation, if any).

    kopf re-stores a record it did not run (a changed ``purpose`` when one cause
    supersedes another); its generation is then the stored one, not the object's. A
    handler that ran counts one more retry, or has just started (no stored record, or one
    :meth:`GenerationProgressStorage.fetch` hid from kopf as outdated)."""
    if stored is None or outdated_success(stored, generation):
        return generation
    if (new.get("retries") or 0) == (stored.get("retries") or 0) and (
            new.get("success") == stored.get("success")):
        recorded = stored.get(GENERATION_KEY)
        return recorded if isinstance(recorded, int) else None
    return generation


class GenerationProgressStorage(kopf.AnnotationsProgressStorage):
    """:class:`kopf.AnnotationsProgressStorage` whose records carry the generation they
    were made for (see the module docstring). kopf sees records without the generation
    (it compares what it reads with what it would write, to write only changes)."""

    def fetch(self, *, key: Any, body: kopf.Body) -> Any:
        record = super().fetch(key=key, body=body)
        if record is None:
            return None
        if outdated_success(record, _generation(body)):
            return None  # run it again: it handled an older spec
        return cast(Any, {k: v for k, v in record.items() if k != GENERATION_KEY})

    def store(self, *, key: Any, record: Any, body: kopf.Body, patch: kopf.Patch) -> None:
        stored = super().fetch(key=key, body=body)
        generation = record_generation(record, stored, _generation(body))
        if generation is not None:
            record = {**record, GENERATION_KEY: generation}
        super().store(key=key, record=record, body=body, patch=patch)
