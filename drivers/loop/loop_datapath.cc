// SPDX-License-Identifier: Apache-2.0
// loop fast path: posting into slots, taking the peer's slots (every copy
// happens here, on the taker's thread), tag matching, completions, failure.
// The slot protocol is described in loop_device.h.
#include <cstring>
#include <thread>
#include <type_traits>

#include "core/log.h"
#include "drivers/loop/loop_device.h"

namespace grex::loop {

LoopEndpoint::LoopEndpoint(LoopDevice* dev, int peer, std::shared_ptr<Pair> pair, int side, uint64_t peer_serial,
                           uint32_t queue_depth)
    : Endpoint(peer),
      dev_(dev),
      pair_(std::move(pair)),
      side_(side),
      peer_serial_(peer_serial),
      out_(queue_depth),
      recvs_(queue_depth),
      arrived_(pair_->slots) {}

LoopEndpoint::~LoopEndpoint() {
  pair_->closed[side_].store(1, std::memory_order_release);
  // What the peer has not taken it never will; a copy it is making now ends
  // before the buffers it reads or writes may go.
  for (uint64_t seq = reap_seq_; seq < post_seq_; ++seq) {
    Slot& s = out_slot(seq);
    uint32_t expect = kPosted;
    if (s.state.compare_exchange_strong(expect, kCancelled, std::memory_order_acq_rel)) continue;
    while (s.state.load(std::memory_order_acquire) == kTaken) std::this_thread::yield();
  }
  unmap_all();
  dev_->remove_endpoint(this);
}

std::string LoopEndpoint::describe_peer() const {
  return "rank " + std::to_string(peer_) + " (loop device " + std::to_string(peer_serial_) + ")";
}

// Known at a poll (or post), which first completes what the peer finished
// before it closed: a peer that closed after taking our last send is no failure.
bool LoopEndpoint::peer_failed() const noexcept { return failed_; }

void LoopEndpoint::announce_abort(int culprit) noexcept {
  pair_->abort_culprit[side_].store(culprit + 1, std::memory_order_release);
}

int LoopEndpoint::peer_abort_culprit() const noexcept {
  return pair_->abort_culprit[1 - side_].load(std::memory_order_acquire) - 1;
}

// ---------------------------------------------------------------- posting

Status LoopEndpoint::check(const OutOp& op) const noexcept {
  auto remote_ok = [&](const RemoteRegion& r, uint64_t off, uint64_t len) {
    return r.owner == peer_serial_ && off <= r.length && len <= r.length - off;
  };
  switch (op.kind) {
    case SlotKind::kSend:
      return request_in_bounds(op.send.region, op.send.offset, op.send.length) ? Status::kSuccess
                                                                                : Status::kLocalError;
    case SlotKind::kWrite:
      if (!request_in_bounds(op.write.region, op.write.offset, op.write.length)) return Status::kLocalError;
      return remote_ok(op.write.remote, op.write.remote_offset, op.write.length) ? Status::kSuccess
                                                                                 : Status::kRemoteAccess;
    case SlotKind::kRead:
      if (!request_in_bounds(op.read.region, op.read.offset, op.read.length)) return Status::kLocalError;
      return remote_ok(op.read.remote, op.read.remote_offset, op.read.length) ? Status::kSuccess
                                                                              : Status::kRemoteAccess;
  }
  return Status::kLocalError;
}

template <class Req>
PostResult LoopEndpoint::enqueue(std::span<const Req> reqs) noexcept {
  check_peer();
  if (failed_) return {0, Errc::kPeerFailed};
  size_t n = 0;
  for (const auto& r : reqs) {
    // A request that fails its checks completes at once: that needs room.
    if (out_.full() || dev_->cq_full()) break;
    OutOp op;
    if constexpr (std::is_same_v<Req, SendRequest>) {
      op.kind = SlotKind::kSend;
      op.send = r;
    } else if constexpr (std::is_same_v<Req, WriteRequest>) {
      op.kind = SlotKind::kWrite;
      op.write = r;
    } else {
      op.kind = SlotKind::kRead;
      op.read = r;
    }
    ++n;
    if (Status st = check(op); st != Status::kSuccess) {
      if (op.kind == SlotKind::kSend)
        dev_->complete({r.context, 0, op.send.tag, peer_, 0, Op::kSend, st});
      else if (op.kind == SlotKind::kWrite)
        dev_->complete({r.context, 0, 0, peer_, op.write.imm, Op::kWrite, st});
      else
        dev_->complete({r.context, 0, 0, peer_, 0, Op::kRead, st});
      continue;
    }
    out_.push(op);
  }
  place_out();
  return {n, Errc::kOk};
}

PostResult LoopEndpoint::post_send(std::span<const SendRequest> reqs) noexcept { return enqueue(reqs); }
PostResult LoopEndpoint::post_write(std::span<const WriteRequest> reqs) noexcept { return enqueue(reqs); }
PostResult LoopEndpoint::post_read(std::span<const ReadRequest> reqs) noexcept { return enqueue(reqs); }

PostResult LoopEndpoint::post_recv(std::span<const RecvRequest> reqs) noexcept {
  check_peer();
  if (failed_) return {0, Errc::kPeerFailed};
  size_t n = 0;
  for (const auto& r : reqs) {
    if (dev_->cq_full()) break;  // it may complete at once
    if (!request_in_bounds(r.region, r.offset, r.length)) {
      dev_->complete({r.context, 0, r.tag, peer_, 0, Op::kRecv, Status::kLocalError});
      ++n;
      continue;
    }
    if (const uint64_t* seq = arrived_.front(r.tag); seq != nullptr) {  // its message is here already
      Slot& s = in_slot(*seq);
      arrived_.pop(r.tag);
      deliver(s, r);
    } else if (!recvs_.push(r.tag, r)) {
      break;
    }
    ++n;
  }
  return {n, Errc::kOk};
}

void LoopEndpoint::place_out() noexcept {
  while (!out_.empty() && post_seq_ - reap_seq_ < pair_->slots) {
    const OutOp& op = out_.front();
    Slot& s = out_slot(post_seq_);  // reaped: every slot below reap_seq_ is
    s.kind = op.kind;
    s.seq = post_seq_;
    s.status = Status::kSuccess;
    s.moved = 0;
    if (op.kind == SlotKind::kSend) {
      const SendRequest& r = op.send;
      s.local = r.length > 0 ? static_cast<uint8_t*>(r.region->addr()) + r.offset : nullptr;
      s.length = r.length;
      s.tag = r.tag;
      s.context = r.context;
    } else if (op.kind == SlotKind::kWrite) {
      const WriteRequest& r = op.write;
      s.local = r.length > 0 ? static_cast<uint8_t*>(r.region->addr()) + r.offset : nullptr;
      s.length = r.length;
      s.remote = r.remote;
      s.remote_offset = r.remote_offset;
      s.imm = r.imm;
      s.with_imm = r.with_imm;
      s.context = r.context;
    } else {
      const ReadRequest& r = op.read;
      s.local = r.length > 0 ? static_cast<uint8_t*>(r.region->addr()) + r.offset : nullptr;
      s.length = r.length;
      s.remote = r.remote;
      s.remote_offset = r.remote_offset;
      s.context = r.context;
    }
    s.state.store(kPosted, std::memory_order_release);
    ++post_seq_;
    out_.pop();
  }
}

void LoopEndpoint::complete_posted(const Slot& s, Status st) noexcept {
  switch (s.kind) {
    case SlotKind::kSend:
      if (st == Status::kSuccess) {
        dev_->stats.bytes_sent.add(s.length);
        dev_->stats.sends.add();
      }
      dev_->complete({s.context, st == Status::kSuccess ? s.length : 0, s.tag, peer_, 0, Op::kSend, st});
      break;
    case SlotKind::kWrite:
      if (st == Status::kSuccess) {
        dev_->stats.bytes_sent.add(s.moved);
        dev_->stats.writes.add();
      }
      dev_->complete({s.context, s.moved, 0, peer_, s.imm, Op::kWrite, st});
      break;
    case SlotKind::kRead:
      if (st == Status::kSuccess) {
        dev_->stats.bytes_received.add(s.moved);
        dev_->stats.reads.add();
      }
      dev_->complete({s.context, s.moved, 0, peer_, 0, Op::kRead, st});
      break;
  }
}

// Slots the peer finished complete their requests, in any order (receives of
// different tags finish out of order); reap_seq_ then moves past the reaped.
void LoopEndpoint::reap() noexcept {
  for (uint64_t seq = reap_seq_; seq < post_seq_ && !dev_->cq_full(); ++seq) {
    Slot& s = out_slot(seq);
    if (s.state.load(std::memory_order_acquire) != kDone) continue;
    complete_posted(s, s.status);
    s.state.store(kEmpty, std::memory_order_relaxed);  // ours again: the peer is done with it
  }
  while (reap_seq_ < post_seq_ && out_slot(reap_seq_).state.load(std::memory_order_relaxed) == kEmpty) ++reap_seq_;
}

// ---------------------------------------------------------------- taking

void LoopEndpoint::take_arrivals() noexcept {
  for (;;) {
    Slot& s = in_slot(take_seq_);
    if (s.state.load(std::memory_order_acquire) != kPosted || s.seq != take_seq_) return;
    if (s.kind == SlotKind::kSend) {
      if (const RecvRequest* r = recvs_.front(s.tag); r != nullptr) {
        if (dev_->cq_full()) return;
        const RecvRequest req = *r;
        recvs_.pop(s.tag);
        deliver(s, req);
      } else if (!arrived_.push(s.tag, take_seq_)) {
        return;
      }
    } else if (s.kind == SlotKind::kWrite) {
      if (s.with_imm && dev_->cq_full()) return;
      take_write(s);
    } else {
      take_read(s);
    }
    ++take_seq_;
  }
}

void LoopEndpoint::deliver(Slot& s, const RecvRequest& r) noexcept {
  uint32_t expect = kPosted;
  if (!s.state.compare_exchange_strong(expect, kTaken, std::memory_order_acq_rel)) {
    // The sender's endpoint closed before we got to it.
    dev_->complete({r.context, 0, r.tag, peer_, 0, Op::kRecv, Status::kPeerGone});
    return;
  }
  const uint64_t tag = s.tag;
  uint64_t len = s.length;
  Status st = Status::kSuccess;
  if (len > r.length) {
    st = Status::kTruncated;
    len = r.length;
  }
  if (len > 0) std::memcpy(static_cast<uint8_t*>(r.region->addr()) + r.offset, s.local, len);
  s.moved = len;
  s.state.store(kDone, std::memory_order_release);
  dev_->stats.bytes_received.add(len);
  dev_->complete({r.context, len, tag, peer_, 0, Op::kRecv, st});
}

void LoopEndpoint::take_write(Slot& s) noexcept {
  uint32_t expect = kPosted;
  if (!s.state.compare_exchange_strong(expect, kTaken, std::memory_order_acq_rel)) return;
  const LoopRegion* region = dev_->region_for(s.remote, s.remote_offset, s.length);
  const bool ok = region != nullptr;
  if (ok && s.length > 0) std::memcpy(static_cast<uint8_t*>(region->addr()) + s.remote_offset, s.local, s.length);
  const Completion c{0, s.length, s.remote_offset, peer_, s.imm, Op::kRemoteWrite, Status::kSuccess};
  const bool tell = ok && s.with_imm;
  s.status = ok ? Status::kSuccess : Status::kRemoteAccess;
  s.moved = ok ? s.length : 0;
  s.state.store(kDone, std::memory_order_release);
  if (tell) {
    dev_->stats.remote_writes.add();
    dev_->complete(c);
  }
}

void LoopEndpoint::take_read(Slot& s) noexcept {
  uint32_t expect = kPosted;
  if (!s.state.compare_exchange_strong(expect, kTaken, std::memory_order_acq_rel)) return;
  const LoopRegion* region = dev_->region_for(s.remote, s.remote_offset, s.length);
  if (region != nullptr && s.length > 0)
    std::memcpy(s.local, static_cast<const uint8_t*>(region->addr()) + s.remote_offset, s.length);
  s.status = region != nullptr ? Status::kSuccess : Status::kRemoteAccess;
  s.moved = region != nullptr ? s.length : 0;
  s.state.store(kDone, std::memory_order_release);
}

// ---------------------------------------------------------------- failure and progress

void LoopEndpoint::check_peer() noexcept {
  if (failed_ || pair_->closed[1 - side_].load(std::memory_order_acquire) == 0) return;
  failed_ = true;
  // A peer that closed with nothing of ours pending may simply have finished.
  if (out_.empty() && reap_seq_ == post_seq_ && recvs_.empty()) {
    GREX_DEBUG("loop", "rank %d: %s closed its endpoint", dev_->rank(), describe_peer().c_str());
    return;
  }
  dev_->stats.peer_failures.add();
  GREX_WARN("loop", "rank %d: %s closed its endpoint: failing what is pending with it", dev_->rank(),
            describe_peer().c_str());
}

// The peer is gone: what it finished completes as usual, the rest with
// kPeerGone, as far as the completion queue has room (again on the next poll).
void LoopEndpoint::fail_all() noexcept {
  while (!out_.empty() && !dev_->cq_full()) {
    const OutOp& op = out_.front();
    if (op.kind == SlotKind::kSend)
      dev_->complete({op.send.context, 0, op.send.tag, peer_, 0, Op::kSend, Status::kPeerGone});
    else if (op.kind == SlotKind::kWrite)
      dev_->complete({op.write.context, 0, 0, peer_, op.write.imm, Op::kWrite, Status::kPeerGone});
    else
      dev_->complete({op.read.context, 0, 0, peer_, 0, Op::kRead, Status::kPeerGone});
    out_.pop();
  }
  for (; reap_seq_ < post_seq_ && !dev_->cq_full(); ++reap_seq_) {
    Slot& s = out_slot(reap_seq_);
    const uint32_t state = s.state.load(std::memory_order_acquire);
    if (state == kEmpty) continue;  // reaped before
    complete_posted(s, state == kDone ? s.status : Status::kPeerGone);
    s.state.store(kEmpty, std::memory_order_relaxed);
  }
  arrived_.clear();  // the peer cancelled those slots when it closed
  if (!recvs_.empty() && dev_->cq_room() >= recvs_.size())
    recvs_.drain([&](uint64_t tag, RecvRequest& r) {
      dev_->complete({r.context, 0, tag, peer_, 0, Op::kRecv, Status::kPeerGone});
    });
}

void LoopEndpoint::progress() noexcept {
  check_peer();
  if (failed_) {
    fail_all();
    return;
  }
  place_out();
  if (reap_seq_ < post_seq_) reap();
  take_arrivals();
}

}  // namespace grex::loop
