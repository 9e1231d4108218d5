"""The bad-input corpus on the REAL API server (see tests/support/real_server.py): the
server and the project's CRD evaluator give every case the same verdict, each refusal
names the field, no case the server admits crashes the operator's planner, and the
stored figures (benchmarks/data/bad_input_real_server.json, RESULTS.md) are current."""

from __future__ import annotations

import json

import pytest
from benchmarks.bad_input_real_server import DATA

from llm_operator_sandbox.cluster import KUBERNETES_VERSION, LocalCluster
from tests.support.real_server import EXPLAINED, OTHER_FIELD, replay, summary

from .conftest import ClusterKubectl

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]


def test_the_real_server_and_the_evaluator_agree(cluster: LocalCluster, admin: ClusterKubectl,
                                                  namespace: str) -> None:
    verdicts = replay(cluster.admin_kubeconfig, namespace)
    assert len(verdicts) > 200
    unexplained = [(v.case.id, v.real, v.evaluator, v.real_message[:200])
                   for v in verdicts if not v.agrees and v.case.id not in EXPLAINED]
    assert unexplained == []
    silent = [(v.case.id, v.case.field, v.real_message[:200]) for v in verdicts
              if v.real == "refused" and not v.names_field and v.case.id not in OTHER_FIELD]
    assert silent == []
    crashed = [(v.case.id, v.operator) for v in verdicts
               if v.real == "accepted" and v.operator in ("traceback", "invalid")]
    assert crashed == []
    # Every case the corpus says the API server refuses, the real one refuses.
    assert all(v.real == "refused" for v in verdicts if v.case.refused_by == "crd")
    stored = json.loads(DATA.read_text())
    assert stored == {"kubernetes": KUBERNETES_VERSION, **summary(verdicts)}, (
        "run: python -m benchmarks.bad_input_real_server --write")
