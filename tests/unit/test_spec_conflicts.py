"""Settings that each make sense alone and contradict each other, beyond the corpus rows
(tests/unit/data/bad_input.yaml refuses the rest): what is kept with a warning, what the
renderer corrects, and the fix a unit slip is given."""

from __future__ import annotations

import pytest
from tests.unit.test_planning import L8B, spec

from llm_operator.api.models import LLMService, parse_llmservice, quantity_fix
from llm_operator.planning import make_plan
from llm_operator.rendering.vllm_args import build_vllm_args


def _service(**sections: object) -> LLMService:
    body: dict[str, object] = {"model": {"name": L8B}, "gpus": {"product": "NVIDIA-L4"},
                               **sections}
    return parse_llmservice({"metadata": {"name": "svc"}, "spec": body})


def _flag(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


def test_an_adapted_cap_above_vllms_batch_raises_the_batch_with_it() -> None:
    # The adaptation's lower bound (3000) is above both the plan's cap and vLLM's default
    # batch on an L4 (2048): vLLM refuses fewer batched tokens than sequences at start.
    svc = _service(adaptation={"mode": "Apply", "minMaxNumSeqs": 3000})
    plan = make_plan(svc.spec)
    assert plan.max_num_batched_tokens is None  # left to vLLM by the plan
    args = build_vllm_args(svc, plan, {"maxNumSeqs": 3000})
    assert _flag(args, "--max-num-seqs") == "3000"
    assert _flag(args, "--max-num-batched-tokens") == "3000"
    # A cap within vLLM's default batch leaves the batch to vLLM.
    assert _flag(build_vllm_args(svc, plan, {"maxNumSeqs": 100}),
                 "--max-num-batched-tokens") is None


def test_a_cache_size_limit_beside_a_claim_is_kept_with_a_warning() -> None:
    plan = make_plan(spec(L8B, "NVIDIA-L4", cache={"claimName": "hf-cache",
                                                   "sizeLimit": "200Gi"}))
    assert any("spec.cache.sizeLimit 200Gi is not used" in w and "'hf-cache'" in w
               for w in plan.warnings), plan.warnings
    plain = make_plan(spec(L8B, "NVIDIA-L4", cache={"claimName": "hf-cache"}))
    assert not any("sizeLimit" in w for w in plain.warnings)


def test_memory_gib_may_lower_a_products_memory_or_slip_gb_for_gib() -> None:
    # A MIG slice or memory kept aside: less than the table's 80 GB is the user's call;
    # 80 "GiB" for an 80 GB H100 (74.5 GiB) is within the 10% slack.
    for gib in (40, 80):
        make_plan(spec(L8B, "H100", gpus={"product": "H100", "memoryGib": gib}))


@pytest.mark.parametrize(("given", "suggested"), [
    ("64GB", "'64G' (or '64Gi' in powers of 2)"),
    ("64gi", "'64Gi'"),
    ("8 cores", "'8'"),
    ("200MiB", "'200Mi'"),
])
def test_a_unit_slip_is_answered_with_the_spelling_kubernetes_takes(
        given: str, suggested: str) -> None:
    assert quantity_fix(given).startswith(f"write {suggested}")
    assert "Gi" in quantity_fix("lots")  # no guess: the units are listed
