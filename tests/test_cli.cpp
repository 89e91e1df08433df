// The rhoscan command-line tool, run as a program: `run` against the library's API, layouts,
// the hand-checked example of SPEC.md, `verify`, `example`, and every malformed or invalid input
// (exit 2, one line on stderr, no output file).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "io/safetensors.h"
#include "support/problem.h"

#ifndef RHOSCAN_CLI
#error "RHOSCAN_CLI (the path of the rhoscan executable) must be defined"
#endif

namespace rhoscan::testing {
namespace {

namespace fs = std::filesystem;

struct CliResult {
  int status = -1;
  std::string out, err;
};

std::string read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("rhoscan-cli-" + std::string(info->name()) + "-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "files");
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Files live in dir_/files; the tool's stdout/stderr are captured beside that directory.
  std::string path(const std::string& name) const { return (dir_ / "files" / name).string(); }
  std::vector<std::string> files() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_ / "files")) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  CliResult cli(const std::string& args) const {
    const fs::path out = dir_ / "stdout.txt", err = dir_ / "stderr.txt";
    std::string command = std::string("cd '") + (dir_ / "files").string() + "' && '" + RHOSCAN_CLI + "' " + args +
                          " >'" + out.string() + "' 2>'" + err.string() + "'";
    int status = std::system(command.c_str());
    CliResult r;
    r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = read_all(out);
    r.err = read_all(err);
    return r;
  }

  // Runs and expects success.
  CliResult ok(const std::string& args) const {
    CliResult r = cli(args);
    EXPECT_EQ(r.status, 0) << "rhoscan " << args << "\nstdout: " << r.out << "\nstderr: " << r.err;
    return r;
  }

  fs::path dir_;
};

std::vector<double> values(const io::StoredTensor& t) {
  HostTensor h(t.dtype, t.shape);
  std::memcpy(h.data(), t.bytes.data(), t.bytes.size());
  return h.values();
}

std::vector<std::string> names(const io::SafetensorsFile& f) {
  std::vector<std::string> out;
  for (const auto& t : f.tensors) out.push_back(t.name);
  return out;
}

HostTensor host(DType dtype, std::vector<int64_t> shape, std::vector<double> v) {
  HostTensor t(dtype, std::move(shape));
  t.set_values(v);
  return t;
}

// The library's reference run through the API on a file's tensors (as the CLI reads them:
// 16-bit decay and states promoted to float32): the outputs the CLI must reproduce bit for bit.
std::map<std::string, std::vector<double>> reference_through_api(const io::SafetensorsFile& in) {
  auto get = [&](const char* n) -> const io::StoredTensor& { return in.get(n, "input"); };
  const io::StoredTensor &q = get("q"), &v = get("v"), &decay = get("decay");
  const int64_t B = q.shape[0], H = q.shape[1], T = q.shape[2], L = q.shape[3], E = v.shape[3];
  const DType sd = DType::float32;
  HostTensor context(q.dtype, {B, H, T, E}), rho(sd, {B, H, L, E}), rho_norm(sd, {B, H, L});
  ForwardArgs f;
  f.q = q.view();
  f.v = v.view();
  f.decay = decay.view();
  if (auto* r = in.find("rho")) f.rho = r->view();
  if (auto* r = in.find("rho_norm")) f.rho_norm = r->view();
  f.context = context.view();
  f.rho_out = rho.view();
  f.rho_norm_out = rho_norm.view();
  Options o;
  o.backend = Backend::reference;
  forward(f, o);
  std::map<std::string, std::vector<double>> out{
      {"context", context.values()}, {"rho", rho.values()}, {"rho_norm", rho_norm.values()}};
  if (const io::StoredTensor* g = in.find("grad_context")) {
    HostTensor gq(q.dtype, q.shape), gv(v.dtype, v.shape), ga(decay.dtype, decay.shape), gr(sd, {B, H, L, E}),
        gn(sd, {B, H, L});
    BackwardArgs b;
    b.q = f.q;
    b.v = f.v;
    b.decay = f.decay;
    b.rho = f.rho;
    b.rho_norm = f.rho_norm;
    b.grad_context = g->view();
    if (auto* r = in.find("grad_rho")) b.grad_rho_out = r->view();
    if (auto* r = in.find("grad_rho_norm")) b.grad_rho_norm_out = r->view();
    b.grad_q = gq.view();
    b.grad_v = gv.view();
    b.grad_decay = ga.view();
    b.grad_rho = gr.view();
    b.grad_rho_norm = gn.view();
    backward(b, o);
    out["grad_q"] = gq.values();
    out["grad_v"] = gv.values();
    out["grad_decay"] = ga.values();
    out["grad_rho"] = gr.values();
    out["grad_rho_norm"] = gn.values();
  }
  return out;
}

