// bdh: train a small BDH language model with the rho-attention operator, then stream text
// from it token by token.
#include <cstdio>
#include <exception>
#include <string>

#include "commands.h"

namespace {

const char* kUsage = R"(usage:
  bdh train    [--data FILE] [--out DIR] [--preset cpu|gpu] [--steps N] [--resume] ...
  bdh generate --checkpoint FILE [--prompt TEXT] [--tokens N] [--temperature X] ...
  bdh help train | bdh help generate
)";

const char* kTrainHelp = R"(bdh train: byte-level language modelling on a UTF-8 text file.
  --data FILE          corpus (plain or .gz; default: the Jargon File of Debian's jargon-text)
  --out DIR            where model.safetensors, loss.csv and loss.png go (default runs/bdh)
  --preset cpu|gpu     sizes for 2 CPU cores (default) or for one GPU (H=4 L=8192 E=256 T=512)
  --layers N --heads H --latent L --embd E      model size (override the preset)
  --block T --batch B  tokens per sequence block, sequences per step
  --steps N            optimizer steps in total (a resumed run continues up to N)
  --lr X --min-lr X --warmup N --weight-decay X --clip X     AdamW and its schedule
  --tbptt K            truncated BPTT: each step trains K consecutive blocks of B parallel
                       streams, the state flowing (with gradients) from block to block and
                       carried (detached) into the next step; 0 (default): independent blocks
  --eval-every N --eval-batches N   validation cadence and size
  --save-every N       checkpoint cadence (and always at the end)
  --resume             continue from DIR/model.safetensors when it exists
  --time-limit SECONDS stop (evaluate, save) at the step that would end past this much training
  --attention rhoscan|rhoscan-bf16|chunked|naive   the library's op (default when built; -bf16:
                       q, v and the context in bfloat16, states float32: the CUDA backend's
                       tensor cores), SPEC.md's chunked form in libtorch ops, or the per-token loop
  --device auto|cpu|cuda --threads N --seed N --validation-fraction X
  --bench-json FILE    append one JSON line (bench/results schema) with the training speed
  --python PATH        the Python with matplotlib for the plot (default /usr/bin/python3)
)";

const char* kGenerateHelp = R"(bdh generate: stream text from a checkpoint, one token at a time.
  --checkpoint FILE    a model.safetensors written by bdh train (required)
  --prompt TEXT        the text to continue (default "The ")
  --tokens N           bytes to generate (default 400)
  --temperature X      sampling temperature (default 0.8; 0: greedy)
  --top-k K            sample among the K likeliest bytes (default 0: all)
  --seed N --attention rhoscan|rhoscan-bf16|chunked|naive --device auto|cpu|cuda --threads N
)";

}  // namespace

int main(int argc, char** argv) {
  std::string command = argc > 1 ? argv[1] : "";
  try {
    if (command == "train") return bdh::run_train(bdh::Args(argc, argv, 2, {"resume"}));
    if (command == "generate") return bdh::run_generate(bdh::Args(argc, argv, 2, {}));
    if (command == "help" && argc > 2) {
      std::string topic = argv[2];
      std::fputs(topic == "generate" ? kGenerateHelp : kTrainHelp, stdout);
      return 0;
    }
    if (command == "help" || command == "--help" || command == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    std::fputs(kUsage, stderr);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bdh %s: error: %s\n", command.c_str(), e.what());
    return 1;
  }
}
