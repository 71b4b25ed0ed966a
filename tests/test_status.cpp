#include <catch2/catch_test_macros.hpp>
#include <photon/log.hpp>
#include <photon/status.hpp>
#include <photon/version.hpp>

#include <mutex>
#include <string>
#include <vector>

#include "core/logging.hpp"

using namespace photon;

namespace {
Result<int> half(int x) {
  if (x % 2 != 0) return Status(StatusCode::kInvalidArgument, "odd");
  return x / 2;
}
Result<int> quarter(int x) {
  PHOTON_ASSIGN_OR_RETURN(int h, half(x));
  return half(h);
}
}  // namespace

TEST_CASE("Status and Result carry values and errors") {
  CHECK(Status::ok().is_ok());
  Status s(StatusCode::kNotFound, "no such file");
  CHECK_FALSE(s.is_ok());
  CHECK(s.to_string() == "not found: no such file");
  CHECK(s.with_context("config.json").message() == "config.json: no such file");
  CHECK(quarter(8).value() == 2);
  CHECK(quarter(6).status().code() == StatusCode::kInvalidArgument);
  CHECK(quarter(6).status().message() == "odd");
}

TEST_CASE("version matches the headers") { CHECK(std::string(version_string()) == PHOTON_VERSION_STRING); }

TEST_CASE("log records go to the user's sink, filtered by level") {
  std::vector<std::pair<LogLevel, std::string>> seen;
  set_log_sink([&](LogLevel level, std::string_view msg) { seen.emplace_back(level, std::string(msg)); });
  set_log_level(LogLevel::kInfo);
  log::debug("hidden {}", 1);
  log::info("shown {}", 2);
  log::error("also {}", 3);
  set_log_sink({});
  set_log_level(LogLevel::kWarn);
  REQUIRE(seen.size() == 2);
  CHECK(seen[0].first == LogLevel::kInfo);
  CHECK(seen[0].second == "shown 2");
  CHECK(seen[1].second == "also 3");
  LogLevel parsed{};
  CHECK(parse_log_level("error", &parsed));
  CHECK(parsed == LogLevel::kError);
  CHECK_FALSE(parse_log_level("loud", &parsed));
}
