"""The chart's RBAC against what the operator does: the verbs its client declares and
enforces on every call (``controller/kube.py: CLIENT_ACCESS``), what kopf needs for the
handlers registered in ``controller/handlers.py`` and what admission needs
(``controller/rbac.py``), compared with the rules ``helm template`` renders, resource
names included; and the chart README's RBAC table against the same rules."""

from __future__ import annotations

import re
from typing import Any

import kopf

from llm_operator.controller import rbac

from .conftest import CHART, Render

Access = dict[tuple[str, str], dict[tuple[str, ...], frozenset[str]]]


def operator_access() -> Access:
    """What the code needs: registering the handlers (importing them) fills kopf's default
    registry, from which kopf's needs are read."""
    import llm_operator.controller.handlers  # noqa: F401  (registers the handlers)

    return rbac.required_access(kopf.get_default_registry())


def rendered_access(role: dict[str, Any]) -> Access:
    """(group, resource) -> resourceNames -> verbs of one rendered Role/ClusterRole."""
    access: Access = {}
    for rule in role["rules"]:
        names = tuple(sorted(rule.get("resourceNames") or ()))
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                slot = access.setdefault((group, resource), {})
                slot[names] = slot.get(names, frozenset()) | frozenset(rule["verbs"])
    return access


CLUSTER_ONLY = {("apiextensions.k8s.io", "customresourcedefinitions")}


def test_cluster_role_matches_the_verbs_the_code_uses(render: Render) -> None:
    role = render({"clusterWide": True}).one("ClusterRole")
    assert rendered_access(role) == operator_access()


def test_namespaced_roles_match_the_verbs_the_code_uses(render: Render) -> None:
    result = render({"watchNamespaces": ["team-a"]})
    wanted = {k: v for k, v in operator_access().items() if k not in CLUSTER_ONLY}
    assert rendered_access(result.one("Role")) == wanted


def test_config_maps_get_no_list_or_watch() -> None:
    # The tuning cache and the live admission caps (one per service, so no resourceNames);
    # nothing reads ConfigMaps it does not name (kopf's peering uses its own kinds).
    assert operator_access()[("", "configmaps")] == {
        (): frozenset({"create", "get", "patch", "delete"}),
    }


def test_every_child_kind_can_be_applied_and_deleted() -> None:
    """Server-side apply creates or patches; a child the plan drops is deleted (a 403
    there once left a Deployment-to-LeaderWorkerSet switch half done)."""
    access = operator_access()
    for key in (("apps", "deployments"), ("leaderworkerset.x-k8s.io", "leaderworkersets"),
                ("", "services"), ("monitoring.coreos.com", "podmonitors"),
                ("policy", "poddisruptionbudgets")):
        assert {"create", "patch", "get", "delete"} <= access[key][()], key


def _readme_rbac_table() -> dict[tuple[str, str], set[str]]:
    text = (CHART / "README.md").read_text()
    section = text.split("### RBAC", 1)[1].split("\n\n", 2)[1]
    table: dict[tuple[str, str], set[str]] = {}
    for line in section.splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        group = "" if cells[0] == '""' else cells[0]
        verbs = {v.strip() for v in cells[2].split(",")}
        for resource in re.split(r"\s+/\s+|\s*,\s*", cells[1]):
            table.setdefault((group, resource), set()).update(verbs)
    return table


def test_chart_readme_rbac_table_matches_the_rendered_rules(render: Render) -> None:
    rendered: dict[tuple[str, str], set[str]] = {}
    for role in render({"watchNamespaces": ["a"], "peering": {"enabled": True}}).docs:
        if role["kind"] in ("Role", "ClusterRole"):
            for key, slots in rendered_access(role).items():
                rendered.setdefault(key, set()).update(*slots.values())
    for role in render({"clusterWide": True, "peering": {"enabled": True}}).of_kind(
            "ClusterRole"):
        for key, slots in rendered_access(role).items():
            rendered.setdefault(key, set()).update(*slots.values())
    assert _readme_rbac_table() == rendered
