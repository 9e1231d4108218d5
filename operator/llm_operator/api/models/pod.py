"""What the pods carry besides the engine: ``spec.cache``, ``spec.resources`` and
``spec.pod`` (environment, pull secrets, labels, annotations, user)."""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, field_validator, model_validator

from ..constants import DEFAULT_RUN_AS_USER
from .base import FieldProblem, _Model
from .formats import ENV_NAME, KEY_PATTERN, SECRET_TOKEN, SUBDOMAIN_PATTERN, _check_keys
from .quantities import _positive_quantity


class CacheSpec(_Model):
    """Where the model's files are cached between pod restarts.

    ``size_limit`` None: an emptyDir sized from the plan (the checkpoint plus a margin,
    see :func:`llm_operator.planning.model_cache_bytes`)."""

    claim_name: str | None = Field(default=None, min_length=1, max_length=253,
                                   pattern=SUBDOMAIN_PATTERN)
    size_limit: str | None = None

    @field_validator("size_limit")
    @classmethod
    def _quantity(cls, v: str | None) -> str | None:
        return _positive_quantity(v)


class ResourcesSpec(_Model):
    """CPU and memory of the vLLM container; unset: derived from the plan (see
    :func:`llm_operator.planning.pod_cpu` and :func:`~llm_operator.planning.pod_memory_bytes`)."""

    cpu: str | None = None
    memory: str | None = None
    shm_size: str = "16Gi"

    @field_validator("cpu", "memory", "shm_size")
    @classmethod
    def _quantity(cls, v: str | None) -> str | None:
        return _positive_quantity(v)


class KeySelector(_Model):
    """A key of a Secret or ConfigMap in the service's namespace."""

    name: str = Field(min_length=1, max_length=253, pattern=SUBDOMAIN_PATTERN)
    key: str = Field(min_length=1, max_length=253, pattern=KEY_PATTERN)
    optional: bool | None = None


# What the API server accepts in an env var's fieldRef and resourceFieldRef.
FIELD_PATHS = ("metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName",
               "spec.serviceAccountName", "status.hostIP", "status.hostIPs", "status.podIP",
               "status.podIPs")
_FIELD_PATH_KEYED = re.compile(r"^metadata\.(labels|annotations)\['[^']+'\]$")
ENV_RESOURCES = ("limits.cpu", "limits.memory", "limits.ephemeral-storage", "requests.cpu",
                 "requests.memory", "requests.ephemeral-storage")
_DIVISORS = {"cpu": ("1m", "1"),
             "memory": ("1", "1k", "1M", "1G", "1T", "1P", "1E", "1Ki", "1Mi", "1Gi", "1Ti",
                        "1Pi", "1Ei")}


class ObjectFieldSelector(_Model):
    field_path: str = Field(min_length=1)
    api_version: str | None = None

    @model_validator(mode="after")
    def _supported(self) -> ObjectFieldSelector:
        if self.field_path not in FIELD_PATHS and not _FIELD_PATH_KEYED.match(self.field_path):
            raise FieldProblem(f"{self.field_path!r} is not a field the pod can expose (the "
                               "API server refuses it)", "use one of: " + ", ".join(FIELD_PATHS)
                               + ", metadata.labels['KEY'], metadata.annotations['KEY']",
                               at=".fieldPath")
        if self.api_version not in (None, "v1"):
            raise FieldProblem(f"{self.api_version!r} is not the pod's API version",
                               "leave it unset (v1)", at=".apiVersion")
        return self


class ResourceFieldSelector(_Model):
    resource: str = Field(min_length=1)
    container_name: str | None = None
    divisor: str | None = None

    @model_validator(mode="after")
    def _supported(self) -> ResourceFieldSelector:
        if self.resource not in ENV_RESOURCES and not self.resource.startswith(
                ("limits.hugepages-", "requests.hugepages-")):
            raise FieldProblem(f"{self.resource!r} is not a resource the pod can expose (the "
                               "API server refuses it)", "use one of: " + ", ".join(ENV_RESOURCES),
                               at=".resource")
        if self.container_name is not None:
            raise FieldProblem(f"names container {self.container_name!r}, and these variables "
                               "go into the vLLM, download and tuning containers, not all of "
                               "which are in every pod (the API server would refuse one)",
                               "leave it unset: it then means the container the variable "
                               "is in", at=".containerName")
        kind = self.resource.rpartition(".")[2]
        allowed = _DIVISORS.get("cpu" if kind == "cpu" else "memory")
        if self.divisor is not None and allowed and self.divisor not in allowed:
            raise FieldProblem(f"{self.divisor!r} is not a divisor the API server accepts for "
                               f"{self.resource}", "use one of: " + ", ".join(allowed),
                               at=".divisor")
        return self


