// The rhoscan tool's subcommands. Each lives in its own file and registers itself:
//
//   static const rhoscan::cli::Registration kRun{"run", "run the operator on a safetensors file",
//                                                 run_help, run_main};
//
// main.cpp prints the table in --help and dispatches `rhoscan NAME ARGS...` to NAME's main.
#pragma once

#include <string>
#include <vector>

namespace rhoscan::cli {

// Exit statuses shared by all subcommands.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;      // ran, but a check did not pass (verify)
inline constexpr int kExitBadInput = 2;    // usage error, malformed file, invalid input

struct Command {
  const char* name;
  const char* summary;             // one line for `rhoscan --help`
  const char* (*help)();           // the full text for `rhoscan NAME --help`
  int (*main)(const std::vector<std::string>& args);  // args after NAME
};

std::vector<Command>& registry();

struct Registration {
  Registration(const char* name, const char* summary, const char* (*help)(),
               int (*main)(const std::vector<std::string>&)) {
    registry().push_back({name, summary, help, main});
  }
};

}  // namespace rhoscan::cli
