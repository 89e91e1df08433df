// The training text: any file of bytes (UTF-8 text), gzip-compressed or not, split into a
// training part (the start) and a validation part (the end). Tokens are bytes (vocab 256).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace bdh {

// The Jargon File (public domain), shipped by Debian's jargon-text package.
inline constexpr const char* kDefaultCorpus = "/usr/share/doc/jargon-text/jargon.txt.gz";

struct Corpus {
  std::string path;
  std::vector<uint8_t> train, validation;
};

// Reads `path` (gzip detected by its magic bytes) and keeps the last `validation_fraction` of
// it for validation. Throws std::runtime_error naming the file when it is missing, unreadable,
// or too short for one block of `block` tokens in each part.
Corpus load_corpus(const std::string& path, double validation_fraction, int64_t block);

// Cross-entropy (nats per byte) of `validation` under the byte unigram distribution of `train`
// (add-one smoothed so that no byte has probability zero): the loss of a model that knows
// symbol frequencies and nothing else.
double unigram_baseline(const std::vector<uint8_t>& train, const std::vector<uint8_t>& validation);

}  // namespace bdh
