"""kopf's progress records carry the generation they handled (controller/progress.py):
a spec changed while kopf's cycle was still open is rendered, not recorded as handled.

The storage is driven through kopf's own storage API (``fetch``/``store`` with kopf's
``Body`` and ``Patch``), the way kopf's processing calls it in each cycle.
"""

from __future__ import annotations

import json
from typing import Any

import kopf

from llm_operator.api.constants import PROGRESS_PREFIX
from llm_operator.controller.progress import (
    GenerationProgressStorage,
    outdated_success,
    record_generation,
)

SUCCESS = {"started": "2026-01-01T00:00:00", "stopped": "2026-01-01T00:00:01",
           "purpose": "create", "retries": 1, "success": True}
RETRYING = {"started": "2026-01-01T00:00:00", "delayed": "2026-01-01T00:00:06",
            "purpose": "create", "retries": 1, "message": "the API server failed"}


def body(generation: int, annotations: dict[str, str] | None = None) -> kopf.Body:
    return kopf.Body({"apiVersion": "llmops.dev/v1alpha1", "kind": "LLMService",
                      "metadata": {"name": "s", "namespace": "n", "generation": generation,
                                   "annotations": dict(annotations or {})},
                      "spec": {"replicas": generation}})


def stored(storage: GenerationProgressStorage, key: str, record: dict[str, Any],
           on: kopf.Body) -> dict[str, str]:
    """The annotations kopf's patch would write for ``record`` stored over ``on``."""
    patch = kopf.Patch()
    storage.store(key=key, record=record, body=on, patch=patch)
    storage.flush()
    return {k: v for k, v in patch["metadata"]["annotations"].items() if v is not None}


def test_a_success_on_the_old_spec_does_not_count_once_the_spec_changed() -> None:
    """The churn's lost update: reconcile succeeded on generation 1, tuning failed and is
    retried; meanwhile the user edits the spec. Read back on generation 2, reconcile has
    no record (kopf runs it again, on the new spec); tuning's retry is kept."""
    storage = GenerationProgressStorage(prefix=PROGRESS_PREFIX)
    annotations = {**stored(storage, "reconcile", SUCCESS, body(1)),
                   **stored(storage, "tuning", RETRYING, body(1))}
    assert json.loads(annotations[f"{PROGRESS_PREFIX}/reconcile"])["generation"] == 1

    assert storage.fetch(key="reconcile", body=body(2, annotations)) is None
    assert storage.fetch(key="tuning", body=body(2, annotations)) == RETRYING
    # Same generation: kopf sees its own record, as it wrote it (no generation key), so
    # it does not rewrite records it did not change.
    assert storage.fetch(key="reconcile", body=body(1, annotations)) == SUCCESS


def test_a_rerun_is_recorded_for_the_new_generation_and_an_unrun_record_keeps_its_own() -> None:
    storage = GenerationProgressStorage(prefix=PROGRESS_PREFIX)
    old = stored(storage, "reconcile", SUCCESS, body(1))
    # Run again on generation 2 (the old record was hidden, so kopf counts from scratch
    # and ends at the same retries): recorded for 2, so it is not hidden again.
    again = stored(storage, "reconcile", SUCCESS, body(2, old))
    assert json.loads(again[f"{PROGRESS_PREFIX}/reconcile"])["generation"] == 2
    assert storage.fetch(key="reconcile", body=body(2, again)) == SUCCESS
    # Re-stored without running (kopf changed its purpose): still generation 1's.
    repurposed = stored(storage, "reconcile", {**SUCCESS, "purpose": "update"},
                        body(1, stored(storage, "reconcile", SUCCESS, body(1))))
    assert json.loads(repurposed[f"{PROGRESS_PREFIX}/reconcile"])["generation"] == 1


def test_records_without_a_generation_keep_kopfs_behaviour() -> None:
    """Records an older operator wrote (no generation) are taken as they are."""
    legacy = {f"{PROGRESS_PREFIX}/reconcile": json.dumps(SUCCESS)}
    storage = GenerationProgressStorage(prefix=PROGRESS_PREFIX)
    assert storage.fetch(key="reconcile", body=body(5, legacy)) == SUCCESS
    assert not outdated_success(SUCCESS, 5)
    assert not outdated_success({**SUCCESS, "generation": 5}, 5)
    assert outdated_success({**SUCCESS, "generation": 4}, 5)
    assert not outdated_success({**RETRYING, "generation": 4}, 5)  # a retry runs anyway
    assert record_generation(SUCCESS, None, 3) == 3
    assert record_generation({**SUCCESS, "retries": 2}, {**SUCCESS, "generation": 2}, 3) == 3
    assert record_generation(SUCCESS, SUCCESS, 3) is None  # unrun, legacy: none invented
