// SPDX-License-Identifier: Apache-2.0
// ccsim's leaf-spine fabric: names and the configuration's check (fabric.h).
#include <string>

#include "congestion/sim/fabric.h"

namespace grex::ccsim {

const char* pattern_name(Pattern p) noexcept {
  switch (p) {
    case Pattern::kPermutation: return "permutation";
    case Pattern::kRing: return "ring";
    case Pattern::kIncast: return "incast";
    case Pattern::kAlltoall: return "alltoall";
  }
  return "?";
}

std::string check(const FabricConfig& c) {
  if (cc::find(c.cc) == nullptr) return "unknown congestion control '" + c.cc + "' (" + cc::algorithm_names() + ")";
  if (c.leaves < 1 || c.spines < 1 || c.hosts_per_leaf < 1) return "leaves, spines and hosts per leaf must be >= 1";
  if (c.leaves * c.hosts_per_leaf < 2) return "the fabric needs at least 2 hosts";
  if (c.leaves > 256 || c.spines > 256 || c.hosts_per_leaf > 256) return "at most 256 leaves, spines, hosts per leaf";
  if (!(c.host_gbps > 0) || !(c.spine_gbps > 0)) return "link rates must be > 0";
  if (c.mtu_bytes < 64 || c.mtu_bytes > 65536) return "mtu must be 64..65536 bytes";
  if (c.paths < 1 || c.paths > 65536) return "paths must be 1..65536";
  if (!(c.hop_us >= 0) || !(c.buffer_kb > 0) || !(c.duration_ms > 0)) return "hop, buffer and duration must be > 0";
  if (c.flow_kb < 0) return "flow size must be >= 0";
  if (c.failed_spine >= static_cast<int>(c.spines) || c.slow_spine >= static_cast<int>(c.spines))
    return "failed and slow spines must name a spine (0..spines-1)";
  if (c.failed_spine >= 0 && c.spines < 2) return "a failed spine needs another one";
  if (!(c.slow_factor > 0 && c.slow_factor <= 1)) return "slow factor must be in (0, 1]";
  if (c.ecn && !(c.kmin_kb < c.kmax_kb && c.pmax > 0 && c.pmax <= 1)) return "ECN needs kmin < kmax and 0 < pmax <= 1";
  return "";
}

}  // namespace grex::ccsim
