#!/usr/bin/env bash
# The test command: installs what the tests need, then lint, type check and every tier
# (unit, chart, integration against the emulated API server, Prometheus, vLLM on the CPU).
# Extra arguments go to pytest, e.g. `bash tools/test.sh -m unit` (which does not wait for
# the control plane's build: only a selection with cluster or nodes tests does, and one
# with them builds the cluster tier's two controllers too).
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
logs="$(mktemp -d)"
# Who held the machine-wide vLLM lock, and for how long (printed at the end): the two
# lanes' critical path is mostly that lock.
export LLMOP_VLLM_LOCK_LEDGER="$logs/vllm-lock.tsv"
# The control plane (a Go build: 649 s on 2 cores with little else running, the first
# time; cached in ~/.cache/llm-operator after) builds at low priority from the start,
# beside the installs and the first pytest step (1,351 s there, 2026-11-28), not before
# them: lane B (the cluster and nodes tiers) waits for it.
# The background jobs (bg_start, bg_wait; all stopped when this script exits).
source tools/background.sh
trap bg_stop EXIT
bg_start control-plane "$logs" bash tools/build_cluster.sh
control_plane() {  # wait for the build; its log; its exit status
  while ! bg_done control-plane "$logs"; do sleep 5; done
  printf '\n==> the control plane (tools/build_cluster.sh, in the background)\n'
  bg_wait control-plane "$logs"
}
# actionlint (a Go build, about 2 minutes the first time, then cached) starts beside the
# installs; setup.sh's own call below waits for it (the build holds a lock) or reuses it.
bg_start actionlint "$logs" bash tools/build_actionlint.sh
bash tools/setup.sh --tests --cluster-later
export PATH="$PWD/.cache/bin:$PWD/.venv/bin:$PATH"
export HF_HUB_OFFLINE=1
printf '\n==> ruff\n';  .venv/bin/ruff check operator sandbox tests benchmarks tools
printf '\n==> mypy\n';  .venv/bin/mypy
printf '\n==> import-linter (layering contracts in .importlinter)\n';  .venv/bin/lint-imports
printf '\n==> hadolint\n';  .venv/bin/hadolint Dockerfile
if [ $# -gt 0 ]; then  # pytest arguments given: one run with them
  # It waits for the control plane only when it selects a test that starts one (the
  # cluster and nodes tiers), as pytest --collect-only lists them (about 10 s for every
  # test); else the build stops with this script (`-m unit` waited up to 649 s for it).
  # A cluster or nodes test selected also needs the two Go-built controllers (built once,
  # then cached; the nodes tier serves the Prometheus Operator's CRDs), as the full run
  # builds them in lane B.
  selected="$(.venv/bin/python -m pytest --collect-only -q "$@" 2>/dev/null || true)"
  if grep -qE '^tests/(cluster|nodes)/' <<<"$selected"; then
    control_plane
  else
    printf '\n==> the control plane is not waited for: no cluster or nodes test selected\n'
  fi
  if grep -qE '^tests/(cluster|nodes)/' <<<"$selected"; then
    bash tools/setup.sh --controllers
  fi
  if grep -qE '^tests/nodes/' <<<"$selected"; then
    bash tools/setup.sh --nodes
  fi
  printf '\n==> pytest %s\n' "$*"
  rc=0
  .venv/bin/python -m pytest -ra --durations=15 "$@" || rc=$?
  exit "$rc"
fi

# Every tier, in two steps (one pytest run took 65 minutes here and 71 on CI; in two
# steps, with the control plane built first, .ci/run took 2,979-3,365 s on CI; with it
# built in the background, as below, 3,296 s on CI, 2026-11-28):
#   1. unit, chart and integration on 4 workers, alone: their tests mostly wait on the
#      processes they start (the integration tier: 195 s on 4 workers, 326 s on 2),
#      but beside vLLM servers on 2 cores those processes did not start within their
#      timeouts (2026-11-27);
#   2. two lanes at once: A, the tiers that run vLLM servers and time them (prometheus,
#      vllm), then the live cap on the oldest vLLM release it supports; B, the cluster
#      tier (one control plane for the session) and aic, then the nodes tier (its own
#      control plane, a real kubelet and containerd; it holds what was the e2e tier: the
#      adaptation under load and a killed engine, in containers). A vLLM server in either
#      lane takes the machine-wide lock (/tmp/llmop-vllm.lock): one at a time. Lane A's
#      output follows lane B's.
printf '\n==> [%d s] pytest: tests/unit tests/chart tests/integration (4 workers)\n' "$SECONDS"
rc_1=0
.venv/bin/python -m pytest -ra --durations=15 --basetemp=/tmp/llmop-tests-b -n 4 \
  --junitxml="$logs/junit-unit.xml" --dist loadfile tests/unit tests/chart tests/integration || rc_1=$?
# The live cap on the oldest vLLM release it supports (lane A's tiers run .venv-vllm's, the
# newest with a CPU build): an environment hard-linked from .venv-vllm, then the release
# test (tools/live_cap_matrix.sh; about 2 min, the environment cached after).
lanes_start=$SECONDS
OLDEST_LIVE_VLLM=$(PYTHONPATH=operator .venv/bin/python -c 'from llm_operator.knowledge.vllm_version import compat_table as t
table = t(); print(table.releases[table.supported()[0]][1])')
printf '\n==> pytest, lane A: tests/prometheus tests/vllm, then the live cap on vLLM %s (log: %s/lane-a.log)\n' \
  "$OLDEST_LIVE_VLLM" "$logs"
( rc=0
  .venv/bin/python -m pytest -ra --durations=15 --basetemp=/tmp/llmop-tests-a \
    --junitxml="$logs/junit-lane-a.xml" tests/prometheus tests/vllm || rc=$?
  printf '\n==> [%d s] lane A: the live cap on vLLM %s (tools/live_cap_matrix.sh)\n' "$SECONDS" \
    "$OLDEST_LIVE_VLLM"
  bash tools/live_cap_matrix.sh --release-only "$OLDEST_LIVE_VLLM" || rc=1
  echo "$SECONDS" > "$logs/lane-a.end"
  exit "$rc" ) > "$logs/lane-a.log" 2>&1 &
lane_a=$!
bg_add "$lane_a"  # it stops with this script, as the builds do
printf '\n==> [%d s] pytest, lane B: tests/cluster tests/aic\n' "$SECONDS"
rc_b=0
# The two Go-built controllers (the Prometheus Operator, for both tiers; LeaderWorkerSet,
# for the nodes tier's two-node group) are built here, beside lane A and at low priority, not in setup: lane B has the time to
# spare and lane A, the longest, starts without waiting for them.
control_plane || rc_b=$?
[ "$rc_b" -ne 0 ] || nice -n 15 bash tools/setup.sh --controllers || rc_b=$?
# The nodes tier's Debian packages, images and registry (383-472 s in the demo's first
# runs from empty caches, then cached) build beside the cluster tier, at low priority:
# that tier mostly waits on the API server. Lane B ran them one after the other before (2026-12-07).
bg_start nodes-setup "$logs" bash tools/setup.sh --nodes
[ "$rc_b" -ne 0 ] || .venv/bin/python -m pytest -ra --durations=15 \
  --basetemp=/tmp/llmop-tests-c --junitxml="$logs/junit-cluster.xml" \
  tests/cluster tests/aic || rc_b=$?
# The nodes tier (pods in real containers) after it, once its setup is done.
printf '\n==> [%d s] the nodes tier'"'"'s setup (tools/setup.sh --nodes, beside the cluster tier)\n' \
  "$SECONDS"
rc_n=0
bg_wait nodes-setup "$logs" || rc_n=$?
printf '\n==> [%d s] pytest, lane B: tests/nodes (real kubelet, containerd, images built here)\n' \
  "$SECONDS"
[ "$rc_n" -ne 0 ] || .venv/bin/python -m pytest -ra --durations=15 \
  --basetemp=/tmp/llmop-tests-n --junitxml="$logs/junit-nodes.xml" tests/nodes || rc_n=$?
[ "$rc_n" -eq 0 ] || rc_b=$rc_n
lane_b_end=$SECONDS
rc_a=0
wait "$lane_a" || rc_a=$?
lane_a_end=$(cat "$logs/lane-a.end" 2>/dev/null || echo "?")
printf '\n==> pytest, lane A: tests/prometheus tests/vllm, then the live cap on vLLM %s\n' \
  "$OLDEST_LIVE_VLLM"
cat "$logs/lane-a.log"
if [ -s "$LLMOP_VLLM_LOCK_LEDGER" ]; then
  printf '\n==> the vLLM lock: seconds held (and waited for) by tier, then the 12 longest holds\n'
  awk -F'\t' '{ split($1, p, "/"); t = (p[1] == "tests") ? p[2] : $1
                held[t] += $3; waited[t] += $2; n[t]++ }
    END { for (t in held) printf "    %-28s %6.0f s held, %6.0f s waited, %3d holds\n",
          t, held[t], waited[t], n[t] }' "$LLMOP_VLLM_LOCK_LEDGER" | sort -k2 -nr
  sort -t$'\t' -k3 -nr "$LLMOP_VLLM_LOCK_LEDGER" | head -12 |
    awk -F'\t' '{ printf "    %6.0f s held, %6.0f s waited  %s\n", $3, $2, $1 }'
fi
# What failed, one line each with the start of its message: a log cut to its tail says it.
.venv/bin/python tools/failures.py "$logs"/junit-*.xml || true
printf '\n==> [%d s] lanes started at %d s; lane A ended at %s s, lane B at %d s\n' \
  "$SECONDS" "$lanes_start" "$lane_a_end" "$lane_b_end"
printf '\n==> exit codes: unit/chart/integration %s; lane A %s; lane B %s\n' \
  "$rc_1" "$rc_a" "$rc_b"
[ "$rc_1" -eq 0 ] && [ "$rc_a" -eq 0 ] && [ "$rc_b" -eq 0 ]
