// SPDX-License-Identifier: Apache-2.0
// Logging: GREX_LOG_LEVEL=error|warn|info|debug|trace, one line per event, "[rank N subsystem]".
#pragma once

#include <cstdarg>

namespace grex::log {

enum class Level : int { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3, kTrace = 4 };

/// The current threshold; read once from GREX_LOG_LEVEL (default warn).
Level level() noexcept;
/// Overrides the threshold (tests, tools with -v).
void set_level(Level l) noexcept;
/// Sets the rank printed in every line of this process (-1: none yet).
void set_rank(int rank) noexcept;
/// The same where no rank is set yet: the first communicator a process makes
/// names it, not the sub-groups it makes later (a torch group, a p2p pair).
void set_rank_if_unset(int rank) noexcept;
/// Parses "error|warn|info|debug|trace" (or 0..4); returns false if unknown.
bool parse_level(const char* text, Level* out) noexcept;

/// Writes one line "[rank R subsystem] LEVEL message" to stderr. Thread-safe.
void write(Level l, const char* subsystem, const char* fmt, ...) noexcept
    __attribute__((format(printf, 3, 4)));

inline bool enabled(Level l) noexcept { return static_cast<int>(l) <= static_cast<int>(level()); }

}  // namespace grex::log

#define GREX_LOG(lvl, subsys, ...)                                         \
  do {                                                                     \
    if (::grex::log::enabled(::grex::log::Level::lvl))                     \
      ::grex::log::write(::grex::log::Level::lvl, subsys, __VA_ARGS__);    \
  } while (0)

#define GREX_ERROR(subsys, ...) GREX_LOG(kError, subsys, __VA_ARGS__)
#define GREX_WARN(subsys, ...) GREX_LOG(kWarn, subsys, __VA_ARGS__)
#define GREX_INFO(subsys, ...) GREX_LOG(kInfo, subsys, __VA_ARGS__)
#define GREX_DEBUG(subsys, ...) GREX_LOG(kDebug, subsys, __VA_ARGS__)
#define GREX_TRACE(subsys, ...) GREX_LOG(kTrace, subsys, __VA_ARGS__)
