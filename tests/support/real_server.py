"""The bad-input corpus replayed against the REAL kube-apiserver (the cluster tier's
control plane): each manifest is created with ``dryRun=All`` (full admission: decoding,
structural-schema pruning and validation, CEL rules, defaulting; nothing stored), and the
answer is set beside what the project's own CRD evaluator (:mod:`tests.support.crd`, the
``crd`` stage of :mod:`tests.support.bad_input`) said about the same manifest.

A difference is either fixed (in the CRD, or in the evaluator) or listed in
:data:`EXPLAINED` with its reason; the cluster tier fails on any other.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client, config

from tests.support.bad_input import Case, judge, load_accepted, load_cases

# case id -> why the real server and the project's evaluator disagree.
EXPLAINED: dict[str, str] = {}
# case id -> why the real server's refusal names another field than the corpus row.
OTHER_FIELD: dict[str, str] = {
    "token-secret-secretname": "strict field validation (kubectl's default) refuses the "
    "unknown spec.model.tokenSecretRef.secretName first, naming it: the user's typo",
}


@dataclass
class Verdict:
    case: Case
    real: str  # refused | accepted | skipped
    real_message: str
    evaluator: str  # the crd stage: refused | accepted | skipped
    operator: str  # the plan stage: refused | accepted | invalid | traceback
    code: int | None = None

    @property
    def agrees(self) -> bool:
        return self.real == self.evaluator or "skipped" in (self.real, self.evaluator)

    @property
    def names_field(self) -> bool:
        return self.case.field in self.real_message


def _api(kubeconfig: Path) -> client.ApiClient:
    return config.new_client_from_config(str(kubeconfig))


def dry_run_create(api: client.ApiClient, namespace: str, manifest: Any
                   ) -> tuple[str, str, int | None]:
    """POST the manifest with ``dryRun=All``; (refused|accepted, message, HTTP status)."""
    if not isinstance(manifest, dict):
        return "skipped", "not one object", None
    try:
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            "llmops.dev", "v1alpha1", namespace, "llmservices", manifest, dry_run="All",
            field_validation="Strict", _preload_content=False)
    except client.ApiException as exc:
        try:
            message = str(json.loads(exc.body or "{}").get("message") or exc.reason)
        except ValueError:
            message = str(exc.body or exc.reason)
        return "refused", message, exc.status
    return "accepted", "", 201


def replay(kubeconfig: Path, namespace: str) -> list[Verdict]:
    """Every corpus case and accepted edge case, against the real server."""
    api = _api(kubeconfig)
    out: list[Verdict] = []
    for case in [*load_cases(), *load_accepted()]:
        manifest = case.manifest
        if isinstance(manifest, dict):
            manifest = {**manifest, "metadata": {**(manifest.get("metadata") or {}),
                                                 "namespace": namespace}}
        real, message, code = dry_run_create(api, namespace, manifest)
        judged = judge(case)
        out.append(Verdict(case, real, message, judged.outcomes["crd"].result,
                           judged.outcomes["plan"].result, code))
    return out


def summary(verdicts: list[Verdict]) -> dict[str, Any]:
    """Counts per kind of mistake: refused by the real server / by the operator after
    the server accepted it / accepted by both; and the differences."""
    kinds: dict[str, Counter[str]] = {}
    for v in verdicts:
        c = kinds.setdefault(v.case.kind, Counter())
        if v.real == "refused":
            c["refusedByServer"] += 1
        elif v.real == "accepted" and v.operator == "refused":
            c["refusedByOperator"] += 1
        elif v.real == "accepted":
            c["accepted"] += 1
        else:
            c["notAnObject"] += 1
        c["sameAsEvaluator"] += int(v.agrees)
    return {
        "cases": len(verdicts),
        "kinds": {k: dict(sorted(c.items())) for k, c in sorted(kinds.items())},
        "differences": [
            {"id": v.case.id, "real": v.real, "evaluator": v.evaluator,
             "message": v.real_message[:300], "explained": EXPLAINED.get(v.case.id, "")}
            for v in verdicts if not v.agrees],
    }


__all__ = ["EXPLAINED", "OTHER_FIELD", "Verdict", "replay", "summary"]
