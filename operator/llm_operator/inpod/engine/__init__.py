"""The admission controller: runs inside the vLLM server process, not in the operator.

The server pod's init container copies this package (and the empty ``__init__.py`` of
``llm_operator`` and ``llm_operator.inpod``) from the operator image onto the vLLM
container's ``PYTHONPATH``, as the tuning Job does with :mod:`llm_operator.inpod.tuner`.
It imports only vLLM, ``prometheus_client`` (which every vLLM install has) and the
standard library; ``.importlinter`` checks that it imports nothing else of the operator.

- :mod:`.cap`: reading the admission cap from its file (standard library only).
- :mod:`.scheduler`: the vLLM scheduler class (``--scheduler-cls``) that applies it.
"""
