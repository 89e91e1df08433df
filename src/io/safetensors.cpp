// safetensors reader and writer (format: https://github.com/huggingface/safetensors).
//
// The reader treats every byte as hostile: the header is parsed by a small strict JSON parser
// that accepts exactly the safetensors schema (a top-level object of tensor entries with the
// fields dtype, shape, data_offsets, and an optional "__metadata__" string map), every size is
// checked for overflow before it is used, and tensor bytes are copied only after their range is
// known to lie inside the file. Error messages are one line: names taken from the file are
// escaped before they are printed.
#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>

namespace rhoscan::io {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; this reader copies bytes as they are");

namespace {

// The official implementation's cap: a header larger than this is not a real file.
constexpr uint64_t kMaxHeaderBytes = 100u << 20;
constexpr size_t kMaxRank = 64;

[[noreturn]] void fail(const std::string& message) { throw Error(ErrorKind::io, message); }

}  // namespace

std::string printable(const std::string& s) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < s.size() && i < 256; ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  if (s.size() > 256) out += "...";
  return out;
}

namespace {

std::string quoted(const std::string& name) { return "'" + printable(name) + "'"; }

const char* safetensors_dtype(DType dtype) {
  switch (dtype) {
    case DType::float64: return "F64";
    case DType::float32: return "F32";
    case DType::bfloat16: return "BF16";
    case DType::float16: return "F16";
  }
  return "?";
}

bool parse_dtype(const std::string& s, DType* out) {
  for (DType d : {DType::float64, DType::float32, DType::bfloat16, DType::float16}) {
    if (s == safetensors_dtype(d)) {
      *out = d;
      return true;
    }
  }
  return false;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// The JSON subset of a safetensors header. Only the shapes the schema allows are accepted, so
// no recursion is needed and nesting depth is bounded by construction.
class HeaderParser {
 public:
  HeaderParser(const unsigned char* begin, const unsigned char* end, const std::string& label)
      : begin_(begin), p_(begin), end_(end), label_(label) {}

  [[noreturn]] void error(const std::string& what) const {
    fail(label_ + ": bad header JSON at byte " + std::to_string(p_ - begin_) + ": " + what);
  }

  void skip_ws() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\t' || *p_ == '\n' || *p_ == '\r')) ++p_;
  }
  bool at_end() const { return p_ == end_; }

  void expect(char c) {
    skip_ws();
    if (p_ == end_) error(std::string("expected '") + c + "', found the end of the header");
    if (*p_ != c) error(std::string("expected '") + c + "', found " + found());
    ++p_;
  }

  bool peek(char c) {
    skip_ws();
    return p_ < end_ && *p_ == c;
  }

  std::string found() const {
    if (p_ == end_) return "the end of the header";
    return "'" + printable(std::string(1, static_cast<char>(*p_))) + "'";
  }

  std::string string() {
    expect('"');
    std::string out;
    for (;;) {
      if (p_ == end_) error("unterminated string");
      unsigned char c = *p_++;
      if (c == '"') return out;
      if (c < 0x20) error("control character in a string");
      if (c != '\\') {
        out += static_cast<char>(c);
        continue;
      }
      if (p_ == end_) error("unterminated escape");
      switch (*p_++) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xdc00 && cp <= 0xdfff) error("lone low surrogate in \\u escape");
          if (cp >= 0xd800 && cp <= 0xdbff) {
            if (end_ - p_ < 2 || p_[0] != '\\' || p_[1] != 'u') error("lone high surrogate in \\u escape");
            p_ += 2;
            uint32_t lo = hex4();
            if (lo < 0xdc00 || lo > 0xdfff) error("invalid surrogate pair in \\u escape");
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
          }
          append_utf8(out, cp);
          break;
        }
        default: --p_; error("invalid escape " + found());
      }
    }
  }

  // A non-negative JSON integer that fits in int64.
  int64_t integer() {
    skip_ws();
    if (p_ == end_ || *p_ < '0' || *p_ > '9') error("expected a non-negative integer, found " + found());
    if (*p_ == '0' && end_ - p_ > 1 && p_[1] >= '0' && p_[1] <= '9') error("leading zero in an integer");
    uint64_t value = 0;
    while (p_ < end_ && *p_ >= '0' && *p_ <= '9') {
      uint64_t digit = *p_++ - '0';
      if (value > (static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) - digit) / 10)
        error("integer does not fit in 64 bits");
      value = value * 10 + digit;
    }
    if (p_ < end_ && (*p_ == '.' || *p_ == 'e' || *p_ == 'E')) error("expected an integer, found a fraction or exponent");
    return static_cast<int64_t>(value);
  }

  // Calls member(key) for each member of an object; the callee parses the value.
  template <class F>
  void object(F&& member) {
    expect('{');
    if (peek('}')) {
      ++p_;
      return;
    }
    for (;;) {
      std::string key = string();
      expect(':');
      member(key);
      skip_ws();
      if (p_ < end_ && *p_ == ',') {
        ++p_;
        continue;
      }
      if (p_ < end_ && *p_ == '}') {
        ++p_;
        return;
      }
      error("expected ',' or '}' in an object, found " + found());
    }
  }

  template <class F>
  void array(F&& element) {
    expect('[');
    if (peek(']')) {
      ++p_;
      return;
    }
    for (;;) {
      element();
      skip_ws();
      if (p_ < end_ && *p_ == ',') {
        ++p_;
        continue;
      }
      if (p_ < end_ && *p_ == ']') {
        ++p_;
        return;
      }
      error("expected ',' or ']' in an array, found " + found());
    }
  }

 private:
  uint32_t hex4() {
    if (end_ - p_ < 4) error("truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      unsigned char c = *p_++;
      v <<= 4;
      if (c >= '0' && c <= '9') v |= c - '0';
      else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
      else error("invalid hex digit in \\u escape");
    }
    return v;
  }

  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xc0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xe0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }

  const unsigned char* begin_;
  const unsigned char* p_;
  const unsigned char* end_;
  const std::string& label_;
};