TEST_F(CliTest, RunReproducesTheReferenceThroughTheApi) {
  for (const char* extra : {"", " --with-state", " --with-grads", " --with-state --with-grads --Hv 3"}) {
    SCOPED_TRACE(extra);
    ok(std::string("example in.safetensors --B 2 --H 3 --T 9 --L 7 --E 5 --seed 3") + extra);
    ok("run in.safetensors -o out.safetensors --backend reference");
    io::SafetensorsFile in = io::read_safetensors(path("in.safetensors"));
    io::SafetensorsFile out = io::read_safetensors(path("out.safetensors"));
    auto want = reference_through_api(in);
    ASSERT_EQ(out.tensors.size(), want.size());
    for (const auto& [name, ref] : want) {
      EXPECT_EQ(values(out.get(name, "out")), ref) << name;
      EXPECT_EQ(out.get(name, "out").dtype, DType::float32) << name;
    }
    // The default backend (whatever this build has) within SPEC.md's float32 tolerances.
    ok("run in.safetensors -o auto.safetensors");
    io::SafetensorsFile automatic = io::read_safetensors(path("auto.safetensors"));
    for (const auto& [name, ref] : want) {
      double tol = name.rfind("grad_", 0) == 0 ? gradient_tolerance(DType::float32) : forward_tolerance(DType::float32);
      EXPECT_LE(rms_rel(values(automatic.get(name, "auto")), ref), tol) << name;
    }
  }
}

TEST_F(CliTest, GradientOutputsArePresentExactlyWhenGradContextIsGiven) {
  ok("example a.safetensors --T 5 --L 4 --E 3 --with-state");
  ok("run a.safetensors -o a_out.safetensors");
  EXPECT_EQ(names(io::read_safetensors(path("a_out.safetensors"))),
            (std::vector<std::string>{"context", "rho", "rho_norm"}));
  ok("example b.safetensors --T 5 --L 4 --E 3 --with-grads");
  ok("run b.safetensors -o b_out.safetensors");
  EXPECT_EQ(names(io::read_safetensors(path("b_out.safetensors"))),
            (std::vector<std::string>{"context", "rho", "rho_norm", "grad_q", "grad_v", "grad_decay", "grad_rho",
                                      "grad_rho_norm"}));
}

TEST_F(CliTest, HandCheckedExampleOfTheSpec) {
  // SPEC.md: B=H=1, T=2, L=E=2, Hv=1, a=0.5, no initial state.
  for (DType dtype : {DType::float64, DType::float32}) {
    SCOPED_TRACE(dtype_name(dtype));
    HostTensor q = host(dtype, {1, 1, 2, 2}, {2, 0, 1, 3}), v = host(dtype, {1, 1, 2, 2}, {10, 20, 30, 40});
    HostTensor a = host(DType::float32, {1, 2}, {0.5, 0.5});
    io::write_safetensors(path("spec.safetensors"), {{"q", q.view()}, {"v", v.view()}, {"decay", a.view()}});
    ok("run spec.safetensors -o spec_out.safetensors --backend reference");
    io::SafetensorsFile out = io::read_safetensors(path("spec_out.safetensors"));
    std::vector<double> c = values(out.get("context", "out"));
    ASSERT_EQ(c.size(), 4u);
    EXPECT_EQ(c[0], 0.0);
    EXPECT_EQ(c[1], 0.0);
    EXPECT_NEAR(c[2], 2.4999981, 5e-7);
    EXPECT_NEAR(c[3], 4.9999963, 5e-7);
    EXPECT_EQ(values(out.get("rho", "out")), (std::vector<double>{40, 60, 90, 120}));
    EXPECT_EQ(values(out.get("rho_norm", "out")), (std::vector<double>{2, 3}));
    EXPECT_EQ(out.get("context", "out").dtype, dtype);
    EXPECT_EQ(out.get("rho", "out").dtype, dtype == DType::float64 ? DType::float64 : DType::float32);
  }
}

