#!/usr/bin/env bash
# Build the real Kubernetes control plane the cluster tier runs against: etcd,
# kube-apiserver, kube-controller-manager and kube-scheduler, and the node agents the
# nodes tier registers (kubelet, kube-proxy), from the Go modules pinned
# in tools/cluster (go.mod: k8s.io/kubernetes with its staging modules replaced by their
# published v0 twins; etcd/go.mod: go.etcd.io/etcd/server/v3). The binaries go to a cache
# outside the checkout keyed by both versions ($LLMOP_CACHE, default ~/.cache/llm-operator)
# and are reused after. Called by `bash tools/setup.sh --cluster` (and --tests).
set -euo pipefail
cd "$(dirname "$0")/cluster"
# Go may be installed outside a non-interactive shell's PATH.
command -v go >/dev/null || [ ! -x /usr/local/go/bin/go ] || export PATH="/usr/local/go/bin:$PATH"
command -v go >/dev/null || { echo "Go is needed to build the control plane (go.mod: $(awk '/^go /{print $2}' go.mod))" >&2; exit 1; }
K8S=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
ETCD=$(cd etcd && go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
OUT="${LLMOP_CACHE:-$HOME/.cache/llm-operator}/kubernetes-$K8S-etcd-$ETCD/bin"
BINS=(etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy)
have=1; for b in "${BINS[@]}"; do [ -x "$OUT/$b" ] || have=0; done
if [ "$have" = 1 ]; then echo "control plane $K8S (etcd $ETCD): reusing $OUT"; exit 0; fi

export GOFLAGS="${GOFLAGS:-} -buildvcs=false"
start=$(date +%s)
mkdir -p "$OUT.tmp"
minor=${K8S#v1.}; minor=${minor%%.*}
LDFLAGS="-s -w -X k8s.io/component-base/version.gitVersion=$K8S -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
# Progress: `go build -v` names each package as it compiles it (cached ones are not named).
progress() {  # $1: label, $2: package count
  awk -v label="$1" -v total="$2" -v t0="$start" '
    { n++; if (n % 100 == 0) { printf "  %s: %d/%d packages compiled (%d s)\n", label, n, total, systime() - t0; fflush() } }
    END { printf "  %s: %d packages compiled (the rest were cached)\n", label, n }'
}
echo "==> Building Kubernetes $K8S (kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy) and etcd $ETCD into $OUT"
echo "    (first build on 2 cores: 5-11 minutes, 649 s on 2026-11-28; later runs reuse the binaries)"
# etcd builds beside Kubernetes, not after it: each build leaves a core idle while it
# links its binaries and at the narrow ends of its package graph, and the other fills it.
(cd etcd && total=$(go list -deps . | wc -l) && go mod download &&
 go build -v -trimpath -ldflags "-s -w" -o "$OUT.tmp/etcd" . 2>&1 | progress etcd "$total"
) > "$OUT.tmp/etcd.log" 2>&1 &
etcd_pid=$!
trap 'pkill -P "$etcd_pid" 2>/dev/null; kill "$etcd_pid" 2>/dev/null || true' EXIT  # a failure here
total=$(go list -deps ./cmd/kube | wc -l)
go mod download
# One program, linked once, run under each component's name (tools/cluster/cmd/kube).
go build -v -trimpath -ldflags "$LDFLAGS" -o "$OUT.tmp/kube" ./cmd/kube 2>&1 | progress kubernetes "$total"
for b in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy; do
  ln -f "$OUT.tmp/kube" "$OUT.tmp/$b"
done
echo "==> Kubernetes built in $(( $(date +%s) - start )) s; etcd:"
etcd_rc=0; wait "$etcd_pid" || etcd_rc=$?
trap - EXIT
cat "$OUT.tmp/etcd.log"; rm -f "$OUT.tmp/etcd.log"
[ "$etcd_rc" = 0 ] || { echo "etcd's build failed (above): exit $etcd_rc" >&2; exit "$etcd_rc"; }
for b in "${BINS[@]}"; do [ -x "$OUT.tmp/$b" ] || { echo "build did not produce $b" >&2; exit 1; }; done
rm -rf "$OUT"; mv "$OUT.tmp" "$OUT"
echo "==> Control plane built in $(( $(date +%s) - start )) s: $OUT"
