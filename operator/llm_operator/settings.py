"""One typed settings object, read from ``LLMOP_*`` environment variables.

Validated at start; the Helm chart sets these (see ``charts/llm-operator/values.yaml``).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from .api.constants import DEFAULT_GPUS_PER_NODE, DEFAULT_IMAGE, GROUP
from .api.errors import InputError
from .api.models import EndpointPickerRef, FieldProblem
from .knowledge.gpuclass import DEFAULT_CLASS, GPUClass, resolve_class
from .knowledge.startup import DEFAULT_LOAD_BANDWIDTH, bandwidth_bytes

# The adaptation window must hold at least this many scrapes: the same number as
# llm_operator.adaptation.policy.MIN_SCRAPES_PER_WINDOW (a test keeps them equal; the
# settings sit below the adaptation package and cannot import it).
MIN_SCRAPES_PER_WINDOW = 4


class Settings(BaseSettings):
    """Operator-wide settings. Every field is one ``LLMOP_<NAME>`` variable."""

    model_config = SettingsConfigDict(env_prefix="LLMOP_", extra="ignore", frozen=True)

    namespaces: list[str] = Field(
        default_factory=list,
        description="Namespaces to watch (JSON list); empty watches the whole cluster",
    )
    default_image: str = Field(DEFAULT_IMAGE, description="vLLM image when spec.image is unset")
    gpus_per_node: int = Field(
        DEFAULT_GPUS_PER_NODE, ge=1, description="GPUs of one node when spec.gpus.perNode is unset"
    )
    operator_image: str = Field(
        "ghcr.io/llmops-dev/llm-operator:0.1.0",
        description="This operator's image; the tuning Job copies the tuner code from it",
    )
    pod_monitor: Literal["auto", "enabled", "disabled"] = Field(
        "auto",
        description="Render a PodMonitor: auto = when the cluster serves monitoring.coreos.com",
    )
    inference_pool: bool = Field(
        False,
        description="Render an InferencePool (Gateway API Inference Extension) for every "
        "LLMService that leaves spec.routing.inferencePool.enabled unset",
    )
    endpoint_picker_ref: EndpointPickerRef | None = Field(
        None,
        description="The InferencePool's endpointPickerRef (JSON object: name, port "
        "{number}, and optionally group, kind, failureMode) where an LLMService leaves "
        "spec.routing.inferencePool.endpointPickerRef unset; unset: the pool names none",
    )
    prometheus_url: str | None = Field(
        None, description="Prometheus base URL for online adaptation; unset disables it"
    )
    prometheus_ca_file: str | None = Field(
        None, description="CA bundle that verifies Prometheus' TLS certificate (default: the "
        "system's CAs)",
    )
    prometheus_bearer_token_file: str | None = Field(
        None, description="File holding a bearer token sent to Prometheus, read on every "
        "request (e.g. /var/run/secrets/kubernetes.io/serviceaccount/token)",
    )
    prometheus_insecure_skip_verify: bool = Field(
        False, description="Do not verify Prometheus' TLS certificate (not for production)",
    )
    prometheus_service_label: str = Field(
        "llmservice",
        description="Label on vLLM series naming the LLMService (after relabelling)",
    )
    prometheus_namespace_label: str = Field(
        "namespace", description="Label on vLLM series naming the namespace"
    )
    model_load_bandwidth: str = Field(
        DEFAULT_LOAD_BANDWIDTH,
        description="Bytes per second vLLM reads model weights at (a Kubernetes quantity, "
        "e.g. 125Mi) where an LLMService leaves spec.model.loadBandwidth unset: the startup "
        "probe's budget and the tuner's per server start follow it",
    )
    metrics_port: int = Field(8080, ge=0, description="Port of the operator's own /metrics; 0 off")
    adaptation_window_seconds: float = Field(
        120.0, gt=0,
        description="Window the online adaptation's Prometheus signals average over (seconds)",
    )
    health_port: int = Field(
        8081, ge=0, description="Port of the operator's liveness endpoint /healthz; 0 off"
    )
    tuning_job_ttl_seconds: int = Field(
        3600, ge=0, description="ttlSecondsAfterFinished of finished tuning Jobs"
    )
    tuning_priority_class: str = Field(
        "llm-operator-tuning",
        description="PriorityClass of tuning Jobs placed on spare GPUs (spec.tuning.placement "
        "Spare): lower than serving and never preempting (the chart creates it); "
        "spec.tuning.priorityClassName overrides it; empty keeps the service's own priority",
    )
    tuning_gpu_budget: int = Field(
        8, ge=0,
        description="GPUs that tuning Jobs on spare GPUs (spec.tuning.placement Spare, or "
        "BeforeServing for a service that served already) may hold at once, across the "
        "watched namespaces: a run that would exceed it waits (status.tuning.state Queued) "
        "until running ones end; 0 runs none on spare GPUs",
    )
    hf_endpoint: str | None = Field(
        None, description="Hugging Face Hub mirror (HF_ENDPOINT) the facts Job reads a "
        "model's config.json from; unset: huggingface.co (spec.pod.env's HF_ENDPOINT wins)",
    )
    gpu_class: str = Field(
        DEFAULT_CLASS,
        description="GPU class that places server and tuning pods: a preset (nvidia = GPU "
        "feature discovery's nvidia.com/gpu.product, gke, eks = Karpenter, aks) or a name "
        "defined in gpu_classes",
    )
    gpu_classes: dict[str, GPUClass] = Field(
        default_factory=dict,
        description="GPU classes of the administrator's own (JSON object: name -> "
        "{productLabel, products, nodeSelector, tolerations, resourceName}); a preset's "
        "name replaces that preset",
    )
    pod_monitor_labels: dict[str, str] = Field(
        default_factory=dict,
        description="Extra labels on the PodMonitor, for the Prometheus' podMonitorSelector "
        "(kube-prometheus-stack selects release: <its Helm release name>)",
    )
    live_cap_report_timeout_seconds: float = Field(
        300.0, ge=30, le=3600,
        description="How long the online adaptation waits for the engines to report a new "
        "live admission cap before it rolls the pods instead (the kubelet refreshes the "
        "ConfigMap volume within about 60-90 s)",
    )
    scrape_interval_seconds: int = Field(
        30, ge=1,
        description="Scrape interval the PodMonitor asks for, and the interval the online "
        "adaptation assumes its series are scraped at (it sizes the sample minimum)",
    )

    @model_validator(mode="after")
    def _consistent(self) -> Settings:
        """Refuse at start what cannot work: an unknown GPU class, PodMonitor labels in the
        operator's own label domains, a window too short for the scrape interval."""
        resolve_class(self.gpu_class, self.gpu_classes)
        try:
            bandwidth_bytes(self.model_load_bandwidth)
        except ValueError as exc:
            raise ValueError(f"LLMOP_MODEL_LOAD_BANDWIDTH: {exc}; give the storage's "
                             "sustained read rate, e.g. 125Mi") from None
        own = [k for k in self.pod_monitor_labels
               if k.split("/")[0] in (GROUP, "app.kubernetes.io")]
        if own:
            raise ValueError(f"LLMOP_POD_MONITOR_LABELS: {', '.join(own)} are the operator's "
                             "own labels; use other keys")
        if self.adaptation_window_seconds < MIN_SCRAPES_PER_WINDOW * self.scrape_interval_seconds:
            raise ValueError(
                f"LLMOP_ADAPTATION_WINDOW_SECONDS ({self.adaptation_window_seconds:g}) must "
                f"hold at least {MIN_SCRAPES_PER_WINDOW} scrapes of "
                f"LLMOP_SCRAPE_INTERVAL_SECONDS ({self.scrape_interval_seconds}): set the "
                f"window to at least {MIN_SCRAPES_PER_WINDOW * self.scrape_interval_seconds} "
                "or scrape more often")
        return self

    def selected_gpu_class(self) -> GPUClass:
        """The GPU class named by ``gpu_class`` (validated at start)."""
        return resolve_class(self.gpu_class, self.gpu_classes)


