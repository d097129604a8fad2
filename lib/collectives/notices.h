// SPDX-License-Identifier: Apache-2.0
// Point-to-point notices (CommOptions::any_source): each send tells its
// receiver first, in a 16-byte message of its own, which tag and size follow.
// grex's network drivers are receiver-driven (a send waits for the receiver's
// advert), so without a word from the sender a receiver cannot know who has
// something for it; with one, recv_any and iprobe can choose.
//
// Each rank keeps kDepth receives posted per peer for the notices (engine
// background receives: they wait across calls and never hold a timeout).
// Notices from one peer land in the order it sent them, so per peer and tag
// the n-th notice describes the n-th message. A receive that names its
// source takes the matching notice if it has landed, or owes it one (the
// notice, when it lands, is dropped); recv_any takes the oldest landed notice
// with its tag and then receives that message by name.
#pragma once

#include <grex/result.h>
#include <grex/transport.h>

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "collectives/engine.h"

namespace grex::detail {

class Notices {
 public:
  /// The engine tag of notices: below the collectives' (bit 63) and the
  /// calibration's (bit 62), above every user tag (32 bits).
  static constexpr uint64_t kTag = 1ull << 61;
  static constexpr size_t kDepth = 4;  // receives kept posted per peer
  static constexpr size_t kBytes = 16;

  Notices() = default;
  Notices(const Notices&) = delete;
  Notices& operator=(const Notices&) = delete;
  ~Notices();

  /// Allocates the notices' memory and posts every peer's receives.
  Result<void> start(Device& dev, Engine& eng, int rank, int size);
  /// Posts the notice of a message of `bytes` with `tag` to `dst`; the
  /// caller waits for the returned request with the message's own.
  Result<OpId> post(Engine& eng, int dst, uint32_t tag, uint64_t bytes);
  /// Reads the notices that landed (oldest first per peer) and posts their
  /// receives again. Cheap when nothing landed.
  Result<void> service(Engine& eng);
  /// A receive from `src` with `tag` is taking the next such message: takes
  /// its notice, or owes it.
  void consume(int src, uint32_t tag);
  /// The oldest landed notice with `tag` not yet taken, from `src` or (src <
  /// 0) any rank: its sender and size.
  std::optional<std::pair<int, uint64_t>> peek(uint32_t tag, int src) const;
  /// Ranks whose notice receives failed (the peer is gone): with none landed
  /// from them, recv_any cannot know what they would have sent.
  bool peer_failed(int peer) const noexcept { return peers_[static_cast<size_t>(peer)].failed; }

 private:
  struct Landed {
    uint64_t order;  // arrival order across peers: recv_any takes the oldest
    uint32_t tag;
    uint64_t bytes;
  };
  struct Peer {
    std::array<OpId, kDepth> posted{};  // ids of the posted receives, oldest first from `head`
    size_t head = 0;
    bool failed = false;
    std::deque<Landed> landed;
    std::map<uint32_t, uint64_t> owed;  // tag -> notices to drop when they land
  };
  uint8_t* slot(int peer, size_t k) const noexcept;
  Result<void> repost(Engine& eng, int peer, size_t k);

  Device* dev_ = nullptr;
  MemoryRegion* mr_ = nullptr;  // [send slot][peer 0's kDepth slots][peer 1's]...
  int rank_ = 0;
  uint64_t order_ = 0;
  std::vector<Peer> peers_;
};

}  // namespace grex::detail
