"""The Helm chart, rendered by a real helm v3 and validated offline.

What runs for real: helm (lint, template, values.schema.json), kubernetes-validate's
bundled OpenAPI schemas (strict, for the newest Kubernetes it carries), the operator's own
Settings and CLI parser fed with what the chart renders. No API server is involved.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.support.schemas import load_schema

from .conftest import CHART, NAMESPACE, RELEASE, ROOT, Render, run_helm
from .test_rbac import operator_access

K8S_VERSION = kubernetes_validate.latest_version()
CANONICAL_CRD = ROOT / "crds" / "llmservices.llmops.dev.yaml"
CHART_CRD = CHART / "files" / "llmservices.llmops.dev.yaml"
CHART_YAML = yaml.safe_load((CHART / "Chart.yaml").read_text())
APP_VERSION = str(CHART_YAML["appVersion"])

# Value sets a user would plausibly install with; each must lint, render and validate.
VALUE_SETS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "cluster-wide": {"clusterWide": True},
    "namespaced": {"watchNamespaces": ["team-a", "team-b"]},
    "peering": {"replicaCount": 2, "clusterWide": True, "peering": {"enabled": True}},
    "peering-namespaced": {
        "replicaCount": 3,
        "peering": {"enabled": True, "name": "llm-peers"},
        "watchNamespaces": ["team-a"],
    },
    "monitoring": {
        "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "kps"}}},
        "settings": {"podMonitor": "enabled"},
    },
    "alerts": {
        "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "kps"}}},
        "prometheusRule": {"enabled": True, "labels": {"release": "kps"},
                           "alerts": {"LLMOperatorDown": {"for": "2m"}}},
    },
    "prometheus": {
        "settings": {
            "prometheusUrl": "http://prometheus-operated.monitoring:9090",
            "defaultImage": "vllm/vllm-openai:v0.11.1",
            "gpusPerNode": 4,
            "tuningJobTtlSeconds": 600,
        }
    },
    "minimal": {
        "metrics": {"enabled": False},
        "health": {"livenessProbe": {"enabled": False}},
        "crds": {"install": False},
        "serviceAccount": {"create": False, "name": "existing"},
        "image": {"digest": "sha256:" + "a" * 64},
        "commonLabels": {"team": "ml"},
        "commonAnnotations": {"owner": "platform"},
    },
}

# Kinds no Kubernetes release defines. Each is checked another way (see the tests below).
CUSTOM_KINDS = {"ServiceMonitor", "PrometheusRule", "ClusterKopfPeering", "KopfPeering"}

# What the operator does with each resource, so exactly these verbs (namespaced part):
# derived from the code (see tests/chart/test_rbac.py, which also checks resourceNames).
OPERATOR_RULES: dict[tuple[str, str], set[str]] = {
    key: set().union(*slots.values()) for key, slots in operator_access().items()
    if key != ("apiextensions.k8s.io", "customresourcedefinitions")
}
KOPF_CRD_RULE = {("apiextensions.k8s.io", "customresourcedefinitions"): {"get", "list", "watch"}}
PEERING_VERBS = {"get", "list", "watch", "patch"}


def rule_table(role: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    """(apiGroup, resource) -> verbs, merged over the role's rules."""
    table: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                table.setdefault((group, resource), set()).update(rule["verbs"])
    return table


def deployment_container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The operator container of the rendered Deployment."""
    (deploy,) = [d for d in docs if d["kind"] == "Deployment"]
    (container,) = deploy["spec"]["template"]["spec"]["containers"]
    return container


def env_of(container: dict[str, Any]) -> dict[str, str]:
    """The container's literal environment variables."""
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


def crd_schema(crd: dict[str, Any]) -> dict[str, Any]:
    """The openAPIV3Schema of a CRD's (single) served version."""
    (version,) = [v for v in crd["spec"]["versions"] if v.get("served")]
    return dict(version["schema"]["openAPIV3Schema"])


# ---------------------------------------------------------------- lint and validation


