# Sourced by gpu_check.sh and jetson_check.sh: run a check under a time limit, keep its log, note the outcome.
#   step NAME SECONDS COMMAND...   COMMAND may be a shell function of the calling script
# Needs $step_log (the folder of NAME.log). STEP_SHOW=all prints the output as it comes (the device tool shows a
# command's tail), else the log's last 3 lines once it ends. Each step adds one line to the array `summary`.
summary=()
step() {
  local name=$1 limit=$2 t0 rc verdict
  shift 2
  if declare -F "$1" > /dev/null; then  # timeout runs programs: a function runs in a bash that is given its body
    set -- bash -c "$(declare -f "$1"); \"\$@\"" "$name" "$@"
  fi
  echo "=== $name (at most ${limit} s)"
  t0=$(date +%s)
  if [ "${STEP_SHOW:-}" = all ]; then
    timeout "$limit" "$@" 2>&1 | tee "$step_log/$name.log"
    rc=${PIPESTATUS[0]}
  else
    timeout "$limit" "$@" > "$step_log/$name.log" 2>&1
    rc=$?
    tail -n 3 "$step_log/$name.log"
  fi
  verdict="ok"
  [ "$rc" -ne 0 ] && verdict="FAILED (exit $rc$([ "$rc" -eq 124 ] && echo ', timed out'))"
  summary+=("$(printf '%-10s %-26s %5d s  %s' "$name" "$verdict" "$(($(date +%s) - t0))" "$(tail -n 1 "$step_log/$name.log" | cut -c1-100)")")
}
