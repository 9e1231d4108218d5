"""Tuning on rollout, the operator's pure side: planning and rendering the tuning Job.

When to tune and what a result means (:mod:`.control`, with ``status.tuning``'s states
in :mod:`.status`, the Job as read in :mod:`.observed`, results in :mod:`.results` and
the result cache in :mod:`.cache`), the fingerprint that says what the service runs on
(:mod:`.fingerprint`), where a run gets its GPUs (:mod:`.placement`) and the Job that
runs the tuner (:mod:`.job`). The handlers that carry these decisions out against the
API server are :mod:`llm_operator.controller.tuning`; the tuner itself, the program
inside the Job's pod, is :mod:`llm_operator.inpod.tuner`; ``llm-operator tune``
(:mod:`llm_operator.cli.tune`) runs that program on this machine.
"""
