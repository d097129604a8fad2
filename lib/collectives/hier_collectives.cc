// SPDX-License-Identifier: Apache-2.0
// The other collectives across hosts, on the levels of hierarchy.h, where
// every host has the same number of ranks L (uneven hosts run the flat
// algorithms). Rank (h, j) is local rank j of host h; rail j links the
// ranks (h, j) of every host. Blocks are permuted through a scratch buffer
// so each level moves contiguous ranges.
//   reduce_scatter: blocks packed rail by rail; intra-host reduce-scatter
//     (local rank j: rail j's H blocks, summed over the host); rail
//     reduce-scatter (rank (h, j): its block, summed over every host).
//   allgather: rail allgather (rank (h, j): the blocks of rail j); intra-host
//     allgather of those; unpacked into rank order.
//   broadcast: the root's rail, then each host from its rank on that rail.
//   reduce: each host to its rank on the root's rail, then that rail to the root.
//   alltoall: inside the host by destination rail, then along the rail with
//     one message per host pair (L blocks); unpacked into rank order.
// Per rank, (H-1) blocks cross hosts in reduce_scatter and allgather, where a
// flat ring sends (n-1) blocks over each link that leaves a host.
#include <algorithm>
#include <cstring>
#include <vector>

#include "collectives/algorithm.h"
#include "collectives/hierarchy.h"
#include "collectives/reduce.h"

