"""Code that runs inside the vLLM pods, not in the operator process.

- :mod:`.tuner`: the tuning Job's program (a benchmark-driven search of vLLM's batch
  settings), run as ``python3 -m llm_operator.inpod.tuner`` under the vLLM image's Python;
  ``llm-operator tune`` runs it the same way on this machine.
- :mod:`.engine`: the admission controller loaded into the vLLM server as its
  ``--scheduler-cls`` (the live admission cap).

Init containers copy these packages from the operator's image into the pods
(:mod:`llm_operator.tuning.job` and :mod:`llm_operator.rendering.admission`), so nothing
here imports the operator beyond vLLM's start-up rules (:mod:`llm_operator.knowledge.engine_rules`,
:mod:`llm_operator.knowledge.serve_args`, copied along with the tuner); ``.importlinter`` holds
this. This file imports nothing, so the copies need nothing else of the package.
"""
