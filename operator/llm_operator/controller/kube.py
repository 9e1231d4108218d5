"""Kubernetes I/O: the one module that calls the API server (besides kopf itself).

Credentials, TLS and the HTTP transport are kubernetes_asyncio's (see :class:`KubeClient`);
requests go through one wrapper, :meth:`KubeClient.request`, which speaks raw JSON (any
kind, including custom resources, with no model classes in between) and turns API errors
into the few outcomes the callers handle: 404 is "absent" (``None``/``False``), 409 is
:class:`ConflictError` (retry soon), a kind the cluster does not serve is
:class:`MissingAPIError` (say so in the status, retry later); everything else
propagates to kopf's backoff.

Apply: :func:`apply_children` writes each child by server-side apply (``PATCH`` with
``application/apply-patch+yaml``, ``fieldManager=llm-operator``, ``force=true``): the API
server merges the fields the operator renders into the object and keeps every field
somebody else set (``kubectl rollout restart``'s ``restartedAt`` annotation on the pod
template, a label an admission webhook added); fields the operator rendered before and
no longer renders are removed. A child whose ``llmops.dev/spec-hash`` annotation (a hash
of the rendered child) matches, with our labels and owner reference, is not written at
all, so a restart of the operator writes nothing.

Every call names its verb and resource in :data:`CLIENT_ACCESS` (checked on each
request): the chart's RBAC is tested against that table and kopf's own needs
(:mod:`.rbac`), so a call the chart does not grant fails in the tests, not on a cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import aiohttp
from kubernetes_asyncio.client import ApiClient, Configuration
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config import ConfigException, load_incluster_config, load_kube_config
from kubernetes_asyncio.config.kube_config import KubeConfigLoader

from .. import __version__
from ..api.constants import (
    ANNOTATION_SPEC_HASH,
    API_VERSION,
    GROUP,
    KIND,
    LABEL_COMPONENT,
    LABEL_COMPONENT_K8S,
    LABEL_MANAGED_BY,
    LABEL_PART_OF,
    LABEL_SERVICE,
    MANAGED_BY,
    PLURAL,
)
from ..api.timestamps import rfc3339

log = logging.getLogger(__name__)

JSON = dict[str, Any]

# Kind -> plural of every kind the operator writes (and a few it reads).
PLURALS: dict[str, str] = {
    "Deployment": "deployments",
    "Service": "services",
    "PodMonitor": "podmonitors",
    "LeaderWorkerSet": "leaderworkersets",
    "Job": "jobs",
    "Event": "events",
    "ConfigMap": "configmaps",
    "PodDisruptionBudget": "poddisruptionbudgets",
    "InferencePool": "inferencepools",
    KIND: PLURAL,
}
MONITORING_GROUP = "monitoring.coreos.com"
DISCOVERY_TTL_SECONDS = 60.0
CONNECTIONS = 128  # the client's pool: requests in flight at once
CREDENTIALS_REFRESH_SECONDS = 60.0  # a kubeconfig's expiring credentials: checked this often
USER_AGENT = f"{MANAGED_BY}/{__version__}"
FIELD_MANAGER = MANAGED_BY  # the field manager of every server-side apply
CONTENT_APPLY = "application/apply-patch+yaml"

# Every (API group, resource) the operator's own client calls, the verbs it uses and, where
# every call names one object of a few known names, those names (RBAC ``resourceNames``;
# ``create`` cannot be restricted by name). An apply may create, so it needs ``create``
# and ``patch``. Checked on every request (:meth:`KubeClient.request`).
CLIENT_ACCESS: dict[tuple[str, str], tuple[frozenset[str], tuple[str, ...]]] = {
    # patch: the resync's touch of a service whose handling stalled (controller/resync.py),
    # a verb kopf has anyway (its annotations).
    (GROUP, PLURAL): (frozenset({"get", "patch"}), ()),
    (GROUP, PLURAL + "/status"): (frozenset({"patch"}), ()),
    ("apps", "deployments"): (frozenset({"get", "create", "patch", "delete"}), ()),
    ("", "services"): (frozenset({"get", "create", "patch", "delete"}), ()),
    ("leaderworkerset.x-k8s.io", "leaderworkersets"):
        (frozenset({"get", "create", "patch", "delete"}), ()),
    (MONITORING_GROUP, "podmonitors"): (frozenset({"get", "create", "patch", "delete"}), ()),
    ("policy", "poddisruptionbudgets"): (frozenset({"get", "create", "patch", "delete"}), ()),
    # spec.routing.inferencePool: the Gateway API Inference Extension's pool, a child like
    # the Service (no list or watch: nothing reads the gateways' status.parents).
    ("inference.networking.k8s.io", "inferencepools"):
        (frozenset({"get", "create", "patch", "delete"}), ()),
    ("batch", "jobs"): (frozenset({"get", "list", "create", "delete"}), ()),
    ("", "pods"): (frozenset({"list"}), ()),
    # The tuning cache and each live-cap service's <name>-admission-cap, which server-side
    # apply writes like any child; RBAC cannot name the latter, so no resourceNames.
    ("", "configmaps"): (frozenset({"get", "create", "patch", "delete"}), ()),
    # list: the Events of a server pod stuck in ContainerCreating (FailedMount,
    # FailedAttachVolume), by field selector on the pod (controller/pods.py).
    ("", "events"): (frozenset({"create", "list"}), ()),
}


class ConflictError(Exception):
    """The object changed (or appeared) between read and write: retry soon."""


class UndeclaredAccessError(Exception):
    """A call that :data:`CLIENT_ACCESS` (and so the chart's RBAC) does not list: a bug."""


def access_of(method: str, path: str, query: Sequence[tuple[str, str]] = ()
              ) -> tuple[str, str, str, str | None] | None:
    """The RBAC view of one request: (verb, API group, resource[/subresource], name);
    None for a path that names no resource (discovery)."""
    parts = [p for p in path.split("?")[0].split("/") if p]
    if len(parts) >= 3 and parts[0] == "api":
        group, rest = "", parts[2:]
    elif len(parts) >= 4 and parts[0] == "apis":
        group, rest = parts[1], parts[3:]
    else:
        return None
    if rest[0] == "namespaces" and len(rest) >= 3:
        rest = rest[2:]
    resource = rest[0] + (f"/{rest[2]}" if len(rest) >= 3 else "")
    name = rest[1] if len(rest) >= 2 else None
    watch = any(k == "watch" and v in ("true", "1") for k, v in query)
    verb = {"GET": "watch" if watch else ("get" if name else "list"), "POST": "create",
            "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method.upper(), "")
    return verb, group, resource, name


def check_access(method: str, path: str, query: Sequence[tuple[str, str]] = ()) -> None:
    """Raise :class:`UndeclaredAccessError` for a call :data:`CLIENT_ACCESS` does not list."""
    access = access_of(method, path, query)
    if access is None:
        return
    verb, group, resource, name = access
    for key in ((group, resource), (group, f"{resource}:{verb}")):
        verbs, names = CLIENT_ACCESS.get(key, (frozenset(), ()))
        if verb in verbs and (not names or name in names):
            return
    raise UndeclaredAccessError(
        f"{method} {path}: verb {verb!r} on {resource!r} ({group or 'core'}) is not in "
        "CLIENT_ACCESS; declare it there and grant it in charts/llm-operator/templates/rbac.yaml")


class MissingAPIError(Exception):
    """The cluster does not serve this kind (e.g. the LeaderWorkerSet CRD is not installed)."""

    def __init__(self, api_version: str, kind: str) -> None:
        self.api_version, self.kind = api_version, kind
        super().__init__(f"the cluster does not serve {kind} ({api_version})")


def resource_path(
    api_version: str, kind: str, namespace: str | None, name: str | None = None,
    subresource: str | None = None,
) -> str:
    """The REST path of a kind (``/apis/apps/v1/namespaces/ns/deployments/name``)."""
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    path = base + (f"/namespaces/{namespace}" if namespace else "") + "/" + plural_of(kind)
    if name:
        path += f"/{name}"
    if subresource:
        path += f"/{subresource}"
    return path


def plural_of(kind: str) -> str:
    """The resource name of a kind (the few the operator uses; else lowercase + s)."""
    return PLURALS.get(kind) or kind.lower() + "s"


def _status_of(exc: ApiError) -> int:
    return exc.status


def _namespace_missing(exc: ApiError) -> bool:
    """Whether a 404 says the namespace is missing (not the kind): the API server names
    ``namespaces`` in the Status details then."""
    try:
        details = json.loads(exc.body).get("details") or {}
    except (ValueError, AttributeError):
        return False
    return bool(details.get("kind") == "namespaces")


class ApiError(Exception):
    """A non-2xx answer of the API server (``status``: the HTTP code)."""

    def __init__(self, status: int, body: str) -> None:
        self.status, self.body = status, body
        try:
            message = json.loads(body).get("message", body)
        except (ValueError, AttributeError):
            message = body
        super().__init__(f"({status}) {message}")

    def _details(self) -> dict[str, Any]:
        """The ``details`` of the API server's Status body ({} when there is none)."""
        try:
            return dict(json.loads(self.body).get("details") or {})
        except (ValueError, AttributeError, TypeError):
            return {}

    @property
    def namespace_terminating(self) -> bool:
        """A 403 because the namespace is being deleted (the API server's
        ``NamespaceTerminating`` cause): not the operator's RBAC, and nothing to fix."""
        if self.status != 403:
            return False
        causes = self._details().get("causes") or []
        return (any(c.get("reason") == "NamespaceTerminating" for c in causes)
                or "because it is being terminated" in str(self))

    @property
    def namespace_missing(self) -> bool:
        """A 404 because the namespace itself is gone (a write into a namespace deleted
        meanwhile: the Status names kind ``namespaces``), not the object written or read."""
        return self.status == 404 and self._details().get("kind") == "namespaces"


async def _keep_credentials_fresh(loader: KubeConfigLoader, cfg: Configuration) -> None:
    """Run the kubeconfig's loader again every :data:`CREDENTIALS_REFRESH_SECONDS`: an exec
    plugin, GCP or OIDC token is renewed when it expires within five minutes (the
    library's rule), a ``tokenFile`` read again. A failure is logged and tried again."""
    while True:
        await asyncio.sleep(CREDENTIALS_REFRESH_SECONDS)
        try:
            await loader.load_and_set(cfg)
        except Exception as exc:  # noqa: BLE001 - the current credentials may still work
            log.warning("Could not renew the kubeconfig's credentials: %s", exc)


def _session_without_env_lookups(api: ApiClient) -> None:
    """Give ``api`` an aiohttp session that does not read the environment per request.

    kubernetes_asyncio makes its session with ``trust_env=True``: aiohttp then looks up
    proxy variables and ``~/.netrc`` for every request, two thread hops each, which was
    most of the extra client CPU the first A/B measured (benchmarks/RESULTS.md,
    "client-ab"). The operator talks to its API server only and, like the transport
    before it, takes no proxy from the environment (a kubeconfig's ``proxy-url`` still
    applies: the library passes it per request). The new session takes over the
    library's connector (its TLS context and pool size); the library's session is
    detached from it, unused."""
    rest = api.rest_client
    library = rest.pool_manager
    rest.pool_manager = aiohttp.ClientSession(
        connector=library.connector, trust_env=False,
        read_bufsize=2**21)  # the library's: a watch event can be a large object
    library.detach()


class KubeClient:
    """The operator's API access. Built once at startup (kopf's ``memo``), never at import.

    The transport is kubernetes_asyncio's :class:`~kubernetes_asyncio.client.ApiClient`:
    its loaders read the credentials (in-cluster service account, else the kubeconfig),
    it builds the TLS context and sends each request through aiohttp in the event loop,
    so nothing blocks the loop. Its session is replaced by one that takes no proxy or
    ``~/.netrc`` from the environment (:func:`_session_without_env_lookups`). Requests
    are raw paths with JSON in and out (any kind, custom resources too; no model
    classes), so the calls, their RBAC view and the error handling stay this module's.
    """

    def __init__(self, config: Configuration, timeout: float = 30.0) -> None:
        # 128 connections, not 32: in a burst of new services, 32 capped the renders
        # while the operator sat mostly idle, each request queueing for a connection
        # (benchmarks/RESULTS.md, "Scale", "What was profiled and changed": "The
        # client's pool of connections").
        config.connection_pool_maxsize = CONNECTIONS
        self._cfg = config
        # The timeout is the API server's: connecting and each read. Not ``total``, nor
        # ``connect``, which count the wait for a free connection of our own pool too:
        # under a burst of new services every queued request then "timed out" without
        # ever being sent, and the retries queued again (tests/integration/
        # test_kube_timeouts.py). Hence a ClientTimeout, not the library's (connect, read).
        self._timeout = aiohttp.ClientTimeout(total=None, connect=None,
                                              sock_connect=timeout, sock_read=timeout)
        self._api: ApiClient | None = None
        self._groups: set[str] | None = None
        self._groups_at = 0.0
        self._refresh: asyncio.Task[None] | None = None

    @classmethod
    async def from_environment(cls) -> KubeClient:
        """In-cluster credentials in a pod, else the current kubeconfig (``$KUBECONFIG``).

        In a pod the library re-reads the (rotated) service account token each minute on
        its own. From a kubeconfig, credentials that expire (an exec plugin such as
        ``aws eks get-token``, OIDC, a ``tokenFile``) are renewed by a task that runs the
        loader again every :data:`CREDENTIALS_REFRESH_SECONDS`; each part renews only
        what expires within five minutes."""
        cfg = Configuration()
        try:
            load_incluster_config(client_configuration=cfg)
            return cls(cfg)
        except ConfigException:
            loader = await load_kube_config(client_configuration=cfg)
        client = cls(cfg)
        client._refresh = asyncio.create_task(_keep_credentials_fresh(loader, cfg),
                                              name="llmop-kube-credentials")
        return client

    async def close(self) -> None:
        """Release the connection pool (and stop renewing credentials)."""
        if self._refresh is not None:
            self._refresh.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refresh
            self._refresh = None
        if self._api is not None:
            await self._api.close()
            self._api = None

    # -- the one wrapper -----------------------------------------------------------------
    async def request(
        self, method: str, path: str, body: Any = None, content_type: str | None = None,
        query: Sequence[tuple[str, str]] = (),
    ) -> JSON | None:
        """One API call with a JSON body; returns the decoded response or raises
        :class:`ApiError`."""
        return (await self._send(method, path, body, content_type, query))[1]

    async def _send(
        self, method: str, path: str, body: Any = None, content_type: str | None = None,
        query: Sequence[tuple[str, str]] = (),
    ) -> tuple[int, JSON | None]:
        """:meth:`request`, also returning the HTTP status (201: created)."""
        check_access(method, path, query)
        if self._api is None:  # in the event loop: aiohttp's session belongs to it
            self._api = ApiClient(self._cfg)
            self._api.user_agent = USER_AGENT
            _session_without_env_lookups(self._api)
        headers = {"Accept": "application/json", **self._api.default_headers}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        params = list(query)
        await self._api.update_params_for_auth(headers, params, ["BearerToken"])
        try:
            # ApiClient.request, not call_api: call_api walks every body through the
            # OpenAPI models' (de)serializer, which for raw JSON changes nothing and cost
            # 0.2 ms of CPU per apply of a Deployment (0.5 against 0.73 ms in all).
            resp = await self._api.request(
                method, str(self._cfg.host).rstrip("/") + path, query_params=params,
                headers=headers, body=body, _request_timeout=self._timeout)
        except ApiException as exc:
            text = exc.body.decode() if isinstance(exc.body, bytes) else str(exc.body or "")
            raise ApiError(int(exc.status or 0), text or str(exc.reason or "")) from None
        return resp.status, (json.loads(resp.data) if resp.data else None)

    # -- reads ---------------------------------------------------------------------------
    async def get(
        self, api_version: str, kind: str, namespace: str | None, name: str
    ) -> JSON | None:
        """The object, or None when it does not exist (or its kind is not served)."""
        try:
            return await self.request("GET", resource_path(api_version, kind, namespace, name))
        except ApiError as exc:
            if _status_of(exc) == 404:
                return None
            raise

    async def list(
        self, api_version: str, kind: str, namespace: str | None, label_selector: str = "",
        field_selector: str = "",
    ) -> list[JSON]:
        """Objects of a kind (optionally by label and field selector); [] when the kind is
        not served."""
        query = [("labelSelector", label_selector)] if label_selector else []
        query += [("fieldSelector", field_selector)] if field_selector else []
        try:
            result = await self.request("GET", resource_path(api_version, kind, namespace),
                                        query=query)
        except ApiError as exc:
            if _status_of(exc) == 404:
                return []
            raise
        return list((result or {}).get("items", []))

    async def served_groups(self) -> set[str]:
        """API groups the server serves (``/apis`` discovery), cached for a minute."""
        now = time.monotonic()
        if self._groups is None or now - self._groups_at > DISCOVERY_TTL_SECONDS:
            doc = await self.request("GET", "/apis") or {}
            self._groups = {g["name"] for g in doc.get("groups", [])}
            self._groups_at = now
        return self._groups

    def _observed_group(self, api_version: str, served: bool) -> None:
        """What a write just showed about ``api_version``'s group, into the cached
        discovery: a CRD installed (or removed) within the cache's minute would otherwise
        make :func:`delete_children` skip a child of a kind it has just written."""
        if "/" not in api_version or self._groups is None:
            return
        group = api_version.split("/")[0]
        if served:
            self._groups.add(group)
        else:
            self._groups.discard(group)

    async def serves(self, api_version: str) -> bool:
        """Whether the server serves the group of ``api_version`` (core: always)."""
        if "/" not in api_version:
            return True
        return api_version.split("/")[0] in await self.served_groups()

    # -- writes --------------------------------------------------------------------------
    async def create(self, obj: Mapping[str, Any]) -> JSON:
        """Create ``obj``; :class:`ConflictError` if it exists, :class:`MissingAPIError`
        if its kind is not served."""
        meta = obj["metadata"]
        path = resource_path(obj["apiVersion"], obj["kind"], meta.get("namespace"))
        try:
            return await self.request("POST", path, dict(obj)) or {}
        except ApiError as exc:
            if _status_of(exc) == 409:
                raise ConflictError(f"{obj['kind']} {meta['name']} already exists") from None
            if _status_of(exc) == 404 and not _namespace_missing(exc):
                raise MissingAPIError(obj["apiVersion"], obj["kind"]) from None
            raise

    async def apply(self, obj: Mapping[str, Any]) -> tuple[JSON, bool]:
        """Server-side apply ``obj`` as ``llm-operator`` (``force=true``: the operator's
        fields are its own, whoever wrote them last); creates it when absent. Returns the
        object as stored and whether it was created. :class:`ConflictError` on a 409,
        :class:`MissingAPIError` when its kind is not served."""
        meta = obj["metadata"]
        path = resource_path(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])
        try:
            status, stored = await self._send(
                "PATCH", path, dict(obj), CONTENT_APPLY,
                query=[("fieldManager", FIELD_MANAGER), ("force", "true")])
        except ApiError as exc:
            if _status_of(exc) == 409:
                raise ConflictError(f"{obj['kind']} {meta['name']} changed meanwhile") from None
            if _status_of(exc) == 404 and not _namespace_missing(exc):
                self._observed_group(obj["apiVersion"], False)
                raise MissingAPIError(obj["apiVersion"], obj["kind"]) from None
            raise
        self._observed_group(obj["apiVersion"], True)
        return stored or {}, status == 201

    async def update_status(
        self, api_version: str, kind: str, namespace: str, name: str,
        patch_for: Callable[[Mapping[str, Any]], Mapping[str, Any]],
        known: Mapping[str, Any] | None = None, attempts: int = 8,
    ) -> JSON | None:
        """Write a status computed from the object it changes (optimistic concurrency).

        ``patch_for(obj)`` returns the status merge patch to write over ``obj`` (empty:
        nothing to write). It is sent with ``obj``'s ``resourceVersion`` as the
        precondition; when somebody wrote in between (409) the object is read again and
        the patch recomputed. Several writers own parts of one status (the conditions
        list above all: a merge patch replaces a list whole), so a blind patch computed
        from an older read would undo what another wrote meanwhile. ``known``: the
        caller's copy of the object, tried first to save a read. Returns the written
        object (``known`` or the read one when there was nothing to write), None when
        the object is gone; :class:`ConflictError` after ``attempts`` conflicts.
        """
        path = resource_path(api_version, kind, namespace, name, "status")
        obj = known
        for _ in range(attempts):
            if obj is None:
                obj = await self.get(api_version, kind, namespace, name)
                if obj is None:
                    return None
            patch = dict(patch_for(obj))
            if not patch:
                return dict(obj)
            body: JSON = {"status": patch}
            version = (obj.get("metadata") or {}).get("resourceVersion")
            if version:
                body["metadata"] = {"resourceVersion": version}
            try:
                return await self.request("PATCH", path, body, "application/merge-patch+json")
            except ApiError as exc:
                if _status_of(exc) == 404:
                    return None
                if _status_of(exc) != 409:
                    raise
            obj = None  # changed meanwhile: read it again and recompute
        raise ConflictError(f"{kind} {namespace}/{name}: status changed under every one of "
                            f"{attempts} writes")

    async def merge_patch(
        self, api_version: str, kind: str, namespace: str | None, name: str,
        patch: Mapping[str, Any],
    ) -> JSON | None:
        """JSON-merge-patch an object (e.g. one key of a ConfigMap); None when it is gone."""
        path = resource_path(api_version, kind, namespace, name)
        try:
            return await self.request("PATCH", path, dict(patch), "application/merge-patch+json")
        except ApiError as exc:
            if _status_of(exc) == 404:
                return None
            raise

    async def delete(self, api_version: str, kind: str, namespace: str | None, name: str) -> bool:
        """Delete (background propagation); False when it was already gone."""
        path = resource_path(api_version, kind, namespace, name)
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
        try:
            await self.request("DELETE", path, body)
        except ApiError as exc:
            if _status_of(exc) == 404:
                return False
            raise
        return True

    async def post_event(
        self, obj: Mapping[str, Any], *, type: str, reason: str, message: str
    ) -> None:
        """Record a ``v1`` Event about ``obj`` (failures are logged, never raised: an
        Event is a notice, not part of the reconciliation)."""
        meta = obj.get("metadata", {})
        now = rfc3339(time.time())
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta.get('name', 'llmservice')}.",
                         "namespace": meta.get("namespace") or "default"},
            "involvedObject": {
                "apiVersion": obj.get("apiVersion", API_VERSION),
                "kind": obj.get("kind", KIND),
                "name": meta.get("name"),
                "namespace": meta.get("namespace"),
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "type": type,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": MANAGED_BY},
            "reportingComponent": f"{GROUP}/{MANAGED_BY}",
            "reportingInstance": MANAGED_BY,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            await self.create(event)
        except Exception as exc:  # noqa: BLE001 - an Event must never fail a reconciliation
            log.warning("Could not post Event %s for %s/%s: %s", reason,
                        meta.get("namespace"), meta.get("name"), exc)


# ---------------------------------------------------------------------------- apply
class WriteAction(StrEnum):
    CREATED = "Created"
    UPDATED = "Updated"
    UNCHANGED = "Unchanged"
    DELETED = "Deleted"


@dataclass(frozen=True)
class ChildChange:
    """What apply did to one child."""

    kind: str
    name: str
    action: WriteAction


@dataclass(frozen=True)
class ChildFailure:
    """A child that could not be written (``step``: apply or delete) and why."""

    kind: str
    name: str
    step: str
    error: Exception

    def __str__(self) -> str:
        return f"{self.step} {self.kind} {self.name}: {self.error}"


@dataclass
class ApplyResult:
    """What :func:`apply_children` did, the children as the server now has them, and
    the children it could not write."""

    changes: list[ChildChange] = field(default_factory=list)
    observed: dict[str, JSON] = field(default_factory=dict)  # kind -> object
    failed: list[ChildFailure] = field(default_factory=list)

    @property
    def changed(self) -> list[ChildChange]:
        """Only the children that were written."""
        return [c for c in self.changes if c.action is not WriteAction.UNCHANGED]


def spec_hash_of(obj: Mapping[str, Any] | None) -> str | None:
    """The ``llmops.dev/spec-hash`` annotation of a child (None if absent)."""
    if not obj:
        return None
    return ((obj.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_SPEC_HASH)


def owned_by(obj: Mapping[str, Any], owner_uid: str | None) -> bool:
    """Whether ``obj`` has a controller owner reference to ``owner_uid``."""
    if owner_uid is None:
        return False
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(r.get("uid") == owner_uid for r in refs)


def needs_write(desired: Mapping[str, Any], observed: Mapping[str, Any] | None) -> bool:
    """Whether ``observed`` differs from ``desired`` (pure): absent, another spec hash, or
    a label, annotation or owner reference of ours missing (somebody edited it)."""
    if observed is None:
        return True
    if spec_hash_of(observed) != spec_hash_of(desired):
        return True
    dmeta, ometa = desired.get("metadata") or {}, observed.get("metadata") or {}
    for key in ("labels", "annotations"):
        want, have = dmeta.get(key) or {}, ometa.get(key) or {}
        if any(have.get(k) != v for k, v in want.items()):
            return True
    have_refs = {r.get("uid") for r in ometa.get("ownerReferences") or []}
    return any(r.get("uid") not in have_refs for r in dmeta.get("ownerReferences") or [])


async def apply_children(
    kube: KubeClient, desired: Iterable[Mapping[str, Any]], *, expect_absent: bool = False
) -> ApplyResult:
    """Server-side apply each desired child that differs (see the module docstring); write
    nothing for a child that already matches (same spec hash, our labels and owner
    reference there).

    ``expect_absent`` (a service that was just created): apply without reading first,
    which saves a read per child in the common case.

    A child that fails does not stop the others: its error lands in
    :attr:`ApplyResult.failed` (:class:`ConflictError`, :class:`MissingAPIError`,
    :class:`ApiError` such as a 403 for a verb the RBAC lacks), and the caller decides.
    """
    result = ApplyResult()
    for want in desired:
        kind, meta = want["kind"], want["metadata"]
        try:
            have: JSON | None = None
            if not expect_absent:
                have = await kube.get(want["apiVersion"], kind, meta.get("namespace"),
                                      meta["name"])
            if expect_absent or needs_write(want, have):
                have, created = await kube.apply(want)
                action = WriteAction.CREATED if created else WriteAction.UPDATED
                result.changes.append(ChildChange(kind, meta["name"], action))
            else:
                result.changes.append(ChildChange(kind, meta["name"], WriteAction.UNCHANGED))
            result.observed[kind] = have or {}
        except (ApiError, ConflictError, MissingAPIError) as exc:
            result.failed.append(ChildFailure(kind, meta["name"], "apply", exc))
    return result


async def delete_children(
    kube: KubeClient, owner: Mapping[str, Any], kinds: Iterable[tuple[str, str, str]],
    failures: list[ChildFailure] | None = None,
) -> list[ChildChange]:
    """Delete the children ``(apiVersion, kind, name)`` of ``owner`` that it owns.

    Used for the children a new plan no longer wants (the other workload kind, the
    PodMonitor, the PodDisruptionBudget) and, when the operator sees the deletion, for
    those of a deleted LLMService (the garbage collector removes those by their owner
    references anyway). Kinds the server does not serve are skipped. ``failures``: collect
    errors there and go on with the next child (else the first error is raised).
    """
    meta = owner.get("metadata") or {}
    uid, namespace = meta.get("uid"), meta.get("namespace")
    changes: list[ChildChange] = []
    for api_version, kind, name in kinds:
        try:
            if not await kube.serves(api_version):
                continue
            child = await kube.get(api_version, kind, namespace, name)
            if child is None or not owned_by(child, uid):
                continue
            if await kube.delete(api_version, kind, namespace, name):
                changes.append(ChildChange(kind, name, WriteAction.DELETED))
        except ApiError as exc:
            if failures is None:
                raise
            failures.append(ChildFailure(kind, name, "delete", exc))
    return changes


def owner_name(obj: Mapping[str, Any]) -> str | None:
    """The name of the LLMService that controls ``obj`` (by owner reference or label)."""
    meta = obj.get("metadata") or {}
    for ref in meta.get("ownerReferences") or []:
        if ref.get("kind") == KIND and ref.get("apiVersion", "").startswith(GROUP + "/"):
            return str(ref.get("name"))
    label = (meta.get("labels") or {}).get(LABEL_SERVICE)
    return str(label) if label else None


def without_managed_fields(obj: Mapping[str, Any]) -> dict[str, Any]:
    """``obj`` (top level and metadata copied, the rest shared) without
    ``metadata.managedFields``: the API server's record of who set which field, about a
    third of an LLMService's JSON, which the operator never reads. The index keeps one
    body per service for as long as the service lives (docs/production/scale.md,
    "Memory")."""
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
    return {**obj, "metadata": meta}


async def put_cache_entry(kube: KubeClient, namespace: str, name: str, component: str,
                          key: str, text: str,
                          evictions: Callable[[Mapping[str, str]], list[str]]) -> None:
    """Store ``text`` under ``key`` of the cache ConfigMap ``namespace/name`` (the tuning
    results, the model facts): created with the operator's labels and ``component`` when
    absent, else merge-patched with the keys ``evictions`` names (of the other entries)
    removed. A create that races another is followed by a patch; three tries."""
    for _ in range(3):
        cm = await kube.get("v1", "ConfigMap", namespace, name)
        if cm is None:
            body = {
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": namespace, "labels": {
                    LABEL_COMPONENT: component, LABEL_COMPONENT_K8S: component,
                    LABEL_MANAGED_BY: MANAGED_BY, LABEL_PART_OF: MANAGED_BY}},
                "data": {key: text},
            }
            try:
                await kube.create(body)
                return
            except ConflictError:
                continue  # created meanwhile: patch it
        data = dict(cm.get("data") or {})
        patch: dict[str, Any] = {k: None for k in evictions(
            {k: v for k, v in data.items() if k != key})}
        patch[key] = text
        if await kube.merge_patch("v1", "ConfigMap", namespace, name,
                                  {"data": patch}) is not None:
            return
