#include "core/logging.hpp"

#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>

namespace photon {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kWarn)};
std::mutex g_sink_mutex;
// Shared so that a record being written keeps its sink alive while another thread replaces it.
std::shared_ptr<const LogSink> g_sink;

void default_sink(LogLevel level, std::string_view message) {
  std::fprintf(stderr, "[photon %s] %.*s\n", log_level_name(level).data(), static_cast<int>(message.size()),
               message.data());
}

}  // namespace

void set_log_level(LogLevel level) { g_level.store(static_cast<int>(level), std::memory_order_relaxed); }

LogLevel log_level() { return static_cast<LogLevel>(g_level.load(std::memory_order_relaxed)); }

void set_log_sink(LogSink sink) {
  std::shared_ptr<const LogSink> next = sink ? std::make_shared<const LogSink>(std::move(sink)) : nullptr;
  std::lock_guard lock(g_sink_mutex);
  g_sink = std::move(next);
}

std::string_view log_level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kError:
      return "error";
    case LogLevel::kOff:
      return "off";
  }
  return "unknown";
}

bool parse_log_level(std::string_view name, LogLevel* level) {
  for (LogLevel l : {LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarn, LogLevel::kError, LogLevel::kOff}) {
    if (name == log_level_name(l)) {
      *level = l;
      return true;
    }
  }
  return false;
}

namespace log {

bool enabled(LogLevel level) {
  return level != LogLevel::kOff && static_cast<int>(level) >= g_level.load(std::memory_order_relaxed);
}

void write(LogLevel level, std::string_view message) {
  std::shared_ptr<const LogSink> sink;
  {
    std::lock_guard lock(g_sink_mutex);
    sink = g_sink;
  }
  if (sink) {
    (*sink)(level, message);
  } else {
    default_sink(level, message);
  }
}

}  // namespace log
}  // namespace photon
