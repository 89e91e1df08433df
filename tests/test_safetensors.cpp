// The safetensors reader and writer: round trips for every dtype and for strided views, and every
// kind of malformed file (each an Error(io) with a one-line message, never a crash).
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "io/safetensors.h"
#include "support/problem.h"

namespace rhoscan::testing {
namespace {

namespace fs = std::filesystem;
using io::NamedView;

// A fresh directory per test (ctest runs tests in parallel).
class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("rhoscan-st-" + std::string(info->name()) + "-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  size_t files_in_dir() const {
    return static_cast<size_t>(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()));
  }
  fs::path dir_;
};

std::vector<double> random_values(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  std::vector<double> v(n);
  for (auto& x : v) x = normal(rng);
  return v;
}

io::SafetensorsFile parse_bytes(const std::string& bytes) {
  return io::parse_safetensors(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), "test.safetensors");
}

// A file from a header string and a data section.
std::string make_file(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i));
  return out + header + data;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST_F(SafetensorsTest, RoundTripEveryDtypeContiguousAndStrided) {
  for (DType dtype : {DType::float64, DType::float32, DType::bfloat16, DType::float16}) {
    SCOPED_TRACE(dtype_name(dtype));
    // Contiguous, stored [B,T,H,L] but viewed [B,H,T,L] (a permuted view), a scalar, and an
    // empty tensor.
    HostTensor a(dtype, {2, 3, 4, 5});
    a.set_values(random_values(a.numel(), 1));
    HostTensor b(dtype, {2, 3, 4, 5}, {0, 2, 1, 3});
    b.set_values(random_values(b.numel(), 2));
    HostTensor scalar(dtype, {});
    scalar.set_values({3.5});
    HostTensor empty(dtype, {3, 0, 2});
    // A view that skips every other element of a row (stride 2 in the last dimension).
    HostTensor base(dtype, {4, 6});
    base.set_values(random_values(base.numel(), 3));
    TensorView every_other = base.view();
    every_other.shape[1] = 3;
    every_other.strides[1] = 2;

    const std::string file = path("round_trip.safetensors");
    io::write_safetensors(file,
                          {{"a", a.view()}, {"b_permuted", b.view()}, {"scalar", scalar.view()},
                           {"empty", empty.view()}, {"every_other", every_other}},
                          {{"producer", "test"}, {"quote\"and\\backslash", "line\nbreak"}});
    io::SafetensorsFile read = io::read_safetensors(file);
    ASSERT_EQ(read.tensors.size(), 5u);
    EXPECT_EQ(read.tensors[0].name, "a");  // file order
    EXPECT_EQ(read.metadata.at("producer"), "test");
    EXPECT_EQ(read.metadata.at("quote\"and\\backslash"), "line\nbreak");

    auto values_of = [](const io::StoredTensor& t) {
      HostTensor h(t.dtype, t.shape);
      std::memcpy(h.data(), t.bytes.data(), t.bytes.size());
      return h.values();
    };
    const io::StoredTensor& ra = read.get("a", file);
    EXPECT_EQ(ra.dtype, dtype);
    EXPECT_EQ(ra.shape, (std::vector<int64_t>{2, 3, 4, 5}));
    EXPECT_EQ(values_of(ra), a.values());
    EXPECT_EQ(values_of(read.get("b_permuted", file)), b.values());  // written row-major
    EXPECT_EQ(values_of(read.get("scalar", file)), std::vector<double>{3.5});
    EXPECT_EQ(read.get("empty", file).numel(), 0);
    EXPECT_EQ(read.get("empty", file).shape, (std::vector<int64_t>{3, 0, 2}));
    std::vector<double> base_values = base.values(), want;
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 6; c += 2) want.push_back(base_values[r * 6 + c]);
    EXPECT_EQ(values_of(read.get("every_other", file)), want);
    // The view of a read tensor is contiguous and reads the same values.
    TensorView v = ra.view();
    EXPECT_EQ(v.rank, 4);
    EXPECT_EQ(v.strides[0], 60);
    EXPECT_EQ(v.dtype, dtype);
  }
}

TEST_F(SafetensorsTest, HeaderIsPaddedAndDataAligned) {
  HostTensor a(DType::float32, {3});
  a.set_values({1, 2, 3});
  io::write_safetensors(path("x.safetensors"), {{"a", a.view()}});
  std::string bytes = read_all(path("x.safetensors"));
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | static_cast<unsigned char>(bytes[i]);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + n + 12);
  EXPECT_EQ(bytes.substr(8, 1), "{");
}

