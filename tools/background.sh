# Background jobs for tools/test.sh and tools/demo.sh (sourced, not run): a command at low
# priority beside the script's own steps, its output in a log and its exit status in a
# file, stopped when the script exits.
#
#   bg_start NAME DIR CMD...   run CMD at nice 15, output to DIR/NAME.log
#   bg_done NAME DIR           true once it has ended
#   bg_wait NAME DIR           wait for it, print its log, return its exit status
#   bg_stop                    stop every job started here (the script's EXIT trap)
#   bg_add PID                 a job started otherwise, for bg_stop
BG_PIDS=()

bg_start() {
  local name=$1 dir=$2
  shift 2
  rm -f "$dir/$name.rc"
  ( rc=0; nice -n 15 "$@" > "$dir/$name.log" 2>&1 || rc=$?; echo "$rc" > "$dir/$name.rc" ) &
  BG_PIDS+=("$!")
}

bg_done() { [ -f "$2/$1.rc" ]; }

bg_wait() {
  local name=$1 dir=$2
  while ! bg_done "$name" "$dir"; do sleep 5; done
  cat "$dir/$name.log"
  return "$(cat "$dir/$name.rc")"
}

bg_add() { BG_PIDS+=("$1"); }

# A job's subshell and the command under it (the command's own children end with it).
bg_stop() {
  local p
  for p in "${BG_PIDS[@]}"; do
    pkill -P "$p" 2>/dev/null || true
    kill "$p" 2>/dev/null || true
  done
}
