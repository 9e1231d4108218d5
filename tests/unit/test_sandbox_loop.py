"""The loop's pure helpers (:mod:`llm_operator_sandbox.loop`): what the demo reads from
pods and from the tuner's log."""

from __future__ import annotations

from pathlib import Path

import yaml

from llm_operator import rendering
from llm_operator.api.models import parse_llmservice
from llm_operator.planning import make_plan
from llm_operator.settings import Settings
from llm_operator_sandbox import loop as sandbox_loop

ROOT = Path(__file__).resolve().parents[2]


def test_the_loops_example_tunes_before_serving_and_adapts_live() -> None:
    """One vLLM at a time on 2 cores (the tuning Job before the serving pod), and the
    adaptation applies its decisions through the live cap the Deployment renders."""
    body = yaml.safe_load((ROOT / "demo" / sandbox_loop.EXAMPLE_FILE).read_text())
    svc = parse_llmservice(body)
    assert svc.spec.tuning.placement.value == "BeforeServing"
    assert svc.spec.adaptation.mode.value == "Apply" and svc.spec.adaptation.live_cap
    children = rendering.render_all(svc, make_plan(svc.spec), Settings(), pod_monitor=True,
                                    live_cap=True)
    assert [c["kind"] for c in children][-1] == "ConfigMap"  # the live cap's channel
    deployment = children[0]
    # the demo finds the pod's cap in the rendered args (the runner capacity)
    cap = sandbox_loop.max_num_seqs_arg({"spec": deployment["spec"]["template"]["spec"]})
    assert cap is not None and cap >= make_plan(svc.spec).max_num_seqs


def test_max_num_seqs_is_read_in_both_spellings() -> None:
    def pod(args: list[str]) -> dict[str, object]:
        return {"spec": {"containers": [{"name": "vllm", "command": ["vllm", "serve"],
                                         "args": args}]}}

    assert sandbox_loop.max_num_seqs_arg(pod(["m", "--max-num-seqs", "12"])) == 12
    assert sandbox_loop.max_num_seqs_arg(pod(["m", "--max-num-seqs=7"])) == 7
    assert sandbox_loop.max_num_seqs_arg(pod(["m"])) is None


def test_condition_by_type() -> None:
    obj = {"status": {"conditions": [{"type": "Tuned", "status": "True"}]}}
    assert sandbox_loop.condition(obj, "Tuned")["status"] == "True"
    assert sandbox_loop.condition(obj, "Ready") == {}
    assert sandbox_loop.condition({}, "Ready") == {}
