// SPDX-License-Identifier: Apache-2.0
// The table of collective algorithms (algorithm.h).
#include <array>

#include "collectives/algorithm.h"
#include "collectives/shared_area.h"

namespace grex::detail {
namespace {

bool flat_barrier_usable(const Context& c, const Group& g, const CollArgs&) noexcept {
  return c.area != nullptr && c.area->flat_max > 0 && c.area->serves(g);
}

// Allreduce entries first, in Algo order (allreduce_algorithm indexes them);
// for the other collectives, the first usable entry of a kind runs.
constexpr std::array<Algorithm, 19> kAlgorithms = {{
    {Coll::kAllreduce, "ring", "reduce-scatter then allgather around the ring, pipelined in chunks", Algo::kRing,
     nullptr, ring_allreduce},
    {Coll::kAllreduce, "rabenseifner", "reduce-scatter by recursive halving, allgather by recursive doubling",
     Algo::kRabenseifner, nullptr, rabenseifner_allreduce},
    {Coll::kAllreduce, "recursive_doubling", "whole vector exchanged and reduced in log2(n) steps",
     Algo::kRecursiveDoubling, nullptr, recursive_doubling_allreduce},
    {Coll::kAllreduce, "tree", "binomial-tree reduce, then binomial-tree broadcast", Algo::kTree, nullptr,
     tree_allreduce},
    {Coll::kAllreduce, "direct", "one-sided reads and writes: member r reduces segment r", Algo::kDirect,
     direct_usable, direct_allreduce},
    {Coll::kAllreduce, "flat", "small vectors through slots every member maps (one host)", Algo::kFlat, flat_usable,
     flat_allreduce},
    {Coll::kAllreduce, "hierarchical",
     "intra-host reduce-scatter, each shard's allreduce across hosts (one rail per local rank), intra-host allgather",
     Algo::kHierarchical, hierarchical_usable, hierarchical_allreduce},
    {Coll::kBroadcast, "hierarchical", "the root's rail across hosts, then each host from its rail member",
     Algo::kRing, hierarchical_usable_for<Coll::kBroadcast>, hierarchical_broadcast},
    {Coll::kBroadcast, "tree", "binomial tree, pipelined in chunks", Algo::kRing, nullptr, tree_broadcast},
    {Coll::kReduce, "hierarchical", "each host to its member of the root's rail, then that rail to the root",
     Algo::kRing, hierarchical_usable_for<Coll::kReduce>, hierarchical_reduce},
    {Coll::kReduce, "tree", "binomial tree towards the root", Algo::kRing, nullptr, tree_reduce},
    {Coll::kReduceScatter, "hierarchical", "intra-host reduce-scatter of rail-packed blocks, then each rail's",
     Algo::kRing, hierarchical_usable_for<Coll::kReduceScatter>, hierarchical_reduce_scatter},
    {Coll::kReduceScatter, "ring", "block b's sum travels around the ring to member b", Algo::kRing, nullptr,
     ring_reduce_scatter},
    {Coll::kAllgather, "hierarchical", "each rail's allgather, then the hosts', unpacked into rank order",
     Algo::kRing, hierarchical_usable_for<Coll::kAllgather>, hierarchical_allgather},
    {Coll::kAllgather, "ring", "block b starts at member b and moves one member per step", Algo::kRing, nullptr,
     ring_allgather},
    {Coll::kAlltoall, "hierarchical", "inside each host by destination rail, then one message per host pair on each rail",
     Algo::kRing, hierarchical_usable_for<Coll::kAlltoall>, hierarchical_alltoall},
    {Coll::kAlltoall, "pairwise", "step k: send to member+k, receive from member-k", Algo::kRing, nullptr,
     pairwise_alltoall},
    {Coll::kBarrier, "flat", "a sequence published in the flat slots (one host)", Algo::kFlat, flat_barrier_usable,
     flat_barrier},
    {Coll::kBarrier, "dissemination", "log2(n) rounds of empty messages", Algo::kRing, nullptr,
     dissemination_barrier},
}};

constexpr bool allreduce_entries_in_algo_order() {
  for (size_t i = 0; i <= static_cast<size_t>(Algo::kHierarchical); ++i)
    if (kAlgorithms[i].coll != Coll::kAllreduce || static_cast<size_t>(kAlgorithms[i].allreduce_id) != i) return false;
  return true;
}
static_assert(allreduce_entries_in_algo_order(), "allreduce_algorithm() indexes the table by Algo");

}  // namespace

const char* coll_name(Coll c) noexcept {
  switch (c) {
    case Coll::kAllreduce: return "allreduce";
    case Coll::kBroadcast: return "broadcast";
    case Coll::kReduce: return "reduce";
    case Coll::kReduceScatter: return "reduce_scatter";
    case Coll::kAllgather: return "allgather";
    case Coll::kAlltoall: return "alltoall";
    case Coll::kBarrier: return "barrier";
  }
  return "?";
}

std::span<const Algorithm> algorithms() noexcept { return kAlgorithms; }

const Algorithm* find_algorithm(Coll coll, std::string_view name) noexcept {
  for (const Algorithm& a : kAlgorithms)
    if (a.coll == coll && name == a.name) return &a;
  return nullptr;
}

const Algorithm& allreduce_algorithm(Algo id) noexcept { return kAlgorithms[static_cast<size_t>(id)]; }

const Algorithm& first_usable(Coll coll, const Context& c, const Group& g, const CollArgs& a) noexcept {
  const Algorithm* last = nullptr;
  for (const Algorithm& e : kAlgorithms) {
    if (e.coll != coll) continue;
    if (e.usable == nullptr || e.usable(c, g, a)) return e;
    last = &e;
  }
  return *last;  // every kind has an entry without conditions
}

}  // namespace grex::detail
