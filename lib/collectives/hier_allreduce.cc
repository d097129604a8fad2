// SPDX-License-Identifier: Apache-2.0
// Hierarchical allreduce, for ranks on several hosts (Horovod's and NCCL's
// scheme): the vector is cut into `rails` shards (the ranks of the smallest
// host); inside each host a ring reduce-scatter leaves shard j, summed over
// the host, with local rank j; the ranks with local index j on every host
// (rail j) allreduce that shard across hosts, all rails at once, each over
// its own port or QP; a ring allgather inside each host spreads the result.
// Bytes crossing hosts: 2 (H-1)/H of the vector per host and per rail pair,
// split over `rails` links, against a flat ring's whole vector through each
// host's one pair of crossing links. Local ranks beyond `rails` (hosts with
// more ranks than the smallest) reduce and gather only.
#include <vector>

#include "collectives/algorithm.h"
#include "collectives/hierarchy.h"
#include "collectives/reduce.h"
#include "collectives/shared_area.h"

namespace grex::detail {

bool hierarchical_usable(const Context& c, const Group& g, const CollArgs&) noexcept {
  // The levels are the world's: only the world group runs it.
  return c.hier != nullptr && g.size() == static_cast<int>(c.hier->host_of.size());
}

double hierarchical_allreduce_s(const Context& c, size_t bytes) noexcept {
  const Hierarchy& h = *c.hier;
  int widest = 1;
  for (const auto& hs : h.hosts) widest = std::max(widest, static_cast<int>(hs.size()));
  const double b = static_cast<double>(bytes);
  // Reduce-scatter + allgather inside the widest host: a ring allreduce's terms.
  const double intra = h.local.select.cost.allreduce_s(Algo::kRing, widest, b);
  const size_t shard = (bytes + static_cast<size_t>(h.rails) - 1) / static_cast<size_t>(h.rails);
  const CostModel& net = h.rail.select.cost;
  const Algo a = net.choose_allreduce(h.host_count(), shard);
  return intra + net.allreduce_s(a, h.host_count(), static_cast<double>(shard));
}

Result<void> hierarchical_allreduce(Context& c, const Group& g, const CollArgs& a) {
  (void)g;
  // Each shard across hosts by the rail level's best algorithm.
  return hierarchical_allreduce_via(c, a, [](Level& rail, const CollArgs& ra, size_t) -> Result<void> {
    Algo id = rail.select.allreduce(rail.ctx, *rail.group, ra.count * dtype_size(ra.type));
    if ((id == Algo::kDirect && !direct_usable(rail.ctx, *rail.group, ra)) || id == Algo::kFlat ||
        id == Algo::kHierarchical)
      id = Algo::kRing;
    return allreduce_algorithm(id).run(rail.ctx, *rail.group, ra);
  });
}

Result<void> hierarchical_allreduce_via(Context& c, const CollArgs& a, const RailAllreduce& rail_allreduce) {
  Hierarchy& h = *c.hier;
  Level& loc = h.local;
  Level& rail = h.rail;
  const Group& lg = *loc.group;
  const int L = lg.size();
  const size_t es = dtype_size(a.type);
  const int world = static_cast<int>(h.host_of.size());
  enter_levels(c, h);  // errors name the call
  // Segment s of the local ring is shard s-1 (the ring leaves member r with
  // segment r+1): local rank j < rails ends with shard j, at the same
  // elements on every host, so the rails line up.
  std::vector<size_t> off(static_cast<size_t>(L), 0), cnt(static_cast<size_t>(L), 0);
  for (int s = 0; s < L; ++s) {
    const int j = (s + L - 1) % L;
    if (j < h.rails) std::tie(off[static_cast<size_t>(s)], cnt[static_cast<size_t>(s)]) = h.shard(a.count, j);
  }
  // Averages: sums at both levels, divided by the world once.
  CollArgs la = a;
  if (a.op == ReduceOp::kAvg) la.op = ReduceOp::kSum;
  auto across = [&](size_t first, size_t n) -> Result<void> {
    if (n == 0) return ok();
    void* p = static_cast<uint8_t*>(a.recv) + first * es;
    if (rail.group->size() > 1) GREX_TRY(rail_allreduce(rail, CollArgs{p, p, n, a.type, la.op, 0, a.tag}, first));
    if (a.op == ReduceOp::kAvg) scale_avg(p, n, a.type, world);
    return ok();
  };
  // Through the host's shared slots where shm gives them: one copy less per
  // byte than the ring's staged sends (staged_allreduce.cc). Member j then
  // reduces shard j itself.
  if (L > 1 && staged_segments_fit(loc.ctx, lg, a.count * es)) {
    for (int j = 0; j < L; ++j) {
      const auto u = static_cast<size_t>(j);
      std::tie(off[u], cnt[u]) = j < h.rails ? h.shard(a.count, j) : std::pair<size_t, size_t>{0, 0};
    }
    return staged_allreduce_segments(loc.ctx, lg, la, off, cnt, 1, across);
  }
  // Pairs of one host and pairs of one rail never coincide, so the phases
  // share the call's tag base.
  return ring_allreduce_segments(loc.ctx, lg, la, off, cnt, 1, across);
}

}  // namespace grex::detail
