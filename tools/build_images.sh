#!/usr/bin/env bash
# Build the container images the real nodes run, here, with no registry reachable:
#
#   localhost/llmop/python:3.11-bookworm  a Python base from Debian's packages (mmdebstrap:
#                                         python3, venv, pip), standing in for the
#                                         Dockerfile's default python:3.11-slim
#   localhost/llmop/pause:3.10            Kubernetes' pause, compiled from the kubelet
#                                         tree's build/pause/linux/pause.c (static)
#   localhost/llm-operator:src-HASH       the project's Dockerfile, unchanged but for
#                                         --build-arg BASE=<the base above>; HASH is
#                                         the content of its build context, so an edit
#                                         to operator/ builds a new image
#   localhost/llmop/vllm-cpu:VERSION-HASH   with --vllm: tools/build_vllm_image.sh
#
# and the nodes' host binaries, each from its Go module: the registry, CoreDNS, the
# device plugin (tools/device-plugin), and the CSI driver and attacher (tools/build_csi.sh).
#
# buildah builds them (chroot isolation, no daemon) into a store under the cache
# ($LLMOP_CACHE, default ~/.cache/llm-operator/images), reused by later runs: a run with
# nothing changed takes about a second. Prints the operator image's name last.
# Called by `bash tools/setup.sh --nodes`. Timings on this 2-core machine (2026-12-05):
# the base 31-69 s, the operator image 30-53 s, the registry 290 s with an empty Go build
# cache (niced, beside the control plane's build; all of distribution's storage drivers
# then, see tools/registry) and 3 s with a warm one.
set -euo pipefail
cd "$(dirname "$0")/.."
with_vllm=0 without_csi=0
for arg in "$@"; do
  case "$arg" in
    --vllm) with_vllm=1 ;;
    --without-csi) without_csi=1 ;;
    *) echo "usage: bash tools/build_images.sh [--vllm] [--without-csi]" >&2; exit 2 ;;
  esac
done
CACHE="${LLMOP_CACHE:-$HOME/.cache/llm-operator}/images"
mkdir -p "$CACHE"
B=(buildah --root "$CACHE/storage" --runroot "$CACHE/run" --storage-driver overlay)
BASE=localhost/llmop/python:3.11-bookworm
PAUSE=localhost/llmop/pause:3.10
# The OCI registry: tools/registry (distribution's own command with the filesystem
# driver and htpasswd only: 573 packages to build where its cmd/registry has 1,000),
# keyed by its version and that main.
REGISTRY_VERSION=$(awk '$1 == "require" && $2 == "github.com/distribution/distribution/v3" {print $3}' \
  tools/registry/go.mod)
REGISTRY_VERSION="$REGISTRY_VERSION-$(cat tools/registry/main.go tools/registry/go.sum | sha256sum | cut -c1-8)"
if [ ! -x "$CACHE/bin/registry-$REGISTRY_VERSION" ]; then
  echo "==> the OCI registry (distribution $REGISTRY_VERSION, Go module proxy; about a minute)"
  command -v go >/dev/null || export PATH="/usr/local/go/bin:$PATH"
  s=$(date +%s)
  mkdir -p "$CACHE/bin"
  (cd tools/registry && GOFLAGS="${GOFLAGS:-} -buildvcs=false" go build -trimpath \
    -ldflags '-s -w' -o "$CACHE/bin/registry.tmp" .)
  mv "$CACHE/bin/registry.tmp" "$CACHE/bin/registry-$REGISTRY_VERSION"
  echo "    built in $(( $(date +%s) - s )) s"
fi
ln -sf "registry-$REGISTRY_VERSION" "$CACHE/bin/registry"
# CoreDNS, the nodes' cluster DNS: tools/coredns (CoreDNS's module, the plugins a cluster's
# Corefile uses). Measured here: 140 s with an empty module cache, 2 s once cached.
COREDNS_VERSION=$(awk '$1 == "require" && $2 == "github.com/coredns/coredns" {print $3}' \
  tools/coredns/go.mod)
if [ ! -x "$CACHE/bin/coredns-$COREDNS_VERSION" ]; then
  echo "==> CoreDNS $COREDNS_VERSION (Go module proxy; about 2 min)"
  command -v go >/dev/null || export PATH="/usr/local/go/bin:$PATH"
  s=$(date +%s)
  mkdir -p "$CACHE/bin"
  (cd tools/coredns && GOFLAGS="${GOFLAGS:-} -buildvcs=false" go build -trimpath \
    -ldflags '-s -w' -o "$CACHE/bin/coredns.tmp" .)
  mv "$CACHE/bin/coredns.tmp" "$CACHE/bin/coredns-$COREDNS_VERSION"
  echo "    built in $(( $(date +%s) - s )) s"
fi
ln -sf "coredns-$COREDNS_VERSION" "$CACHE/bin/coredns"
# The nodes' device plugin (tools/device-plugin: the kubelet's device-plugin API, 8
# stand-in nvidia.com/gpu), keyed by its source. Measured here: 48 s on one core with
# empty caches (2026-12-06).
PLUGIN_HASH=$(cat tools/device-plugin/go.mod tools/device-plugin/go.sum \
  tools/device-plugin/main.go | sha256sum | cut -c1-12)
if [ ! -x "$CACHE/bin/device-plugin-$PLUGIN_HASH" ]; then
  echo "==> the nodes' device plugin (tools/device-plugin; Go module proxy; about 1 min)"
  command -v go >/dev/null || export PATH="/usr/local/go/bin:$PATH"
  s=$(date +%s)
  mkdir -p "$CACHE/bin"
  (cd tools/device-plugin && GOFLAGS="${GOFLAGS:-} -buildvcs=false" go build -trimpath \
    -ldflags '-s -w' -o "$CACHE/bin/device-plugin.tmp" .)
  mv "$CACHE/bin/device-plugin.tmp" "$CACHE/bin/device-plugin-$PLUGIN_HASH"
  echo "    built in $(( $(date +%s) - s )) s"
