#!/usr/bin/env bash
# The main job without a cluster of your own. By default the whole loop on REAL Kubernetes
# on this machine, every pod in a real container: the control plane (kube-apiserver, etcd,
# kube-controller-manager, kube-scheduler) and one node (Kubernetes' kubelet, containerd,
# runc, the CNI bridge, kube-proxy, CoreDNS), built from Go modules and Debian's packages
# once and cached outside the checkout; the operator's image and a vLLM CPU image built
# here, pushed to a local registry that requires a login; then `llm-operator demo --nodes`
# installs the chart with helm and serves a generated model through the operator: plan,
# tuning Job, rollout, load, adaptation, the adapted cap measured against the static one.
# Needs root (containerd, the kubelet). The first run builds everything (22-25 min on 2
# cores, 3 runs; where the time goes: CONTRIBUTING.md); later runs about 14 min.
#   bash tools/demo.sh --processes  the same loop with the pods as local processes (the
#                                   project's own kubelet; no root, no container runtime)
#   bash tools/demo.sh --emulated   the same loop on the EMULATED API server (no Go build)
#   bash tools/demo.sh --tour       the quick tour without an engine (plans the examples/)
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  --tour) bash tools/setup.sh; exec .venv/bin/llm-operator demo "$@" ;;
  --emulated) bash tools/setup.sh --engine; exec .venv/bin/llm-operator demo "$@" ;;
  --processes) shift; bash tools/setup.sh --demo; exec .venv/bin/llm-operator demo "$@" ;;
  --nodes) shift ;;
esac

if [ "$(id -u)" != 0 ]; then
  echo "bash tools/demo.sh runs its pods in real containers: containerd and Kubernetes'" \
       "kubelet need root. Fix: run it as root (sudo bash tools/demo.sh), or run" \
       "\`bash tools/demo.sh --processes\` for the same loop with the pods as local processes." >&2
  exit 2
fi

# The control plane is a Go build (606-649 s alone on 2 cores, 676-894 s beside the rest
# here, the first time; then cached): it
# runs at low priority in the background from the start, beside the installs and the image
# builds (mostly downloads and disk), as tools/test.sh does, and the loop waits for it.
t0=$(date +%s)
logs=$(mktemp -d /tmp/llmop-demo-setup.XXXXXX)
source tools/background.sh
trap bg_stop EXIT
bg_start control-plane "$logs" bash tools/build_cluster.sh
bash tools/setup.sh --demo --cluster-later
t_installs=$(date +%s)
bash tools/setup.sh --nodes --without-csi
t_images=$(date +%s)
printf '\n==> the control plane (tools/build_cluster.sh, in the background since the start)\n'
while ! bg_done control-plane "$logs"; do sleep 5; done
t_cp=$(date +%s)
rc=0
bg_wait control-plane "$logs" || rc=$?
[ "$rc" = 0 ] || { echo "the control plane's build failed (above): exit $rc" >&2; exit "$rc"; }
trap - EXIT
printf '\n==> ready in %d s: installs %d s, node packages and images %d s, then %d s waiting' \
  "$((t_cp - t0))" "$((t_installs - t0))" "$((t_images - t_installs))" "$((t_cp - t_images))"
printf ' for the control plane\n'
exec .venv/bin/llm-operator demo --nodes "$@"
