"""Status (pure): conditions in the standard shape, the plan summary, the endpoint.

The reconciliation owns eight keys of ``status`` (:data:`OWNED_KEYS`):
``observedGeneration``, ``conditions``, ``plan``, ``engine``, ``endpoint``,
``inferencePool`` (the name of the InferencePool it wrote), and ``replicas`` and
``selector`` (what the scale subresource reports); the tuning
step owns ``tuning`` and the adaptation loop ``adaptation``. Each
pass builds them from what it learnt (:func:`build_status`) and writes them once, only
when they differ from what is stored (:func:`status_patch`). No clock is read here: the
caller passes ``now`` (seconds since the epoch).

Conditions (one :class:`ConditionType` enum) follow the Kubernetes convention
(``type``, ``status`` True/False/Unknown, ``reason`` in CamelCase, ``message``,
``observedGeneration``, ``lastTransitionTime``); :func:`set_condition` moves
``lastTransitionTime`` only when ``status`` changes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ..api.constants import DEFAULT_IMAGE, VLLM_PORT
from ..api.errors import SpecError
from ..api.models import AdaptationMode, EngineSpec, LLMServiceSpec
from ..api.timestamps import parse_rfc3339_or_none, rfc3339
from ..inpod.engine.cap import FAILURE_PREFIX
from ..knowledge.extra_args import flag_set
from ..knowledge.vllm_version import LiveCapSupport, LiveCapVerdict, live_cap_verdict
from ..planning import Plan, effective_engine_value
from ..rendering.admission import ENGINE_SCHEDULER_CLS, LIVE_CAP_FLAGS, uses_active_seqs_flag

JSON = dict[str, Any]
# replicas and selector: what the LLMService's scale subresource reports (an HPA reads them).
OWNED_KEYS = ("observedGeneration", "conditions", "plan", "engine", "endpoint",
              "inferencePool", "replicas", "selector")


class ConditionType(StrEnum):
    """Every condition the operator sets on an LLMService."""

    READY = "Ready"  # the vLLM workload serves every requested replica
    SPEC_VALID = "SpecValid"  # the spec can be served as written
    PLANNED = "Planned"  # a capacity and parallelism plan exists
    PROGRESSING = "Progressing"  # a rollout of the workload is under way
    AVAILABLE = "Available"  # at least one replica serves
    METRICS_AVAILABLE = "MetricsAvailable"  # Prometheus has the signals online adaptation needs
    TUNED = "Tuned"  # the batch settings come from a tuning run on this fingerprint
    PODS_SCHEDULED = "PodsScheduled"  # no server pod is Unschedulable (see podscheduling.py)
    CONTAINERS_RUNNING = "ContainersRunning"  # no server container crash-loops or is stuck
    PODS_CREATED = "PodsCreated"  # the workload's controller creates its pods (podscheduling)
    # every child the plan needs is written and every child it no longer needs deleted
    CHILDREN_APPLIED = "ChildrenApplied"
    # vLLM's prefix cache serves the shared prefix spec.workload.sharedPrefixTokens states
    PREFIX_CACHE_HITS = "PrefixCacheHits"
    LIVE_CAP = "LiveCap"  # adaptation changes the engine's admission cap without a rollout
    # the plan's predicted p95s meet spec.workload.slo (llm_operator.planning.sizing; estimated)
    SLO_ATTAINABLE = "SLOAttainable"
    # the InferencePool spec.routing.inferencePool asks for is written (see InferencePoolState)
    INFERENCE_POOL_READY = "InferencePoolReady"


class Reason(StrEnum):
    """The reasons of the conditions (CamelCase, for ``kubectl describe`` and alerts)."""

    VALID = "Valid"
    INVALID_SPEC = "InvalidSpec"
    PLAN_COMPUTED = "PlanComputed"
    FETCHING_MODEL_FACTS = "FetchingModelFacts"  # the facts Job reads config.json
    MODEL_FACTS_FAILED = "ModelFactsFailed"  # it could not (a wrong token, no such revision)
    NOT_PLANNED = "NotPlanned"
    API_MISSING = "APINotServed"
    WORKLOAD_MISSING = "WorkloadMissing"
    ROLLOUT_PENDING = "RolloutPending"
    ROLLING_OUT = "RollingOut"
    ROLLOUT_COMPLETE = "RolloutComplete"
    PROGRESS_DEADLINE_EXCEEDED = "ProgressDeadlineExceeded"
    REPLICAS_AVAILABLE = "ReplicasAvailable"
    NO_REPLICAS_AVAILABLE = "NoReplicasAvailable"
    SERVING = "Serving"
    WAITING_FOR_REPLICAS = "WaitingForReplicas"
    SCALED_TO_ZERO = "ScaledToZero"
    CHILDREN_APPLIED = "ChildrenApplied"
    APPLY_FAILED = "ApplyFailed"
    SWITCH_INCOMPLETE = "WorkloadSwitchIncomplete"
    TUNING_BEFORE_SERVING = "TuningBeforeServing"  # spec.tuning.placement BeforeServing
    SLO_PREDICTED_MET = "PredictedToMeetSLO"  # SLOAttainable True
    SLO_PREDICTED_MISSED = "NoPlanMeetsSLO"  # SLOAttainable False
    NO_PREDICTION = "NoPrediction"  # SLOAttainable Unknown: the model cannot predict it
    POOL_WRITTEN = "Written"  # InferencePoolReady True
    POOL_CRD_MISSING = "InferencePoolCRDMissing"  # the cluster does not serve the kind
    POOL_NOT_REQUESTED = "NotRequested"  # turned off: the pool was deleted


@dataclass(frozen=True)
class Notice:
    """An Event to post on the LLMService (``type`` Normal or Warning, a CamelCase
    ``reason`` a user can act on, and the message)."""

    type: str
    reason: str
    message: str


def _bool(value: bool) -> str:
    return "True" if value else "False"


def get_condition(conditions: Sequence[Mapping[str, Any]], ctype: str) -> Mapping[str, Any] | None:
    """The condition of type ``ctype`` or None."""
    return next((c for c in conditions if c.get("type") == str(ctype)), None)


def set_condition(
    conditions: Sequence[Mapping[str, Any]],
    ctype: ConditionType,
    status: bool | str,
    reason: str,
    message: str,
    *,
    generation: int | None,
    now: float,
) -> list[JSON]:
    """A new list of conditions with ``ctype`` set (others kept, order kept, new last).

    ``lastTransitionTime`` moves to ``now`` only when ``status`` changes (or the
    condition is new); reason, message and observedGeneration always update.
    """
    status_text = _bool(status) if isinstance(status, bool) else status
    return _put_condition(conditions,
                          _condition(ctype, status_text, reason, message, generation,
                                     rfc3339(now)))


def _condition(
    ctype: ConditionType, status: str, reason: str, message: str, generation: int | None,
    when: str,
) -> JSON:
    cond: JSON = {"type": str(ctype), "status": status, "reason": str(reason),
                  "message": message}
    if generation is not None:
        cond["observedGeneration"] = generation
    cond["lastTransitionTime"] = when
    return cond


def endpoint(name: str, namespace: str) -> str:
    """The OpenAI-compatible base URL of the service inside the cluster."""
    return f"http://{name}.{namespace}.svc:{VLLM_PORT}/v1"


# Where the extension's CRD comes from, for the fix of InferencePoolCRDMissing (the
# release the cluster tier installs, sandbox/llm_operator_sandbox/inference_extension.py).
INFERENCE_EXTENSION_RELEASE = "v1.6.2"
INFERENCE_EXTENSION_MANIFESTS = (
    "https://github.com/kubernetes-sigs/gateway-api-inference-extension/releases/download/"
    f"{INFERENCE_EXTENSION_RELEASE}/manifests.yaml")


@dataclass(frozen=True)
class InferencePoolState:
    """What one pass did about the InferencePool: ``wanted`` (the spec or the operator's
    default asks for one), its ``name``, ``summary`` (what it selects, targets and names,
    in words), and when it could not be written, ``missing_crd`` (the cluster does not
    serve the kind) or ``failure`` (the apply's error)."""

    wanted: bool
    name: str
    summary: str = ""
    missing_crd: bool = False
    failure: str | None = None

    @property
    def written(self) -> bool:
        return self.wanted and not self.missing_crd and self.failure is None


def inference_pool_status(
    conditions: Sequence[Mapping[str, Any]], pool: InferencePoolState, *, namespace: str,
    generation: int | None, now: float,
) -> tuple[list[JSON], str | None]:
    """The conditions with InferencePoolReady for ``pool``, and ``status.inferencePool``
    (the pool's name once written, else None). A service that never asked for a pool gets
    no such condition; one that turns it off gets ``NotRequested`` (its pool is deleted)."""
    conds = [dict(c) for c in conditions]
    ctype, g = ConditionType.INFERENCE_POOL_READY, generation
    where = f"InferencePool {namespace}/{pool.name}"
    if not pool.wanted:
        if get_condition(conds, ctype) is None:
            return conds, None
        return set_condition(conds, ctype, False, Reason.POOL_NOT_REQUESTED,
                             "spec.routing.inferencePool is off (or left to the operator's "
                             "default, which is off): no InferencePool; the one rendered "
                             "before is deleted", generation=g, now=now), None
    if pool.missing_crd:
        return set_condition(
            conds, ctype, False, Reason.POOL_CRD_MISSING,
            f"{where} cannot be written: the cluster does not serve InferencePool "
            "(inference.networking.k8s.io/v1). Fix: install the Gateway API Inference "
            f"Extension's CRDs (kubectl apply -f {INFERENCE_EXTENSION_MANIFESTS}, or your "
            "Inference Gateway's own install), or set spec.routing.inferencePool.enabled: "
            "false; the operator retries every minute, and the Service serves meanwhile",
            generation=g, now=now), None
    if pool.failure is not None:
        return set_condition(conds, ctype, False, Reason.APPLY_FAILED,
                             f"{where} cannot be written: {pool.failure}; retrying",
                             generation=g, now=now), None
    return set_condition(conds, ctype, True, Reason.POOL_WRITTEN,
                         f"{where} is written: {pool.summary}. Route to it with an HTTPRoute "
                         "backendRef (group inference.networking.k8s.io, kind InferencePool); "
                         "whether a Gateway accepted it is in the pool's status.parents",
                         generation=g, now=now), pool.name


def plan_summary(plan: Plan) -> JSON:
    """``status.plan``: the chosen numbers (camelCase, for printer columns) and why."""
    summary: JSON = {
        "modelName": plan.model_name,
        "gpuProduct": plan.gpu_product,
        "gpuMemoryBytes": plan.gpu_memory_bytes,
        "tensorParallelSize": plan.tensor_parallel_size,
        "pipelineParallelSize": plan.pipeline_parallel_size,
        "gpusPerReplica": plan.gpus_per_replica,
        "nodesPerReplica": plan.nodes_per_replica,
        "maxModelLen": plan.max_model_len,
        "maxNumSeqs": plan.max_num_seqs,
        "kvTokenCapacity": plan.kv_token_capacity,
        "kvBytesPerToken": plan.kv_bytes_per_token,
        "weightBytesPerGpu": plan.weight_bytes_per_gpu,
        "explanations": [
            {"name": e.name, "value": e.value, "source": e.source, "formula": e.formula}
            for e in plan.explanations
        ],
    }
    if plan.max_num_batched_tokens is not None:
        summary["maxNumBatchedTokens"] = plan.max_num_batched_tokens
    if plan.decode_context_parallel_size > 1:
        summary["decodeContextParallelSize"] = plan.decode_context_parallel_size
    if plan.warnings:
        summary["warnings"] = list(plan.warnings)
    if plan.adjustments:
        summary["adjustments"] = list(plan.adjustments)
    if plan.fact_sources:
        summary["factSources"] = dict(plan.fact_sources)
    if plan.start_max_num_seqs:
        summary["startMaxNumSeqs"] = plan.start_max_num_seqs
    if plan.slo:
        summary["slo"] = dict(plan.slo)
    return summary


def slo_condition(plan: Plan) -> tuple[str, Reason, str] | None:
    """``SLOAttainable`` from the plan's SLO sizing (:mod:`llm_operator.planning.sizing`): True when
    the predicted p95s meet ``spec.workload.slo``, False with the closest figures and the
    fixes, Unknown where the model cannot predict; None: the plan was not sized."""
    slo = plan.slo
    if not slo:
        return None
    if not slo.get("sized"):
        return ("Unknown", Reason.NO_PREDICTION,
                f"the performance model cannot predict this replica: {slo.get('reason')}")
    p, goal = slo["predicted"], slo["objective"]
    figures = (f"TTFT p95 {p['ttftP95Ms']:,.0f} ms, ITL p95 {p['itlP95Ms']:,.1f} ms at "
               f"{slo['concurrencyPerReplica']} clients per replica with --max-num-seqs "
               f"{p['maxNumSeqs']} --max-num-batched-tokens {p['maxNumBatchedTokens']} "
               f"(estimated; objective TTFT p95 {goal['ttftP95Ms']:,g} ms, ITL p95 "
               f"{goal['itlP95Ms']:,g} ms)")
    if slo.get("attainable"):
        return ("True", Reason.SLO_PREDICTED_MET,
                f"predicted {figures}; layout by {slo['layoutBy']}")
    return ("False", Reason.SLO_PREDICTED_MISSED,
            f"no plan is predicted to meet the SLO: closest {figures}. Fix: "
            + "; or ".join(slo.get("fixes") or []) + f". {slo.get('errorBand', '')}")


def adjustments_message(plan: Plan) -> str:
    """The engine settings the planner set otherwise than asked so that vLLM starts, in
    one line for an Event (empty: none)."""
    return "; ".join(plan.adjustments)


def plan_message(plan: Plan) -> str:
    """One line for the Planned condition and Event."""
    return (
        f"{plan.model_name} on {plan.gpus_per_replica} x {plan.gpu_product} per replica: "
        f"tensor-parallel {plan.tensor_parallel_size}, pipeline-parallel "
        f"{plan.pipeline_parallel_size}"
        + (f", decode-context-parallel {plan.decode_context_parallel_size}"
           if plan.decode_context_parallel_size > 1 else "")
        + f", max-model-len {plan.max_model_len}, "
        f"max-num-seqs {plan.max_num_seqs}, KV capacity {plan.kv_token_capacity} tokens"
    )


def errors_message(errors: Sequence[SpecError]) -> str:
    """All spec errors in one message: ``field: problem. Fix: fix`` joined by ``; ``."""
    return "; ".join(str(e) for e in errors)


@dataclass(frozen=True)
class WorkloadState:
    """What the workload's status says (Deployment or LeaderWorkerSet), reduced."""

    exists: bool
    desired: int
    available: int = 0
    updated: int | None = None
    generation: int | None = None
    observed_generation: int | None = None
    replicas: int = 0  # pods (groups for a LeaderWorkerSet) its controller runs now
    # The Deployment controller's message when the rollout missed its progress deadline
    # (Progressing=False, reason ProgressDeadlineExceeded); None otherwise.
    stalled: str | None = None

    @classmethod
    def from_object(cls, obj: Mapping[str, Any] | None, desired: int) -> WorkloadState:
        """Read a Deployment's or LeaderWorkerSet's status (pure)."""
        if obj is None:
            return cls(exists=False, desired=desired)
        status = obj.get("status") or {}
        available = status.get("availableReplicas")
        if available is None:
            available = status.get("readyReplicas", 0)  # LeaderWorkerSet reports groups ready
        return cls(
            exists=True,
            desired=desired,
            available=int(available or 0),
            updated=status.get("updatedReplicas"),
            generation=(obj.get("metadata") or {}).get("generation"),
            observed_generation=status.get("observedGeneration"),
            replicas=int(status.get("replicas") or 0),
            stalled=_deadline_exceeded(status.get("conditions") or []),
        )

    @property
    def rollout_pending(self) -> bool:
        """The workload's controller has not yet seen its latest spec."""
        return (self.generation is not None and self.observed_generation is not None
                and self.observed_generation < self.generation)

    @property
    def rolled_out(self) -> bool:
        """Every desired replica runs the latest spec (as far as the status tells)."""
        return not self.rollout_pending and (self.updated is None or self.updated >= self.desired)


def _deadline_exceeded(conditions: Sequence[Mapping[str, Any]]) -> str | None:
    """The message of a Progressing=False/ProgressDeadlineExceeded condition, else None."""
    for cond in conditions:
        if (cond.get("type") == "Progressing" and cond.get("status") == "False"
                and cond.get("reason") == Reason.PROGRESS_DEADLINE_EXCEEDED):
            return str(cond.get("message") or "the rollout missed its progress deadline")
    return None


def workload_conditions(
    conditions: Sequence[Mapping[str, Any]], state: WorkloadState, *, kind: str, name: str,
    generation: int | None, now: float,
) -> list[JSON]:
    """Set Progressing, Available and Ready from the workload's state."""
    what = f"{kind} {name}"
    if not state.exists:
        conds = set_condition(conditions, ConditionType.PROGRESSING, True,
                              Reason.WORKLOAD_MISSING, f"{what} is being created",
                              generation=generation, now=now)
        conds = set_condition(conds, ConditionType.AVAILABLE, False, Reason.WORKLOAD_MISSING,
                              f"{what} does not exist yet", generation=generation, now=now)
        return set_condition(conds, ConditionType.READY, False, Reason.WORKLOAD_MISSING,
                             f"{what} does not exist yet", generation=generation, now=now)
    if state.rollout_pending:
        prog = (True, Reason.ROLLOUT_PENDING, f"{what} has a new spec its controller has not "
                "picked up yet")
    elif state.stalled and (not state.rolled_out or state.available < state.desired):
        prog = (False, Reason.PROGRESS_DEADLINE_EXCEEDED, f"{what}: the rollout did not "
                f"complete in time ({state.stalled}); {state.updated or 0} of {state.desired} "
                f"replicas updated, {state.available} available: see kubectl describe on its "
                "pods (Pending for GPUs, a crash loop, a failed download)")
    elif not state.rolled_out or state.available < state.desired:
        prog = (True, Reason.ROLLING_OUT, f"{what}: {state.updated or 0} of {state.desired} "
                f"replicas updated, {state.available} available")
    else:
        prog = (False, Reason.ROLLOUT_COMPLETE, f"{what}: all {state.desired} replicas updated "
                "and available")
    conds = set_condition(conditions, ConditionType.PROGRESSING, prog[0], prog[1], prog[2],
                          generation=generation, now=now)
    if state.available > 0:
        conds = set_condition(conds, ConditionType.AVAILABLE, True, Reason.REPLICAS_AVAILABLE,
                              f"{state.available} of {state.desired} replicas available",
                              generation=generation, now=now)
    else:
        conds = set_condition(conds, ConditionType.AVAILABLE, False,
                              Reason.NO_REPLICAS_AVAILABLE, f"no replica of {what} is available",
                              generation=generation, now=now)
    if state.desired == 0:
        ready = (False, Reason.SCALED_TO_ZERO, "spec.replicas is 0: nothing serves")
    elif state.available >= state.desired and state.rolled_out:
        ready = (True, Reason.SERVING, f"{state.available} of {state.desired} replicas serve")
    else:
        ready = (False, Reason.WAITING_FOR_REPLICAS,
                 f"{state.available} of {state.desired} replicas available")
    return set_condition(conds, ConditionType.READY, ready[0], ready[1], ready[2],
                         generation=generation, now=now)


# LeaderWorkerSet's Event when a pod of a group restarts and it recreates the whole group
# (``RecreateGroupOnPodRestart``, the restart policy the operator renders): the reason
# and what the pod controller of LWS v0.7 posts on the LeaderWorkerSet.
GROUP_RECREATED_REASON = "RecreateGroupOnPodRestart"
# How long such an Event explains a group that is not available: longer than a group of
# a large model takes to load again is not needed, since it is said only while the
# LeaderWorkerSet has fewer groups available than desired.
GROUP_RECREATED_WINDOW_S = 3600.0


def group_recreated_note(events: Sequence[Mapping[str, Any]], now: float) -> str | None:
    """What the latest :data:`GROUP_RECREATED_REASON` Event of a LeaderWorkerSet says, with
    its time, when within :data:`GROUP_RECREATED_WINDOW_S` of ``now``; None otherwise."""
    latest: tuple[float, str] | None = None
    for ev in events:
        if ev.get("reason") != GROUP_RECREATED_REASON:
            continue
        meta = ev.get("metadata") or {}
        when = next((t for t in (parse_rfc3339_or_none(ev.get(k)) for k in (
            "lastTimestamp", "eventTime", "firstTimestamp")) if t is not None), None)
        if when is None:
            when = parse_rfc3339_or_none(meta.get("creationTimestamp"))
        if when is None or now - when > GROUP_RECREATED_WINDOW_S:
            continue
        if latest is None or when > latest[0]:
            latest = (when, str(ev.get("message") or "").strip().rstrip("."))
    if latest is None:
        return None
    return (f"at {rfc3339(latest[0])} the LeaderWorkerSet recreated a group because one of "
            f"its pods restarted ({latest[1]}): every node of that group loads the model "
            "and joins again")


def with_group_recreated(conditions: Sequence[Mapping[str, Any]], note: str | None, *,
                         generation: int | None, now: float) -> list[JSON]:
    """``conditions`` with ``note`` added to the message of Available and Ready where they
    are False (a group of a LeaderWorkerSet is down because LWS recreated it)."""
    conds = [dict(c) for c in conditions]
    if not note:
        return conds
    for ctype in (ConditionType.AVAILABLE, ConditionType.READY):
        cond = get_condition(conds, ctype)
        if cond is None or cond.get("status") != "False" or note in str(cond.get("message")):
            continue
        conds = set_condition(conds, ctype, False, str(cond.get("reason")),
                              f"{cond.get('message')}; {note}", generation=generation, now=now)
    return conds


def build_status(
    current: Mapping[str, Any] | None,
    *,
    name: str,
    namespace: str,
    generation: int | None,
    now: float,
    plan: Plan | None = None,
    errors: Sequence[SpecError] = (),
    workload: WorkloadState | None = None,
    workload_kind: str = "Deployment",
    missing_api: str | None = None,
    engine: JSON | None = None,
    selector: str | None = None,
    apply_failures: Sequence[str] = (),
    switch_incomplete: str | None = None,
    held: str | None = None,
    facts: tuple[Reason, str] | None = None,
    inference_pool: InferencePoolState | None = None,
) -> JSON:
    """The operator's keys of ``status`` after one pass (pure).

    ``engine``: the engine values in effect (see :func:`engine_in_effect`).
    ``selector``: the label selector of the serving pods (``status.selector``, for the
    scale subresource); ``status.replicas`` comes from ``workload``.
    ``apply_failures`` (children that could not be written or deleted) and
    ``switch_incomplete`` (the workload kind changed and the old one still exists) set
    ChildrenApplied False; a pass with neither sets it True.

    ``errors``: the spec cannot be served (SpecValid False, Ready False, the old plan is
    dropped). ``missing_api``: a kind the plan needs is not served by the cluster.
    ``held``: why the workload is not created yet (a first tuning run goes before it:
    Ready False, reason ``TuningBeforeServing``).
    ``facts``: the model's config.json is being read, or could not be (reason
    ``FetchingModelFacts`` or ``ModelFactsFailed``, and the message): Planned False; Ready
    False too while no plan was ever made (a workload planned before serves on).
    Otherwise the plan and the workload's state set the other conditions.
    ``inference_pool``: what the pass did about the InferencePool (InferencePoolReady and
    ``status.inferencePool``, see :func:`inference_pool_status`); None leaves both as
    they are.
    """
    current = current or {}
    conds: list[JSON] = [dict(c) for c in current.get("conditions") or []]
    g = generation
    status: JSON = {"observedGeneration": generation, "endpoint": endpoint(name, namespace)}
    if errors:
        msg = errors_message(errors)
        conds = set_condition(conds, ConditionType.SPEC_VALID, False, Reason.INVALID_SPEC, msg,
                              generation=g, now=now)
        conds = set_condition(conds, ConditionType.PLANNED, False, Reason.INVALID_SPEC,
                              "the spec must be fixed before a plan can be made",
                              generation=g, now=now)
        conds = set_condition(conds, ConditionType.READY, False, Reason.INVALID_SPEC, msg,
                              generation=g, now=now)
        status["conditions"] = conds
        status["plan"] = None  # the last plan does not describe this spec
        status["engine"] = None
        return status
    conds = set_condition(conds, ConditionType.SPEC_VALID, True, Reason.VALID,
                          "the spec can be served as written", generation=g, now=now)
    if facts is not None:
        reason, msg = facts
        conds = set_condition(conds, ConditionType.PLANNED, False, reason, msg,
                              generation=g, now=now)
        if not current.get("plan"):
            conds = set_condition(conds, ConditionType.READY, False, reason, msg,
                                  generation=g, now=now)
        status["conditions"] = conds
        return status
    if plan is not None:
        conds = set_condition(conds, ConditionType.PLANNED, True, Reason.PLAN_COMPUTED,
                              plan_message(plan), generation=g, now=now)
        slo = slo_condition(plan)
        if slo is not None:
            conds = set_condition(conds, ConditionType.SLO_ATTAINABLE, slo[0], slo[1], slo[2],
                                  generation=g, now=now)
        status["plan"] = plan_summary(plan)
    if engine is not None:
        status["engine"] = engine
    if selector is not None:
        status["selector"] = selector
    if workload is not None and workload.exists:
        status["replicas"] = workload.replicas
    if inference_pool is not None:
        conds, status["inferencePool"] = inference_pool_status(
            conds, inference_pool, namespace=namespace, generation=g, now=now)
    if switch_incomplete is not None:
        conds = set_condition(conds, ConditionType.CHILDREN_APPLIED, False,
                              Reason.SWITCH_INCOMPLETE, switch_incomplete, generation=g,
                              now=now)
    elif apply_failures:
        conds = set_condition(conds, ConditionType.CHILDREN_APPLIED, False,
                              Reason.APPLY_FAILED, "; ".join(apply_failures), generation=g,
                              now=now)
    elif plan is not None and missing_api is None:
        conds = set_condition(conds, ConditionType.CHILDREN_APPLIED, True,
                              Reason.CHILDREN_APPLIED, "every child matches the plan",
                              generation=g, now=now)
    if missing_api is not None:
        conds = set_condition(conds, ConditionType.READY, False, Reason.API_MISSING,
                              missing_api, generation=g, now=now)
    elif held is not None:
        conds = set_condition(conds, ConditionType.READY, False, Reason.TUNING_BEFORE_SERVING,
                              held, generation=g, now=now)
    elif workload is not None:
        conds = workload_conditions(conds, workload, kind=workload_kind, name=name,
                                    generation=g, now=now)
    status["conditions"] = conds
    return status


def status_patch(current: Mapping[str, Any] | None, desired: Mapping[str, Any]) -> JSON:
    """The merge patch of ``status`` that turns ``current`` into ``desired`` for the keys
    the operator owns; empty when nothing differs (then nothing is written).

    Keys absent from ``desired`` are left alone; a key set to None in ``desired`` (the
    ``plan`` of a spec that became invalid) is removed.
    """
    current = current or {}
    patch: JSON = {}
    for key in OWNED_KEYS:
        if key not in desired:
            continue
        if desired[key] is None:
            if current.get(key) is not None:
                patch[key] = None
        elif current.get(key) != desired[key]:
            patch[key] = desired[key]
    return patch


def rebase_patch(
    patch: Mapping[str, Any], base: Mapping[str, Any] | None, fresh: Mapping[str, Any] | None
) -> JSON:
    """A status ``patch`` computed against ``base``, made to apply to ``fresh`` (the
    status as stored now, maybe written by another handler since ``base`` was read).

    Conditions: only those the patch changed with respect to ``base`` are set, in
    ``fresh``'s list (others' conditions are kept; ``lastTransitionTime`` stays ``fresh``'s
    when the status did not change there); a type ``base`` had and the patch dropped is
    removed from ``fresh`` where it is still as ``base`` had it. Other keys are taken from
    the patch. Keys that already hold the patched value are left out; an empty result
    means nothing to write.
    """
    base, fresh = base or {}, fresh or {}
    out: JSON = {}
    for key, value in patch.items():
        if key == "conditions":
            conds = [dict(c) for c in fresh.get("conditions") or []]
            before = base.get("conditions") or []
            kept = {c.get("type") for c in value or []}
            conds = [c for c in conds if c.get("type") in kept
                     or get_condition(before, str(c.get("type"))) != c]
            for cond in value or []:
                if get_condition(before, str(cond.get("type"))) == cond:
                    continue  # not this writer's change
                conds = _put_condition(conds, cond)
            if conds != list(fresh.get("conditions") or []):
                out[key] = conds
        elif value is None:
            if fresh.get(key) is not None:
                out[key] = None
        elif fresh.get(key) != value:
            out[key] = value
    return out


def _put_condition(conditions: Sequence[Mapping[str, Any]], cond: Mapping[str, Any]
                   ) -> list[JSON]:
    """``conditions`` with ``cond`` in place of the one of its type (appended when new),
    keeping the stored ``lastTransitionTime`` when the status did not change."""
    result: list[JSON] = []
    found = False
    for old in conditions:
        if old.get("type") != cond.get("type"):
            result.append(dict(old))
            continue
        found = True
        new = dict(cond)
        if old.get("status") == cond.get("status") and old.get("lastTransitionTime"):
            new["lastTransitionTime"] = old["lastTransitionTime"]
        result.append(new)
    if not found:
        result.append(dict(cond))
    return result


def condition_status(status: Mapping[str, Any] | None, ctype: ConditionType) -> str | None:
    """``"True"``/``"False"``/``"Unknown"`` of one condition in a status, or None."""
    cond = get_condition((status or {}).get("conditions") or [], ctype)
    return None if cond is None else str(cond.get("status"))


def engine_overrides(status: Mapping[str, Any] | None) -> dict[str, int]:
    """The engine values tuning and adaptation have set, as render overrides.

    ``status.tuning.applied`` holds what the last successful tuning run chose
    (``maxNumSeqs``, ``maxNumBatchedTokens``); ``status.adaptation.maxNumSeqs`` is the cap
    the online controller moved to in Apply mode, and wins for ``maxNumSeqs`` since it
    acts on the live service after tuning. The renderer applies an override only where
    the user left the field to ``auto``: a pin always wins.
    """
    status = status or {}
    out: dict[str, int] = {}
    applied = (status.get("tuning") or {}).get("applied") or {}
    for key in ("maxNumSeqs", "maxNumBatchedTokens"):
        if isinstance(applied.get(key), int) and applied[key] > 0:
            out[key] = applied[key]
    adapted = (status.get("adaptation") or {}).get("maxNumSeqs")
    if isinstance(adapted, int) and adapted > 0:
        out["maxNumSeqs"] = adapted
    return out


_ACTIVE_PAIR = re.compile(r"--max-num-seqs[= ]+(\d+) --max-num-active-seqs[= ]+\d+")
_SEQS_ARG = re.compile(r"--max-num-seqs[= ]+(\d+)")


def cap_flag(workload: Mapping[str, Any]) -> tuple[str, int | None]:
    """What carries the cap in a rendered workload (its first pod template), and the
    ``--max-num-seqs`` where that is not the cap: ``admissionConfigMap`` (the live cap's
    scheduler class), ``--max-num-active-seqs`` (rendered right after ``--max-num-seqs``:
    ``planning.engine_flags``), else ``--max-num-seqs`` (pure)."""
    spec = workload.get("spec") or {}
    lws = spec.get("leaderWorkerTemplate") or {}
    template = spec.get("template") or lws.get("leaderTemplate") or {}
    words = [str(w) for c in (template.get("spec") or {}).get("containers") or []
             for w in [*(c.get("command") or []), *(c.get("args") or [])]]
    text = " ".join(words)
    pair = _ACTIVE_PAIR.search(text)
    if ENGINE_SCHEDULER_CLS in words:
        seqs = _SEQS_ARG.search(text)
        return "admissionConfigMap", int(seqs.group(1)) if seqs else None
    if pair is not None:
        return "--max-num-active-seqs", int(pair.group(1))
    return "--max-num-seqs", None


def engine_in_effect(engine: EngineSpec, plan: Plan, status: Mapping[str, Any] | None,
                     workload: Mapping[str, Any] | None = None) -> JSON:
    """The tunable engine values the rendered server runs with, and where each came
    from: ``pinned`` (the user), ``adapted`` (online adaptation), ``tuned`` (the last
    tuning run) or ``planned``. ``kubectl get llms`` shows ``maxNumSeqs`` from here.
    A value of None means vLLM's own default. With the rendered ``workload``, also what
    carries the cap (``maxNumSeqsFlag``, :func:`cap_flag`) and the ``--max-num-seqs`` where
    it is not the cap (``runnerMaxNumSeqs``), so that a user sees why a change of the cap
    left ``--max-num-seqs`` as it was.
    """
    overrides = engine_overrides(status)
    adapted = (status or {}).get("adaptation") or {}
    out: JSON = {}
    for key, planned in (("maxNumSeqs", plan.start_seqs),
                         ("maxNumBatchedTokens", plan.max_num_batched_tokens)):
        value, origin = effective_engine_value(engine, key, planned, overrides)
        if origin == "override":
            origin = "adapted" if key == "maxNumSeqs" and adapted.get("maxNumSeqs") else "tuned"
        out[key] = value
        out[f"{key}Source"] = origin
    if workload is not None:
        flag, runner = cap_flag(workload)
        out["maxNumSeqsFlag"] = flag
        if runner is not None:
            out["runnerMaxNumSeqs"] = runner
        elif "runnerMaxNumSeqs" in ((status or {}).get("engine") or {}):
            out["runnerMaxNumSeqs"] = None  # a merge patch removes it so
    return out


# MetricsAvailable's reason when the operator has no Prometheus to read (the adaptation
# loop, which owns the condition otherwise, does not run).
PROMETHEUS_NOT_CONFIGURED = "PrometheusNotConfigured"


def no_prometheus_message(spec: LLMServiceSpec) -> str | None:
    """Why the adaptation ``spec.adaptation.mode`` asks for cannot run when the operator
    has no Prometheus URL, with the fix (None: the mode is Disabled, nothing was asked)."""
    mode = spec.adaptation.mode
    if mode is AdaptationMode.DISABLED:
        return None
    what = ("no admission cap is rendered and max-num-seqs holds at its tuned or planned "
            "value" if mode is AdaptationMode.APPLY else "no recommendation is made")
    return (f"spec.adaptation.mode is {mode.value}, but the operator has no Prometheus URL "
            f"to read vLLM's series from, so {what}: set the chart's settings.prometheusUrl "
            "(LLMOP_PROMETHEUS_URL; with kube-prometheus-stack "
            "http://RELEASE-kube-prometheus-prometheus.NAMESPACE:9090) and "
            "settings.podMonitorLabels (release: RELEASE) so that its Prometheus scrapes "
            "the PodMonitor; or set spec.adaptation.mode: Disabled")


def with_no_prometheus(status: JSON, spec: LLMServiceSpec, generation: int | None,
                       now: float) -> JSON:
    """``status`` with ``MetricsAvailable`` False, reason
    :data:`PROMETHEUS_NOT_CONFIGURED`, where adaptation is asked for and the operator
    has no Prometheus URL (pure)."""
    message = no_prometheus_message(spec)
    if message is None:
        return status
    conds = set_condition(status.get("conditions") or [], ConditionType.METRICS_AVAILABLE,
                          False, PROMETHEUS_NOT_CONFIGURED, message, generation=generation,
                          now=now)
    return {**status, "conditions": conds}


class LiveCapReason(StrEnum):
    """Reasons of the ``LiveCap`` condition."""

    REPORTED = "EngineReportsCap"  # the engine reports the cap the operator requested
    PENDING = "CapPending"  # written to the ConfigMap; the engine has not reported it yet
    OPTED_OUT = "OptedOut"  # spec.adaptation.liveCap is false
    OWN_SCHEDULER = "SchedulerInExtraArgs"  # extraArgs set --scheduler-cls or the active cap
    MULTI_NODE = "MultiNode"  # one replica spans nodes (LeaderWorkerSet): not wired yet
    NO_HOOK = "EngineLacksHook"  # the engine reports it cannot change the cap live
    NO_REPORT = "EngineDidNotReport"  # no report of a requested cap within the timeout
    SCHEDULER_FAILED = "SchedulerFailed"  # a server pod crash-loops on the scheduler itself
    VERSION = "VllmVersionUnsupported"  # the image's tag names a vLLM the cap does not work on


def live_cap_version(spec: LLMServiceSpec, default_image: str = DEFAULT_IMAGE
                     ) -> LiveCapVerdict:
    """What the server image's tag says of the live cap
    (:mod:`llm_operator.knowledge.vllm_version`): ``spec.image``, else ``default_image``
    (the operator's ``LLMOP_DEFAULT_IMAGE``)."""
    if spec.image:
        return live_cap_verdict(spec.image, "spec.image", example=default_image)
    return live_cap_verdict(default_image, "the operator's default image "
                            "(LLMOP_DEFAULT_IMAGE, spec.image being unset)",
                            example=default_image)


def active_cap_note(spec: LLMServiceSpec, default_image: str = DEFAULT_IMAGE) -> str:
    """What carries the cap when the live cap is off, for the ``LiveCap`` condition's
    message: where the image's vLLM takes ``--max-num-active-seqs``
    (:func:`~llm_operator.rendering.admission.uses_active_seqs_flag`), a sentence saying
    that the cap travels as that flag and why ``--max-num-seqs`` does not change; else
    nothing."""
    if isinstance(spec.engine.max_num_seqs, int) or not uses_active_seqs_flag(
            spec, default_image, live_cap=False):
        return ""
    return (". A cap below the runner's capacity is rendered as --max-num-active-seqs "
            f"(the vLLM of {spec.image or default_image} takes it): --max-num-seqs stays "
            "the plan's capacity (status.engine.runnerMaxNumSeqs), so a rollout of a new "
            "cap does not resize the runner's buffers or CUDA graphs")


def live_cap_blocker(spec: LLMServiceSpec, status: Mapping[str, Any] | None,
                     generation: int | None = None, *, default_image: str = DEFAULT_IMAGE
                     ) -> tuple[LiveCapReason, str] | None:
    """Why adaptation must roll instead of steering the cap live (None: live works), the
    message ending with :func:`active_cap_note`: :func:`_live_cap_blocker`."""
    blocker = _live_cap_blocker(spec, status, generation, default_image=default_image)
    if blocker is None:
        return None
    note = active_cap_note(spec, default_image)
    return (blocker[0], blocker[1].rstrip(".") + note) if note else blocker


def _live_cap_blocker(spec: LLMServiceSpec, status: Mapping[str, Any] | None,
                      generation: int | None = None, *, default_image: str = DEFAULT_IMAGE
                      ) -> tuple[LiveCapReason, str] | None:
    """Why adaptation must roll instead of steering the cap live (None: live works).

    The user's opt-out (``spec.adaptation.liveCap: false``), a scheduler of the user's own
    in ``extraArgs``, a replica over several nodes (``status.plan``), an image whose tag
    names a vLLM the live cap does not work on (:func:`live_cap_version`;
    ``default_image`` when ``spec.image`` is unset), or a fallback the
    adaptation loop recorded in ``status.adaptation.liveCapFallback`` for this generation
    of the spec (an engine that lacks the hook or never reported the cap; editing the
    spec, e.g. the image, retries).
    """
    if not spec.adaptation.live_cap:
        return LiveCapReason.OPTED_OUT, "spec.adaptation.liveCap is false: every change rolls"
    flag = flag_set(spec.engine.extra_args, LIVE_CAP_FLAGS)
    if flag is not None:
        return LiveCapReason.OWN_SCHEDULER, (
            f"spec.engine.extraArgs sets {flag}: the operator's admission scheduler is "
            "not used and every change rolls; remove the flag to steer the cap live")
    nodes = ((status or {}).get("plan") or {}).get("nodesPerReplica")
    if isinstance(nodes, int) and nodes > 1:
        return LiveCapReason.MULTI_NODE, (
            "one replica spans nodes (a LeaderWorkerSet): the live admission cap is wired "
            "for single-node replicas only, so every change rolls")
    version = live_cap_version(spec, default_image)
    if version.support is LiveCapSupport.UNSUPPORTED:
        return LiveCapReason.VERSION, version.message
    fallback = ((status or {}).get("adaptation") or {}).get("liveCapFallback") or {}
    if fallback.get("reason") and (generation is None or fallback.get("generation") is None
                                   or fallback.get("generation") == generation):
        return LiveCapReason(fallback["reason"]), str(fallback.get("message") or "")
    return None


def cap_pending_message(version: LiveCapVerdict) -> str:
    """The ``LiveCap`` message (True, ``CapPending``) while no engine reports its cap yet:
    what the image's tag says of the live cap, then that no report came. The render and
    the adaptation loop both write it, in the same words, whichever comes last."""
    return f"{version.message}. No engine reports its admission cap yet (llmop_admission_cap)"


def with_live_cap_version(status: JSON, spec: LLMServiceSpec, generation: int | None,
                          now: float, *, default_image: str = DEFAULT_IMAGE,
                          adaptation_runs: bool = True) -> JSON:
    """``status`` with ``LiveCap`` False, reason :attr:`LiveCapReason.VERSION`, where the
    service would run the live cap but for its image's vLLM (pure): said when the server
    is rendered, before the adaptation loop's first tick (which says the same).

    Once the spec no longer gives that reason (a new image), a ``LiveCap`` still saying
    it is replaced at the same render: by the other reason that keeps the live cap off,
    else True :attr:`LiveCapReason.PENDING` (rendered, no engine report yet); where the
    live cap is not asked for at all (Recommend, a pinned cap), it is removed."""
    conditions = list(status.get("conditions") or [])
    before = get_condition(conditions, ConditionType.LIVE_CAP)
    stale = before is not None and before.get("reason") == str(LiveCapReason.VERSION)
    asked = (adaptation_runs and spec.adaptation.mode is AdaptationMode.APPLY
             and not isinstance(spec.engine.max_num_seqs, int))
    blocker = live_cap_blocker(spec, status, generation, default_image=default_image) \
        if asked else None
    if blocker is not None and (blocker[0] is LiveCapReason.VERSION or stale):
        conds = set_condition(conditions, ConditionType.LIVE_CAP, False, str(blocker[0]),
                              blocker[1], generation=generation, now=now)
    elif not stale:
        return status
    elif not asked:
        conds = [c for c in conditions if c.get("type") != str(ConditionType.LIVE_CAP)]
    else:
        conds = set_condition(conditions, ConditionType.LIVE_CAP, True,
                              str(LiveCapReason.PENDING),
                              cap_pending_message(live_cap_version(spec, default_image)),
                              generation=generation, now=now)
    return {**status, "conditions": conds}


def live_cap_crash_fallback(spec: LLMServiceSpec, status: Mapping[str, Any] | None,
                            generation: int | None, pod: str, failure: str) -> JSON | None:
    """The ``status.adaptation`` that turns the live cap off for this ``generation`` of the
    spec because server ``pod`` crash-loops on the admission scheduler's own ``failure``
    (its ``llmop-live-cap:`` line, :func:`llm_operator.health.podscheduling.live_cap_failure`);
    None when something already keeps the live cap off (:func:`live_cap_blocker`).

    Reversible: the fallback holds for this generation only, so an edit of the spec (a
    new image, say) renders the live cap again."""
    if live_cap_blocker(spec, status, generation) is not None:
        return None
    said = failure.strip().removeprefix(FAILURE_PREFIX).strip().rstrip(".")
    message = (f"Server pod {pod} crash-loops on the live admission cap's scheduler: "
               f"{said}. The live cap is off for this "
               "generation of the spec: vLLM runs with its own scheduler, and changes to "
               "--max-num-seqs roll the pods. An edit of the spec (e.g. the image) tries the "
               "live cap again.")
    adaptation = dict((status or {}).get("adaptation") or {})
    adaptation.update(
        liveCapFallback={"reason": str(LiveCapReason.SCHEDULER_FAILED), "message": message,
                         "generation": generation},
        actuation="Rollout", capRequested=None, capRequestedTime=None)  # None: removed
    return adaptation


def live_cap_in_use(spec: LLMServiceSpec, status: Mapping[str, Any] | None,
                    generation: int | None = None, *, adaptation_runs: bool = True,
                    default_image: str = DEFAULT_IMAGE) -> bool:
    """Whether the server is rendered with the live admission cap: adaptation in ``Apply``
    mode on a cap left to ``auto``, an operator that can run it (``adaptation_runs``: it
    has a Prometheus URL; without one nothing would move the cap, and the scheduler class
    in the pod would be a risk with no benefit), and nothing blocks it
    (:func:`live_cap_blocker`)."""
    return (adaptation_runs and spec.adaptation.mode is AdaptationMode.APPLY
            and not isinstance(spec.engine.max_num_seqs, int)
            and live_cap_blocker(spec, status, generation,
                                 default_image=default_image) is None)
