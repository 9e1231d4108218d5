"""llm-operator: deploys LLMs with vLLM on Kubernetes and keeps their batch settings tuned."""

__version__ = "0.1.0"
