# What the benchmark scripts share; sourced, not run.

# One line naming this machine, for the top of a benchmark's output.
machine_line() {
  echo "machine: $(nproc) cores, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1); $(. /etc/os-release; echo "$PRETTY_NAME")"
}

# The median of the numbers on standard input, one a line.
median() { sort -g | awk '{a[NR]=$1} END {printf "%.1f", (a[int((NR+1)/2)] + a[int(NR/2)+1]) / 2}'; }

# The median ms of a train run's iterations from the third on (the first two warm up), read from
# its metrics file.
iteration_ms() { sed -n 's/.*"elapsed_ms": \([0-9.]*\).*/\1/p' "$1" | tail -n +3 | median; }
