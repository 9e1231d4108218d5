"""Online adaptation, operator side: one background loop for all LLMServices.

The policy is pure (:mod:`llm_operator.adaptation.policy`), Prometheus I/O lives in
:mod:`llm_operator.adaptation.prometheus`; this module only schedules, fetches, calls the
policy and writes. The pure parts (which services are due, the current cap, how a
decision becomes a status patch and Events) are in :mod:`llm_operator.adaptation.update`;
:class:`AdaptationLoop` carries them out.

Why one loop rather than a kopf timer per service: every tick reads the signals of ALL
due services in one batched PromQL request (:func:`prometheus.fetch_observations`), which
per-object timers cannot share. The loop is an asyncio task started by the operator's startup
handler and cancelled by its cleanup handler (both in :mod:`.handlers`); the bodies come
from the ``llmservices_by_name`` index (a deleted service leaves it). Under kopf peering,
each tick first reads kopf's peering object(s) and acts only while no live peer outranks
this pod (:mod:`.peering`): a standby holds. No kopf daemon marks the services (kopf would
put its finalizer on each, and an uninstalled operator's finalizer blocks deleting the
service and its namespace).

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
   (:func:`.reconcile.reconcile`) renders the Deployment with it (the renderer
   applies the override only where the user left the field to ``auto``) and rolls it; an
   Event ``MaxNumSeqsLowered`` or ``MaxNumSeqsRaised``. ``Recommend``: the decision goes to
   ``status.adaptation.recommendedMaxNumSeqs`` and an Event
   (``MaxNumSeqsLowerRecommended`` / ``MaxNumSeqsRaiseRecommended``, only when the
   recommendation changes); the workload is never written.
5. Prometheus unavailable or without data: hold, ``MetricsAvailable=False`` with the reason,
   and a Warning Event (on the change of reason, and again at most every
   :data:`WARNING_REPEAT_SECONDS` while Prometheus stays unreachable).

Live admission cap (``Apply`` with ``spec.adaptation.liveCap``, the default): the
reconciliation then changes only the admission-cap ConfigMap, the next decision waits
for the engines to report the cap, and the cooldown counts from that report; see
:func:`llm_operator.adaptation.update.live_cap_progress` and docs/concepts.md, "How an
adaptation decision reaches the pods".

A change applied by a rollout (``liveCap: false``, a fallback, a multi-node plan) is
remembered as ``status.adaptation.rolloutRequested``; each tick reads the workload, the
next decision waits until every desired replica is updated and available at its new
generation, and the cooldown counts from that completion
(:func:`llm_operator.adaptation.update.rollout_progress`).

Switching from ``Apply`` to ``Recommend`` or ``Disabled`` keeps the last applied cap (with
the live cap, the switch rolls once: the pods lose the scheduler class and get the cap as
``--max-num-seqs``); pinning ``spec.engine.maxNumSeqs`` wins at once, as the
renderer ignores overrides of pinned fields. ``LLMOP_PROMETHEUS_URL`` unset: the loop does
not start, and says so once in the log.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

from ..adaptation import prometheus
from ..adaptation.policy import (
    Observation,
    ServiceKey,
    decide,
    policy_for_scrape,
    with_decode_context_parallel,
)
from ..adaptation.update import (
    IDLE_SECONDS,
    LiveCapProgress,
    RolloutProgress,
    Service,
    after_rollout,
    cap_limits,
    current_state,
    decode_context_parallel_size,
    due_services,
    fresher_status,
    live_cap_progress,
    parse_services,
    plan_update,
    rollout_progress,
    running_cap,
    seconds_until_next,
    waiting_decision,
)
from ..api.models import AdaptationMode
from ..health.status import live_cap_in_use
from ..rendering.leaderworkerset import LWS_API_VERSION, LWS_KIND, LWS_NAME_SUFFIX
from .context import OperatorContext, clock
from .peering import peering_active
from .reconcile import reconcile, write_status

log = logging.getLogger(__name__)

WARNING_REPEAT_SECONDS = 600.0  # a still-unreachable Prometheus is repeated at most this often
JSON = dict[str, Any]


class AdaptationLoop:
    """The background task: tick, fetch, decide, write (see the module docstring)."""

    def __init__(
        self,
        ctx: OperatorContext,
        index: Mapping[ServiceKey, Any],
    ) -> None:
        """``ctx.settings`` gives the Prometheus URL (set: the loop runs only then), the
        window and the series labels; ``index`` the LLMService bodies."""
        self.ctx = ctx
        self.index = index
        self.url = str(ctx.settings.prometheus_url)
        self.metrics = ctx.metrics
        self.policy = policy_for_scrape(ctx.settings.adaptation_window_seconds,
                                        ctx.settings.scrape_interval_seconds)
        self.last_run: dict[ServiceKey, float] = {}
        self.written: dict[ServiceKey, JSON] = {}
        self.last_warned: dict[ServiceKey, float] = {}
        self.pending_rollout: set[ServiceKey] = set()
        self._client: prometheus.QueryClient | None = None

    def services(self) -> dict[ServiceKey, Service]:
        """The services' latest bodies from the index."""
        bodies = []
        for key in sorted(self.index):
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
                delay = await self.tick(clock())
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the loop must survive any one tick
                log.exception(f"Adaptation tick failed: {exc}")
                delay = IDLE_SECONDS
            await asyncio.sleep(delay)

    async def tick(self, now: float) -> float:
        """One tick: decide for every due service; returns the seconds to sleep. A
        standby (peering: a live peer outranks this pod) holds for :data:`IDLE_SECONDS`."""
        if not await peering_active(self.ctx.kube, self.ctx.peering):
            return IDLE_SECONDS
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
                    await self.adapt(services[key], observed.get(key), now)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - one service must not stop the rest
                    log.exception(f"Adapting {key[0]}/{key[1]} failed: {exc}")
        return seconds_until_next(services, self.last_run, clock())

    async def observe(self, keys: list[ServiceKey], now: float) -> dict[ServiceKey, Observation]:
        """One batched Prometheus request for ``keys`` (in a thread: the client blocks)."""
        if self._client is None:
            settings = self.ctx.settings
            self._client = prometheus.connect(
                self.url, ca_file=settings.prometheus_ca_file,
                bearer_token_file=settings.prometheus_bearer_token_file,
                insecure_skip_verify=settings.prometheus_insecure_skip_verify)
        t0 = time.perf_counter()
        try:
            return await asyncio.to_thread(
                prometheus.fetch_observations, self._client, keys, now,
                self.policy.window_seconds,
                service_label=self.ctx.settings.prometheus_service_label,
                namespace_label=self.ctx.settings.prometheus_namespace_label,
                on_error=self.metrics.query_error)
        finally:
            self.metrics.prometheus_seconds.observe(time.perf_counter() - t0)

    async def adapt(self, svc: Service, obs: Observation | None, now: float) -> None:
        """Decide for one service and write the outcome."""
        ctx = self.ctx
        ns, name = svc.key
        status = fresher_status(svc.status, self.written.get(svc.key))
        svc = Service(svc.key, {**svc.body, "status": status}, svc.spec)
        obs = with_decode_context_parallel(obs, decode_context_parallel_size(status))
        state = current_state(svc.spec, status)
        progress: LiveCapProgress | None = None
        rolling: RolloutProgress | None = None
        if svc.spec.adaptation.mode is AdaptationMode.APPLY and state is not None:
            if live_cap_in_use(svc.spec, status, svc.generation,
                               default_image=self.ctx.settings.default_image):
                progress = live_cap_progress(
                    status.get("adaptation") or {}, obs, now,
                    timeout=self.ctx.settings.live_cap_report_timeout_seconds)
            rolling = await self.rollout(svc, now)
            state = after_rollout(state, rolling, now)
        # A live change on its way waits for the engines' report; a rollout under way
        # waits for its completion: the next decision comes after either.
        wait = (progress.wait if progress else None) or (rolling.wait if rolling else None)
        if wait and state is not None:
            decision = waiting_decision(svc, state, obs, wait, now)
        else:
            decision = decide(obs, state, svc.spec, now, namespace=ns, name=name,
                              limits=cap_limits(status), settings=self.policy)
        warn_again = now - self.last_warned.get(svc.key, 0.0) >= WARNING_REPEAT_SECONDS
        update = plan_update(svc, decision, obs, state, now, policy=self.policy,
                             warn_again=warn_again, progress=progress,
                             rollout_state=rolling,
                             default_image=self.ctx.settings.default_image)
        mode = svc.spec.adaptation.mode.value
        self.metrics.decision(ns, name, decision.action.value, mode, decision.cause.value,
                              decision.value if update.rollout else
                              (state.current if state else None))
        fit = decision.evidence.get("kvFit")
        if update.bounds is not None:  # the bounds and tuned value plan_update wrote
            self.metrics.adaptation_limits(
                ns, name, lower=update.bounds.lower, upper=update.bounds.upper,
                kv_fit=fit if isinstance(fit, int) else None, tuned=update.tuned)
        if decision.changed or update.events:
            log.info(f"Adaptation of {ns}/{name} ({mode}): {decision.reason}")

        written = await write_status(ctx, svc.body, update.status_patch)
        if written is None:
            return  # deleted meanwhile
        self.written[svc.key] = update.adaptation

        if update.rollout or svc.key in self.pending_rollout:
            outcome = await reconcile(written, ctx, log, trigger="adaptation")
            await write_status(ctx, written, outcome.status_patch)
            if outcome.error is not None:
                self.pending_rollout.add(svc.key)  # retried on the next tick
                log.warning(f"Applying max-num-seqs {update.adaptation.get('maxNumSeqs')} "
                            f"to {ns}/{name} failed, retrying on the next tick: "
                            f"{outcome.error}")
            else:
                self.pending_rollout.discard(svc.key)
        for notice in update.events:
            if notice.type == "Warning":
                self.last_warned[svc.key] = now
            ctx.post_event(svc.body, notice.type, notice.reason, notice.message)

    async def rollout(self, svc: Service, now: float) -> RolloutProgress | None:
        """Where the rollout asked for last stands (None: none asked for): reads the
        workload (the Deployment, or the LeaderWorkerSet of a multi-node plan)."""
        adaptation = svc.status.get("adaptation") or {}
        if not isinstance(adaptation.get("rolloutRequested"), int):
            return None
        ns, name = svc.key
        nodes = (svc.status.get("plan") or {}).get("nodesPerReplica")
        if isinstance(nodes, int) and nodes > 1:
            api, kind, wname = LWS_API_VERSION, LWS_KIND, f"{name}{LWS_NAME_SUFFIX}"
        else:
            api, kind, wname = "apps/v1", "Deployment", name
        workload = await self.ctx.kube.get(api, kind, ns, wname)
        return rollout_progress(adaptation, workload, now, kind=kind)

    def _forget(self, key: ServiceKey) -> None:
        for memory in (self.last_run, self.written, self.last_warned):
            memory.pop(key, None)
        self.pending_rollout.discard(key)
        self.metrics.forget(*key)
