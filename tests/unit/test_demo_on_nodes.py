"""The demo on real nodes (``bash tools/demo.sh``): its manifest describes the
wide-KV stand-in the loop generates, 1 GiB of vLLM's CPU KV cache holds the same 4,096
tokens as the local demo's, the loop fills in exactly what the manifest leaves open, and
its registered comparison runs both arms equally and interleaved."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from rich.console import Console

from llm_operator.planning.memory import kv_token_capacity
from llm_operator_sandbox.cap_effect import ADAPTED, NODES_CONFIG, STATIC, load_config
from llm_operator_sandbox.loop import FILLED_IN, WIDE_KV_MODEL, LocalLoop
from llm_operator_sandbox.tiny_model import model_args, model_folder

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "demo" / "tiny-llama-nodes.yaml"
GIB = 1024 ** 3
CPU_BLOCK = 128  # vLLM's CPU build allocates its KV cache in blocks of 128 tokens


def test_the_manifest_describes_the_model_the_loop_generates() -> None:
    arch = yaml.safe_load(MANIFEST.read_text())["spec"]["model"]["architecture"]
    assert (arch["numAttentionHeads"], arch["numKeyValueHeads"], arch["headDim"]) == (
        WIDE_KV_MODEL["heads"], WIDE_KV_MODEL["kv_heads"], WIDE_KV_MODEL["head_dim"])
    # the generator's other dimensions are its defaults: 2 layers, hidden 128, 1000 tokens
    assert (arch["numLayers"], arch["hiddenSize"], arch["vocabSize"]) == (2, 128, 1000)


def test_one_gib_of_cpu_kv_cache_holds_the_local_demos_4096_tokens() -> None:
    spec = yaml.safe_load(MANIFEST.read_text())["spec"]
    arch = spec["model"]["architecture"]
    per_token = 2 * arch["numLayers"] * arch["numKeyValueHeads"] * arch["headDim"] * 2  # bf16
    env = {e["name"]: e["value"] for e in spec["pod"]["env"]}
    budget = int(env["VLLM_CPU_KVCACHE_SPACE"]) * GIB
    # vLLM 0.32.0 logged "CPU KV cache size: 4,096 tokens" for this model and this env
    assert kv_token_capacity(budget, per_token, CPU_BLOCK) == 4096
    # the local demo's tiny Llama would fit 2 M tokens in the same GiB: no pressure
    assert kv_token_capacity(budget, 2 * 2 * 2 * 32 * 2, CPU_BLOCK) == 2 * 1024 ** 2


def test_the_loop_fills_in_the_image_and_the_hub_and_nothing_else(tmp_path: Path) -> None:
    loop = LocalLoop(ROOT, tmp_path, "kubectl", vllm_python=Path("python"), backend="nodes")
    assert loop.example_file == MANIFEST.name
    written = loop.example()
    assert FILLED_IN in yaml.safe_dump(written)  # before the registry and the hub are up
    loop.vllm_ref = "127.0.0.1:5000/vllm-cpu:x@sha256:abc"
    loop.hub = SimpleNamespace(endpoint="http://10.244.0.1:8080")
    filled = loop.example()
    assert FILLED_IN not in yaml.safe_dump(filled)
    assert filled["spec"]["image"] == loop.vllm_ref
    env = {e["name"]: e["value"] for e in filled["spec"]["pod"]["env"]}
    assert env == {"HF_ENDPOINT": "http://10.244.0.1:8080", "VLLM_CPU_KVCACHE_SPACE": "1"}
    # everything else is the file's, unchanged
    for doc in (written, filled):
        doc["spec"].pop("image")
        doc["spec"]["pod"].pop("env")
    assert filled == written
    assert loop.filled_in() == [f"spec.image: {loop.vllm_ref}",
                                "HF_ENDPOINT: http://10.244.0.1:8080"]


def test_the_nodes_comparison_runs_both_arms_equally_and_interleaved() -> None:
    cfg = load_config(NODES_CONFIG)
    assert cfg.label != load_config().label
    assert cfg.order.count(ADAPTED) == cfg.order.count(STATIC) >= 2
    half = len(cfg.order) // 2
    for arm in (ADAPTED, STATIC):
        assert arm in cfg.order[:half] and arm in cfg.order[half:]
    # heavier than the KV cache holds (15 requests of 128+128), light below it
    assert cfg.load.clients > 15 and cfg.heavy.clients > 15 > cfg.light.clients
    spec = yaml.safe_load(MANIFEST.read_text())["spec"]
    assert (cfg.ttft_ms, cfg.tpot_ms) == (spec["workload"]["slo"]["ttftP95Ms"],
                                          spec["workload"]["slo"]["itlP95Ms"])


def test_the_stand_in_keeps_the_default_models_folder() -> None:
    """head_dim is in the cache key only where it is given: the default tiny model keeps
    the folder the caches hold (its name is the digest of the generator's arguments), and
    the wide-KV stand-in gets one of its own."""
    default = model_folder(model_args())
    assert model_folder(model_args(head_dim=0)) == default
    assert model_folder(model_args(**WIDE_KV_MODEL)) != default
    assert "head_dim" not in model_args() and model_args(**WIDE_KV_MODEL)["head_dim"] == 256


def _pod(name: str, containers: list[tuple[str, str, str]]) -> dict[str, object]:
    return {"metadata": {"name": name}, "spec": {"nodeName": "node-1"},
            "status": {"containerStatuses": [
                {"name": c, "imageID": image, "containerID": cid} for c, image, cid in containers]}}


def _demo(pods: dict[str, list[dict[str, object]]]) -> tuple[object, Console]:
    from llm_operator_sandbox.loop_demo import LoopDemo

    loop = SimpleNamespace(
        backend="nodes", settings=SimpleNamespace(namespace="default"),
        example=lambda: {"metadata": {"name": "tiny-llama"}},
        get_in=lambda ns, kind: {"items": pods.get(ns, [])},
        nodes=SimpleNamespace(node=SimpleNamespace(name="node-1"),
                              registry=SimpleNamespace(host="127.0.0.1:5000")))
    console = Console(record=True, width=160)
    return LoopDemo(console, loop), console  # type: ignore[arg-type]


def test_the_demo_ends_with_each_containers_image_and_runtime() -> None:
    demo, console = _demo({
        "default": [_pod("tiny-llama-1", [
            ("vllm", "127.0.0.1:5000/vllm-cpu@sha256:7709cb74a3150941", "containerd://c24d41d88954e0aa")])],
        "llm-operator": [_pod("llm-operator-1", [
            ("operator", "127.0.0.1:5000/llm-operator@sha256:27ff2a2ee77e", "containerd://bf0adfeb587ee1")])]})
    demo.containers()  # type: ignore[attr-defined]
    text = console.export_text()
    assert "vllm-cpu@sha256:7709cb74a3" in text and "containerd://c24d41d88954" in text
    assert "llm-operator@sha256:27ff2a2e" in text
    assert "Every container above ran under containerd (runc)" in text
    assert "pulled from the registry 127.0.0.1:5000" in " ".join(text.split())


def test_a_container_from_elsewhere_is_not_called_built_here() -> None:
    demo, console = _demo({"default": [_pod("p", [
        ("vllm", "docker.io/vllm/vllm-openai@sha256:0000", "containerd://abc")])]})
    demo.containers()  # type: ignore[attr-defined]
    text = console.export_text()
    assert "Every container above" not in text
    assert "docker.io" in text


def test_the_demo_without_root_says_how_to_run_it_before_installing_anything() -> None:
    """The README's first command runs the pods in real containers: as a user who is not
    root it stops at once, naming the two ways on, and installs nothing."""
    import os
    import shutil
    import subprocess
    import tempfile

    if os.geteuid() != 0:
        pytest.skip("the test runs the script as another user: needs root")
    with tempfile.TemporaryDirectory(prefix="llmop-demo-sh-") as tmp:  # pytest's is 0700
        copy = Path(tmp)
        copy.chmod(0o755)
        (copy / "tools").mkdir(mode=0o755)
        shutil.copy(ROOT / "tools" / "demo.sh", copy / "tools" / "demo.sh")
        proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                               "bash", str(copy / "tools" / "demo.sh")],
                              capture_output=True, text=True, timeout=60, cwd="/")
        assert proc.returncode == 2, proc.stderr
        assert "need root" in proc.stderr
        assert "sudo bash tools/demo.sh" in proc.stderr
        assert "bash tools/demo.sh --processes" in proc.stderr
        assert sorted(p.name for p in copy.iterdir()) == ["tools"]  # no .venv, nothing built
