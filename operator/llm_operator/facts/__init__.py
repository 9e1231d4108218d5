"""A model's own facts read inside the cluster (issue 33): the facts Job (pure builder,
:mod:`.job`), the compact message it hands back (:mod:`.message`) and the operator's
decisions on it (:mod:`.control`). The I/O is in :mod:`llm_operator.controller.facts`."""
