"""Three held-out inputs the planner accepted without a word (issue 57, item 6): each
now gets a warning in ``status.plan.warnings`` (and ``llm-operator plan``) naming the
field and the fix. None of them is refused: the plan is still servable."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from llm_operator import cli
from llm_operator.adaptation.policy import AdaptationState, CapLimits, bounds_for, decide
from llm_operator.api.models import LLMServiceSpec
from llm_operator.health.status import plan_summary
from llm_operator.planning import make_plan

MODEL = {"name": "meta-llama/Llama-3.1-8B-Instruct"}


def spec(**fields: Any) -> LLMServiceSpec:
    return LLMServiceSpec.model_validate({"model": MODEL, **fields})


def warnings_of(s: LLMServiceSpec, field: str) -> list[str]:
    plan = make_plan(s)
    assert plan.warnings == plan_summary(plan).get("warnings", [])  # what status.plan shows
    return [w for w in plan.warnings if w.startswith(field)]


def test_three_gpus_for_an_8b_model_say_why_and_the_fix() -> None:
    s = spec(gpus={"product": "H100", "count": 3})
    plan = make_plan(s)
    assert (plan.tensor_parallel_size, plan.pipeline_parallel_size,
            plan.nodes_per_replica) == (1, 3, 1)
    (w,) = warnings_of(s, "spec.gpus.count 3")
    assert "is not a tensor-parallel size this model allows" in w
    assert "32 attention heads and suit its 8 KV heads: 1, 2, 4, 8" in w
    assert "TP 1 x PP 3: 3 pipeline stages on one node" in w
    assert "Left auto, spec.gpus.count would be 1" in w  # the 8B model fits one H100
    assert "set spec.gpus.count to 2 or 4 (tensor parallel on one node)" in w
    assert "set spec.gpus.count to 1 with spec.replicas: 3" in w
    assert "pin spec.engine.pipelineParallelSize if the stages are wanted" in w


@pytest.mark.parametrize("fields", [
    {"gpus": {"product": "H100", "count": 2}},  # a valid TP size: TP 2
    {"gpus": {"product": "H100", "count": 4}},
    {"gpus": {"product": "H100"}},  # auto
    # The stages asked for: no warning.
    {"gpus": {"product": "H100", "count": 3}, "engine": {"pipelineParallelSize": 3}},
])
def test_counts_the_tp_rules_divide_or_pinned_stages_get_no_count_warning(
        fields: dict[str, Any]) -> None:
    assert warnings_of(spec(**fields), "spec.gpus.count") == []


def test_a_min_cap_above_the_planned_max_num_seqs_says_the_bound_wins() -> None:
    s = spec(gpus={"product": "L4"}, adaptation={"minMaxNumSeqs": 500})
    plan = make_plan(s)
    seqs = plan.max_num_seqs
    assert seqs < 500
    (w,) = warnings_of(s, "spec.adaptation.minMaxNumSeqs")
    assert f"500 is above the planned max-num-seqs {seqs}" in w
    assert f"Fix: set spec.adaptation.minMaxNumSeqs to at most {seqs}" in w
    # What it says is what the policy does: the lower bound wins over the plan's limit,
    # and a cap at the plan's value goes to 500 at once.
    limits = CapLimits(plan_max_num_seqs=seqs)
    assert bounds_for(s, limits).upper == 500
    d = decide(None, AdaptationState(current=seqs), s, 0.0, limits=limits)
    assert d.value == 500
    # At the planned value, with the cap pinned, or with adaptation off: no warning.
    for quiet in (spec(gpus={"product": "L4"}, adaptation={"minMaxNumSeqs": seqs}),
                  spec(gpus={"product": "L4"}, adaptation={"minMaxNumSeqs": 500,
                                                           "mode": "Disabled"})):
        assert warnings_of(quiet, "spec.adaptation.minMaxNumSeqs") == []


def test_pod_memory_below_the_shm_size_says_the_fix() -> None:
    s = spec(gpus={"product": "L4"}, resources={"memory": "8Gi"})  # shmSize 16Gi default
    (w,) = warnings_of(s, "spec.resources.memory")
    assert "spec.resources.memory 8Gi is below spec.resources.shmSize 16Gi" in w
    assert "count against the container's memory limit" in w
    assert "Fix: set spec.resources.memory to at least" in w
    assert "lower spec.resources.shmSize" in w
    for quiet in (spec(gpus={"product": "L4"}, resources={"memory": "64Gi"}),
                  spec(gpus={"product": "L4"}, resources={"memory": "8Gi", "shmSize": "2Gi"}),
                  spec(gpus={"product": "L4"})):
        assert warnings_of(quiet, "spec.resources.memory") == []


def test_the_cli_plan_carries_the_three_warnings(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    doc = {"apiVersion": "llmops.dev/v1alpha1", "kind": "LLMService",
           "metadata": {"name": "held-out"},
           "spec": {"model": MODEL, "gpus": {"product": "H100", "count": 3},
                    "adaptation": {"minMaxNumSeqs": 2000},  # planned 1024
                    "resources": {"memory": "12Gi"}}}  # 3 GPUs: 10 GiB the floor
    path = tmp_path / "held-out.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert cli.main(["plan", str(path), "-o", "yaml"]) == 0
    out = yaml.safe_load(capsys.readouterr().out)
    plan = out[0] if isinstance(out, list) else out
    plan = plan.get("plan", plan)
    fields = [w.split(" ", 1)[0] for w in plan["warnings"]]
    assert {"spec.gpus.count", "spec.adaptation.minMaxNumSeqs",
            "spec.resources.memory"} <= set(fields), plan["warnings"]
