#!/usr/bin/env bash
# The test command: installs what the tests need, then lint, type check and every tier
# (unit, chart, integration against the emulated API server, Prometheus, vLLM on the CPU).
# Extra arguments go to pytest, e.g. `bash tools/test.sh -m unit`.
#
#   bash tools/test.sh --unit   # the cheap loop: only the project venv, lint, unit tier
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--unit" ]; then
  shift
  bash tools/setup.sh --unit
  export HF_HUB_OFFLINE=1
  printf '\n==> ruff\n';  .venv/bin/ruff check operator sandbox tests benchmarks tools
  printf '\n==> pytest -m unit\n'
  exec .venv/bin/python -m pytest -q -m unit "$@"
fi
bash tools/setup.sh --tests
export PATH="$PWD/.cache/bin:$PWD/.venv/bin:$PATH"
export HF_HUB_OFFLINE=1
printf '\n==> ruff\n';  .venv/bin/ruff check operator sandbox tests benchmarks tools
printf '\n==> mypy\n';  .venv/bin/mypy
printf '\n==> import-linter (layering contracts in .importlinter)\n';  .venv/bin/lint-imports
printf '\n==> hadolint\n';  .venv/bin/hadolint Dockerfile
printf '\n==> pytest\n'
.venv/bin/python -m pytest -ra --durations=15 "$@"