namespace grex::detail {
namespace {

// Rank of (host h, local j).
int rank_of(const Hierarchy& h, int host, int j) { return h.hosts[static_cast<size_t>(host)][static_cast<size_t>(j)]; }

void enter(const Context& c, Hierarchy& h) {
  for (Level* l : {&h.local, &h.rail}) {  // errors name the call
    l->ctx.call = c.call;
    l->ctx.ncoll = c.ncoll;
  }
}

// Makes `b` hold `bytes` (device memory: registered once, not per call).
Result<void> grow(Context& c, Hierarchy::Buffer& b, size_t bytes) {
  return grow_region(c.bufs->device(), b.mr, b.have, std::max<size_t>(bytes, 1));
}

Result<void> run_on(Level& l, Coll coll, const CollArgs& a) {
  return first_usable(coll, l.ctx, *l.group, a).run(l.ctx, *l.group, a);
}

}  // namespace

bool hierarchical_even_usable(const Context& c, const Group& g, const CollArgs&) noexcept {
  if (!hierarchical_usable(c, g, CollArgs{})) return false;
  for (const auto& hs : c.hier->hosts)
    if (static_cast<int>(hs.size()) != c.hier->rails) return false;
  return true;
}

// The two-level model against the flat algorithm's (the world's model holds
// the network level's alpha and beta: a flat schedule waits on its slowest
// links). Every rank has the same models, so every rank chooses alike.
namespace {

int ceil_log2(int n) {
  int k = 0;
  while ((1 << k) < n) ++k;
  return k;
}

}  // namespace

bool hierarchical_wins(const Context& c, const Group& g, Coll coll, double block_bytes) noexcept {
  const Hierarchy& h = *c.hier;
  const double world_cost_alpha = h.world_cost.alpha_s, world_cost_beta = h.world_cost.beta_s_per_byte;
  const double H = h.host_count(), L = h.rails, n = g.size();
  const CostModel& lo = h.local.select.cost;
  const CostModel& net = h.rail.select.cost;
  const double B = block_bytes;
  double hier = 0, flat = 0;
  switch (coll) {
    case Coll::kReduceScatter:
    case Coll::kAllgather:  // ring steps of one block (flat) or of H blocks inside, one block along the rail
      flat = (n - 1) * (world_cost_alpha + B * world_cost_beta);
      hier = (L - 1) * (lo.alpha_s + H * B * lo.beta_s_per_byte) + (H - 1) * (net.alpha_s + B * net.beta_s_per_byte);
      break;
    case Coll::kAlltoall:  // pairwise steps: one block each, or H blocks inside and L blocks along the rail
      flat = (n - 1) * (world_cost_alpha + B * world_cost_beta);
      hier = (L - 1) * (lo.alpha_s + H * B * lo.beta_s_per_byte) + (H - 1) * (net.alpha_s + L * B * net.beta_s_per_byte);
      break;
    default:  // broadcast, reduce: binomial trees of the whole vector
      flat = ceil_log2(static_cast<int>(n)) * (world_cost_alpha + B * world_cost_beta);
      hier = ceil_log2(static_cast<int>(H)) * (net.alpha_s + B * net.beta_s_per_byte) +
             ceil_log2(static_cast<int>(L)) * (lo.alpha_s + B * lo.beta_s_per_byte);
      break;
  }
  return hier <= flat;
}

Result<void> hierarchical_reduce_scatter(Context& c, const Group& g, const CollArgs& a) {
  (void)g;
  Hierarchy& h = *c.hier;
  enter(c, h);
  const int H = h.host_count(), L = h.rails;
  const size_t es = dtype_size(a.type), block = a.count * es;
  const ReduceOp op = a.op == ReduceOp::kAvg ? ReduceOp::kSum : a.op;
  // pack[j][host]: the block of rank (host, j)
  GREX_TRY(grow(c, h.pack, block * static_cast<size_t>(H * L)));
  GREX_TRY(grow(c, h.mid, block * static_cast<size_t>(H)));
  const auto* in = static_cast<const uint8_t*>(a.send);
  for (int j = 0; j < L; ++j)
    for (int x = 0; x < H; ++x)
      std::memcpy(h.pack.data() + (static_cast<size_t>(j) * H + x) * block,
                  in + static_cast<size_t>(rank_of(h, x, j)) * block, block);
  GREX_TRY(run_on(h.local, Coll::kReduceScatter, CollArgs{h.pack.data(), h.mid.data(), a.count * H, a.type, op, 0, a.tag}));
  if (H > 1)
    GREX_TRY(run_on(h.rail, Coll::kReduceScatter,
                    CollArgs{h.mid.data(), a.recv, a.count, a.type, op, 0, a.tag | (1ull << 17)}));
  else
    std::memcpy(a.recv, h.mid.data(), block);
  if (a.op == ReduceOp::kAvg) scale_avg(a.recv, a.count, a.type, static_cast<int>(h.host_of.size()));
  return ok();
}

Result<void> hierarchical_allgather(Context& c, const Group& g, const CollArgs& a) {
  (void)g;
  Hierarchy& h = *c.hier;
  enter(c, h);
  const int H = h.host_count(), L = h.rails;
  const size_t block = a.count * dtype_size(a.type);
  GREX_TRY(grow(c, h.mid, block * static_cast<size_t>(H)));
  GREX_TRY(grow(c, h.pack, block * static_cast<size_t>(H * L)));
  GREX_TRY(run_on(h.rail, Coll::kAllgather, CollArgs{a.send, h.mid.data(), a.count, a.type, ReduceOp::kSum, 0, a.tag}));
  GREX_TRY(run_on(h.local, Coll::kAllgather,
                  CollArgs{h.mid.data(), h.pack.data(), a.count * H, a.type, ReduceOp::kSum, 0, a.tag | (1ull << 17)}));
  auto* out = static_cast<uint8_t*>(a.recv);
  for (int j = 0; j < L; ++j)
    for (int x = 0; x < H; ++x)
      std::memcpy(out + static_cast<size_t>(rank_of(h, x, j)) * block,
                  h.pack.data() + (static_cast<size_t>(j) * H + x) * block, block);
  return ok();
}

// Aggregated per destination host (embedding exchanges): inside the host,
// local rank j collects what every local rank sends to rail j; along the
// rail, each host pair exchanges one message of L blocks per step.
Result<void> hierarchical_alltoall(Context& c, const Group& g, const CollArgs& a) {
  (void)g;
  Hierarchy& h = *c.hier;
  enter(c, h);
  const int H = h.host_count(), L = h.rails;
  const size_t block = a.count * dtype_size(a.type), all = block * static_cast<size_t>(H * L);
  GREX_TRY(grow(c, h.pack, all));
  GREX_TRY(grow(c, h.mid, all));
  const auto* in = static_cast<const uint8_t*>(a.send);
  auto at = [block](Hierarchy::Buffer& v, int outer, int inner, int n_inner) {
    return v.data() + (static_cast<size_t>(outer) * static_cast<size_t>(n_inner) + static_cast<size_t>(inner)) * block;
  };
  for (int j = 0; j < L; ++j)  // pack[j][x]: this rank's block for rank (x, j)
    for (int x = 0; x < H; ++x) std::memcpy(at(h.pack, j, x, H), in + static_cast<size_t>(rank_of(h, x, j)) * block, block);
  GREX_TRY(run_on(h.local, Coll::kAlltoall,
                  CollArgs{h.pack.data(), h.mid.data(), a.count * static_cast<size_t>(H), a.type, ReduceOp::kSum, 0, a.tag}));
  // mid[src][x]: local rank src's block for rank (x, my j); regroup by destination host.
  for (int x = 0; x < H; ++x)
    for (int src = 0; src < L; ++src) std::memcpy(at(h.pack, x, src, L), at(h.mid, src, x, H), block);
  GREX_TRY(run_on(h.rail, Coll::kAlltoall,
                  CollArgs{h.pack.data(), h.mid.data(), a.count * static_cast<size_t>(L), a.type, ReduceOp::kSum, 0,
                           a.tag | (1ull << 17)}));
  auto* out = static_cast<uint8_t*>(a.recv);  // mid[x][src]: from rank (x, src)
  for (int x = 0; x < H; ++x)
    for (int src = 0; src < L; ++src)
      std::memcpy(out + static_cast<size_t>(rank_of(h, x, src)) * block, at(h.mid, x, src, L), block);
  return ok();
}

Result<void> hierarchical_broadcast(Context& c, const Group& g, const CollArgs& a) {
  (void)g;
  Hierarchy& h = *c.hier;
  enter(c, h);
  const int root_host = h.host_of[static_cast<size_t>(a.root)], root_j = h.local_of[static_cast<size_t>(a.root)];
  const int me = c.rank;
  if (h.local_of[static_cast<size_t>(me)] == root_j && h.host_count() > 1) {  // the root's rail: root_host's member
    CollArgs ra = a;
    ra.root = root_host;
    GREX_TRY(run_on(h.rail, Coll::kBroadcast, ra));
  }
  if (h.local.group->size() > 1) {
    CollArgs la = a;
    la.root = root_j;
    la.tag = a.tag | (1ull << 17);
    GREX_TRY(run_on(h.local, Coll::kBroadcast, la));
  }
  return ok();
}

Result<void> hierarchical_reduce(Context& c, const Group& g, const CollArgs& a) {
  (void)g;
  Hierarchy& h = *c.hier;
  enter(c, h);
  const int root_host = h.host_of[static_cast<size_t>(a.root)], root_j = h.local_of[static_cast<size_t>(a.root)];
  const int me = c.rank;
  const bool on_rail = h.local_of[static_cast<size_t>(me)] == root_j;
  const ReduceOp op = a.op == ReduceOp::kAvg ? ReduceOp::kSum : a.op;
  const size_t bytes = a.count * dtype_size(a.type);
  // Each host's sum lands with its rank on the root's rail.
  if (on_rail) GREX_TRY(grow(c, h.mid, bytes));
  void* host_sum = on_rail ? static_cast<void*>(h.mid.data()) : nullptr;
  if (h.local.group->size() > 1) {
    GREX_TRY(run_on(h.local, Coll::kReduce, CollArgs{a.send, host_sum, a.count, a.type, op, root_j, a.tag}));
  } else {
    std::memcpy(host_sum, a.send, bytes);
  }
  if (on_rail) {
    if (h.host_count() > 1)
      GREX_TRY(run_on(h.rail, Coll::kReduce,
                      CollArgs{host_sum, me == a.root ? a.recv : nullptr, a.count, a.type, op, root_host,
                               a.tag | (1ull << 17)}));
    else if (me == a.root)
      std::memcpy(a.recv, host_sum, bytes);
    if (me == a.root && a.op == ReduceOp::kAvg)
      scale_avg(a.recv, a.count, a.type, static_cast<int>(h.host_of.size()));
  }
  return ok();
}

}  // namespace grex::detail

namespace grex::detail {

template <Coll K>
bool hierarchical_usable_for(const Context& c, const Group& g, const CollArgs& a) noexcept {
  return hierarchical_even_usable(c, g, a) && hierarchical_wins(c, g, K, static_cast<double>(a.count * dtype_size(a.type)));
}
template bool hierarchical_usable_for<Coll::kReduceScatter>(const Context&, const Group&, const CollArgs&) noexcept;
template bool hierarchical_usable_for<Coll::kAllgather>(const Context&, const Group&, const CollArgs&) noexcept;
template bool hierarchical_usable_for<Coll::kAlltoall>(const Context&, const Group&, const CollArgs&) noexcept;
template bool hierarchical_usable_for<Coll::kBroadcast>(const Context&, const Group&, const CollArgs&) noexcept;
template bool hierarchical_usable_for<Coll::kReduce>(const Context&, const Group&, const CollArgs&) noexcept;

}  // namespace grex::detail
