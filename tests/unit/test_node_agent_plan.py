"""The local node agent's substitutions (pure part), on the operator's real rendered
objects: what process each rendered container becomes on this machine (argv, env, cwd,
volume directories), and that docs/production/node-agent.md shows every substitution.

The agent itself (threads, processes, the EMULATED API server) is tested in
tests/integration/test_node_agent.py and, with the real vLLM, by `llm-operator demo
--emulated`.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from llm_operator.api.models import parse_llmservice
from llm_operator.planning import make_plan
from llm_operator.rendering import render_all
from llm_operator.settings import Settings
from llm_operator.tuning.fingerprint import tuning_fingerprint
from llm_operator.tuning.job import build_tuning_job
from llm_operator_sandbox.local_plan import (
    VLLM_CLI_SHIM,
    CannotRun,
    expand,
    plan_container,
    port_annotation,
    rewrite_paths,
    vllm_cli_script,
)
from llm_operator_sandbox.node_agent import SUBSTITUTIONS, substitutions_table

ROOT = Path(__file__).resolve().parents[2]
VLLM_PY = Path("/venvs/vllm/bin/python")
OP_PY = Path("/venvs/op/bin/python")
MODEL = Path("/models/tiny")


def service(volume: bool = True) -> Any:
    model: dict[str, Any] = {
        "name": "tiny",
        "architecture": {"parameters": 1.0e6, "numLayers": 2, "hiddenSize": 128,
                         "numAttentionHeads": 4, "numKeyValueHeads": 2, "maxContext": 4096}}
    if volume:
        model["volume"] = {"claimName": "models"}
    else:
        model["name"] = "org/tiny"
    return parse_llmservice({
        "apiVersion": "llmops.dev/v1alpha1", "kind": "LLMService",
        "metadata": {"name": "tiny", "namespace": "ml", "uid": "u-1"},
        "spec": {"model": model, "gpus": {"count": 1, "product": "L4"},
                 "workload": {"inputTokens": 32, "outputTokens": 16, "concurrency": 2},
                 "tuning": {"maxTrials": 1, "maxDurationMinutes": 1,
                            "placement": "BeforeServing"}}})


def deployment(live_cap: bool = False, volume: bool = True) -> dict[str, Any]:
    svc = service(volume)
    (dep, *_) = render_all(svc, make_plan(svc.spec), Settings(), live_cap=live_cap)
    assert dep["kind"] == "Deployment"
    return dep


def job() -> dict[str, Any]:
    svc = service()
    plan = make_plan(svc.spec)
    return build_tuning_job(svc, plan, Settings(), tuning_fingerprint(svc, plan))


def plan_for(obj: dict[str, Any], name: str, tmp: Path, models: Any = None,
             ports: Any = None, **kw: Any) -> Any:
    pod = {"metadata": {"name": "p-1", "namespace": "ml"}, "spec": obj["spec"]["template"]["spec"]}
    spec = pod["spec"]
    (container,) = [c for c in [*spec.get("initContainers", []), *spec["containers"]]
                    if c["name"] == name]
    return plan_container(pod, container, pod_dir=tmp / "pod", vllm_python=VLLM_PY,
                          operator_python=OP_PY, operator_pythonpath="/src/operator",
                          models={"tiny": MODEL} if models is None else models,
                          ports=ports or {8000: 41234}, kv_cache_bytes=1 << 20,
                          path_env="/usr/bin", **kw)


def test_server_container_runs_vllm_serve_with_its_own_args_on_the_local_model(
        tmp_path: Path) -> None:
    dep = deployment()
    rendered = dep["spec"]["template"]["spec"]["containers"][0]
    plan = plan_for(dep, "vllm", tmp_path)
    # `vllm serve`: vLLM's own CLI entry point under the local vLLM's Python.
    assert plan.argv[:2] == [str(VLLM_PY), "-c"] and plan.argv[2] == VLLM_CLI_SHIM
    assert plan.argv[3] == "serve"
    args = plan.argv[4:]
    # The model volume (a PVC at /mnt/models) is the local model folder.
    assert rendered["args"][0] == "/mnt/models" and args[0] == str(MODEL)
    # The port: the declared containerPort becomes the local one; host is loopback.
    assert args[args.index("--port") + 1] == "41234"
    assert args[args.index("--host") + 1] == "127.0.0.1"
    # The CPU KV cache replaces GPU memory; nothing else changes, in the same order.
    assert args[-2:] == ["--kv-cache-memory-bytes", str(1 << 20)]
    untouched = [a for a in rendered["args"][1:] if a not in ("8000", "0.0.0.0")]
    assert [a for a in args[1:-2] if a not in ("41234", "127.0.0.1")] == untouched
    # Rendered env verbatim, the image's env (HOME, HF_HOME on the cache volume) local.
    assert plan.env["VLLM_NO_USAGE_STATS"] == "1" and plan.env["HF_HUB_OFFLINE"] == "1"
    assert plan.env["HF_HOME"] == str(tmp_path / "pod" / "volumes" / "model-cache")
    # The rendered HOME (/tmp: the pods do not run as root) is the container's own /tmp.
    assert plan.env["HOME"] == plan.env["TMPDIR"]
    assert plan.env["PATH"].split(":")[0] == str(VLLM_PY.parent)
    assert plan.volume_dirs["/dev/shm"] == tmp_path / "pod" / "volumes" / "dshm"
    assert plan.volume_dirs["/mnt/models"] == MODEL
    assert plan.cwd.is_relative_to(tmp_path / "pod")
    assert any("--port 8000 -> 41234" in n for n in plan.notes)


def test_hub_model_argument_and_download_are_substituted(tmp_path: Path) -> None:
    dep = deployment(volume=False)
    assert dep["spec"]["template"]["spec"]["initContainers"][0]["name"] == "download-model"
    assert plan_for(dep, "download-model", tmp_path, models={"org/tiny": MODEL}).skip
    plan = plan_for(dep, "vllm", tmp_path, models={"org/tiny": MODEL})
    assert plan.argv[4] == str(MODEL)


def test_tuning_job_tuner_and_init_container(tmp_path: Path) -> None:
    j = job()
    init = plan_for(j, "copy-tuner", tmp_path)
    code = tmp_path / "pod" / "volumes" / "tuner-code"
    # The operator image's python3 -> this Python, the emptyDir path inside the script.
    assert init.argv[0] == str(OP_PY) and init.argv[1] == "-c"
    assert f"'{code}'" in init.argv[2] and "/opt/llmop" not in init.argv[2]
    assert init.env["PYTHONPATH"] == "/src/operator"

    tuner = plan_for(j, "tuner", tmp_path)
    assert tuner.argv[:3] == [str(VLLM_PY), "-m", "llm_operator.inpod.tuner"]
    args = tuner.argv[3:]
    assert args[args.index("--model") + 1] == str(MODEL)
    # The container's /tmp: a private folder with a short path (vLLM's sockets live there).
    out = Path(args[args.index("--output") + 1])
    assert out.parent.parent == tuner.tmp_dir and out.parent.name == "llmop-tuning"
    assert tuner.env["TMPDIR"] == str(tuner.tmp_dir) and len(str(tuner.tmp_dir)) <= 60
    assert tuner.tmp_dir != plan_for(j, "copy-tuner", tmp_path).tmp_dir
    (server_args,) = [a for a in args if a.startswith("--server-args=")]
    assert shlex.split(server_args.split("=", 1)[1])[-2:] == [
        "--kv-cache-memory-bytes", str(1 << 20)]
    assert tuner.env["PYTHONPATH"] == str(code)
    assert tuner.env["LLMOP_TERMINATION_LOG"] == str(tuner.termination_path)
    assert tuner.env["LLMOP_VLLM_LOCK"] == "/tmp/llmop-vllm.lock"  # "" (alone) -> the lock


def test_live_cap_pod_reads_the_config_map_volume_locally(tmp_path: Path) -> None:
    dep = deployment(live_cap=True)
    plan = plan_for(dep, "vllm", tmp_path, vllm_cli_dir=tmp_path / "bin")
    # The rendered shell command runs as it is (it empties the metrics emptyDir, then
    # `exec vllm serve "$@"`); `vllm` on its PATH is the agent's stand-in; the model
    # argument, port and KV cache are substituted as for a bare `vllm serve`.
    rendered = dep["spec"]["template"]["spec"]["containers"][0]
    assert plan.argv[:4] == rendered["command"][:4] and plan.argv[0] == "/bin/sh"
    assert plan.argv[4] == str(MODEL) and plan.argv[-2:] == ["--kv-cache-memory-bytes",
                                                            str(1 << 20)]
    assert plan.env["PATH"].split(":")[:2] == [str(tmp_path / "bin"), str(VLLM_PY.parent)]
    assert vllm_cli_script(VLLM_PY).startswith(f"#!{VLLM_PY}\n")
    cm_dir = tmp_path / "pod" / "volumes" / "llmop-admission"
    assert plan.env["LLMOP_ADMISSION_CAP_FILE"] == f"{cm_dir}/maxNumActiveSeqs"
    assert plan.env["PROMETHEUS_MULTIPROC_DIR"] == str(tmp_path / "pod" / "volumes"
                                                      / "llmop-metrics")
    copy = plan_for(dep, "copy-engine", tmp_path)
    assert str(tmp_path / "pod" / "volumes" / "llmop-engine") in copy.argv[2]


def test_what_cannot_run_says_why(tmp_path: Path) -> None:
    dep = deployment()
    with pytest.raises(CannotRun, match="no local model for the served model name 'tiny'"):
        plan_for(dep, "vllm", tmp_path, models={"other": MODEL})
    dep["spec"]["template"]["spec"]["containers"][0]["command"] = ["no-such-binary"]
    with pytest.raises(CannotRun) as err:
        plan_for(dep, "vllm", tmp_path)
    assert err.value.reason == "StartError"
    assert 'exec: "no-such-binary": executable file not found in $PATH' in err.value.message


def test_kubernetes_variable_expansion_and_path_rewrites() -> None:
    assert expand("$(A)-$(B)-$$(A)", {"A": "x"}) == "x-$(B)-$(A)"
    mapping = [("/opt/llmop", "/L/code"), ("/tmp", "/L/tmp"), ("/tmp/llmop-prometheus", "/L/m")]
    assert rewrite_paths("os.path.join('/opt/llmop', 'x')", mapping) == (
        "os.path.join('/L/code', 'x')")
    assert rewrite_paths("/tmp/llmop-prometheus/a /tmp/b /tmpx /opt/llmopx", mapping) == (
        "/L/m/a /L/tmp/b /tmpx /opt/llmopx")


def test_port_annotation_names_each_port_by_name_and_number() -> None:
    dep = deployment()
    ann = port_annotation(dep["spec"]["template"]["spec"]["containers"], {8000: 40001})
    assert json.loads(json.dumps(ann)) == {"http": 40001, "8000": 40001}


def test_production_doc_lists_every_substitution() -> None:
    doc = (ROOT / "docs" / "production" / "node-agent.md").read_text()
    assert substitutions_table() in doc, (
        "docs/production/node-agent.md is out of date: paste substitutions_table() "
        "(python -c 'from llm_operator_sandbox.node_agent import substitutions_table; "
        "print(substitutions_table())')")
    readme = (ROOT / "README.md").read_text()
    assert "docs/production/node-agent.md#what-it-substitutes-and-what-a-cluster-does-instead" \
        in readme, "README.md no longer links to the substitution table"
    assert len(SUBSTITUTIONS) >= 10


def _lws_pod(role: str) -> dict[str, Any]:
    """A pod of the operator's LeaderWorkerSet for a replica over two one-GPU nodes, as
    LWS's webhook leaves it (subdomain, the three injected variables first)."""
    from llm_operator.rendering.leaderworkerset import build_leader_worker_set

    svc = parse_llmservice({
        "apiVersion": "llmops.dev/v1alpha1", "kind": "LLMService",
        "metadata": {"name": "duo", "namespace": "ml", "uid": "u-2"},
        "spec": {"model": {"name": "tiny", "volume": {"claimName": "models"},
                           "architecture": {"parameters": 1.0e6, "numLayers": 2,
                                            "hiddenSize": 128, "numAttentionHeads": 4,
                                            "numKeyValueHeads": 2, "maxContext": 4096}},
                 "gpus": {"product": "L4", "perNode": 1},
                 "engine": {"tensorParallelSize": 1, "pipelineParallelSize": 2},
                 "workload": {"inputTokens": 32, "outputTokens": 16, "concurrency": 2},
                 "tuning": {"mode": "Disabled"}}})
    lws = build_leader_worker_set(svc, make_plan(svc.spec), Settings())
    tpl = lws["spec"]["leaderWorkerTemplate"][f"{role}Template"]["spec"]
    injected = [{"name": "LWS_LEADER_ADDRESS", "value": "duo-lws-0.duo-lws.ml"},
                {"name": "LWS_GROUP_SIZE", "value": "2"},
                {"name": "LWS_WORKER_INDEX", "value": "0" if role == "leader" else "1"}]
    for c in tpl["containers"]:
        c["env"] = [*injected, *(c.get("env") or [])]
    return {"metadata": {"name": "duo-lws-0" if role == "leader" else "duo-lws-0-1",
                         "namespace": "ml"}, "spec": {**tpl, "subdomain": "duo-lws"}}


