"""Online adaptation, operator side: one background loop for all LLMServices.

The policy is pure (:mod:`llm_operator.adaptation`), Prometheus I/O lives in
:mod:`llm_operator.prometheus`; this module only schedules, fetches, calls the policy and
writes. The pure parts (which services are due, the current cap, how a decision becomes
a status patch and Events) are plain functions, tested in
``tests/unit/test_adaptation_loop.py``; :class:`AdaptationLoop` carries them out.

Why one loop rather than a kopf timer per service: every tick reads the signals of ALL
due services in one batched PromQL request (:func:`prometheus.fetch_observations`), which
per-object timers cannot share. The loop is an asyncio task started by a kopf startup
handler and cancelled by a cleanup handler; the bodies come from the ``llmservices_by_name``
index of :mod:`llm_operator.handlers`. A tiny kopf daemon per LLMService marks it present:
kopf stops daemons when the object is being deleted and when the operator is paused by
peering (a standby pod), so the loop acts only on the services this pod actively handles.

Each tick (sleeping until the earliest service is due, at most :data:`IDLE_SECONDS`):

1. Due: ``spec.adaptation.mode`` is not ``Disabled``, ``spec.engine.maxNumSeqs`` is left to
   ``auto`` (a pinned value is never touched: nothing is read or written for it),
   ``spec.adaptation.intervalSeconds`` have passed since its last decision, and the
   reconcile handler has planned it (``status.plan``: the running cap is known).
2. One Prometheus request (blocking client, in a thread) observes all due services over
   ``LLMOP_ADAPTATION_WINDOW_SECONDS``.
3. The policy decides per service (raise, lower, hold, with the reason).
4. Writes per service: ``status.adaptation`` (current cap, last observation, last decision
   and reason, last change time, short history, mode) and the ``MetricsAvailable``
   condition when it changes. ``Apply`` with a change: ``status.adaptation.maxNumSeqs`` is
   written first, then the same reconciliation as the kopf handler
   (:func:`llm_operator.handlers.reconcile`) renders the Deployment with it (the renderer
   applies the override only where the user left the field to ``auto``) and rolls it; an
   Event ``MaxNumSeqsLowered`` or ``MaxNumSeqsRaised``. ``Recommend``: the decision goes to
   ``status.adaptation.recommendedMaxNumSeqs`` and an Event
   (``MaxNumSeqsLowerRecommended`` / ``MaxNumSeqsRaiseRecommended``, only when the
   recommendation changes); the workload is never written.
5. Prometheus unavailable or without data: hold, ``MetricsAvailable=False`` with the reason,
   and a Warning Event (on the change of reason, and again at most every
   :data:`WARNING_REPEAT_SECONDS` while Prometheus stays unreachable).

Switching from ``Apply`` to ``Recommend`` or ``Disabled`` keeps the last applied cap (no
rollout from the switch itself); pinning ``spec.engine.maxNumSeqs`` wins at once, as the
renderer ignores overrides of pinned fields. ``LLMOP_PROMETHEUS_URL`` unset: the loop does
not start, and says so once in the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import kopf

from . import prometheus
from . import status as st
from .adaptation import (
    DEFAULT_POLICY,
    Action,
    AdaptationState,
    CapLimits,
    Decision,
    Observation,
    PolicySettings,
    ServiceKey,
    adaptation_status,
    decide,
    record,
)
from .constants import GROUP, PLURAL, VERSION
from .metrics import OperatorMetrics, metrics_of
from .models import AdaptationMode, LLMServiceSpec, parse_llmservice

log = logging.getLogger(__name__)

IDLE_SECONDS = 15.0  # longest sleep between ticks (a new service is picked up this fast)
MIN_SLEEP_SECONDS = 1.0
WARNING_REPEAT_SECONDS = 600.0  # a still-unreachable Prometheus is repeated at most this often
JSON = dict[str, Any]


class MetricsReason(StrEnum):
    """Reasons of the ``MetricsAvailable`` condition."""

    OBSERVED = "SeriesObserved"
    UNAVAILABLE = "PrometheusUnavailable"
    NO_SERIES = "NoSeries"
    NO_SAMPLES = "NoSamples"
    TOO_LITTLE = "TooLittleData"
    STALE = "StaleData"
    MISSING = "MissingSeries"


# --------------------------------------------------------------------------- pure parts
@dataclass(frozen=True)
class Service:
    """One LLMService as the loop sees it: its key, body and parsed spec."""

    key: ServiceKey
    body: Mapping[str, Any]
    spec: LLMServiceSpec

    @property
    def status(self) -> Mapping[str, Any]:
        """The body's status (empty when none)."""
        return self.body.get("status") or {}

    @property
    def generation(self) -> int | None:
        """``metadata.generation`` (None where the API server sets none)."""
        gen = (self.body.get("metadata") or {}).get("generation")
        return gen if isinstance(gen, int) else None