fi
ln -sf "device-plugin-$PLUGIN_HASH" "$CACHE/bin/device-plugin"
# The nodes' attachable volume: the CSI external-attacher and tools/csi-driver (the nodes
# tier's Multi-Attach test). The demo mounts no such volume: --without-csi skips them
# (the attacher's first build is 2-4 minutes of both cores, beside the control plane's).
[ "$without_csi" = 1 ] || bash tools/build_csi.sh
have() { "${B[@]}" inspect --type image "$1" >/dev/null 2>&1; }
t() { date +%s; }

if ! have "$BASE"; then
  echo "==> $BASE from Debian's packages (mmdebstrap, about 70 s)"
  s=$(t)
  ctr=$("${B[@]}" from scratch)
  mnt=$("${B[@]}" mount "$ctr")
  mmdebstrap --quiet --variant=minbase \
    --include=python3,python3-venv,python3-pip,python-is-python3,ca-certificates \
    bookworm "$mnt" http://deb.debian.org/debian
  # As python:3.11-slim: pip may install (no PEP 668 marker), no apt lists in the layer.
  rm -rf "$mnt/usr/lib/python3.11/EXTERNALLY-MANAGED" "$mnt"/var/lib/apt/lists/* \
    "$mnt"/var/cache/apt/*.bin
  "${B[@]}" umount "$ctr" >/dev/null
  "${B[@]}" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env LANG=C.UTF-8 --cmd python3 "$ctr"
  "${B[@]}" commit -q "$ctr" "$BASE" >/dev/null
  "${B[@]}" rm "$ctr" >/dev/null
  echo "    built in $(( $(t) - s )) s"
fi

if ! have "$PAUSE"; then
  echo "==> $PAUSE from the kubelet tree's pause.c"
  command -v go >/dev/null || export PATH="/usr/local/go/bin:$PATH"
  src="$(cd tools/cluster && go list -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause/linux/pause.c"
  [ -f "$src" ] || (cd tools/cluster && go mod download k8s.io/kubernetes)
  work=$(mktemp -d)
  gcc -Os -Wall -Werror -static -DVERSION=3.10 -o "$work/pause" "$src"
  ctr=$("${B[@]}" from scratch)
  "${B[@]}" copy "$ctr" "$work/pause" /pause >/dev/null
  "${B[@]}" config --entrypoint '["/pause"]' --user 65535:65535 "$ctr"
  "${B[@]}" commit -q "$ctr" "$PAUSE" >/dev/null
  "${B[@]}" rm "$ctr" >/dev/null
  rm -rf "$work"
fi

# The operator image: keyed by the content of what .dockerignore lets into the context.
hash=$( { sha256sum Dockerfile .dockerignore pyproject.toml README.md
          git ls-files -co --exclude-standard operator | grep -v -E '__pycache__|\.pyc$' \
            | sort | xargs sha256sum; } | sha256sum | cut -c1-12)
OPERATOR="localhost/llm-operator:src-$hash"
if ! have "$OPERATOR"; then
  echo "==> $OPERATOR from ./Dockerfile (BASE=$BASE)"
  s=$(t)
  # The host's CA bundle is mounted for the build's pip only (this machine may reach PyPI
  # through a proxy its own bundle trusts); the image keeps the base's.
  "${B[@]}" bud --quiet --isolation chroot --pull=never --layers=false \
    --build-arg "BASE=$BASE" --build-arg "VERSION=src-$hash" \
    --build-arg "REVISION=$(git rev-parse HEAD 2>/dev/null || echo unknown)" \
    -v /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro \
    -t "$OPERATOR" -f Dockerfile . >/dev/null
  echo "    built in $(( $(t) - s )) s"
  # Earlier operator images (another source): 160 MB each, never used again.
  "${B[@]}" images --format '{{.Name}}:{{.Tag}}' | grep '^localhost/llm-operator:src-' \
    | grep -vxF "$OPERATOR" | xargs -r "${B[@]}" rmi >/dev/null || true
fi
printf '%s\n' "$BASE" "$PAUSE" "$OPERATOR" > "$CACHE/built.txt"
# --vllm: the vLLM CPU image too (tools/build_vllm_image.sh, about 6 GB, 4 min)
if [ "$with_vllm" = 1 ]; then
  # CI (.ci/run sets LLMOP_LEAN_DISK=1): every Go binary the tests run is built and
  # cached by now (the control plane, the controllers, the registry, CoreDNS, the device
  # plugin, pause), and a new machine never builds again, so Go's build and module
  # caches (11 GB here) go before the largest write: the vLLM image's build took 15 GB
  # more at its peak (measured, 2026-12-06), and CI's disk ran out there with the caches
  # kept. Never set on a developer's machine.
  if [ "${LLMOP_LEAN_DISK:-}" = 1 ]; then
    command -v go >/dev/null || export PATH="/usr/local/go/bin:$PATH"
    echo "==> freeing Go's caches (LLMOP_LEAN_DISK=1): $(df -h --output=avail "$CACHE" | tail -1 | tr -d ' ') free before"
    go clean -cache -modcache
  fi
  echo "==> $(df -h --output=avail "$CACHE" | tail -1 | tr -d ' ') free on the image store's disk"
  bash tools/build_vllm_image.sh
fi
echo "==> images ($CACHE/storage):"
"${B[@]}" images --format '    {{.Name}}:{{.Tag}}  {{.Size}}'
