"""Online adaptation of ``--max-num-seqs``: the policy (:mod:`.policy`, pure, with what it
reads and returns: :mod:`.thresholds`, :mod:`.evidence`, :mod:`.bounds`, :mod:`.decision`,
:mod:`.state`), how a decision becomes status and Events (:mod:`.update`, pure) and the
Prometheus reader (:mod:`.prometheus`, the one I/O module here). The loop that runs them is
:mod:`llm_operator.controller.adaptation`.
"""
