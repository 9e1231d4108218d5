"""An EMULATED Kubernetes API server, for local trials and tests. Not a cluster.

Built on kmock's :class:`kmock.KubernetesEmulator` (an in-memory API server by kopf's
author): kmock keeps the discovery endpoints (``/api``, ``/apis``, group versions, the
bundled list of built-in resources) and the error format. Its stock object handling is
too simple for kopf and kubectl, so this subclass serves resource paths itself:

- objects get ``uid``, ``creationTimestamp``, ``generation`` and a ``resourceVersion``
  from one global counter that moves on every write (kopf's JSON-patch tests
  ``/metadata/resourceVersion`` before it touches finalizers);
- ``metadata.generation`` moves when anything outside ``metadata`` and ``status``
  changes; a write that changes nothing is a no-op (no new resourceVersion, no event);
- PATCH in all three client flavours: JSON patch (with ``test``), JSON merge patch, and
  an approximation of strategic merge (lists of named items merge by ``name``; the
  ``$``-directives are dropped); PUT replaces; ``metadata.resourceVersion`` in a write
  is a precondition (409 on mismatch);
- the ``status`` subresource: writes to the object keep its status, writes to
  ``/status`` change only the status;
- finalizers and ``deletionTimestamp``; ``generateName``;
- lists with ``kind``, ``apiVersion`` and ``metadata.resourceVersion``; label and field
  selectors; server-side tables (``kubectl get`` columns, CRD printer columns);
- watches from a resourceVersion (replayed from a bounded history; 410 when too old),
  ``timeoutSeconds``;
- ``/api/v1/namespaces`` (kmock's path parser cannot read it);
- applied CustomResourceDefinitions are served (discovery, storage, schema defaults,
  printer columns, the ``scale`` subresource) and reported Established;
- server-side apply, in part (:func:`apply_patch`): ``PATCH`` with
  ``application/apply-patch+yaml`` and a ``fieldManager`` creates the object when it is
  absent (201), merges the applied configuration into it (maps merge, lists of named
  items merge by ``name``, other lists are replaced whole), so fields the manager does
  not send are kept, and removes the fields that the same manager applied last time and
  no longer sends. Not emulated: ``metadata.managedFields`` (ownership is kept aside,
  per manager, only for ``Apply`` requests, never shown), co-ownership (a field another
  manager also set is still removed when its last applier drops it), conflicts (every
  apply acts as with ``force=true``), dry runs;
- the ``scale`` subresource (``autoscaling/v1`` Scale) of Deployments and of custom
  resources whose CRD declares one (``specReplicasPath``, ``statusReplicasPath``,
  ``labelSelectorPath``): what ``kubectl scale`` and a HorizontalPodAutoscaler use;
- garbage collection of dependents, in the background: when an object is removed, the
  objects whose every owner reference names a removed object are deleted too, and an
  object created with owner references none of which names an existing object (by uid)
  is deleted a second later (no foreground deletion, no orphaning);
- admission, in part: a custom resource's ``spec`` (and its ``status``, written through
  the status subresource) is pruned to what its CRD's structural schema knows (a real
  server drops unknown fields too, and only warns the client), and a name, label or
  resource name the API server's validation refuses is a 422 (:mod:`.k8s_rules`);
- fault injection for tests: ``POST /emulator/faults`` with ``{"method", "plural",
  "name" (optional), "code", "times"}`` makes the next ``times`` matching requests fail
  with ``code`` (e.g. a 403 as missing RBAC gives); ``GET`` lists what is left;
  ``GET /emulator/watches`` lists the open watches with their selectors. Optional keys,
  each small and separate (:meth:`EmulatedAPIServer.add_fault`):

  - ``method`` and ``plural`` may also be a list or ``"*"`` (any request; any resource);
  - ``subresource`` (e.g. ``"status"``): match requests to that subresource (without
    it, only requests to the object itself match, as before);
  - ``delay`` (seconds): the request is answered that much later (with ``code`` if one is
    given, else normally): a client whose timeout is shorter gives up first;
  - ``rate`` (0 to 1) and ``seed``: each matching request fails with that probability
    (a random fault rate for churn tests); ``times`` then caps the failures injected
    (unlimited when absent);
  - ``"method": "WATCH"`` acts on the events of open watches of ``plural`` instead of
    on requests: with ``delay`` each of the next ``times`` events is delivered that much
    later (a slow watch), with ``"close": true`` the stream is ended before the next
    event (a watch closed mid-stream; the client must re-list or resume from its last
    resourceVersion, as against a real API server). ``GET`` faults still match the
    request that opens a watch.

  ``GET /emulator/faults`` also reports ``injected``: how many faults fired so far.

Still NOT emulated (tests play these parts or do without): scheduler, kubelet and every
controller (a Deployment gets no status unless somebody writes it), admission webhooks,
schema validation and CEL rules, authentication and RBAC (every
token may do everything; 403s come only from injected faults).

Run it: ``python -m llm_operator_sandbox.emulator --port 0 --kubeconfig kubeconfig.yaml``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import copy
import dataclasses
import datetime as dt
import json
import random
import re
import secrets
import signal
import string
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp.web
import attrs
import jsonpatch
import kmock
import yaml

from .k8s_rules import object_errors, prune

JSON = dict[str, Any]
Key = tuple[str, str, str | None, str]  # group, plural, namespace (None: cluster-scoped), name

CRD_GROUP = "apiextensions.k8s.io"
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
CONTENT_JSON_PATCH = "application/json-patch+json"
CONTENT_MERGE_PATCH = "application/merge-patch+json"
CONTENT_STRATEGIC = "application/strategic-merge-patch+json"
CONTENT_APPLY = "application/apply-patch+yaml"
FAULTS_PATH = "/emulator/faults"
WATCHES_PATH = "/emulator/watches"
GC_ORPHAN_DELAY_SECONDS = 1.0  # a dependent created for an absent owner goes after this
# The scale subresource of the built-in kinds that have one (spec, status, selector).
_BUILTIN_SCALE: dict[tuple[str, str], tuple[str, str, str]] = {
    ("apps", "deployments"): (".spec.replicas", ".status.replicas", ".spec.selector"),
}


class ApiError(Exception):
    """An API failure, answered as a Kubernetes ``Status`` object."""

    def __init__(self, code: int, reason: str, message: str, details: JSON | None = None):
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details or {}

    def status(self) -> JSON:
        """The ``v1 Status`` body of this error."""
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "details": self.details,
            "code": self.code,
        }


@dataclass(frozen=True)
class Target:
    """What a resource URL addresses."""

    group: str
    version: str
    plural: str
    namespace: str | None
    name: str | None
    subresource: str | None


def parse_target(path: str) -> Target | None:
    """Parse a resource URL; None for anything else (discovery, /version, ...)."""
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 3 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 4 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    namespace: str | None = None
    if rest[0] == "namespaces" and len(rest) >= 3 and not (
        group == "" and len(rest) == 3 and rest[2] in ("status", "finalize")
    ):
        namespace, rest = rest[1], rest[2:]
    if len(rest) > 3:
        return None
    name = rest[1] if len(rest) >= 2 else None
    sub = rest[2] if len(rest) == 3 else None
    return Target(group, version, rest[0], namespace, name, sub)


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (None deletes, lists replace)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            result.pop(k, None)
        else:
            result[k] = merge_patch(result.get(k), v)
    return result


def _strip_directives(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_directives(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_strip_directives(v) for v in value]
    return value


def _named(items: list[Any]) -> bool:
    return all(isinstance(i, dict) and "name" in i for i in items)


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """An approximation of Kubernetes' strategic merge patch.

    Dicts merge, None deletes, lists of named items (containers, volumes, env, ports)
    merge by ``name`` (``$patch: delete`` removes one), other lists replace, and the
    ``$``-directives are dropped. Enough for ``kubectl apply`` of common manifests.
    """
    if not isinstance(patch, dict):
        return _strip_directives(copy.deepcopy(patch))
    result = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if k.startswith("$"):
            continue
        old = result.get(k)
        if v is None:
            result.pop(k, None)
        elif isinstance(v, list) and isinstance(old, list) and v and _named(v) and _named(old):
            merged = [dict(i) for i in old]
            for item in v:
                pos = next((n for n, o in enumerate(merged) if o["name"] == item["name"]), None)
                if item.get("$patch") == "delete":
                    if pos is not None:
                        merged.pop(pos)
                elif pos is None:
                    merged.append(_strip_directives(item))
                else:
                    merged[pos] = strategic_merge_patch(merged[pos], item)
            result[k] = merged
        else:
            result[k] = strategic_merge_patch(old, v) if isinstance(v, dict) else (
                _strip_directives(copy.deepcopy(v))
            )
    return result


FieldPath = tuple[Any, ...]  # keys; ("name", X) marks the item named X of a list


def field_paths(value: Any, prefix: FieldPath = ()) -> set[FieldPath]:
    """Every field an applied configuration sets: map keys, items of lists of named
    items (by name) and their fields; any other list is one (atomic) field."""
    out: set[FieldPath] = set()
    if isinstance(value, dict):
        for k, v in value.items():
            out.add((*prefix, k))
            out |= field_paths(v, (*prefix, k))
    elif isinstance(value, list) and value and _named(value):
        for item in value:
            path = (*prefix, ("name", item["name"]))
            out.add(path)
            out |= field_paths(item, path)
    return out


def _lookup(obj: Any, path: FieldPath) -> tuple[Any, Any]:
    """(parent, key) of ``path`` in ``obj``; (None, None) when absent."""
    parent: Any = obj
    for n, seg in enumerate(path):
        if isinstance(seg, tuple):
            if not isinstance(parent, list):
                return None, None
            pos = next((i for i, o in enumerate(parent)
                        if isinstance(o, dict) and o.get("name") == seg[1]), None)
            if pos is None:
                return None, None
            key: Any = pos
        else:
            if not isinstance(parent, dict) or seg not in parent:
                return None, None
            key = seg
        if n == len(path) - 1:
            return parent, key
        parent = parent[key]
    return None, None


def apply_body(body: bytes) -> Any:
    """The decoded body of a server-side apply: YAML, or JSON (which is YAML too). JSON,
    what kubectl and the operator send, is decoded as JSON: a real API server decodes
    either at compiled speed, while PyYAML's pure-Python parser took 15-60 ms per
    Deployment here: two thirds of the emulator's CPU in a burst of creates
    (benchmarks/scale.py), which no real API server spends."""
    if not body:
        return None
    try:
        return json.loads(body)
    except ValueError:
        return yaml.safe_load(body)


def apply_patch(current: JSON, applied: JSON, previous: set[FieldPath]) -> JSON:
    """Server-side apply as far as the emulator goes (see the module docstring): merge
    ``applied`` into ``current``, then remove what the manager applied before
    (``previous``) and no longer sends, deepest first; a map or list that still holds
    fields somebody else set stays."""
    result: JSON = strategic_merge_patch(copy.deepcopy(current), applied)
    for path in sorted(previous - field_paths(applied), key=len, reverse=True):
        if path[-1] == "name" and len(path) > 1 and isinstance(path[-2], tuple):
            continue  # an item's key goes with its item
        parent, key = _lookup(result, path)
        if parent is None:
            continue
        value = parent[key]
        rest = value
        if isinstance(path[-1], tuple) and isinstance(value, dict):
            rest = {k: v for k, v in value.items() if k != "name"}
        if isinstance(rest, (dict, list)) and rest and any(
                len(p) > len(path) and p[:len(path)] == path for p in previous):
            continue  # what is left in it was set by others (ours went just before): keep
        if isinstance(parent, list):
            parent.pop(key)
        else:
            del parent[key]
    return result



def apply_schema_defaults(value: Any, schema: JSON) -> Any:
    """Fill ``default`` values of a structural openAPIV3Schema into ``value`` (in place)."""
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for key, sub in props.items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                apply_schema_defaults(value[key], sub)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key in value:
                if key not in props:
                    apply_schema_defaults(value[key], extra)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            apply_schema_defaults(item, schema["items"])
    return value


_SEGMENT = re.compile(
    r"\.([A-Za-z0-9_\-/]+)"  # .key
    r"|\[(\d+)\]"  # [0]
    r"|\[\?\(@\.([\w.\-/]+)\s*==\s*['\"]([^'\"]*)['\"]\)\]"  # [?(@.type=="Ready")]
)


def jsonpath_value(obj: Any, path: str) -> Any:
    """Evaluate the small JSONPath subset of CRD printer columns (``.a.b[0]``,
    ``.status.conditions[?(@.type=="Ready")].status``); None when absent."""
    values = [obj]
    pos = 0
    path = path.strip()
    while pos < len(path):
        m = _SEGMENT.match(path, pos)
        if not m:
            return None
        pos = m.end()
        nxt: list[Any] = []
        for v in values:
            if m.group(1) is not None and isinstance(v, dict) and m.group(1) in v:
                nxt.append(v[m.group(1)])
            elif m.group(2) is not None and isinstance(v, list) and int(m.group(2)) < len(v):
                nxt.append(v[int(m.group(2))])
            elif m.group(3) is not None and isinstance(v, list):
                for item in v:
                    if isinstance(item, dict) and str(jsonpath_value(item, "." + m.group(3))) == (
                        m.group(4)
                    ):
                        nxt.append(item)
        values = nxt
    return values[0] if values else None


def human_age(timestamp: str | None, now: dt.datetime | None = None) -> str:
    """kubectl's short age (``45s``, ``3m``, ``2h``, ``4d``) of an RFC 3339 timestamp."""
    if not timestamp:
        return "<unknown>"
    then = dt.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    secs = max(0, int(((now or dt.datetime.now(dt.UTC)) - then).total_seconds()))
    if secs < 120:
        return f"{secs}s"
    if secs < 3600 * 3:
        return f"{secs // 60}m"
    if secs < 86400 * 2:
        return f"{secs // 3600}h"
    return f"{secs // 86400}d"