def parse_services(bodies: Iterable[Mapping[str, Any]]) -> dict[ServiceKey, Service]:
    """The services the loop may act on (pure): parsable specs, not being deleted.

    An invalid spec is skipped: the reconcile handler reports it.
    """
    out: dict[ServiceKey, Service] = {}
    for body in bodies:
        meta = body.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            continue
        try:
            svc = parse_llmservice(body)
        except Exception:  # noqa: BLE001 - SpecError(s) or a malformed body: not ours to report
            continue
        key = (str(meta.get("namespace") or "default"), str(meta.get("name")))
        out[key] = Service(key=key, body=body, spec=svc.spec)
    return out


def is_pinned(spec: LLMServiceSpec) -> bool:
    """The user set ``spec.engine.maxNumSeqs``: adaptation never touches the service."""
    return isinstance(spec.engine.max_num_seqs, int)


def wants_adaptation(spec: LLMServiceSpec) -> bool:
    """Adaptation runs for the service: mode Apply or Recommend, cap left to auto."""
    return spec.adaptation.mode is not AdaptationMode.DISABLED and not is_pinned(spec)


def due_services(
    services: Mapping[ServiceKey, Service], last_run: Mapping[ServiceKey, float], now: float
) -> list[ServiceKey]:
    """The services whose ``spec.adaptation.intervalSeconds`` has passed since their last
    decision (never decided: due at once), in a stable order."""
    return sorted(
        key for key, svc in services.items()
        if wants_adaptation(svc.spec)
        and (key not in last_run or now - last_run[key] >= svc.spec.adaptation.interval_seconds)
    )


def seconds_until_next(
    services: Mapping[ServiceKey, Service], last_run: Mapping[ServiceKey, float], now: float,
    idle: float = IDLE_SECONDS,
) -> float:
    """How long the loop may sleep: until the earliest service is due, at most ``idle``,
    at least :data:`MIN_SLEEP_SECONDS`."""
    wait = idle
    for key, svc in services.items():
        if not wants_adaptation(svc.spec):
            continue
        last = last_run.get(key)
        left = 0.0 if last is None else last + svc.spec.adaptation.interval_seconds - now
        wait = min(wait, left)
    return max(MIN_SLEEP_SECONDS, wait)


def running_cap(spec: LLMServiceSpec, status: Mapping[str, Any]) -> int | None:
    """The ``--max-num-seqs`` the renderer gives the workload now: the user's pin, else the
    tuning or adaptation override (:func:`status.engine_overrides`), else the plan's value;
    None when no plan is known yet."""
    if isinstance(spec.engine.max_num_seqs, int):
        return spec.engine.max_num_seqs
    override = st.engine_overrides(status).get("maxNumSeqs")
    if override:
        return override
    planned = (status.get("plan") or {}).get("maxNumSeqs")
    return planned if isinstance(planned, int) and planned > 0 else None