TEST_F(SafetensorsTest, NamesWithAnyBytesRoundTripAndErrorsStayOneLine) {
  HostTensor a(DType::float32, {1});
  a.set_values({1});
  const std::string odd = "line\nbreak \xc3\xa9 \"q\"";
  io::write_safetensors(path("odd.safetensors"), {{odd, a.view()}});
  io::SafetensorsFile f = io::read_safetensors(path("odd.safetensors"));
  ASSERT_EQ(f.tensors.size(), 1u);
  EXPECT_EQ(f.tensors[0].name, odd);
  try {
    f.get("missing\nname", "file\nlabel");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::io);
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("missing tensor"), std::string::npos) << e.what();
  }
}

TEST_F(SafetensorsTest, UnicodeEscapesAreDecoded) {
  io::SafetensorsFile f = parse_bytes(make_file(
      R"({"\u00e9\ud83d\ude00":{"dtype":"F32","shape":[],"data_offsets":[0,4]}})", std::string(4, '\0')));
  ASSERT_EQ(f.tensors.size(), 1u);
  EXPECT_EQ(f.tensors[0].name, "\xc3\xa9\xf0\x9f\x98\x80");
}

struct Malformed {
  const char* what;
  std::string bytes;
  const char* message;  // a fragment the error must contain
};

