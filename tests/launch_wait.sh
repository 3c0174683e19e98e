# Sourced by the test launchers: wait_for_text FILE TEXT waits until FILE holds TEXT (a job's
# log line), for up to 120 s; with an empty FILE it returns at once. Gives up saying so (the job
# died first, or never got there), and returns 1.
wait_for_text() {
  [ -n "$1" ] || return 0
  for _ in $(seq 600); do
    ! grep -qsF -- "$2" "$1" || return 0
    sleep 0.2
  done
  echo "launcher: '$2' never appeared in $1 within 120 s" >&2
  return 1
}
