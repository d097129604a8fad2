// SPDX-License-Identifier: Apache-2.0
// EAL bring-up: builds the argument list from options and GREX_* variables, runs rte_eal_init once.
#include "drivers/dpdk/dpdk_eal.h"

#include "core/config.h"
#include "core/log.h"

#include <rte_dev.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_log.h>
#include <rte_memory.h>

#include <sched.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string_view>

namespace grex::dpdk {
namespace {

enum class State { kDown, kUp, kFailed };

std::mutex g_mu;
State g_state = State::kDown;  // guarded by g_mu
Error g_error;                 // the first failure, returned again; guarded by g_mu
bool g_shareable = false;      // see eal_memory_shareable(); guarded by g_mu

/// Refuses every allocation of pages beyond what EAL took at start (-m).
int refuse_growth(int, size_t, size_t) { return -1; }

/// A field of /proc/meminfo ("HugePages_Free:"), 0 if absent or unreadable.
long meminfo(const char* field) {
  std::ifstream in("/proc/meminfo");
  std::string key;
  long value = 0;
  while (in >> key) {
    if (key == field) {
      in >> value;
      return value;
    }
    in.ignore(256, '\n');
  }
  return 0;
}

long free_hugepages() { return meminfo("HugePages_Free:"); }
long free_hugepage_mb() { return free_hugepages() * meminfo("Hugepagesize:") / 1024; }

/// --log-level argument for GREX_LOG_LEVEL: quiet EAL at warn and below.
std::string log_level_arg() {
  switch (log::level()) {
    case log::Level::kError: return "--log-level=error";
    case log::Level::kWarn: return "--log-level=warning";
    case log::Level::kInfo: return "--log-level=info";
    case log::Level::kDebug:
    case log::Level::kTrace: return "--log-level=*:debug";
  }
  return "--log-level=warning";
}

// DPDK's log goes to stderr through this stream, minus lines known to be
// harmless in grex's setup: with --no-shconf EAL's multi-process channel is
// off, and every memif probe reports that it could not register its
// (secondary-process) action.
constexpr const char* kHarmlessLogLines[] = {
    "Failed to register mp action callback",
};

ssize_t log_write(void* /*cookie*/, const char* buf, size_t size) {
  const std::string_view text(buf, size);
  for (const char* harmless : kHarmlessLogLines)
    if (text.find(harmless) != std::string_view::npos) return static_cast<ssize_t>(size);
  size_t done = 0;
  while (done < size) {
    const ssize_t n = write(STDERR_FILENO, buf + done, size - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  return static_cast<ssize_t>(size);
}

void install_log_stream() {
  cookie_io_functions_t io{};
  io.write = log_write;
  if (FILE* f = fopencookie(nullptr, "w", io); f != nullptr) {
    setvbuf(f, nullptr, _IOLBF, 0);
    rte_openlog_stream(f);  // kept for the life of the process
  }
}

std::string join(const std::vector<std::string>& args) {
  std::string out;
  for (const auto& a : args) {
    if (!out.empty()) out += ' ';
    out += a;
  }
  return out;
}

/// eal_args(); *preallocated: grex's own "-m huge_memory_mb" is among them
/// (hugepages, one file per segment list, that much free at start).
Result<std::vector<std::string>> build_args(const EalOptions& opts, bool* preallocated) {
  *preallocated = false;
  int lcore = opts.lcore;
  if (lcore < 0) {
    int64_t env_lcore = -1;
    GREX_TRY(config::env_int("GREX_DPDK_LCORE", &env_lcore, 0, 1023));
    lcore = env_lcore >= 0 ? static_cast<int>(env_lcore) : sched_getcpu();
    if (lcore < 0) lcore = 0;
  }
  bool want_huge = false;
  GREX_TRY(config::env_bool("GREX_DPDK_HUGE", &want_huge));
  const long huge_free = want_huge ? free_hugepages() : 0;
  if (want_huge && huge_free <= 0)
    GREX_WARN("dpdk", "GREX_DPDK_HUGE=1 but no free hugepages (HugePages_Free 0); using --no-huge");

  std::vector<std::string> args = {"grex"};
  if (huge_free > 0) {
    // Reserved hugepages: private, leaves no files (needs no hugetlbfs mount).
    // IOVA as VA, as without hugepages: user memory (extbufs) has no usable
    // physical addresses. GREX_DPDK_ARGS="--iova-mode=pa" overrides it.
    // One file per segment list (--single-file-segments) lets a memif
    // client in zero-copy mode hand EAL's memory to its peer.
    args.insert(args.end(), {"--in-memory", "--iova-mode=va", "--single-file-segments"});
    if (opts.huge_memory_mb > 0) {
      if (free_hugepage_mb() >= static_cast<long>(opts.huge_memory_mb)) {
        args.insert(args.end(), {"-m", std::to_string(opts.huge_memory_mb)});
        *preallocated = true;
      } else {
        GREX_WARN("dpdk", "%ld MB of free hugepages, less than the %u MB asked for at start; EAL grows on demand "
                          "(memif stays in copy mode)", free_hugepage_mb(), opts.huge_memory_mb);
      }
    }
  } else {
    args.insert(args.end(), {"--no-huge", "--no-shconf", "-m", std::to_string(opts.memory_mb)});
  }
  if (opts.pci_devices.empty()) args.push_back("--no-pci");
  for (const auto& d : opts.pci_devices) args.insert(args.end(), {"-a", d});
  args.insert(args.end(), {"--no-telemetry", "-l", std::to_string(lcore)});
  args.push_back("--file-prefix");
  args.push_back(opts.file_prefix.empty() ? "grex-" + std::to_string(getpid()) : opts.file_prefix);
  args.push_back(log_level_arg());
  for (const auto& v : opts.vdevs) {
    args.push_back("--vdev");
    args.push_back(v);
  }
  for (const auto& a : opts.extra_args) args.push_back(a);
  std::istringstream env_args(config::env_or_empty("GREX_DPDK_ARGS"));
  for (std::string a; env_args >> a;) args.push_back(a);
  return args;
}

}  // namespace

Result<std::vector<std::string>> eal_args(const EalOptions& opts) {
  bool preallocated = false;
  return build_args(opts, &preallocated);
}

Result<void> eal_init(const EalOptions& opts) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_state == State::kUp) {
    GREX_DEBUG("dpdk", "EAL already initialised; options of this call ignored");
    return ok();
  }
  if (g_state == State::kFailed) return g_error;

