// SPDX-License-Identifier: Apache-2.0
// The other collectives across hosts, on the levels of hierarchy.h, on any
// layout (the even one, the same number of ranks L on every host, first). Rank (h, j) is local rank j of host h; rail j links the
// ranks (h, j) of every host that has one. Blocks are permuted through a
// scratch buffer so each level moves contiguous ranges.
//   reduce_scatter: blocks packed rail by rail; intra-host reduce-scatter
//     (local rank j: rail j's H blocks, summed over the host); rail
//     reduce-scatter (rank (h, j): its block, summed over every host).
//   allgather: rail allgather (rank (h, j): the blocks of rail j); intra-host
//     allgather of those; unpacked into rank order.
//   broadcast: the root's rail, then each host from its rank on that rail.
//     Where some host has no rank on the root's rail (uneven hosts, the root's
//     local index at least the smallest host's size): the root's host first,
//     then rail 0 (every host has a local rank 0), then the other hosts.
//   reduce: each host to its rank on the root's rail, then that rail to the
//     root. Without such a rail: the other hosts to their local rank 0, rail 0
//     to the root's host's, then the root's host to the root.
//   alltoall: inside the host by destination rail, then along the rail with
//     one message per host pair (L blocks); unpacked into rank order.
// Per rank, (H-1) blocks cross hosts in reduce_scatter and allgather, where a
// flat ring sends (n-1) blocks over each link that leaves a host.
//   Uneven hosts (reduce_scatter, allgather, alltoall): through each host's
//   rank 0 and rail 0, with host bundles: see uneven_allgather().
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

Result<void> run_on(Level& l, Coll coll, const CollArgs& a) {
  return first_usable(coll, l.ctx, *l.group, a).run(l.ctx, *l.group, a);
}

bool even_hosts(const Hierarchy& h) noexcept {
  for (const auto& hs : h.hosts)
    if (static_cast<int>(hs.size()) != h.rails) return false;
  return true;
}

}  // namespace

void enter_levels(const Context& c, Hierarchy& h) {
  for (Level* l : {&h.local, &h.rail}) {  // errors name the call
    l->ctx.call = c.call;
    l->ctx.ncoll = c.ncoll;
  }
}

// Every local rank sends `mine` (bytes) to the host's rank 0, which gets them
// one after another at `all` (gather), or the reverse (scatter).
Result<void> via_lead(Level& l, bool lead, bool gather, const void* from, void* to, uint64_t mine,
                      const std::vector<uint64_t>& each, uint64_t tag) {
  const size_t L = each.size();
  std::vector<uint64_t> sc(L, 0), sd(L, 0), rc(L, 0), rd(L, 0);
  std::vector<uint64_t>& lead_counts = gather ? rc : sc;
  std::vector<uint64_t>& lead_displs = gather ? rd : sd;
  uint64_t at = 0;
  for (size_t k = 0; lead && k < L; ++k) {
    lead_counts[k] = each[k];
    lead_displs[k] = at;
    at += each[k];
  }
  (gather ? sc : rc)[0] = mine;
  return pairwise_alltoallv(l.ctx, *l.group, from, sc, sd, to, rc, rd, tag);
}

