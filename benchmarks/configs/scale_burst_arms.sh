#!/usr/bin/env bash
# Issue 16.3, a burst of 1,000 LLMServices on the EMULATED API server: the arms compared,
# fixed here before any of them ran (benchmarks/data/scale/NOTES.md says what each is):
#
#   base-43cdc28     the operator as on main at 43cdc28 (before the render-first change)
#   worker-limit-50  the same, with kopf's settings.queueing.worker_limit = 50 and
#                    idle_timeout = 0.5 s (bounded concurrency, the next step RESULTS.md named)
#   render-first     this checkout's operator (the branch i16-burst)
#
# All with this checkout's emulator and client, interleaved in rotating order, REPEAT
# rounds (default 3), every run stored in benchmarks/data/scale/. Record `uptime` before.
#
#   bash benchmarks/configs/scale_burst_arms.sh            # 3 rounds x 3 arms, ~10 min
#   REPEAT=1 bash benchmarks/configs/scale_burst_arms.sh --write
set -euo pipefail
cd "$(dirname "$0")/../.."
arms=${ARMS_DIR:-/tmp/llmop-scale-arms}
rm -rf "$arms"
mkdir -p "$arms/base-43cdc28" "$arms/worker-limit-50"
git archive 43cdc28 operator | tar -x -C "$arms/base-43cdc28"
git archive 43cdc28 operator | tar -x -C "$arms/worker-limit-50"
handlers="$arms/worker-limit-50/operator/llm_operator/controller/handlers.py"
grep -q '    settings.execution.max_workers = 20' "$handlers"
sed -i 's/^    settings.execution.max_workers = 20$/&\n    settings.queueing.worker_limit = 50\n    settings.queueing.idle_timeout = 0.5/' \
  "$handlers"
grep -q 'worker_limit = 50' "$handlers"
uptime
exec .venv/bin/python -m benchmarks.scale --n 1000 --repeat "${REPEAT:-3}" --store \
  --config "base-43cdc28=$arms/base-43cdc28" --config "worker-limit-50=$arms/worker-limit-50" \
  --config render-first "$@"
