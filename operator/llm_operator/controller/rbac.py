"""The Kubernetes rights the operator needs, derived from what it does (for the chart's test).

Three sources, joined by :func:`required_access`:

- the operator's own client: :data:`~.kube.CLIENT_ACCESS`, which
  :meth:`~.kube.KubeClient.request` enforces on every call (a call it does not list
  fails), so the table is what the code uses;
- kopf, from the handlers registered in a kopf registry (:func:`kopf_access`): every
  resource with a handler or an index is listed and watched; a resource with a
  create/update/delete/resume handler or a daemon is also patched (kopf's progress
  annotations and, where needed, its finalizer); plus :data:`KOPF_FIXED` (the CRDs kopf
  observes, the Events it posts);
- admission: :data:`ADMISSION_ACCESS` (``llmservices/finalizers``: children carry owner
  references with ``blockOwnerDeletion``, which the OwnerReferencesPermissionEnforcement
  admission plugin allows only to who may update the owner's finalizers).

``tests/chart/test_rbac.py`` renders the chart with ``helm template`` and checks that its
rules grant exactly these verbs (and resource names), no more, no less.
"""

from __future__ import annotations

from typing import Any

from ..api.constants import GROUP, PLURAL
from .kube import CLIENT_ACCESS

Access = dict[tuple[str, str], dict[tuple[str, ...], frozenset[str]]]  # (group, resource) ->
# resourceNames (empty: any) -> verbs

KOPF_FIXED: dict[tuple[str, str], frozenset[str]] = {
    ("apiextensions.k8s.io", "customresourcedefinitions"): frozenset({"get", "list", "watch"}),
    ("", "events"): frozenset({"create"}),
}
ADMISSION_ACCESS: dict[tuple[str, str], frozenset[str]] = {
    (GROUP, PLURAL + "/finalizers"): frozenset({"update"}),
}


def kopf_access(registry: Any) -> dict[tuple[str, str], frozenset[str]]:
    """Verbs kopf uses per resource for the handlers in ``registry`` (a
    ``kopf.OperatorRegistry``; kopf offers no public listing, so its per-kind registries
    are read)."""
    out: dict[tuple[str, str], frozenset[str]] = dict(KOPF_FIXED)
    kinds = (
        (registry._changing, {"list", "watch", "patch"}),
        (registry._spawning, {"list", "watch", "patch"}),
        (registry._watching, {"list", "watch"}),
        (registry._indexing, {"list", "watch"}),
    )
    for kind_registry, verbs in kinds:
        for selector in kind_registry.get_all_selectors():
            key = (selector.group or "", str(selector.plural or selector.any_name))
            out[key] = out.get(key, frozenset()) | verbs
    return out


def required_access(registry: Any) -> Access:
    """Everything the operator needs: (group, resource) -> resourceNames -> verbs."""
    access: Access = {}

    def grant(group: str, resource: str, names: tuple[str, ...], verbs: frozenset[str]) -> None:
        slot = access.setdefault((group, resource), {})
        slot[names] = slot.get(names, frozenset()) | verbs

    for (group, resource), (verbs, names) in CLIENT_ACCESS.items():
        grant(group, resource.split(":")[0], tuple(sorted(names)), verbs)
    for (group, resource), verbs in {**kopf_access(registry), **ADMISSION_ACCESS}.items():
        grant(group, resource, (), verbs)
    # A verb granted for any name needs no by-name rule too.
    for slots in access.values():
        if () in slots:
            for names in [n for n in slots if n]:
                slots[names] = slots[names] - slots[()]
                if not slots[names]:
                    del slots[names]
    return access
