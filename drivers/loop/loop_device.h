// SPDX-License-Identifier: Apache-2.0
// The loop driver's Device, Endpoint and MemoryRegion types, and the Pair of
// slot rings two connected endpoints share.
//
// Side d of a Pair posts into ring d; side 1-d takes from it. A slot goes
//   kEmpty -> kPosted (poster, release) -> kTaken (taker, compare-exchange)
//   -> kDone (taker, release) -> kEmpty (poster: reaped, request completed),
// or kPosted -> kCancelled when the poster's endpoint closes first. The taker
// does every copy: a send into the receive it matched, a write into its own
// region, a read from its own region into the poster's buffer. So a device
// looks up only its own registrations, and a request's bytes are touched
// only between kTaken and kDone, which a closing endpoint waits out: the
// rings' atomics are the only synchronisation between the two threads.
#pragma once

#include <grex/transport.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/counters.h"
#include "core/ring.h"
#include "transport/tag_fifo.h"

namespace grex::loop {

class LoopDevice;

enum class SlotKind : uint8_t { kSend, kWrite, kRead };

enum SlotState : uint32_t { kEmpty = 0, kPosted = 1, kTaken = 2, kDone = 3, kCancelled = 4 };

/// One request in flight from its poster to the taker.
struct Slot {
  std::atomic<uint32_t> state{kEmpty};
  // Written by the poster before kPosted.
  SlotKind kind = SlotKind::kSend;
  bool with_imm = false;
  uint32_t imm = 0;
  uint64_t seq = 0;
  uint8_t* local = nullptr;  ///< the poster's bytes: source (send, write) or destination (read)
  uint64_t length = 0;
  uint64_t tag = 0;  ///< send
  RemoteRegion remote{};  ///< write, read: the taker's region
  uint64_t remote_offset = 0;
  uint64_t context = 0;
  // Written by the taker before kDone.
  Status status = Status::kSuccess;
  uint64_t moved = 0;
};

/// What two connected endpoints share; lives until both are gone.
struct Pair {
  explicit Pair(uint32_t n) : slots(n), ring{std::make_unique<Slot[]>(n), std::make_unique<Slot[]>(n)} {}
  const uint32_t slots;
  std::unique_ptr<Slot[]> ring[2];
  std::atomic<uint32_t> closed[2] = {0, 0};  ///< side d's endpoint is gone
  std::atomic<int32_t> abort_culprit[2] = {0, 0};  ///< side d's announce_abort, + 1
  int joined = 0;  ///< sides that called connect (under the registry's lock)
};

/// A registered region: rkey is its id, owner the device's serial.
class LoopRegion final : public MemoryRegion {
 public:
  LoopRegion(LoopDevice* dev, void* addr, size_t length, MemoryDomain domain, uint32_t id, uint64_t serial);
  ~LoopRegion() override;

 private:
  LoopDevice* dev_;
  uint32_t id_;
};

class LoopEndpoint final : public Endpoint {
 public:
  LoopEndpoint(LoopDevice* dev, int peer, std::shared_ptr<Pair> pair, int side, uint64_t peer_serial,
               uint32_t queue_depth);
  /// Cancels what the peer has not taken, waits out a copy in progress, and
  /// tells the peer (which then fails its pending requests with kPeerGone).
  ~LoopEndpoint() override;

  PostResult post_send(std::span<const SendRequest> reqs) noexcept override;
  PostResult post_recv(std::span<const RecvRequest> reqs) noexcept override;
  PostResult post_write(std::span<const WriteRequest> reqs) noexcept override;
  PostResult post_read(std::span<const ReadRequest> reqs) noexcept override;
  /// The peer's allocate()d region, at its own address (one process); the
  /// memory stays mapped until this endpoint closes, even if the peer frees it.
  Result<void*> map(const RemoteRegion& remote) override;
  bool peer_failed() const noexcept override;
  void announce_abort(int culprit) noexcept override;
  int peer_abort_culprit() const noexcept override;
  std::string describe_peer() const override;

