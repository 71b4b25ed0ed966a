// A small command-line parser for the photon subcommands: `--name value`, `--name=value` and boolean `--flag`,
// with generated --help text and errors that name the offending flag.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <photon/status.hpp>

namespace photon::cli {

class Args {
 public:
  Args(std::string usage, std::string summary) : usage_(std::move(usage)), summary_(std::move(summary)) {}

  /// A boolean flag (present or not).
  void flag(const std::string& name, const std::string& help);
  /// An option taking a value; `metavar` names the value in help, `fallback` is shown as the default.
  void option(const std::string& name, const std::string& metavar, const std::string& help,
              const std::string& fallback = "");

  /// Parses argv[first..argc). Unknown flags, missing values and repeated options are errors.
  Status parse(int argc, char** argv, int first);
  bool help_requested() const { return help_; }
  std::string help_text() const;

  bool has(const std::string& name) const { return values_.contains(name); }
  /// The option's value, or its fallback.
  std::string get(const std::string& name) const;
  Result<int64_t> get_int(const std::string& name, int64_t min, int64_t max) const;
  Result<double> get_double(const std::string& name, double min, double max) const;
  /// A comma-separated list of integers, e.g. "1,2,3".
  Result<std::vector<int32_t>> get_int_list(const std::string& name) const;

 private:
  struct Spec {
    std::string metavar;  // empty for boolean flags
    std::string help;
    std::string fallback;
  };
  std::string usage_;
  std::string summary_;
  std::vector<std::string> order_;
  std::map<std::string, Spec> specs_;
  std::map<std::string, std::string> values_;
  bool help_ = false;
};

/// The body of a subcommand's main: parses argv[first..argc) into `args`, prints the help for --help (exit 0), then
/// runs `read_options` (its errors are usage errors: exit 2) and `run` (runtime errors: exit 1). Errors go to stderr
/// as "PROGRAM: error: MESSAGE", e.g. "photon generate: error: ...". Returns the process exit code.
int run_command(Args& args, int argc, char** argv, int first, const char* program,
                const std::function<Status()>& read_options, const std::function<Status()>& run);

}  // namespace photon::cli
