"""Local trials without a cluster: an EMULATED Kubernetes API server and the demo.

Nothing here runs in production. :mod:`.emulator` serves the Kubernetes REST API from
memory (kmock's ``KubernetesEmulator`` with the fixes kopf and kubectl need); it has no
scheduler, kubelet or controllers (only a simple garbage collector), so results obtained against it
are emulator results, never cluster results. It needs the ``demo`` extra
(``pip install 'llm-operator[demo]'``: kmock and a static kubectl).
:mod:`.node_agent` plays the missing controllers and kubelet for the operator's own
Deployments and Jobs, running their containers as local processes with the CPU build of
vLLM (what it substitutes: ``SUBSTITUTIONS`` there).
"""
