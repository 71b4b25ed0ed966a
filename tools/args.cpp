#include "args.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

namespace photon::cli {

void Args::flag(const std::string& name, const std::string& help) {
  order_.push_back(name);
  specs_[name] = {"", help, ""};
}

void Args::option(const std::string& name, const std::string& metavar, const std::string& help,
                  const std::string& fallback) {
  order_.push_back(name);
  specs_[name] = {metavar, help, fallback};
}

Status Args::parse(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      help_ = true;
      continue;
    }
    if (!arg.starts_with("--")) {
      return Status(StatusCode::kInvalidArgument, fmt::format("unexpected argument '{}'; options start with --", arg));
    }
    std::string name = arg.substr(2);
    std::optional<std::string> value;
    if (const auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    const auto spec = specs_.find(name);
    if (spec == specs_.end()) {
      return Status(StatusCode::kInvalidArgument, fmt::format("unknown option '--{}'; see --help", name));
    }
    if (values_.contains(name)) {
      return Status(StatusCode::kInvalidArgument, fmt::format("option '--{}' is given more than once", name));
    }
    if (spec->second.metavar.empty()) {
      if (value) return Status(StatusCode::kInvalidArgument, fmt::format("flag '--{}' takes no value", name));
      values_[name] = "";
      continue;
    }
    if (!value) {
      if (i + 1 >= argc) {
        return Status(StatusCode::kInvalidArgument,
                      fmt::format("option '--{}' needs a value ({})", name, spec->second.metavar));
      }
      value = argv[++i];
    }
    values_[name] = *value;
  }
  return Status::ok();
}

std::string Args::help_text() const {
  std::string out = fmt::format("Usage: {}\n\n{}\n\nOptions:\n", usage_, summary_);
  for (const auto& name : order_) {
    const Spec& s = specs_.at(name);
    std::string left = "  --" + name + (s.metavar.empty() ? "" : " " + s.metavar);
    std::string help = s.help;
    if (!s.fallback.empty()) help += fmt::format(" (default: {})", s.fallback);
    if (left.size() < 30) {
      out += fmt::format("{:<30}{}\n", left, help);
    } else {
      out += fmt::format("{}\n{:<30}{}\n", left, "", help);
    }
  }
  out += fmt::format("{:<30}{}\n", "  --help", "show this help and exit");
  return out;
}

std::string Args::get(const std::string& name) const {
  const auto it = values_.find(name);
  if (it != values_.end()) return it->second;
  const auto spec = specs_.find(name);
  return spec == specs_.end() ? std::string() : spec->second.fallback;
}

Result<int64_t> Args::get_int(const std::string& name, int64_t min, int64_t max) const {
  const std::string text = get(name);
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE || v < min || v > max) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("option '--{}' needs an integer from {} to {}, not '{}'", name, min, max, text));
  }
  return static_cast<int64_t>(v);
}

Result<double> Args::get_double(const std::string& name, double min, double max) const {
  const std::string text = get(name);
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(v) || v < min || v > max) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("option '--{}' needs a number from {} to {}, not '{}'", name, min, max, text));
  }
  return v;
}

Result<std::vector<int32_t>> Args::get_int_list(const std::string& name) const {
  const std::string text = get(name);
  std::vector<int32_t> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, comma - pos);
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || errno == ERANGE || v < 0 || v > INT32_MAX) {
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("option '--{}' needs comma-separated non-negative integers such as 1,2,3; '{}' is "
                                "not one",
                                name, item));
    }
    out.push_back(static_cast<int32_t>(v));
    pos = comma + 1;
  }
  return out;
}

int run_command(Args& args, int argc, char** argv, int first, const char* program,
                const std::function<Status()>& read_options, const std::function<Status()>& run) {
  if (Status s = args.parse(argc, argv, first); !s) {
    fmt::print(stderr, "{}: error: {}\n", program, s.message());
    return 2;
  }
  if (args.help_requested()) {
    fmt::print("{}", args.help_text());
    return 0;
  }
  if (Status s = read_options(); !s) {
    fmt::print(stderr, "{}: error: {}\n", program, s.message());
    return 2;
  }
  if (Status s = run(); !s) {
    fmt::print(stderr, "{}: error: {}\n", program, s.message());
    return 1;
  }
  return 0;
}

}  // namespace photon::cli