class EnvVarSource(_Model):
    """Where an environment variable's value comes from (one source)."""

    secret_key_ref: KeySelector | None = None
    config_map_key_ref: KeySelector | None = None
    field_ref: ObjectFieldSelector | None = None
    resource_field_ref: ResourceFieldSelector | None = None

    @model_validator(mode="after")
    def _one_source(self) -> EnvVarSource:
        if sum(x is not None for x in (self.secret_key_ref, self.config_map_key_ref,
                                      self.field_ref, self.resource_field_ref)) != 1:
            raise ValueError("set exactly one of secretKeyRef, configMapKeyRef, fieldRef, "
                             "resourceFieldRef")
        return self


class EnvVar(_Model):
    """One environment variable, as in a container spec: a value or a valueFrom."""

    name: str = Field(min_length=1)
    value: str | None = None
    value_from: EnvVarSource | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not ENV_NAME.match(v):
            raise ValueError("must consist of letters, digits, '_', '-' or '.' and not "
                             "start with a digit")
        return v

    @field_validator("value")
    @classmethod
    def _no_token(cls, v: str | None) -> str | None:
        if v is not None and SECRET_TOKEN.search(v):
            raise FieldProblem(
                "holds what looks like an access token in clear text: anyone who can read "
                "the LLMService or its pods can read it",
                "keep it in a Secret and use valueFrom.secretKeyRef (for the Hugging Face "
                "token: spec.model.tokenSecretRef)")
        return v

    def rendered(self) -> dict[str, Any]:
        """The container-spec form (camelCase, only the fields set)."""
        out: dict[str, Any] = {"name": self.name}
        if self.value is not None:
            out["value"] = self.value
        if self.value_from is not None:
            out["valueFrom"] = self.value_from.model_dump(by_alias=True, exclude_none=True)
        return out


class LocalObjectReference(_Model):
    name: str = Field(min_length=1, max_length=253, pattern=SUBDOMAIN_PATTERN)


# The API server's limit on the total size of an object's annotations (keys and values).
ANNOTATIONS_MAX_BYTES = 256 * 1024


class PodSpec(_Model):
    """What the vLLM pods (and the tuning Job's pod) carry besides what the operator
    sets: environment, pull secrets, service account, labels and annotations."""

    env: list[EnvVar] = Field(default_factory=list)
    image_pull_secrets: list[LocalObjectReference] = Field(default_factory=list)
    service_account_name: str | None = Field(default=None, min_length=1, max_length=253,
                                             pattern=SUBDOMAIN_PATTERN)
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    # The user the pods run as (vllm-openai names none, so it would be root): not root by
    # default, so that the pods pass the `restricted` Pod Security Standard; 0 = root.
    run_as_user: int = Field(default=DEFAULT_RUN_AS_USER, ge=0, le=2147483647)

    @field_validator("labels")
    @classmethod
    def _labels(cls, v: dict[str, str]) -> dict[str, str]:
        return _check_keys(v, "label", check_values=True)

    @field_validator("annotations")
    @classmethod
    def _annotations(cls, v: dict[str, str]) -> dict[str, str]:
        total = sum(len(k.encode()) + len(str(x).encode()) for k, x in v.items())
        # A margin for the annotations the operator adds to the pod template itself.
        if total > ANNOTATIONS_MAX_BYTES - 16 * 1024:
            raise FieldProblem(f"add up to {total:,} bytes, over the "
                               f"{(ANNOTATIONS_MAX_BYTES - 16 * 1024) // 1024} KiB the pod "
                               "template has room for (the API server allows 256 KiB in all)",
                               "keep large data in a ConfigMap and refer to it")
        return _check_keys(v, "annotation", check_values=False)
