// SPDX-License-Identifier: Apache-2.0
// DPDK EAL bring-up once per process, and hot-plugging of virtual devices after it.
//
// This header does not include DPDK headers. EAL can be initialised only once
// per process and pins the calling thread to its main lcore: call eal_init()
// from the thread that will poll the ports (Port::open calls it with defaults
// when nobody did before).
#pragma once

#include <grex/result.h>

#include <cstdint>
#include <string>
#include <vector>

namespace grex::dpdk {

/// What eal_init() passes to rte_eal_init. Environment overrides (read at the
/// first call): GREX_DPDK_LCORE (lcore when `lcore` < 0), GREX_DPDK_ARGS
/// (extra arguments, whitespace-split, appended after `extra_args`),
/// GREX_DPDK_HUGE=1 (use reserved hugepages with --in-memory --iova-mode=va
/// --single-file-segments instead of --no-huge --no-shconf -m memory_mb,
/// when /proc/meminfo has HugePages_Free > 0), GREX_LOG_LEVEL (maps to --log-level; warn keeps EAL
/// quiet). Always passed: --no-pci --no-telemetry -l <lcore> --file-prefix.
struct EalOptions {
  int lcore = -1;                       ///< main lcore; < 0: GREX_DPDK_LCORE, else the CPU we run on now
  std::string file_prefix;              ///< empty: "grex-<pid>"
  uint32_t memory_mb = 512;             ///< -m without hugepages
  /// With hugepages: take this much at start (-m) and never more (an
  /// allocation past it fails), when that much is free; 0: EAL grows its
  /// memory on demand. eal_memory_shareable() needs it.
  uint32_t huge_memory_mb = 0;
  std::vector<std::string> vdevs;       ///< each becomes "--vdev <devargs>" (prefer probe_vdev)
  /// PCI ports to probe ("0000:3b:00.0[,args]"): each becomes "-a <devargs>" and
  /// replaces --no-pci, so EAL takes these NICs and no other.
  std::vector<std::string> pci_devices;
  std::vector<std::string> extra_args;  ///< appended verbatim
};

/// Initialises EAL once per process. Thread-safe and idempotent: once EAL is
/// up, later calls return ok whatever their options (a different lcore or
/// vdev list is logged at debug level and ignored); after a failure, later
/// calls return the same error (EAL cannot be retried in-process).
/// Errors: kSystem (rte_eal_init failed; the cause has rte_strerror and the
/// argument list, the hint what to change), kInvalidArgument (bad GREX_DPDK_*).
Result<void> eal_init(const EalOptions& opts = {});

/// True once eal_init() succeeded in this process.
bool eal_initialized() noexcept;

/// True when eal_init() brought EAL up on hugepages with one file per segment
/// list, all its memory taken at start and capped there (GREX_DPDK_HUGE=1,
/// EalOptions::huge_memory_mb free): the memory a memif client in zero-copy
/// mode may share with its peer. False before eal_init() and otherwise.
bool eal_memory_shareable() noexcept;

/// The argv eal_init() would build for `opts` right now (argv[0] included),
/// for logs and tests. Reads the environment like eal_init().
Result<std::vector<std::string>> eal_args(const EalOptions& opts);

/// True when `devargs` names a PCI device: "DDDD:BB:DD.F" or "BB:DD.F", then
/// optional ",key=value" arguments.
bool is_pci_devargs(std::string_view devargs) noexcept;
/// The ethdev name of a PCI devargs: the address with its domain ("0000:3b:00.0").
std::string pci_port_name(std::string_view devargs);

/// Hot-plugs a virtual device ("net_memif0,role=server,socket=/tmp/x.sock")
/// and returns its ethdev port id. The device name is the text before the
/// first comma. A device of that name that is already probed is returned as
/// is (its arguments are not compared). Calls eal_init() with defaults first
/// if EAL is not up. Errors: kNotFound (no PMD of that name or no port after
/// probing), kSystem (the PMD's probe failed; cause from rte_strerror).
/// A PCI devargs (is_pci_devargs) is not hot-plugged: EAL probed it at start
/// (EalOptions::pci_devices); its port is looked up, and an error says how to
/// bind the NIC when there is none.
Result<uint16_t> probe_vdev(const std::string& devargs);

/// Removes a hot-plugged virtual device by name ("net_memif0"); closes its
/// port if still open. On a name that is not probed EAL logs an error and
/// nothing else happens.
void remove_vdev(const std::string& name);

}  // namespace grex::dpdk
