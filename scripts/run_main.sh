#!/usr/bin/env bash
# The README's first command: build, then run the main job.
# Until the BDH example lands, the main job is the operator on a generated BDH-shaped file:
# forward and backward through the fastest CPU backend, checked against the float64 reference.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
cmake --preset default >/dev/null
cmake --build --preset default -j "$(nproc)" --target rhoscan_cli
mkdir -p out
./build/tools/rhoscan example out/example.safetensors --B 2 --H 4 --T 256 --L 512 --E 64 --with-state --with-grads
./build/tools/rhoscan run out/example.safetensors -o out/result.safetensors
./build/tools/rhoscan verify out/example.safetensors
