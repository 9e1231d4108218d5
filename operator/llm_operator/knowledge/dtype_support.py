"""Which GPU runs which checkpoint and KV-cache dtype, and at which FLOP/s (pure).

Rules of vLLM 0.32.0 (:data:`~llm_operator.knowledge.engine_rules.VLLM_VERSION`), each read from the
file it names, not from folklore. What they say, in short:

- **Refusal at start.** vLLM refuses a quantization method whose
  ``get_min_capability()`` exceeds the GPU's compute capability
  (``vllm/config/vllm.py``, ``VllmConfig._get_quantization_config``: "The quantization
  method ... is not supported for the current GPU. Minimum capability: ..."), and
  compressed-tensors does the same per layer scheme (``compressed_tensors.py``,
  ``_check_scheme_supported``). Most 4-bit and 8-bit methods need far less than their
  native tensor cores: they fall back to weight-only kernels (Marlin: dequantize the
  weights, multiply in bf16). So **fp4 on Hopper is NOT refused**: NVFP4
  (``modelopt_fp4``: 75) and gpt-oss's MXFP4 (``mxfp4``: 80) run on Hopper and Ampere,
  and fp8 (75) runs on Ampere. What is refused on the table's GPUs: FP-Quant
  (``fp_quant``: 100, Blackwell) below Blackwell, and compressed-tensors' W4A8-FP8 (int4
  weights, fp8 activations: exactly 9.0) anywhere but Hopper.
- **Activation dtype.** vLLM also refuses a ``--dtype`` outside the method's
  ``get_supported_act_dtypes()`` (same function): MXFP4 and FP-Quant take bfloat16 only.
- **FP8 KV cache** (``--kv-cache-dtype fp8``/``fp8_e4m3``/``fp8_e5m2``) runs on every
  NVIDIA GPU of the table: Triton attention, which vLLM's selector falls back to, stores
  all three at any compute capability (``v1/attention/backends/triton_attn.py``,
  ``supported_kv_cache_dtypes``, ``supports_compute_capability``: True). Multi-head
  latent attention is the exception: no CUDA MLA backend lists ``fp8_e5m2``
  (``v1/attention/backends/mla/*.py``; only ROCm's AITER MLA does), so vLLM finds "No
  valid attention backend" (``vllm/platforms/cuda.py``, ``get_attn_backend_cls``).
- **Which FLOP/s.** The matmuls run on the dtype's tensor cores only where both weights
  and activations are in it and the GPU has them: fp8 W8A8 from compute capability 8.9
  (``vllm/platforms/cuda.py``, ``supports_fp8``: ``has_device_capability(89)``; below,
  ``fp8.py`` takes the Marlin W8A16 kernel), fp4 W4A4 from 10.0
  (``cutlass_scaled_mm_supports_fp4`` in ``utils/nvfp4_utils.py``; below, the Marlin
  NVFP4 kernel of ``kernels/linear/__init__.py`` ``_POSSIBLE_NVFP4_KERNELS``, weight
  only). gpt-oss's MXFP4 experts take bf16 activations by default on every GPU
  (``fused_moe/oracle/mxfp4.py``, ``_get_priority_backends_for_gpt_oss``:
  ``FLASHINFER_TRTLLM_MXFP4_BF16`` first), so its figure is bf16's even on Blackwell.
  Weight-only methods (AWQ, GPTQ, NVFP4A16) compute in bf16.

File paths are relative to ``vllm/model_executor/layers/quantization/`` unless they
start with ``vllm/``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..api.errors import SpecError
from ..api.models import Dtype, KVCacheDtype, LLMServiceSpec, Quantization
from .catalog import GPUFacts, ModelFacts, gpu_table
from .engine_rules import VLLM_VERSION


@dataclass(frozen=True)
class MethodRule:
    """One quantization method (or compressed-tensors scheme) as vLLM checks it: the
    class whose ``get_min_capability()`` and ``get_supported_act_dtypes()`` say it
    (``tests/vllm/test_dtype_rules_match_vllm.py`` reads both from vLLM's source)."""

    name: str  # what the user would recognise: "NVFP4 (modelopt_fp4)"
    min_capability: int  # get_min_capability(), as DeviceCapability.to_int()
    file: str  # under vllm/model_executor/layers/quantization/
    cls: str  # the class that declares min_capability
    exact: bool = False  # compressed-tensors' match_exact: only that capability
    act_dtypes: tuple[str, ...] = ("bfloat16", "float16")  # get_supported_act_dtypes()
    act_cls: str | None = None  # "file:Class" declaring act_dtypes, where not ``cls``
    note: str = ""

    @property
    def source(self) -> str:
        """The vLLM file and method the rule mirrors."""
        return f"{self.file}, {self.cls}.get_min_capability" + (
            f"; {self.note}" if self.note else "")


# compressed-tensors: the config's act dtypes (CompressedTensorsConfig) hold for every
# scheme; each layer's scheme has its own minimum (compressed_tensors.py, get_scheme ->
# _check_scheme_supported).
_CT = "compressed_tensors/compressed_tensors.py"
_CT_ACT = ("float32", "float16", "bfloat16")
_CT_CONFIG = f"{_CT}:CompressedTensorsConfig"
RULES: dict[str, MethodRule] = {
    "fp8": MethodRule("fp8 (Fp8Config)", 75, "fp8.py", "Fp8Config"),
    "fbgemm_fp8": MethodRule("fbgemm_fp8", 80, "fbgemm_fp8.py", "FBGEMMFp8Config"),
    "modelopt_fp8": MethodRule("FP8 (modelopt)", 80, "modelopt.py", "ModelOptFp8Config"),
    "modelopt_fp4": MethodRule("NVFP4 (modelopt_fp4)", 75, "modelopt.py", "ModelOptNvFp4Config",
                               act_dtypes=("bfloat16", "float16")),
    "mxfp4": MethodRule("MXFP4 (mxfp4, gpt-oss)", 80, "mxfp4.py", "Mxfp4Config",
                        act_dtypes=("bfloat16",)),
    "fp_quant": MethodRule("FP-Quant (fp_quant)", 100, "fp_quant.py", "FPQuantConfig",
                           act_dtypes=("bfloat16",)),
    "awq": MethodRule("AWQ", 75, "auto_awq.py", "AutoAWQConfig"),
    "gptq": MethodRule("GPTQ", 60, "auto_gptq.py", "AutoGPTQConfig"),
    "ct_w4a4_nvfp4": MethodRule(
        "compressed-tensors NVFP4", 75, "compressed_tensors/schemes/compressed_tensors_w4a4_"
        "nvfp4.py", "CompressedTensorsW4A4Fp4", act_dtypes=_CT_ACT,
        act_cls=_CT_CONFIG),
    "ct_mxfp4": MethodRule(
        "compressed-tensors MXFP4", 80, "compressed_tensors/schemes/compressed_tensors_w4a4_"
        "mxfp4.py", "CompressedTensorsW4A4Mxfp4", act_dtypes=_CT_ACT,
        act_cls=_CT_CONFIG),
    "ct_w4a8_fp8": MethodRule(
        "compressed-tensors W4A8-FP8 (int4 weights, fp8 activations)", 90,
        "compressed_tensors/schemes/compressed_tensors_w4a8_fp8.py", "CompressedTensorsW4A8Fp8",
        exact=True, act_dtypes=_CT_ACT, act_cls=_CT_CONFIG,
        note=f"{_CT} chooses it only where _is_fp8_w4a8_sm90 (match_exact=True); on other "
             "GPUs no scheme matches: 'No compressed-tensors compatible scheme'"),
    # W8A8 fp8 needs 89 but falls back to W8A16 (75) below it (_get_scheme_from_parts).
    "ct_fp8": MethodRule(
        "compressed-tensors FP8", 75, "compressed_tensors/schemes/compressed_tensors_w8a16_"
        "fp8.py", "CompressedTensorsW8A16Fp8", act_dtypes=_CT_ACT,
        act_cls=_CT_CONFIG, note="the fallback of W8A8-FP8 below 8.9"),
    "ct_int8": MethodRule(
        "compressed-tensors INT8", 75, "compressed_tensors/schemes/compressed_tensors_w8a8_"
        "int8.py", "CompressedTensorsW8A8Int8", act_dtypes=_CT_ACT,
        act_cls=_CT_CONFIG),
    "ct_wna16": MethodRule(
        "compressed-tensors WNA16", 75, "compressed_tensors/schemes/compressed_tensors_"
        "wNa16.py", "CompressedTensorsWNA16", act_dtypes=_CT_ACT,
        act_cls=_CT_CONFIG),
}


def method_rule(facts: ModelFacts, quantization: Quantization) -> MethodRule | None:
    """The rule vLLM applies to the checkpoint's quantization (config.json), else to
    ``spec.model.quantization`` (quantized on load); None: unquantized."""
    method = (facts.quantization_method or "").lower()
    if facts.quantization is not None:
        if method in ("fp8", "fbgemm_fp8", "mxfp4", "fp_quant"):
            return RULES[method]
        if method.startswith("modelopt") or method == "nvfp4":
            return RULES["modelopt_fp4" if facts.quantization == "nvfp4" else "modelopt_fp8"]
        if method.startswith("awq") or method == "auto-round":
            return RULES["awq"]
        if method.startswith("gptq"):
            return RULES["gptq"]
        if method == "compressed-tensors":
            act = facts.activation_quantization
            if facts.quantization == "int4" and act == "fp8":
                return RULES["ct_w4a8_fp8"]
            return RULES[{"nvfp4": "ct_w4a4_nvfp4", "mxfp4": "ct_mxfp4", "fp8": "ct_fp8",
                          "int8": "ct_int8"}.get(facts.quantization, "ct_wna16")]
        return None
    return {Quantization.FP8: RULES["fp8"], Quantization.AWQ: RULES["awq"],
            Quantization.GPTQ: RULES["gptq"]}.get(quantization)


def _capability(cc: int) -> str:
    return f"{cc // 10}.{cc % 10}"


def runs_on(rule: MethodRule, gpu: GPUFacts) -> bool:
    """Whether vLLM starts the method on the GPU (True where the capability is unknown:
    a GPU given by its memory only is not judged)."""
    cc = gpu.compute_capability
    if cc is None:
        return True
    return cc == rule.min_capability if rule.exact else cc >= rule.min_capability


def dtype_errors(spec: LLMServiceSpec, facts: ModelFacts, gpu: GPUFacts) -> list[SpecError]:
    """The checkpoint's (or spec's) quantization and the KV-cache dtype against the GPU,
    as vLLM 0.32.0 checks them at start: each error names the GPU, the dtype, vLLM's
    rule and the fix."""
    errors: list[SpecError] = []
    rule = method_rule(facts, spec.model.quantization)
    if rule is not None and not runs_on(rule, gpu):
        need = (f"exactly compute capability {_capability(rule.min_capability)}"
                if rule.exact else
                f"compute capability {_capability(rule.min_capability)} or newer")
        assert gpu.compute_capability is not None
        fits = [g for g in gpu_table() if runs_on(rule, g)]
        errors.append(SpecError(
            "spec.gpus.product",
            f"{gpu.name} ({gpu.product}, {gpu.architecture}, compute capability "
            f"{_capability(gpu.compute_capability)}) cannot run {rule.name}: vLLM "
            f"{VLLM_VERSION} needs {need} ({rule.source}) and refuses to start",
            "set spec.gpus.product to a GPU that runs it: "
            + ", ".join(g.product for g in fits[:6])
            + ("; or remove spec.model.quantization" if facts.quantization is None else
               f"; or serve a checkpoint of {facts.name} in a dtype this GPU runs (bf16, "
               "fp8, NVFP4 or MXFP4 all run here)")))
    pinned = str(spec.engine.dtype)
    if rule is not None and spec.engine.dtype != Dtype.AUTO and pinned not in rule.act_dtypes:
        errors.append(SpecError(
            "spec.engine.dtype",
            f"{pinned} is not an activation dtype of {rule.name}: vLLM "
            f"{VLLM_VERSION} takes {', '.join(rule.act_dtypes)} only "
            f"(get_supported_act_dtypes; vllm/config/vllm.py, _get_quantization_config) "
            "and refuses to start", f"set it to {rule.act_dtypes[0]} or auto"))
    if spec.engine.kv_cache_dtype == KVCacheDtype.FP8_E5M2 and facts.is_mla:
        errors.append(SpecError(
            "spec.engine.kvCacheDtype",
            f"fp8_e5m2 with {facts.name}'s multi-head latent attention: no MLA attention "
            f"backend of vLLM {VLLM_VERSION} for NVIDIA GPUs ({gpu.name} included) stores "
            "an fp8_e5m2 cache (vllm/v1/attention/backends/mla/*.py supported_kv_cache_"
            "dtypes; vllm/platforms/cuda.py: 'No valid attention backend')",
            "use fp8 (= fp8_e4m3), which the MLA backends store, or auto"))
    return errors


@dataclass(frozen=True)
class ComputePath:
    """Which FLOP/s figure of the GPU the matmuls run at, and why."""

    dtype: str  # "bf16" | "fp8" | "fp4": the tensor cores used
    flops: float | None  # the GPU's dense figure for it (None: the table has none)
    why: str


def compute_path(facts: ModelFacts, quantization: Quantization, gpu: GPUFacts) -> ComputePath:
    """The tensor-core dtype and FLOP/s the linear layers run at on this GPU: the
    dtype's where weights AND activations are in it and the GPU has that tensor-core
    path (vLLM's kernel choice, see the module docstring), else bf16's."""
    cc = gpu.compute_capability
    act = facts.activation_quantization if facts.quantization is not None else (
        "fp8" if quantization == Quantization.FP8 else None)
    weights = facts.quantization or (quantization.value if quantization != Quantization.NONE
                                     else None)
    bf16 = gpu.bf16_flops

    def _bf16(reason: str) -> ComputePath:
        return ComputePath("bf16", bf16, reason)

    if weights is None:
        return _bf16("unquantized weights: bf16/fp16 tensor cores")
    if act is None:
        return _bf16(f"{weights} weights with bf16 activations (weight-only kernels such as "
                     "Marlin dequantize to bf16): bf16 tensor cores"
                     + (" (gpt-oss's MXFP4 experts take bf16 activations in vLLM "
                        f"{VLLM_VERSION}, fused_moe/oracle/mxfp4.py)"
                        if weights == "mxfp4" else ""))
    if act == "fp8":
        if cc is not None and cc >= 89 and gpu.fp8_flops:
            return ComputePath("fp8", gpu.fp8_flops,
                               f"fp8 activations on {gpu.architecture} (compute capability "
                               ">= 8.9, vllm/platforms/cuda.py supports_fp8): fp8 tensor cores")
        return _bf16(f"{gpu.name} has no fp8 tensor cores (compute capability "
                     f"{_capability(cc) if cc else 'unknown'} < 8.9): vLLM runs fp8 weights "
                     "with the Marlin W8A16 kernel (fp8.py), bf16 tensor cores")
    if act in ("nvfp4", "mxfp4"):
        if cc is not None and cc >= 100 and gpu.fp4_flops:
            return ComputePath("fp4", gpu.fp4_flops,
                               f"{act} activations on {gpu.architecture} (compute capability "
                               ">= 10.0, utils/nvfp4_utils.py cutlass_fp4_supported): fp4 "
                               "tensor cores")
        return _bf16(f"{gpu.name} has no fp4 tensor cores (compute capability "
                     f"{_capability(cc) if cc else 'unknown'} < 10.0): vLLM runs {act} "
                     "weights weight-only (Marlin), bf16 tensor cores")
    return _bf16(f"{act} activations: the GPU table has no {act} figure, bf16's is used "
                 "(conservative)")