struct Entry {
  StoredTensor tensor;
  int64_t begin = 0, end = 0;
};

std::string json_escape(const std::string& s) {
  static const char* hex = "0123456789abcdef";
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      out += "\\u00";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string errno_text() { return std::strerror(errno); }

// A file descriptor that is closed (and its temporary file removed) unless committed.
class TempFile {
 public:
  explicit TempFile(const std::string& target) : target_(target) {
    static std::atomic<unsigned> counter{0};
    for (int attempt = 0; attempt < 100; ++attempt) {
      path_ = target + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
      fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (fd_ >= 0 || errno != EEXIST) break;
    }
    if (fd_ < 0) fail("cannot create a temporary file beside '" + printable(target) + "': " + errno_text());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(path_.c_str());
  }

  void write(const void* data, size_t size) {
    auto p = static_cast<const char*>(data);
    while (size > 0) {
      ssize_t n = ::write(fd_, p, size);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail("cannot write '" + printable(path_) + "': " + errno_text());
      p += n;
      size -= static_cast<size_t>(n);
    }
  }

  void commit() {
    if (::fsync(fd_) != 0) fail("cannot flush '" + printable(path_) + "': " + errno_text());
    int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) fail("cannot close '" + printable(path_) + "': " + errno_text());
    if (::rename(path_.c_str(), target_.c_str()) != 0)
      fail("cannot rename the temporary file to '" + printable(target_) + "': " + errno_text());
    committed_ = true;
  }

 private:
  std::string target_, path_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// StoredTensor / SafetensorsFile

int64_t StoredTensor::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;  // the reader guarantees this does not overflow
  return n;
}