def cap_limits(status: Mapping[str, Any]) -> CapLimits:
    """Upper limits for the cap from status: the planner's memory limit and the tuner's
    measured knee (the best configuration's max-num-seqs) when a run succeeded."""
    plan = (status.get("plan") or {}).get("maxNumSeqs")
    tuning = status.get("tuning") or {}
    knee = (tuning.get("best") or {}).get("maxNumSeqs") if tuning.get("state") == "Succeeded" \
        else None
    return CapLimits(plan_max_num_seqs=plan if isinstance(plan, int) and plan > 0 else None,
                     tuned_knee=knee if isinstance(knee, int) and knee > 0 else None)


def current_state(spec: LLMServiceSpec, status: Mapping[str, Any]) -> AdaptationState | None:
    """The controller's memory of a service, from status: the running cap (see
    :func:`running_cap`) with the change history kept in ``status.adaptation``."""
    cap = running_cap(spec, status)
    if cap is None:
        return None
    stored = AdaptationState.from_status(status.get("adaptation") or {}, cap)
    return stored.model_copy(update={"current": cap})


def fresher_status(status: Mapping[str, Any], written: Mapping[str, Any] | None
                   ) -> Mapping[str, Any]:
    """``status`` with ``status.adaptation`` replaced by what this loop wrote last, when the
    index has not caught up with that write yet (its last decision is older)."""
    if not written:
        return status
    have = ((status.get("adaptation") or {}).get("lastDecision") or {}).get("time") or ""
    mine = (written.get("lastDecision") or {}).get("time") or ""
    if mine > have:
        return {**status, "adaptation": {**(status.get("adaptation") or {}), **written}}
    return status


def metrics_condition(
    obs: Observation | None, now: float, policy: PolicySettings = DEFAULT_POLICY
) -> tuple[bool, MetricsReason, str]:
    """Whether Prometheus gave the signals the policy needs, with the reason and a message
    saying why not and what to check (pure)."""
    window = f"{policy.window_seconds:.0f} s"
    if obs is None:
        return False, MetricsReason.NO_SERIES, (
            "Prometheus has no vLLM series for this service: check that its pods are scraped "
            "(PodMonitor) and that the series carry the service label "
            "(LLMOP_PROMETHEUS_SERVICE_LABEL); max-num-seqs holds")
    if obs.error is not None:
        return False, MetricsReason.UNAVAILABLE, (
            f"Prometheus is unavailable ({obs.error}); max-num-seqs holds until it answers")
    if obs.samples == 0 or obs.running_mean is None or obs.last_sample_at is None:
        return False, MetricsReason.NO_SAMPLES, (
            f"no samples of vllm:num_requests_running in the last {window}; max-num-seqs holds")
    if obs.samples < policy.min_samples:
        return False, MetricsReason.TOO_LITTLE, (
            f"{obs.samples} samples in the last {window}, {policy.min_samples} needed; "
            "max-num-seqs holds")
    age = now - obs.last_sample_at
    if age > policy.max_staleness_seconds:
        return False, MetricsReason.STALE, (
            f"the newest sample is {age:.0f} s old (limit {policy.max_staleness_seconds:.0f} s):"
            " is the scrape failing? max-num-seqs holds")
    missing = [n for n, v in (("vllm:num_requests_waiting", obs.waiting_mean),
                              ("vllm:kv_cache_usage_perc", obs.kv_usage_mean)) if v is None]
    if missing:
        return False, MetricsReason.MISSING, (
            f"missing series: {', '.join(missing)}; max-num-seqs holds")
    return True, MetricsReason.OBSERVED, (
        f"{obs.samples} samples of every signal in the last {window}, newest {age:.0f} s old")


@dataclass(frozen=True)
class Notice:
    """An Event to post about the service."""

    type: str
    reason: str
    message: str


