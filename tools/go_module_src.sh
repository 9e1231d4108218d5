#!/usr/bin/env bash
# Print the folder of a Go module release downloaded from the module proxy, once its
# checksum matches the go.sum line pinned by the caller:
#
#   src=$(bash tools/go_module_src.sh MODULE VERSION 'h1:...')
#
# `go install MOD@VERSION` is refused for some releases (a go.mod with replace
# directives, or a proxy that answers the version list with 403); the build scripts copy
# this folder and build there with the release's own go.mod and go.sum.
set -euo pipefail
[ "$#" = 3 ] || { echo "usage: $0 MODULE VERSION SUM" >&2; exit 2; }
command -v go >/dev/null || [ ! -x /usr/local/go/bin/go ] || export PATH="/usr/local/go/bin:$PATH"
info=$(cd / && go mod download -json "$1@$2")
got=$(printf '%s' "$info" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Sum"])')
[ "$got" = "$3" ] || { echo "$1@$2: checksum $got, expected $3" >&2; exit 1; }
printf '%s' "$info" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])'
