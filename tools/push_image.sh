#!/usr/bin/env bash
# Build the operator image from this checkout and push it to your registry, then print the
# `helm install` that uses it:
#
#   bash tools/push_image.sh registry.example.com/team/llm-operator:0.1.0
#   bash tools/push_image.sh REF --base debian   # on a machine with no Docker Hub access:
#                                                # the Python base built from Debian's
#                                                # packages (tools/build_images.sh)
#
# With a Docker engine it runs `docker build` and `docker push` (log in first with
# `docker login`); without one, buildah (`buildah login`, or REGISTRY_AUTH_FILE), the way
# the nodes tier builds and pushes the image it runs. The Dockerfile's default base is
# python:3.11-slim; no other step differs between the two bases.
set -euo pipefail
cd "$(dirname "$0")/.."
ref="${1:-}"
[ -n "$ref" ] && [[ "$ref" == */*:* ]] || {
  echo "usage: bash tools/push_image.sh REGISTRY/REPOSITORY:TAG [--base debian]" >&2; exit 2; }
base_args=()
if [ "${2:-}" = "--base" ]; then
  [ "${3:-}" = "debian" ] || { echo "--base takes 'debian' (the default is python:3.11-slim)" >&2
                               exit 2; }
  bash tools/build_images.sh >/dev/null
  base_args=(--build-arg "BASE=localhost/llmop/python:3.11-bookworm")
fi
version="${ref##*:}"
revision="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
if [ ${#base_args[@]} -eq 0 ] && docker info >/dev/null 2>&1; then
  docker build --build-arg "VERSION=$version" --build-arg "REVISION=$revision" -t "$ref" .
  docker push "$ref"
  digest=$(docker inspect --format '{{index .RepoDigests 0}}' "$ref"); digest="${digest#*@}"
else
  command -v buildah >/dev/null || { echo "needs docker (with an engine) or buildah" >&2; exit 1; }
  B=(buildah)
  if [ ${#base_args[@]} -gt 0 ]; then  # the base lives in build_images.sh's store
    store="${LLMOP_CACHE:-$HOME/.cache/llm-operator}/images"
    B=(buildah --root "$store/storage" --runroot "$store/run" --storage-driver overlay)
  fi
  # The host's CA bundle for the build's pip only (a proxy the host trusts); not in the image.
  ca=(); bundle=/etc/ssl/certs/ca-certificates.crt
  [ -f "$bundle" ] && ca=(-v "$bundle:$bundle:ro")
  "${B[@]}" bud --quiet --isolation chroot --layers=false "${base_args[@]}" "${ca[@]}" \
    --build-arg "VERSION=$version" --build-arg "REVISION=$revision" -t "$ref" . >/dev/null
  digestfile=$(mktemp)
  "${B[@]}" push --quiet --digestfile "$digestfile" ${PUSH_FLAGS:-} "$ref" "docker://$ref"
  digest=$(cat "$digestfile"); rm -f "$digestfile"
fi
registry="${ref%%/*}"; rest="${ref#*/}"; repository="${rest%:*}"
cat <<EOF
Pushed $ref ($digest). Install the chart with it:

  helm install llm-operator charts/llm-operator -n llm-operator --create-namespace \\
    --set image.registry=$registry --set image.repository=$repository \\
    --set image.digest=$digest
  # a private registry: kubectl create secret docker-registry regcred -n llm-operator ...
  #                     and --set 'imagePullSecrets[0].name=regcred'
EOF
