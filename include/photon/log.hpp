// PhotonInfer — logging.
//
// The library never writes to stdout. Log records go to a process-wide sink: by default standard error, for records
// at or above the current level (default: warn). Applications redirect them with set_log_sink.
//
// Thread safety: all functions may be called from any thread. The sink may be invoked concurrently from several
// threads (the library serialises nothing on the caller's behalf); it must not call back into the log functions.
#pragma once

#include <functional>
#include <string_view>

#include <photon/export.hpp>

namespace photon {

/// Severity of a log record, lowest first.
enum class LogLevel : int { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };

/// Receives one formatted record (no trailing newline). The string is only valid during the call.
using LogSink = std::function<void(LogLevel level, std::string_view message)>;

/// Records below `level` are dropped before formatting. kOff silences the library.
PHOTON_API void set_log_level(LogLevel level);
/// The current threshold.
PHOTON_API LogLevel log_level();
/// Replaces the sink; an empty function restores the default standard-error sink.
PHOTON_API void set_log_sink(LogSink sink);
/// "debug", "info", "warn", "error" or "off"; parse_log_level accepts the same names (false when unknown).
PHOTON_API std::string_view log_level_name(LogLevel level);
PHOTON_API bool parse_log_level(std::string_view name, LogLevel* level);

}  // namespace photon
