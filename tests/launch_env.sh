#!/usr/bin/env bash
# Starts N copies of a command as one torchrun-style (env://) job on this machine: RANK,
# WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and a free MASTER_PORT.
# Waits for all and exits with the first non-zero status (0 if all succeed).
#
#   launch_env.sh N [--kill-rank R [--once FILE TEXT | --once-said TEXT] --after SECONDS [--signal SIG]]
#                 -- COMMAND [ARGS...]
#
# --kill-rank sends rank R a signal (KILL unless --signal says otherwise, e.g. STOP to make it
# hang) after SECONDS (counted from when FILE holds TEXT, with --once, or the job's own output
# does, with --once-said: a job that has started training, not one whose ranks still meet), to
# test that the others then fail instead of hanging; a rank still
# alive once the others are done is killed. Every rank's output goes to stdout, prefixed with
# its rank.
set -uo pipefail
source "$(dirname "$0")/launch_wait.sh"
n=$1
shift
kill_rank="" kill_after=0 signal=KILL once_file="" once_text="" said=/dev/null
while [ "$1" != "--" ]; do
  case $1 in
    --kill-rank) kill_rank=$2; shift 2 ;;
    --after) kill_after=$2; shift 2 ;;
    --signal) signal=$2; shift 2 ;;
    --once) once_file=$2 once_text=$3; shift 3 ;;
    --once-said)
      said=$(mktemp) || exit 70
      trap 'rm -f "$said"' EXIT
      once_file=$said once_text=$2
      shift 2 ;;
    *) echo "launch_env.sh: unknown option $1" >&2; exit 64 ;;
  esac
done
shift

# A port nobody listens on, below Linux's ephemeral range (32768 and up), where a client
# connection of some other program could hold it.
port=0
for _ in $(seq 50); do
  candidate=$((20000 + RANDOM % 12000))
  if ! (echo >/dev/tcp/127.0.0.1/$candidate) 2>/dev/null; then port=$candidate; break; fi
done
[ "$port" -ne 0 ] || { echo "launch_env.sh: no free port" >&2; exit 69; }

pids=()
for ((rank = 0; rank < n; rank++)); do
  RANK=$rank WORLD_SIZE=$n LOCAL_RANK=$rank LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 \
    MASTER_PORT=$port "$@" > >(sed -u "s/^/[rank $rank] /" | tee -a "$said") 2>&1 &
  pids+=($!)  # the command's own pid: its output goes through the process substitution
done
if [ -n "$kill_rank" ]; then
  wait_for_text "$once_file" "$once_text"
  sleep "$kill_after"
  kill -"$signal" "${pids[$kill_rank]}"
fi
status=0
for rank in "${!pids[@]}"; do
  [ "$rank" != "$kill_rank" ] || continue
  wait "${pids[$rank]}"
  code=$?
  [ "$status" -ne 0 ] || status=$code
done
if [ -n "$kill_rank" ]; then
  kill -KILL "${pids[$kill_rank]}" 2>/dev/null
  wait "${pids[$kill_rank]}" 2>/dev/null
fi
wait  # the output filters
exit "$status"
