// SPDX-License-Identifier: Apache-2.0
// The table of drivers built into this libgrex; lib/transport declares it and
// opens devices from it, so lib never includes a driver.
#include "drivers/loop/loop.h"
#include "drivers/shm/shm.h"
#ifdef GREX_HAVE_DPDK
#include "drivers/dpdk/dpdk.h"
#endif
#ifdef GREX_HAVE_VERBS
#include "drivers/verbs/verbs.h"
#endif
#include "transport/registry.h"

namespace grex {
namespace detail {

std::span<const DriverEntry> drivers() noexcept {
  static const DriverEntry kDrivers[] = {
      {"shm", &shm::open_device, ""},
#ifdef GREX_HAVE_DPDK
      {"dpdk", &dpdk::open_device, ""},
#else
      {"dpdk", nullptr, "libgrex was built without DPDK (install libdpdk-dev, reconfigure with -Ddpdk=enabled)"},
#endif
#ifdef GREX_HAVE_VERBS
      {"verbs", &verbs::open_device, ""},
#else
      {"verbs", nullptr,
       "libgrex was built without rdma-core (install libibverbs-dev librdmacm-dev, reconfigure with -Dverbs=enabled)"},
#endif
      {"loop", &loop::open_device, ""},
  };
  return kDrivers;
}

}  // namespace detail

}  // namespace grex