def match_labels(selector: str, labels: dict[str, str]) -> bool:
    """Whether ``labels`` satisfy a Kubernetes label selector string."""
    for term in re.split(r",(?![^()]*\))", selector):
        term = term.strip()
        if not term:
            continue
        m = re.fullmatch(r"(\S+)\s+(in|notin)\s+\((.*)\)", term)
        if m:
            values = {v.strip() for v in m.group(3).split(",")}
            found = m.group(1) in labels and labels[m.group(1)] in values
            if found != (m.group(2) == "in"):
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k.strip()) == v.strip():
                return False
        elif "=" in term:
            k, v = re.split(r"==?", term, maxsplit=1)
            if labels.get(k.strip()) != v.strip():
                return False
        elif term not in labels:
            return False
    return True


def match_fields(selector: str, obj: JSON) -> bool:
    """Whether ``obj`` satisfies a field selector (``metadata.name=x,status.phase!=y``)."""
    for term in selector.split(","):
        term = term.strip()
        if not term:
            continue
        negated = "!=" in term
        k, v = re.split(r"!=|==?", term, maxsplit=1)
        actual = jsonpath_value(obj, "." + k.strip())
        equal = (str(actual) if actual is not None else "") == v.strip()
        if equal == negated:
            return False
    return True


@dataclass
class _Watcher:
    group: str
    plural: str
    namespace: str | None
    name: str | None
    labels: str | None
    fields: str | None
    queue: asyncio.Queue[tuple[str, JSON]] = field(default_factory=asyncio.Queue)

    def wants(self, obj: JSON) -> bool:
        meta = obj.get("metadata", {})
        return (
            (self.namespace is None or meta.get("namespace") == self.namespace)
            and (self.name is None or meta.get("name") == self.name)
            and (not self.labels or match_labels(self.labels, meta.get("labels") or {}))
            and (not self.fields or match_fields(self.fields, obj))
        )