Result<void> grow_buffer(Context& c, Hierarchy::Buffer& b, size_t bytes) {
  return grow_region(c.bufs->device(), b.mr, b.have, std::max<size_t>(bytes, 1));
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

namespace {

// Through each host's rank 0 (uneven alltoall, every alltoallv): the whole
// vectors to it and back inside the widest host, its packing and unpacking
// of them all (at the reduction speed, a memory-bound pass), and W x W
// blocks per host pair on rail 0.
double via_leads_alltoall_s(const Hierarchy& h, double n, double B) noexcept {
  int widest = 0;
  for (const auto& hs : h.hosts) widest = std::max(widest, static_cast<int>(hs.size()));
  const double W = widest, H = h.host_count();
  const CostModel& lo = h.local.select.cost;
  const CostModel& net = h.rail.select.cost;
  return 2 * (W - 1) * (lo.alpha_s + n * B * lo.beta_s_per_byte) + 2 * W * n * B * lo.gamma_s_per_byte +
         (H - 1) * (net.alpha_s + W * W * B * net.beta_s_per_byte);
}

}  // namespace

bool hierarchical_alltoallv_wins(const Context& c, const Group& g, double block_bytes) noexcept {
  const Hierarchy& h = *c.hier;
  const double n = g.size();
  const double flat = (n - 1) * (h.world_cost.alpha_s + block_bytes * h.world_cost.beta_s_per_byte);
  return via_leads_alltoall_s(h, n, block_bytes) <= flat;
}

bool hierarchical_topk_wins(const Context& c, double bytes, double fraction) noexcept {
  const Hierarchy& h = *c.hier;
  const double H = h.host_count(), n = static_cast<double>(h.host_of.size()), L = h.rails;
  int widest = 1;
  for (const auto& hs : h.hosts) widest = std::max(widest, static_cast<int>(hs.size()));
  const CostModel& lo = h.local.select.cost;
  const CostModel& net = h.rail.select.cost;
  const double pairs = 2 * fraction * bytes;  // 8 bytes a value sent, 4 a value
  const double hier =
      lo.allreduce_s(Algo::kRing, widest, bytes) + (H - 1) * (net.alpha_s + pairs / L * net.beta_s_per_byte);
  // The flat top-k's allgather of every rank's pairs takes the faster form.
  const double ring = (n - 1) * (h.world_cost.alpha_s + pairs * h.world_cost.beta_s_per_byte);
  const double two_level = (widest - 1) * (lo.alpha_s + H * pairs * lo.beta_s_per_byte) +
                           (H - 1) * (net.alpha_s + pairs * net.beta_s_per_byte);
  return hier <= std::min(ring, two_level);
}

bool hierarchical_wins(const Context& c, const Group& g, Coll coll, double block_bytes, int root) noexcept {
  const Hierarchy& h = *c.hier;
  const double world_cost_alpha = h.world_cost.alpha_s, world_cost_beta = h.world_cost.beta_s_per_byte;
  const double H = h.host_count(), n = g.size();
  double L = h.rails;
  const CostModel& lo = h.local.select.cost;
  const CostModel& net = h.rail.select.cost;
  const double B = block_bytes;
  double hier = 0, flat = 0;
  switch (coll) {
    case Coll::kReduceScatter:
    case Coll::kAllgather: {  // ring steps of one block (flat) or of H blocks inside, one block along the rail
      flat = (n - 1) * (world_cost_alpha + B * world_cost_beta);
      int widest = 0;
      for (const auto& hs : h.hosts) widest = std::max(widest, static_cast<int>(hs.size()));
      if (even_hosts(h)) {
        hier = (L - 1) * (lo.alpha_s + H * B * lo.beta_s_per_byte) + (H - 1) * (net.alpha_s + B * net.beta_s_per_byte);
      } else {  // uneven: a ring of blocks and a tree of the whole inside, bundles on rail 0
        const double W = widest;
        hier = (W - 1) * (lo.alpha_s + B * lo.beta_s_per_byte) + (H - 1) * (net.alpha_s + W * B * net.beta_s_per_byte) +
               ceil_log2(widest) * (lo.alpha_s + n * B * lo.beta_s_per_byte);
      }
      break;
    }
    case Coll::kAlltoall: {  // pairwise steps: one block each, or H blocks inside and L blocks along the rail
      flat = (n - 1) * (world_cost_alpha + B * world_cost_beta);
      if (even_hosts(h))
        hier = (L - 1) * (lo.alpha_s + H * B * lo.beta_s_per_byte) + (H - 1) * (net.alpha_s + L * B * net.beta_s_per_byte);
      else
        hier = via_leads_alltoall_s(h, n, B);
      break;
    }
    default: {  // broadcast, reduce: binomial trees of the whole vector, on the widest host
      int widest = 1;
      for (const auto& hs : h.hosts) widest = std::max(widest, static_cast<int>(hs.size()));
      L = widest;
      // Through rail 0 (the root's rail misses a host): the root's host takes a turn of its own.
      const bool via0 = root >= 0 && h.local_of[static_cast<size_t>(root)] >= h.rails;
      flat = ceil_log2(static_cast<int>(n)) * (world_cost_alpha + B * world_cost_beta);
      hier = ceil_log2(static_cast<int>(H)) * (net.alpha_s + B * net.beta_s_per_byte) +
             (via0 ? 2 : 1) * ceil_log2(static_cast<int>(L)) * (lo.alpha_s + B * lo.beta_s_per_byte);
      break;
    }
  }
  return hier <= flat;
}

namespace {

// Host x's bundle: its ranks' blocks, in their order, hosts in order (bytes).
struct Bundles {
  std::vector<uint64_t> start, len;
  Bundles(const Hierarchy& h, size_t block) {
    uint64_t at = 0;
    for (const auto& hs : h.hosts) {
      start.push_back(at);
      len.push_back(hs.size() * block);
      at += hs.size() * block;
    }
  }
};

// Uneven hosts: each host gathers its ranks' blocks, the hosts' rank-0s
// exchange their bundles on rail 0, and each spreads everything inside its
// host. Per host, its bundle crosses to every other host once.
Result<void> uneven_allgather(Context& c, const CollArgs& a) {
  Hierarchy& h = *c.hier;
  const int H = h.host_count(), me = c.rank, mine = h.host_of[static_cast<size_t>(me)];
  const size_t block = a.count * dtype_size(a.type), n = h.host_of.size();
  const Bundles b(h, block);
  GREX_TRY(grow_buffer(c, h.pack, block * n));
  uint8_t* all = h.pack.data();
  const bool local = h.local.group->size() > 1;
  if (local)
    GREX_TRY(run_on(h.local, Coll::kAllgather,
                    CollArgs{a.send, all + b.start[static_cast<size_t>(mine)], a.count, a.type, ReduceOp::kSum, 0, a.tag}));
  else if (block > 0)
    std::memcpy(all + b.start[static_cast<size_t>(mine)], a.send, block);
  if (h.local_of[static_cast<size_t>(me)] == 0 && H > 1) {  // rail 0: member x is host x's rank 0
    std::vector<uint64_t> sc(static_cast<size_t>(H)), sd(sc.size()), rc(sc.size()), rd(sc.size());
    for (size_t x = 0; x < sc.size(); ++x) {
      const bool own = x == static_cast<size_t>(mine);
      sc[x] = own ? 0 : b.len[static_cast<size_t>(mine)];
      sd[x] = b.start[static_cast<size_t>(mine)];
      rc[x] = own ? 0 : b.len[x];
      rd[x] = b.start[x];
    }
    GREX_TRY(pairwise_alltoallv(h.rail.ctx, *h.rail.group, all, sc, sd, all, rc, rd, a.tag));
  }
  if (local)
    GREX_TRY(run_on(h.local, Coll::kBroadcast,
                    CollArgs{nullptr, all, n * block, DataType::kUint8, ReduceOp::kSum, 0, a.tag | (1ull << 17)}));
  auto* out = static_cast<uint8_t*>(a.recv);
  for (size_t x = 0; x < static_cast<size_t>(H); ++x)
    for (size_t j = 0; j < h.hosts[x].size(); ++j)
      std::memcpy(out + static_cast<size_t>(h.hosts[x][j]) * block, all + b.start[x] + j * block, block);
  return ok();
}

// Uneven hosts: each host sums the whole vector at its rank 0, which sends
// host x the blocks of host x's ranks on rail 0 and sums what it gets for
// its own, then hands each rank of its host its block.
Result<void> uneven_reduce_scatter(Context& c, const CollArgs& a) {
  Hierarchy& h = *c.hier;
  const int H = h.host_count(), me = c.rank, mine = h.host_of[static_cast<size_t>(me)];
  const size_t es = dtype_size(a.type), block = a.count * es, n = h.host_of.size();
  const size_t own = h.hosts[static_cast<size_t>(mine)].size();
  const ReduceOp op = a.op == ReduceOp::kAvg ? ReduceOp::kSum : a.op;
  const bool lead = h.local_of[static_cast<size_t>(me)] == 0, local = own > 1;
  const Bundles b(h, block);
  if (lead) {
    GREX_TRY(grow_buffer(c, h.mid, block * std::max(n, static_cast<size_t>(H) * own)));
    GREX_TRY(grow_buffer(c, h.pack, block * n));
  }
  uint8_t* sum = lead ? h.mid.data() : nullptr;
  if (local)
    GREX_TRY(run_on(h.local, Coll::kReduce, CollArgs{a.send, sum, a.count * n, a.type, op, 0, a.tag}));
  else if (block > 0)
    std::memcpy(sum, a.send, block * n);
  if (lead) {
    // pack: the bundles, from the host's sum; then mid: host x's part of ours, for every x.
    for (size_t x = 0; x < static_cast<size_t>(H); ++x)
      for (size_t j = 0; j < h.hosts[x].size(); ++j)
        std::memcpy(h.pack.data() + b.start[x] + j * block, sum + static_cast<size_t>(h.hosts[x][j]) * block, block);
    const uint64_t part = b.len[static_cast<size_t>(mine)];
    std::vector<uint64_t> sc(static_cast<size_t>(H)), rc(sc.size(), part), rd(sc.size());
    for (size_t x = 0; x < sc.size(); ++x) {
      sc[x] = b.len[x];
      rd[x] = x * part;
    }
    if (H > 1) {
      GREX_TRY(pairwise_alltoallv(h.rail.ctx, *h.rail.group, h.pack.data(), sc, b.start, h.mid.data(), rc, rd, a.tag));
    } else {
      std::memcpy(h.mid.data(), h.pack.data(), part);
    }
    for (size_t x = 1; x < static_cast<size_t>(H); ++x)
      reduce(h.mid.data(), h.mid.data(), h.mid.data() + x * part, a.count * own, a.type, op);
  }
  // Each rank of the host its block, from the rank 0.
  if (local) {
    GREX_TRY(via_lead(h.local, lead, false, lead ? h.mid.data() : nullptr, a.recv, block,
                      std::vector<uint64_t>(own, block), a.tag | (1ull << 17)));
  } else if (block > 0) {
    std::memcpy(a.recv, h.mid.data(), block);
  }
  if (a.op == ReduceOp::kAvg) scale_avg(a.recv, a.count, a.type, static_cast<int>(n));
  return ok();
}

// Uneven hosts: each host's rank 0 gathers its ranks' send vectors, sends
// host x one bundle on rail 0 (for each of x's ranks, what each local rank
// sends it), and hands each local rank what came for it. One message per
// host pair, as the even form; the bytes are alltoall's.
Result<void> uneven_alltoall(Context& c, const CollArgs& a) {
  Hierarchy& h = *c.hier;
  const int H = h.host_count(), me = c.rank, mine = h.host_of[static_cast<size_t>(me)];
  const size_t block = a.count * dtype_size(a.type), n = h.host_of.size();
  const auto& here = h.hosts[static_cast<size_t>(mine)];
  const size_t L = here.size(), vec = n * block;
  const bool lead = h.local_of[static_cast<size_t>(me)] == 0;
  if (lead) {
    GREX_TRY(grow_buffer(c, h.pack, L * vec));
    GREX_TRY(grow_buffer(c, h.mid, L * vec));
  }
  // In and out of the host's rank 0: each local rank's whole vector.
  const std::vector<uint64_t> vecs(L, vec);
  if (L > 1) {
    GREX_TRY(via_lead(h.local, lead, true, a.send, lead ? h.pack.data() : nullptr, vec, vecs, a.tag));
  } else if (block > 0) {
    std::memcpy(h.pack.data(), a.send, vec);
  }
  if (lead) {
    // mid: bundle x = [x's rank k][local rank j] = what j sends to rank hosts[x][k].
    std::vector<uint64_t> sc(static_cast<size_t>(H)), sd(sc.size()), rc(sc.size()), rd(sc.size());
    uint64_t at = 0;
    for (size_t x = 0; x < sc.size(); ++x) {
      const auto& there = h.hosts[x];
      sd[x] = rd[x] = at;
      sc[x] = rc[x] = there.size() * L * block;
      for (size_t k = 0; k < there.size(); ++k)
        for (size_t j = 0; j < L; ++j)
          std::memcpy(h.mid.data() + at + (k * L + j) * block,
                      h.pack.data() + j * vec + static_cast<size_t>(there[k]) * block, block);
      at += sc[x];
    }
    // From host x: [my rank k][x's rank j], into pack.
    if (H > 1) {
      GREX_TRY(pairwise_alltoallv(h.rail.ctx, *h.rail.group, h.mid.data(), sc, sd, h.pack.data(), rc, rd, a.tag));
    } else {
      std::memcpy(h.pack.data(), h.mid.data(), at);
    }
    // mid: [my rank k][n blocks in source rank order].
    for (size_t x = 0; x < sc.size(); ++x) {
      const auto& there = h.hosts[x];
      for (size_t k = 0; k < L; ++k)
        for (size_t j = 0; j < there.size(); ++j)
          std::memcpy(h.mid.data() + k * vec + static_cast<size_t>(there[j]) * block,
                      h.pack.data() + rd[x] + (k * there.size() + j) * block, block);
    }
  }
  if (L > 1) return via_lead(h.local, lead, false, lead ? h.mid.data() : nullptr, a.recv, vec, vecs, a.tag | (1ull << 17));
  if (block > 0) std::memcpy(a.recv, h.mid.data(), vec);
  return ok();
}

}  // namespace

Result<void> hierarchical_reduce_scatter(Context& c, const Group& g, const CollArgs& a) {
  (void)g;
  Hierarchy& h = *c.hier;
  enter_levels(c, h);
  if (!even_hosts(h)) return uneven_reduce_scatter(c, a);
  const int H = h.host_count(), L = h.rails;
  const size_t es = dtype_size(a.type), block = a.count * es;
  const ReduceOp op = a.op == ReduceOp::kAvg ? ReduceOp::kSum : a.op;
  // pack[j][host]: the block of rank (host, j)
  GREX_TRY(grow_buffer(c, h.pack, block * static_cast<size_t>(H * L)));
  GREX_TRY(grow_buffer(c, h.mid, block * static_cast<size_t>(H)));
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
  enter_levels(c, h);
  if (!even_hosts(h)) return uneven_allgather(c, a);
  const int H = h.host_count(), L = h.rails;
  const size_t block = a.count * dtype_size(a.type);
  GREX_TRY(grow_buffer(c, h.mid, block * static_cast<size_t>(H)));
  GREX_TRY(grow_buffer(c, h.pack, block * static_cast<size_t>(H * L)));
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
  enter_levels(c, h);
  if (!even_hosts(h)) return uneven_alltoall(c, a);
  const int H = h.host_count(), L = h.rails;
  const size_t block = a.count * dtype_size(a.type), all = block * static_cast<size_t>(H * L);
  GREX_TRY(grow_buffer(c, h.pack, all));
  GREX_TRY(grow_buffer(c, h.mid, all));
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

namespace {

// The rail that carries a broadcast or reduce with this root across hosts:
// the root's, where every host has a rank on it, else rail 0.
int root_rail(const Hierarchy& h, int root) noexcept {
  const int j = h.local_of[static_cast<size_t>(root)];
  return j < h.rails ? j : 0;
}

}  // namespace

Result<void> hierarchical_broadcast(Context& c, const Group& g, const CollArgs& a) {
  (void)g;
  Hierarchy& h = *c.hier;
  enter_levels(c, h);
  const int root_host = h.host_of[static_cast<size_t>(a.root)], root_j = h.local_of[static_cast<size_t>(a.root)];
  const int me = c.rank, my_host = h.host_of[static_cast<size_t>(me)];
  const int via = root_rail(h, a.root);
  const bool local = h.local.group->size() > 1;
  CollArgs la = a;
  la.tag = a.tag | (1ull << 17);  // the hosts' phases: disjoint groups, one tag
  if (via != root_j && my_host == root_host && local) {  // the root's host first, to its rail-0 rank
    la.root = root_j;
    GREX_TRY(run_on(h.local, Coll::kBroadcast, la));
  }
  if (h.local_of[static_cast<size_t>(me)] == via && h.host_count() > 1) {  // rail `via`: its member on every host
    CollArgs ra = a;
    ra.root = root_host;
    GREX_TRY(run_on(h.rail, Coll::kBroadcast, ra));
  }
  if ((via == root_j || my_host != root_host) && local) {
    la.root = via;
    GREX_TRY(run_on(h.local, Coll::kBroadcast, la));
  }
  return ok();
}

Result<void> hierarchical_reduce(Context& c, const Group& g, const CollArgs& a) {
  (void)g;
  Hierarchy& h = *c.hier;
  enter_levels(c, h);
  const int root_host = h.host_of[static_cast<size_t>(a.root)], root_j = h.local_of[static_cast<size_t>(a.root)];
  const int me = c.rank, my_host = h.host_of[static_cast<size_t>(me)];
  const int via = root_rail(h, a.root);
  const bool on_rail = h.local_of[static_cast<size_t>(me)] == via;
  const bool local = h.local.group->size() > 1, across = h.host_count() > 1;
  const ReduceOp op = a.op == ReduceOp::kAvg ? ReduceOp::kSum : a.op;
  const size_t bytes = a.count * dtype_size(a.type);
  const uint64_t rail_tag = a.tag | (1ull << 17);
  if (on_rail) GREX_TRY(grow_buffer(c, h.mid, bytes));
  void* host_sum = on_rail ? static_cast<void*>(h.mid.data()) : nullptr;
  if (via != root_j && my_host == root_host) {
    // The other hosts' sum comes to this host's rail-0 rank first (its own
    // vector in it), then the host reduces to the root.
    const void* mine = a.send;
    if (on_rail && across) {
      GREX_TRY(run_on(h.rail, Coll::kReduce, CollArgs{a.send, host_sum, a.count, a.type, op, root_host, rail_tag}));
      mine = host_sum;
    }
    GREX_TRY(run_on(h.local, Coll::kReduce,
                    CollArgs{mine, me == a.root ? a.recv : nullptr, a.count, a.type, op, root_j, a.tag}));
  } else {
    // Each host's sum lands with its rank on rail `via`, then that rail reduces to the root.
    if (local) {
      GREX_TRY(run_on(h.local, Coll::kReduce, CollArgs{a.send, host_sum, a.count, a.type, op, via, a.tag}));
    } else {
      std::memcpy(host_sum, a.send, bytes);
    }
    if (on_rail) {
      void* out = me == a.root ? a.recv : nullptr;
      if (across)
        GREX_TRY(run_on(h.rail, Coll::kReduce, CollArgs{host_sum, out, a.count, a.type, op, root_host, rail_tag}));
      else if (me == a.root)
        std::memcpy(a.recv, host_sum, bytes);
    }
  }
  if (me == a.root && a.op == ReduceOp::kAvg) scale_avg(a.recv, a.count, a.type, static_cast<int>(h.host_of.size()));
  return ok();
}

}  // namespace grex::detail

namespace grex::detail {

template <Coll K>
bool hierarchical_usable_for(const Context& c, const Group& g, const CollArgs& a) noexcept {
  const double bytes = static_cast<double>(a.count * dtype_size(a.type));
  return hierarchical_usable(c, g, a) && hierarchical_wins(c, g, K, bytes, a.root);
}
template bool hierarchical_usable_for<Coll::kReduceScatter>(const Context&, const Group&, const CollArgs&) noexcept;
template bool hierarchical_usable_for<Coll::kAllgather>(const Context&, const Group&, const CollArgs&) noexcept;
template bool hierarchical_usable_for<Coll::kAlltoall>(const Context&, const Group&, const CollArgs&) noexcept;
template bool hierarchical_usable_for<Coll::kBroadcast>(const Context&, const Group&, const CollArgs&) noexcept;
template bool hierarchical_usable_for<Coll::kReduce>(const Context&, const Group&, const CollArgs&) noexcept;

}  // namespace grex::detail
