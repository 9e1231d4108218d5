#!/usr/bin/env bash
# Build the Prometheus Operator the cluster tier runs beside the control plane (the test
# of the chart with kube-prometheus-stack's selectors), from the Go module proxy, into
# $LLMOP_CACHE (default ~/.cache/llm-operator)/prometheus-operator-VERSION/{bin,crds};
# reused after. Called by `bash tools/setup.sh --tests` only (the demo does not need it).
#
# The release's own go.mod points two of its modules at sub-folders (`replace ... =>
# ./pkg/apis/monitoring`, `./pkg/client`), which a module download leaves out, so `go
# install` refuses it: the source is copied from the module cache into a scratch folder,
# those two replaces are dropped for the same modules at the same version as published on
# the proxy (their checksums verified by the Go checksum database), and cmd/operator is
# built there. Nothing of it is kept but the binary and the release's CRDs.
set -euo pipefail
VERSION=v0.85.0  # keep in step with PROMETHEUS_OPERATOR_VERSION (prometheus_operator.py)
MOD=github.com/prometheus-operator/prometheus-operator
command -v go >/dev/null || [ ! -x /usr/local/go/bin/go ] || export PATH="/usr/local/go/bin:$PATH"
command -v go >/dev/null || { echo "Go is needed to build the Prometheus Operator" >&2; exit 1; }
OUT="${LLMOP_CACHE:-$HOME/.cache/llm-operator}/prometheus-operator-$VERSION"
if [ -x "$OUT/bin/operator" ] && ls "$OUT"/crds/*.yaml >/dev/null 2>&1; then
  echo "Prometheus Operator $VERSION: reusing $OUT"; exit 0
fi
export GOFLAGS="${GOFLAGS:-} -buildvcs=false"
start=$(date +%s)
echo "==> Building the Prometheus Operator $VERSION into $OUT (first build on 2 cores: about 5 minutes)"
src=$(go mod download -json "$MOD@$VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
cp -r "$src" "$work/src"
chmod -R u+w "$work/src"
cd "$work/src"
go mod edit -dropreplace "$MOD/pkg/apis/monitoring" -dropreplace "$MOD/pkg/client" \
  -require "$MOD/pkg/apis/monitoring@$VERSION" -require "$MOD/pkg/client@$VERSION"
go mod download
total=$(go list -mod=mod -deps ./cmd/operator | wc -l)
rm -rf "$OUT.tmp"; mkdir -p "$OUT.tmp/bin" "$OUT.tmp/crds"
go build -mod=mod -v -trimpath -ldflags "-s -w" -o "$OUT.tmp/bin/operator" ./cmd/operator 2>&1 |
  awk -v total="$total" -v t0="$start" '
    { n++; if (n % 100 == 0) { printf "  prometheus-operator: %d/%d packages compiled (%d s)\n", n, total, systime() - t0; fflush() } }
    END { printf "  prometheus-operator: %d packages compiled (the rest were cached)\n", n }'
[ -x "$OUT.tmp/bin/operator" ] || { echo "build did not produce the operator" >&2; exit 1; }
cp example/prometheus-operator-crd/*.yaml "$OUT.tmp/crds/"
rm -rf "$OUT"; mv "$OUT.tmp" "$OUT"
echo "==> Prometheus Operator built in $(( $(date +%s) - start )) s: $OUT"