# Server-side table columns for the built-in kinds the project shows (kubectl's own).
_BUILTIN_COLUMNS: dict[tuple[str, str], list[tuple[str, str, str]]] = {
    ("apps", "deployments"): [
        ("Ready", "string", "{.status.readyReplicas}/{.spec.replicas}"),
        ("Up-to-date", "integer", ".status.updatedReplicas"),
        ("Available", "integer", ".status.availableReplicas"),
    ],
    ("", "services"): [
        ("Type", "string", ".spec.type"),
        ("Cluster-IP", "string", ".spec.clusterIP"),
        ("Ports", "string", "{ports}"),
    ],
    ("", "namespaces"): [("Status", "string", ".status.phase")],
    ("batch", "jobs"): [("Completions", "string", "{.status.succeeded}/{.spec.completions}")],
    ("", "events"): [
        ("Type", "string", ".type"),
        ("Reason", "string", ".reason"),
        ("Object", "string", "{.involvedObject.kind}/{.involvedObject.name}"),
        ("Message", "string", ".message"),
    ],
}


@attrs.define(kw_only=True)
class EmulatedAPIServer(kmock.KubernetesEmulator):
    """kmock's emulator with the fixes kopf and kubectl need (see the module docstring).

    ``objects_by_key`` holds the stored objects (keyed by group, plural, namespace,
    name) for tests that run it in-process.
    """

    history_size: int = 20_000
    objects_by_key: dict[Key, JSON] = attrs.field(factory=dict, init=False)
    _revision: int = attrs.field(default=0, init=False)
    _watchers: list[_Watcher] = attrs.field(factory=list, init=False)
    _history: dict[tuple[str, str], collections.deque[tuple[int, str, JSON]]] = attrs.field(
        factory=dict, init=False
    )
    _history_floor: dict[tuple[str, str], int] = attrs.field(factory=dict, init=False)
    _crds: dict[tuple[str, str], JSON] = attrs.field(factory=dict, init=False)
    _next_ip: int = attrs.field(default=0, init=False)
    # Server-side apply: the fields each manager applied last, per object (never shown).
    _applied: dict[Key, dict[str, set[FieldPath]]] = attrs.field(factory=dict, init=False)
    faults: list[JSON] = attrs.field(factory=list, init=False)
    injected: int = attrs.field(default=0, init=False)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.resources.load_bundled()
        for ns in DEFAULT_NAMESPACES:
            self.create_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})

    # ----------------------------------------------------------------- public helpers
    def create_object(self, obj: JSON) -> JSON:
        """Create an object directly (as a POST would), for setup code and tests."""
        group, _, version = obj["apiVersion"].rpartition("/")
        plural = self._plural_of(group, version, obj["kind"])
        ns = obj.get("metadata", {}).get("namespace")
        info = self._info(group, version, plural)
        target = Target(group, version, plural, ns if info.namespaced else None, None, None)
        return self._create(target, copy.deepcopy(obj))

    def get_object(self, group: str, plural: str, namespace: str | None, name: str) -> JSON | None:
        """The stored object or None."""
        return self.objects_by_key.get((group, plural, namespace, name))

    # ----------------------------------------------------------------- HTTP entry point
    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        if raw_request.path == FAULTS_PATH:
            return await self._serve_faults(raw_request)
        if raw_request.path == WATCHES_PATH:  # who watches what, with which selectors
            return aiohttp.web.json_response({"watches": [
                {"group": w.group, "plural": w.plural, "namespace": w.namespace,
                 "labelSelector": w.labels, "fieldSelector": w.fields}
                for w in self._watchers]})
        target = parse_target(raw_request.path)
        if target is None:
            return await super().__call__(raw_request)  # discovery & co: kmock serves them
        try:
            await self._inject_fault_async(raw_request, target)
            return await self._serve(raw_request, target)
        except ApiError as exc:
            return aiohttp.web.json_response(exc.status(), status=exc.code)

    # ----------------------------------------------------------------- fault injection
    def add_fault(self, method: str | list[str], plural: str | list[str], code: int = 0,
                  name: str | None = None, times: int | None = 1, *,
                  subresource: str | None = None, delay: float = 0.0,
                  rate: float | None = None, seed: int | None = None,
                  close: bool = False) -> None:
        """Fail (``code``), delay (``delay`` seconds) or, for ``"WATCH"``, slow down or
        close the next ``times`` matching requests or watch events (see the module
        docstring); with ``rate``, each match fires with that probability."""
        methods = [method] if isinstance(method, str) else list(method)
        self.faults.append({
            "method": [m.upper() for m in methods], "plural": plural, "name": name,
            "code": int(code or 0), "times": None if times is None else int(times),
            "subresource": subresource, "delay": float(delay or 0.0),
            "rate": None if rate is None else float(rate), "close": bool(close),
            "_random": random.Random(seed)})

    async def _serve_faults(self, req: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        if req.method.upper() == "POST":
            spec = json.loads(await req.read() or b"{}")
            default_times = None if spec.get("rate") is not None else 1
            self.add_fault(spec["method"], spec["plural"], spec.get("code", 0), spec.get("name"),
                           spec.get("times", default_times),
                           subresource=spec.get("subresource"), delay=spec.get("delay", 0.0),
                           rate=spec.get("rate"), seed=spec.get("seed"),
                           close=spec.get("close", False))
        elif req.method.upper() == "DELETE":
            self.faults.clear()
        return aiohttp.web.json_response({
            "faults": [{k: v for k, v in f.items() if not k.startswith("_")}
                       for f in self.faults],
            "injected": self.injected})

    def _take_fault(self, method: str, plural: str, name: str | None,
                    subresource: str | None) -> JSON | None:
        """The first fault that matches and fires now (its ``times`` counted down)."""
        for fault in list(self.faults):
            plurals = fault["plural"]
            if not ((method in fault["method"]
                     or ("*" in fault["method"] and method != "WATCH"))
                    and (plurals == "*" or plural == plurals
                         or (isinstance(plurals, list) and plural in plurals))
                    and fault["name"] in (None, name)
                    and fault["subresource"] == subresource):
                continue
            if fault["rate"] is not None and fault["_random"].random() >= fault["rate"]:
                continue
            if fault["times"] is not None:
                fault["times"] -= 1
                if fault["times"] <= 0:
                    self.faults.remove(fault)
            self.injected += 1
            return fault
        return None

    async def _inject_fault_async(self, req: aiohttp.web.BaseRequest, t: Target) -> None:
        fault = self._take_fault(req.method.upper(), t.plural, t.name, t.subresource)
        if fault is None:
            return
        if fault["delay"]:
            # The body is read first: a client that gives up meanwhile does not cancel a
            # write the server already received (as with a real API server).
            await req.read()
            await asyncio.sleep(fault["delay"])
        if fault["code"]:
            self._raise_fault(fault, req.method.upper(), t)

    @staticmethod
    def _raise_fault(fault: JSON, method: str, t: Target) -> None:
        reason = {403: "Forbidden", 409: "Conflict", 500: "InternalError",
                  503: "ServiceUnavailable", 504: "Timeout"}.get(fault["code"], "InjectedFault")
        raise ApiError(fault["code"], reason,
                       f"injected fault: {method} {t.plural}/{t.name or ''} "
                       f"answers {fault['code']}")

    async def _serve(self, req: aiohttp.web.BaseRequest, t: Target) -> aiohttp.web.StreamResponse:
        info = self._info(t.group, t.version, t.plural)
        if t.namespace is not None and not info.namespaced:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        method = req.method.upper()
        params = req.query
        if method == "GET" and params.get("watch") in ("true", "1"):
            return await self._watch(req, t)
        if method == "GET" and t.name is None:
            return self._respond(req, t, self._list(t, params), listing=True)
        if method == "GET" and t.subresource == "scale":
            return aiohttp.web.json_response(self._scale_of(t, self._fetch(t)))
        if method == "GET":
            return self._respond(req, t, self._fetch(t))
        body = await req.read()
        ctype = req.headers.get("Content-Type", "").split(";")[0].strip()
        if body and ctype != CONTENT_APPLY and "json" not in (ctype or "json"):
            # kubectl tries protobuf for built-in kinds and falls back to JSON on a 415.
            raise ApiError(415, "UnsupportedMediaType", "the emulator speaks JSON only")
        try:
            if ctype == CONTENT_APPLY:
                data = apply_body(body)
            else:
                data = json.loads(body) if body else None
        except (ValueError, yaml.YAMLError) as exc:
            raise ApiError(400, "BadRequest", f"the body cannot be decoded: {exc}") from None
        if method == "PATCH" and ctype == CONTENT_APPLY and t.name is not None:
            obj, created = self._apply(t, params, data)
            return aiohttp.web.json_response(obj, status=201 if created else 200)
        if method == "POST" and t.name is None:
            if not isinstance(data, dict):
                raise ApiError(400, "BadRequest", "the body must be an object")
            return aiohttp.web.json_response(self._create(t, data), status=201)
        if method in ("PATCH", "PUT") and t.subresource == "scale" and t.name is not None:
            return aiohttp.web.json_response(self._update_scale(t, method, ctype, data))
        if method in ("PATCH", "PUT") and t.name is not None:
            return aiohttp.web.json_response(self._update(t, method, ctype, data))
        if method == "DELETE" and t.name is not None:
            return aiohttp.web.json_response(self._delete(t))
        raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on this path")

    def _respond(
        self, req: aiohttp.web.BaseRequest, t: Target, data: JSON, listing: bool = False
    ) -> aiohttp.web.StreamResponse:
        if "as=Table" in req.headers.get("Accept", ""):
            items = data["items"] if listing else [data]
            return aiohttp.web.json_response(self._table(t, items, data["metadata"]))
        return aiohttp.web.json_response(data)

    # ----------------------------------------------------------------- resources
    async def _serve_version(self, request: Any) -> Any:
        # kmock repeats a resource's short names on its subresources, which makes kubectl
        # call every short name ambiguous ("ns" could also be namespaces/status).
        # It also says "/v1" for the core group version, and gives subresources the
        # parent's verbs (a subresource is only read and written, never listed).
        doc: dict[str, Any] = await super()._serve_version(request)  # type: ignore[assignment]
        doc["groupVersion"] = doc["groupVersion"].lstrip("/")
        for entry in doc.get("resources", []):
            if "/" in entry["name"]:
                entry["shortNames"] = []
                entry["categories"] = []
                entry["verbs"] = ["get", "patch", "update"]
            if entry["name"].endswith("/scale"):  # as kube-apiserver: autoscaling/v1 Scale
                entry.update(kind="Scale", group="autoscaling", version="v1")
        return doc

    def _info(self, group: str, version: str, plural: str) -> Any:
        res = kmock.resource(group, version, plural)
        if res not in self.resources:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return self.resources[res]

    def _plural_of(self, group: str, version: str, kind: str) -> str:
        for res in self.resources:
            if res.group == group and res.version == version and self.resources[res].kind == kind:
                return str(res.plural)
        raise ApiError(404, "NotFound", f"no resource for kind {kind} in {group}/{version}")

    def _kind(self, t: Target) -> str:
        return str(self._info(t.group, t.version, t.plural).kind)

    def _api_version(self, t: Target) -> str:
        return f"{t.group}/{t.version}" if t.group else t.version

    def _not_found(self, t: Target, name: str) -> ApiError:
        what = f"{t.plural}.{t.group}" if t.group else t.plural
        return ApiError(
            404, "NotFound", f'{what} "{name}" not found',
            {"name": name, "group": t.group, "kind": t.plural},
        )

    def _register_crd(self, crd: JSON) -> None:
        spec = crd.get("spec", {})
        names = spec.get("names", {})
        group, plural = spec.get("group", ""), names.get("plural", "")
        for ver in spec.get("versions", []):
            if not ver.get("served", True):
                continue
            self.resources[kmock.resource(group, ver["name"], plural)] = kmock.ResourceInfo(
                kind=names.get("kind"),
                singular=names.get("singular") or names.get("kind", "").lower(),
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                verbs={"create", "delete", "deletecollection", "get", "list", "patch",
                       "update", "watch"},
                shortnames=set(names.get("shortNames", [])),
                categories=set(names.get("categories", [])),
                subresources={sub for sub in ("status", "scale")
                              if sub in (ver.get("subresources") or {})},
            )
        self._crds[(group, plural)] = crd

    def _unregister_crd(self, crd: JSON) -> None:
        spec = crd.get("spec", {})
        group, plural = spec.get("group", ""), spec.get("names", {}).get("plural", "")
        for ver in spec.get("versions", []):
            res = kmock.resource(group, ver["name"], plural)
            if res in self.resources:
                del self.resources[res]
        self._crds.pop((group, plural), None)
        for key in [k for k in self.objects_by_key if k[:2] == (group, plural)]:
            obj = self.objects_by_key.pop(key)
            self._emit(group, plural, "DELETED", self._bump(obj))

    def _crd_version(self, group: str, plural: str, version: str) -> JSON | None:
        crd = self._crds.get((group, plural))
        if crd is None:
            return None
        return next((v for v in crd["spec"].get("versions", []) if v["name"] == version), None)

    # ----------------------------------------------------------------- reads
    def _fetch(self, t: Target) -> JSON:
        assert t.name is not None
        obj = self.objects_by_key.get((t.group, t.plural, t.namespace, t.name))
        if obj is None:
            raise self._not_found(t, t.name)
        return obj

    def _select(
        self, t: Target, labels: str | None = None, fields: str | None = None
    ) -> Iterator[JSON]:
        for (group, plural, ns, _name), obj in self.objects_by_key.items():
            if (group, plural) != (t.group, t.plural):
                continue
            if t.namespace is not None and ns != t.namespace:
                continue
            if labels and not match_labels(labels, obj["metadata"].get("labels") or {}):
                continue
            if fields and not match_fields(fields, obj):
                continue
            yield obj

    def _list(self, t: Target, params: Any) -> JSON:
        items = sorted(
            self._select(t, params.get("labelSelector"), params.get("fieldSelector")),
            key=lambda o: (o["metadata"].get("namespace") or "", o["metadata"]["name"]),
        )
        return {
            "kind": f"{self._kind(t)}List",
            "apiVersion": self._api_version(t),
            "metadata": {"resourceVersion": str(self._revision)},
            "items": items,
        }

    def _table(self, t: Target, items: list[JSON], meta: JSON) -> JSON:
        columns: list[tuple[str, str, str, int]] = [("Name", "string", "", 0)]
        ver = self._crd_version(t.group, t.plural, t.version)
        if ver is not None:
            for col in ver.get("additionalPrinterColumns", []):
                columns.append((col["name"], col.get("type", "string"), col["jsonPath"],
                                int(col.get("priority", 0))))
            if not any(c[2] == ".metadata.creationTimestamp" for c in columns):
                columns.append(("Age", "date", ".metadata.creationTimestamp", 0))
        else:
            for name, typ, path in _BUILTIN_COLUMNS.get((t.group, t.plural), []):
                columns.append((name, typ, path, 0))
            columns.append(("Age", "date", ".metadata.creationTimestamp", 0))
        rows = []
        for obj in items:
            cells: list[Any] = []
            for name, typ, path, _prio in columns:
                if name == "Name" and not path:
                    cells.append(obj["metadata"]["name"])
                    continue
                cells.append(self._cell(obj, typ, path))
            rows.append({
                "cells": cells,
                "object": {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": obj["metadata"],
                },
            })
        return {
            "kind": "Table",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": {"resourceVersion": meta.get("resourceVersion", str(self._revision))},
            "columnDefinitions": [
                {"name": n, "type": "string" if typ == "date" else typ,
                 "format": "name" if n == "Name" else "", "description": path, "priority": prio}
                for n, typ, path, prio in columns
            ],
            "rows": rows,
        }

    @staticmethod
    def _cell(obj: JSON, typ: str, path: str) -> Any:
        if path == "{ports}":
            ports = obj.get("spec", {}).get("ports", [])
            text = ",".join(f"{p.get('port')}/{p.get('protocol', 'TCP')}" for p in ports)
            return text or "<none>"
        if path.startswith("{"):  # "{a}/{b}" compositions
            parts = re.findall(r"\{([^}]*)\}", path)
            vals = [jsonpath_value(obj, p) for p in parts]
            return "/".join(str(v if v is not None else 0) for v in vals)
        value = jsonpath_value(obj, path)
        if typ == "date":
            return human_age(value) if isinstance(value, str) else "<unknown>"
        if value is None:
            return None
        if typ == "integer":
            return value if isinstance(value, int) else str(value)
        if isinstance(value, (dict, list)):
            return json.dumps(value)
        return value if typ in ("number", "boolean") else str(value)

    async def _watch(self, req: aiohttp.web.BaseRequest, t: Target) -> aiohttp.web.StreamResponse:
        params = req.query
        watcher = _Watcher(
            t.group, t.plural, t.namespace, t.name,
            params.get("labelSelector"), params.get("fieldSelector"),
        )
        if t.name is None and params.get("fieldSelector", "").startswith("metadata.name="):
            watcher.name = params["fieldSelector"].split("=", 1)[1].split(",")[0]
        # Register and take the initial events in one synchronous step: nothing is lost.
        initial: list[tuple[str, JSON]] = []
        rv_param = params.get("resourceVersion", "")
        expired = False
        if rv_param in ("", "0") or not rv_param.isdigit():
            initial = [("ADDED", o) for o in self._select(t) if watcher.wants(o)]
        else:
            since = int(rv_param)
            if since < self._history_floor.get((t.group, t.plural), 0):
                expired = True
            else:
                hist = self._history.get((t.group, t.plural), collections.deque())
                initial = [(typ, o) for rv, typ, o in hist if rv > since and watcher.wants(o)]
        self._watchers.append(watcher)
        as_table = "as=Table" in req.headers.get("Accept", "")

        def line(typ: str, obj: JSON) -> bytes:
            if as_table:  # kubectl get -w asks for rows, not objects
                obj = self._table(t, [obj], obj["metadata"])
            return json.dumps({"type": typ, "object": obj}).encode() + b"\n"

        resp = aiohttp.web.StreamResponse(headers={"Content-Type": "application/json"})
        try:
            await resp.prepare(req)
            if expired:
                gone = ApiError(410, "Expired", f"too old resource version: {rv_param}").status()
                await resp.write(json.dumps({"type": "ERROR", "object": gone}).encode() + b"\n")
                return resp
            for typ, obj in initial:
                await resp.write(line(typ, obj))
            timeout = float(params["timeoutSeconds"]) if params.get("timeoutSeconds") else None
            loop = asyncio.get_running_loop()
            deadline = None if timeout is None else loop.time() + timeout
            while True:
                remaining = None if deadline is None else deadline - loop.time()
                if remaining is not None and remaining <= 0:
                    break
                try:
                    typ, obj = await asyncio.wait_for(watcher.queue.get(), remaining)
                except TimeoutError:
                    break
                fault = self._take_fault("WATCH", t.plural, obj["metadata"].get("name"), None)
                if fault is not None and fault["close"]:
                    break  # closed mid-stream: the client resumes from what it has seen
                if fault is not None and fault["delay"]:
                    await asyncio.sleep(fault["delay"])  # a slow watch: delivered late
                await resp.write(line(typ, obj))
        except (ConnectionResetError, ConnectionError):
            pass
        finally:
            self._watchers.remove(watcher)
        with contextlib.suppress(ConnectionError, RuntimeError):
            await resp.write_eof()
        return resp

    # ----------------------------------------------------------------- writes
    def _bump(self, obj: JSON) -> JSON:
        self._revision += 1
        obj = dict(obj)
        obj["metadata"] = dict(obj["metadata"], resourceVersion=str(self._revision))
        return obj

    def _emit(self, group: str, plural: str, typ: str, obj: JSON) -> None:
        rv = int(obj["metadata"]["resourceVersion"])
        hist = self._history.setdefault((group, plural), collections.deque())
        hist.append((rv, typ, obj))
        while len(hist) > self.history_size:
            self._history_floor[(group, plural)] = hist.popleft()[0]
        for w in self._watchers:
            if (w.group, w.plural) == (group, plural) and w.wants(obj):
                w.queue.put_nowait((typ, obj))

    def _create(self, t: Target, obj: JSON) -> JSON:
        info = self._info(t.group, t.version, t.plural)
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise ApiError(400, "BadRequest", "metadata must be an object")
        ns: str | None = None
        if info.namespaced:
            ns = t.namespace or meta.get("namespace") or "default"
            if meta.get("namespace") not in (None, ns):
                raise ApiError(400, "BadRequest", "the namespace of the object does not match "
                               "the namespace of the request")
            if ("", "namespaces", None, ns) not in self.objects_by_key:
                raise ApiError(404, "NotFound", f'namespaces "{ns}" not found',
                               {"name": ns, "kind": "namespaces"})
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise ApiError(422, "Invalid", "metadata.name: Required value: name or "
                               "generateName is required")
            alphabet = string.ascii_lowercase + string.digits
            suffix = "".join(secrets.choice(alphabet) for _ in range(5))
            meta["name"] = meta["generateName"] + suffix
        key = (t.group, t.plural, ns, meta["name"])
        if key in self.objects_by_key:
            what = f"{t.plural}.{t.group}" if t.group else t.plural
            raise ApiError(409, "AlreadyExists", f'{what} "{meta["name"]}" already exists',
                           {"name": meta["name"], "group": t.group, "kind": t.plural})
        obj["apiVersion"] = self._api_version(t)
        obj["kind"] = info.kind
        for volatile in ("deletionTimestamp", "deletionGracePeriodSeconds", "resourceVersion"):
            meta.pop(volatile, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = _now()
        meta["generation"] = 1
        if "status" in info.subresources:
            obj.pop("status", None)
        self._default_custom_resource(t, obj)
        if t.group == "" and t.plural == "namespaces":
            obj["status"] = {"phase": "Active"}
        if t.group == "" and t.plural == "services":
            self._allocate_cluster_ip(obj)
        if t.group == CRD_GROUP and t.plural == "customresourcedefinitions":
            obj["status"] = self._crd_status(obj)
        stored = self._store(t, key, self._bump(obj), "ADDED")
        self._collect_if_orphan(key)
        return stored

    def _collect_if_orphan(self, key: Key) -> None:
        """A dependent created after its owners went (a controller that wrote a child for
        an object deleted meanwhile) is deleted a moment later, as kube-controller-
        manager's garbage collector does for owner references to absent objects."""
        refs = self.objects_by_key[key]["metadata"].get("ownerReferences") or []
        if not any(r.get("uid") for r in refs):
            return

        def collect() -> None:
            obj = self.objects_by_key.get(key)
            alive = {o["metadata"].get("uid") for o in self.objects_by_key.values()}
            refs = (obj or {}).get("metadata", {}).get("ownerReferences") or []
            if obj is not None and refs and not any(r.get("uid") in alive for r in refs):
                self._delete_key(key, obj)
        try:
            asyncio.get_running_loop().call_later(GC_ORPHAN_DELAY_SECONDS, collect)
        except RuntimeError:  # no loop (setup code): collect at once
            collect()

    def _default_custom_resource(self, t: Target, obj: JSON) -> None:
        """Admit a write that changes the object, as the API server does: drop the fields
        a custom resource's structural schema does not know (pruning; the real server
        only warns the client, and clients without strict validation say nothing), apply
        the CRD schema's defaults (metadata aside), and refuse with 422 a name, label or
        resource name the API server's validation refuses (sandbox/k8s_rules.py)."""
        ver = self._crd_version(t.group, t.plural, t.version)
        if ver is not None:
            schema = (ver.get("schema") or {}).get("openAPIV3Schema") or {}
            spec_schema = (schema.get("properties") or {}).get("spec")
            if isinstance(spec_schema, dict) and isinstance(obj.get("spec"), dict):
                obj["spec"] = prune(spec_schema, obj["spec"])
            apply_schema_defaults(obj, {"properties": {
                k: v for k, v in (schema.get("properties") or {}).items() if k != "metadata"
            }})
        problems = object_errors(obj)
        if problems:
            what = f"{t.plural}.{t.group}" if t.group else t.plural
            raise ApiError(422, "Invalid", f'{what} "{obj["metadata"].get("name")}" is '
                           f"invalid: {'; '.join(problems)}")

    def _pruned_status(self, t: Target, status: Any) -> Any:
        """A status written through the ``status`` subresource of a custom resource,
        pruned to what the CRD's structural schema knows, as the API server does: a field
        the operator writes but the CRD does not declare is lost on a cluster too."""
        ver = self._crd_version(t.group, t.plural, t.version)
        schema = ((ver or {}).get("schema") or {}).get("openAPIV3Schema") or {}
        status_schema = (schema.get("properties") or {}).get("status")
        if isinstance(status_schema, dict) and isinstance(status, dict):
            return prune(status_schema, status)
        return status

    def _store(self, t: Target, key: Key, obj: JSON, event: str) -> JSON:
        """Keep ``obj``, tell the watchers, and serve the kind a stored CRD defines."""
        self.objects_by_key[key] = obj
        self._emit(t.group, t.plural, event, obj)
        if t.group == CRD_GROUP and t.plural == "customresourcedefinitions":
            self._register_crd(obj)
        return obj

    def _allocate_cluster_ip(self, svc: JSON) -> None:
        # What kube-apiserver's IP allocator does (from 10.96.0.0/12); no traffic flows.
        spec = svc.setdefault("spec", {})
        if spec.get("type", "ClusterIP") in ("ClusterIP", "NodePort", "LoadBalancer") and (
                not spec.get("clusterIP")):
            self._next_ip += 1
            ip = f"10.96.{self._next_ip // 250}.{self._next_ip % 250 + 1}"
            spec["clusterIP"], spec["clusterIPs"] = ip, [ip]

    @staticmethod
    def _crd_status(crd: JSON) -> JSON:
        now = _now()
        spec = crd.get("spec", {})
        names = dict(spec.get("names", {}))
        names.setdefault("singular", names.get("kind", "").lower())
        names.setdefault("listKind", names.get("kind", "") + "List")
        return {
            "acceptedNames": names,
            "conditions": [
                {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
                 "message": "no conflicts found", "lastTransitionTime": now},
                {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                 "message": "the initial names have been accepted", "lastTransitionTime": now},
            ],
            "storedVersions": [v["name"] for v in spec.get("versions", []) if v.get("storage")],
        }

    def _update(self, t: Target, method: str, ctype: str, data: Any,
                manager: str | None = None) -> JSON:
        """PUT or PATCH (``manager``: the field manager of a server-side apply)."""
        assert t.name is not None
        info = self._info(t.group, t.version, t.plural)
        key = (t.group, t.plural, t.namespace, t.name)
        cur = self.objects_by_key.get(key)
        if cur is None:
            raise self._not_found(t, t.name)
        if t.subresource not in (None, "status"):
            raise ApiError(404, "NotFound", f"subresource {t.subresource} is not emulated")
        if t.subresource == "status" and "status" not in info.subresources:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        base = copy.deepcopy(cur)
        precondition: Any = None
        if method == "PUT":
            if not isinstance(data, dict):
                raise ApiError(400, "BadRequest", "the body must be an object")
            new = copy.deepcopy(data)
            precondition = (new.get("metadata") or {}).get("resourceVersion")
        elif ctype == CONTENT_JSON_PATCH:
            try:
                new = jsonpatch.apply_patch(base, data)
            except jsonpatch.JsonPatchTestFailed as exc:
                raise ApiError(422, "Invalid", f"the JSON patch test failed: {exc}") from None
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
                raise ApiError(422, "Invalid", f"the JSON patch cannot apply: {exc}") from None
        elif ctype in (CONTENT_MERGE_PATCH, CONTENT_STRATEGIC, "application/json"):
            if not isinstance(data, dict):
                raise ApiError(400, "BadRequest", "a merge patch must be an object")
            precondition = (data.get("metadata") or {}).get("resourceVersion")
            patcher = strategic_merge_patch if ctype == CONTENT_STRATEGIC else merge_patch
            new = patcher(base, data)
        elif ctype == CONTENT_APPLY and manager is not None:
            if not isinstance(data, dict):
                raise ApiError(400, "BadRequest", "an apply patch must be an object")
            precondition = (data.get("metadata") or {}).get("resourceVersion")
            new = apply_patch(base, data, self._applied.get(key, {}).get(manager, set()))
            self._applied.setdefault(key, {})[manager] = field_paths(data)
        else:
            raise ApiError(415, "UnsupportedMediaType",
                           f"the emulator does not support {ctype or 'this'} patches "
                           "(server-side apply is not emulated)")
        if precondition is not None and str(precondition) != cur["metadata"]["resourceVersion"]:
            what = f"{t.plural}.{t.group}" if t.group else t.plural
            raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {what} "{t.name}": '
                           "the object has been modified; please apply your changes to the "
                           "latest version and try again")
        if t.subresource == "status":
            result = copy.deepcopy(cur)
            if new.get("status") is None:
                result.pop("status", None)
            else:
                result["status"] = self._pruned_status(t, new["status"])
        else:
            result = new
            if "status" in info.subresources:
                if "status" in cur:
                    result["status"] = copy.deepcopy(cur["status"])
                else:
                    result.pop("status", None)
        meta = result.setdefault("metadata", {})
        for fixed in ("name", "namespace", "uid", "creationTimestamp", "deletionTimestamp",
                      "deletionGracePeriodSeconds", "generation", "resourceVersion"):
            if fixed in cur["metadata"]:
                meta[fixed] = cur["metadata"][fixed]
            else:
                meta.pop(fixed, None)
        result["apiVersion"], result["kind"] = cur["apiVersion"], cur["kind"]
        if result == cur:
            return cur  # a no-op write: no new resourceVersion, no event
        if {k: v for k, v in result.items() if k not in ("metadata", "status")} != {
            k: v for k, v in cur.items() if k not in ("metadata", "status")
        }:
            meta["generation"] = int(cur["metadata"].get("generation", 1)) + 1
            self._default_custom_resource(t, result)
        result = self._bump(result)
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            del self.objects_by_key[key]
            self._emit(t.group, t.plural, "DELETED", result)
            self._removed(key, result)
            return result
        return self._store(t, key, result, "MODIFIED")

    def _removed(self, key: Key, gone: JSON) -> None:
        """Forget what was applied to ``key``, and collect the garbage: delete (in the
        background) the objects none of whose owners exists any more."""
        self._applied.pop(key, None)
        uid = gone["metadata"].get("uid")
        alive = {o["metadata"].get("uid") for o in self.objects_by_key.values()}
        for k, obj in list(self.objects_by_key.items()):
            refs = obj["metadata"].get("ownerReferences") or []
            if k in self.objects_by_key and any(r.get("uid") == uid for r in refs) and not any(
                    r.get("uid") in alive for r in refs):
                self._delete_key(k, obj)

    # ----------------------------------------------------------------- apply and scale
    def _apply(self, t: Target, params: Any, data: Any) -> tuple[JSON, bool]:
        """Server-side apply (see :func:`apply_patch`); True when it created the object."""
        assert t.name is not None
        manager = params.get("fieldManager")
        if not manager:
            raise ApiError(400, "BadRequest", "PATCH, application/apply-patch+yaml: "
                           "fieldManager is required for apply requests")
        if not isinstance(data, dict):
            raise ApiError(400, "BadRequest", "an apply patch must be an object")
        if t.subresource is not None:
            raise ApiError(404, "NotFound", "the emulator applies whole objects only")
        key = (t.group, t.plural, t.namespace, t.name)
        if key in self.objects_by_key:
            return self._update(t, "PATCH", CONTENT_APPLY, data, manager=manager), False
        if (data.get("metadata") or {}).get("name") not in (None, t.name):
            raise ApiError(400, "BadRequest", "the name of the object does not match the URL")
        body = copy.deepcopy(data)
        body.setdefault("metadata", {})["name"] = t.name
        created = self._create(dataclasses.replace(t, name=None), body)
        self._applied[key] = {manager: field_paths(data)}
        return created, True

    def _scale_paths(self, t: Target) -> tuple[str, str, str]:
        builtin = _BUILTIN_SCALE.get((t.group, t.plural))
        if builtin is not None:
            return builtin
        ver = self._crd_version(t.group, t.plural, t.version) or {}
        scale = (ver.get("subresources") or {}).get("scale")
        if scale is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return (scale["specReplicasPath"], scale["statusReplicasPath"],
                scale.get("labelSelectorPath", ""))

    def _scale_of(self, t: Target, obj: JSON) -> JSON:
        """The ``autoscaling/v1`` Scale of ``obj``, read through its scale paths."""
        spec_path, status_path, selector_path = self._scale_paths(t)
        selector = jsonpath_value(obj, selector_path) if selector_path else None
        if isinstance(selector, dict):  # a Deployment's LabelSelector, as a string
            selector = ",".join(f"{k}={v}" for k, v in (selector.get("matchLabels") or {}).items())
        meta = obj["metadata"]
        status: JSON = {"replicas": int(jsonpath_value(obj, status_path) or 0)}
        if selector:
            status["selector"] = selector
        return {
            "kind": "Scale", "apiVersion": "autoscaling/v1",
            "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion",
                                              "creationTimestamp") if k in meta},
            "spec": {"replicas": int(jsonpath_value(obj, spec_path) or 0)},
            "status": status,
        }

    def _update_scale(self, t: Target, method: str, ctype: str, data: Any) -> JSON:
        """A write to ``/scale``: its ``spec.replicas`` lands at the object's
        specReplicasPath (with the Scale's resourceVersion as the precondition)."""
        cur = self._fetch(t)
        scale = self._scale_of(t, cur)
        if method == "PUT":
            new = data if isinstance(data, dict) else {}
        elif ctype == CONTENT_JSON_PATCH:
            new = jsonpatch.apply_patch(scale, data)
        else:
            new = merge_patch(scale, data)
        replicas = (new.get("spec") or {}).get("replicas")
        if not isinstance(replicas, int) or replicas < 0:
            raise ApiError(422, "Invalid", "spec.replicas: must be a non-negative integer")
        patch: JSON = {}
        node = patch
        keys = self._scale_paths(t)[0].strip(".").split(".")
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = replicas
        version = (new.get("metadata") or {}).get("resourceVersion")
        if version is not None:
            patch["metadata"] = {"resourceVersion": version}
        obj = self._update(dataclasses.replace(t, subresource=None), "PATCH",
                           CONTENT_MERGE_PATCH, patch)
        return self._scale_of(t, obj)

    def _delete(self, t: Target) -> JSON:
        assert t.name is not None
        key = (t.group, t.plural, t.namespace, t.name)
        cur = self.objects_by_key.get(key)
        if cur is None:
            raise self._not_found(t, t.name)
        return self._delete_key(key, cur)

    def _delete_key(self, key: Key, cur: JSON) -> JSON:
        group, plural, _ns, name = key
        meta = cur["metadata"]
        if meta.get("deletionTimestamp"):
            return cur
        if meta.get("finalizers"):
            new = self._bump(cur)
            new["metadata"].update(deletionTimestamp=_now(), deletionGracePeriodSeconds=0)
            self.objects_by_key[key] = new
            self._emit(group, plural, "MODIFIED", new)
            return new
        gone = self._bump(self.objects_by_key.pop(key))
        self._emit(group, plural, "DELETED", gone)
        self._removed(key, gone)
        if group == "" and plural == "namespaces":
            for k in [k for k in self.objects_by_key if k[2] == name]:
                self._delete_key(k, self.objects_by_key[k])
        if group == CRD_GROUP and plural == "customresourcedefinitions":
            self._unregister_crd(gone)
        return gone


