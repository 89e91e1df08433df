// Command-line options of the form --name value (or --name for a flag), with typed getters that
// reject malformed values and a final check that every option given was one the command knows.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <stdexcept>
#include <string>

namespace bdh {

class Args {
 public:
  // `flags` are options that take no value.
  Args(int argc, char** argv, int first, const std::set<std::string>& flags) {
    for (int i = first; i < argc; ++i) {
      std::string key = argv[i];
      if (key.rfind("--", 0) != 0) throw std::invalid_argument("unexpected argument '" + key + "'");
      key = key.substr(2);
      if (flags.count(key)) {
        values_[key] = "1";
        continue;
      }
      if (i + 1 >= argc) throw std::invalid_argument("--" + key + " needs a value");
      values_[key] = argv[++i];
    }
  }

  bool has(const std::string& key) const {
    known_.insert(key);
    return values_.count(key) > 0;
  }
  bool flag(const std::string& key) const { return has(key); }

  std::string str(const std::string& key, const std::string& fallback) const {
    return has(key) ? values_.at(key) : fallback;
  }

  int64_t integer(const std::string& key, int64_t fallback, int64_t min_value) const {
    if (!has(key)) return fallback;
    const std::string& text = values_.at(key);
    int64_t value = 0;
    try {
      size_t used = 0;
      value = std::stoll(text, &used);
      if (used != text.size()) throw std::invalid_argument("trailing");
    } catch (const std::exception&) {
      throw std::invalid_argument("--" + key + ": '" + text + "' is not an integer");
    }
    if (value < min_value)
      throw std::invalid_argument("--" + key + ": " + text + " is below the minimum " +
                                  std::to_string(min_value));
    return value;
  }

  double real(const std::string& key, double fallback, double min_value) const {
    if (!has(key)) return fallback;
    const std::string& text = values_.at(key);
    double value = 0;
    try {
      size_t used = 0;
      value = std::stod(text, &used);
      if (used != text.size()) throw std::invalid_argument("trailing");
    } catch (const std::exception&) {
      throw std::invalid_argument("--" + key + ": '" + text + "' is not a number");
    }
    if (!(value >= min_value))
      throw std::invalid_argument("--" + key + ": " + text + " is below the minimum " +
                                  std::to_string(min_value));
    return value;
  }

  // Call after every getter has run: rejects options that no getter asked for.
  void reject_unknown() const {
    for (const auto& [key, value] : values_)
      if (!known_.count(key)) throw std::invalid_argument("unknown option --" + key);
  }

 private:
  std::map<std::string, std::string> values_;
  mutable std::set<std::string> known_;
};

}  // namespace bdh
