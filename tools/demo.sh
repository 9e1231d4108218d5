#!/usr/bin/env bash
# The main job without a cluster: installs the operator, starts an EMULATED Kubernetes API
# server (kmock, not a real cluster), applies the CRD and examples/ with kubectl, runs the
# operator against it and shows `kubectl get llms` and the Deployments it rendered.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
exec .venv/bin/llm-operator demo "$@"
