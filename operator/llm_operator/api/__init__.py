"""What the operator's users write: the LLMService's types (:mod:`.models`, mirrored by
the CRD), the errors that name a field and its fix (:mod:`.errors`), the names and
defaults shared by every part (:mod:`.constants`) and the timestamps of the status
(:mod:`.timestamps`). The operator's own configuration, the ``LLMOP_*`` variables the
chart sets, is :mod:`llm_operator.settings`: it checks them with what the operator
knows of GPUs and vLLM, so it sits above both this package and ``knowledge``."""
