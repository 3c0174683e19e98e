#!/usr/bin/env bash
# Runs a recipe of examples/multi-node at toy scale (gpt-tiny, synthetic tokens, 2 ranks on the
# CPU) and checks that it trained:
#   torchrun  2 simulated hosts (tests/launch_hosts.sh) x 2 processes, each node started as the
#             recipe says with NODE_RANK only, torchrun a stand-in that sets its variables
#   mpirun    the host-file recipe with "localhost slots=2"
#   slurm     the batch script run by bash, its srun a stand-in that starts the tasks with mpirun
# Exits 77 (skipped) when the recipe cannot run here, saying why.
#
#   multi_node_recipes.sh RECIPE BINARY_DIR SOURCE_DIR
set -uo pipefail
recipe=$1 bin=$2 src=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
toy=(data.type=synthetic train.iters=2 batch.micro_batch_size=4 train.eval_interval=0 train.log_interval=1
     model.num_layers=2 model.hidden_size=32 model.num_attention_heads=2 model.seq_length=32)
skip() { echo "skipped: $*"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
cd "$work"
ranks=2

case $recipe in
  torchrun)
    why=$("$src/tests/launch_hosts.sh" --check) || skip "$why"
    "$bin/train" --version | grep -q gloo || skip "this trident has no Gloo"
    # torchrun's part, as its static rendezvous does it without an agent store (a torchrun of
    # another PyTorch than trident's LibTorch serves a store trident's client cannot speak):
    # nproc processes per node, ranked node_rank * nproc + local rank.
    mkdir stand-in
    cat > stand-in/torchrun <<'STANDIN'
#!/usr/bin/env bash
for a in "$@"; do case $a in --nnodes=*) nnodes=${a#*=} ;; --nproc-per-node=*) nproc=${a#*=} ;;
  --node-rank=*) node=${a#*=} ;; --master-addr=*) addr=${a#*=} ;; --master-port=*) port=${a#*=} ;;
  --no-python) ;; --*) echo "torchrun stand-in: unknown $a" >&2; exit 64 ;; *) break ;; esac; shift; done
for ((l = 0; l < nproc; l++)); do
  RANK=$((node * nproc + l)) WORLD_SIZE=$((nnodes * nproc)) LOCAL_RANK=$l LOCAL_WORLD_SIZE=$nproc \
    MASTER_ADDR=$addr MASTER_PORT=$port "$@" & pids+=($!); done
status=0; for p in "${pids[@]}"; do wait "$p" || status=$?; done; exit $status
STANDIN
    chmod +x stand-in/torchrun
    # launch_hosts.sh gives each host RANK and MASTER_ADDR/PORT; a node knows only its NODE_RANK.
    output=$("$src/tests/launch_hosts.sh" 2 -- env TORCHRUN="$work/stand-in/torchrun" TRIDENT_BIN="$bin" \
      CONFIG="$src/configs/gpt-tiny.yaml" GPUS_PER_NODE=2 bash -c \
      'export NODE_RANK=$RANK NNODES=$WORLD_SIZE; unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE;
       exec "$0" "$@"' "$src/examples/multi-node/torchrun.sh" "${toy[@]}" 2>&1)
    ranks=4 ;;
  mpirun)
    "$bin/train" --version | grep -q mpi || skip "this trident has no MPI"
    echo "localhost slots=2" > hosts
    output=$(HOSTFILE=hosts GPUS_PER_NODE=2 TRIDENT_BIN="$bin" CONFIG="$src/configs/gpt-tiny.yaml" \
      MPIRUN_OPTIONS=--oversubscribe "$src/examples/multi-node/mpirun-hostfile.sh" "${toy[@]}" 2>&1) ;;
  slurm)
    "$bin/train" --version | grep -q mpi || skip "this trident has no MPI"
    mkdir stand-in
    printf '#!/usr/bin/env bash\nwhile [ "${1#--}" != "$1" ]; do shift; done\nexec mpirun --oversubscribe -np "$SLURM_NTASKS" "$@"\n' > stand-in/srun
    chmod +x stand-in/srun
    output=$(PATH="$work/stand-in:$PATH" SLURM_JOB_NAME=trident-test SLURM_NTASKS=2 TRIDENT_BIN="$bin" \
      CONFIG="$src/configs/gpt-tiny.yaml" bash "$src/examples/multi-node/slurm.sbatch" train.device=cpu "${toy[@]}" 2>&1) ;;
  *) echo "multi_node_recipes.sh: unknown recipe $recipe" >&2; exit 64 ;;
esac
status=$?
echo "$output"
[ "$status" -eq 0 ] || { echo "FAILED: the $recipe recipe exited with $status"; exit 1; }
echo "$output" | grep -q "$ranks process(es)" || { echo "FAILED: not $ranks processes"; exit 1; }
echo "$output" | grep -q "iter 2/2 " || { echo "FAILED: did not train 2 iterations"; exit 1; }
echo "the $recipe recipe trained with $ranks processes"
