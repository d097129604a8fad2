// SPDX-License-Identifier: Apache-2.0
// grex/probe.h's build facts (the drivers of the table, the DPDK and
// rdma-core versions they compiled against) and, where the verbs driver is
// not built, its empty RDMA report (verbs/verbs_probe.cc otherwise).
#include <grex/probe.h>
#include <grex/transport.h>

#include "grex_version.h"

namespace grex {

BuildInfo build_info() {
  BuildInfo b;
  b.version = GREX_VERSION;
  b.drivers = Device::available_drivers();
  b.dpdk_version = GREX_DPDK_VERSION;
  b.ibverbs_version = GREX_IBVERBS_VERSION;
  return b;
}

#ifndef GREX_HAVE_VERBS
RdmaReport probe_rdma_devices() { return RdmaReport{}; }
#endif

}  // namespace grex
