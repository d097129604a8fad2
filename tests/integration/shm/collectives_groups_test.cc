// SPDX-License-Identifier: Apache-2.0
// The algorithms as composable units: every entry of the algorithm table
// runs on group views (the whole job, the even and the odd ranks, the job in
// reverse order) over a real shm device, and a hierarchical allreduce is
// composed from them the way a communicator spanning hosts will compose it:
// reduce-scatter inside each "host" ({0,1}, {2,3}), allreduce of each shard
// across hosts among the ranks with the same local index, allgather inside
// each host. Every result is checked element by element.
#include <gtest/gtest.h>
#include <grex/grex.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "collectives/algorithm.h"
#include "collectives/buffers.h"
#include "collectives/context.h"
#include "collectives/engine.h"
#include "collectives/group.h"
#include "collectives/shared_area.h"
#include "harness.h"

namespace grex::test {
namespace {

using detail::Algorithm;
using detail::Coll;
using detail::CollArgs;
using detail::Group;

constexpr int kRanks = 4;
constexpr size_t kCounts[] = {1, 1000, 100'003};

// Communicator rank g's element i (small: sums of four stay exact in i32).
int32_t input(int g, size_t i) { return (g + 1) * 1000 + static_cast<int32_t>(i % 997); }

// One rank's device, endpoints to every other rank, engine and buffers:
// what a Communicator holds, without its choices.
struct Node {
  std::unique_ptr<Device> dev;
  std::vector<std::unique_ptr<Endpoint>> eps;
  std::unique_ptr<detail::Engine> engine;
  std::unique_ptr<detail::Buffers> bufs;
  std::unique_ptr<detail::SharedArea> area;
  CommOptions opts;
  detail::Context ctx;
  uint32_t seq = 0;
  uint64_t tag() { return (1ull << 63) | (uint64_t{++seq} << 32); }
  ~Node() {
    eps.clear();
    bufs.reset();
    if (area) (void)dev->free(area->region);
  }
};

Result<void> connect(Rank& r, Node& n) {
  DeviceOptions d;
  d.driver = "shm";
  d.rank = r.rank;
  d.world_size = r.size;
  d.job_id = "groups-" + std::to_string(r.store_port);
  n.dev = GREX_TRY(Device::open(d));
  auto addrs = GREX_TRY(r.bootstrap->all_gather("addr", GREX_TRY(n.dev->local_address())));
  n.eps.resize(static_cast<size_t>(r.size));
  for (int p = 0; p < r.size; ++p)
    if (p != r.rank) n.eps[static_cast<size_t>(p)] = GREX_TRY(n.dev->connect(p, addrs[static_cast<size_t>(p)]));
  GREX_TRY(r.bootstrap->barrier("connected"));
  n.engine = std::make_unique<detail::Engine>(n.dev.get(), &n.eps, r.rank);
  n.engine->set_timeout_ms(30'000);
  n.bufs = std::make_unique<detail::Buffers>(*n.dev);
  n.opts.timeout_ms = 30'000;
  n.ctx.device = n.dev.get();
  n.ctx.bufs = n.bufs.get();
  n.ctx.opts = &n.opts;
  n.ctx.rank = r.rank;
  return ok();
}

// Runs every table entry of every collective on `g` and checks the results.
int check_group(Node& n, const Group& g, const char* name) {
  const int m = g.size(), me = g.rank();
  for (const Algorithm& algo : detail::algorithms()) {
    for (size_t count : kCounts) {
      CollArgs probe{nullptr, nullptr, count, DataType::kInt32, ReduceOp::kSum, 0, 0};
      if (algo.usable != nullptr && !algo.usable(n.ctx, g, probe)) continue;
      auto fail = [&](size_t i, int64_t got, int64_t want) {
        std::fprintf(stderr, "group %s, %s %s, count %zu, member %d: element %zu is %lld, want %lld\n", name,
                     detail::coll_name(algo.coll), algo.name, count, me, i, static_cast<long long>(got),
                     static_cast<long long>(want));
        return 1;
      };
      std::vector<int32_t> in, out;
      CollArgs a = probe;
      a.tag = n.tag();
      switch (algo.coll) {
        case Coll::kAllreduce:
        case Coll::kReduce: {
          in.resize(count);
          out.assign(count, -1);
          for (size_t i = 0; i < count; ++i) in[i] = input(g.global(me), i);
          a.root = m - 1;
          a.send = in.data();
          a.recv = out.data();
          RANK_OK(algo.run(n.ctx, g, a));
          if (algo.coll == Coll::kReduce && me != a.root) break;
          for (size_t i = 0; i < count; ++i) {
            int32_t want = 0;
            for (int k = 0; k < m; ++k) want += input(g.global(k), i);
            if (out[i] != want) return fail(i, out[i], want);
          }
          break;
        }
        case Coll::kBroadcast: {
          a.root = 1 % m;
          out.resize(count);
          for (size_t i = 0; i < count; ++i) out[i] = me == a.root ? input(g.global(me), i) : -1;
          a.recv = out.data();
          a.count = count * sizeof(int32_t);
          a.type = DataType::kUint8;
          RANK_OK(algo.run(n.ctx, g, a));
          for (size_t i = 0; i < count; ++i)
            if (out[i] != input(g.global(a.root), i)) return fail(i, out[i], input(g.global(a.root), i));
          break;
        }
        case Coll::kReduceScatter: {
          in.resize(count * static_cast<size_t>(m));
          out.assign(count, -1);
          for (size_t i = 0; i < in.size(); ++i) in[i] = input(g.global(me), i);
          a.send = in.data();
          a.recv = out.data();
          RANK_OK(algo.run(n.ctx, g, a));
          for (size_t i = 0; i < count; ++i) {
            const size_t at = static_cast<size_t>(me) * count + i;
            int32_t want = 0;
            for (int k = 0; k < m; ++k) want += input(g.global(k), at);
            if (out[i] != want) return fail(i, out[i], want);
          }
          break;
        }
        case Coll::kAllgather: {
          in.resize(count);
          out.assign(count * static_cast<size_t>(m), -1);
          for (size_t i = 0; i < count; ++i) in[i] = input(g.global(me), i);
          a.send = in.data();
          a.recv = out.data();
          RANK_OK(algo.run(n.ctx, g, a));
          for (int k = 0; k < m; ++k)
            for (size_t i = 0; i < count; ++i) {
              const size_t at = static_cast<size_t>(k) * count + i;
              if (out[at] != input(g.global(k), i)) return fail(at, out[at], input(g.global(k), i));
            }
          break;
        }
        case Coll::kAlltoall: {
          // Block j of member me goes to member j: it carries both.
          auto block = [&](int from, int to, size_t i) { return g.global(from) * 100000 + to * 1000 + int32_t(i % 997); };
          in.resize(count * static_cast<size_t>(m));
          out.assign(in.size(), -1);
          for (int j = 0; j < m; ++j)
            for (size_t i = 0; i < count; ++i) in[static_cast<size_t>(j) * count + i] = block(me, j, i);
          a.send = in.data();
          a.recv = out.data();
          RANK_OK(algo.run(n.ctx, g, a));
          for (int j = 0; j < m; ++j)
            for (size_t i = 0; i < count; ++i) {
              const size_t at = static_cast<size_t>(j) * count + i;
              if (out[at] != block(j, me, i)) return fail(at, out[at], block(j, me, i));
            }
          break;
        }
        case Coll::kBarrier:
          RANK_OK(algo.run(n.ctx, g, a));
          break;
      }
      n.bufs->release_retired();
    }
  }
  return 0;
}

// Hierarchical allreduce composed from table entries on sub-groups: hosts
// {0,1} and {2,3}; rails {0,2} and {1,3} (same local index).
int check_hierarchical(Node& n, const Group& world, size_t count, const char* rail_algo) {
  const int r = world.rank();
  const int local = r % 2, host = r / 2;
  const int host_members[2][2] = {{0, 1}, {2, 3}};
  const int rail_members[2][2] = {{0, 2}, {1, 3}};
  const Group intra = world.sub(host_members[host]);
  const Group rail = world.sub(rail_members[local]);
  if (intra.rank() != local || rail.rank() != host) {
    std::fprintf(stderr, "rank %d: sub-group indexes %d, %d\n", r, intra.rank(), rail.rank());
    return 1;
  }
  const size_t shard = count / 2;  // count is even here
  std::vector<int32_t> in(count), part(shard), out(count, -1);
  for (size_t i = 0; i < count; ++i) in[i] = input(r, i);
  const uint64_t tag = n.tag();
  // Three phases, each with a tag base of its own.
  CollArgs rs{in.data(), part.data(), shard, DataType::kInt32, ReduceOp::kSum, 0, tag | (uint64_t{1} << 17)};
  RANK_OK(detail::first_usable(Coll::kReduceScatter, n.ctx, intra, rs).run(n.ctx, intra, rs));
  CollArgs ar{part.data(), part.data(), shard, DataType::kInt32, ReduceOp::kSum, 0, tag | (uint64_t{2} << 17)};
  RANK_OK(detail::find_algorithm(Coll::kAllreduce, rail_algo)->run(n.ctx, rail, ar));
  CollArgs ag{part.data(), out.data(), shard, DataType::kInt32, ReduceOp::kSum, 0, tag | (uint64_t{3} << 17)};
  RANK_OK(detail::first_usable(Coll::kAllgather, n.ctx, intra, ag).run(n.ctx, intra, ag));
  for (size_t i = 0; i < count; ++i) {
    int32_t want = 0;
    for (int k = 0; k < kRanks; ++k) want += input(k, i);
    if (out[i] != want) {
      std::fprintf(stderr, "hierarchical (rails: %s), rank %d: element %zu is %d, want %d\n", rail_algo, r, i, out[i],
                   want);
      return 1;
    }
  }
  n.bufs->release_retired();
  return 0;
}

TEST(CollectiveGroups, EveryAlgorithmOnGroupViewsAndAComposedHierarchicalAllreduce) {
  auto res = run_ranks(kRanks, [](Rank& r) -> int {
    Node n;
    RANK_OK(connect(r, n));
    const Group world = Group::world(*n.engine, r.rank, r.size);
    // The shared slots of flat and staged, for the whole job only.
    RANK_OK(detail::setup_shared_area(n.ctx, world, true, *r.bootstrap, "flat", &n.area));
    n.ctx.area = n.area.get();
    RANK_CHECK(n.area != nullptr);
    if (check_group(n, world, "world") != 0) return 1;
    const int parity[2][2] = {{0, 2}, {1, 3}};
    if (check_group(n, world.sub(parity[r.rank % 2]), r.rank % 2 == 0 ? "even" : "odd") != 0) return 1;
    const int reversed[] = {3, 2, 1, 0};
    if (check_group(n, world.sub(reversed), "reversed") != 0) return 1;
    for (const char* rail_algo : {"ring", "recursive_doubling", "rabenseifner", "tree"})
      for (size_t count : {size_t{2}, size_t{1000}, size_t{300'000}})
        if (check_hierarchical(n, world, count, rail_algo) != 0) return 1;
    RANK_OK(r.bootstrap->barrier("done"));
    return 0;
  });
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

}  // namespace
}  // namespace grex::test
