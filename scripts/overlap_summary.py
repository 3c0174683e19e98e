"""How much of the communication ran beside computation, from an Nsight Systems GPU trace:

  nsys stats --report cuda_gpu_trace --format csv --output trace report.nsys-rep
  python3 scripts/overlap_summary.py trace_cuda_gpu_trace.csv

Kernels whose name contains "nccl" are communication, every other kernel computation. Prints,
per stream, the kernels and their busy time, then the communication time and the part of it
during which a computation kernel ran too (the overlap trident's communication streams are
for). Columns are found by their headers ("Start (ns)", "Duration (ns)", "Strm", "Name").
"""
import csv
import sys


def load(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    for i, row in enumerate(rows):  # nsys may print lines before the header
        if "Start (ns)" in row and "Duration (ns)" in row and "Name" in row:
            header = row
            break
    else:
        sys.exit(f"overlap_summary: {path} has no header with 'Start (ns)', 'Duration (ns)' and 'Name' "
                 "(expected nsys stats --report cuda_gpu_trace --format csv)")
    start, duration, name = header.index("Start (ns)"), header.index("Duration (ns)"), header.index("Name")
    stream = header.index("Strm") if "Strm" in header else None
    kernels = []
    for row in rows[i + 1:]:
        if len(row) < len(header) or not row[duration]:
            continue
        if row[name].startswith("[CUDA mem"):  # copies and memsets are not kernels
            continue
        begin = int(float(row[start]))
        kernels.append((begin, begin + int(float(row[duration])), row[stream] if stream is not None else "?",
                        "nccl" in row[name].lower()))
    if not kernels:
        sys.exit(f"overlap_summary: {path} lists no kernels")
    return kernels


def merged(intervals):
    out = []
    for begin, end in sorted(intervals):
        if out and begin <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([begin, end])
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: overlap_summary.py TRACE.csv")
    kernels = load(sys.argv[1])
    compute = merged((b, e) for b, e, _, comm in kernels if not comm)
    streams = {}
    for b, e, s, comm in kernels:
        entry = streams.setdefault(s, [0, 0, comm])
        entry[0] += 1
        entry[1] += e - b
    print("| stream | kernels | busy ms | holds |")
    print("| --- | --- | --- | --- |")
    for s, (count, busy, comm) in sorted(streams.items()):
        print(f"| {s} | {count} | {busy / 1e6:.3f} | {'communication' if comm else 'computation'} |")
    comm_ns = overlap_ns = 0
    for b, e, _, comm in kernels:
        if not comm:
            continue
        comm_ns += e - b
        overlap_ns += sum(max(0, min(e, ce) - max(b, cb)) for cb, ce in compute)
    share = f"{100 * overlap_ns / comm_ns:.1f}%" if comm_ns else "-"
    print(f"\ncommunication {comm_ns / 1e6:.3f} ms, beside computation {overlap_ns / 1e6:.3f} ms ({share})")


if __name__ == "__main__":
    main()
