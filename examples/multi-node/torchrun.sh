#!/usr/bin/env bash
# trident across nodes with torchrun: run this same script on every node, with NODE_RANK 0 on the
# node whose address is MASTER_ADDR. torchrun starts one `train` per GPU and sets RANK,
# WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT; trident needs nothing
# else (Gloo picks the interface that routes to MASTER_ADDR; GLOO_SOCKET_IFNAME overrides it).
#
#   NODE_RANK=0 NNODES=2 MASTER_ADDR=10.0.0.1 examples/multi-node/torchrun.sh [key=value ...]
#   NODE_RANK=1 NNODES=2 MASTER_ADDR=10.0.0.1 examples/multi-node/torchrun.sh [key=value ...]
#
# Open MASTER_PORT (rank 0's TCPStore) between the nodes, and Gloo's and NCCL's connections,
# which use any port: allow all TCP between the nodes on the training network.
set -euo pipefail
: "${NODE_RANK:?set NODE_RANK (0 on the MASTER_ADDR node, then 1, 2, ...)}"
: "${NNODES:?set NNODES, the number of nodes}"
: "${MASTER_ADDR:?set MASTER_ADDR to the address of node 0 on the network the nodes share}"
MASTER_PORT=${MASTER_PORT:-29500}
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
TRIDENT_BIN=${TRIDENT_BIN:-build}
CONFIG=${CONFIG:-configs/gpt1.7b.yaml}
TORCHRUN=${TORCHRUN:-torchrun}

# The static rendezvous: node 0's agent serves the store every rank meets at.
exec "$TORCHRUN" --nnodes="$NNODES" --nproc-per-node="$GPUS_PER_NODE" --node-rank="$NODE_RANK" \
  --master-addr="$MASTER_ADDR" --master-port="$MASTER_PORT" --no-python \
  "$TRIDENT_BIN/train" --config "$CONFIG" "$@"
