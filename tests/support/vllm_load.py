"""vLLM's own benchmark as a load: :mod:`llm_operator_sandbox.vllm_load` (the demo uses
it too), kept here under its old import path for the tests and benchmarks."""

from __future__ import annotations

from llm_operator_sandbox.vllm_load import (  # noqa: F401 - re-exported
    Load,
    LoadRun,
    engine_metric,
    run_load,
)
