#!/usr/bin/env bash
# Starts N copies of a command as one torchrun-style job across N simulated hosts: each rank runs
# in a network namespace of its own, joined to the others by a bridge (10.77.0.0/24, rank r at
# 10.77.0.(r+1)), with only the variables torchrun sets on a multi-node job (RANK, WORLD_SIZE,
# LOCAL_RANK=0, LOCAL_WORLD_SIZE=1, MASTER_ADDR=rank 0's address, MASTER_PORT). The hosts keep
# this machine's /etc/hosts, where the host name resolves to a loopback address, as on Debian.
# Waits for all and exits with the first non-zero status (0 if all succeed). Needs root.
#
#   launch_hosts.sh N [--rate RATE] [--cut-link R [--once FILE TEXT] --after SECONDS] -- COMMAND [ARGS...]
#   launch_hosts.sh --check      (says why hosts cannot be simulated here, exit 1; or exit 0)
#
# --rate throttles every host's link with a token bucket (tc tbf, e.g. 100mbit); --cut-link takes
# rank R's link down after SECONDS, as a pulled cable would (counted from when FILE holds TEXT,
# waited for up to 120 s, with --once: a job that has started training). Every rank's output goes to stdout,
# prefixed with "[host r] ".
set -uo pipefail
source "$(dirname "$0")/launch_wait.sh"

tag=trident$$
cleanup() {
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$tag-"); do ip netns delete "$ns"; done
}
trap cleanup EXIT

if [ "${1:-}" = --check ]; then
  [ "$(id -u)" = 0 ] || { echo "simulated hosts need root (network namespaces)"; exit 1; }
  command -v ip >/dev/null || { echo "simulated hosts need iproute2's ip"; exit 1; }
  ip netns add "$tag-check" 2>/dev/null && ip -n "$tag-check" link add "$tag" type bridge 2>/dev/null ||
    { echo "simulated hosts need network namespaces and bridges, which this kernel refuses"; exit 1; }
  exit 0
fi

n=$1
shift
rate="" cut_rank="" cut_after=0 once_file="" once_text=""
while [ "$1" != "--" ]; do
  case $1 in
    --rate) rate=$2; shift 2 ;;
    --cut-link) cut_rank=$2; shift 2 ;;
    --after) cut_after=$2; shift 2 ;;
    --once) once_file=$2 once_text=$3; shift 3 ;;
    *) echo "launch_hosts.sh: unknown option $1" >&2; exit 64 ;;
  esac
done
shift

# The switch: a bridge in a namespace of its own; host r's cable is the veth pair
# (port r in the switch) <-> (eth0 in host r).
switch=$tag-switch
set -e
ip netns add "$switch"
ip -n "$switch" link add br0 type bridge
ip -n "$switch" link set br0 up
for ((rank = 0; rank < n; rank++)); do
  host=$tag-h$rank
  ip netns add "$host"
  ip link add "$tag-p$rank" netns "$switch" type veth peer name eth0 netns "$host"
  ip -n "$switch" link set "$tag-p$rank" master br0 up
  ip -n "$host" addr add "10.77.0.$((rank + 1))/24" dev eth0
  ip -n "$host" link set eth0 up
  ip -n "$host" link set lo up
  [ -z "$rate" ] || ip netns exec "$host" tc qdisc add dev eth0 root tbf rate "$rate" burst 64kb latency 100ms
done
set +e

pids=()
for ((rank = 0; rank < n; rank++)); do
  ip netns exec "$tag-h$rank" env RANK=$rank WORLD_SIZE=$n LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 \
    MASTER_ADDR=10.77.0.1 MASTER_PORT=29500 "$@" > >(sed -u "s/^/[host $rank] /") 2>&1 &
  pids+=($!)
done
if [ -n "$cut_rank" ]; then
  wait_for_text "$once_file" "$once_text"
  sleep "$cut_after"
  ip -n "$switch" link set "$tag-p$cut_rank" down
  echo "launch_hosts.sh: cut host $cut_rank's link"
fi
status=0
for pid in "${pids[@]}"; do
  wait "$pid"
  code=$?
  [ "$status" -ne 0 ] || status=$code
done
wait  # the output filters
exit "$status"
