#include "corpus.h"

#ifdef BDH_HAVE_ZLIB
#include <zlib.h>
#endif

#include <array>
#include <fstream>
#include <iterator>
#include <cmath>
#include <stdexcept>

namespace bdh {

namespace {

#ifdef BDH_HAVE_ZLIB
std::vector<uint8_t> read_maybe_gzip(const std::string& path) {
  // gzread reads plain files unchanged, so one reader covers both.
  gzFile file = gzopen(path.c_str(), "rb");
  if (!file) throw std::runtime_error("cannot open corpus '" + path + "'");
  std::vector<uint8_t> bytes;
  std::array<uint8_t, 1 << 16> buffer;
  for (;;) {
    int n = gzread(file, buffer.data(), static_cast<unsigned>(buffer.size()));
    if (n < 0) {
      int code = 0;
      std::string message = gzerror(file, &code);
      gzclose(file);
      throw std::runtime_error("cannot read corpus '" + path + "': " + message);
    }
    if (n == 0) break;
    bytes.insert(bytes.end(), buffer.begin(), buffer.begin() + n);
  }
  gzclose(file);
  return bytes;
}
#else
std::vector<uint8_t> read_maybe_gzip(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open corpus '" + path + "'");
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b)
    throw std::runtime_error("corpus '" + path + "' is gzip-compressed and this build has no "
                             "zlib: decompress it (zcat) or build with zlib1g-dev");
  return bytes;
}
#endif

}  // namespace

Corpus load_corpus(const std::string& path, double validation_fraction, int64_t block) {
  if (!(validation_fraction > 0 && validation_fraction < 1))
    throw std::invalid_argument("validation fraction must be in (0, 1)");
  auto bytes = read_maybe_gzip(path);
  const auto n = static_cast<int64_t>(bytes.size());
  const auto n_val = static_cast<int64_t>(static_cast<double>(n) * validation_fraction);
  if (n_val < block + 1 || n - n_val < block + 1)
    throw std::runtime_error("corpus '" + path + "' has " + std::to_string(n) +
                             " bytes: too short for a block of " + std::to_string(block) +
                             " tokens in both the training and the validation part");
  Corpus c;
  c.path = path;
  c.train.assign(bytes.begin(), bytes.end() - n_val);
  c.validation.assign(bytes.end() - n_val, bytes.end());
  return c;
}

double unigram_baseline(const std::vector<uint8_t>& train, const std::vector<uint8_t>& validation) {
  std::array<double, 256> counts;
  counts.fill(1.0);
  for (uint8_t b : train) counts[b] += 1;
  double total = static_cast<double>(train.size()) + 256.0;
  double loss = 0;
  for (uint8_t b : validation) loss -= std::log(counts[b] / total);
  return validation.empty() ? 0.0 : loss / static_cast<double>(validation.size());
}

}  // namespace bdh
