"""The tuning fingerprint (pure): what a tuning result depends on, hashed.

When the fingerprint of a service changes (a rollout onto another model, image, GPU,
parallelism, context length, dtype or workload), the operator tunes again; a service
re-created with the same fingerprint reuses the cached result. Operator side only.

A revision that is a branch (``spec.model.revision`` unset means ``main``) moves: the
fingerprint holds its name, not the commit it points to, so a model updated on the hub
keeps the old result. The operator does not resolve it (that needs the hub at plan
time, which an air-gapped cluster has not); it says so in ``status.tuning.revisionNote``
(:func:`revision_note`). Pin a commit SHA to key results on the files, or annotate
``llmops.dev/retune`` after the model changed.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from ..api.models import LLMService, LLMServiceSpec
from ..planning import Plan

_COMMIT = re.compile(r"[0-9a-f]{40}")

# Bump when the tuner's method changes so much that old results should not be reused.
FINGERPRINT_VERSION = 1


def fingerprint_inputs(svc: LLMService, plan: Plan, image: str | None = None) -> dict[str, Any]:
    """The facts a tuning result depends on (what :func:`tuning_fingerprint` hashes).

    Model (name, revision, quantization), image, GPU product and count per replica,
    tensor, pipeline and decode context parallelism, max model length, dtype and KV-cache dtype, GPU
    memory share, the workload profile with its SLO, and the user's pins and extra
    arguments (they fix the server the search runs against). Not: replicas, scheduling,
    budgets, adaptation, names. ``image`` is the image actually run (pass
    ``rendering.pod.image_for(svc, settings)``; default ``spec.image``).
    """
    spec = svc.spec
    engine = spec.engine
    return {
        "v": FINGERPRINT_VERSION,
        "model": spec.model.name,
        "revision": spec.model.revision,
        "quantization": str(spec.model.quantization),
        "image": image or spec.image,
        "gpuProduct": plan.gpu_product,
        "gpusPerReplica": plan.gpus_per_replica,
        "tensorParallelSize": plan.tensor_parallel_size,
        "pipelineParallelSize": plan.pipeline_parallel_size,
        # Only when split: a service without it keeps its fingerprint (and its result).
        **({"decodeContextParallelSize": plan.decode_context_parallel_size}
           if plan.decode_context_parallel_size > 1 else {}),
        "maxModelLen": plan.max_model_len,
        "dtype": plan.dtype,
        "kvCacheDtype": str(engine.kv_cache_dtype),
        "gpuMemoryUtilization": engine.gpu_memory_utilization,
        "workload": {
            "inputTokens": spec.workload.input_tokens,
            "outputTokens": spec.workload.output_tokens,
            "concurrency": spec.workload.concurrency,
            "ttftP95Ms": spec.workload.slo.ttft_p95_ms,
            "itlP95Ms": spec.workload.slo.itl_p95_ms,
            # Only when set: a service without one keeps its fingerprint (and its result).
            **({"sharedPrefixTokens": spec.workload.shared_prefix_tokens}
               if spec.workload.shared_prefix_tokens else {}),
        },
        "pins": {
            "maxNumSeqs": engine.max_num_seqs,
            "maxNumBatchedTokens": engine.max_num_batched_tokens,
            "enableChunkedPrefill": engine.enable_chunked_prefill,
            "enablePrefixCaching": engine.enable_prefix_caching,
            "extraArgs": list(engine.extra_args),
        },
    }


def tuning_fingerprint(svc: LLMService, plan: Plan, image: str | None = None) -> str:
    """A stable 16-hex-digit hash of :func:`fingerprint_inputs` (same inputs, same hash,
    in any process)."""
    canonical = json.dumps(fingerprint_inputs(svc, plan, image), sort_keys=True,
                           separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def revision_note(spec: LLMServiceSpec) -> str | None:
    """Why a result keyed on this spec's model revision can go stale (None when the
    revision is a full commit SHA, which names fixed files)."""
    if spec.model.volume is not None:
        return ("the model comes from a volume: a result is keyed on the served name, not "
                "the files; annotate llmops.dev/retune=<new value> after replacing them")
    revision = spec.model.revision
    if revision and _COMMIT.fullmatch(revision):
        return None
    name = f"revision {revision!r}" if revision else "no revision (the branch main)"
    return (f"{name} is a name that can move to new files on the hub: this result is keyed "
            "on the name, not the commit; pin spec.model.revision to a 40-character commit "
            "SHA, or annotate llmops.dev/retune=<new value> after the model is updated")
