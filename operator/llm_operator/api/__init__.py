"""What the operator's users write and configure: the LLMService's types
(:mod:`.models`, mirrored by the CRD), the operator's settings (:mod:`.settings`, the
``LLMOP_*`` variables the chart sets), the errors that name a field and its fix
(:mod:`.errors`), the names and defaults shared by every part (:mod:`.constants`) and
the timestamps of the status (:mod:`.timestamps`)."""