TEST_F(CliTest, SixteenBitInputsKeepTheirDtypeAndStatesAreFloat32) {
  ok("example h.safetensors --T 6 --L 8 --E 4 --dtype bf16 --with-state --with-grads");
  ok("run h.safetensors -o h_out.safetensors");
  io::SafetensorsFile out = io::read_safetensors(path("h_out.safetensors"));
  for (const char* n : {"context", "grad_q", "grad_v"}) EXPECT_EQ(out.get(n, "o").dtype, DType::bfloat16) << n;
  for (const char* n : {"rho", "rho_norm", "grad_decay", "grad_rho", "grad_rho_norm"})
    EXPECT_EQ(out.get(n, "o").dtype, DType::float32) << n;
}

TEST_F(CliTest, TimeMajorLayoutGivesTheSameResults) {
  ok("example bhtl.safetensors --B 2 --H 3 --Hv 3 --T 6 --L 5 --E 4 --with-state --with-grads");
  io::SafetensorsFile in = io::read_safetensors(path("bhtl.safetensors"));
  // The same tensors stored [B, T, H, *]: a permuted view is written row-major.
  std::vector<io::NamedView> views;
  for (const auto& t : in.tensors) {
    bool seq = t.name == "q" || t.name == "v" || t.name == "grad_context";
    views.push_back({t.name, seq ? t.view().permuted({0, 2, 1, 3}) : t.view()});
  }
  io::write_safetensors(path("bthl.safetensors"), views, {{"layout", "bthl"}});
  ok("run bhtl.safetensors -o bhtl_out.safetensors --backend reference");
  ok("run bthl.safetensors -o bthl_out.safetensors --backend reference");
  // Without the metadata, --layout says it.
  io::write_safetensors(path("bthl_nometa.safetensors"), views);
  ok("run bthl_nometa.safetensors -o bthl_flag_out.safetensors --backend reference --layout bthl");
  io::SafetensorsFile a = io::read_safetensors(path("bhtl_out.safetensors"));
  for (const char* file : {"bthl_out.safetensors", "bthl_flag_out.safetensors"}) {
    SCOPED_TRACE(file);
    io::SafetensorsFile b = io::read_safetensors(path(file));
    for (const auto& t : a.tensors) {
      const io::StoredTensor& u = b.get(t.name, "b");
      bool seq = t.name == "context" || t.name == "grad_q" || t.name == "grad_v";
      std::vector<double> x = values(t), y = values(u);
      ASSERT_EQ(x.size(), y.size()) << t.name;
      if (!seq) {
        EXPECT_EQ(x, y) << t.name;
        continue;
      }
      EXPECT_EQ(u.shape, (std::vector<int64_t>{t.shape[0], t.shape[2], t.shape[1], t.shape[3]})) << t.name;
      const int64_t B = t.shape[0], H = t.shape[1], T = t.shape[2], X = t.shape[3];
      for (int64_t b0 = 0; b0 < B; ++b0)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t s = 0; s < T; ++s)
            for (int64_t e = 0; e < X; ++e)
              ASSERT_EQ(x[((b0 * H + h) * T + s) * X + e], y[((b0 * T + s) * H + h) * X + e]) << t.name;
    }
  }
  // A --layout that contradicts the file's metadata is an error.
  CliResult r = cli("run bthl.safetensors -o x.safetensors --layout bhtl");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("contradicts"), std::string::npos) << r.err;
}

