#!/usr/bin/env bash
# The PyTorch extension's tests on a GPU machine (PyTorch 2.x with CUDA, e.g. 2.11 + CUDA 13):
# configure against the PyTorch of `python3`, build librhoscan_torch.so (with rhoscan's CUDA
# backend when nvcc is found), run the Python tests on CPU and CUDA tensors, including
# torch.library.opcheck and torch.compile(fullgraph=True).
#
# RHOSCAN_REQUIRE_CUDA=1 turns "no GPU" or "rhoscan has no CUDA backend" into test failures, so
# this run cannot pass by skipping. Results: stdout, and $OUT/torch-tests.{log,xml} when OUT is set.
#
#   PYTHON=python3 BUILD_DIR=build-gpu-torch bash scripts/gpu_torch_tests.sh [extra pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
python=${PYTHON:-python3}
build=${BUILD_DIR:-$repo/build-gpu-torch}
out=${OUT:-}

# Import torch from outside the repository: its torch/ directory is not the package.
(cd / && "$python" - <<'EOF')
import sys, torch
print("python", sys.version.split()[0], "| torch", torch.__version__, "| CUDA", torch.version.cuda,
      "| GPUs:", [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())])
import pytest  # noqa: F401  (fail here, clearly, if pytest is missing)
EOF
prefix=$(cd / && "$python" -c 'import torch;print(torch.utils.cmake_prefix_path)')

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S "$repo" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DRHOSCAN_TORCH=ON -DCMAKE_PREFIX_PATH="$prefix" -DRHOSCAN_TORCH_PYTHON="$(command -v "$python")" \
  -DRHOSCAN_VULKAN=OFF -DRHOSCAN_BUILD_TOOLS=OFF -DRHOSCAN_BUILD_EXAMPLES=OFF -DRHOSCAN_BUILD_TESTS=OFF
cmake --build "$build" --target rhoscan_torch -j "$(nproc)"

library=$(find "$build/torch" -maxdepth 1 -name 'librhoscan_torch.so' | head -n 1)
pytest_args=(-v -rs -p no:cacheprovider)
if [ -n "$out" ]; then
  mkdir -p "$out"
  pytest_args+=(--junitxml="$out/torch-tests.xml")
fi
cd "$(mktemp -d)"  # see above: keep this repository's torch/ directory off sys.path
set +e
RHOSCAN_TORCH_LIBRARY=$library PYTHONPATH="$repo/python" RHOSCAN_REQUIRE_CUDA=${RHOSCAN_REQUIRE_CUDA:-1} \
  "$python" -m pytest "${pytest_args[@]}" "$repo/tests/python" "$@" 2>&1 | tee ${out:+"$out/torch-tests.log"}
status=${PIPESTATUS[0]}
set -e
# pytest exit code 5: no test was collected (a wrong path or filter), which is not a pass.
[ "$status" -eq 5 ] && echo "gpu_torch_tests: pytest collected no tests" >&2
exit "$status"