@pytest.mark.parametrize("role", ["leader", "worker"])
def test_a_leaderworkerset_pod_runs_vllm_with_the_leader_on_loopback(
        role: str, tmp_path: Path) -> None:
    """The group's script runs as written; the model, the leader's port and the KV cache
    are substituted as for a Deployment pod, and the leader's DNS name becomes 127.0.0.1
    (no cluster DNS here), said in the notes."""
    pod = _lws_pod(role)
    (container,) = pod["spec"]["containers"]
    ports = {8000: 18000} if role == "leader" else {}
    plan = plan_container(pod, container, pod_dir=tmp_path / "pod", vllm_python=VLLM_PY,
                          operator_python=OP_PY, operator_pythonpath="/src/operator",
                          models={"tiny": MODEL}, ports=ports)
    assert plan.argv[:3] == ["/bin/sh", "-c", container["command"][2]]
    assert plan.env["LWS_LEADER_ADDRESS"] == "127.0.0.1"
    assert any("LWS_LEADER_ADDRESS duo-lws-0.duo-lws.ml -> 127.0.0.1" in n for n in plan.notes)
    args = plan.argv[4:]
    assert args[0] == str(MODEL)
    assert args[args.index("--kv-cache-memory-bytes") + 1].isdigit()
    assert args[args.index("--nnodes") + 1] == "2"
    if role == "leader":
        assert args[args.index("--port") + 1] == "18000"


def test_the_leader_address_is_left_alone_outside_a_group(tmp_path: Path) -> None:
    """A pod without a subdomain (no LeaderWorkerSet) keeps a variable of that name."""
    dep = deployment()
    dep["spec"]["template"]["spec"]["containers"][0].setdefault("env", []).append(
        {"name": "LWS_LEADER_ADDRESS", "value": "somewhere.example"})
    plan = plan_for(dep, "vllm", tmp_path)
    assert plan.env["LWS_LEADER_ADDRESS"] == "somewhere.example"
