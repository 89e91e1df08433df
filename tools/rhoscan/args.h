// Command-line options of the subcommands: `--name VALUE`, `--name=VALUE`, `--flag`, positionals.
// Anything unknown or malformed is an Error(invalid_argument), which main() turns into exit 2.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace rhoscan::cli {

class Args {
 public:
  // `valued`: options that take a value; `flags`: options that do not. Names include "--".
  Args(const char* command, const std::vector<std::string>& args, std::set<std::string> valued,
       std::set<std::string> flags);

  const std::vector<std::string>& positional() const { return positional_; }
  // Exactly `n` positional arguments, named in the error message by `what`.
  void expect_positional(size_t n, const char* what) const;

  bool flag(const std::string& name) const { return flags_set_.count(name) > 0; }
  std::optional<std::string> value(const std::string& name) const;
  std::string value_or(const std::string& name, const std::string& fallback) const;
  // An integer option within [lo, hi].
  int64_t integer(const std::string& name, int64_t fallback, int64_t lo, int64_t hi) const;

 private:
  [[noreturn]] void fail(const std::string& message) const;
  std::string command_;
  std::vector<std::string> positional_;
  std::map<std::string, std::string> values_;
  std::set<std::string> flags_set_;
};

}  // namespace rhoscan::cli
