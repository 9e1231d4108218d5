"""Typed models of the LLMService custom resource (parse at the boundary).

The field names mirror the CRD in ``crds/llmservices.llmops.dev.yaml`` through
camelCase aliases; a test keeps the two in step. Engine settings are either left
to the operator (``"auto"`` for numbers, absent for switches) or pinned by the
user, and a pinned value is never changed by tuning or adaptation.

One module per part: the base model and the field error (:mod:`.base`), the formats
Kubernetes checks (:mod:`.formats`) and its quantities (:mod:`.quantities`), the spec's
sections (:mod:`.serving`: model, GPUs, engine; :mod:`.scheduling`; :mod:`.workload`;
:mod:`.automation`: tuning, adaptation, rollout; :mod:`.pod`: cache, resources, pod;
:mod:`.routing`), the whole resource (:mod:`.service`), and reading it
(:mod:`.parsing`: a body; :mod:`.manifests`: YAML files). Every public name is
re-exported here.
"""

from .automation import (
    AdaptationMode,
    AdaptationSpec,
    PreemptionPolicy,
    RolloutSpec,
    TuningMode,
    TuningPlacement,
    TuningSpec,
)
from .base import Auto, AutoInt, FieldProblem
from .formats import (
    ENV_NAME,
    GROUP_PATTERN,
    IMAGE_PATTERN,
    KEY_PATTERN,
    KIND_PATTERN,
    LABEL_VALUE,
    PATTERN_HELP,
    QUALIFIED_NAME,
    RESOURCE_NAME_PATTERN,
    REVISION_PATTERN,
    SECRET_TOKEN,
    SUBDOMAIN_PATTERN,
)
from .manifests import YAML_MAX_VALUES, load_services
from .parsing import (
    LAST_APPLIED,
    dropped_fields,
    dropped_message,
    ints_beyond_int64,
    parse_llmservice,
)
from .pod import (
    ANNOTATIONS_MAX_BYTES,
    ENV_RESOURCES,
    FIELD_PATHS,
    CacheSpec,
    EnvVar,
    EnvVarSource,
    KeySelector,
    LocalObjectReference,
    ObjectFieldSelector,
    PodSpec,
    ResourceFieldSelector,
    ResourcesSpec,
)
from .quantities import QUANTITY_MAX, parse_quantity, quantity_fix
from .routing import (
    EndpointPickerFailureMode,
    EndpointPickerRef,
    InferencePoolSpec,
    PortNumber,
    RoutingSpec,
)
from .scheduling import Affinity, SchedulingSpec, requirement_problem
from .service import NAME_MAX, NAME_PATTERN, LLMService, LLMServiceSpec, ObjectMeta
from .serving import (
    MIN_LOAD_BANDWIDTH,
    MODEL_ID_PATTERN,
    Architecture,
    Dtype,
    EngineSpec,
    GPUSpec,
    KVCacheDtype,
    ModelSpec,
    ModelVolume,
    Quantization,
    SecretKeyRef,
)
from .workload import SLOSpec, WorkloadSpec

__all__ = [
    "ANNOTATIONS_MAX_BYTES", "AdaptationMode", "AdaptationSpec", "Affinity", "Architecture",
    "Auto", "AutoInt", "CacheSpec", "Dtype", "ENV_NAME", "ENV_RESOURCES",
    "EndpointPickerFailureMode", "EndpointPickerRef", "EngineSpec", "EnvVar", "EnvVarSource",
    "FIELD_PATHS", "FieldProblem", "GPUSpec", "GROUP_PATTERN", "IMAGE_PATTERN",
    "InferencePoolSpec", "KEY_PATTERN", "KIND_PATTERN", "KVCacheDtype", "KeySelector",
    "LABEL_VALUE", "LAST_APPLIED", "LLMService", "LLMServiceSpec", "LocalObjectReference",
    "MIN_LOAD_BANDWIDTH", "MODEL_ID_PATTERN", "ModelSpec", "ModelVolume", "NAME_MAX",
    "NAME_PATTERN", "ObjectFieldSelector", "ObjectMeta", "PATTERN_HELP", "PodSpec",
    "PortNumber", "PreemptionPolicy", "QUALIFIED_NAME", "QUANTITY_MAX", "Quantization",
    "RESOURCE_NAME_PATTERN", "REVISION_PATTERN", "ResourceFieldSelector", "ResourcesSpec",
    "RolloutSpec", "RoutingSpec", "SECRET_TOKEN", "SLOSpec", "SUBDOMAIN_PATTERN",
    "SchedulingSpec", "SecretKeyRef", "TuningMode", "TuningPlacement", "TuningSpec",
    "WorkloadSpec", "YAML_MAX_VALUES", "dropped_fields", "dropped_message",
    "ints_beyond_int64", "load_services", "parse_llmservice", "parse_quantity", "quantity_fix",
    "requirement_problem",
]
