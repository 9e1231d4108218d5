"""One LLMService: its metadata and the whole spec."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from .automation import AdaptationSpec, RolloutSpec, TuningSpec
from .base import _Model
from .formats import IMAGE_PATTERN
from .pod import CacheSpec, PodSpec, ResourcesSpec
from .routing import RoutingSpec
from .scheduling import SchedulingSpec
from .serving import EngineSpec, GPUSpec, ModelSpec
from .workload import WorkloadSpec


class LLMServiceSpec(_Model):
    model: ModelSpec
    # None: the operator's LLMOP_DEFAULT_IMAGE (the CRD sets no default, so that the
    # administrator's choice reaches every service that leaves it out).
    image: str | None = Field(default=None, min_length=1, max_length=1024,
                              pattern=IMAGE_PATTERN)
    replicas: int = Field(default=1, ge=0, le=1000)
    gpus: GPUSpec = Field(default_factory=GPUSpec)
    scheduling: SchedulingSpec = Field(default_factory=SchedulingSpec)
    engine: EngineSpec = Field(default_factory=EngineSpec)
    workload: WorkloadSpec = Field(default_factory=WorkloadSpec)
    tuning: TuningSpec = Field(default_factory=TuningSpec)
    adaptation: AdaptationSpec = Field(default_factory=AdaptationSpec)
    cache: CacheSpec = Field(default_factory=CacheSpec)
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    pod: PodSpec = Field(default_factory=PodSpec)
    rollout: RolloutSpec = Field(default_factory=RolloutSpec)
    routing: RoutingSpec = Field(default_factory=RoutingSpec)


# metadata.name names the Service (an RFC 1035 label) and is a label value: the CRD's
# schema says the same (metadata.name's pattern and maxLength).
NAME_MAX = 63
NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"


class ObjectMeta(BaseModel):
    """The part of metadata the logic needs; the rest is ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    name: str = Field(max_length=NAME_MAX, pattern=NAME_PATTERN)
    namespace: str = "default"
    uid: str | None = None
    generation: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class LLMService(BaseModel):
    """One parsed LLMService: metadata plus the typed spec."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    metadata: ObjectMeta
    spec: LLMServiceSpec
