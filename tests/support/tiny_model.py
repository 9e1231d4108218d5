"""The tiny Llama the tests serve: :mod:`llm_operator_sandbox.tiny_model` (the demo
generates it too). Kept here under its old import path for the tests and benchmarks."""

from __future__ import annotations

import sys

from llm_operator_sandbox.tiny_model import (  # noqa: F401 - re-exported
    MARKER,
    ensure_tiny_llama,
    main,
    make_tiny_llama,
    tiny_shape,
)

if __name__ == "__main__":
    sys.exit(main())