std::vector<Malformed> malformed_files() {
  const std::string four(4, '\0'), eight(8, '\0');
  const std::string good = R"({"q":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  std::string truncated_len = make_file(good, eight).substr(0, 5);
  std::string huge_header(8, '\xff');
  return {
      {"empty file", "", "too short"},
      {"shorter than the length field", truncated_len, "too short"},
      {"header length beyond the file", make_file(good, eight).substr(0, 30), "truncated"},
      {"header length 2^64-1", huge_header + "{}", "truncated"},
      {"data section truncated", make_file(good, four), "outside the 4-byte data section"},
      {"not JSON", make_file("hello", ""), "bad header JSON"},
      {"header is an array", make_file("[]", ""), "expected '{'"},
      {"unterminated object", make_file(R"({"q":{"dtype":"F32")", eight), "bad header JSON"},
      {"trailing garbage", make_file(good + "x", eight), "unexpected bytes after the header"},
      {"unterminated string", make_file(R"({"q)", ""), "unterminated string"},
      {"control character in a name", make_file("{\"a\nb\":{}}", ""), "control character"},
      {"bad escape", make_file(R"({"\x":{}})", ""), "invalid escape"},
      {"lone surrogate", make_file(R"({"\ud800":{}})", ""), "surrogate"},
      {"negative shape", make_file(R"({"q":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight),
       "non-negative integer"},
      {"fractional shape", make_file(R"({"q":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", eight),
       "fraction"},
      {"integer overflow", make_file(R"({"q":{"dtype":"F32","shape":[99999999999999999999],"data_offsets":[0,8]}})", eight),
       "64 bits"},
      {"shape too large", make_file(R"({"q":{"dtype":"F32","shape":[4611686018427387904,4,0],"data_offsets":[0,0]}})", ""),
       "too large"},
      {"unknown dtype", make_file(R"({"q":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}})", eight),
       "tensor 'q' has dtype 'I32'"},
      {"dtype not a string", make_file(R"({"q":{"dtype":4,"shape":[2],"data_offsets":[0,8]}})", eight),
       "must be a string"},
      {"missing dtype", make_file(R"({"q":{"shape":[2],"data_offsets":[0,8]}})", eight), "lacks \"dtype\""},
      {"missing offsets", make_file(R"({"q":{"dtype":"F32","shape":[2]}})", eight), "lacks \"data_offsets\""},
      {"unknown field", make_file(R"({"q":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", eight),
       "unknown field 'x'"},
      {"three offsets", make_file(R"({"q":{"dtype":"F32","shape":[2],"data_offsets":[0,8,8]}})", eight),
       "2 entries"},
      {"offsets reversed", make_file(R"({"q":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", eight),
       "end before they begin"},
      {"offsets beyond the data", make_file(R"({"q":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", eight),
       "outside the 8-byte data section"},
      {"size mismatch", make_file(R"({"q":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight),
       "needs 12"},
      {"overlapping tensors",
       make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight),
       "overlap"},
      {"duplicate tensor",
       make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight),
       "duplicate tensor 'a'"},
      {"metadata not strings", make_file(R"({"__metadata__":{"k":1}})", ""), "must be a string"},
      {"rank above 64", make_file("{\"q\":{\"dtype\":\"F32\",\"shape\":[" + [] {
                                    std::string s;
                                    for (int i = 0; i < 65; ++i) s += i ? ",1" : "1";
                                    return s;
                                  }() + "],\"data_offsets\":[0,4]}}", four),
       "more than 64 dimensions"},
  };
}

TEST_F(SafetensorsTest, EveryMalformedFileIsAnIoErrorWithOneLine) {
  for (const Malformed& m : malformed_files()) {
    SCOPED_TRACE(m.what);
    try {
      parse_bytes(m.bytes);
      ADD_FAILURE() << "parsed without an error";
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_EQ(e.kind(), ErrorKind::io);
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
      EXPECT_NE(msg.find("test.safetensors"), std::string::npos) << msg;
      EXPECT_NE(msg.find(m.message), std::string::npos) << msg;
    }
  }
}

TEST_F(SafetensorsTest, EveryPrefixOfAGoodFileIsRejectedCleanly) {
  HostTensor a(DType::bfloat16, {3, 2});
  a.set_values(random_values(6, 4));
  io::write_safetensors(path("good.safetensors"), {{"a", a.view()}}, {{"k", "v"}});
  std::string bytes = read_all(path("good.safetensors"));
  EXPECT_NO_THROW(parse_bytes(bytes));
  for (size_t n = 0; n < bytes.size(); ++n) EXPECT_THROW(parse_bytes(bytes.substr(0, n)), Error) << n;
}

TEST_F(SafetensorsTest, ReadingAMissingFileOrADirectoryIsAnIoError) {
  try {
    io::read_safetensors(path("absent.safetensors"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::io);
    EXPECT_NE(std::string(e.what()).find("cannot open"), std::string::npos);
  }
  EXPECT_THROW(io::read_safetensors(dir_.string()), Error);
}

TEST_F(SafetensorsTest, ViewOfARankSixTensorIsAnError) {
  io::SafetensorsFile f = parse_bytes(
      make_file(R"({"x":{"dtype":"F32","shape":[1,1,1,1,1,1],"data_offsets":[0,4]}})", std::string(4, '\0')));
  EXPECT_THROW(f.tensors[0].view(), Error);
}

TEST_F(SafetensorsTest, WritesAreAtomic) {
  HostTensor a(DType::float32, {2});
  a.set_values({1, 2});
  // Replacing an existing file.
  const std::string target = path("out.safetensors");
  { std::ofstream(target) << "old"; }
  io::write_safetensors(target, {{"a", a.view()}});
  EXPECT_EQ(io::read_safetensors(target).tensors.size(), 1u);
  EXPECT_EQ(files_in_dir(), 1u);

  // Errors found before writing: nothing created, the old file untouched.
  TensorView on_gpu = a.view();
  on_gpu.device = Device::cuda;
  EXPECT_THROW(io::write_safetensors(target, {{"a", on_gpu}}), Error);
  EXPECT_THROW(io::write_safetensors(target, {{"a", a.view()}, {"a", a.view()}}), Error);
  EXPECT_THROW(io::write_safetensors(target, {{"__metadata__", a.view()}}), Error);
  EXPECT_THROW(io::write_safetensors(path("fresh.safetensors"), {{"a", on_gpu}}), Error);
  EXPECT_FALSE(fs::exists(path("fresh.safetensors")));
  EXPECT_EQ(files_in_dir(), 1u);
  EXPECT_EQ(io::read_safetensors(target).tensors.size(), 1u);

  // A directory that does not exist: an io error naming the target.
  try {
    io::write_safetensors(path("no/such/dir.safetensors"), {{"a", a.view()}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::io);
    EXPECT_NE(std::string(e.what()).find("dir.safetensors"), std::string::npos);
  }
  EXPECT_EQ(files_in_dir(), 1u);
}

TEST_F(SafetensorsTest, WriteFailureMidwayLeavesNothing) {
  // A file-size limit makes write(2) fail with EFBIG after the temporary file was created and
  // its first bytes written: the writer must report it and remove the temporary.
  HostTensor big(DType::float64, {1024});
  big.set_values(random_values(1024, 5));
  const std::string target = path("big.safetensors");
  struct rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old;
  small.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string message;
  try {
    io::write_safetensors(target, {{"big", big.view()}});
  } catch (const Error& e) {
    message = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_NE(message.find("cannot write"), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(target));
  EXPECT_EQ(files_in_dir(), 0u);
}

}  // namespace
}  // namespace rhoscan::testing
