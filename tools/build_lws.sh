#!/usr/bin/env bash
# Build the LeaderWorkerSet controller the nodes tier runs beside the control plane (the
# two-node group of tests/nodes/test_multi_node_in_containers.py), from its Go module on the module
# proxy, into $LLMOP_CACHE (default ~/.cache/llm-operator)/lws-VERSION/{bin,config};
# reused after. Called at the start of the cluster lane of `bash tools/test.sh`, and by
# `bash tools/setup.sh --lws`.
#
# The release's module is downloaded by exact version (its checksum checked against the
# one pinned below; `go install MOD@VERSION` is refused here, since it asks the proxy for
# the version list, which answers 403), copied to a scratch folder and its manager
# (`./cmd`) built there with the release's own go.mod and go.sum. From the same download,
# the release's CRD and webhook manifests are kept beside the binary:
# llm_operator_sandbox.lws installs them from there.
set -euo pipefail
VERSION=v0.7.0  # keep in step with LWS_VERSION (sandbox/llm_operator_sandbox/lws.py)
SUM="h1:qWfzX8+UBak+Hq0+m/PuE3uO0mp/3dmm5q/h/7z31A8="  # go.sum line of sigs.k8s.io/lws@v0.7.0
MOD=sigs.k8s.io/lws
command -v go >/dev/null || [ ! -x /usr/local/go/bin/go ] || export PATH="/usr/local/go/bin:$PATH"
command -v go >/dev/null || { echo "Go is needed to build the LeaderWorkerSet controller" >&2; exit 1; }
OUT="${LLMOP_CACHE:-$HOME/.cache/llm-operator}/lws-$VERSION"
if [ -x "$OUT/bin/lws-manager" ] && [ -f "$OUT/config/crd.yaml" ]; then
  echo "LeaderWorkerSet $VERSION: reusing $OUT"; exit 0
fi
export GOFLAGS="${GOFLAGS:-} -buildvcs=false"
start=$(date +%s)
echo "==> Building the LeaderWorkerSet controller $VERSION into $OUT (first build on 2 cores: about 2 minutes)"
src=$(bash "$(dirname "$0")/go_module_src.sh" "$MOD" "$VERSION" "$SUM")
rm -rf "$OUT.tmp"; mkdir -p "$OUT.tmp/bin" "$OUT.tmp/config"
work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
cp -r "$src" "$work/src"
chmod -R u+w "$work/src"
(cd "$work/src" && go mod download && go build -trimpath -ldflags "-s -w" -o "$OUT.tmp/bin/lws-manager" ./cmd)
cp "$src/config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml" "$OUT.tmp/config/crd.yaml"
cp "$src/config/webhook/manifests.yaml" "$OUT.tmp/config/webhooks.yaml"
cp "$src/config/webhook/mutating-patch.yaml" "$src/config/webhook/validating-patch.yaml" "$OUT.tmp/config/"
chmod -R u+w "$OUT.tmp"
rm -rf "$OUT"; mv "$OUT.tmp" "$OUT"
echo "==> LeaderWorkerSet controller built in $(( $(date +%s) - start )) s: $OUT"
