// SPDX-License-Identifier: Apache-2.0
// shm fast path: posting, slot rings, tag matching, single-copy transfers, completions.
//
// Each direction of a pair is a ring of fixed slots. The sender fills slots
// in sequence; a slot is reused only after the receiver cleared it. Messages
// up to a slot's payload travel inline (eager). Larger ones send a
// rendezvous slot (RTS) naming the source; the matched receiver copies the
// bytes once, straight into the posted buffer (through its mapping of the
// sender's shared heap when the source came from allocate(), else with
// process_vm_readv), then clears the slot, which completes the send.
//
// Nothing here maps memory, opens files or allocates: peers' heaps were
// mapped by connect() and map() (shm_heap.h says why). The system calls left
// are process_vm_readv/writev for memory outside the heaps (registered user
// buffers: one call per copy, the single-copy path) and, at most every 5 ms
// inside poll(), a pidfd poll() or kill(0) asking whether peers still live.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <type_traits>

#include "core/clock.h"
#include "core/copy.h"
#include "core/log.h"
#include "drivers/shm/shm_device.h"
#include "drivers/shm/shm_slot.h"

namespace grex::shm {
namespace {
constexpr uint64_t kPeerCheckIntervalNs = 5'000'000;  // how often poll() looks for dead peers
}  // namespace

ShmEndpoint::ShmEndpoint(ShmDevice* dev, int peer, Segment seg, int dir_out, pid_t peer_pid, int pidfd, bool cma_ok,
                         uint32_t queue_depth, PeerMapping peer_heap)
    : Endpoint(peer),
      dev_(dev),
      seg_(std::move(seg)),
      dir_out_(dir_out),
      dir_in_(1 - dir_out),
      peer_pid_(peer_pid),
      pidfd_(pidfd),
      cma_ok_(cma_ok),
      out_(queue_depth),
      rts_(seg_.slots()),
      recvs_(queue_depth),
      arrived_(seg_.slots()),
      peer_heap_(peer_heap) {}

ShmEndpoint::~ShmEndpoint() {
  seg_.header()->closed[dir_out_].store(1, std::memory_order_release);
  dev_->remove_endpoint(this);
  if (peer_heap_.base != nullptr) ::munmap(peer_heap_.base, peer_heap_.bytes);
  for (const PeerMapping& m : imported_) ::munmap(m.base, m.bytes);
  if (pidfd_ >= 0) ::close(pidfd_);
}

std::string ShmEndpoint::describe_peer() const {
  return "rank " + std::to_string(peer_) + " (pid " + std::to_string(peer_pid_) + ")";
}

// ---------------------------------------------------------------- posting

template <class Req>
PostResult ShmEndpoint::enqueue_out(std::span<const Req> reqs) noexcept {
  if (failed_) return {0, Errc::kPeerFailed};
  size_t n = 0;
  for (const auto& r : reqs) {
    if (out_.full()) break;
    OutOp op;
    if constexpr (std::is_same_v<Req, WriteRequest>) {
      op.is_write = true;
      op.write = r;
    } else {
      op.send = r;
    }
    out_.push(op);
    ++n;
  }
  place_out();
  return {n, Errc::kOk};
}

PostResult ShmEndpoint::post_send(std::span<const SendRequest> reqs) noexcept { return enqueue_out(reqs); }
PostResult ShmEndpoint::post_write(std::span<const WriteRequest> reqs) noexcept { return enqueue_out(reqs); }

// The ranges of a one-sided read or write: the local one inside its region
// (kLocalError), the remote one inside what this peer advertised (kRemoteAccess).
Status ShmEndpoint::check_one_sided(const ShmRegion* region, uint64_t offset, uint64_t length,
                                    const RemoteRegion& remote, uint64_t remote_offset) const noexcept {
  if (region == nullptr || !region->holds(offset, length)) return Status::kLocalError;
  if (remote.owner != static_cast<uint64_t>(peer_pid_) || remote_offset > remote.length ||
      length > remote.length - remote_offset)
    return Status::kRemoteAccess;
  return Status::kSuccess;
}

// A read is a copy by this process (through the peer's memfd mapping, else
// process_vm_readv), done at once; the completion reports it on the next poll.
PostResult ShmEndpoint::post_read(std::span<const ReadRequest> reqs) noexcept {
  if (failed_) return {0, Errc::kPeerFailed};
  size_t n = 0;
  for (const auto& r : reqs) {
    if (dev_->cq_full()) break;  // poll first
    ++n;
    const auto* region = static_cast<const ShmRegion*>(r.region);
    Status st = check_one_sided(region, r.offset, r.length, r.remote, r.remote_offset);
    if (st == Status::kSuccess && r.length > 0 &&
        !read_peer(static_cast<uint8_t*>(region->addr()) + r.offset, r.remote.addr + r.remote_offset,
                   static_cast<uint32_t>(r.remote.rkey), r.length, true)) {
      st = failed_ ? Status::kPeerGone : Status::kRemoteAccess;
    }
    if (st == Status::kSuccess) dev_->stats.bytes_received.add(r.length);
    dev_->complete({r.context, st == Status::kSuccess ? r.length : 0, 0, peer_, 0, Op::kRead, st});
  }
  return {n, Errc::kOk};
}

PostResult ShmEndpoint::post_recv(std::span<const RecvRequest> reqs) noexcept {
  size_t n = 0;
  for (const auto& r : reqs) {
    // A receive outside its region fails at once and takes no message (as in
    // every driver); its completion needs room in the queue.
    if (!request_in_bounds(r.region, r.offset, r.length)) {
      if (dev_->cq_full()) break;
      dev_->complete({r.context, 0, r.tag, peer_, 0, Op::kRecv, Status::kLocalError});
      ++n;
      continue;
    }
    if (recvs_.full()) break;
    recvs_.push(r);
    ++n;
  }
  return {n, Errc::kOk};
}

// ---------------------------------------------------------------- sending

size_t ShmEndpoint::reap_rts() noexcept {
  // A rendezvous send is done when the receiver cleared its slot; receivers
  // may finish them out of order (different tags), so look at every one.
  size_t done = 0;
  for (size_t i = 0; i < rts_.size();) {
    PendingRts& p = rts_.at(i);
    if (seg_.slot(dir_out_, p.slot)->state.load(std::memory_order_acquire) != 0) {
      ++i;
      continue;
    }
    if (dev_->cq_full()) break;  // reaped on a later poll
    dev_->complete({p.context, p.length, p.tag, peer_, 0, Op::kSend, Status::kSuccess});
    dev_->stats.bytes_sent.add(p.length);
    rts_.erase(i);
    ++done;
  }
  return done;
}

size_t ShmEndpoint::place_out() noexcept {
  // Reap first: a slot we are about to reuse may still have a finished,
  // unreported rendezvous send.
  size_t placed = rts_.empty() ? 0 : reap_rts();
  // Placing may complete the request at once (eager send, write): only with
  // room in the completion queue; the rest waits in out_ for a poll.
  while (!out_.empty() && !dev_->cq_full()) {
    OutOp& op = out_.front();
    if (!(op.is_write ? place_write(op.write) : place_send(op.send))) break;
    out_.pop();
    ++placed;
  }
  return placed;
}

bool ShmEndpoint::place_send(const SendRequest& r) noexcept {
  uint32_t idx = static_cast<uint32_t>(send_seq_ % seg_.slots());
  SlotHeader* s = seg_.slot(dir_out_, idx);
  if (s->state.load(std::memory_order_acquire) != 0) return false;
  if (rts_.full()) return false;
  const auto* region = static_cast<const ShmRegion*>(r.region);
  if (!request_in_bounds(region, r.offset, r.length)) {
    dev_->complete({r.context, 0, r.tag, peer_, 0, Op::kSend, Status::kLocalError});
    return true;
  }
  const uint8_t* src = r.length > 0 ? static_cast<const uint8_t*>(region->addr()) + r.offset : nullptr;
  s->seq = send_seq_;
  s->tag = r.tag;
  s->length = r.length;
  if (r.length <= seg_.max_inline()) {
    s->type = SlotType::kEager;
    s->inline_bytes = static_cast<uint32_t>(r.length);
    if (r.length > 0) std::memcpy(eager_payload(s), src, r.length);
    s->state.store(1, std::memory_order_release);
    dev_->complete({r.context, r.length, r.tag, peer_, 0, Op::kSend, Status::kSuccess});
    dev_->stats.bytes_sent.add(r.length);
    dev_->stats.eager_msgs.add();
  } else {
    s->type = SlotType::kRts;
    s->inline_bytes = 0;
    s->addr = reinterpret_cast<uint64_t>(src);
    s->region = region->id();
    s->aux = r.offset;
    s->imm = static_cast<uint32_t>(region->memfd() + 1);
    s->state.store(1, std::memory_order_release);
    rts_.push({idx, send_seq_, r.context, r.tag, r.length});
    dev_->stats.rndv_msgs.add();
  }
  ++send_seq_;
  return true;
}

bool ShmEndpoint::place_write(const WriteRequest& r) noexcept {
  uint32_t idx = static_cast<uint32_t>(send_seq_ % seg_.slots());
  SlotHeader* s = seg_.slot(dir_out_, idx);
  if (r.with_imm && s->state.load(std::memory_order_acquire) != 0) return false;
  const auto* region = static_cast<const ShmRegion*>(r.region);
  Status st = check_one_sided(region, r.offset, r.length, r.remote, r.remote_offset);
  if (st == Status::kSuccess && !write_peer(static_cast<const uint8_t*>(region->addr()) + r.offset, r.remote,
                                            r.remote_offset, r.length, r.cold_destination)) {
    st = failed_ ? Status::kPeerGone : Status::kRemoteAccess;
  }
  if (st == Status::kSuccess && r.with_imm) {
    s->seq = send_seq_;
    s->type = SlotType::kWriteImm;
    s->tag = r.remote_offset;
    s->length = r.length;
    s->region = r.remote.rkey & 0xffff'ffffull;
    s->imm = r.imm;
    s->inline_bytes = 0;
    s->state.store(1, std::memory_order_release);
    ++send_seq_;
  }
  if (st == Status::kSuccess) {
    dev_->stats.writes.add();
    dev_->stats.bytes_sent.add(r.length);
  }
  dev_->complete({r.context, st == Status::kSuccess ? r.length : 0, 0, peer_, r.imm, Op::kWrite, st});
  return true;
}

// ---------------------------------------------------------------- receiving

size_t ShmEndpoint::scan_arrivals() noexcept {
  size_t n = 0;
  while (!arrived_.full()) {
    uint32_t idx = static_cast<uint32_t>(recv_seq_ % seg_.slots());
    SlotHeader* s = seg_.slot(dir_in_, idx);
    const SlotVerdict v = read_head(s, recv_seq_);
    if (v == SlotVerdict::kEmpty) break;
    if (v == SlotVerdict::kOutOfSequence || v == SlotVerdict::kUnknownType) {
      GREX_ERROR("shm", "ring from rank %d is corrupt: slot %u holds %s (expected message %llu)", peer_, idx,
                 v == SlotVerdict::kUnknownType ? "a message of no known type" : "another sequence number",
                 static_cast<unsigned long long>(recv_seq_));
      failed_ = true;
      return n;
    }
    if (v == SlotVerdict::kWriteImm && dev_->cq_full()) break;  // its completion needs room: next poll
    ++recv_seq_;
    ++n;
    if (v == SlotVerdict::kWriteImm) {
      handle_write_imm(s);
      continue;
    }
    arrived_.push(idx);
  }
  return n;
}

void ShmEndpoint::handle_write_imm(SlotHeader* s) noexcept {
  const uint64_t offset = read_once(s->tag), len = read_once(s->length);
  const ShmRegion* r = dev_->region_by_id(static_cast<uint32_t>(read_once(s->region)));
  const Status st = r != nullptr && within(offset, len, r->length()) ? Status::kSuccess : Status::kRemoteAccess;
  Completion c{0, len, offset, peer_, read_once(s->imm), Op::kRemoteWrite, st};
  release(s);
  dev_->stats.remote_writes.add();
  dev_->complete(c);
}

size_t ShmEndpoint::match_arrivals() noexcept {
  size_t done = 0;
  // Walk arrived messages oldest first; each takes the oldest posted receive
  // with its tag. Unmatched ones stay (and hold their slot) until one is posted.
  for (size_t i = 0; i < arrived_.size() && !dev_->cq_full();) {  // a delivery completes a receive
    SlotHeader* s = seg_.slot(dir_in_, arrived_.at(i));
    size_t k = 0;
    while (k < recvs_.size() && recvs_.at(k).tag != s->tag) ++k;
    if (k == recvs_.size()) {
      ++i;
      continue;
    }
    RecvRequest r = recvs_.at(k);
    recvs_.erase(k);
    arrived_.erase(i);
    deliver(s, r);
    ++done;
  }
  return done;
}

bool ShmEndpoint::deliver(SlotHeader* s, const RecvRequest& r) noexcept {
  const auto* region = r.region;
  const uint64_t s_len = read_once(s->length);  // once: the peer may change it
  const bool eager = read_once(s->type) == SlotType::kEager;
  uint64_t len = s_len;
  Status st = Status::kSuccess;
  if (!request_in_bounds(region, r.offset, r.length)) {
    st = Status::kLocalError;
    len = 0;
  } else if (len > r.length) {
    st = Status::kTruncated;
    len = r.length;
  }
  uint8_t* dst = region != nullptr && len > 0 ? static_cast<uint8_t*>(region->addr()) + r.offset : nullptr;
  // The length read once above decides where the bytes are (the header's
  // inline words or the slot's payload), whatever the peer writes now.
  const uint8_t* eager_src = eager ? eager_source(s, s_len, seg_.max_inline()) : nullptr;
  if (eager && eager_src == nullptr) {
    // The peer wrote more than a slot holds: its side of the ring is corrupt.
    GREX_ERROR("shm", "rank %d put a %llu-byte eager message in a %zu-byte slot: its ring is corrupt", peer_,
               static_cast<unsigned long long>(s_len), seg_.max_inline());
    failed_ = true;
    st = Status::kPeerGone;
    len = 0;
  }
  if (len > 0) {
    if (eager) {
      std::memcpy(dst, eager_src, len);
    } else if (!read_peer(dst, read_once(s->addr), static_cast<uint32_t>(read_once(s->region)), len)) {
      st = failed_ ? Status::kPeerGone : Status::kLocalError;
      len = 0;
    }
  }
  release(s);
  dev_->stats.bytes_received.add(len);
  // The receive's tag, which the slot's matched: the peer may have rewritten the slot's since.
  dev_->complete({r.context, len, r.tag, peer_, 0, Op::kRecv, st});
  return st == Status::kSuccess;
}

// ---------------------------------------------------------------- copies

uint8_t* ShmEndpoint::peer_bytes(uint64_t addr, uint64_t n, uint32_t region) const noexcept {
  if (uint8_t* p = in_mapping(peer_heap_, addr, n)) return p;
  if (imported_.empty()) return nullptr;
  auto it = std::upper_bound(imported_.begin(), imported_.end(), addr,
                             [](uint64_t a, const PeerMapping& m) { return a < m.addr; });
  if (it == imported_.begin()) return nullptr;
  --it;
  // The region id too: the peer may have freed that region and put another at its address.
  return it->region == region ? in_mapping(*it, addr, n) : nullptr;
}

Result<void*> ShmEndpoint::map(const RemoteRegion& remote) {
  const uint32_t fd_plus1 = static_cast<uint32_t>(remote.rkey >> 32);
  const auto region = static_cast<uint32_t>(remote.rkey);
  if (remote.owner != static_cast<uint64_t>(peer_pid_) || fd_plus1 == 0 || remote.length == 0)
    return Error(Errc::kInvalidArgument, "map: not a region " + describe_peer() + " got from allocate()").device("shm");
  const int fd = static_cast<int>(fd_plus1) - 1;
  uint8_t* p = peer_bytes(remote.addr, remote.length, region);
  if (p == nullptr) {
    // A region of its own memfd (the peer's heap was full), or a piece of the
    // heap beyond what the address space let connect() map (pieces are page
    // aligned, so the offset is one mmap takes).
    const uint64_t offset = fd == peer_heap_.fd ? remote.addr - peer_heap_.addr : 0;
    uint64_t len = remote.length;
    p = map_peer_fd(peer_pid_, fd, offset, &len, false);
    if (p == nullptr)
      return Error::from_errno("map: " + describe_peer() + "'s region (/proc/<pid>/fd)", errno).device("shm");
    dev_->stats.peer_mmaps.add();
    const PeerMapping m{remote.addr, len, p, region, fd};
    imported_.insert(std::upper_bound(imported_.begin(), imported_.end(), m.addr,
                                      [](uint64_t a, const PeerMapping& x) { return a < x.addr; }),
                     m);
  }
  // A piece of the peer's heap is the peer's to reuse once it frees it;
  // pinned, the peer keeps it until this endpoint closes, as map() promises.
  if (fd == peer_heap_.fd && !pin(region))
    return Error(Errc::kNoMemory, "map: " + describe_peer() + " has " + std::to_string(kMaxPins) +
                                      " regions mapped here already, the most one endpoint pins")
        .device("shm");
  return static_cast<void*>(p);
}

bool ShmEndpoint::pin(uint32_t region) noexcept {
  PinTable* t = seg_.pins(dir_out_);
  for (auto& e : t->region)
    if (e.load(std::memory_order_relaxed) == region) return true;
  for (auto& e : t->region)
    if (e.load(std::memory_order_relaxed) == 0) {
      e.store(region, std::memory_order_release);
      return true;
    }
  return false;
}

bool ShmEndpoint::peer_holds(uint32_t region) const noexcept {
  const auto& pins = seg_.pins(dir_in_)->region;
  if (std::none_of(std::begin(pins), std::end(pins),
                   [&](const auto& e) { return e.load(std::memory_order_acquire) == region; }))
    return false;
  // Its mappings went with its endpoint or its process.
  return seg_.header()->closed[dir_in_].load(std::memory_order_acquire) == 0 && !peer_exited();
}

void ShmEndpoint::peer_pins(std::vector<uint32_t>* out) const {
  if (seg_.header()->closed[dir_in_].load(std::memory_order_acquire) != 0 || peer_exited()) return;
  for (const auto& e : seg_.pins(dir_in_)->region)
    if (uint32_t id = e.load(std::memory_order_acquire); id != 0) out->push_back(id);
}

namespace {
// Copies n bytes between our `local` and `remote` in process `pid` (a write
// when `to_remote`), through as many process_vm_readv/writev calls as it
// takes. 0, or the errno of the first that failed (EIO: it moved nothing).
int cma_copy(pid_t pid, void* local, void* remote, size_t n, bool to_remote) noexcept {
  iovec l{local, n};
  iovec r{remote, n};
  for (size_t done = 0; done < n;) {
    const ssize_t k = to_remote ? ::process_vm_writev(pid, &l, 1, &r, 1, 0) : ::process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (k <= 0) return k < 0 ? errno : EIO;
    done += static_cast<size_t>(k);
    l.iov_base = static_cast<uint8_t*>(l.iov_base) + k;
    l.iov_len -= static_cast<size_t>(k);
    r.iov_base = static_cast<uint8_t*>(r.iov_base) + k;
    r.iov_len -= static_cast<size_t>(k);
  }
  return 0;
}
}  // namespace

bool ShmEndpoint::read_peer(void* dst, uint64_t src, uint32_t region, size_t n, bool one_sided) noexcept {
  if (const uint8_t* p = peer_bytes(src, n, region)) {
    std::memcpy(dst, p, n);
    dev_->stats.mapped_bytes.add(n);
    return true;
  }
  if (!cma_ok_) return false;
  if (int err = cma_copy(peer_pid_, dst, reinterpret_cast<void*>(src), n, false); err != 0) {
    // One-sided: a fault means a bad remote range (kRemoteAccess), as for
    // writes. Rendezvous: the sender keeps its buffer until we finish, so
    // a fault means it is exiting.
    if (!one_sided || err == ESRCH) cma_failed(err);
    return false;
  }
  dev_->stats.cma_bytes.add(n);
  return true;
}

bool ShmEndpoint::write_peer(const void* src, const RemoteRegion& dst, uint64_t offset, size_t n,
                             bool streaming) noexcept {
  if (n == 0) return true;
  if (uint8_t* p = peer_bytes(dst.addr + offset, n, static_cast<uint32_t>(dst.rkey))) {
    // Cold destination: stream the bytes past the caches.
    if (streaming && n >= detail::kStreamingCopyMinBytes)
      detail::copy_streaming(p, src, n);
    else
      std::memcpy(p, src, n);
    dev_->stats.mapped_bytes.add(n);
    return true;
  }
  if (!cma_ok_) return false;
  if (int err = cma_copy(peer_pid_, const_cast<void*>(src), reinterpret_cast<void*>(dst.addr + offset), n, true);
      err != 0) {
    // A fault here means the target range is not (or no longer) mapped: the
    // request fails with kRemoteAccess; only a vanished process fails the peer.
    if (err == ESRCH) cma_failed(err);
    return false;
  }
  dev_->stats.cma_bytes.add(n);
  return true;
}

void ShmEndpoint::cma_failed(int err) noexcept {
  // The peer advertised this memory and keeps it until we finish, so a fault
  // means it is exiting (its address space is being torn down) or gone.
  if (err == ESRCH || err == EFAULT) {
    if (!failed_) dev_->stats.peer_failures.add();
    failed_ = true;
    GREX_WARN("shm", "copy from rank %d failed (%s): treating the peer as gone", peer_, strerror(err));
  } else {
    GREX_ERROR("shm", "copy with rank %d failed: %s", peer_, strerror(err));
  }
}

// ---------------------------------------------------------------- progress

bool ShmEndpoint::peer_exited() const noexcept {
  if (pidfd_ >= 0) {
    pollfd p{pidfd_, POLLIN, 0};
    return ::poll(&p, 1, 0) > 0;  // readable once the process has exited (zombies included)
  }
  return ::kill(peer_pid_, 0) != 0 && errno == ESRCH;
}

void ShmEndpoint::check_peer() noexcept {
  if (failed_) return;
  if (peer_exited()) {
    failed_ = true;
    if (seg_.header()->closed[dir_in_].load(std::memory_order_acquire) != 0) {
      GREX_DEBUG("shm", "rank %d (pid %d) closed its connection and exited", peer_, static_cast<int>(peer_pid_));
    } else {
      dev_->stats.peer_failures.add();
      GREX_WARN("shm", "rank %d (pid %d) exited without closing its connection", peer_, static_cast<int>(peer_pid_));
    }
  }
}

void ShmEndpoint::fail_all() noexcept {
  // Messages already in our ring can still be delivered; everything that
  // needs the peer again fails now, as far as the completion queue has room
  // (progress() calls again after the next poll).
  while (!out_.empty() && !dev_->cq_full()) {
    OutOp& op = out_.front();
    if (op.is_write)
      dev_->complete({op.write.context, 0, 0, peer_, op.write.imm, Op::kWrite, Status::kPeerGone});
    else
      dev_->complete({op.send.context, 0, op.send.tag, peer_, 0, Op::kSend, Status::kPeerGone});
    out_.pop();
  }
  while (!rts_.empty() && !dev_->cq_full()) {
    dev_->complete({rts_.front().context, 0, rts_.front().tag, peer_, 0, Op::kSend, Status::kPeerGone});
    rts_.pop();
  }
  while (!recvs_.empty() && !dev_->cq_full()) {
    dev_->complete({recvs_.front().context, 0, recvs_.front().tag, peer_, 0, Op::kRecv, Status::kPeerGone});
    recvs_.pop();
  }
}

size_t ShmEndpoint::progress() noexcept {
  size_t work = place_out();
  work += scan_arrivals();
  if (!arrived_.empty() && !recvs_.empty()) work += match_arrivals();
  if (failed_) fail_all();
  return work;
}

void ShmDevice::complete(const Completion& c) noexcept {
  // Every caller checked cq_full() first and left the work that would
  // complete for a later poll (back-pressure), so a completion is never
  // dropped: a caller that posts without polling sees its posts refused
  // (queue full) instead. Reaching this is a driver bug; it is counted
  // (counter "cq_overflows") and logged, never silent.
  if (cq_full()) [[unlikely]] {
    lost_completion(c);
    return;
  }
  cq_[(cq_head_ + cq_count_) & (cq_cap_ - 1)] = c;  // size: a power of two
  ++cq_count_;
}

void ShmDevice::lost_completion(const Completion& c) noexcept {
  stats.cq_overflows.add();
  GREX_ERROR("shm", "rank %d: completion queue overflow (driver bug); completion for context %llu lost", opts_.rank,
             static_cast<unsigned long long>(c.context));
}

size_t ShmDevice::poll(std::span<Completion> out) noexcept {
  if (++polls_ % 64 == 0) {
    uint64_t t = now_ns();
    if (t - last_check_ns_ > kPeerCheckIntervalNs) {
      last_check_ns_ = t;
      for (ShmEndpoint* ep : endpoints_) ep->check_peer();
    }
  }
  if (cq_count_ < out.size())
    for (ShmEndpoint* ep : endpoints_) ep->progress();
  size_t n = 0;
  while (n < out.size() && cq_count_ > 0) {
    out[n++] = cq_[cq_head_];
    cq_head_ = (cq_head_ + 1) & (cq_cap_ - 1);
    --cq_count_;
  }
  if (cq_count_ == 0) cq_head_ = 0;  // reuse the ring's first (cached) lines
  return n;
}

}  // namespace grex::shm
