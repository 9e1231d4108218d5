"""The formats the API server checks in names, keys, labels, images and groups (and
what each means, for a fix), and the access token that must not sit in a spec."""

from __future__ import annotations

import re

from .base import FieldProblem

# Names and keys as the API server checks them where the pod spec refers to them
# (apimachinery IsDNS1123Subdomain, IsConfigMapKey), the same patterns as the CRD's.
SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
KEY_PATTERN = r"^[-._a-zA-Z0-9]+$"
# An extended resource: a domain prefix and a name (nvidia.com/gpu, amd.com/gpu).
RESOURCE_NAME_PATTERN = (r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
                         r"/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
# A container image reference (the distribution/reference grammar kubelet parses): an
# optional registry host, lowercase path components, an optional tag and digest.
# Anything else fails at the pull (InvalidImageName) and the pod never starts.
_HOST = r"[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?"
_DOMAIN = rf"{_HOST}(\.{_HOST})*(:[0-9]+)?"
_PATH = r"[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*"
IMAGE_PATTERN = (rf"^({_DOMAIN}/)?{_PATH}(/{_PATH})*(:[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?"
                 r"(@[A-Za-z][A-Za-z0-9]*([-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$")
REVISION_PATTERN = r"^[^\s]+$"
# An API group and a kind as the Gateway API Inference Extension's CRD checks them
# (spec.endpointPickerRef.group and .kind of an InferencePool).
GROUP_PATTERN = r"^$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
KIND_PATTERN = r"^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$"
# What each pattern means, for the fix of a value that does not match it.
PATTERN_HELP = {
    SUBDOMAIN_PATTERN: "a Kubernetes object name: lowercase letters, digits, '-' and '.', "
                       "starting and ending with a letter or digit, e.g. hf-token",
    KEY_PATTERN: "a Secret or ConfigMap key: letters, digits, '-', '_' and '.', e.g. token",
    RESOURCE_NAME_PATTERN: "an extended resource with its domain, e.g. nvidia.com/gpu",
    IMAGE_PATTERN: "an image reference (registry/lowercase-path:tag), e.g. "
                   "vllm/vllm-openai:v0.11.0",
    REVISION_PATTERN: "a branch, tag or commit without spaces, e.g. main",
    GROUP_PATTERN: "an API group: empty for the core group (a Service), or a lowercase "
                   "DNS name, e.g. example.com",
    KIND_PATTERN: "a kind: letters, digits and '-', starting with a letter, e.g. Service",
}


# Kubernetes label keys, label values and annotation keys (apimachinery validation):
# a qualified name is an optional DNS-subdomain prefix and "/", then 1-63 characters of
# alphanumerics, "-", "_", "." that begin and end with an alphanumeric.
_NAME_PART = r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)"
_PREFIX = r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)"
QUALIFIED_NAME = re.compile(rf"^({_PREFIX}/)?{_NAME_PART}$")
LABEL_VALUE = re.compile(rf"^({_NAME_PART})?$")
ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")  # what the API server accepts


def _check_keys(values: dict[str, str], what: str, check_values: bool) -> dict[str, str]:
    for key, value in values.items():
        prefix = key.rpartition("/")[0]
        if not QUALIFIED_NAME.match(key) or len(prefix) > 253:
            raise FieldProblem(f"{what} key {key!r} is not a Kubernetes qualified name "
                               "([prefix/]name, name at most 63 alphanumerics, '-', '_', '.')",
                               "rename the key, e.g. example.com/team")
        if check_values and (len(value) > 63 or not LABEL_VALUE.match(value)):
            raise FieldProblem(f"label value {value!r} of {key!r} is not a valid label value "
                               "(at most 63 alphanumerics, '-', '_', '.')",
                               "use letters, digits, '-', '_' and '.', starting and ending "
                               "with a letter or digit")
    return values


# Access tokens that must not sit in a spec in clear text: Hugging Face (hf_...).
SECRET_TOKEN = re.compile(r"(?<![A-Za-z0-9])hf_[A-Za-z0-9]{30,}")
