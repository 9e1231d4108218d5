"""The tuning Job manifest and the tuning fingerprint (pure; the Job is executed for real
in tests/vllm/test_tuner.py)."""

from __future__ import annotations

import copy
import shlex
from typing import Any

import kubernetes_validate
import pytest

from llm_operator.api.constants import ANNOTATION_FINGERPRINT, LABEL_COMPONENT, LABEL_SERVICE
from llm_operator.api.errors import SpecError
from llm_operator.api.models import parse_llmservice
from llm_operator.inpod.tuner.main import build_parser
from llm_operator.knowledge.gpuclass import TOLERATE_NVIDIA_GPU_TAINT
from llm_operator.planning import make_plan
from llm_operator.settings import Settings
from llm_operator.tuning.fingerprint import tuning_fingerprint
from llm_operator.tuning.job import build_tuning_job, fixed_server_args, tuning_job_name

BODY: dict[str, Any] = {
    "apiVersion": "llmops.dev/v1alpha1",
    "kind": "LLMService",
    "metadata": {"name": "llama", "namespace": "ml", "uid": "u-123"},
    "spec": {
        "model": {"name": "meta-llama/Llama-3.1-8B-Instruct", "revision": "abc",
                  "tokenSecretRef": {"name": "hf"}},
        "gpus": {"count": 2, "product": "L4", "resourceName": "nvidia.com/gpu"},
        "scheduling": {"nodeSelector": {"pool": "gpu"},
                       "tolerations": [{"key": "gpu", "operator": "Exists",
                                        "effect": "NoSchedule"}]},
        "engine": {"maxNumBatchedTokens": 4096, "maxModelLen": 8192,
                   "extraArgs": ["--enforce-eager"]},
        "workload": {"inputTokens": 1000, "outputTokens": 200, "concurrency": 24,
                     "slo": {"ttftP95Ms": 1500, "itlP95Ms": 60}},
        "tuning": {"maxTrials": 6, "maxDurationMinutes": 30},
    },
}


def _job(body: dict[str, Any] = BODY, settings: Settings | None = None) -> dict[str, Any]:
    svc = parse_llmservice(body)
    plan = make_plan(svc.spec)
    return build_tuning_job(svc, plan, settings or Settings(), tuning_fingerprint(svc, plan))


def _with(**spec_changes: Any) -> dict[str, Any]:
    body = copy.deepcopy(BODY)
    for path, value in spec_changes.items():
        node = body["spec"]
        keys = path.split("__")
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = value
    return body


def test_job_is_valid_kubernetes_and_owned_labelled_annotated() -> None:
    job = _job()
    kubernetes_validate.validate(job, "1.30.0", strict=True)
    meta = job["metadata"]
    assert meta["labels"][LABEL_SERVICE] == "llama"
    assert meta["labels"][LABEL_COMPONENT] == "tuning"
    fp = meta["annotations"][ANNOTATION_FINGERPRINT]
    assert meta["name"] == f"llama-tune-{fp[:8]}"
    assert meta["ownerReferences"][0]["uid"] == "u-123"
    assert meta["ownerReferences"][0]["controller"] is True
    spec = job["spec"]
    assert spec["backoffLimit"] == 0
    assert spec["ttlSecondsAfterFinished"] == Settings().tuning_job_ttl_seconds
    # The deadline leaves the tuner its whole budget plus a model load.
    assert spec["activeDeadlineSeconds"] > 30 * 60


def test_job_runs_on_one_replicas_gpus_and_placement_with_the_vllm_image() -> None:
    job = _job()
    pod = job["spec"]["template"]["spec"]
    (main,) = pod["containers"]
    svc = parse_llmservice(BODY)
    plan = make_plan(svc.spec)
    assert main["resources"]["limits"]["nvidia.com/gpu"] == str(plan.gpus_per_replica)
    assert pod["nodeSelector"]["pool"] == "gpu"
    # The user's tolerations first, then the GPU class's (the default class tolerates the
    # nvidia.com/gpu taint), as on the server pods.
    assert pod["tolerations"] == [*BODY["spec"]["scheduling"]["tolerations"],
                                  TOLERATE_NVIDIA_GPU_TAINT]
    assert main["image"] == Settings().default_image
    assert pod["initContainers"][0]["image"] == Settings().operator_image
    assert main["command"] == ["python3", "-m", "llm_operator.inpod.tuner"]
    assert main["terminationMessagePath"] == "/dev/termination-log"
    assert main["terminationMessagePolicy"] == "FallbackToLogsOnError"
    env = {e["name"]: e for e in main["env"]}
    assert env["PYTHONPATH"]["value"] == "/opt/llmop"
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "hf"
    mounts = {m["mountPath"] for m in main["volumeMounts"]}
    assert "/opt/llmop" in mounts and "/dev/shm" in mounts