TensorView StoredTensor::view() const {
  if (shape.size() > static_cast<size_t>(rhoscan::kMaxRank))
    fail("tensor " + quoted(name) + " has rank " + std::to_string(shape.size()) + " (shape " +
         shape_string(shape) + "); rhoscan takes tensors of rank " +
         std::to_string(rhoscan::kMaxRank) + " at most");
  void* data = bytes.empty() ? nullptr : const_cast<unsigned char*>(bytes.data());
  return TensorView::contiguous(data, dtype, shape);
}

const StoredTensor* SafetensorsFile::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

const StoredTensor& SafetensorsFile::get(const std::string& name, const std::string& file_label) const {
  const StoredTensor* t = find(name);
  if (t == nullptr) fail(printable(file_label) + ": missing tensor " + quoted(name));
  return *t;
}

// ---------------------------------------------------------------------------------------------
// Reading

SafetensorsFile parse_safetensors(const unsigned char* data, size_t size, const std::string& label_raw) {
  const std::string label = printable(label_raw);
  if (data == nullptr && size != 0) fail(label + ": null buffer");
  if (size < 8)
    fail(label + ": truncated: " + std::to_string(size) +
         " bytes, too short for the 8-byte header length of a safetensors file");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = header_len << 8 | data[i];
  if (header_len > size - 8)
    fail(label + ": truncated: the header length is " + std::to_string(header_len) +
         " bytes but only " + std::to_string(size - 8) + " bytes follow it");
  if (header_len > kMaxHeaderBytes)
    fail(label + ": the header length " + std::to_string(header_len) + " exceeds the limit of " +
         std::to_string(kMaxHeaderBytes) + " bytes");
  const unsigned char* header = data + 8;
  const unsigned char* payload = header + header_len;
  const uint64_t payload_size = size - 8 - header_len;

  SafetensorsFile file;
  std::vector<Entry> entries;
  std::set<std::string> names;
  HeaderParser json(header, payload, label);
  bool have_metadata = false;

  json.object([&](const std::string& key) {
    if (key == "__metadata__") {
      if (have_metadata) json.error("duplicate \"__metadata__\"");
      have_metadata = true;
      json.object([&](const std::string& mkey) {
        if (file.metadata.count(mkey)) json.error("duplicate metadata key " + quoted(mkey));
        if (!json.peek('"')) json.error("metadata value of " + quoted(mkey) + " must be a string, found " + json.found());
        file.metadata[mkey] = json.string();
      });
      return;
    }
    if (!names.insert(key).second) json.error("duplicate tensor " + quoted(key));
    Entry e;
    e.tensor.name = key;
    bool have_dtype = false, have_shape = false, have_offsets = false;
    std::string dtype_text;
    json.object([&](const std::string& field) {
      if (field == "dtype") {
        if (have_dtype) json.error("tensor " + quoted(key) + ": duplicate \"dtype\"");
        have_dtype = true;
        if (!json.peek('"')) json.error("tensor " + quoted(key) + ": \"dtype\" must be a string, found " + json.found());
        dtype_text = json.string();
      } else if (field == "shape") {
        if (have_shape) json.error("tensor " + quoted(key) + ": duplicate \"shape\"");
        have_shape = true;
        json.array([&] {
          if (e.tensor.shape.size() >= kMaxRank) json.error("tensor " + quoted(key) + ": more than 64 dimensions");
          e.tensor.shape.push_back(json.integer());
        });
      } else if (field == "data_offsets") {
        if (have_offsets) json.error("tensor " + quoted(key) + ": duplicate \"data_offsets\"");
        have_offsets = true;
        int n = 0;
        json.array([&] {
          int64_t x = json.integer();
          if (n == 0) e.begin = x;
          else if (n == 1) e.end = x;
          else json.error("tensor " + quoted(key) + ": \"data_offsets\" must have 2 entries");
          ++n;
        });
        if (n != 2) json.error("tensor " + quoted(key) + ": \"data_offsets\" must have 2 entries");
      } else {
        json.error("tensor " + quoted(key) + ": unknown field " + quoted(field) +
                   " (expected dtype, shape, data_offsets)");
      }
    });
    if (!have_dtype || !have_shape || !have_offsets)
      fail(label + ": tensor " + quoted(key) + ": the header entry lacks \"" +
           (!have_dtype ? "dtype" : !have_shape ? "shape" : "data_offsets") + "\"");
    if (!parse_dtype(dtype_text, &e.tensor.dtype))
      fail(label + ": tensor " + quoted(key) + " has dtype " + quoted(dtype_text) +
           ", which rhoscan does not read (F64, F32, BF16, F16 only)");
    entries.push_back(std::move(e));
  });
  json.skip_ws();  // the writer pads the header with spaces
  if (!json.at_end()) json.error("unexpected bytes after the header object");

  // Sizes: the product of the dimensions (counting a 0 as 1, so that every stride of a
  // contiguous view is representable) times the element size must fit in int64.
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (Entry& e : entries) {
    StoredTensor& t = e.tensor;
    int64_t span = static_cast<int64_t>(dtype_size(t.dtype)), numel = 1;
    for (int64_t d : t.shape) {
      if (__builtin_mul_overflow(span, std::max<int64_t>(d, 1), &span))
        fail(label + ": tensor " + quoted(t.name) + ": shape " + shape_string(t.shape) +
             " is too large to index");
      numel *= d;
    }
    const int64_t nbytes = numel * static_cast<int64_t>(dtype_size(t.dtype));
    if (e.begin > e.end)
      fail(label + ": tensor " + quoted(t.name) + ": data_offsets [" + std::to_string(e.begin) + ", " +
           std::to_string(e.end) + "] end before they begin");
    if (static_cast<uint64_t>(e.end) > payload_size)
      fail(label + ": tensor " + quoted(t.name) + ": data_offsets [" + std::to_string(e.begin) + ", " +
           std::to_string(e.end) + "] lie outside the " + std::to_string(payload_size) +
           "-byte data section (truncated file?)");
    if (e.end - e.begin != nbytes)
      fail(label + ": tensor " + quoted(t.name) + ": data_offsets [" + std::to_string(e.begin) + ", " +
           std::to_string(e.end) + "] hold " + std::to_string(e.end - e.begin) + " bytes but " +
           safetensors_dtype(t.dtype) + " " + shape_string(t.shape) + " needs " + std::to_string(nbytes));
    if (nbytes > 0) ranges.push_back({e.begin, e.end});
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second) {
      std::string a, b;
      for (const Entry& e : entries) {
        if (e.begin == ranges[i - 1].first && e.end == ranges[i - 1].second && a.empty()) a = e.tensor.name;
        else if (e.begin == ranges[i].first && e.end == ranges[i].second) b = e.tensor.name;
      }
      fail(label + ": tensors " + quoted(a) + " and " + quoted(b) + " overlap in the data section");
    }

  file.tensors.reserve(entries.size());
  for (Entry& e : entries) {
    e.tensor.bytes.assign(payload + e.begin, payload + e.end);
    file.tensors.push_back(std::move(e.tensor));
  }
  return file;
}

