#!/usr/bin/env bash
# The main job without a cluster. By default the whole loop: installs the operator, vLLM's
# CPU build and Prometheus (tools/setup.sh --engine), then `llm-operator demo` serves a tiny
# generated model through the operator against an EMULATED Kubernetes API server (kmock,
# not a real cluster) and a LOCAL node agent: plan, tuning Job, rollout, load, adaptation.
# `bash tools/demo.sh --tour`: the quick tour without an engine (plans the examples/).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--tour" ]; then
  bash tools/setup.sh
else
  bash tools/setup.sh --engine
fi
exec .venv/bin/llm-operator demo "$@"
