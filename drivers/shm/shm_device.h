// SPDX-License-Identifier: Apache-2.0
// The shm driver's Device, Endpoint and MemoryRegion types.
#pragma once

#include <grex/transport.h>

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/counters.h"
#include "drivers/shm/shm_heap.h"
#include "drivers/shm/shm_segment.h"

namespace grex::shm {

class ShmDevice;

/// A registered region. Memory from allocate() lies in a memfd peers map
/// (fd >= 0): a piece of the device's shared heap, or, where the heap is
/// full, a memfd of its own; other memory is read with CMA.
class ShmRegion final : public MemoryRegion {
 public:
  ShmRegion(ShmDevice* dev, void* addr, size_t length, MemoryDomain domain, uint32_t id, int memfd, pid_t pid);
  ~ShmRegion() override;
  uint32_t id() const noexcept { return id_; }
  int memfd() const noexcept { return memfd_; }
  /// A memfd of its own: unmapped and closed on destruction.
  void set_owned_mapping(size_t bytes) noexcept { owned_bytes_ = bytes; }
  /// A piece of the shared heap at `offset`: given back on destruction.
  void set_heap_piece(uint64_t offset) noexcept { heap_offset_ = static_cast<int64_t>(offset); }

 private:
  ShmDevice* dev_;
  uint32_t id_;
  int memfd_;
  size_t owned_bytes_ = 0;   // >0: unmap and close memfd_ on destruction
  int64_t heap_offset_ = -1;  // >=0: a heap piece (memfd_ is the heap's, not ours to close)
};

/// rkey layout for shm: low 32 bits region id, high 32 bits memfd + 1 (0: none).
inline uint64_t make_rkey(uint32_t id, int memfd) noexcept {
  return (static_cast<uint64_t>(memfd + 1) << 32) | id;
}

/// Fixed-capacity FIFO used for queues on the data path (no allocation after construction).
template <class T>
class Fifo {
 public:
  explicit Fifo(size_t cap = 0) : buf_(cap) {}
  bool empty() const noexcept { return n_ == 0; }
  bool full() const noexcept { return n_ == buf_.size(); }
  size_t size() const noexcept { return n_; }
  T& front() noexcept { return buf_[head_]; }
  T& at(size_t i) noexcept { return buf_[(head_ + i) % buf_.size()]; }
  void push(const T& v) noexcept { buf_[(head_ + n_++) % buf_.size()] = v; }
  void pop() noexcept { head_ = (head_ + 1) % buf_.size(); --n_; }
  /// Removes element i (order of the rest kept).
  void erase(size_t i) noexcept {
    for (size_t k = i; k + 1 < n_; ++k) at(k) = at(k + 1);
    --n_;
  }

 private:
  std::vector<T> buf_;
  size_t head_ = 0;
  size_t n_ = 0;
};

/// One queued outgoing operation (send or write) waiting for a free slot.
struct OutOp {
  bool is_write = false;
  SendRequest send;
  WriteRequest write;
};

/// An outstanding rendezvous send: done when the receiver frees its slot.
struct PendingRts {
  uint32_t slot;
  uint64_t seq;
  uint64_t context;
  uint64_t tag;
  uint64_t length;
};

class ShmEndpoint final : public Endpoint {
 public:
  /// `peer_heap`: the peer's shared heap as connect() mapped it (bytes 0:
  /// none); the endpoint unmaps it.
  ShmEndpoint(ShmDevice* dev, int peer, Segment seg, int dir_out, pid_t peer_pid, int pidfd, bool cma_ok,
              uint32_t queue_depth, PeerMapping peer_heap);
  ~ShmEndpoint() override;

