#!/usr/bin/env bash
# Fetch the Gateway API Inference Extension's InferencePool CRD, as its release ships it,
# from the release's Go module on the module proxy, into $LLMOP_CACHE (default
# ~/.cache/llm-operator)/gateway-api-inference-extension-VERSION/crds/; reused after. The
# cluster tier installs it (llm_operator_sandbox.inference_extension) to check the
# InferencePool the operator renders against the real schema on the real API server.
# Called by `bash tools/setup.sh --controllers` (the cluster lane of `bash tools/test.sh`).
#
# Nothing is built: the module is downloaded by exact version (its checksum checked
# against the one pinned below; `go install MOD@VERSION` and version listing are not
# used, the proxy answers 403 for the list here) and its config/crd/bases copied.
set -euo pipefail
VERSION=v1.6.2  # keep in step with VERSION (sandbox/llm_operator_sandbox/inference_extension.py)
SUM="h1:GfTwDiMta9z6vtsZZuYE2xlryUGw+PiCdTJzYePY23M="  # go.sum line of the module at VERSION
MOD=sigs.k8s.io/gateway-api-inference-extension
command -v go >/dev/null || [ ! -x /usr/local/go/bin/go ] || export PATH="/usr/local/go/bin:$PATH"
command -v go >/dev/null || { echo "Go is needed to fetch the Inference Extension's CRD" >&2; exit 1; }
OUT="${LLMOP_CACHE:-$HOME/.cache/llm-operator}/gateway-api-inference-extension-$VERSION"
if [ -f "$OUT/crds/inference.networking.k8s.io_inferencepools.yaml" ]; then
  echo "Gateway API Inference Extension $VERSION: reusing $OUT"; exit 0
fi
info=$(cd / && go mod download -json "$MOD@$VERSION")
src=$(printf '%s' "$info" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
got=$(printf '%s' "$info" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Sum"])')
[ "$got" = "$SUM" ] || { echo "$MOD@$VERSION: checksum $got, expected $SUM" >&2; exit 1; }
rm -rf "$OUT.tmp"; mkdir -p "$OUT.tmp/crds"
cp "$src"/config/crd/bases/*.yaml "$OUT.tmp/crds/"
cp "$src/LICENSE" "$OUT.tmp/"
chmod -R u+w "$OUT.tmp"
rm -rf "$OUT"; mv "$OUT.tmp" "$OUT"
echo "==> Gateway API Inference Extension $VERSION CRDs in $OUT/crds"
