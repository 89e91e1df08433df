#!/usr/bin/env python3
"""Every CUDA kernel of the backend (src/cuda) begins with grid_dependency_wait() (common.cuh):
launch_kernel launches with programmatic dependent launch, so a kernel may start before the one
before it in the stream has finished, and must wait before it reads anything. A kernel without the
wait would race with its predecessor only on the GPU, and only sometimes: this check runs in CI.
  check_grid_dependency_waits.py [SOURCE_DIR]     (default src/cuda; exit status 1 on a miss)"""
import pathlib
import re
import sys


def match_close(s, i):
    depth = 0
    for j in range(i, len(s)):
        depth += {"(": 1, ")": -1}.get(s[j], 0)
        if depth == 0:
            return j
    raise ValueError("unbalanced parentheses")


def kernels(text):
    """(name, body's first statement) of each __global__ function."""
    for g in re.finditer(r"__global__", text):
        j = g.end()
        while True:  # skip __launch_bounds__(...) and the like: the name is the next identifier with '('
            m = re.compile(r"([A-Za-z_]\w*)\s*\(").search(text, j)
            if m.group(1).startswith("__") or m.group(1).isupper() or m.group(1) == "states_min_blocks":
                j = match_close(text, m.end() - 1) + 1
                continue
            break
        brace = text.index("{", match_close(text, m.end() - 1))
        first = text[brace + 1:].lstrip()
        yield m.group(1), first.split(";", 1)[0].strip()


root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "src/cuda")
missing, count = [], 0
for path in sorted(list(root.glob("*.cu")) + list(root.glob("*.cuh"))):
    text = re.sub(r"//[^\n]*", "", path.read_text())  # comments may mention __global__
    for name, first in kernels(text):
        count += 1
        if first != "grid_dependency_wait()":
            missing.append(f"{path}: {name} begins with `{first[:60]}`")
for m in missing:
    print("missing grid_dependency_wait():", m)
print(f"{count} kernels, {len(missing)} without grid_dependency_wait() as their first statement")
sys.exit(1 if missing or count == 0 else 0)
