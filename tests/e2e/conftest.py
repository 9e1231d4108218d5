"""End-to-end tier: the real operator process, the EMULATED API server (not a cluster),
the real kubectl, and the LOCAL node agent (``llm_operator_sandbox.node_agent``) running
the rendered pods as local processes with the real vLLM CPU engine and the real tuner.
One vLLM server at a time (2 cores); every wait is bounded.
"""

from __future__ import annotations

# The integration tier's fixtures: a fresh emulator, kubectl with the CRD, the operator.
from tests.integration.conftest import api, kubectl, operator

__all__ = ["api", "kubectl", "operator"]
