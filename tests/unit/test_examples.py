"""Every manifest in ``examples/`` is safe to apply on a GPU cluster (issue 35 item 5).

Its header's "Needs on the cluster" block lists what the manifest references and the
operator does not create, and it is checked here against the spec and the real plan:

- GPU: the GPUs per replica the plan asks for, the node labels the spec selects, and the
  GPUs a tuning Job on spare GPUs takes while it runs;
- Secret: the token Secret and its key, with the command that creates it;
- Claim: each claim, with the access mode the replicas need (ReadWriteMany where pods on
  different nodes share it) and, for a cache claim, the size the plan needs;
- Disk: the node ephemeral storage of an emptyDir cache the plan sizes;
- PriorityClass: with the command that creates it;
- Prometheus: where an adaptation mode needs it;
- Inference Gateway: where spec.routing.inferencePool renders a pool, with the
  extension's CRDs and the endpoint picker the pool names.

Nothing else may be named, and nothing referenced may be missing. The local demo's
manifest (a generated model not on the hub) lives in ``demo/``, not here: every example
serves a model from the hub that the catalog knows, or files on a claim.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from llm_operator.api.constants import GIB
from llm_operator.api.models import AdaptationMode, TuningMode, TuningPlacement, parse_llmservice
from llm_operator.knowledge import catalog
from llm_operator.planning import cache_size_limit, make_plan, model_cache_bytes

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
KEYS = {"GPU", "Secret", "Claim", "Disk", "PriorityClass", "Prometheus", "Inference Gateway",
        "Nothing else"}
HEADER = "# Needs on the cluster"


def needs(text: str) -> dict[str, str]:
    """The header's block: ``{key: text}``, continuation lines joined (pure)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(HEADER)), None)
    assert start is not None, f"no {HEADER!r} block in the header"
    out: dict[str, str] = {}
    key = None
    for line in lines[start + 1:]:
        m = re.match(r"#   (\w[\w ]*): (.*)", line)
        if m:
            key = m.group(1)
            assert key not in out, f"{key} listed twice"
            out[key] = m.group(2)
        elif line.startswith("#     ") and key is not None:
            out[key] += " " + line[1:].strip()
        else:
            break
    return out


def test_the_block_parser_reads_keys_and_continuations() -> None:
    got = needs("# a\n# Needs on the cluster (x):\n#   GPU: 2 L4\n#     per replica\n"
                "#   Secret: s\napiVersion: v1\n")
    assert got == {"GPU": "2 L4 per replica", "Secret": "s"}


def test_the_local_demo_manifest_is_not_an_example() -> None:
    assert EXAMPLES, "examples/ holds no manifest"
    assert (ROOT / "demo" / "tiny-llama-local.yaml").exists()
    assert not (ROOT / "examples" / "tiny-llama-local.yaml").exists()


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_header_lists_what_it_needs(path: Path) -> None:
    text = path.read_text()
    doc: dict[str, Any] = yaml.safe_load(text)
    svc = parse_llmservice(doc)
    spec, plan = svc.spec, make_plan(svc.spec)
    block = needs(text)
    header = text.split("\napiVersion:")[0]
    assert set(block) <= KEYS, f"unknown keys {set(block) - KEYS}"

    # A model a GPU cluster can get: files on a claim, or a hub repository the catalog knows.
    assert spec.model.volume is not None or catalog.lookup_model(spec.model.name) is not None

    gpu = block["GPU"]
    assert f"{plan.gpus_per_replica} " in gpu and "per replica" in gpu, gpu
    assert spec.gpus.product is not None and spec.gpus.product.split("-")[0] in gpu, gpu
    for k, v in (spec.scheduling.node_selector or {}).items():
        assert f"{k}={v}" in gpu, (k, v, gpu)
    if spec.tuning.mode is TuningMode.DISABLED:
        assert "no tuning Job" in gpu, gpu
    elif spec.tuning.placement is TuningPlacement.SPARE:
        assert f"{plan.gpus_per_replica} more while a tuning Job runs" in gpu, gpu

    secret = spec.model.token_secret_ref
    assert ("Secret" in block) == (secret is not None), block
    if secret is not None:
        assert f"{secret.name}, key {secret.key}" in block["Secret"], block["Secret"]
        assert f"kubectl create secret generic {secret.name}" in header

    claims = [c for c in ((spec.model.volume.claim_name if spec.model.volume else None),
                          spec.cache.claim_name) if c]
    assert ("Claim" in block) == bool(claims), block
    shared = spec.replicas > 1 or plan.nodes_per_replica > 1
    for claim in claims:
        assert claim in block["Claim"], (claim, block["Claim"])
        if shared:
            assert "ReadWriteMany" in block["Claim"], block["Claim"]
        else:
            assert "ReadWriteOnce is enough" in block["Claim"], block["Claim"]
    if spec.cache.claim_name:
        need = model_cache_bytes(spec, plan) // GIB
        assert f"at least {need}Gi" in block["Claim"], (need, block["Claim"])

    limit = cache_size_limit(spec, plan)
    assert ("Disk" in block) == (limit is not None), block
    if limit is not None:
        assert block["Disk"].startswith(f"{limit} of node ephemeral storage"), block["Disk"]

    pc = spec.scheduling.priority_class_name
    assert ("PriorityClass" in block) == (pc is not None), block
    if pc is not None:
        assert f"kubectl create priorityclass {pc} " in header

    assert ("Prometheus" in block) == (spec.adaptation.mode is not AdaptationMode.DISABLED)
    if "Prometheus" in block:
        assert "prometheusUrl" in block["Prometheus"], block["Prometheus"]

    pool = svc.spec.routing.inference_pool
    assert ("Inference Gateway" in block) == bool(pool.enabled), block
    if "Inference Gateway" in block:
        gateway = block["Inference Gateway"]
        assert "inference.networking.k8s.io/v1" in gateway and "HTTPRoute" in gateway, gateway
        picker = pool.endpoint_picker_ref
        assert picker is not None, "an example's pool names its endpoint picker"
        assert picker.name in gateway, (picker.name, gateway)
        assert picker.port is not None and f"port {picker.port.number}" in gateway, gateway