TEST_F(CliTest, VerifyPassesOnGoodFiles) {
  for (const char* dtype : {"f32", "bf16", "f16", "f64"}) {
    SCOPED_TRACE(dtype);
    ok(std::string("example v.safetensors --B 2 --H 2 --T 13 --L 16 --E 8 --with-state --with-grads --dtype ") + dtype);
    CliResult r = ok("verify v.safetensors");
    EXPECT_NE(r.out.find("all outputs within tolerance"), std::string::npos) << r.out;
    size_t passes = 0;
    for (size_t p = r.out.find(" pass"); p != std::string::npos; p = r.out.find(" pass", p + 1)) ++passes;
    EXPECT_EQ(passes, 8u) << r.out;
    EXPECT_EQ(r.out.find("FAIL"), std::string::npos) << r.out;
  }
  ok("example f.safetensors --T 4 --L 4 --E 2");
  CliResult r = ok("verify f.safetensors --backend reference");
  EXPECT_NE(r.out.find("context"), std::string::npos);
  EXPECT_EQ(r.out.find("grad_q"), std::string::npos) << "no gradients without grad_context";
}

TEST_F(CliTest, VerifyFailsWhenAnOutputIsOutsideItsTolerance) {
  // An initial state with rho = 1 and rho_norm = 0 reads 1 / eps = 1e6 into the context, which
  // float16 cannot hold (max 65504): the float16 context is Inf, the reference's is 1e6.
  HostTensor q = host(DType::float16, {1, 1, 1, 1}, {1}), v = host(DType::float16, {1, 1, 1, 1}, {1});
  HostTensor a = host(DType::float32, {1, 1}, {1}), rho = host(DType::float32, {1, 1, 1, 1}, {1});
  HostTensor rho_norm = host(DType::float32, {1, 1, 1}, {0});
  io::write_safetensors(path("overflow.safetensors"), {{"q", q.view()}, {"v", v.view()}, {"decay", a.view()},
                                                       {"rho", rho.view()}, {"rho_norm", rho_norm.view()}});
  CliResult r = cli("verify overflow.safetensors --backend reference");
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("FAIL"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("FAILED"), std::string::npos) << r.out;
}

TEST_F(CliTest, ExampleIsDeterministicAndBdhLike) {
  ok("example a.safetensors --seed 7 --T 20 --L 64 --E 4");
  ok("example b.safetensors --seed 7 --T 20 --L 64 --E 4");
  ok("example c.safetensors --seed 8 --T 20 --L 64 --E 4");
  EXPECT_EQ(read_all(path("a.safetensors")), read_all(path("b.safetensors")));
  EXPECT_NE(read_all(path("a.safetensors")), read_all(path("c.safetensors")));
  io::SafetensorsFile f = io::read_safetensors(path("a.safetensors"));
  std::vector<double> q = values(f.get("q", "a")), a = values(f.get("decay", "a"));
  size_t zeros = 0;
  for (double x : q) {
    EXPECT_GE(x, 0.0);
    zeros += x == 0.0;
  }
  EXPECT_GT(zeros, q.size() / 2) << "q is sparse";
  EXPECT_LT(zeros, q.size());
  for (double x : a) EXPECT_TRUE(x >= 0.0 && x <= 1.0) << x;
  EXPECT_EQ(f.get("v", "a").shape, (std::vector<int64_t>{1, 1, 20, 4}));
}

