// Internal logging front-end: fmt-formatted records sent to the sink configured through <photon/log.hpp>.
#pragma once

#include <fmt/format.h>

#include <photon/log.hpp>

namespace photon::log {

bool enabled(LogLevel level);
void write(LogLevel level, std::string_view message);

template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(LogLevel::kDebug)) write(LogLevel::kDebug, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(LogLevel::kInfo)) write(LogLevel::kInfo, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(LogLevel::kWarn)) write(LogLevel::kWarn, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void error(fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(LogLevel::kError)) write(LogLevel::kError, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace photon::log