  bool preallocated = false;
  auto built = build_args(opts, &preallocated);
  if (!built.ok()) return std::move(built).error();
  std::vector<std::string> args = std::move(built).value();
  // rte_eal_init may permute argv; keep the strings alive in `args`.
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  install_log_stream();
  GREX_INFO("dpdk", "rte_eal_init: %s", join(args).c_str());
  const int rc = rte_eal_init(static_cast<int>(args.size()), argv.data());
  if (rc < 0) {
    const int err = rte_errno;
    g_state = State::kFailed;
    g_error = Error(Errc::kSystem, "rte_eal_init(" + join(args) + ") failed: " + rte_strerror(err))
                  .device("dpdk")
                  .hint(err == EACCES || err == EPERM
                            ? "run as root or grant CAP_SYS_ADMIN/CAP_IPC_LOCK; without hugepages keep --no-huge"
                            : "set GREX_LOG_LEVEL=debug for EAL's log; without reserved hugepages keep --no-huge "
                              "(unset GREX_DPDK_HUGE), check the lcore exists (GREX_DPDK_LCORE) and "
                              "GREX_DPDK_ARGS");
    return g_error;
  }
  g_state = State::kUp;
  // A memif client in zero-copy mode closes EAL's file of each segment list
  // it shares (DPDK 22.11's memif_connect), after which EAL must never
  // allocate or free pages again: all its memory comes at start (-m, never
  // given back) and a validator refuses any more.
  // Only grex's own "-m huge_memory_mb" (eal_args): a -m from GREX_DPDK_ARGS
  // alone caps nothing, and EAL may still grow past it as before.
  if (rte_eal_has_hugepages() != 0 && preallocated) {
    bool capped = true;
    for (unsigned i = 0; i < rte_socket_count(); ++i)
      capped = capped && rte_mem_alloc_validator_register("grex-no-growth", refuse_growth, rte_socket_id_by_idx(i),
                                                          size_t{opts.huge_memory_mb} << 20) == 0;
    g_shareable = capped;
    if (!capped)
      GREX_WARN("dpdk", "could not cap EAL's memory (%s); memif stays in copy mode", rte_strerror(rte_errno));
  }
  // With --no-shconf and --no-telemetry EAL leaves an empty runtime directory
  // (/var/run/dpdk/<prefix>); remove it so nothing is left behind.
  if (const char* dir = rte_eal_get_runtime_dir(); dir != nullptr && dir[0] != '\0') rmdir(dir);
  GREX_INFO("dpdk", "EAL up: main lcore %u, iova %s, %u ethdev ports", rte_get_main_lcore(),
            rte_eal_iova_mode() == RTE_IOVA_VA ? "va" : "pa", rte_eth_dev_count_avail());
  return ok();
}

bool eal_initialized() noexcept {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_state == State::kUp;
}

bool eal_memory_shareable() noexcept {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_state == State::kUp && g_shareable;
}

bool is_pci_devargs(std::string_view devargs) noexcept {
  std::string_view a = devargs.substr(0, devargs.find(','));
  auto hex = [](std::string_view t, size_t n) {
    if (t.size() != n) return false;
    for (char c : t)
      if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
    return true;
  };
  if (a.size() == 12 && a[4] == ':') {  // with the domain
    if (!hex(a.substr(0, 4), 4)) return false;
    a.remove_prefix(5);
  }
  return a.size() == 7 && a[2] == ':' && a[5] == '.' && hex(a.substr(0, 2), 2) && hex(a.substr(3, 2), 2) &&
         a[6] >= '0' && a[6] <= '7';
}

std::string pci_port_name(std::string_view devargs) {
  std::string a(devargs.substr(0, devargs.find(',')));
  return a.size() == 7 ? "0000:" + a : a;
}

Result<uint16_t> probe_vdev(const std::string& devargs) {
  GREX_TRY(eal_init());
  if (is_pci_devargs(devargs)) {
    uint16_t port = 0;
    const std::string name = pci_port_name(devargs);
    if (rte_eth_dev_get_port_by_name(name.c_str(), &port) == 0) return port;
    return Error(Errc::kNotFound, "PCI device " + name + " has no DPDK port")
        .device("dpdk")
        .hint("bind it to vfio-pci (dpdk-devbind.py -b vfio-pci " + name +
              "; mlx5 NICs stay on mlx5_core), reserve hugepages and set GREX_DPDK_HUGE=1; grex-info lists the "
              "NICs and their drivers");
  }
  const std::string name = devargs.substr(0, devargs.find(','));
  if (name.empty())
    return Error(Errc::kInvalidArgument, "empty device name in devargs '" + devargs + "'")
        .device("dpdk")
        .hint("pass '<driver><n>,key=value,...', e.g. net_memif0,role=server,socket=/tmp/grex.sock");
  uint16_t port = 0;
  if (rte_eth_dev_get_port_by_name(name.c_str(), &port) == 0) {
    GREX_DEBUG("dpdk", "%s already probed as port %u", name.c_str(), port);
    return port;
  }
  const int rc = rte_dev_probe(devargs.c_str());
  if (rc < 0 && rc != -EEXIST) {
    // A PMD's probe often returns a bare -1: its own log line above has the reason.
    const std::string why = rc == -1 ? "the PMD refused (its log line above says why)" : rte_strerror(-rc);
    return Error(Errc::kSystem, "probing vdev '" + devargs + "' failed: " + why)
        .device("dpdk")
        .hint("check the driver name (net_memif, net_af_packet, net_af_xdp, net_null, net_ring) and its "
              "arguments; memif: a socket path can be listened on once per process (abstract sockets stay "
              "bound after close), use a fresh path or socket-abstract=no");
  }
  if (rte_eth_dev_get_port_by_name(name.c_str(), &port) != 0) {
    return Error(Errc::kNotFound, "vdev '" + name + "' probed but has no ethdev port")
        .device("dpdk")
        .hint("the name must be an ethdev PMD (net_*), e.g. net_memif0");
  }
  GREX_INFO("dpdk", "probed %s as port %u", devargs.c_str(), port);
  return port;
}

void remove_vdev(const std::string& name) {
  if (!eal_initialized()) return;
  const int rc = rte_eal_hotplug_remove("vdev", name.c_str());
  if (rc < 0 && rc != -ENOENT)
    GREX_DEBUG("dpdk", "removing vdev %s: %s", name.c_str(), rte_strerror(-rc));
}

}  // namespace grex::dpdk
