#!/usr/bin/env python3
"""dev/cuda/ncu_summary.py on ncu --csv logs written here: durations alone (the format every stored
log has), and durations with DRAM traffic and instructions in ncu's scaled units.

Exit 0 on success, 1 on a failed check.
Usage: test_ncu_summary.py SOURCE_DIR
"""
import os
import subprocess
import sys
import tempfile

source = sys.argv[1]
script = os.path.join(source, "dev", "cuda", "ncu_summary.py")
failures = []

HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",'
          '"Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')


def row(launch, kernel, metric, unit, value):
    return (f'"{launch}","1","rhoscan","h","{kernel}","1","7","(256, 1, 1)","(128, 1, 1)","0","9.0",'
            f'"Command line profiler metrics","{metric}","{unit}","{value}"')


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAILED:", message)


def summary(lines):
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
        f.write("==PROF== Connected to process 1\n[bench] a line of the tool's own output\n")
        f.write("\n".join(lines) + "\n")
        path = f.name
    try:
        out = subprocess.run([sys.executable, script, path], capture_output=True, text=True, check=True).stdout
    finally:
        os.unlink(path)
    return {line.split()[0]: line for line in out.splitlines()}


SCORES = "void norm_scores_mma_kernel<__nv_bfloat16>(Dims, Str4, const float *, float *)"
LOCAL = "void unnamed>::bwd_local_kernel<__nv_bfloat16>(Dims, const float *)"

# Durations alone: the stored logs' format; launches counted, the sum in ms as column 4.
out = summary([HEADER, row(0, SCORES, "gpu__time_duration.sum", "ns", "380,000"),
               row(1, LOCAL, "gpu__time_duration.sum", "ns", "1,510,000"),
               row(2, SCORES, "gpu__time_duration.sum", "ns", "382,600")])
check(set(out) == {"norm_scores_mma_kernel", "unnamed>::bwd_local_kernel"}, f"kernel names: {sorted(out)}")
fields = out.get("norm_scores_mma_kernel", "").split()
check(fields[1:5] == ["2", "launches", "0.763", "ms"] and len(fields) == 5, f"durations alone: {fields}")
check(out.get("unnamed>::bwd_local_kernel", "").split()[3] == "1.510", "one launch's duration")

# With DRAM bytes and instructions, each a row per launch in ncu's scaled units: the launches are
# not counted once per metric, and the units are read.
lines = [HEADER]
for launch, kernel, time, time_unit, read, read_unit, write, write_unit, inst in [
        (0, SCORES, "190", "usecond", "400", "Mbyte", "0.43", "Gbyte", "123,000,000"),
        (1, LOCAL, "1,510", "usecond", "1.2", "Gbyte", "520", "Mbyte", "862,000,000"),
        (2, SCORES, "0.19", "msecond", "410", "Mbyte", "430,000,000", "byte", "n/a")]:
    lines += [row(launch, kernel, "gpu__time_duration.sum", time_unit, time),
              row(launch, kernel, "dram__bytes_read.sum", read_unit, read),
              row(launch, kernel, "dram__bytes_write.sum", write_unit, write),
              row(launch, kernel, "smsp__inst_executed.sum", "inst", inst)]
out = summary(lines)
scores = out.get("norm_scores_mma_kernel", "").split()
check(scores[1:5] == ["2", "launches", "0.380", "ms"], f"durations from usecond and msecond: {scores[:5]}")
line = out.get("norm_scores_mma_kernel", "")
# read 0.4 + 0.41 GB, written 0.43 + 0.43 GB in 0.38 ms: 4.39 TB/s, 102 % of 4.3
check("DRAM   0.810 GB read   0.860 GB written  4.39 TB/s (102 % of 4.3)" in line, f"traffic: {line}")
check("123.0 M warp instructions" in line, f"instructions with an n/a launch skipped: {line}")
local = out.get("unnamed>::bwd_local_kernel", "")
check(local.split()[1:5] == ["1", "launches", "1.510", "ms"], f"one launch: {local}")
check("DRAM   1.200 GB read   0.520 GB written  1.14 TB/s ( 26 % of 4.3)" in local, f"traffic: {local}")
check("862.0 M warp instructions" in local, f"instructions: {local}")

print(f"{len(failures)} failure(s)" if failures else "ncu_summary.py: all checks passed")
sys.exit(1 if failures else 0)