@dataclass
class Update:
    """What one decision writes: the status patch, the Events, and whether the workload
    must be re-rendered (Apply mode, the cap moved)."""

    status_patch: JSON
    events: list[Notice] = field(default_factory=list)
    rollout: bool = False
    adaptation: JSON = field(default_factory=dict)  # status.adaptation after the patch


def plan_update(
    svc: Service,
    decision: Decision,
    observation: Observation | None,
    state: AdaptationState | None,
    now: float,
    *,
    policy: PolicySettings = DEFAULT_POLICY,
    warn_again: bool = False,
) -> Update:
    """Turn one decision into the status patch and Events (pure).

    ``Apply`` and a change: ``status.adaptation.maxNumSeqs`` is the new cap, the state
    records the change (history, last change time), ``rollout`` is True and the Event says
    what moved and why. ``Recommend``: ``recommendedMaxNumSeqs`` holds the value a change
    would set (null on hold), the state is unchanged, the Event is posted only when the
    recommendation changed. ``warn_again``: repeat the Warning for an unreachable
    Prometheus even though the condition did not change.
    """
    status = svc.status
    before = dict(status.get("adaptation") or {})
    mode = svc.spec.adaptation.mode
    events: list[Notice] = []
    rollout = False
    if state is None:  # no plan yet: report the hold, nothing else is known
        adaptation: JSON = {
            "lastDecision": {"time": _iso(decision.at), "action": decision.action.value,
                             "from": None, "to": None, "reason": decision.reason},
            "mode": mode.value,
        }
    elif mode is AdaptationMode.APPLY and decision.changed and decision.value is not None:
        after = record(state, decision, policy)
        adaptation = {**adaptation_status(after, decision, observation),
                      "maxNumSeqs": decision.value, "recommendedMaxNumSeqs": None,
                      "mode": mode.value}
        rollout = True
        verb = "Lowered" if decision.action is Action.LOWER else "Raised"
        events.append(Notice("Normal", f"MaxNumSeqs{verb}", decision.reason))
    else:
        adaptation = {**adaptation_status(state, decision, observation), "mode": mode.value}
        if mode is AdaptationMode.RECOMMEND:
            recommended = decision.value if decision.changed else None
            adaptation["recommendedMaxNumSeqs"] = recommended
            if recommended is not None and recommended != before.get("recommendedMaxNumSeqs"):
                verb = "Lower" if decision.action is Action.LOWER else "Raise"
                events.append(Notice(
                    "Normal", f"MaxNumSeqs{verb}Recommended",
                    f"Recommendation (spec.adaptation.mode=Recommend, not applied): "
                    f"{decision.reason}"))
        else:
            adaptation["recommendedMaxNumSeqs"] = None
    patch: JSON = {"adaptation": adaptation}

    ok, reason, message = metrics_condition(observation, now, policy)
    conds = status.get("conditions") or []
    old = st.get_condition(conds, st.ConditionType.METRICS_AVAILABLE)
    new_conds = st.set_condition(conds, st.ConditionType.METRICS_AVAILABLE, ok, reason, message,
                                 generation=svc.generation, now=_iso(now) or "")
    new = st.get_condition(new_conds, st.ConditionType.METRICS_AVAILABLE)
    if old is None or new is None or any(old.get(k) != new.get(k) for k in
                                         ("status", "reason", "message", "observedGeneration")):
        patch["conditions"] = new_conds
    reason_changed = old is None or old.get("reason") != str(reason)
    if not ok and (reason_changed or (reason is MetricsReason.UNAVAILABLE and warn_again)):
        events.append(Notice("Warning", str(reason), message))
    merged = {**before, **adaptation}
    return Update(status_patch=patch, events=events, rollout=rollout,
                  adaptation={k: v for k, v in merged.items() if v is not None})