SafetensorsFile read_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  struct stat st{};
  if (!in || ::stat(path.c_str(), &st) != 0)
    fail("cannot open '" + printable(path) + "': " + errno_text());
  if (!S_ISREG(st.st_mode)) fail("'" + printable(path) + "' is not a regular file");
  std::vector<unsigned char> bytes(static_cast<size_t>(st.st_size));
  if (!bytes.empty() && !in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size())))
    fail("cannot read '" + printable(path) + "'");
  return parse_safetensors(bytes.data(), bytes.size(), path);
}

// ---------------------------------------------------------------------------------------------
// Writing

void write_safetensors(const std::string& path, const std::vector<NamedView>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  // Check everything before a file is created.
  std::set<std::string> names;
  std::vector<int64_t> sizes;
  for (const NamedView& t : tensors) {
    const TensorView& v = t.view;
    if (t.name == "__metadata__") fail("cannot write a tensor named \"__metadata__\" (reserved)");
    if (!names.insert(t.name).second) fail("cannot write tensor " + quoted(t.name) + " twice");
    if (v.device != Device::cpu)
      fail("cannot write tensor " + quoted(t.name) + ": it is on " + device_name(v.device) + ", not in host memory");
    if (v.rank < 0 || v.rank > rhoscan::kMaxRank || dtype_size(v.dtype) == 0)
      fail("cannot write tensor " + quoted(t.name) + ": invalid rank or dtype");
    int64_t bytes = static_cast<int64_t>(dtype_size(v.dtype));
    for (int i = 0; i < v.rank; ++i) {
      if (v.shape[i] < 0 || v.strides[i] < 0)
        fail("cannot write tensor " + quoted(t.name) + ": negative size or stride in " + v.shape_string());
      if (__builtin_mul_overflow(bytes, v.shape[i], &bytes))
        fail("cannot write tensor " + quoted(t.name) + ": shape " + v.shape_string() + " is too large");
    }
    if (bytes > 0 && v.data == nullptr) fail("cannot write tensor " + quoted(t.name) + ": null data");
    sizes.push_back(bytes);
  }

  std::string header = "{";
  bool first = true;
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    for (const auto& [k, val] : metadata) {
      header += (first ? "" : ",") + json_escape(k) + ":" + json_escape(val);
      first = false;
    }
    header += "}";
    first = false;
  }
  int64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorView& v = tensors[i].view;
    header += std::string(first ? "" : ",") + json_escape(tensors[i].name) + ":{\"dtype\":\"" +
              safetensors_dtype(v.dtype) + "\",\"shape\":[";
    for (int d = 0; d < v.rank; ++d) header += (d ? "," : "") + std::to_string(v.shape[d]);
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + sizes[i]) + "]}";
    offset += sizes[i];
    first = false;
  }
  header += "}";
  while (header.size() % 8 != 0) header += ' ';  // the data section starts 8-byte aligned

  TempFile out(path);
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(static_cast<uint64_t>(header.size()) >> (8 * i));
  out.write(len, 8);
  out.write(header.data(), header.size());

  std::vector<unsigned char> buffer;
  buffer.reserve(1 << 20);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorView& v = tensors[i].view;
    const size_t es = dtype_size(v.dtype);
    const int64_t n = v.numel();
    if (n == 0) continue;
    bool row_major = true;
    int64_t expected = 1;  // numel > 0 here, so this product is at most numel
    for (int d = v.rank - 1; d >= 0; --d) {
      if (v.shape[d] != 1 && v.strides[d] != expected) row_major = false;
      expected *= v.shape[d];
    }
    if (row_major) {  // one block, no gather
      out.write(buffer.data(), buffer.size());
      buffer.clear();
      out.write(v.data, static_cast<size_t>(sizes[i]));
      continue;
    }
    int64_t index[rhoscan::kMaxRank] = {};
    for (int64_t k = 0; k < n; ++k) {
      int64_t element = 0;
      for (int d = 0; d < v.rank; ++d) element += index[d] * v.strides[d];
      const auto* src = static_cast<const unsigned char*>(v.data) + element * static_cast<int64_t>(es);
      buffer.insert(buffer.end(), src, src + es);
      if (buffer.size() >= (1 << 20)) {
        out.write(buffer.data(), buffer.size());
        buffer.clear();
      }
      for (int d = v.rank - 1; d >= 0; --d) {
        if (++index[d] < v.shape[d]) break;
        index[d] = 0;
      }
    }
  }
  out.write(buffer.data(), buffer.size());
  out.commit();
}

}  // namespace rhoscan::io
