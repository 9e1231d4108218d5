"""The chart's RBAC enforced by the real API server: with one verb taken out of the
operator's ClusterRole, the operator reports the 403 on the LLMService (condition and
Event) and retries at a bounded pace, not in a hot loop; with the verb back, the next
retry succeeds without a restart."""

from __future__ import annotations

import copy
import json
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from llm_operator_sandbox.cluster import Installed
from tests.support.emulator import OperatorProcess, wait_for

from .conftest import ClusterKubectl
from .test_control_plane import condition, tiny_service

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]
FORBIDDEN = re.compile(r"\b403\b|[Ff]orbidden")


@pytest.fixture
def restore_role(admin: ClusterKubectl, installed: Installed) -> Iterator[Callable[[], None]]:
    """Takes "create" and "patch" on Services out of the chart's ClusterRole; the callable
    (also run at teardown) puts the role back as the chart rendered it."""
    role = json.loads(admin.run("get", "clusterrole", installed.release, "-o", "json").stdout)
    original = copy.deepcopy(role)
    for rule in role["rules"]:
        if rule.get("resources") == ["services"] and rule.get("apiGroups") == [""]:
            rule["verbs"] = [v for v in rule["verbs"] if v not in ("create", "patch")]
            break
    else:
        pytest.fail(f"no Services rule in the chart's ClusterRole: {role['rules']}")
    for obj in (role, original):
        meta = obj["metadata"]
        obj["metadata"] = {k: meta[k] for k in ("name", "labels", "annotations") if k in meta}
    admin.run("replace", "-f", "-", stdin=json.dumps(role))
    done = False

    def restore() -> None:
        nonlocal done
        if not done:
            admin.run("replace", "-f", "-", stdin=json.dumps(original))
            done = True
    try:
        yield restore
    finally:
        restore()


def test_a_verb_the_role_lacks_is_reported_not_hammered(
        admin: ClusterKubectl, namespace: str, restore_role: Callable[[], None],
        operator: OperatorProcess) -> None:
    svc = tiny_service("norbac")
    svc["spec"]["gpus"] = {**svc["spec"]["gpus"], "product": "H100"}  # no vLLM needed
    admin.apply_obj(svc, namespace)

    def children(status: str) -> dict[str, Any] | None:
        c = condition(admin.get("llms", "norbac", namespace), "ChildrenApplied")
        return c if c.get("status") == status else None
    cond = wait_for(lambda: children("False"), 60, "ChildrenApplied=False", interval=1)
    assert FORBIDDEN.search(cond["message"]) and "Service" in cond["message"], cond
    # The Deployment, which the role allows, is written all the same.
    assert admin.get("deployment", "norbac", namespace) is not None
    events = [e for e in admin.items("events", namespace)
              if e["involvedObject"].get("name") == "norbac"]
    assert any(e["type"] == "Warning" and FORBIDDEN.search(e["message"]) for e in events), [
        (e["reason"], e["message"][:120]) for e in events]

    # A bounded pace: over 40 s, a few refused writes (one pass every 15 s), not hundreds.
    seen = len(operator.log())
    time.sleep(40)
    later = operator.log()[seen:]
    passes = len(re.findall(r"Not every child could be written", later))
    assert 1 <= passes <= 6, (passes, later[-2000:])

    # The verb back: a later retry writes the Service, with no restart of the operator.
    restore_role()
    wait_for(lambda: children("True"), 60, "ChildrenApplied=True once the role allows it",
             interval=1)
    assert admin.get("service", "norbac", namespace) is not None
    assert operator.proc is not None and operator.proc.poll() is None
