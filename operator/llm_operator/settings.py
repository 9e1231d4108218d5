"""One typed settings object, read from ``LLMOP_*`` environment variables.

Validated at start; the Helm chart sets these (see ``charts/llm-operator/values.yaml``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from .constants import DEFAULT_GPUS_PER_NODE, DEFAULT_IMAGE


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
    prometheus_url: str | None = Field(
        None, description="Prometheus base URL for online adaptation; unset disables it"
    )
    prometheus_service_label: str = Field(
        "llmservice",
        description="Label on vLLM series naming the LLMService (after relabelling)",
    )
    prometheus_namespace_label: str = Field(
        "namespace", description="Label on vLLM series naming the namespace"
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
