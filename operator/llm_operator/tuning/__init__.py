"""Tuning on rollout, the operator's side (pure): when to tune and what a result means
(:mod:`.control`), the fingerprint that says what the service runs on
(:mod:`.fingerprint`) and the Job that runs the tuner (:mod:`.job`). The tuner itself, the
program inside the Job, is :mod:`llm_operator.tuner`.
"""
