"""What the operator knows about models, GPUs and vLLM, as data and pure rules.

- Models: :mod:`.catalog` (the models it knows by name, and the GPU products) and
  :mod:`.modelfacts` (the facts read from a model's ``config.json``).
- GPUs: :mod:`.gpuclass` (node selectors, tolerations and resource names per cloud) and
  :mod:`.dtype_support` (which dtypes each GPU computes in).
- vLLM: :mod:`.engine_rules` (what vLLM refuses at start-up), :mod:`.serve_args` (its
  ``vllm serve`` options, from ``data/vllm_serve_flags.json``), :mod:`.extra_args`
  (``spec.engine.extraArgs`` checked against them), :mod:`.startup` (the start-up
  budget) and :mod:`.vllm_version` (the releases the live admission cap runs on, from
  ``data/live_cap_compat.json``).

The tuning Job copies :mod:`.engine_rules`, :mod:`.serve_args` and the option table
into its pod (:mod:`llm_operator.tuning.job`): this file imports nothing, so the copy
needs nothing else of the package.
"""