@pytest.mark.parametrize("name", list(VALUE_SETS))
def test_helm_lint_strict(helm: str, tmp_path: Path, name: str) -> None:
    """`helm lint --strict` passes for every value set (warnings count as failures)."""
    values = tmp_path / "values.json"
    values.write_text(json.dumps(VALUE_SETS[name]))
    proc = run_helm(helm, ["lint", "--strict", str(CHART), "--values", str(values)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 chart(s) failed" in proc.stdout
    assert "[WARNING]" not in proc.stdout and "[ERROR]" not in proc.stdout


@pytest.mark.parametrize("name", list(VALUE_SETS))
def test_rendered_objects_pass_kubernetes_validate_strict(render: Render, name: str) -> None:
    """Every rendered object (crds/ included) validates strictly against Kubernetes' schemas;
    peering objects validate against the CRDs the chart ships for them."""
    docs = render(VALUE_SETS[name], "--include-crds").docs
    assert docs
    crds = {
        (c["spec"]["group"], c["spec"]["names"]["kind"]): c
        for c in docs
        if c["kind"] == "CustomResourceDefinition"
    }
    errors: list[str] = []
    for doc in docs:
        kind, group = doc["kind"], doc["apiVersion"].rpartition("/")[0]
        if kind in CUSTOM_KINDS:
            if (group, kind) in crds:
                jsonschema.validate(doc, crd_schema(crds[group, kind]))
            elif kind == "PrometheusRule":  # the Prometheus Operator's CRD, as data
                jsonschema.validate(doc, load_schema("prometheusrule"))
            else:
                # No schema offline for the Prometheus Operator's kinds; asserted field by
                # field in test_service_monitor_scrapes_the_metrics_service.
                assert kind == "ServiceMonitor", f"no schema for {kind}"
            continue
        try:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            errors.append(f"{kind}/{doc['metadata']['name']}: {exc.message} at {exc.path}")
    assert not errors, "\n".join(errors)


# ---------------------------------------------------------------- defaults


def test_defaults_render_one_standalone_operator(render: Render) -> None:
    """Default install: one operator pod, --standalone, Recreate (never two at once),
    the ghcr image at the chart's appVersion, and the expected set of objects: namespaced
    (a Role in the release's namespace, the small ClusterRole kopf needs) with the two
    admission policies."""
    result = render()
    kinds = sorted(d["kind"] for d in result.docs)
    assert kinds == sorted(
        [
            "ServiceAccount", "CustomResourceDefinition", "ClusterRole",
            "ClusterRoleBinding", "Role", "RoleBinding", "Service", "Deployment",
            "PriorityClass", "ConfigMap", "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicyBinding",
        ]
    )  # fmt: skip
    assert result.one("Role")["metadata"]["namespace"] == NAMESPACE
    deploy = result.one("Deployment")
    assert deploy["metadata"]["namespace"] == NAMESPACE
    assert deploy["spec"]["replicas"] == 1
    assert deploy["spec"]["strategy"] == {"type": "Recreate"}
    container = deployment_container(result.docs)
    assert container["image"] == f"ghcr.io/llmops-dev/llm-operator:{APP_VERSION}"
    assert container["command"] == ["llm-operator"]
    assert container["args"][0] == "run"
    assert "--standalone" in container["args"]
    assert not any(a.startswith("--peering") for a in container["args"])
    pod = deploy["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == result.one("ServiceAccount")["metadata"]["name"]


def test_tuning_priority_class_is_below_serving_never_preempts_and_reaches_settings(
    render: Render, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tuning Jobs on spare GPUs (spec.tuning.placement Spare, the default) get a class
    below serving pods (0 without a class) that never preempts, and the operator is told
    its name; with create=false the operator names the user's own class."""
    result = render()
    pc = result.one("PriorityClass")
    assert pc["value"] < 0 and pc["preemptionPolicy"] == "Never"
    assert pc["globalDefault"] is False and pc["metadata"]["name"].startswith(RELEASE)
    settings = settings_from_env(env_of(deployment_container(result.docs)), monkeypatch)
    assert settings.tuning_priority_class == pc["metadata"]["name"]
    own = render({"tuningPriorityClass": {"create": False, "name": "batch-low",
                                          "value": -10}})
    assert not [d for d in own.docs if d["kind"] == "PriorityClass"]
    settings = settings_from_env(env_of(deployment_container(own.docs)), monkeypatch)
    assert settings.tuning_priority_class == "batch-low"


def test_tuning_never_triggers_an_autoscaler_scale_up_unless_the_chart_opts_in(
    render: Render,
) -> None:
    """The cluster autoscaler never adds a node for a pod whose priority is below its
    expendable cutoff (--expendable-pods-priority-cutoff, default -10; cluster-autoscaler
    FAQ, "How does Cluster Autoscaler work with Pod Priority and Preemption?"). By default
    the tuning class sits below it; tuningPriorityClass.allowScaleUp opts in (the cutoff
    itself); a value that contradicts the choice is refused, naming both values."""
    assert render().one("PriorityClass")["value"] == -11
    assert render({"tuningPriorityClass": {"autoscalerCutoff": -100}}).one(
        "PriorityClass")["value"] == -101
    assert render({"tuningPriorityClass": {"allowScaleUp": True}}).one(
        "PriorityClass")["value"] == -10
    assert render({"tuningPriorityClass": {"value": -50}}).one("PriorityClass")["value"] == -50
    refused = render({"tuningPriorityClass": {"value": -10}}, check=False)
    assert refused.returncode != 0
    assert ("tuningPriorityClass.value=-10 is not below the cluster autoscaler's expendable "
            "cutoff (tuningPriorityClass.autoscalerCutoff=-10)") in refused.stderr
    assert "tuningPriorityClass.allowScaleUp=true" in refused.stderr
    pointless = render({"tuningPriorityClass": {"allowScaleUp": True, "value": -50}},
                       check=False)
    assert pointless.returncode != 0
    assert "tuningPriorityClass.value=-50 is below" in pointless.stderr
    assert "set allowScaleUp=false" in pointless.stderr
    impossible = render({"tuningPriorityClass": {"allowScaleUp": True, "autoscalerCutoff": 0}},
                        check=False)
    assert impossible.returncode != 0
    assert "needs a negative tuningPriorityClass.autoscalerCutoff" in impossible.stderr
    # Bring your own class: its value is the user's, nothing is checked or changed.
    own = render({"tuningPriorityClass": {"create": False, "name": "batch-low"}})
    assert not own.of_kind("PriorityClass")


def test_the_tuning_gpu_budget_reaches_the_operator(
    render: Render, monkeypatch: pytest.MonkeyPatch
) -> None:
    """settings.tuningGpuBudget is LLMOP_TUNING_GPU_BUDGET (default 8; 0 allowed: no
    tuning on spare GPUs); a negative or non-integer budget is refused by the schema,
    naming the value."""
    settings = settings_from_env(env_of(deployment_container(render().docs)), monkeypatch)
    assert settings.tuning_gpu_budget == 8
    zero = render({"settings": {"tuningGpuBudget": 0}})
    assert settings_from_env(env_of(deployment_container(zero.docs)),
                             monkeypatch).tuning_gpu_budget == 0
    for bad in (-1, 2.5, "eight"):
        refused = render({"settings": {"tuningGpuBudget": bad}}, check=False)
        assert refused.returncode != 0, bad
        assert "tuningGpuBudget" in refused.stderr, refused.stderr


def test_secure_defaults(render: Render) -> None:
    """Non-root, read-only root filesystem, no capabilities, RuntimeDefault seccomp,
    no privilege escalation, bounded resources: what restricted Pod Security demands."""
    result = render()
    pod = result.one("Deployment")["spec"]["template"]["spec"]
    container = deployment_container(result.docs)
    sc = container["securityContext"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert sc["runAsNonRoot"] is True
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["privileged"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    for bound in ("requests", "limits"):
        assert set(container["resources"][bound]) == {"cpu", "memory"}
    assert not pod.get("hostNetwork") and not pod.get("hostPID")
    # The read-only root still leaves Python a scratch directory.
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]


def test_liveness_probe_targets_kopf_health_endpoint(render: Render) -> None:
    """The probe hits the port and path the operator is told to serve kopf's health on,
    and that port differs from the metrics port."""
    result = render({"health": {"port": 9099}, "metrics": {"port": 9100}})
    container = deployment_container(result.docs)
    assert "--liveness=http://0.0.0.0:9099/healthz" in container["args"]
    probe = container["livenessProbe"]["httpGet"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert probe["path"] == "/healthz"
    assert ports[probe["port"]] == 9099
    assert ports["metrics"] == 9100
    assert env_of(container)["LLMOP_METRICS_PORT"] == "9100"


def test_liveness_and_metrics_on_one_port_is_refused(render: Render) -> None:
    """Two servers cannot bind one port: the chart says so instead of a crash-looping pod."""
    result = render({"health": {"port": 8080}, "metrics": {"port": 8080}}, check=False)
    assert result.returncode != 0
    assert "metrics.port and health.port" in result.stderr
    assert "fix:" in result.stderr


def test_metrics_service_selects_the_operator_pods(render: Render) -> None:
    """The metrics Service's selector matches the pod labels and targets the metrics port."""
    result = render({"metrics": {"port": 9100, "service": {"port": 80}}})
    svc = result.one("Service")
    pod_labels = result.one("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    (port,) = svc["spec"]["ports"]
    assert port == {"name": "metrics", "port": 80, "targetPort": "metrics", "protocol": "TCP"}


def test_metrics_disabled_renders_no_service_and_port_zero(render: Render) -> None:
    """metrics.enabled=false turns the operator's metrics server off (LLMOP_METRICS_PORT=0)."""
    result = render({"metrics": {"enabled": False}})
    assert result.of_kind("Service") == []
    container = deployment_container(result.docs)
    assert env_of(container)["LLMOP_METRICS_PORT"] == "0"
    assert "metrics" not in {p["name"] for p in container["ports"]}


# ---------------------------------------------------------------- settings and CLI contract


def settings_from_env(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Any:
    """Build the operator's real Settings from exactly ``env`` (LLMOP_* only)."""
    from llm_operator.settings import Settings

    for key in list(os.environ):
        if key.startswith("LLMOP_"):
            monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return Settings()


@pytest.mark.parametrize("name", list(VALUE_SETS))
def test_every_env_var_is_a_setting(render: Render, name: str) -> None:
    """Settings ignores unknown LLMOP_* variables, so a misspelt name would be lost
    silently: every LLMOP_* variable the chart sets must name a Settings field."""
    from llm_operator.settings import Settings

    fields = {f"LLMOP_{f.upper()}" for f in Settings.model_fields}
    container = deployment_container(render(VALUE_SETS[name]).docs)
    rendered = {e["name"] for e in container["env"] if e["name"].startswith("LLMOP_")}
    assert rendered <= fields, f"not Settings fields: {sorted(rendered - fields)}"


def test_values_reach_the_operator_settings(
    render: Render, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Settings the operator builds from the rendered env equal the chart values."""
    values = VALUE_SETS["prometheus"] | {"watchNamespaces": ["team-a", "team-b"]}
    container = deployment_container(render(values).docs)
    settings = settings_from_env(env_of(container), monkeypatch)
    assert settings.namespaces == ["team-a", "team-b"]
    assert settings.prometheus_url == "http://prometheus-operated.monitoring:9090"
    assert settings.default_image == "vllm/vllm-openai:v0.11.1"
    assert settings.gpus_per_node == 4
    assert settings.tuning_job_ttl_seconds == 600
    assert settings.operator_image == container["image"]
    assert settings.metrics_port == 8080
    assert settings.pod_monitor == "auto"


def test_the_inference_pool_values_reach_the_operator_settings(
    render: Render, monkeypatch: pytest.MonkeyPatch
) -> None:
    """settings.inferencePool (issue 61): off and no picker by default; on with a picker
    when set, as the operator's Settings read them."""
    default = settings_from_env(env_of(deployment_container(render().docs)), monkeypatch)
    assert default.inference_pool is False and default.endpoint_picker_ref is None
    picker = {"name": "shared-epp", "port": {"number": 9002}, "failureMode": "FailOpen"}
    values = {"settings": {"inferencePool": {"enabled": True, "endpointPickerRef": picker}}}
    container = deployment_container(render(values).docs)
    settings = settings_from_env(env_of(container), monkeypatch)
    assert settings.inference_pool is True
    assert settings.endpoint_picker_ref is not None
    assert settings.endpoint_picker_ref.model_dump(by_alias=True, exclude_none=True,
                                                   mode="json") == picker


def test_default_settings_leave_optional_features_off(
    render: Render, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With defaults: the release's namespace only, no Prometheus (adaptation off),
    operator's own vLLM image default, and the tuning Job copies the tuner from the very
    image the operator runs."""
    from llm_operator.settings import Settings

    container = deployment_container(render().docs)
    env = env_of(container)
    assert "LLMOP_PROMETHEUS_URL" not in env and "LLMOP_DEFAULT_IMAGE" not in env
    settings = settings_from_env(env, monkeypatch)
    assert settings.namespaces == [NAMESPACE]
    assert settings.prometheus_url is None
    assert settings.default_image == Settings.model_fields["default_image"].default
    assert settings.operator_image == container["image"]


@pytest.mark.parametrize("name", ["defaults", "peering", "minimal"])
def test_rendered_args_are_accepted_by_the_cli(render: Render, name: str) -> None:
    """`llm-operator run` must accept every argument the chart passes it, or the pod
    would crash-loop on start."""
    from llm_operator.cli import build_parser

    container = deployment_container(render(VALUE_SETS[name]).docs)
    assert container["command"] == ["llm-operator"]
    try:
        args = build_parser().parse_args(container["args"])
    except SystemExit:
        pytest.fail(
            f"`llm-operator {' '.join(container['args'])}` is rejected by the CLI (see stderr); "
            "the chart's contract: `run` accepts --standalone, --peering=NAME (kopf peering, "
            "a distinct priority per pod) and --liveness=URL (kopf's health endpoint)"
        )
    assert args.command == "run"
    assert args.standalone is (not VALUE_SETS[name].get("peering", {}).get("enabled", False))


# ---------------------------------------------------------------- RBAC


def test_cluster_role_grants_exactly_what_the_operator_needs(render: Render) -> None:
    """Cluster-wide mode: one ClusterRole with exactly the operator's and kopf's needs,
    bound to the operator's ServiceAccount."""
    result = render({"clusterWide": True})
    role = result.one("ClusterRole")
    assert rule_table(role) == OPERATOR_RULES | KOPF_CRD_RULE
    binding = result.one("ClusterRoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": result.one("ServiceAccount")["metadata"]["name"],
            "namespace": NAMESPACE,
        }
    ]


@pytest.mark.parametrize("name", list(VALUE_SETS))
def test_no_wildcards_and_no_secrets_in_any_role(render: Render, name: str) -> None:
    """Least privilege in every value set: no '*' anywhere, no access to Secrets, and no
    write access to anything cluster-scoped."""
    docs = render(VALUE_SETS[name]).docs
    roles = [d for d in docs if d["kind"] in ("ClusterRole", "Role")]
    assert roles
    for role in roles:
        for rule in role["rules"]:
            for key in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule.get(key, []), f"{role['metadata']['name']}: {rule}"
            assert "secrets" not in rule["resources"]
            assert "nonResourceURLs" not in rule
    cluster_scoped = {"customresourcedefinitions", "namespaces", "clusterkopfpeerings"}
    for role in (r for r in roles if r["kind"] == "ClusterRole"):
        for (_, resource), verbs in rule_table(role).items():
            if resource in cluster_scoped and resource != "clusterkopfpeerings":
                assert verbs <= {"get", "list", "watch"}, f"{resource}: {verbs}"


def test_watch_namespaces_gets_one_role_per_namespace(render: Render) -> None:
    """With watchNamespaces, the operator's rights are Roles in those namespaces only; the
    one ClusterRole is read-only on what kopf observes cluster-wide."""
    result = render(VALUE_SETS["namespaced"])
    roles = result.of_kind("Role")
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    for role in roles:
        assert rule_table(role) == OPERATOR_RULES
    bindings = result.of_kind("RoleBinding")
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    for binding in bindings:
        assert binding["roleRef"]["kind"] == "Role"
        assert binding["subjects"][0]["namespace"] == NAMESPACE
    cluster_role = result.one("ClusterRole")
    assert rule_table(cluster_role) == KOPF_CRD_RULE | {("", "namespaces"): {"list", "watch"}}
    container = deployment_container(result.docs)
    assert json.loads(env_of(container)["LLMOP_NAMESPACES"]) == ["team-a", "team-b"]


def test_rbac_create_false_renders_no_rbac(render: Render) -> None:
    """rbac.create=false leaves RBAC to the cluster admin."""
    kinds = {d["kind"] for d in render({"rbac": {"create": False}}).docs}
    assert not kinds & {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}


# ---------------------------------------------------------------- peering


def test_peering_cluster_wide(render: Render) -> None:
    """replicaCount 2 with peering: --peering instead of --standalone, rolling updates,
    the ClusterKopfPeering object, its CRD from crds/, and RBAC on clusterkopfpeerings."""
    result = render(VALUE_SETS["peering"], "--include-crds")
    deploy = result.one("Deployment")
    assert deploy["spec"]["replicas"] == 2
    assert deploy["spec"]["strategy"]["type"] == "RollingUpdate"
    args = deployment_container(result.docs)["args"]
    assert "--peering=llm-operator" in args and "--standalone" not in args
    peering = result.one("ClusterKopfPeering")
    assert peering["apiVersion"] == "kopf.dev/v1"
    assert peering["metadata"]["name"] == "llm-operator"
    crd_names = {c["metadata"]["name"] for c in result.of_kind("CustomResourceDefinition")}
    assert {"clusterkopfpeerings.kopf.dev", "kopfpeerings.kopf.dev"} <= crd_names
    table = rule_table(result.one("ClusterRole"))
    assert table[("kopf.dev", "clusterkopfpeerings")] == PEERING_VERBS
    assert ("kopf.dev", "kopfpeerings") not in table


def test_peering_namespaced(render: Render) -> None:
    """Namespaced peering: one KopfPeering per watched namespace, RBAC in the Roles."""
    result = render(VALUE_SETS["peering-namespaced"])
    (peering,) = result.of_kind("KopfPeering")
    assert peering["metadata"] == peering["metadata"] | {"name": "llm-peers", "namespace": "team-a"}
    assert result.of_kind("ClusterKopfPeering") == []
    (role,) = result.of_kind("Role")
    assert rule_table(role)[("kopf.dev", "kopfpeerings")] == PEERING_VERBS
    assert "--peering=llm-peers" in deployment_container(result.docs)["args"]


def test_several_replicas_without_peering_are_refused(render: Render) -> None:
    """Two standalone kopf operators would fight over every LLMService: refuse, and say how."""
    result = render({"replicaCount": 2}, check=False)
    assert result.returncode != 0
    assert "replicaCount=2 needs peering.enabled=true" in result.stderr
    assert "fix:" in result.stderr


# ---------------------------------------------------------------- monitoring


def test_service_monitor_scrapes_the_metrics_service(render: Render) -> None:
    """The optional ServiceMonitor selects the metrics Service by its labels and scrapes its
    named port; the user's labels (for Prometheus' selector) are on it."""
    result = render(VALUE_SETS["monitoring"])
    sm = result.one("ServiceMonitor")
    svc = result.one("Service")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["metadata"]["labels"]["release"] == "kps"
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert sm["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    (endpoint,) = sm["spec"]["endpoints"]
    assert endpoint["port"] == svc["spec"]["ports"][0]["name"]
    assert endpoint["path"] == "/metrics"
    # The operator's per-service series keep the LLMService's namespace (the dashboard and
    # the alerts select by it), not the operator pod's.
    assert endpoint["honorLabels"] is True
    assert env_of(deployment_container(result.docs))["LLMOP_POD_MONITOR"] == "enabled"


def test_service_monitor_is_off_by_default(render: Render) -> None:
    """No Prometheus Operator is assumed: a default install renders no ServiceMonitor."""
    assert render().of_kind("ServiceMonitor") == []


# ---------------------------------------------------------------- values.schema.json

BAD_VALUES = [
    ({"settings": {"podMonitor": "sometimes"}}, "/settings/podMonitor"),
    ({"settings": {"gpusPerNode": 0}}, "/settings/gpusPerNode"),
    ({"settings": {"gpusPerNode": "eight"}}, "/settings/gpusPerNode"),
    ({"settings": {"prometheusUrl": "prometheus:9090"}}, "/settings/prometheusUrl"),
    ({"replicaCount": -1}, "/replicaCount"),
    ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
    ({"watchNamespaces": ["Team_A"]}, "/watchNamespaces/0"),
    ({"metrics": {"port": 70000}}, "/metrics/port"),
    ({"resources": {"limits": {"memory": "lots"}}}, "/resources/limits/memory"),
    ({"peering": {"enabeld": True}}, "enabeld"),
    ({"watchNamespace": ["a"]}, "watchNamespace"),
    ({"settings": {"gpuClass": "nvdia"}}, "/settings/gpuClass"),
    ({"settings": {"gpuClass": "Custom_GPUs", "gpuClasses": {"x": {}}}}, "/settings/gpuClass"),
    ({"clusterWide": "yes"}, "/clusterWide"),
    ({"admission": {"allowedImages": ["vllm/vllm-openai"]}}, "/admission/allowedImages/0"),
    ({"admission": {"allowedServiceAccounts": {"team-a": "vllm"}}},
     "/admission/allowedServiceAccounts/team-a"),
    ({"admission": {"enable": False}}, "enable"),
]


@pytest.mark.parametrize(("values", "named"), BAD_VALUES, ids=[b[1] for b in BAD_VALUES])
def test_schema_rejects_bad_values_naming_them(
    render: Render, values: dict[str, Any], named: str
) -> None:
    """values.schema.json stops a bad value before anything renders, naming the value."""
    result = render(values, check=False)
    assert result.returncode != 0
    assert "schema" in result.stderr
    assert named in result.stderr, result.stderr
    assert result.stdout == ""


def test_default_values_satisfy_the_schema() -> None:
    """The shipped values.yaml validates against values.schema.json (outside helm too)."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    jsonschema.validate(values, schema)


# ---------------------------------------------------------------- the CRD


def test_chart_crd_copy_is_identical_to_canonical() -> None:
    """The chart's CRD is a byte-for-byte copy of crds/ (the one source of truth)."""
    assert CANONICAL_CRD.exists(), f"{CANONICAL_CRD} is missing"
    assert CHART_CRD.exists(), "the chart has no CRD copy; fix: python tools/sync_crd.py"
    assert CHART_CRD.read_bytes() == CANONICAL_CRD.read_bytes(), (
        f"{CHART_CRD.relative_to(ROOT)} differs from {CANONICAL_CRD.relative_to(ROOT)}; "
        "fix: python tools/sync_crd.py"
    )


def test_crd_is_a_template_so_upgrades_update_it(render: Render) -> None:
    """The CRD renders from templates/ (Helm upgrades templates, never crds/), kept on
    uninstall so users' LLMServices survive, with the canonical spec unchanged."""
    result = render()  # no --include-crds: only templates
    crd = result.one("CustomResourceDefinition")
    canonical = yaml.safe_load(CANONICAL_CRD.read_text())
    assert crd["metadata"]["name"] == "llmservices.llmops.dev"
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert crd["spec"] == canonical["spec"]
    assert crd["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    assert "# Source: llm-operator/templates/crd.yaml" in result.stdout


def test_crd_install_can_be_turned_off(render: Render) -> None:
    """crds.install=false is for clusters where the CRD is managed elsewhere."""
    result = render({"crds": {"install": False}})
    assert result.of_kind("CustomResourceDefinition") == []


def test_sync_crd_repairs_drift(tmp_path: Path) -> None:
    """tools/sync_crd.py --check reports drift, and a plain run removes it."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import sync_crd
    finally:
        sys.path.pop(0)
    canonical, copy = tmp_path / "canonical.yaml", tmp_path / "files" / "copy.yaml"
    canonical.write_text("kind: CustomResourceDefinition\n")
    assert not sync_crd.in_sync(canonical, copy)
    assert sync_crd.sync(canonical, copy) is True
    assert copy.read_bytes() == canonical.read_bytes()
    assert sync_crd.sync(canonical, copy) is False


# ---------------------------------------------------------------- documentation


# Values passed through whole as Kubernetes objects (documented as one `[object]` @param).
OPAQUE_VALUES = {"podSecurityContext", "containerSecurityContext", "resources"}


def _leaf_paths(node: Any, prefix: str = "") -> set[str]:
    """Dotted paths of the values a user sets (an empty map or list is one value)."""
    if isinstance(node, dict) and node and prefix not in OPAQUE_VALUES:
        out: set[str] = set()
        for key, value in node.items():
            out |= _leaf_paths(value, f"{prefix}.{key}" if prefix else key)
        return out
    return {prefix}


def test_every_value_is_documented() -> None:
    """Every value in values.yaml has a `## @param` line, every @param names a real value,
    and the chart README's table lists every @param."""
    text = (CHART / "values.yaml").read_text()
    params = re.findall(r"^\s*## @param ([\w.]+)", text, flags=re.M)
    assert len(params) == len(set(params)), "duplicate @param"
    values = yaml.safe_load(text)
    leaves = _leaf_paths(values)
    assert set(params) == leaves, (
        f"undocumented: {sorted(leaves - set(params))}; unknown: {sorted(set(params) - leaves)}"
    )
    readme = (CHART / "README.md").read_text()
    missing = [p for p in params if f"`{p}`" not in readme]
    assert not missing, f"README.md lacks {missing}"
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert set(values) == set(schema["properties"]) - {"global"}


# ---------------------------------------------------------------- the helm installer


def test_install_helm_is_idempotent_and_replaces_a_broken_binary(helm: str, tmp_path: Path) -> None:
    """tools/install_helm.py keeps a working helm untouched and replaces a broken one."""
    dest = tmp_path / "bin" / "helm"
    dest.parent.mkdir()
    tool = str(ROOT / "tools" / "install_helm.py")
    shutil.copy2(helm, dest)
    before = dest.stat().st_mtime_ns
    proc = subprocess.run(
        [sys.executable, tool, "--dest", str(dest)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(dest)
    assert dest.stat().st_mtime_ns == before  # present and working: nothing downloaded
    dest.write_text("#!/bin/sh\nexit 1\n")
    proc = subprocess.run(
        [sys.executable, tool, "--dest", str(dest)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    version = subprocess.run(
        [str(dest), "version", "--template", "{{ .Version }}"], capture_output=True, text=True
    )
    assert version.stdout.startswith("v3.")


def test_release_name_prefixes_every_object(render: Render) -> None:
    """Two releases in one cluster do not collide: names carry the release name."""
    for doc in render(VALUE_SETS["namespaced"]).docs:
        if doc["kind"] != "CustomResourceDefinition":
            assert doc["metadata"]["name"].startswith(RELEASE), doc["metadata"]["name"]


def test_gpu_class_and_pod_monitor_values_reach_the_operator(
    render: Render, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GKE cluster with kube-prometheus-stack: the chart values become the GPU class, the
    PodMonitor's labels and its scrape interval (issue 13, items 4 and 5)."""
    values = {"settings": {
        "gpuClass": "lab", "scrapeIntervalSeconds": 15,
        "podMonitorLabels": {"release": "kube-prometheus-stack"},
        "gpuClasses": {"lab": {"productLabel": "example.com/gpu", "products": {"L4": "l4"},
                               "tolerations": [{"key": "gpu", "operator": "Exists"}]}}}}
    settings = settings_from_env(env_of(deployment_container(render(values).docs)), monkeypatch)
    assert settings.gpu_class == "lab"
    assert settings.selected_gpu_class().label_value("NVIDIA-L4") == "l4"
    assert settings.pod_monitor_labels == {"release": "kube-prometheus-stack"}
    assert settings.scrape_interval_seconds == 15
    defaults = settings_from_env(env_of(deployment_container(render().docs)), monkeypatch)
    assert defaults.gpu_class == "nvidia" and defaults.gpu_classes == {}
    assert defaults.scrape_interval_seconds == 30 and defaults.pod_monitor_labels == {}
