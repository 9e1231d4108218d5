"""The tuner: a benchmark-driven search of vLLM batch settings under a latency SLO.

Runs inside the tuning Job, under the vLLM image's Python, with this package copied in
by an init container (see :mod:`.job`). So the modules the Job runs (``__main__``,
``main``, ``search``, ``bench``, ``server``, ``runner``, ``result``, ``report``) import
only the standard library and what every vLLM install has (vllm, pydantic,
prometheus_client; rich optionally), never kopf or the Kubernetes client.
The operator side uses :mod:`.job` (``build_tuning_job``), :mod:`.fingerprint`
(``tuning_fingerprint``) and :func:`.result.parse_result`.

Nothing is imported here, so importing the package stays cheap on both sides.
"""