# --------------------------------------------------------------------- running it
def kubeconfig_text(url: str, namespace: str = "default") -> str:
    """A kubeconfig for the emulated server (any token is accepted)."""
    return yaml.safe_dump({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "emulated", "cluster": {"server": url}}],
        "users": [{"name": "emulated", "user": {"token": "emulated-token"}}],
        "contexts": [{"name": "emulated", "context": {
            "cluster": "emulated", "user": "emulated", "namespace": namespace}}],
        "current-context": "emulated",
    }, sort_keys=False)


def load_manifests(paths: Iterable[str | Path]) -> list[JSON]:
    """Every YAML document in ``paths``."""
    docs: list[JSON] = []
    for path in paths:
        docs.extend(d for d in yaml.safe_load_all(Path(path).read_text()) if isinstance(d, dict))
    return docs


async def serve(
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    manifests: Iterable[JSON] = (),
    namespaces: Iterable[str] = (),
    on_ready: Callable[[EmulatedAPIServer, str], None] | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Serve an emulated API server until ``stop`` is set (or forever)."""
    emulator = EmulatedAPIServer()
    for ns in namespaces:
        if ("", "namespaces", None, ns) not in emulator.objects_by_key:
            emulator.create_object({"apiVersion": "v1", "kind": "Namespace",
                                    "metadata": {"name": ns}})
    for doc in manifests:
        emulator.create_object(doc)
    async with emulator:
        server = aiohttp.web.Server(emulator, access_log=None)
        runner = aiohttp.web.ServerRunner(server, handle_signals=False, shutdown_timeout=1)
        await runner.setup()
        site = aiohttp.web.TCPSite(runner, host, port)
        await site.start()
        sockets = server_sockets(runner)
        url = f"http://{host}:{sockets[0]}"
        if on_ready is not None:
            on_ready(emulator, url)
        try:
            await (stop or asyncio.Event()).wait()
        finally:
            await runner.cleanup()


def server_sockets(runner: aiohttp.web.BaseRunner) -> list[int]:
    """The ports the runner listens on."""
    return [s.getsockname()[1] for site in runner.sites for s in
            (site._server.sockets if site._server is not None else [])]  # type: ignore[attr-defined]


class EmulatorThread:
    """The emulated API server in a background thread (for in-process tests)::

        with EmulatorThread() as api:
            api.url, api.emulator, api.write_kubeconfig(path)
    """

    def __init__(self, manifests: Iterable[JSON] = (), namespaces: Iterable[str] = ()) -> None:
        self._manifests = list(manifests)
        self._namespaces = list(namespaces)
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self.url = ""
        self.emulator: EmulatedAPIServer | None = None
        self._error: BaseException | None = None

    def _run(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()

            def ready(emulator: EmulatedAPIServer, url: str) -> None:
                self.emulator, self.url = emulator, url
                self._ready.set()

            await serve(manifests=self._manifests, namespaces=self._namespaces,
                        on_ready=ready, stop=self._stop)

        try:
            asyncio.run(main())
        except BaseException as exc:  # surfaced to the starting thread
            self._error = exc
            self._ready.set()

    def __enter__(self) -> EmulatorThread:
        self._thread = threading.Thread(target=self._run, name="emulated-apiserver", daemon=True)
        self._thread.start()
        if not self._ready.wait(30) or self._error is not None:
            raise RuntimeError(f"the emulated API server did not start: {self._error!r}")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(10)

    def call(self, fn: Callable[[EmulatedAPIServer], Any]) -> Any:
        """Run ``fn(emulator)`` on the server's loop (thread-safe) and return its result."""
        assert self._loop is not None and self.emulator is not None
        emulator = self.emulator

        async def run() -> Any:
            return fn(emulator)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    def write_kubeconfig(self, path: str | Path, namespace: str = "default") -> Path:
        """Write a kubeconfig pointing at this server; returns the path."""
        p = Path(path)
        p.write_text(kubeconfig_text(self.url, namespace))
        return p


def main(argv: list[str] | None = None) -> int:
    """``python -m llm_operator_sandbox.emulator``: serve until interrupted."""
    parser = argparse.ArgumentParser(
        prog="python -m llm_operator_sandbox.emulator",
        description="An EMULATED Kubernetes API server (in memory; not a cluster)",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--kubeconfig", help="write a kubeconfig for the server here")
    parser.add_argument("--namespace", action="append", default=[], help="create (repeatable)")
    parser.add_argument("-f", "--filename", action="append", default=[],
                        help="create the objects in this YAML file at start (repeatable)")
    args = parser.parse_args(argv)

    def ready(_emulator: EmulatedAPIServer, url: str) -> None:
        if args.kubeconfig:
            tmp = Path(args.kubeconfig + ".tmp")
            tmp.write_text(kubeconfig_text(url))
            tmp.replace(args.kubeconfig)  # atomic: a waiting reader never sees half a file
        import sys

        sys.stderr.write(f"Emulated Kubernetes API server listening on {url}\n")
        sys.stderr.flush()

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await serve(host=args.host, port=args.port, manifests=load_manifests(args.filename),
                    namespaces=args.namespace, on_ready=ready, stop=stop)

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
