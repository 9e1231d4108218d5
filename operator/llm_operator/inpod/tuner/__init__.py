"""The in-pod tuner: a benchmark-driven search of vLLM batch settings under a latency SLO.

Runs inside the tuning Job, under the vLLM image's Python, copied in by an init container
(see :mod:`llm_operator.tuning.job`); ``llm-operator tune`` runs it the same way on this
machine. So every module here imports only the standard library, its siblings, vLLM's
start-up rules (:mod:`llm_operator.knowledge.engine_rules` and
:mod:`llm_operator.knowledge.serve_args`, which import nothing else of the operator and
are copied along) and what every vLLM install has (vllm, pydantic, prometheus_client;
rich optionally), never kopf, the Kubernetes client or the rest of ``llm_operator`` (an
import-linter contract in the test command holds this).
The operator reads the tuner's result with :func:`.result.parse_result`.

Nothing is imported here, so importing the package stays cheap on both sides.
"""