def test_tuner_args_parse_and_carry_workload_slo_budget_and_pins() -> None:
    job = _job()
    (main,) = job["spec"]["template"]["spec"]["containers"]
    ns = build_parser().parse_args(main["args"])  # the tuner accepts what the Job passes
    assert (ns.input_tokens, ns.output_tokens, ns.concurrency) == (1000, 200, 24)
    assert (ns.slo_ttft_ms, ns.slo_itl_ms) == (1500, 60)
    assert (ns.max_trials, ns.max_seconds) == (6, 30 * 60)
    assert ns.fingerprint == job["metadata"]["annotations"][ANNOTATION_FINGERPRINT]
    server = shlex.split(ns.server_args)
    # The user's pin is passed (never varied); the cap left to auto is not.
    assert server[server.index("--max-num-batched-tokens") + 1] == "4096"
    assert "--max-num-seqs" not in server
    assert "--enforce-eager" in server and "--revision" in server
    assert not {"--model", "--host", "--port", "--served-model-name"} & set(server)
    assert ns.model == "meta-llama/Llama-3.1-8B-Instruct"


def test_pinned_max_num_seqs_is_passed_and_no_hint_given() -> None:
    body = _with(engine__maxNumSeqs=32)
    svc = parse_llmservice(body)
    args = fixed_server_args(svc, make_plan(svc.spec))
    assert args[args.index("--max-num-seqs") + 1] == "32"
    (main,) = _job(body)["spec"]["template"]["spec"]["containers"]
    assert "--hint-max-num-seqs" not in main["args"]


def test_long_names_are_shortened_to_fit_pod_labels() -> None:
    body = copy.deepcopy(BODY)
    body["metadata"]["name"] = "x" * 63
    svc = parse_llmservice(body)
    name = tuning_job_name(svc, "0123456789abcdef")
    assert len(name) <= 52 and name.endswith("-tune-01234567")


def test_multi_node_replica_cannot_be_tuned_in_one_pod() -> None:
    body = _with(model={"name": "meta-llama/Llama-3.1-405B-Instruct"},
                 gpus={"count": 16, "product": "H100-SXM", "perNode": 8})
    svc = parse_llmservice(body)
    plan = make_plan(svc.spec)
    if plan.nodes_per_replica <= 1:
        pytest.skip("the planner fits this model on one node")
    with pytest.raises(SpecError, match="spec.tuning.mode"):
        build_tuning_job(svc, plan, Settings(), "f" * 16)


# --- fingerprint -----------------------------------------------------------------------


def _fp(body: dict[str, Any]) -> str:
    svc = parse_llmservice(body)
    return tuning_fingerprint(svc, make_plan(svc.spec))


def test_fingerprint_is_stable_and_ignores_what_does_not_change_the_result() -> None:
    base = _fp(BODY)
    assert base == _fp(copy.deepcopy(BODY)) and len(base) == 16
    assert _fp(_with(replicas=5)) == base
    assert _fp(_with(tuning={"maxTrials": 3})) == base
    renamed = copy.deepcopy(BODY)
    renamed["metadata"]["name"] = "other"
    assert _fp(renamed) == base  # a re-created service under another name reuses it


@pytest.mark.parametrize(
    "change",
    [
        {"model__revision": "def"},
        {"image": "vllm/vllm-openai:v0.12.0"},
        {"gpus__product": "A100-80GB"},
        {"engine__maxModelLen": 4096},
        {"engine__dtype": "float16"},
        {"workload__concurrency": 48},
        {"workload__slo": {"ttftP95Ms": 500, "itlP95Ms": 60}},
        {"engine__maxNumSeqs": 16},
    ],
)
def test_fingerprint_changes_with_what_the_result_depends_on(change: dict[str, Any]) -> None:
    assert _fp(_with(**change)) != _fp(BODY)


# --- `llm-operator tune` hands its options to the tuner unchanged ------------------------


def test_cli_tune_options_round_trip_to_the_tuner() -> None:
    from llm_operator.cli import build_parser as cli_parser
    from llm_operator.cli.tune import namespace_to_argv

    argv = ["--model", "/m", "--concurrency", "48", "--server-args=--kv-cache-memory-bytes 1",
            "--grid", "--slo-itl-ms", "20", "--vllm-python", "/py"]
    ns = cli_parser().parse_args(["tune", *argv])
    passed = namespace_to_argv(build_parser(), ns)
    back = build_parser().parse_args(passed)
    assert back.model == "/m" and back.concurrency == 48 and back.grid
    assert back.server_args == "--kv-cache-memory-bytes 1" and back.slo_itl_ms == 20
    assert back.vllm_python == "/py"


