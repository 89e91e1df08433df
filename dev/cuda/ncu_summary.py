#!/usr/bin/env python3
"""Sums an `ncu --csv` log by kernel name: python3 dev/cuda/ncu_summary.py $OUT/ncu-BDH-8k.csv

With gpu__time_duration.sum alone (scripts/cuda_device_run.sh profile) it prints a line per kernel,
    name  launches N launches  T ms
(column 4 the milliseconds: callers sort with `sort -k4 -g -r`). Where the log also holds
dram__bytes_read.sum and dram__bytes_write.sum, each line goes on with the DRAM traffic and the
rate it reached, as a fraction of the 4.3 TB/s that `rhoscan bench`'s limit assumes (how far a
kernel is from its own traffic floor); with smsp__inst_executed.sum (or sm__inst_executed.sum), the
warp instructions it issued (what bounds the issue-bound kernels). Units are read from the log's
"Metric Unit" column (ncu scales them: ns / usecond / msecond, byte / Kbyte / Mbyte / Gbyte).
"""
import collections
import csv
import sys

DRAM_PEAK = 4.3e12  # bytes per second, as in rhoscan bench's physical limit
DURATION = "gpu__time_duration.sum"
DRAM_READ, DRAM_WRITE = "dram__bytes_read.sum", "dram__bytes_write.sum"
INSTRUCTIONS = ("smsp__inst_executed.sum", "sm__inst_executed.sum")

# ncu's unit prefixes are decimal (Kbyte = 1e3 bytes)
PREFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
TIME = {"ns": 1e-9, "nsecond": 1e-9, "us": 1e-6, "usecond": 1e-6, "ms": 1e-3, "msecond": 1e-3, "s": 1.0, "second": 1.0}


def base_value(value, unit):
    """The metric's value in base units (seconds for times, bytes, instructions, ...)."""
    v = float(value.replace(",", ""))
    if unit in TIME:
        return v * TIME[unit]
    if len(unit) > 1 and unit[0] in PREFIX and unit[1:] in ("byte", "inst", "warp", "cycle"):
        return v * PREFIX[unit[0]]
    return v


def summarize(path):
    """{kernel: {metric: sum over launches}}, {kernel: launches}, in the log's order of kernels."""
    total, launches = collections.OrderedDict(), collections.OrderedDict()
    hdr = None
    for row, r in enumerate(csv.reader(open(path))):
        if "Kernel Name" in r:
            hdr = r
            continue
        if not hdr or len(r) != len(hdr):
            continue
        name = r[hdr.index("Kernel Name")].split("(")[0].split("<")[0].replace("void ", "")
        metric = r[hdr.index("Metric Name")] if "Metric Name" in hdr else DURATION
        unit = r[hdr.index("Metric Unit")] if "Metric Unit" in hdr else "ns"
        try:
            value = base_value(r[hdr.index("Metric Value")], unit)
        except ValueError:  # "n/a" and the like
            continue
        sums = total.setdefault(name, collections.Counter())
        sums[metric] += value
        launches.setdefault(name, set()).add(r[hdr.index("ID")] if "ID" in hdr else row)
    return total, {name: len(ids) for name, ids in launches.items()}


def lines(total, launches):
    out = []
    for name, m in total.items():
        line = f"{name:40s} {launches[name]:4d} launches {m[DURATION] * 1e3:9.3f} ms"
        if DRAM_READ in m or DRAM_WRITE in m:
            moved = m[DRAM_READ] + m[DRAM_WRITE]
            rate = moved / m[DURATION] if m[DURATION] > 0 else 0.0
            line += (f"  DRAM {m[DRAM_READ] / 1e9:7.3f} GB read {m[DRAM_WRITE] / 1e9:7.3f} GB written"
                     f" {rate / 1e12:5.2f} TB/s ({100 * rate / DRAM_PEAK:3.0f} % of {DRAM_PEAK / 1e12:.1f})")
        for metric in INSTRUCTIONS:
            if metric in m:
                line += f"  {m[metric] / 1e6:9.1f} M warp instructions"
                break
        out.append(line)
    return out


if __name__ == "__main__":
    for line in lines(*summarize(sys.argv[1])):
        print(line)
