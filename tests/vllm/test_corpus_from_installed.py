"""Every model type the installed transformers and vLLM both know, planned (issue 56
item 5).

``tests/support/vllm_corpus.py``, run by vLLM's Python (``.venv-vllm``, one process),
enumerates transformers' ``CONFIG_MAPPING``: each model type whose causal-LM or
image-text-to-text architecture vLLM's model registry lists as a generative model
(native, or through its transformers backend). It writes the config class's defaults
(``to_dict()``, ``architectures`` set to that architecture) as ``<type>/config.json``
and reads each back as vLLM does: its ``ModelArchConfigConvertor`` (head size, total KV
heads, layers, MLA) and ``ModelConfig.get_num_layers_by_block_type`` (attention layers;
whether the class is hybrid or attention-free read from its bases in vLLM's source).
Config only: no model module is imported, no weights built.

Each folder is planned here with the operator's own code, as ``llm-operator plan
--model-config DIR`` does (``facts_from_folder``, ``make_plan``), on H200s, 8 a node,
for 16 requests of 512 + 256 tokens (within the
context of the smallest defaults, 1,024), and is either

- planned: where vLLM counts its attention layers from the config, its KV bytes per
  token (the attention layers' K and V, sliding layers counted as full, per-sequence
  states apart) within 5% of vLLM's ``layers x 2 x KV heads x head size x 2`` (MLA:
  ``layers x (kv_lora_rank + qk_rope_head_dim) x 2``);
- refused, naming what it lacks (a message with ``config.json`` or
  ``spec.model.architecture``);
- and never crashed (any other exception).

Each planned hybrid or attention-free type's state per layer (elements at TP 1) is
compared with what its vLLM model class computes from the same config
(``get_mamba_state_shape_from_config``; the module imported, no weights built), within
5%, where the CPU build can import it. The table of config classes that tie their
embeddings by default (``modelfacts._TIED_BY_DEFAULT``) is checked against the
installed transformers.

The counts are printed (stderr) and written up in docs/production/model-facts.md
("Which models are planned"). Regenerate: ``.venv/bin/python -m pytest -m vllm -s
tests/vllm/test_corpus_from_installed.py``. 46 to 81 s on 2 busy cores (the probe, with
the model modules' imports for the states; planning all 140 takes 0.2 s), under the
machine-wide vLLM lock.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from llm_operator.api.errors import InputError, SpecError, SpecErrors
from llm_operator.api.models import parse_llmservice
from llm_operator.cli.modelsource import facts_from_folder
from llm_operator.inpod.tuner.server import vllm_lock
from llm_operator.knowledge.modelfacts import _TIED_BY_DEFAULT
from llm_operator.planning import kv_bytes_per_token, make_plan

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = Path(os.environ.get("LLMOP_VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python"))
PROBE = ROOT / "tests" / "support" / "vllm_corpus.py"

pytestmark = [pytest.mark.vllm,
              pytest.mark.skipif(not VLLM_PYTHON.exists(), reason=f"no vLLM at {VLLM_PYTHON}")]

# Where vLLM's config-only count of attention layers is not the layers its model builds
# (read in vLLM 0.32's model code), so the KV comparison is not made; the test fails if
# the list goes stale.
_GEMMA4 = ("per-layer head sizes: the convertor gives global_head_dim (512) for every "
           "layer; vLLM's Gemma 4 layers use head_dim (256) on sliding ones")
VLLM_COUNT_NOT_THE_MODEL: dict[str, str] = {
    "gemma4": _GEMMA4, "gemma4_text": _GEMMA4, "gemma4_unified": _GEMMA4,
    "diffusion_gemma": _GEMMA4,
    "mimo_v2_flash": "V's head size (v_head_dim 128) apart from K's (192); vLLM's "
                     "layer specs agree with the planner (test_kv_specs_match_vllm.py)",
    "falcon_h1": "every layer has attention beside its Mamba mixer; the config-only "
                 "count says 0 attention layers",
    "cosmos3_edge": "Nemotron-H blocks: vLLM's config counts 56 blocks, 28 attention "
                    "and 28 MLP, its model caches 28",
}
# Where vLLM's config-only figure is not what its model caches, the figure derived
# here from vLLM's module: model type -> (why, bytes a token from the config).
DERIVED: dict[str, tuple[str, Any]] = {
    "minicpm3": ("MiniCPM3Attention caches every head's K and V, qk_nope + qk_rope "
                 "wide (V padded), not MLA's latent",
                 lambda c: c["num_hidden_layers"] * 2 * c["num_attention_heads"]
                 * (c["qk_nope_head_dim"] + c["qk_rope_head_dim"]) * 2),
}


def _nemotron_h_kv(config: dict[str, Any]) -> int:
    """Nemotron-H under transformers 5's labels: vLLM's config-only count looks for
    "attention" in layers_block_type and finds none ("full_attention"); its model
    builds an attention layer for each "*" of the class's hybrid_override_pattern
    property, that is each "full_attention" block (nemotron_h.py)."""
    c = config.get("text_config") or config
    layers = sum(t == "full_attention" for t in c["layers_block_type"])
    return layers * 2 * c["num_key_value_heads"] * c["head_dim"] * 2


_NEMOTRON_H = ("transformers 5's layers_block_type labels: vLLM's count finds no "
               "'attention' block; its model caches one per 'full_attention'", _nemotron_h_kv)
DERIVED["nemotron_h"] = DERIVED["nemotron_h_omni"] = _NEMOTRON_H
DERIVED["longcat_flash"] = (
    "two MLA attentions a decoder layer (FlashDecoderLayer.self_attn[0], [1]); vLLM's "
    "convertor counts num_layers, one a layer",
    lambda c: 2 * c["num_layers"] * (c["kv_lora_rank"] + c["qk_rope_head_dim"]) * 2)


# Where the planner keeps no state that vLLM's model class computes (the test fails if
# the entry goes stale): model type -> why.
STATE_NOT_MODELLED: dict[str, str] = {
    "lfm2_moe": "LFM2's short-convolution layers: a (kernel - 1) x hidden conv state, "
                "4,096 elements a layer here (8 KB in bf16); not modelled",
}


def _elements(shapes: list[list[int]]) -> int:
    return sum(math.prod(shape) for shape in shapes)


def _spec(name: str) -> Any:
    return parse_llmservice({"metadata": {"name": "svc", "namespace": "ml"}, "spec": {
        "model": {"name": name}, "gpus": {"product": "NVIDIA-H200", "perNode": 8},
        "workload": {"concurrency": 16, "inputTokens": 512, "outputTokens": 256}}}).spec


def _plan(model_type: str, folder: str) -> tuple[str, Any]:
    """("planned", (facts, plan)), ("refused", message) or ("crashed", message)."""
    name = f"corpus/{model_type}"
    try:
        facts = facts_from_folder(folder, name)
        return "planned", (facts, make_plan(_spec(name), facts=facts))
    except (InputError, SpecError, SpecErrors) as exc:
        return "refused", str(exc)
    except Exception as exc:  # noqa: BLE001 - what the test is for
        return "crashed", f"{type(exc).__name__}: {exc}"


def _vllm_kv(vllm: dict[str, Any]) -> int | None:
    """vLLM's attention KV bytes a token (bf16), or None where it does not count the
    attention layers from the config."""
    layers = vllm.get("attention_layers")
    if layers is None:
        return None
    if vllm["mla"]:
        return layers * vllm["head_size"] * 2
    return layers * 2 * vllm["kv_heads"] * vllm["head_size"] * 2


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("corpus")
    asked = time.monotonic()
    with vllm_lock(timeout_s=900):
        started = time.monotonic()
        out = subprocess.run([str(VLLM_PYTHON), str(PROBE), str(root)], capture_output=True,
                             text=True, timeout=300,
                             env={**os.environ, "HF_HUB_OFFLINE": "1"})
        elapsed = time.monotonic() - started
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("CORPUS ")), None)
    assert line is not None, out.stderr[-3000:]
    result: dict[str, Any] = json.loads(line.removeprefix("CORPUS "))
    result["probe_s"], result["lock_wait_s"] = elapsed, started - asked
    return result


def _reason(message: str) -> str:
    """A refusal's reason, short: the part before ``. Fix:`` past the source."""
    problem = message.split(". Fix:")[0]
    return problem.split(": ", 1)[-1]


