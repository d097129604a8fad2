// SPDX-License-Identifier: Apache-2.0
// Logging: GREX_LOG_LEVEL=error|warn|info|debug|trace, one line per event,
// "[rank N host H subsystem] LEVEL text". GREX_LOG_SUBSYS picks the
// subsystems whose info, debug and trace lines print (warnings and errors
// always do), as NCCL_DEBUG_SUBSYS: INIT, COLL, P2P, NET, SHM, CC, BOOT, GPU,
// ALL, and ^X to leave X out. GREX_LOG_FILE=path (%r: rank, %h: host, %p:
// pid) writes the lines there instead of stderr.
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

/// The subsystem groups GREX_LOG_SUBSYS names, as bits.
enum Group : unsigned {
  kInit = 1u << 0,  // communicator setup ("init")
  kColl = 1u << 1,  // collectives and their outcomes ("comm")
  kP2p = 1u << 2,   // point-to-point ("p2p")
  kNet = 1u << 3,   // network drivers ("dpdk", "verbs", "loop", "net")
  kShm = 1u << 4,   // shared memory ("shm")
  kCc = 1u << 5,    // congestion control ("cc")
  kBoot = 1u << 6,  // bootstrap and store ("bootstrap", "store", "run")
  kGpu = 1u << 7,   // GPU buffers ("gpu")
  kOther = 1u << 8, // anything else (tools)
  kAll = (1u << 9) - 1,
};
/// The group of a line's subsystem name.
unsigned group_of(const char* subsystem) noexcept;
/// Parses a GREX_LOG_SUBSYS value into groups; false (and *bad set to the
/// word) for a name it does not know.
bool parse_subsys(const char* text, unsigned* out, const char** bad) noexcept;
/// Overrides GREX_LOG_SUBSYS (tests).
void set_subsys(unsigned groups) noexcept;

/// Writes one line "[rank R host H subsystem] LEVEL message" to stderr (or
/// GREX_LOG_FILE); info and below only where GREX_LOG_SUBSYS takes the
/// subsystem. Thread-safe.
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