def test_cli_tune_without_a_vllm_python_says_how_to_get_one(tmp_path: Any) -> None:
    from llm_operator.cli.tune import NoVLLMPython, find_vllm_python

    with pytest.raises(NoVLLMPython, match="--vllm-python"):
        find_vllm_python(str(tmp_path / "no-such-python"))


def test_search_starts_at_the_performance_models_knee() -> None:
    """The hint is the model's knee under the SLO (perfmodel.suggest_for), not merely the
    memory limit: the tuner starts where the prediction says the optimum is."""
    from llm_operator.api.models import parse_llmservice
    from llm_operator.planning import make_plan
    from llm_operator.planning.perfmodel import suggest_for
    from llm_operator.settings import Settings
    from llm_operator.tuning.job import build_tuning_job

    svc = parse_llmservice({
        "metadata": {"name": "l8", "namespace": "ml", "uid": "u-1"},
        "spec": {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
                 "gpus": {"product": "H100"},
                 "workload": {"inputTokens": 512, "outputTokens": 256, "concurrency": 16}},
    })
    plan = make_plan(svc.spec)
    job = build_tuning_job(svc, plan, Settings(), "f" * 64)
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    hint = int(args[args.index("--hint-max-num-seqs") + 1])
    assert hint == suggest_for(svc.spec, plan).max_num_seqs
    assert 1 <= hint < plan.max_num_seqs  # the knee lies well below the memory limit here


def test_a_model_planned_from_its_config_json_starts_at_the_models_knee_too() -> None:
    """A model the catalog does not know, planned from its own config.json (the facts the
    operator cached): the hint is the performance model's knee under the SLO with those
    facts, as for a catalog model; without them the Job fell back to the memory limit."""
    import json
    from pathlib import Path

    from llm_operator.knowledge.modelfacts import facts_from_hf_config
    from llm_operator.planning.perfmodel import suggest_for

    config = Path(__file__).resolve().parents[1] / "fixtures" / "model_configs" / (
        "Qwen--Qwen3.5-35B-A3B_config.json")
    svc = parse_llmservice({
        "metadata": {"name": "q35", "namespace": "ml", "uid": "u-1"},
        "spec": {"model": {"name": "Qwen/Qwen3.5-35B-A3B"}, "gpus": {"product": "H100"},
                 "workload": {"inputTokens": 512, "outputTokens": 256, "concurrency": 16}},
    })
    with pytest.raises(SpecError, match="spec.model.architecture"):
        make_plan(svc.spec)  # not in the catalog: the facts are needed
    facts = facts_from_hf_config(json.loads(config.read_text()), svc.spec.model.name)
    plan = make_plan(svc.spec, facts=facts)

    def hint(**kw: Any) -> int:
        args = build_tuning_job(svc, plan, Settings(), "f" * 64, **kw)[
            "spec"]["template"]["spec"]["containers"][0]["args"]
        return int(args[args.index("--hint-max-num-seqs") + 1])

    assert hint(facts=facts) == suggest_for(svc.spec, plan, facts=facts).max_num_seqs
    assert 1 <= hint(facts=facts) < plan.max_num_seqs
    assert hint() == plan.max_num_seqs  # no facts: the model cannot say, the limit stands


def test_the_code_the_job_runs_needs_only_what_a_vllm_image_has() -> None:
    """The init container copies ``llm_operator/inpod/tuner/`` into the vLLM image: every module
    there may import the standard library, vLLM and vLLM's own dependencies, and its
    siblings; never kopf, the Kubernetes client or the rest of the operator (which the
    import-linter contract ``tuner imports nothing of the operator`` also holds)."""
    import ast
    import sys
    from pathlib import Path

    import llm_operator.inpod.tuner as pkg
    from llm_operator.tuning.job import COPY_SCRIPT

    # vLLM's start-up rules, standard library only (their own import-linter contract).
    COPIED_ALONG = {"knowledge.engine_rules", "knowledge.serve_args"}
    allowed = set(sys.stdlib_module_names) | {"vllm", "pydantic", "prometheus_client", "rich"}
    files = sorted(Path(pkg.__file__).parent.glob("*.py"))
    assert len(files) >= 9, [f.name for f in files]
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level == 1:
                    continue  # a sibling: copied too
                if node.level == 3 and node.module in COPIED_ALONG:  # llm_operator.X.Y
                    path_in_package = node.module.replace(".", "/")
                    assert f"'{path_in_package}.py'" in COPY_SCRIPT  # copied too
                    continue
                assert node.level == 0, f"{path.name} imports from outside llm_operator.inpod.tuner"
                top = (node.module or "").split(".")[0]
                assert top in allowed, f"{path.name} imports {node.module}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    top = alias.name.split(".")[0]
                    assert top in allowed, f"{path.name} imports {alias.name}"
