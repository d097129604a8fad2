// SPDX-License-Identifier: Apache-2.0
// The collective algorithms behind one small interface, in one table (as
// congestion/registry.cc lists the congestion controllers): each entry says
// which collective it implements, whether it can run on a group and call,
// and runs it on a group view. The communicator picks an entry per call (the
// cost model for allreduce, the first usable entry for the others); a
// communicator that composes collectives over sub-groups calls entries the
// same way.
#pragma once

#include <grex/communicator.h>

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "collectives/context.h"
#include "collectives/cost_model.h"
#include "collectives/group.h"

namespace grex::detail {

enum class Coll : uint8_t { kAllreduce, kBroadcast, kReduce, kReduceScatter, kAllgather, kAlltoall, kBarrier };
const char* coll_name(Coll c) noexcept;

struct Algorithm {
  Coll coll;
  const char* name;
  const char* description;
  Algo allreduce_id;  // the cost model's name for it (allreduce entries only)
  /// Whether it can run this call on `g` (device capabilities, shared area,
  /// size); every member must answer alike. Null: always.
  bool (*usable)(const Context& c, const Group& g, const CollArgs& a) noexcept;
  Result<void> (*run)(Context& c, const Group& g, const CollArgs& a);
};

std::span<const Algorithm> algorithms() noexcept;
const Algorithm* find_algorithm(Coll coll, std::string_view name) noexcept;
/// The allreduce entry the cost model named (constant time: the hot path).
const Algorithm& allreduce_algorithm(Algo id) noexcept;
/// The first entry for `coll` that can run the call.
const Algorithm& first_usable(Coll coll, const Context& c, const Group& g, const CollArgs& a) noexcept;

// The algorithms (each file's header comment says how it works). Counts are
// per member: allreduce, reduce and broadcast (bytes, type kUint8) move
// `count` elements; reduce_scatter and allgather `count` per member; alltoall
// `count` to each member.
Result<void> ring_allreduce(Context& c, const Group& g, const CollArgs& a);
/// The ring with float32 partial sums sent compressed (compressed_allreduce.cc);
/// a.type kFloat32, a.op kSum or kAvg. `residual` (count floats, or null)
/// is the error feedback; `wire` the compressed copy's buffer, kept by the caller.
Result<void> compressed_ring_allreduce(Context& c, const Group& g, const CollArgs& a, Compression kind,
                                       float* residual, std::vector<uint8_t>* wire);
/// The top-k allreduce's steps on group g alone (topk_allreduce.cc): a.send's
/// float32 values (+ residual) selected, summed over g's members into a.recv
/// (may be a.send); a.op is a sum. The hierarchical allreduce's rail form.
Result<void> topk_rail_allreduce(Context& c, const Group& g, const CollArgs& a, double fraction, float* residual);
/// What runs between the ring's reduce-scatter and allgather, on this
/// member's reduced segment (its first element and count).
using RingBetween = std::function<Result<void>(size_t first, size_t count)>;
/// Ring allreduce over a given layout: segment s is elements [off[s],
/// off[s]+cnt[s]) (any order, empty ones allowed; one per member). After the
/// reduce-scatter member r holds segment (r+1) mod n, divided by
/// `avg_divisor` for kAvg, and `between` (if set) runs on it; the allgather
/// then gives every member every segment.
Result<void> ring_allreduce_segments(Context& c, const Group& g, const CollArgs& a, std::span<const size_t> off,
                                     std::span<const size_t> cnt, int avg_divisor, const RingBetween& between);
/// Across hosts (Context::hier): intra-host reduce-scatter, the shards'
/// allreduce across hosts (one rail per local index, in parallel), intra-host
/// allgather (hier_allreduce.cc).
Result<void> hierarchical_allreduce(Context& c, const Group& g, const CollArgs& a);
struct Level;
/// The rail level's allreduce of one shard in place (ra: its elements, a sum,
/// the call's tag), `first` its first element in the whole vector.
using RailAllreduce = std::function<Result<void>(Level& rail, const CollArgs& ra, size_t first)>;
/// hierarchical_allreduce() with the shards' allreduce across hosts given
/// (the compressed allreduce's: compressed on the network level only).
Result<void> hierarchical_allreduce_via(Context& c, const CollArgs& a, const RailAllreduce& rail_allreduce);
bool hierarchical_usable(const Context& c, const Group& g, const CollArgs& a) noexcept;
/// Whether the two-level model predicts the hierarchical `coll` (a block of
/// `block_bytes` per rank, or the vector for broadcast and reduce) no slower
/// than the flat algorithm under the world's alpha and beta (Hierarchy::world_cost).
/// `root` (broadcast, reduce; -1: the root's rail reaches every host) adds the
/// root host's own turn where its rail misses a host.
bool hierarchical_wins(const Context& c, const Group& g, Coll coll, double block_bytes, int root = -1) noexcept;
/// The other collectives across hosts (hier_collectives.cc, any layout),
/// first in the table where usable: hierarchical_usable() and
/// hierarchical_wins() for collective K (instantiated for the five entries).
template <Coll K>
bool hierarchical_usable_for(const Context& c, const Group& g, const CollArgs& a) noexcept;
Result<void> hierarchical_reduce_scatter(Context& c, const Group& g, const CollArgs& a);
Result<void> hierarchical_allgather(Context& c, const Group& g, const CollArgs& a);
Result<void> hierarchical_broadcast(Context& c, const Group& g, const CollArgs& a);
Result<void> hierarchical_reduce(Context& c, const Group& g, const CollArgs& a);
Result<void> hierarchical_alltoall(Context& c, const Group& g, const CollArgs& a);
/// Whether the model predicts the hierarchical top-k allreduce of `bytes`
/// (float32) sending `fraction` of the values no slower than the flat one:
/// the exact allreduce inside the widest host plus each rail's allgather of
/// its shard's pairs, against every rank's pairs allgathered (the faster of
/// the flat ring and the hierarchical allgather).
bool hierarchical_topk_wins(const Context& c, double bytes, double fraction) noexcept;
/// Whether the model predicts the alltoallv through each host's rank 0 no
/// slower than the pairwise one, for pieces of `block_bytes`.
bool hierarchical_alltoallv_wins(const Context& c, const Group& g, double block_bytes) noexcept;
/// Alltoallv (bytes) across hosts, one bundle per host pair through each
/// host's rank 0 (hier_alltoallv.cc); the world group.
Result<void> hierarchical_alltoallv(Context& c, const void* sendbuf, const std::vector<uint64_t>& scounts,
                                    const std::vector<uint64_t>& sdispls, void* recvbuf,
                                    const std::vector<uint64_t>& rcounts, const std::vector<uint64_t>& rdispls,
                                    uint64_t tag);
/// Predicted seconds of the hierarchical allreduce of `bytes` (the levels' cost models).
double hierarchical_allreduce_s(const Context& c, size_t bytes) noexcept;
Result<void> rabenseifner_allreduce(Context& c, const Group& g, const CollArgs& a);
Result<void> recursive_doubling_allreduce(Context& c, const Group& g, const CollArgs& a);
Result<void> tree_allreduce(Context& c, const Group& g, const CollArgs& a);
/// One-sided reads and writes, segment r reduced by member r (direct_allreduce.cc).
Result<void> direct_allreduce(Context& c, const Group& g, const CollArgs& a);
bool direct_usable(const Context& c, const Group& g, const CollArgs& a) noexcept;
Result<void> flat_allreduce(Context& c, const Group& g, const CollArgs& a);
bool flat_usable(const Context& c, const Group& g, const CollArgs& a) noexcept;
Result<void> flat_barrier(Context& c, const Group& g, const CollArgs& a);
Result<void> tree_broadcast(Context& c, const Group& g, const CollArgs& a);
Result<void> tree_reduce(Context& c, const Group& g, const CollArgs& a);
Result<void> ring_reduce_scatter(Context& c, const Group& g, const CollArgs& a);
Result<void> ring_allgather(Context& c, const Group& g, const CollArgs& a);
Result<void> pairwise_alltoall(Context& c, const Group& g, const CollArgs& a);
Result<void> dissemination_barrier(Context& c, const Group& g, const CollArgs& a);

/// Uneven alltoall (byte counts and offsets per member, already scaled by
/// the element size). Not in the table: its arguments are its own.
Result<void> pairwise_alltoallv(Context& c, const Group& g, const void* sendbuf, const std::vector<uint64_t>& scounts,
                                const std::vector<uint64_t>& sdispls, void* recvbuf,
                                const std::vector<uint64_t>& rcounts, const std::vector<uint64_t>& rdispls,
                                uint64_t tag);
/// The copy of this member's own block; kMismatch when it sends itself
/// another byte count than it expects.
Result<void> alltoallv_own_block(const Context& c, const Group& g, const void* sendbuf,
                                 const std::vector<uint64_t>& scounts, const std::vector<uint64_t>& sdispls,
                                 void* recvbuf, const std::vector<uint64_t>& rcounts,
                                 const std::vector<uint64_t>& rdispls);

}  // namespace grex::detail
