"""Names shared by the CRD, the chart, the renderer and the operator.

One module so that manifests, chart and code agree (see CONTRIBUTING.md, "Layout").
"""

GROUP = "llmops.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "LLMService"
PLURAL = "llmservices"
SINGULAR = "llmservice"
SHORT_NAMES = ("llms", "llmsvc")
CRD_NAME = f"{PLURAL}.{GROUP}"

# Labels and annotations on children.
LABEL_SERVICE = f"{GROUP}/llmservice"  # value: the LLMService's name; also groups Prometheus series
LABEL_COMPONENT = f"{GROUP}/component"  # server | tuning
LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT_K8S = "app.kubernetes.io/component"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_PART_OF = "app.kubernetes.io/part-of"
MANAGED_BY = "llm-operator"
APP_NAME = "vllm"

ANNOTATION_SPEC_HASH = f"{GROUP}/spec-hash"  # hash of the rendered child, to patch only on change
ANNOTATION_FINGERPRINT = f"{GROUP}/tuning-fingerprint"
ANNOTATION_RETUNE = f"{GROUP}/retune"
# "true" on a tuning Job on spare GPUs (counted against the tuning GPU budget), "false" on
# one that runs on GPUs serving lent it (BorrowReplica, a held BeforeServing service)
ANNOTATION_TUNING_ON_SPARE = f"{GROUP}/tuning-on-spare"

# kopf bookkeeping under our own name (STYLE habit 10).
FINALIZER = f"{GROUP}/finalizer"
PROGRESS_PREFIX = GROUP

# Defaults.
# The vLLM release whose `vllm serve` parser the tests check the rendered arguments against
# (tests/unit/test_rendering.py) and whose CPU build the engine tiers run (tools/setup.sh).
DEFAULT_IMAGE = "vllm/vllm-openai:v0.32.0"
DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"
DEFAULT_GPU_MEMORY_UTILIZATION = 0.90
DEFAULT_GPUS_PER_NODE = 8
VLLM_PORT = 8000
TERMINATION_LOG = "/dev/termination-log"  # the kubelet's default terminationMessagePath
GIB = 1024**3

# The user the pods of an LLMService run as unless spec.pod.runAsUser says otherwise: not root
# (vllm-openai names no USER), so that they pass the `restricted` Pod Security Standard.
DEFAULT_RUN_AS_USER = 1000
