// Reading and writing safetensors files (https://github.com/huggingface/safetensors):
// an 8-byte little-endian header length, a JSON header {name: {dtype, shape, data_offsets}},
// then the raw little-endian tensor bytes.
//
// Files come from users: the reader validates everything (header length within the file,
// well-formed JSON, known dtype, offsets inside the data and matching dtype x shape, no
// overlapping tensors, no duplicate names) and throws rhoscan::Error(ErrorKind::io) with a
// one-line message naming the file and the tensor. It never reads outside the buffer.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "rhoscan/rhoscan.h"

namespace rhoscan::io {

// An owned, contiguous host tensor as read from a file.
struct StoredTensor {
  std::string name;
  DType dtype = DType::float32;
  std::vector<int64_t> shape;
  std::vector<unsigned char> bytes;  // numel * dtype_size, little-endian, row-major

  TensorView view() const;  // a (mutable) contiguous host view of `bytes`
  int64_t numel() const;
};

struct SafetensorsFile {
  std::vector<StoredTensor> tensors;           // in file order
  std::map<std::string, std::string> metadata; // the optional "__metadata__" string map

  const StoredTensor* find(const std::string& name) const;  // null when absent
  // The tensor, or Error(io) "FILE: missing tensor 'NAME'".
  const StoredTensor& get(const std::string& name, const std::string& file_label) const;
};

// Parses an in-memory file; `label` names it in error messages.
SafetensorsFile parse_safetensors(const unsigned char* data, size_t size, const std::string& label);
SafetensorsFile read_safetensors(const std::string& path);

struct NamedView {
  std::string name;
  TensorView view;  // host memory, any strides: written row-major
};

// Writes atomically: a temporary file in the same directory, then rename(2). On any error the
// temporary is removed and no file appears at `path`.
void write_safetensors(const std::string& path, const std::vector<NamedView>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// `s` (a name or string from a file) made safe for a one-line message: bytes outside printable
// ASCII become \xNN, and long strings are cut at 256 bytes.
std::string printable(const std::string& s);

}  // namespace rhoscan::io
