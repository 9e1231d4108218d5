#!/usr/bin/env bash
# The main job without a cluster of your own. By default the whole loop on a REAL
# Kubernetes control plane started on this machine: installs the operator, vLLM's CPU
# build, Prometheus and helm, builds kube-apiserver, etcd, kube-controller-manager and
# kube-scheduler from Go modules once (tools/setup.sh --demo; cached outside the checkout),
# then `llm-operator demo` installs the chart with helm and serves a tiny generated model
# through the operator: plan, tuning Job, rollout, load, adaptation. Pods run as local
# processes (a local kubelet; no GPU, no container runtime).
#   bash tools/demo.sh --nodes      the same loop with its pods in REAL containers: Kubernetes'
#                                   kubelet, containerd and runc on this machine, the images
#                                   built here (root; tools/setup.sh --nodes builds them)
#   bash tools/demo.sh --emulated   the same loop on the EMULATED API server (no Go build)
#   bash tools/demo.sh --tour       the quick tour without an engine (plans the examples/)
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  --tour) bash tools/setup.sh ;;
  --emulated) bash tools/setup.sh --engine ;;
  --nodes) bash tools/setup.sh --demo && bash tools/setup.sh --nodes ;;
  *) bash tools/setup.sh --demo ;;
esac
exec .venv/bin/llm-operator demo "$@"
