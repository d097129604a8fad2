// SPDX-License-Identifier: Apache-2.0
// Logging implementation: level from GREX_LOG_LEVEL, whole lines written with one write(2).
#include "core/log.h"

#include <grex/log.h>

#include <fcntl.h>
#include <strings.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

namespace grex::log {
namespace {

std::atomic<int> g_level{-1};
std::atomic<int> g_rank{-1};
std::atomic<long> g_subsys{-1};  // groups; -1: GREX_LOG_SUBSYS not read yet

struct Named {
  const char* name;
  unsigned group;
};
// Subsystem names as the code writes them, and GREX_LOG_SUBSYS's words.
constexpr Named kSubsystems[] = {{"init", kInit},  {"comm", kColl},      {"p2p", kP2p},   {"dpdk", kNet},
                                 {"verbs", kNet},  {"loop", kNet},       {"net", kNet},   {"shm", kShm},
                                 {"cc", kCc},      {"bootstrap", kBoot}, {"store", kBoot}, {"run", kBoot},
                                 {"gpu", kGpu}};
constexpr Named kWords[] = {{"INIT", kInit}, {"COLL", kColl}, {"P2P", kP2p}, {"NET", kNet},   {"SHM", kShm},
                            {"CC", kCc},     {"BOOT", kBoot}, {"GPU", kGpu}, {"OTHER", kOther}, {"ALL", kAll}};

unsigned subsys_mask() noexcept {
  long m = g_subsys.load(std::memory_order_relaxed);
  if (m < 0) {
    unsigned parsed = kAll;
    const char* bad = nullptr;
    const char* env = std::getenv("GREX_LOG_SUBSYS");
    if (env != nullptr && *env != '\0' && !parse_subsys(env, &parsed, &bad)) {
      std::fprintf(stderr, "[grex] WARN GREX_LOG_SUBSYS='%s': '%s' is not one of INIT, COLL, P2P, NET, SHM, CC, BOOT, "
                   "GPU, OTHER, ALL (^X leaves X out); logging every subsystem\n", env, bad != nullptr ? bad : "?");
      parsed = kAll;
    }
    m = static_cast<long>(parsed);
    g_subsys.store(m, std::memory_order_relaxed);
  }
  return static_cast<unsigned>(m);
}

const char* host_name() noexcept {
  static char name[64] = {};
  static std::once_flag once;
  std::call_once(once, [] {
    if (gethostname(name, sizeof name - 1) != 0) std::snprintf(name, sizeof name, "?");
    if (char* dot = std::strchr(name, '.')) *dot = '\0';
  });
  return name;
}

// GREX_LOG_FILE, expanded for this rank: an fd, or stderr where unset (or
// where it names the rank before one is known).
int log_fd(int rank) noexcept {
  static const char* pattern = std::getenv("GREX_LOG_FILE");
  if (pattern == nullptr || *pattern == '\0') return STDERR_FILENO;
  static std::mutex mu;
  static std::string opened;
  static int fd = -1;
  std::string path;
  for (const char* p = pattern; *p != '\0'; ++p) {
    if (p[0] != '%' || p[1] == '\0') {
      path += *p;
      continue;
    }
    ++p;
    if (*p == 'r') {
      if (rank < 0) return STDERR_FILENO;
      path += std::to_string(rank);
    } else if (*p == 'h') {
      path += host_name();
    } else if (*p == 'p') {
      path += std::to_string(getpid());
    } else {
      path += '%';
      path += *p;
    }
  }
  std::lock_guard<std::mutex> lock(mu);
  if (path != opened) {
    const int f = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (f < 0) return STDERR_FILENO;
    if (fd >= 0) ::close(fd);
    fd = f;
    opened = path;
  }
  return fd;
}

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

unsigned group_of(const char* subsystem) noexcept {
  for (const auto& n : kSubsystems)
    if (std::strcmp(subsystem, n.name) == 0) return n.group;
  return kOther;
}

bool parse_subsys(const char* text, unsigned* out, const char** bad) noexcept {
  static thread_local char word[32];
  unsigned mask = 0;
  bool first = true;
  for (const char* p = text; *p != '\0';) {
    while (*p == ',' || *p == ' ') ++p;
    if (*p == '\0') break;
    const bool exclude = *p == '^';
    if (exclude) ++p;
    size_t n = 0;
    while (p[n] != '\0' && p[n] != ',' && p[n] != ' ') ++n;
    std::snprintf(word, sizeof word, "%.*s", static_cast<int>(n), p);
    p += n;
    unsigned g = 0;
    for (const auto& w : kWords)
      if (strcasecmp(word, w.name) == 0) g = w.group;
    if (g == 0) {
      *bad = word;
      return false;
    }
    if (first && exclude) mask = kAll;  // "^NET": everything but NET
    first = false;
    mask = exclude ? mask & ~g : mask | g;
  }
  *out = mask;
  return true;
}

void set_subsys(unsigned groups) noexcept { g_subsys.store(static_cast<long>(groups), std::memory_order_relaxed); }

void set_level(Level l) noexcept { g_level.store(static_cast<int>(l), std::memory_order_relaxed); }
void set_rank(int rank) noexcept { g_rank.store(rank, std::memory_order_relaxed); }
void set_rank_if_unset(int rank) noexcept {
  int none = -1;
  g_rank.compare_exchange_strong(none, rank, std::memory_order_relaxed);
}

void write(Level l, const char* subsystem, const char* fmt, ...) noexcept {
  if (static_cast<int>(l) >= static_cast<int>(Level::kInfo) && (subsys_mask() & group_of(subsystem)) == 0) return;
  char line[1024];
  int rank = g_rank.load(std::memory_order_relaxed);
  int n = rank >= 0 ? std::snprintf(line, sizeof(line), "[rank %d host %s %s] %s ", rank, host_name(), subsystem,
                                    level_name(l))
                    : std::snprintf(line, sizeof(line), "[host %s %s] %s ", host_name(), subsystem, level_name(l));
  if (n < 0) return;
  va_list ap;
  va_start(ap, fmt);
  int m = std::vsnprintf(line + n, sizeof(line) - static_cast<size_t>(n) - 1, fmt, ap);
  va_end(ap);
  size_t len = static_cast<size_t>(n) + (m > 0 ? static_cast<size_t>(m) : 0);
  if (len > sizeof(line) - 2) len = sizeof(line) - 2;
  line[len++] = '\n';
  ssize_t ignored = ::write(log_fd(rank), line, len);
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