def _iso(t: float | None) -> str | None:
    if t is None:
        return None
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------- the loop
class AdaptationLoop:
    """The background task: tick, fetch, decide, write (see the module docstring)."""

    def __init__(
        self,
        memo: Any,
        index: Mapping[ServiceKey, Any],
        url: str,
        metrics: OperatorMetrics,
        *,
        window_seconds: float,
        service_label: str = "llmservice",
        namespace_label: str = "namespace",
    ) -> None:
        self.memo = memo
        self.index = index
        self.url = url
        self.metrics = metrics
        self.policy = PolicySettings(window_seconds=window_seconds)
        self.service_label = service_label
        self.namespace_label = namespace_label
        self.present: set[ServiceKey] = set()  # kept by the per-service presence daemon
        self.last_run: dict[ServiceKey, float] = {}
        self.written: dict[ServiceKey, JSON] = {}
        self.last_warned: dict[ServiceKey, float] = {}
        self.pending_rollout: set[ServiceKey] = set()
        self._client: prometheus.QueryClient | None = None

    def services(self) -> dict[ServiceKey, Service]:
        """The present services' latest bodies from the index."""
        bodies = []
        for key in sorted(self.present):
            found = list(self.index.get(key, []))
            if found:
                bodies.append(found[-1])
        return parse_services(bodies)

    async def run(self) -> None:
        """Tick forever (until cancelled); a failing tick is logged and the loop goes on."""
        log.info(f"Online adaptation started: Prometheus {self.url}, window "
                 f"{self.policy.window_seconds:.0f} s")
        while True:
            try:
                delay = await self.tick(time.time())
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the loop must survive any one tick
                log.exception(f"Adaptation tick failed: {exc}")
                delay = IDLE_SECONDS
            await asyncio.sleep(delay)

    async def tick(self, now: float) -> float:
        """One tick: decide for every due service; returns the seconds to sleep."""
        from .handlers import OperatorContext

        ctx = self.memo.get("ctx")
        if not isinstance(ctx, OperatorContext):
            return MIN_SLEEP_SECONDS
        services = self.services()
        for key in [k for k in self.last_run if k not in services]:
            self._forget(key)
        # Not before the reconcile handler has planned it: the running cap is unknown and
        # a status write now would race the handler's first one.
        due = [k for k in due_services(services, self.last_run, now)
               if running_cap(services[k].spec, services[k].status) is not None]
        if due:
            observed = await self.observe(due, now)
            for key in due:
                self.last_run[key] = now
                try:
                    await self.adapt(ctx, services[key], observed.get(key), now)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - one service must not stop the rest
                    log.exception(f"Adapting {key[0]}/{key[1]} failed: {exc}")
        return seconds_until_next(services, self.last_run, time.time())

    async def observe(self, keys: list[ServiceKey], now: float) -> dict[ServiceKey, Observation]:
        """One batched Prometheus request for ``keys`` (in a thread: the client blocks)."""
        if self._client is None:
            self._client = prometheus.connect(self.url)
        t0 = time.perf_counter()
        try:
            return await asyncio.to_thread(
                prometheus.fetch_observations, self._client, keys, now,
                self.policy.window_seconds, service_label=self.service_label,
                namespace_label=self.namespace_label, on_error=self.metrics.query_error)
        finally:
            self.metrics.prometheus_seconds.observe(time.perf_counter() - t0)

    async def adapt(self, ctx: Any, svc: Service, obs: Observation | None, now: float) -> None:
        """Decide for one service and write the outcome."""
        from .handlers import reconcile, write_status

        ns, name = svc.key
        status = fresher_status(svc.status, self.written.get(svc.key))
        svc = Service(svc.key, {**svc.body, "status": status}, svc.spec)
        state = current_state(svc.spec, status)
        decision = decide(obs, state, svc.spec, now, namespace=ns, name=name,
                          limits=cap_limits(status), settings=self.policy)
        warn_again = now - self.last_warned.get(svc.key, 0.0) >= WARNING_REPEAT_SECONDS
        update = plan_update(svc, decision, obs, state, now, policy=self.policy,
                             warn_again=warn_again)
        mode = svc.spec.adaptation.mode.value
        self.metrics.decision(ns, name, decision.action.value, mode,
                              decision.value if update.rollout else
                              (state.current if state else None))
        if decision.changed or update.events:
            log.info(f"Adaptation of {ns}/{name} ({mode}): {decision.reason}")

        written = await write_status(ctx, svc.body, update.status_patch)
        if written is None:
            return  # deleted meanwhile
        self.written[svc.key] = update.adaptation

        if update.rollout or svc.key in self.pending_rollout:
            with self.metrics.timed_reconcile("adaptation"):
                outcome = await reconcile(written, ctx, log)
            await write_status(ctx, written, outcome.status_patch)
            if outcome.error is not None:
                self.pending_rollout.add(svc.key)  # retried on the next tick
                log.warning(f"Rolling {ns}/{name} onto max-num-seqs "
                            f"{update.adaptation.get('maxNumSeqs')} failed, retrying on the "
                            f"next tick: {outcome.error}")
            else:
                self.pending_rollout.discard(svc.key)
        for notice in update.events:
            if notice.type == "Warning":
                self.last_warned[svc.key] = now
            ctx.post_event(svc.body, notice.type, notice.reason, notice.message)

    def _forget(self, key: ServiceKey) -> None:
        for memory in (self.last_run, self.written, self.last_warned):
            memory.pop(key, None)
        self.pending_rollout.discard(key)
        self.metrics.forget(*key)


