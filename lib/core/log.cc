// SPDX-License-Identifier: Apache-2.0
// Logging implementation: level from GREX_LOG_LEVEL, whole lines written with one write(2).
#include "core/log.h"

#include <grex/log.h>

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace grex::log {
namespace {

std::atomic<int> g_level{-1};
std::atomic<int> g_rank{-1};

const char* level_name(Level l) {
  switch (l) {
    case Level::kError: return "ERROR";
    case Level::kWarn: return "WARN";
    case Level::kInfo: return "INFO";
    case Level::kDebug: return "DEBUG";
    case Level::kTrace: return "TRACE";
  }
  return "?";
}

}  // namespace

bool parse_level(const char* text, Level* out) noexcept {
  static const char* const kNames[] = {"error", "warn", "info", "debug", "trace"};
  if (text == nullptr) return false;
  for (int i = 0; i < 5; ++i) {
    if (strcasecmp(text, kNames[i]) == 0 || (text[0] == '0' + i && text[1] == '\0')) {
      *out = static_cast<Level>(i);
      return true;
    }
  }
  if (strcasecmp(text, "warning") == 0) {
    *out = Level::kWarn;
    return true;
  }
  return false;
}

Level level() noexcept {
  int l = g_level.load(std::memory_order_relaxed);
  if (l < 0) {
    Level parsed = Level::kWarn;
    const char* env = std::getenv("GREX_LOG_LEVEL");
    if (env != nullptr && !parse_level(env, &parsed)) {
      std::fprintf(stderr, "[grex] WARN GREX_LOG_LEVEL='%s' is not one of error|warn|info|debug|trace; using warn\n", env);
    }
    l = static_cast<int>(parsed);
    g_level.store(l, std::memory_order_relaxed);
  }
  return static_cast<Level>(l);
}

void set_level(Level l) noexcept { g_level.store(static_cast<int>(l), std::memory_order_relaxed); }
void set_rank(int rank) noexcept { g_rank.store(rank, std::memory_order_relaxed); }
void set_rank_if_unset(int rank) noexcept {
  int none = -1;
  g_rank.compare_exchange_strong(none, rank, std::memory_order_relaxed);
}

void write(Level l, const char* subsystem, const char* fmt, ...) noexcept {
  char line[1024];
  int rank = g_rank.load(std::memory_order_relaxed);
  int n = rank >= 0 ? std::snprintf(line, sizeof(line), "[rank %d %s] %s ", rank, subsystem, level_name(l))
                    : std::snprintf(line, sizeof(line), "[%s] %s ", subsystem, level_name(l));
  if (n < 0) return;
  va_list ap;
  va_start(ap, fmt);
  int m = std::vsnprintf(line + n, sizeof(line) - static_cast<size_t>(n) - 1, fmt, ap);
  va_end(ap);
  size_t len = static_cast<size_t>(n) + (m > 0 ? static_cast<size_t>(m) : 0);
  if (len > sizeof(line) - 2) len = sizeof(line) - 2;
  line[len++] = '\n';
  ssize_t ignored = ::write(STDERR_FILENO, line, len);
  (void)ignored;
}

}  // namespace grex::log

namespace grex {

static_assert(static_cast<int>(LogLevel::kError) == static_cast<int>(log::Level::kError) &&
              static_cast<int>(LogLevel::kTrace) == static_cast<int>(log::Level::kTrace));

bool log_enabled(LogLevel level) noexcept { return log::enabled(static_cast<log::Level>(level)); }

void log_line(LogLevel level, std::string_view subsystem, std::string_view text) noexcept {
  char sub[64];
  std::snprintf(sub, sizeof sub, "%.*s", static_cast<int>(subsystem.size()), subsystem.data());
  log::write(static_cast<log::Level>(level), sub, "%.*s", static_cast<int>(text.size()), text.data());
}

}  // namespace grex
