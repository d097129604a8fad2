// SPDX-License-Identifier: Apache-2.0
/// @file log.h
/// grex's log lines for programs built on it (launchers, tools): the same
/// threshold (GREX_LOG_LEVEL=error|warn|info|debug|trace, default warn) and
/// the same "[host H subsystem] LEVEL text" lines as the library's own
/// (GREX_LOG_SUBSYS and GREX_LOG_FILE apply too).
#pragma once

#include <cstdint>
#include <string_view>

namespace grex {

/// Severity of a log line, most severe first.
enum class LogLevel : uint8_t { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3, kTrace = 4 };

/// True when GREX_LOG_LEVEL lets lines of `level` through (read once per process).
bool log_enabled(LogLevel level) noexcept;

/// Writes "[host H subsystem] LEVEL text" ("[rank R host H subsystem] ..."
/// once a Communicator of this process set its rank) and a newline to stderr with
/// one write, whatever the threshold; lines longer than about 1 KiB are cut.
/// Thread-safe.
void log_line(LogLevel level, std::string_view subsystem, std::string_view text) noexcept;

}  // namespace grex
