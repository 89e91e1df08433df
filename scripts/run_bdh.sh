#!/usr/bin/env bash
# The README's first command: on a fresh Debian machine, install what the BDH example needs,
# build it (Release), train a small BDH language model whose attention is rhoscan's operator on
# a public-domain text (the Jargon File, Debian's jargon-text), plot the loss curves, and stream
# a sample from the trained model one token at a time.
#
#   bash scripts/run_bdh.sh [bdh train options...]     e.g. --steps 3000, --tbptt 2, --data FILE
#
# CPU by default (the `cpu` preset: ~10 minutes on 2 cores); where `nvidia-smi` sees a GPU the
# `gpu` preset (H=4, L=8192, E=256, T=512) on CUDA, unless a --preset is given.
# Environment: BDH_BUILD_DIR (default build-bdh), BDH_OUT (default out/bdh),
# BDH_PROMPT (the sample's prompt), CMAKE_PREFIX_PATH (a non-Debian libtorch).
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
build_dir=${BDH_BUILD_DIR:-build-bdh}
out_dir=${BDH_OUT:-out/bdh}
prompt=${BDH_PROMPT:-":dragon: n."}

gpu=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then gpu=1; fi

# ---- packages (only what is missing) ---------------------------------------------------------
# A tool already on PATH counts (GPU images bring cmake, ninja and a pip PyTorch, and have no
# package mirror); a PyTorch that python3 already has replaces Debian's libtorch-dev.
corpus_given=0
case " $* " in *" --data "*) corpus_given=1 ;; esac
torch_prefix=""
if [ -z "${CMAKE_PREFIX_PATH:-}" ] && [ "$gpu" = 1 ] && command -v python3 >/dev/null 2>&1; then
  torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null || true)
fi
missing=()
command -v cmake >/dev/null 2>&1 || missing+=(cmake)
command -v ninja >/dev/null 2>&1 || missing+=(ninja-build)
command -v g++ >/dev/null 2>&1 || missing+=(g++)
# zlib reads the default (gzip-compressed) corpus; a corpus given with --data may be plain text.
[ "$corpus_given" = 1 ] || [ -f /usr/include/zlib.h ] || missing+=(zlib1g-dev)
plot_python=""
for candidate in /usr/bin/python3 "$(command -v python3 || true)"; do
  if [ -n "$candidate" ] && "$candidate" -c 'import matplotlib' >/dev/null 2>&1; then
    plot_python=$candidate
    break
  fi
done
[ -z "$plot_python" ] && { missing+=(python3-matplotlib); plot_python=/usr/bin/python3; }
if [ -z "$torch_prefix" ] && [ -z "${CMAKE_PREFIX_PATH:-}" ] && [ ! -f /usr/lib/x86_64-linux-gnu/cmake/Torch/TorchConfig.cmake ]; then
  missing+=(libtorch-dev)
fi
if [ "$corpus_given" = 0 ] && [ ! -f /usr/share/doc/jargon-text/jargon.txt.gz ]; then
  missing+=(jargon-text)
fi
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "== installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# ---- build ------------------------------------------------------------------------------------
echo "== building the BDH example in $build_dir"
cuda=OFF
[ "$gpu" = 1 ] && cuda=AUTO
cmake_args=(-S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release
            -DRHOSCAN_BUILD_EXAMPLES=ON -DRHOSCAN_TORCH=ON -DRHOSCAN_BUILD_TESTS=OFF
            -DRHOSCAN_BUILD_TOOLS=OFF -DRHOSCAN_VULKAN=OFF -DRHOSCAN_CUDA=$cuda)
[ -n "$torch_prefix" ] && cmake_args+=(-DCMAKE_PREFIX_PATH="$torch_prefix")
mkdir -p "$build_dir"
cmake "${cmake_args[@]}" >"$build_dir/configure.log" 2>&1 || { cat "$build_dir/configure.log"; exit 1; }
cmake --build "$build_dir" --target bdh -j "$(nproc)"
built=$(date +%s)
echo "== built in $((built - started)) s"

# ---- train ------------------------------------------------------------------------------------
train_args=(--out "$out_dir" --python "$plot_python")
case " $* " in *" --preset "*) ;; *) [ "$gpu" = 1 ] && train_args+=(--preset gpu) ;; esac
# On the CPU a time limit keeps the whole command within 15 minutes on a slow or busy machine
# (the run then stops early, evaluated and saved; a later --time-limit on the command line wins).
[ "$gpu" = 0 ] && train_args+=(--time-limit 540)
echo "== training (bdh train ${train_args[*]} $*)"
"$build_dir/examples/bdh" train "${train_args[@]}" "$@"
trained=$(date +%s)

# ---- sample -----------------------------------------------------------------------------------
echo
echo "== a sample, streamed one byte at a time (bdh generate):"
"$build_dir/examples/bdh" generate --checkpoint "$out_dir/model.safetensors" \
  --prompt "$prompt" --tokens 400 --temperature 0.7
finished=$(date +%s)
echo "== done in $((finished - started)) s (build $((built - started)) s, training $((trained - built)) s);" \
     "loss plot: $out_dir/loss.png"