  PostResult post_send(std::span<const SendRequest> reqs) noexcept override;
  PostResult post_recv(std::span<const RecvRequest> reqs) noexcept override;
  PostResult post_write(std::span<const WriteRequest> reqs) noexcept override;
  PostResult post_read(std::span<const ReadRequest> reqs) noexcept override;
  /// The peer's allocate()d region: inside its shared heap, which connect()
  /// mapped; otherwise (a region that did not fit the heap) its memfd, mapped
  /// here read-write until this endpoint closes, and from then on also used
  /// by the data path (an entry in the imported table).
  Result<void*> map(const RemoteRegion& remote) override;
  bool peer_failed() const noexcept override { return failed_; }
  void announce_abort(int culprit) noexcept override {
    seg_.header()->abort_culprit[dir_out_].store(culprit + 1, std::memory_order_release);
  }
  int peer_abort_culprit() const noexcept override {
    return seg_.header()->abort_culprit[dir_in_].load(std::memory_order_acquire) - 1;
  }
  std::string describe_peer() const override;

  /// Moves data and queues completions on the device. Returns work done.
  size_t progress() noexcept;
  /// Checks whether the peer process is alive (pidfd); marks failure.
  void check_peer() noexcept;
  /// Whether the peer, with its endpoint open, holds region `region` of our
  /// heap through map() (its pin table). Setup path.
  bool peer_holds(uint32_t region) const noexcept;
  /// Appends every region of our heap the peer still holds.
  void peer_pins(std::vector<uint32_t>* out) const;

 private:
  struct Posted {
    RecvRequest req;
  };

  template <class Req>
  PostResult enqueue_out(std::span<const Req> reqs) noexcept;
  size_t reap_rts() noexcept;
  size_t place_out() noexcept;
  bool place_send(const SendRequest& r) noexcept;
  bool place_write(const WriteRequest& r) noexcept;
  size_t scan_arrivals() noexcept;
  size_t match_arrivals() noexcept;
  bool deliver(SlotHeader* s, const RecvRequest& r) noexcept;
  void handle_write_imm(SlotHeader* s) noexcept;
  void release(SlotHeader* s) noexcept { s->state.store(0, std::memory_order_release); }
  void fail_all() noexcept;
  /// The peer process has exited (pidfd readable, or kill(0) says ESRCH).
  bool peer_exited() const noexcept;
  /// Enters `region` of the peer's heap in our pin table; false when full.
  bool pin(uint32_t region) noexcept;
  void cma_failed(int err) noexcept;
  Status check_one_sided(const ShmRegion* region, uint64_t offset, uint64_t length, const RemoteRegion& remote,
                         uint64_t remote_offset) const noexcept;
  /// Where the peer's bytes [addr, addr+n) of region `region` are mapped
  /// here: in its heap, or in a region map() imported; nullptr when neither
  /// holds them (then CMA copies). No system call, no allocation: a range
  /// check, then a binary search of the (usually empty) imported table.
  uint8_t* peer_bytes(uint64_t addr, uint64_t n, uint32_t region) const noexcept;
  /// Copies n bytes from the peer's address `src` in region `region`.
  /// `one_sided`: a fault is a bad remote range, not a dying peer.
  bool read_peer(void* dst, uint64_t src, uint32_t region, size_t n, bool one_sided = false) noexcept;
  /// Copies n bytes to the peer; `streaming`: with non-temporal stores when large.
  bool write_peer(const void* src, const RemoteRegion& dst, uint64_t offset, size_t n, bool streaming) noexcept;

  ShmDevice* dev_;
  Segment seg_;
  int dir_out_;
  int dir_in_;
  pid_t peer_pid_;
  int pidfd_;
  bool cma_ok_;
  bool failed_ = false;
  uint64_t send_seq_ = 0;   // next slot sequence we write
  uint64_t recv_seq_ = 0;   // next slot sequence we read
  Fifo<OutOp> out_;
  Fifo<PendingRts> rts_;
  Fifo<RecvRequest> recvs_;
  Fifo<uint32_t> arrived_;  // slot indices received but not yet matched, in arrival order
  PeerMapping peer_heap_;               // the peer's whole shared heap (bytes 0: none)
  std::vector<PeerMapping> imported_;  // map()ped regions outside the heap, by addr; unmapped with the endpoint
};

class ShmDevice final : public Device {
 public:
  explicit ShmDevice(const DeviceOptions& opts);
  ~ShmDevice() override;
  Result<void> init();

