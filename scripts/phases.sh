# Timing of a run's phases, sourced by scripts/test and .ci/run:
#   phase NAME COMMAND...   runs COMMAND, records NAME, its seconds and its exit status in
#                           $TRIDENT_PHASES (a file; none set: nothing is recorded) and returns
#                           the command's status
#   phase_table             prints the recorded phases as a table, with their total
phase() {
  local name=$1 start=$SECONDS status=0
  shift
  "$@" || status=$?
  [ -n "${TRIDENT_PHASES:-}" ] &&
    printf '%s\t%d\t%d\n' "$name" $((SECONDS - start)) "$status" >> "$TRIDENT_PHASES"
  return "$status"
}

phase_table() {
  [ -s "${TRIDENT_PHASES:-}" ] || return 0
  awk -F'\t' '
    BEGIN { printf "%-40s %8s  %s\n", "phase", "seconds", "result" }
    { printf "%-40s %8d  %s\n", $1, $2, ($3 == 0 ? "ok" : "FAILED (" $3 ")") }' "$TRIDENT_PHASES"
}
