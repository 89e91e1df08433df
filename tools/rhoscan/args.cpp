#include "args.h"

#include <cerrno>
#include <cstdlib>

#include "rhoscan/rhoscan.h"

namespace rhoscan::cli {

Args::Args(const char* command, const std::vector<std::string>& args, std::set<std::string> valued,
           std::set<std::string> flags)
    : command_(command) {
  bool only_positional = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (!only_positional && a == "--") {
      only_positional = true;
      continue;
    }
    // "-5" is a value, not an option; "-o" and "--name" are options.
    bool is_option = !only_positional && a.size() >= 2 && a[0] == '-' && !(a[1] >= '0' && a[1] <= '9');
    if (!is_option) {
      positional_.push_back(a);
      continue;
    }
    std::string name = a, val;
    bool inline_value = false;
    if (auto eq = a.find('='); eq != std::string::npos) {
      name = a.substr(0, eq);
      val = a.substr(eq + 1);
      inline_value = true;
    }
    if (flags.count(name)) {
      if (inline_value) fail("option '" + name + "' takes no value");
      flags_set_.insert(name);
    } else if (valued.count(name)) {
      if (!inline_value) {
        if (i + 1 >= args.size()) fail("option '" + name + "' needs a value");
        val = args[++i];
      }
      if (values_.count(name)) fail("option '" + name + "' given twice");
      values_[name] = val;
    } else {
      fail("unknown option '" + name + "'");
    }
  }
}

void Args::fail(const std::string& message) const {
  throw Error(ErrorKind::invalid_argument, message + " (see rhoscan " + command_ + " --help)");
}

void Args::expect_positional(size_t n, const char* what) const {
  if (positional_.size() != n)
    fail("expected " + std::string(what) + ", got " + std::to_string(positional_.size()) +
         " positional argument" + (positional_.size() == 1 ? "" : "s"));
}

std::optional<std::string> Args::value(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::string Args::value_or(const std::string& name, const std::string& fallback) const {
  return value(name).value_or(fallback);
}

int64_t Args::integer(const std::string& name, int64_t fallback, int64_t lo, int64_t hi) const {
  auto v = value(name);
  if (!v) return fallback;
  errno = 0;
  char* end = nullptr;
  long long x = std::strtoll(v->c_str(), &end, 10);
  if (v->empty() || *end != '\0' || errno == ERANGE || x < lo || x > hi)
    fail("option '" + name + "' must be an integer in [" + std::to_string(lo) + ", " +
         std::to_string(hi) + "], got '" + *v + "'");
  return x;
}

}  // namespace rhoscan::cli