// bench --shape: a case of the user's own sizes, its JSON line carrying them; a malformed shape
// exits 2 naming the option and what it saw.
TEST_F(CliTest, BenchRunsACustomShapeAndRejectsMalformedOnes) {
  ok("bench --shape 1,2,1,70,33,20 --backward --repeats 1 --no-naive --json b.jsonl");
  const std::string json = read_all(path("b.jsonl"));
  EXPECT_NE(json.find("\"case\":\"shape-B1-H2-Hv1-T70-L33-E20\",\"B\":1,\"H\":2,\"Hv\":1,\"T\":70,\"L\":33,\"E\":20"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("\"direction\":\"forward+backward\""), std::string::npos) << json;
  for (const char* shape : {"1,2,3,70,33,20", "1,2,1,70,33", "1,2,1,70,33,20,5", "1,0,1,70,33,20", "1,2,1,x,33,20"}) {
    const CliResult r = cli(std::string("bench --shape ") + shape);
    EXPECT_EQ(r.status, 2) << shape;
    EXPECT_NE(r.err.find("--shape"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(shape), std::string::npos) << r.err;
  }
}

// bench --with-state: both directions run from a carried state (the table's "+state" rows, the JSON's
// with_state); without it the JSON says false.
TEST_F(CliTest, BenchWithStateMarksItsRows) {
  const CliResult r = ok("bench --shape 1,2,1,70,33,20 --with-state --backward --repeats 1 --no-naive --json s.jsonl");
  EXPECT_NE(r.out.find("shape-B1-H2-Hv1-T70-L33-E20+state forward "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("shape-B1-H2-Hv1-T70-L33-E20+state forward+backward"), std::string::npos) << r.out;
  const std::string json = read_all(path("s.jsonl"));
  size_t lines = 0, with_state = 0;
  for (size_t at = 0; (at = json.find('\n', at)) != std::string::npos; ++at) ++lines;
  for (size_t at = 0; (at = json.find("\"with_state\":true", at)) != std::string::npos; ++at) ++with_state;
  EXPECT_EQ(lines, 2u) << json;
  EXPECT_EQ(with_state, 2u) << json;
  ok("bench --shape 1,2,1,70,33,20 --repeats 1 --no-naive --json plain.jsonl");
  EXPECT_NE(read_all(path("plain.jsonl")).find("\"with_state\":false"), std::string::npos);
  EXPECT_NE(ok("bench --help").out.find("--with-state"), std::string::npos);
}

TEST_F(CliTest, HelpDocumentsOptionsTensorsAndExitStatuses) {
  CliResult top = ok("--help");
  for (const char* c : {"run", "verify", "example"}) EXPECT_NE(top.out.find(c), std::string::npos) << c;
  CliResult run = ok("run --help");
  for (const char* s : {"--device", "--backend", "--chunk", "--check-finite", "--layout", "grad_context", "grad_rho_norm",
                        "exit status", "rho_norm"})
    EXPECT_NE(run.out.find(s), std::string::npos) << s;
  EXPECT_NE(ok("verify --help").out.find("5e-3"), std::string::npos);
  EXPECT_NE(ok("example --help").out.find("--with-grads"), std::string::npos);
}

// Every way a run can be refused: exit status 2, exactly one line on stderr, no output file, no
// temporary left behind.
struct BadRun {
  const char* what;
  std::function<void(const CliTest&)> make_input;  // writes files/in.safetensors (or not)
  std::string extra_args;
  const char* message;  // a fragment of the one-line error
};

void write_raw(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

std::string raw_file(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(static_cast<uint64_t>(header.size()) >> (8 * i));
  return out + header + data;
}

TEST_F(CliTest, MalformedFilesAndInvalidInputsExitTwoWithOneLineAndNoOutput) {
  const std::string in = path("in.safetensors");
  auto good = [in](double decay_value, bool with_decay, std::vector<int64_t> q_shape, const char* extra_name) {
    return [=](const CliTest&) {
      HostTensor q(DType::float32, q_shape), v(DType::float32, {1, 1, 3, 2}), a(DType::float32, {1, 4});
      q.fill(0.5);
      v.fill(1.0);
      a.fill(decay_value);
      std::vector<io::NamedView> t{{"q", q.view()}, {"v", v.view()}};
      if (with_decay) t.push_back({"decay", a.view()});
      HostTensor x(DType::float32, {1, 1, 4, 3});  // E is 2: a wrong state shape
      if (extra_name) t.push_back({extra_name, x.view()});
      io::write_safetensors(in, t);
    };
  };
  const std::vector<int64_t> qs{1, 1, 3, 4};
  std::vector<BadRun> cases{
      {"truncated", [&](const CliTest& t) {
         good(0.5, true, qs, nullptr)(t);
         std::string b = read_all(in);
         write_raw(in, b.substr(0, b.size() / 2));
       }, "", "truncated"},
      {"bad header JSON", [&](const CliTest&) { write_raw(in, raw_file("{\"q\": [1, 2", "")); }, "", "bad header JSON"},
      {"offsets outside the data", [&](const CliTest&) {
         write_raw(in, raw_file(R"({"q":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", "xx"));
       }, "", "outside the 2-byte data section"},
      {"unknown dtype", [&](const CliTest&) {
         write_raw(in, raw_file(R"({"q":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", std::string(8, '\0')));
       }, "", "tensor 'q' has dtype 'I64'"},
      {"missing tensor", good(0.5, false, qs, nullptr), "", "missing tensor 'decay'"},
      {"wrong rank", good(0.5, true, {1, 3, 4}, nullptr), "", "tensor 'q' has shape [1, 3, 4]"},
      {"unknown tensor", good(0.5, true, qs, "rho_nrom"), "", "unknown tensor 'rho_nrom'"},
      {"state of the wrong shape", good(0.5, true, qs, "rho"), "", "rho: expected shape [B, H, L, E] = [1, 1, 4, 2]"},
      {"decay outside [0, 1]", good(1.5, true, qs, nullptr), "", "decay"},
      {"final-state gradient without grad_context", good(0.5, true, qs, "grad_rho"), "", "need grad_context"},
      {"NaN with --check-finite", [&](const CliTest& t) {
         HostTensor q(DType::float32, {1, 1, 3, 4}), v(DType::float32, {1, 1, 3, 2}), a(DType::float32, {1, 4});
         q.fill(std::nan(""));
         a.fill(0.5);
         io::write_safetensors(in, {{"q", q.view()}, {"v", v.view()}, {"decay", a.view()}});
         (void)t;
       }, "--check-finite", "q"},
      {"input file absent", [](const CliTest&) {}, "", "cannot open"},
      {"unknown option", good(0.5, true, qs, nullptr), "--frobnicate", "unknown option '--frobnicate'"},
      {"bad backend", good(0.5, true, qs, nullptr), "--backend turbo", "turbo"},
      {"bad device", good(0.5, true, qs, nullptr), "--device tpu", "--device"},
      {"bad layout", good(0.5, true, qs, nullptr), "--layout thbl", "layout"},
      {"chunk 0", good(0.5, true, qs, nullptr), "--chunk 0", "--chunk"},
  };
  const auto backends = available_backends();
  if (std::find(backends.begin(), backends.end(), Backend::cuda) == backends.end())
    cases.push_back({"cuda unavailable", good(0.5, true, qs, nullptr), "--device cuda", "cuda"});
  if (std::find(backends.begin(), backends.end(), Backend::vulkan) == backends.end())
    cases.push_back({"vulkan unavailable", good(0.5, true, qs, nullptr), "--device vulkan", "vulkan"});

  for (const BadRun& c : cases) {
    SCOPED_TRACE(c.what);
    fs::remove_all(dir_ / "files");
    fs::create_directories(dir_ / "files");
    c.make_input(*this);
    const bool had_input = fs::exists(in);
    CliResult r = cli("run in.safetensors -o out.safetensors " + c.extra_args);
    EXPECT_EQ(r.status, 2) << r.err;
    ASSERT_FALSE(r.err.empty());
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line: " << r.err;
    EXPECT_EQ(r.err.rfind("rhoscan run: error: ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
    EXPECT_EQ(files(), had_input ? std::vector<std::string>{"in.safetensors"} : std::vector<std::string>{});
  }
  // Usage errors of the other commands.
  EXPECT_EQ(cli("run").status, 2);
  EXPECT_EQ(cli("run a b -o c").status, 2);
  EXPECT_EQ(cli("verify").status, 2);
  EXPECT_EQ(cli("example x.safetensors --Hv 3 --H 2").status, 2);
  EXPECT_EQ(cli("example x.safetensors --dtype i8").status, 2);
  EXPECT_FALSE(fs::exists(path("x.safetensors")));
  EXPECT_EQ(cli("nonsense").status, 2);
}

}  // namespace
}  // namespace rhoscan::testing
