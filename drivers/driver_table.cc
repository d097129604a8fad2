// SPDX-License-Identifier: Apache-2.0
// The table of drivers built into this libgrex; lib/transport declares it and
// opens devices from it, so lib never includes a driver.
#include "drivers/shm/shm.h"
#include "transport/registry.h"

namespace grex {
namespace detail {

std::span<const DriverEntry> drivers() noexcept {
  static const DriverEntry kDrivers[] = {
      {"shm", &shm::open_device, ""},
      {"dpdk", nullptr, "the DPDK poll-mode backend is not implemented yet"},
      {"verbs", nullptr, "the RDMA verbs backend is not implemented yet"},
  };
  return kDrivers;
}

}  // namespace detail

}  // namespace grex