  /// Moves this endpoint's work on; called by LoopDevice::poll.
  void progress() noexcept;

 private:
  struct OutOp {
    SlotKind kind = SlotKind::kSend;
    SendRequest send;
    WriteRequest write;
    ReadRequest read;
  };

  Slot& out_slot(uint64_t seq) noexcept { return pair_->ring[side_][seq % pair_->slots]; }
  Slot& in_slot(uint64_t seq) noexcept { return pair_->ring[1 - side_][seq % pair_->slots]; }
  template <class Req>
  PostResult enqueue(std::span<const Req> reqs) noexcept;
  /// The local and remote checks every driver makes at post time.
  Status check(const OutOp& op) const noexcept;
  void place_out() noexcept;
  void reap() noexcept;
  void take_arrivals() noexcept;
  void take_write(Slot& s) noexcept;
  void take_read(Slot& s) noexcept;
  void deliver(Slot& s, const RecvRequest& r) noexcept;
  void check_peer() noexcept;
  void fail_all() noexcept;
  void complete_posted(const Slot& s, Status st) noexcept;
  void unmap_all() noexcept;

  LoopDevice* dev_;
  std::shared_ptr<Pair> pair_;
  const int side_;
  const uint64_t peer_serial_;
  bool failed_ = false;
  uint64_t post_seq_ = 0;  // next slot this side posts
  uint64_t reap_seq_ = 0;  // every slot below it is reaped
  uint64_t take_seq_ = 0;  // next slot of the peer's ring to take
  Ring<OutOp> out_;        // accepted, waiting for a free slot
  TagFifo<RecvRequest> recvs_;
  TagFifo<uint64_t> arrived_;  // the peer's sends no receive matched yet (slot seq)
  std::vector<uint64_t> mapped_;  // what map() handed out (a reference each)
};

class LoopDevice final : public Device {
 public:
  explicit LoopDevice(const DeviceOptions& opts);
  ~LoopDevice() override;
  Result<void> init();

  const Capabilities& capabilities() const noexcept override { return caps_; }
  Result<std::string> local_address() override { return address_; }
  Result<std::unique_ptr<Endpoint>> connect(int peer, std::string_view peer_address) override;
  Result<MemoryRegion*> allocate(size_t length) override;
  Result<void> free(MemoryRegion* region) override;
  size_t poll(std::span<Completion> out) noexcept override;
  std::vector<std::pair<std::string, uint64_t>> counters() const override;

  // Used by endpoints and regions (the device's own thread).
  bool cq_full() const noexcept { return cq_.full(); }
  size_t cq_room() const noexcept { return cq_.capacity() - cq_.size(); }
  /// Queues a completion; callers check cq_full() first.
  void complete(const Completion& c) noexcept { cq_.push(c); }
  /// The registration `r` names, when it is this device's and [off, off+n) lies in it.
  const LoopRegion* region_for(const RemoteRegion& r, uint64_t off, uint64_t n) const noexcept;
  uint64_t serial() const noexcept { return serial_; }
  int rank() const noexcept { return opts_.rank; }
  void remove_endpoint(LoopEndpoint* ep) noexcept;
  void forget_region(uint32_t id) noexcept { regions_.erase(id); }

  struct Stats {
    Counter bytes_sent, bytes_received, sends, writes, remote_writes, reads, peer_failures;
  };
  Stats stats;

 protected:
  Result<std::unique_ptr<MemoryRegion>> do_register(void* addr, size_t length, MemoryDomain domain) override;

 private:
  DeviceOptions opts_;
  Capabilities caps_;
  uint32_t slots_ = 256;
  uint64_t serial_ = 0;
  std::string address_;
  uint32_t next_region_id_ = 1;
  std::unordered_map<uint32_t, const LoopRegion*> regions_;
  std::unordered_map<MemoryRegion*, uint64_t> allocated_;  // allocate()d region -> start address
  std::vector<LoopEndpoint*> endpoints_;
  Ring<Completion> cq_;
};

}  // namespace grex::loop