# --------------------------------------------------------------------------- handlers
LOOP_KEY = "adaptation_loop"
TASK_KEY = "adaptation_task"


@kopf.on.startup(id="adaptation-startup")
async def adaptation_startup(memo: kopf.Memo, logger: kopf.Logger, **kwargs: Any) -> None:
    """Serve the operator's metrics and start the adaptation loop (when Prometheus is set)."""
    from .settings import Settings

    own = memo.get("settings")
    settings = own if isinstance(own, Settings) else Settings()
    metrics = metrics_of(memo)
    metrics.serve(settings.metrics_port)
    if not settings.prometheus_url:
        logger.info("Online adaptation is off: LLMOP_PROMETHEUS_URL is not set")
        return
    index = kwargs.get("llmservices_by_name")
    if index is None:
        logger.warning("Online adaptation is off: the llmservices_by_name index is missing")
        return
    loop = AdaptationLoop(memo, index, settings.prometheus_url, metrics,
                          window_seconds=settings.adaptation_window_seconds,
                          service_label=settings.prometheus_service_label,
                          namespace_label=settings.prometheus_namespace_label)
    memo[LOOP_KEY] = loop
    memo[TASK_KEY] = asyncio.create_task(loop.run(), name="llmop-adaptation")


@kopf.on.cleanup(id="adaptation-cleanup")
async def adaptation_cleanup(memo: kopf.Memo, **_: Any) -> None:
    """Cancel the loop and stop serving metrics."""
    task = memo.get(TASK_KEY)
    if isinstance(task, asyncio.Task):
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
    metrics = memo.get("metrics")
    if isinstance(metrics, OperatorMetrics):
        metrics.stop()


@kopf.daemon(GROUP, VERSION, PLURAL, id="adaptation-presence", cancellation_timeout=5)
async def llmservice_adaptation_presence(
    stopped: kopf.DaemonStopped, memo: kopf.Memo, namespace: str | None, name: str | None,
    **_: Any,
) -> None:
    """Mark the service as handled by this operator for as long as kopf keeps the daemon
    (stopped on deletion and when peering pauses this operator)."""
    loop = memo.get(LOOP_KEY)
    if not isinstance(loop, AdaptationLoop):
        return  # adaptation is off; the daemon ends (kopf does not restart it)
    key = (namespace or "default", name or "")
    loop.present.add(key)
    try:
        await stopped.wait()
    finally:
        loop.present.discard(key)
