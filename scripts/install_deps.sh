#!/usr/bin/env bash
# Installs the Debian packages that building and testing rhoscan need (only the missing ones).
# Usage: scripts/install_deps.sh [extra packages...]
set -euo pipefail
packages=(cmake ninja-build g++ ccache libgtest-dev libbenchmark-dev libopenblas-dev zlib1g-dev
          libtorch-dev python3-torch python3-numpy python3-pytest python3-matplotlib
          glslc libvulkan-dev mesa-vulkan-drivers clang libclang-rt-14-dev libfuzzer-14-dev "$@")
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
echo "installing: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
