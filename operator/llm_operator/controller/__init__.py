"""The I/O edge: kopf handlers, reconciliation, the Kubernetes client and the operator's
metrics. Nothing outside this package imports it but the command line."""
