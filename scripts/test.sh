#!/usr/bin/env bash
# The README's test command: install what is missing, configure, build, run the fast test set
# (everything not labelled `long`). CI runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
cmake --preset ci
cmake --build --preset ci -j "$(nproc)"
ctest --preset ci -j "$(nproc)"