@pytest.mark.timeout(1200)
def test_every_installed_model_type_is_planned_or_refused_by_name(
        corpus: dict[str, Any]) -> None:
    started = time.monotonic()
    types: dict[str, dict[str, Any]] = corpus["types"]
    outcomes: dict[str, tuple[str, Any]] = {}
    for model_type, row in sorted(types.items()):
        if "folder" in row:
            outcomes[model_type] = _plan(model_type, row["folder"])
    compared, unchecked, off = {}, [], {}
    for model_type, (outcome, value) in outcomes.items():
        if outcome != "planned":
            continue
        facts, _plan_ = value
        vllm = types[model_type].get("vllm")
        expected = _vllm_kv(vllm) if vllm else None
        if model_type in DERIVED:
            config = json.loads((Path(types[model_type]["folder"]) / "config.json")
                                .read_text())
            expected = DERIVED[model_type][1](config)
        elif model_type in VLLM_COUNT_NOT_THE_MODEL:
            expected = None
        if expected is None:
            unchecked.append(model_type)
            continue
        planned = kv_bytes_per_token(facts, 1, 1, 2)  # sliding as full, no state
        compared[model_type] = (planned, expected)
        if planned != pytest.approx(expected, rel=0.05, abs=0):
            off[model_type] = (planned, expected, vllm)
    # The state a linear-attention or Mamba layer keeps per sequence, elements at TP 1,
    # against vLLM's model class (get_mamba_state_shape_from_config) where it computes.
    states, states_off = {}, {}
    for model_type, (outcome, value) in outcomes.items():
        shapes = (types[model_type].get("vllm") or {}).get("state_shapes")
        if outcome != "planned" or shapes is None:
            continue
        planned, expected = value[0].state_elements_per_layer, _elements(shapes)
        states[model_type] = (planned, expected)
        if planned != pytest.approx(expected, rel=0.05, abs=0) \
                and model_type not in STATE_NOT_MODELLED:
            states_off[model_type] = (planned, expected, shapes)
    counts = Counter(outcome for outcome, _ in outcomes.values())
    refusals = Counter(_reason(v) for o, v in outcomes.values() if o == "refused")
    report = {
        "transformers": corpus["transformers"], "vllm": corpus["vllm"],
        "types": len(types), "no_defaults": sorted(t for t, r in types.items()
                                                   if "no_defaults" in r),
        "outcomes": dict(counts), "refused": {t: v for t, (o, v) in outcomes.items()
                                              if o == "refused"},
        "crashed": {t: v for t, (o, v) in outcomes.items() if o == "crashed"},
        "kv_compared": len(compared), "kv_unchecked": unchecked, "kv_off": off,
        "refusal_reasons": dict(refusals),
        "state_compared": states, "state_off": states_off,
        "state_not_computed": {t: r["vllm"]["state_error"] for t, r in types.items()
                               if "state_error" in (r.get("vllm") or {})},
        "probe_s": round(corpus["probe_s"], 1),
        "lock_wait_s": round(corpus["lock_wait_s"], 1),
        "plan_s": round(time.monotonic() - started, 1)}
    sys.stderr.write("CORPUS-REPORT " + json.dumps(report, indent=1, default=str) + "\n")
    assert not report["crashed"], report["crashed"]
    unnamed = {t: v for t, v in report["refused"].items()
               if "config.json" not in v and "spec.model.architecture" not in v}
    assert not unnamed, unnamed
    assert not off, off
    # The exceptions are still needed: each type is planned and its vLLM figure differs.
    stale = {t for t in VLLM_COUNT_NOT_THE_MODEL
             if outcomes.get(t, ("",))[0] == "planned" and types[t].get("vllm")
             and kv_bytes_per_token(outcomes[t][1][0], 1, 1, 2)
             == pytest.approx(_vllm_kv(types[t]["vllm"]) or -1, rel=0.05)}
    assert not stale, stale
    assert compared, "nothing compared with vLLM"
    assert not states_off, states_off
    assert {t for t in STATE_NOT_MODELLED if t in states
            and states[t][0] != pytest.approx(states[t][1], rel=0.05)} \
        == set(STATE_NOT_MODELLED), "STATE_NOT_MODELLED is stale"
    assert states, "no state compared with vLLM"
    # modelfacts' table of the config classes that tie by default is the installed
    # transformers' (the types of this corpus and their text configs).
    tied = {mt for row in types.values() for mt, t in (row.get("tie_default") or {}).items()
            if t}
    assert tied == _TIED_BY_DEFAULT, (sorted(tied - _TIED_BY_DEFAULT),
                                      sorted(_TIED_BY_DEFAULT - tied))
