"""The facts a plan uses (pure): the model's (catalog, ``spec.model.architecture`` or the
config.json the operator read) and the GPU's (product table or ``spec.gpus``), and where
each came from.
"""

from __future__ import annotations

from dataclasses import replace

from ..api.constants import GIB
from ..api.errors import SpecError
from ..api.models import (
    LLMServiceSpec,
)
from ..knowledge.catalog import (
    GPUFacts,
    ModelFacts,
    facts_from_architecture,
    featured_models,
    gpu_products,
    lookup_gpu,
    lookup_model,
    model_names,
)

# --------------------------------------------------------------------------- facts

def model_facts(spec: LLMServiceSpec, read: ModelFacts | None = None) -> ModelFacts:
    """The model's facts: ``spec.model.architecture`` if given (the user's override),
    else ``read`` (the model's own config.json, read at an edge: the command line's
    ``--model-config``), else the catalog."""
    if spec.model.architecture is not None:
        return facts_from_architecture(spec.model.architecture, spec.model.name)
    if read is not None:
        return read
    facts = lookup_model(spec.model.name)
    if facts is None:
        raise SpecError(
            "spec.model.architecture",
            f"is required: model {spec.model.name!r} is not in the built-in catalog",
            "set spec.model.architecture (parameters, numLayers, hiddenSize, "
            "numAttentionHeads, numKeyValueHeads, headDim, maxContext) from the model's "
            "config.json, or use a catalog model such as " + ", ".join(featured_models())
            + f" ({len(model_names())} ids in all, base and instruct)",
        )
    return facts


# spec.gpus.memoryGib may lower a known product's memory (a MIG slice, memory kept for
# something else), not raise it; 10% over is let through for a GB/GiB slip (80 for an
# 80 GB card is 74.5 GiB: 7% over).
MEMORY_GIB_SLACK = 1.10


def gpu_facts(spec: LLMServiceSpec) -> GPUFacts:
    """The GPU's facts: the product table, with ``spec.gpus.memoryGib`` winning for
    memory; a product the table does not know needs memoryGib."""
    gpus = spec.gpus
    known = lookup_gpu(gpus.product) if gpus.product else None
    if gpus.memory_gib is not None:
        memory = int(gpus.memory_gib * GIB)
        if known is not None and memory > known.memory_bytes * MEMORY_GIB_SLACK:
            raise SpecError(
                "spec.gpus.memoryGib",
                f"{gpus.memory_gib:g} GiB is more than the {known.memory_bytes / GIB:.1f} GiB "
                f"of spec.gpus.product {gpus.product!r} ({known.name}): the plan (GPU count, "
                "KV capacity, batch) would count memory the GPUs do not have",
                "remove spec.gpus.memoryGib (the GPU table knows the product), or name the "
                "GPU you have in spec.gpus.product")
        if known is not None:
            return replace(known, memory_bytes=memory)
        product = gpus.product or f"custom-{gpus.memory_gib:g}GiB"
        return GPUFacts(product, product, memory)
    if known is not None:
        return known
    if gpus.product:
        raise SpecError("spec.gpus.product",
                        f"GPU product {gpus.product!r} is not in the built-in table",
                        "set spec.gpus.memoryGib or use one of: " + ", ".join(gpu_products()))
    raise SpecError("spec.gpus.product", "neither a GPU product nor its memory is given",
                    "set spec.gpus.product (the nodes' nvidia.com/gpu.product label), one of: "
                    + ", ".join(gpu_products()) + "; or set spec.gpus.memoryGib")


def fact_sources(spec: LLMServiceSpec, facts: ModelFacts) -> dict[str, str]:
    """Where each fact the plan used came from, for status.plan.factSources."""
    sources = {"architecture": facts.source,
               "parameters": facts.source_of("parameters"),
               "gpu": "spec.gpus.memoryGib" if spec.gpus.memory_gib else "GPU table"}
    if facts.quantization is not None:
        sources["quantization"] = facts.source_of("quantization")
    if facts.weight_bytes:
        sources["weightBytes"] = facts.source_of("weight_bytes")
    if facts.full_attention_layers is not None:
        sources["layerTypes"] = facts.source
    if facts.source_of("max_context") != facts.source:
        sources["maxContext"] = facts.source_of("max_context")
    return sources
