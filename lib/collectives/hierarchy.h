// SPDX-License-Identifier: Apache-2.0
// A communicator across hosts, as levels (issue 27): the ranks of this host
// (shm between them), and this rank's rail, the ranks with the same local
// index on every host (the network between them, one port or QP per local
// rank). Each level is a group with its own context (the capabilities of its
// pairs) and cost model (alpha, beta measured on its links at creation); the
// hierarchical collectives compose algorithms on them.
#pragma once

#include <grex/transport.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collectives/context.h"
#include "collectives/group.h"
#include "collectives/shared_area.h"
#include "collectives/selector.h"

namespace grex::detail {

struct Level {
  Capabilities caps;          // what the level's pairs can do
  Context ctx;                // the world's, with caps and without hier
  std::optional<Group> group; // this rank's members at this level
  Selector select;            // the level's cost model
};

struct Hierarchy {
  std::vector<int> host_of;   // [rank]: host index (hosts in order of their lowest rank)
  std::vector<int> local_of;  // [rank]: index among the ranks of its host
  std::vector<std::vector<int>> hosts;  // [host]: its ranks, ascending
  int rails = 0;              // ranks of the smallest host: the shards of a hierarchical allreduce
  std::string intra, inter;   // the drivers of each level ("shm", "dpdk")
  CostModel world_cost;       // the flat algorithms' model (the network level's alpha, beta), for the choice
  /// The hierarchical collectives' permuted blocks (hier_collectives.cc):
  /// device memory that grows on demand (registered once; freed by ~Communicator).
  struct Buffer {
    MemoryRegion* mr = nullptr;
    size_t have = 0;
    uint8_t* data() const noexcept { return mr != nullptr ? static_cast<uint8_t*>(mr->addr()) : nullptr; }
  };
  Buffer pack, mid;
  /// The local level's shared area (staged slots between this host's
  /// ranks), where shm offers load/store access; local.ctx.area points here.
  std::unique_ptr<SharedArea> area;
  Level local;                // this host's ranks
  Level rail;                 // the ranks with this rank's local index, one per host that has one
  int host_count() const noexcept { return static_cast<int>(hosts.size()); }
  /// Shard j of a vector of `count` elements (j < rails): its first element and count.
  std::pair<size_t, size_t> shard(size_t count, int j) const noexcept {
    const auto k = static_cast<size_t>(rails), u = static_cast<size_t>(j);
    const size_t base = count / k, extra = count % k;
    return {u * base + std::min(u, extra), base + (u < extra ? 1 : 0)};
  }
};

/// The levels' contexts take the call's signature (their errors name it).
void enter_levels(const Context& c, Hierarchy& h);
/// Every local rank sends `mine` bytes to the host's rank 0, which gets
/// `each[k]` from local rank k one after another at `to` (gather); or the
/// reverse, the rank 0 handing them out from `from` (scatter).
Result<void> via_lead(Level& l, bool lead, bool gather, const void* from, void* to, uint64_t mine,
                      const std::vector<uint64_t>& each, uint64_t tag);
/// Makes `b` hold `bytes` (device memory: registered once, not per call).
Result<void> grow_buffer(Context& c, Hierarchy::Buffer& b, size_t bytes);

}  // namespace grex::detail
