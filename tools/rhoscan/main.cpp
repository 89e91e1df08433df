// rhoscan: run, verify and benchmark the rho-attention operator from the command line.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>

#include "rhoscan/commands.h"
#include "rhoscan/rhoscan.h"

namespace rhoscan::cli {

std::vector<Command>& registry() {
  static std::vector<Command> commands;
  return commands;
}

}  // namespace rhoscan::cli

namespace {

void print_usage(FILE* out) {
  auto commands = rhoscan::cli::registry();
  std::sort(commands.begin(), commands.end(),
            [](const auto& a, const auto& b) { return std::strcmp(a.name, b.name) < 0; });
  std::fprintf(out,
               "rhoscan %s: the rho-attention operator of BDH (decayed, normalised linear attention)\n\n"
               "usage: rhoscan COMMAND [ARGS...]\n"
               "       rhoscan COMMAND --help\n\ncommands:\n",
               rhoscan::version());
  for (const auto& c : commands) std::fprintf(out, "  %-10s %s\n", c.name, c.summary);
  std::fprintf(out, "\nbackends in this build:");
  for (auto b : rhoscan::available_backends()) std::fprintf(out, " %s", rhoscan::backend_name(b));
  std::fprintf(out, "\nexit status: 0 success, 1 a check failed, 2 bad usage or input\n");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace rhoscan::cli;
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") ||
      !std::strcmp(argv[1], "help")) {
    print_usage(stdout);
    return argc < 2 ? kExitBadInput : kExitOk;
  }
  if (!std::strcmp(argv[1], "--version")) {
    std::printf("rhoscan %s\n", rhoscan::version());
    return kExitOk;
  }
  for (const auto& c : registry()) {
    if (std::strcmp(c.name, argv[1]) != 0) continue;
    std::vector<std::string> args(argv + 2, argv + argc);
    if (std::find(args.begin(), args.end(), "--help") != args.end()) {
      std::fputs(c.help(), stdout);
      return kExitOk;
    }
    try {
      return c.main(args);
    } catch (const rhoscan::Error& e) {
      std::fprintf(stderr, "rhoscan %s: error: %s\n", c.name, e.what());
      return e.kind() == rhoscan::ErrorKind::internal ? kExitFailed : kExitBadInput;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rhoscan %s: error: %s\n", c.name, e.what());
      return kExitFailed;
    }
  }
  std::fprintf(stderr, "rhoscan: unknown command '%s' (see rhoscan --help)\n", argv[1]);
  return kExitBadInput;
}