# The Helm value that sets each variable (charts/llm-operator/templates/deployment.yaml;
# tests/chart check that every LLMOP_* variable the chart sets is here): a setting the
# operator refuses at start names the value to fix, not only the variable.
HELM_VALUES: dict[str, str] = {
    "LLMOP_NAMESPACES": "watchNamespaces (or clusterWide)",
    "LLMOP_DEFAULT_IMAGE": "settings.defaultImage",
    "LLMOP_GPUS_PER_NODE": "settings.gpusPerNode",
    "LLMOP_MODEL_LOAD_BANDWIDTH": "settings.modelLoadBandwidth",
    "LLMOP_OPERATOR_IMAGE": "settings.operatorImage",
    "LLMOP_POD_MONITOR": "settings.podMonitor",
    "LLMOP_INFERENCE_POOL": "settings.inferencePool.enabled",
    "LLMOP_ENDPOINT_PICKER_REF": "settings.inferencePool.endpointPickerRef",
    "LLMOP_HF_ENDPOINT": "settings.hfEndpoint",
    "LLMOP_PROMETHEUS_URL": "settings.prometheusUrl",
    "LLMOP_PROMETHEUS_CA_FILE": "settings.prometheusCaFile",
    "LLMOP_PROMETHEUS_BEARER_TOKEN_FILE": "settings.prometheusBearerTokenFile",
    "LLMOP_PROMETHEUS_INSECURE_SKIP_VERIFY": "settings.prometheusInsecureSkipVerify",
    "LLMOP_PROMETHEUS_SERVICE_LABEL": "settings.prometheusServiceLabel",
    "LLMOP_PROMETHEUS_NAMESPACE_LABEL": "settings.prometheusNamespaceLabel",
    "LLMOP_METRICS_PORT": "metrics.port",
    "LLMOP_HEALTH_PORT": "health.port",
    "LLMOP_TUNING_JOB_TTL_SECONDS": "settings.tuningJobTtlSeconds",
    "LLMOP_ADAPTATION_WINDOW_SECONDS": "settings.adaptationWindowSeconds",
    "LLMOP_LIVE_CAP_REPORT_TIMEOUT_SECONDS": "settings.liveCapReportTimeoutSeconds",
    "LLMOP_SCRAPE_INTERVAL_SECONDS": "settings.scrapeIntervalSeconds",
    "LLMOP_POD_MONITOR_LABELS": "settings.podMonitorLabels",
    "LLMOP_GPU_CLASS": "settings.gpuClass",
    "LLMOP_GPU_CLASSES": "settings.gpuClasses",
    "LLMOP_TUNING_PRIORITY_CLASS": "tuningPriorityClass.name",
    "LLMOP_TUNING_GPU_BUDGET": "settings.tuningGpuBudget",
}
_VARIABLE = re.compile(r"\bLLMOP_[A-Z_]+\b")


