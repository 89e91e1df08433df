// The bdh program's subcommands (each returns the process exit code).
#pragma once

#include "args.h"

namespace bdh {

int run_train(const Args& args);
int run_generate(const Args& args);

}  // namespace bdh
