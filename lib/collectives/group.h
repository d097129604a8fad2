// SPDX-License-Identifier: Apache-2.0
// A group view: the ordered ranks one algorithm runs over, with the engine
// that reaches their endpoints. Algorithms speak in member indexes (0 ..
// size()-1, this rank is rank()); the view turns them into the
// communicator's ranks when it posts. The whole communicator is one group;
// the ranks of one host, or one rank per host, are others, so a
// communicator that spans hosts composes ring or halving-doubling over
// sub-groups without a second copy of any algorithm.
#pragma once

#include <grex/result.h>
#include <grex/transport.h>

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "collectives/engine.h"

namespace grex::detail {

class Group {
 public:
  /// Every rank of a communicator of `size`, in rank order.
  static Group world(Engine& engine, int rank, int size) {
    std::vector<int> all(static_cast<size_t>(size));
    for (int r = 0; r < size; ++r) all[static_cast<size_t>(r)] = r;
    return Group(engine, std::move(all), rank);
  }
  /// `members` (communicator ranks, in the order the algorithms see them);
  /// `me` is this rank's index among them.
  Group(Engine& engine, std::vector<int> members, int me) noexcept
      : engine_(&engine), members_(std::move(members)), me_(me) {}

  int size() const noexcept { return static_cast<int>(members_.size()); }
  /// This rank's index in the group.
  int rank() const noexcept { return me_; }
  /// The communicator rank of member `i` (what errors name).
  int global(int i) const noexcept { return members_[static_cast<size_t>(i)]; }
  std::span<const int> members() const noexcept { return members_; }
  Engine& engine() const noexcept { return *engine_; }

  /// The members at `indexes` of this group, in that order (this rank must
  /// be one of them): a sub-group for one phase of a composed collective.
  Group sub(std::span<const int> indexes) const {
    std::vector<int> m;
    m.reserve(indexes.size());
    int me = -1;
    for (int i : indexes) {
      if (i == me_) me = static_cast<int>(m.size());
      m.push_back(global(i));
    }
    return Group(*engine_, std::move(m), me);
  }

  // The engine's posts, by member index.
  Result<OpId> send(int i, const MemoryRegion* mr, uint64_t off, uint64_t len, uint64_t tag) const {
    return engine_->send(global(i), mr, off, len, tag);
  }
  Result<OpId> recv(int i, const MemoryRegion* mr, uint64_t off, uint64_t len, uint64_t tag) const {
    return engine_->recv(global(i), mr, off, len, tag);
  }
  Result<OpId> read(int i, const MemoryRegion* mr, uint64_t off, uint64_t len, const RemoteRegion& remote,
                    uint64_t remote_off) const {
    return engine_->read(global(i), mr, off, len, remote, remote_off);
  }
  Result<OpId> write(int i, const MemoryRegion* mr, uint64_t off, uint64_t len, const RemoteRegion& remote,
                     uint64_t remote_off, bool cold = false) const {
    return engine_->write(global(i), mr, off, len, remote, remote_off, cold);
  }
  Result<void> send_batch(int i, std::span<SendRequest> reqs, OpId* ids) const {
    return engine_->send_batch(global(i), reqs, ids);
  }
  Result<void> recv_batch(int i, std::span<RecvRequest> reqs, OpId* ids) const {
    return engine_->recv_batch(global(i), reqs, ids);
  }
  Result<void> check_peer(int i) const { return engine_->check_peer(global(i)); }
  /// Maps member i's region into this process (setup only: Endpoint::map).
  Result<void*> map(int i, const RemoteRegion& remote) const { return engine_->endpoint(global(i))->map(remote); }

 private:
  Engine* engine_;
  std::vector<int> members_;
  int me_;
};

}  // namespace grex::detail
