"""The model download init container (pure): fetches the hub model into the cache
volume before vLLM starts, within its own budget.
"""

from __future__ import annotations

import math
from typing import Any

from ..api.models import LLMService, LLMServiceSpec
from ..planning import Plan, checkpoint_bytes
from ..settings import Settings
from .pod import (
    HF_CACHE_PATH,
    VOLUME_CACHE,
    build_env,
    container_security_context,
    image_for,
)

# Download budget: the init container gives up (exit 1) after
#   DOWNLOAD_BASE_SECONDS + ceil(checkpoint bytes / DOWNLOAD_BYTES_PER_SECOND),
# 10 min plus the checkpoint at 50 MB/s (a slow or throttled link), so a hung download
# shows as a failing init container instead of a pod Pending in Init forever. The kubelet
# restarts it with back-off and the hub client resumes the files already on disk.
# Llama 3.1 70B (141 GB): 600 + 2823 s = 57 min.
DOWNLOAD_BASE_SECONDS = 600
DOWNLOAD_BYTES_PER_SECOND = 50 * 10**6

# --- the model download (init container) ---
DOWNLOAD_CONTAINER = "download-model"
# Fetches what ``vllm serve`` would fetch, with the Hugging Face client the vLLM image
# ships (huggingface_hub; the pattern of KServe's storage initializer), into the cache
# volume, so that the startup probe counts loading only. The weight files are chosen as
# vLLM 0.32 chooses them (model_executor/model_loader: Mistral's consolidated*.safetensors
# if present, else the files of model.safetensors.index.json, else the first of
# *.safetensors, *.bin, *.pt at the top of the repository; never original/), plus the
# small files the tokenizer and config need. A file vLLM wants that this missed is still
# fetched by vLLM itself, only then inside the startup budget. Arguments: repository,
# revision ("" for the default branch), budget in seconds. No "$(" anywhere: Kubernetes
# would expand it in command and args.
DOWNLOAD_SCRIPT = """import fnmatch, json, os, sys, threading
from huggingface_hub import HfApi, constants, hf_hub_download, snapshot_download
repo, revision, budget = sys.argv[1], sys.argv[2] or None, int(sys.argv[3])
def give_up():
    print(f"Gave up downloading {repo} after {budget} s; the next attempt resumes", flush=True)
    os._exit(1)
timer = threading.Timer(budget, give_up)
timer.daemon = True
timer.start()
if constants.HF_HUB_OFFLINE:
    print("HF_HUB_OFFLINE is set: vLLM uses the cache as it is", flush=True)
    sys.exit(0)
top = [f for f in HfApi().list_repo_files(repo, revision=revision) if "/" not in f]
weights = fnmatch.filter(top, "consolidated*.safetensors")
if not weights and "model.safetensors.index.json" in top:
    index = hf_hub_download(repo, "model.safetensors.index.json", revision=revision)
    with open(index) as f:
        weights = sorted(set(json.load(f)["weight_map"].values()))
if not weights:
    weights = next(([p] for p in ("*.safetensors", "*.bin", "*.pt") if fnmatch.filter(top, p)), [])
small = ["*.json", "*.model", "*.tiktoken", "*.txt", "*.jinja", "*.py"]
print(f"Downloading {repo} ({revision or 'default branch'}): {weights}", flush=True)
path = snapshot_download(repo, revision=revision, allow_patterns=weights + small,
                         ignore_patterns=["original/**/*"])
print(f"Downloaded {repo} to {path}", flush=True)
"""


def download_budget_seconds(spec: LLMServiceSpec, plan: Plan) -> int:
    """Seconds the download init container may take (see ``DOWNLOAD_BASE_SECONDS``);
    0 for a model on a volume (no download)."""
    if spec.model.volume is not None:
        return 0
    return DOWNLOAD_BASE_SECONDS + math.ceil(checkpoint_bytes(plan) / DOWNLOAD_BYTES_PER_SECOND)



def build_download_container(svc: LLMService, plan: Plan, settings: Settings,
                             ) -> dict[str, Any] | None:
    """The init container that downloads the model into the cache before vLLM starts
    (:data:`DOWNLOAD_SCRIPT`), or None for a model on a volume. Same image, environment
    (token, proxies from ``spec.pod.env``) and cache mount as the vLLM container."""
    spec = svc.spec
    if spec.model.volume is not None:
        return None
    container: dict[str, Any] = {
        "name": DOWNLOAD_CONTAINER,
        "image": image_for(svc, settings),
        "imagePullPolicy": "IfNotPresent",
        "command": ["python3", "-c", DOWNLOAD_SCRIPT],
        "args": [spec.model.name, spec.model.revision or "",
                 str(download_budget_seconds(spec, plan))],
        "env": build_env(spec),
        # The cache's disk is requested by the vLLM container; a download needs a core
        # and a little memory (the files stream to disk).
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
        "volumeMounts": [{"name": VOLUME_CACHE, "mountPath": HF_CACHE_PATH}],
        "securityContext": container_security_context(spec),
    }
    return container