  const Capabilities& capabilities() const noexcept override { return caps_; }
  Result<std::string> local_address() override;
  Result<std::unique_ptr<Endpoint>> connect(int peer, std::string_view peer_address) override;
  Result<MemoryRegion*> allocate(size_t length) override;
  Result<void> free(MemoryRegion* region) override;
  size_t poll(std::span<Completion> out) noexcept override;
  std::vector<std::pair<std::string, uint64_t>> counters() const override;

  // Used by endpoints.
  /// Queues a completion for poll(); callers check cq_full() first.
  void complete(const Completion& c) noexcept;
  /// complete()'s path for a full queue (a driver bug): counted and logged, out of line.
  [[gnu::cold, gnu::noinline]] void lost_completion(const Completion& c) noexcept;
  bool cq_full() const noexcept { return cq_count_ == cq_cap_; }
  void add_endpoint(ShmEndpoint* ep);
  void remove_endpoint(ShmEndpoint* ep) noexcept;
  const ShmRegion* region_by_id(uint32_t id) const noexcept;
  /// A heap piece's region went away: its pages leave the heap unless a
  /// peer holds it through map(), then when no peer does any more.
  void release_heap_piece(uint32_t id, uint64_t offset, uint64_t len);
  int rank() const noexcept { return opts_.rank; }

  struct Stats {
    Counter bytes_sent, bytes_received, eager_msgs, rndv_msgs, cma_bytes, mapped_bytes, writes, remote_writes,
        peer_failures, cq_overflows;
    Counter peer_mmaps;  ///< mappings of peers' memory made (connect, map()); never by poll or post_*
  };
  Stats stats;

 protected:
  Result<std::unique_ptr<MemoryRegion>> do_register(void* addr, size_t length, MemoryDomain domain) override;

 private:
  /// Writes this device's heap into `side`'s fields of a pair segment.
  void publish_heap(SegmentHeader* h, int side) const noexcept;
  /// Maps the heap `peer_side` published (as much as the address space
  /// takes); bytes 0 when there is none or it cannot be mapped (logged).
  PeerMapping map_peer_heap(int peer, pid_t peer_pid, const SegmentHeader* h, int peer_side);
  /// allocate()'s way when the heap is off or full: a memfd of the region's own.
  Result<std::unique_ptr<ShmRegion>> allocate_memfd(size_t len);
  bool heap_piece_held(uint32_t id) const noexcept;
  /// Returns the retired pieces no peer holds any more.
  void reclaim_retired() noexcept;

  DeviceOptions opts_;
  Capabilities caps_;
  uint32_t slots_ = 128;
  uint32_t slot_bytes_ = 8192;
  bool cma_ = true;
  uint64_t heap_bytes_ = 0;  // shared heap reservation asked for
  uint32_t next_region_id_ = 1;
  std::string host_id_;
  std::vector<ShmEndpoint*> endpoints_;
  std::vector<Completion> cq_;  // ring of completions not yet returned
  size_t cq_head_ = 0;
  size_t cq_count_ = 0;
  size_t cq_cap_ = 0;  // cq_.size() (a power of two), beside the count cq_full() compares it with
  uint64_t polls_ = 0;
  uint64_t last_check_ns_ = 0;
  std::unordered_map<uint32_t, ShmRegion*> regions_;  // id -> live registration

  friend class ShmRegion;
  std::unordered_map<MemoryRegion*, size_t> allocated_;
  SharedHeap heap_;  // outlives the registrations: ~ShmDevice releases them first
  struct Retired {
    uint32_t id;
    uint64_t offset, len;
  };
  std::vector<Retired> retired_;       // freed heap pieces a peer still holds through map()
  std::vector<uint32_t> held_after_close_;  // ids peers held when our endpoint to them closed: kept to the end
  bool closing_ = false;  // in ~ShmDevice: pieces are dropped with the heap, not returned one by one
  volatile uint64_t probe_word_ = 0;

  friend class ShmEndpoint;
};

}  // namespace grex::shm