def _with_helm_values(text: str) -> str:
    """``text`` with each LLMOP_* variable it names followed by its Helm value."""
    return _VARIABLE.sub(lambda m: f"{m.group(0)} (Helm value {HELM_VALUES[m.group(0)]})"
                         if m.group(0) in HELM_VALUES else m.group(0), text)


def load_settings() -> Settings:
    """:class:`Settings` from the environment; a setting that cannot work raises
    :class:`~.errors.InputError` naming the variable and the Helm value that sets it
    (the operator exits with that one message, not as an internal error)."""
    try:
        return Settings()
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = [str(part) for part in err.get("loc", ()) if part != "__root__"]
            where = f"LLMOP_{loc[0].upper()}: " if loc else ""
            msg = str(err.get("msg", "")).removeprefix("Value error, ")
            problem = (err.get("ctx") or {}).get("error")
            if isinstance(problem, FieldProblem):  # a refusal with its own fix
                msg = f"{'.'.join(loc[1:]) + ': ' if loc[1:] else ''}{problem.problem}; " \
                      f"{problem.fix}"
            problems.append(_with_helm_values(f"{where}{msg}"))
        raise InputError("operator settings", "; ".join(problems),
                         "correct that Helm value (helm upgrade --reuse-values --set ...) or "
                         "the LLMOP_* variable") from None
