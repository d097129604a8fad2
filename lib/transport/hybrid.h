// SPDX-License-Identifier: Apache-2.0
// A Device made of several ("parts"), for a communicator whose pairs of ranks
// use different drivers: shm between the ranks of one host, a network driver
// between hosts (issue 27). Each peer's endpoint comes from the part its
// route names; each part keeps its own progress (poll() polls them all).
//
// A region of this device is one registration in every part (HybridRegion):
// requests posted on a hybrid endpoint name it, and the endpoint hands the
// part's own region to the part's endpoint. remote() is part 0's (the
// intra-host part): one-sided operations and map() work on part 0's
// endpoints only, and capabilities() promises none of them, so algorithms
// that need them run on groups of part 0's peers with part 0's capabilities.
#pragma once

#include <grex/transport.h>

#include <array>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace grex::detail {

class HybridDevice final : public Device {
 public:
  static constexpr size_t kMaxParts = 2;

  /// `parts` (1..kMaxParts, opened for the same rank and world size);
  /// route[p]: the index of the part that connects rank p (any value for
  /// this rank itself).
  static Result<std::unique_ptr<HybridDevice>> create(std::vector<std::unique_ptr<Device>> parts,
                                                      std::vector<int> route, int rank);
  ~HybridDevice() override;

  const Capabilities& capabilities() const noexcept override { return caps_; }
  /// "hybrid:" then each part's address as "<length>:<address>".
  Result<std::string> local_address() override;
  Result<std::unique_ptr<Endpoint>> connect(int peer, std::string_view peer_address) override;
  /// Part 0's allocate() (shm: memory its peers map), registered in the other parts.
  Result<MemoryRegion*> allocate(size_t length) override;
  Result<void> free(MemoryRegion* region) override;
  size_t poll(std::span<Completion> out) noexcept override;
  /// The parts' counters; those not per peer ("peer.<rank>.") carry the part's driver name first.
  std::vector<std::pair<std::string, uint64_t>> counters() const override;

  size_t part_count() const noexcept { return parts_.size(); }
  Device& part(size_t i) const noexcept { return *parts_[i]; }
  /// The part that connects rank `peer`.
  int route(int peer) const noexcept { return route_[static_cast<size_t>(peer)]; }

 protected:
  Result<std::unique_ptr<MemoryRegion>> do_register(void* addr, size_t length, MemoryDomain domain) override;

 private:
  HybridDevice(std::vector<std::unique_ptr<Device>> parts, std::vector<int> route, int rank);

  std::vector<std::unique_ptr<Device>> parts_;
  std::vector<int> route_;
  int rank_;
  Capabilities caps_;
  std::set<const MemoryRegion*> allocated_;  // from allocate(), until free()
  size_t next_part_ = 0;                     // poll() starts here, in turn
};

}  // namespace grex::detail
