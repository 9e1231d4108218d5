#!/usr/bin/env bash
# Build the real nodes' attachable volume (llm_operator_sandbox.csi): Kubernetes' CSI
# external-attacher from its Go module on the module proxy, and this repository's CSI
# driver (tools/csi-driver), into $LLMOP_CACHE (default ~/.cache/llm-operator)/csi/bin;
# reused after (the driver is keyed by its source). Called by tools/build_images.sh, so
# by `bash tools/setup.sh --nodes`.
#
# The attacher's module is downloaded by exact version (its checksum checked against the
# one pinned below; `go install MOD@VERSION` refuses a module whose go.mod has replace
# directives, as this one's has), copied to a scratch folder and built there with the
# release's own go.mod and go.sum, as tools/build_lws.sh builds LeaderWorkerSet.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=v4.13.0  # keep in step with ATTACHER_VERSION (sandbox/llm_operator_sandbox/csi.py)
SUM="h1:lvr4pjyBc6TV57EB78mNrsg/KgaGFL5wc4Xe/i9Y+bM="  # go.sum line of the module below
MOD=github.com/kubernetes-csi/external-attacher/v4
command -v go >/dev/null || [ ! -x /usr/local/go/bin/go ] || export PATH="/usr/local/go/bin:$PATH"
command -v go >/dev/null || { echo "Go is needed to build the CSI attacher" >&2; exit 1; }
OUT="${LLMOP_CACHE:-$HOME/.cache/llm-operator}/csi/bin"
mkdir -p "$OUT"
export GOFLAGS="${GOFLAGS:-} -buildvcs=false"
if [ ! -x "$OUT/csi-attacher-$VERSION" ]; then
  start=$(date +%s)
  echo "==> the CSI external-attacher $VERSION (Go module proxy; about 2 minutes)"
  src=$(bash tools/go_module_src.sh "$MOD" "$VERSION" "$SUM")
  work=$(mktemp -d)
  trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
  cp -r "$src" "$work/src"
  chmod -R u+w "$work/src"
  (cd "$work/src" && go build -trimpath -ldflags "-s -w" -o "$OUT/csi-attacher.tmp" \
    ./cmd/csi-attacher)
  mv "$OUT/csi-attacher.tmp" "$OUT/csi-attacher-$VERSION"
  echo "    built in $(( $(date +%s) - start )) s"
fi
ln -sf "csi-attacher-$VERSION" "$OUT/csi-attacher"
HASH=$(cat tools/csi-driver/go.mod tools/csi-driver/go.sum tools/csi-driver/main.go \
  | sha256sum | cut -c1-12)
if [ ! -x "$OUT/csi-driver-$HASH" ]; then
  start=$(date +%s)
  echo "==> the nodes' CSI driver (tools/csi-driver; Go module proxy; about 1 min)"
  (cd tools/csi-driver && go build -trimpath -ldflags '-s -w' -o "$OUT/csi-driver.tmp" .)
  mv "$OUT/csi-driver.tmp" "$OUT/csi-driver-$HASH"
  echo "    built in $(( $(date +%s) - start )) s"
fi
ln -sf "csi-driver-$HASH" "$OUT/csi-driver"
