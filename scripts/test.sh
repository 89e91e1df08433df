#!/usr/bin/env bash
# Configure, build and run the fast test set (everything not labelled `long`).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --preset ci
cmake --build --preset ci -j "$(nproc)"
ctest --preset ci -j "$(nproc)"
