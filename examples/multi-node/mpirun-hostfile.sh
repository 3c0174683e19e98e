#!/usr/bin/env bash
# trident across nodes with Open MPI's mpirun and a host file (one line per node:
# "node1 slots=8"), one `train` per GPU. mpirun starts the ranks over ssh and sets
# OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE; the CPU world is MPI, NCCL's on GPUs.
#
#   HOSTFILE=hosts examples/multi-node/mpirun-hostfile.sh [key=value ...]
#
# Every node needs the same paths (a shared file system, or the same install), passwordless ssh
# from the node running mpirun, and TCP open between the nodes (MPI and NCCL use any port).
# Give mpirun the training network if the nodes have several: MPI_INTERFACE=eth1.
set -euo pipefail
: "${HOSTFILE:?set HOSTFILE, a file with one line per node: name slots=GPUs}"
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
NP=${NP:-$(awk '{for (i = 2; i <= NF; i++) if ($i ~ /^slots=/) n += substr($i, 7)} END {print n}' "$HOSTFILE")}
TRIDENT_BIN=${TRIDENT_BIN:-build}
CONFIG=${CONFIG:-configs/gpt1.7b.yaml}
interface=()
[ -z "${MPI_INTERFACE:-}" ] || interface=(--mca btl_tcp_if_include "$MPI_INTERFACE" --mca oob_tcp_if_include "$MPI_INTERFACE")

# --map-by ppr:N:node places N ranks per node in order, so that ranks 0..N-1 share node 0 and
# tensor parallelism (innermost) stays inside a node. -x passes NCCL's and trident's variables on.
exec mpirun --hostfile "$HOSTFILE" -np "$NP" --map-by "ppr:$GPUS_PER_NODE:node" --bind-to none \
  "${interface[@]}" -x PATH -x LD_LIBRARY_PATH -x 'NCCL_*' \
  ${MPIRUN_OPTIONS:-} "$TRIDENT_BIN/train" --config "$CONFIG" "$@"
