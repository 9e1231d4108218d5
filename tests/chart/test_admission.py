"""The chart's safe defaults as rendered (issue 58): namespaced unless clusterWide, the two
ValidatingAdmissionPolicies and what they match, the settings the operator would refuse
at start refused by the chart first, naming the Helm value. The API server's side of the
same rules: tests/cluster/test_safe_defaults.py."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
from contextlib import redirect_stderr
from pathlib import Path
from typing import Any

import pytest
import yaml

from llm_operator.api.constants import DEFAULT_IMAGE, LABEL_MANAGED_BY, MANAGED_BY
from llm_operator.facts.control import CACHE_CONFIGMAP as FACTS_CACHE
from llm_operator.settings import HELM_VALUES
from llm_operator.tuning.control import CACHE_CONFIGMAP as TUNING_CACHE

from .conftest import CHART, NAMESPACE, RELEASE, Render


def policies(render: Render, values: dict[str, Any] | None = None) -> dict[str, Any]:
    result = render(values)
    return {d["metadata"]["name"]: d for d in result.docs
            if d["kind"].startswith("ValidatingAdmissionPolicy")}


def notes(helm: str, tmp_path: Path, *args: str) -> str:
    """NOTES.txt as `helm install` prints it (helm template skips it and an install
    needs a cluster: rendered here from a copy of the chart under another name)."""
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    (chart / "templates" / "NOTES.txt").rename(chart / "notes-source.txt")
    (chart / "templates" / "notes-shown.yaml").write_text(
        'notes: {{ tpl (.Files.Get "notes-source.txt") . | toJson }}\n')
    out = subprocess.run([helm, "template", RELEASE, str(chart), "--namespace", NAMESPACE,
                          "--show-only", "templates/notes-shown.yaml", *args],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return str(yaml.safe_load(out.stdout)["notes"])


def test_default_watches_only_the_release_namespace(
        render: Render, helm: str, tmp_path: Path) -> None:
    result = render()
    assert result.of_kind("ClusterRoleBinding")[0]["roleRef"]["name"].endswith("-cluster")
    assert [r["metadata"]["namespace"] for r in result.of_kind("Role")] == [NAMESPACE]
    text = notes(helm, tmp_path)
    assert f"watching: {NAMESPACE}." in text and "WARNING" not in text


def test_cluster_wide_is_explicit_and_warned_about(
        render: Render, helm: str, tmp_path: Path) -> None:
    text = notes(helm, tmp_path, "--set", "clusterWide=true")
    assert "watching the whole cluster" in text and "WARNING: clusterWide=true" in text
    assert "kube-system" in text and "turned them OFF" not in text
    off = notes(helm, tmp_path / "off", "--set", "clusterWide=true",
                "--set", "admission.enabled=false")
    assert "admission.enabled=false turned them OFF" in off
    both = render({"clusterWide": True, "watchNamespaces": ["a"]}, check=False)
    assert both.returncode != 0 and "clusterWide=true and watchNamespaces" in both.stderr
    assert "fix:" in both.stderr


def test_operator_writes_policy_matches_only_its_service_account(render: Render) -> None:
    name = f"{RELEASE}-llm-operator-operator-writes"
    docs = render().docs
    policy = next(d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"
                  and d["metadata"]["name"] == name)
    binding = next(d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"
                   and d["metadata"]["name"] == name)
    assert binding["spec"] == {"policyName": name, "validationActions": ["Deny"]}
    conditions = {c["name"]: c["expression"] for c in policy["spec"]["matchConditions"]}
    user = f"system:serviceaccount:{NAMESPACE}:{RELEASE}-llm-operator"
    assert f"'{user}'" in conditions["the-operator-service-account"]
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rules == [{"apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"],
                      "operations": ["CREATE", "UPDATE", "DELETE"]}]
    # Not matched: what the operator writes as itself.
    for kind in ("llmservices", "events", "kopfpeerings", "clusterkopfpeerings", "leases"):
        assert f"'{kind}'" in conditions["not-its-own-kinds"]
    text = " ".join(v["expression"] for v in policy["spec"]["validations"])
    assert f"'{LABEL_MANAGED_BY}'" in text and f"'{MANAGED_BY}'" in text
    assert "'LLMService'" in text and "oldObject" in text
    assert f"'{TUNING_CACHE}'" in text and f"'{FACTS_CACHE}'" in text
    assert all(v["reason"] == "Forbidden" for v in policy["spec"]["validations"])


def test_llmservice_policy_defaults_to_the_supported_image_and_no_accounts(
        render: Render) -> None:
    docs = render().docs
    policy = next(d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"
                  and d["metadata"]["name"].endswith("-llmservices"))
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    repository = DEFAULT_IMAGE.rsplit(":", 1)[0]
    assert variables["allowedImages"] == f'["docker.io/{repository}"]'
    assert variables["allowedAccounts"] == "{}"
    messages = " ".join(v["messageExpression"] for v in policy["spec"]["validations"])
    for named in ("spec.image", "admission.allowedImages", "spec.pod.serviceAccountName",
                  "admission.allowedServiceAccounts"):
        assert named in messages
    binding = next(d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"
                   and d["metadata"]["name"].endswith("-llmservices"))
    assert binding["spec"]["validationActions"] == ["Deny"]
    selector = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
    assert selector == [{"key": "kubernetes.io/metadata.name", "operator": "In",
                         "values": [NAMESPACE]}]
    # Cluster-wide: every namespace's LLMServices.
    wide = next(d for d in render({"clusterWide": True}).docs
                if d["kind"] == "ValidatingAdmissionPolicyBinding"
                and d["metadata"]["name"].endswith("-llmservices"))
    assert "matchResources" not in wide["spec"]


def test_allow_lists_render_as_cel_literals(render: Render) -> None:
    docs = render({"admission": {"enabled": True,
                                 "allowedImages": ["docker.io/vllm/vllm-openai",
                                                   "registry.example.com/ml/"],
                                 "allowedServiceAccounts": {"team-a": ["vllm-reader"],
                                                            "*": ["shared"]}}}).docs
    policy = next(d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"
                  and d["metadata"]["name"].endswith("-llmservices"))
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    assert variables["allowedImages"] == \
        '["docker.io/vllm/vllm-openai","registry.example.com/ml/"]'
    assert variables["allowedAccounts"] == '{"*":["shared"],"team-a":["vllm-reader"]}'


def test_admission_off_renders_no_policy(render: Render) -> None:
    assert policies(render, {"admission": {"enabled": False, "allowedImages": [],
                                           "allowedServiceAccounts": {}}}) == {}


def test_a_cluster_without_validating_admission_policy_is_told_the_fix(
        render: Render) -> None:
    old = render(None, "--kube-version", "1.29.0", check=False)
    assert old.returncode != 0
    assert "admission.enabled=true needs ValidatingAdmissionPolicy" in old.stderr
    assert "admission.enabled=false" in old.stderr
    assert render({"admission": {"enabled": False, "allowedImages": [],
                                 "allowedServiceAccounts": {}}},
                  "--kube-version", "1.29.0").docs


def test_an_unknown_custom_gpu_class_names_the_values(render: Render) -> None:
    result = render({"settings": {"gpuClass": "mine", "gpuClasses": {"other": {}}}},
                    check=False)
    assert result.returncode != 0
    assert "settings.gpuClass=mine is neither a preset (nvidia, gke, eks, aks) nor a key " \
           "of settings.gpuClasses (other)" in result.stderr
    assert render({"settings": {"gpuClass": "mine", "gpuClasses": {"mine": {}}}}).docs


def test_every_operator_variable_the_chart_sets_names_its_helm_value() -> None:
    """A setting the operator refuses at start names the Helm value (settings.HELM_VALUES)."""
    text = (CHART / "templates" / "deployment.yaml").read_text()
    names = set(re.findall(r"name: (LLMOP_[A-Z_]+)", text))
    assert names and names <= set(HELM_VALUES), sorted(names - set(HELM_VALUES))


@pytest.mark.parametrize(("env", "named"), [
    ({"LLMOP_GPU_CLASS": "nvdia"}, "LLMOP_GPU_CLASS (Helm value settings.gpuClass)"),
    ({"LLMOP_POD_MONITOR": "maybe"}, "LLMOP_POD_MONITOR (Helm value settings.podMonitor)"),
    ({"LLMOP_ADAPTATION_WINDOW_SECONDS": "30"},
     "LLMOP_ADAPTATION_WINDOW_SECONDS (Helm value settings.adaptationWindowSeconds)"),
])
def test_the_operator_refusing_a_setting_names_the_helm_value(
        env: dict[str, str], named: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from llm_operator.cli import main
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    err = io.StringIO()
    with redirect_stderr(err):
        code = main(["run", "--standalone"])
    out = " ".join(err.getvalue().split())
    assert code == 2, out
    assert named in out and "a bug in llm-operator" not in out, out
