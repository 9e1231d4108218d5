#!/usr/bin/env bash
# Build actionlint, the linter of GitHub Actions workflows that the unit tier runs on
# .github/workflows/*.yml (tests/unit/test_workflows.py), from its Go module on the module
# proxy, into $LLMOP_CACHE (default ~/.cache/llm-operator)/actionlint-VERSION/bin;
# reused after. Called by `bash tools/setup.sh --tests` and `--unit`, and by the test
# itself when the binary is missing. Prints the binary's path as its last line.
#
# The module is downloaded by exact version (its checksum checked against the one pinned
# below; `go install MOD@VERSION` asks the proxy for the version list, which answers 403
# here), copied to a scratch folder and `./cmd/actionlint` built there with the release's
# own go.mod and go.sum, at low priority. Timed on 2 cores (2026-12-05, at nice 19 beside
# two test runs): 138 s with empty Go caches (22 s of it CPU), 33 s with the modules
# already downloaded; later runs reuse the binary.
set -euo pipefail
VERSION=v1.7.12
SUM="h1:vQ4GeJN86C0QH+gTUQcs8McmK62OLT3kmakPMtEWYnY="  # go.sum line of github.com/rhysd/actionlint@v1.7.12
MOD=github.com/rhysd/actionlint
OUT="${LLMOP_CACHE:-$HOME/.cache/llm-operator}/actionlint-$VERSION"
reuse() {
  if [ -x "$OUT/bin/actionlint" ]; then
    echo "actionlint $VERSION: reusing $OUT" >&2
    echo "$OUT/bin/actionlint"; exit 0
  fi
}
reuse
# One build at a time (test workers may ask at once); the others wait, then reuse it.
mkdir -p "$(dirname "$OUT")"
exec 9>"$OUT.lock"
flock 9
reuse
command -v go >/dev/null || [ ! -x /usr/local/go/bin/go ] || export PATH="/usr/local/go/bin:$PATH"
command -v go >/dev/null || { echo "Go is needed to build actionlint (go.mod: go 1.25)" >&2; exit 1; }
export GOFLAGS="${GOFLAGS:-} -buildvcs=false"
start=$(date +%s)
echo "==> Building actionlint $VERSION into $OUT (first build on 2 cores: about 2 minutes)" >&2
info=$(cd / && go mod download -json "$MOD@$VERSION")
src=$(printf '%s' "$info" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
got=$(printf '%s' "$info" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Sum"])')
[ "$got" = "$SUM" ] || { echo "$MOD@$VERSION: checksum $got, expected $SUM" >&2; exit 1; }
rm -rf "$OUT.tmp"; mkdir -p "$OUT.tmp/bin"
work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
cp -r "$src" "$work/src"
chmod -R u+w "$work/src"
(cd "$work/src" && go mod download >&2 &&
 nice -n 15 go build -trimpath -ldflags "-s -w -X $MOD.version=$VERSION" \
   -o "$OUT.tmp/bin/actionlint" ./cmd/actionlint >&2)
"$OUT.tmp/bin/actionlint" -version >&2
rm -rf "$OUT"; mv "$OUT.tmp" "$OUT"
echo "==> actionlint built in $(( $(date +%s) - start )) s: $OUT" >&2
echo "$OUT/bin/actionlint"
