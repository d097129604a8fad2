// SPDX-License-Identifier: Apache-2.0
// Verbs driver, the matching core and the eager path: which receives are
// advertised, sends matched to adverts per tag, eager messages written into
// the receiver's ring and matched there, credits, and requests for adverts.
// The rules, and why both sides agree on every match, are in verbs_device.h's
// file comment and docs/verbs.md ("Eager and rendezvous").
#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "drivers/verbs/verbs_device.h"

namespace grex::verbs {
namespace {

constexpr uint32_t kHeaderBytes = sizeof(EagerHeader);

}  // namespace

// ---------------------------------------------------------------- setup

// The ring the peer will write eager messages into, offered in the
// connection's private data before the queue pair can receive anything.
Result<EagerRing> VerbsEndpoint::offer_eager() {
  const VerbsOptions& vo = dev_->vopts();
  if (vo.eager_bytes == 0 || vo.eager_slots == 0) return EagerRing{};
  rx_slots_n_ = vo.eager_slots;
  rx_eager_.assign(rx_slots_n_ * eager_stride(vo.eager_bytes), 0);
  rx_slot_free_.assign(rx_slots_n_, 0);
  rx_eager_mr_ = ibv_reg_mr(dev_->pd(), rx_eager_.data(), rx_eager_.size(),
                            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (rx_eager_mr_ == nullptr)
    return Error::from_errno("ibv_reg_mr (eager ring of " + std::to_string(rx_eager_.size()) + " bytes)", errno)
        .device(dev_->name())
        .hint("GREX_IB_EAGER=0 turns the eager path off");
  my_ring_ = EagerRing{reinterpret_cast<uint64_t>(rx_eager_.data()), rx_eager_mr_->rkey,
                       static_cast<uint16_t>(rx_slots_n_), 0, vo.eager_bytes};
  unexpected_.reset(rx_slots_n_);
  credit_batch_ = std::max<uint32_t>(1, rx_slots_n_ / 4);
  return my_ring_;
}

// Both ends use the smaller eager size of the two (0 when either offers no
// ring), so a receive is silent exactly when the peer may send its message eagerly.
Result<void> VerbsEndpoint::setup_eager(const EagerRing& peer) {
  peer_ring_ = peer;
  eager_payload_ = peer.slots > 0 && rx_slots_n_ > 0 ? std::min(dev_->vopts().eager_bytes, peer.payload) : 0;
  if (eager_payload_ == 0) {
    peer_ring_.slots = 0;
    credit_batch_ = UINT32_MAX;
    return ok();
  }
  tx_eager_hdr_.assign(peer.slots, EagerHeader{});
  tx_eager_mr_ = ibv_reg_mr(dev_->pd(), tx_eager_hdr_.data(), tx_eager_hdr_.size() * sizeof(EagerHeader),
                            IBV_ACCESS_LOCAL_WRITE);
  if (tx_eager_mr_ == nullptr) return Error::from_errno("ibv_reg_mr (eager headers)", errno).device(dev_->name());
  eagers_out_.reset(peer.slots);
  credit_waiters_.reset(dev_->opts().queue_depth);
  return ok();
}

// ---------------------------------------------------------------- send side

void VerbsEndpoint::take_send(const SendRequest& s) noexcept {
  if (sends_.front(s.tag) == nullptr) {  // nothing of this tag waits before it
    if (const Advert* a = adverts_.front(s.tag); a != nullptr) {
      ready_.push(Ready{Ready::kWrite, s, *a, 0});
      adverts_.pop(s.tag);
      return;
    }
    const bool small = eager_payload_ > 0 && s.length <= eager_payload_;
    if (small && eager_room()) {
      go_eager(s);
      return;
    }
    sends_.push(s.tag, s);
    want_advert(s.tag);  // the first of its tag to wait
    // A small one may still go eagerly if a slot comes free before its
    // advert arrives (the advert is then one the receiver made for it, which
    // the eager message uses up: the sender drops it as any other).
    if (small) credit_waiters_.push(s.tag);
    return;
  }
  sends_.push(s.tag, s);
}

void VerbsEndpoint::go_eager(const SendRequest& s) noexcept {
  eagers_out_.push(InFlightEager{s.tag, tx_eagers_, false});
  ready_.push(Ready{Ready::kEager, s, Advert{}, tx_eagers_ % peer_ring_.slots});
  ++tx_eagers_;
}

// Slots came free: the small sends at the head of their tag's queue go now.
void VerbsEndpoint::resume_eager() noexcept {
  if (credit_waiters_.empty()) return;
  while (!credit_waiters_.empty() && eager_room()) {
    const uint64_t tag = credit_waiters_.front();
    const SendRequest* s = sends_.front(tag);
    if (s == nullptr || s->length > eager_payload_) {  // taken by an advert meanwhile, or a large one heads it now
      credit_waiters_.pop();
      continue;
    }
    go_eager(*s);
    sends_.pop(tag);
    if (const SendRequest* next = sends_.front(tag); next != nullptr) {
      want_advert(tag);
      if (next->length <= eager_payload_) continue;  // the same tag again, while there is room
    }
    credit_waiters_.pop();
  }
}

// With the eager path on, a receive the peer keeps silent is only advertised
// when asked: ask for the send that now heads its tag's queue. It goes in
// order with the data, so the peer has matched everything sent before it.
void VerbsEndpoint::want_advert(uint64_t tag) noexcept {
  if (eager_payload_ == 0) return;  // every receive is advertised
  SendRequest t;
  t.tag = tag;
  ready_.push(Ready{Ready::kWant, t, Advert{}, 0});
  dev_->stats.wants.add();
}

void VerbsEndpoint::take_advert(const Ctrl& c) noexcept {
  on_peer_credit(c.eagers, c.freed);
  if (!used_by_eager(c.tag)) {  // else one of our eager messages took that receive
    const Advert a{c.seq, c.tag, c.addr, c.len, c.rkey};
    if (const SendRequest* s = sends_.front(c.tag); s != nullptr) {
      ready_.push(Ready{Ready::kWrite, *s, a, 0});
      sends_.pop(c.tag);
      if (sends_.front(c.tag) != nullptr) want_advert(c.tag);
    } else {
      adverts_.push(c.tag, a);
    }
  }
  resume_eager();
}

// The peer had taken `eagers` of our eager messages when it made what carries
// this, and freed `freed` slots in order. Eager messages it had taken then
// cannot use up an advert made at that time or later.
void VerbsEndpoint::on_peer_credit(uint32_t eagers, uint32_t freed) noexcept {
  while (!eagers_out_.empty() && (eagers_out_.front().resolved || before(eagers_out_.front().eseq, eagers)))
    eagers_out_.pop();
  peer_freed_ = freed_after(tx_eagers_, peer_freed_, freed);
}

// An advert of `tag` arrived: if an eager message of that tag that reached
// the peer after the advert was made is not yet accounted for, the oldest such
// took that receive (the peer matches each message to its oldest receive of
// the tag, and advertised receives come first).
bool VerbsEndpoint::used_by_eager(uint64_t tag) noexcept {
  for (size_t i = 0; i < eagers_out_.size(); ++i) {
    InFlightEager& e = eagers_out_[i];
    if (e.resolved || e.tag != tag) continue;
    e.resolved = true;
    while (!eagers_out_.empty() && eagers_out_.front().resolved) eagers_out_.pop();
    return true;
  }
  return false;
}

// Builds an eager message in a post list: header and payload, one RDMA WRITE
// WITH IMMEDIATE into the peer's slot, inline when both fit.
bool VerbsEndpoint::append_eager(PostList& pl, const Ready& r) noexcept {
  const uint32_t k = pl.n;
  if (k + 1 > kBatch || sq_room() < k + 1) return false;
  const SendRequest& s = r.send;
  EagerHeader& h = tx_eager_hdr_[r.slot];
  h = EagerHeader{s.tag, static_cast<uint32_t>(s.length), 0, 0, 0};
  credit_piggyback(h);
  ibv_sge* sge = &pl.sges[2 * k];
  sge[0] = {reinterpret_cast<uint64_t>(&h), kHeaderBytes, tx_eager_mr_->lkey};
  ibv_send_wr& w = pl.wrs[k];
  w = ibv_send_wr{};
  w.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  w.imm_data = htonl(kEagerBit | r.slot);
  w.wr.rdma.remote_addr = peer_ring_.addr + r.slot * eager_stride(peer_ring_.payload);
  w.wr.rdma.rkey = peer_ring_.rkey;
  w.sg_list = sge;
  w.num_sge = 1;
  if (s.length > 0) {
    sge[1] = {reinterpret_cast<uint64_t>(s.region->addr()) + s.offset, static_cast<uint32_t>(s.length),
              static_cast<uint32_t>(s.region->lkey())};
    w.num_sge = 2;
  }
  if (kHeaderBytes + s.length <= max_inline_) {
    w.send_flags |= IBV_SEND_INLINE;
    dev_->stats.inline_sends.add();
  }
  w.wr_id = wr_id(id_, kOpDone, sq_posted_ + k + 1);
  ++unsignalled_;
  if (++ops_unsignalled_ >= 16 || unsignalled_ >= sq_depth_ / 4) {
    w.send_flags |= IBV_SEND_SIGNALED;
    ops_unsignalled_ = 0;
    unsignalled_ = 0;
  }
  pl.n = k + 1;
  dev_->stats.eager_sends.add();
  return true;
}

// A control SEND in a post list (unsignalled but for the send queue's sake).
bool VerbsEndpoint::append_ctrl(PostList& pl, const Ctrl& c) noexcept {
  const uint32_t k = pl.n;
  if (k + 1 > kBatch || sq_room() < k + 1) return false;
  ibv_send_wr& w = pl.wrs[k];
  w = ibv_send_wr{};
  w.wr_id = wr_id(id_, kSqMark, sq_posted_ + k + 1);
  w.opcode = IBV_WR_SEND;
  if (max_inline_ >= sizeof(Ctrl)) {
    pl.ctrls[k] = c;
    pl.sges[2 * k] = {reinterpret_cast<uint64_t>(&pl.ctrls[k]), sizeof(Ctrl), 0};
    w.send_flags = IBV_SEND_INLINE;
  } else {
    Ctrl& slot = tx_slots_[(sq_posted_ + k) % tx_slots_.size()];
    slot = c;
    pl.sges[2 * k] = {reinterpret_cast<uint64_t>(&slot), sizeof(Ctrl), tx_mr_->lkey};
  }
  w.sg_list = &pl.sges[2 * k];
  w.num_sge = 1;
  if (++unsignalled_ >= sq_depth_ / 4) {
    w.send_flags |= IBV_SEND_SIGNALED;
    unsignalled_ = 0;
  }
  pl.n = k + 1;
  return true;
}

// ---------------------------------------------------------------- receive side

void VerbsEndpoint::credit_piggyback(EagerHeader& h) noexcept {
  h.eagers = rx_eagers_;
  h.freed = rx_freed_;
  freed_reported_ = rx_freed_;
}

void VerbsEndpoint::queue_advert(uint32_t seq) noexcept {
  Recv& r = recvs_[seq & (recvs_.size() - 1)];
  r.advertised = true;
  Ctrl c;
  c.type = Ctrl::kAdvert;
  c.seq = r.seq;
  c.tag = r.req.tag;
  c.len = r.req.length;
  c.addr = r.req.region != nullptr ? reinterpret_cast<uint64_t>(r.req.region->addr()) + r.req.offset : 0;
  c.rkey = open_window(r);
  queue_ctrl(c);
  dev_->stats.adverts.add();
}

// Queues a control message for the peer. Its counts are taken now: an eager
// message arriving after this point may take the receive it advertises.
void VerbsEndpoint::queue_ctrl(const Ctrl& c) noexcept {
  Ctrl m = c;
  m.eagers = rx_eagers_;
  m.freed = rx_freed_;
  freed_reported_ = rx_freed_;
  if (!ctrl_out_.push(m)) fail(Status::kLocalError, "internal: the control queue to the peer overflowed");
}

// Posts queued control messages, in order, as the send queue allows; false
// while some still wait.
bool VerbsEndpoint::post_pending_ctrls() noexcept {
  while (!ctrl_out_.empty() && !failed_) {
    Ctrl batch[kBatch];
    const uint32_t n = std::min<uint32_t>({static_cast<uint32_t>(ctrl_out_.size()), kBatch, sq_room()});
    if (n == 0) return false;
    for (uint32_t i = 0; i < n; ++i) batch[i] = ctrl_out_[i];
    const uint32_t posted = post_ctrls(batch, n);
    for (uint32_t i = 0; i < posted; ++i) ctrl_out_.pop();
    if (posted < n) return false;
  }
  return ctrl_out_.empty();
}

// ---------------------------------------------------------------- windows

// The rkey an advert of receive `r` carries. With windows: a new key for the
// window of r's slot, bound to exactly r's buffer by the work request that
// goes before the advert (post_ctrls), usable by this peer's queue pair only.
// Else the region's own rkey, which opens all of it.
uint32_t VerbsEndpoint::open_window(Recv& r) noexcept {
  const auto* region = static_cast<const VerbsRegion*>(r.req.region);
  if (region == nullptr) return 0;
  if (windows_.empty() || region->mr() == nullptr || r.req.length == 0)
    return windows_.empty() ? static_cast<uint32_t>(region->remote().rkey) : 0;  // zero bytes need no key
  Window& w = windows_[r.seq & (recvs_.size() - 1)];
  if (dev_->registers()) {
    // The receive's bytes alone, writable from afar. A slot's previous
    // receive completed before this one took it, and dropped its registration.
    if (w.reg != nullptr) ibv_dereg_mr(w.reg);
    w.reg = ibv_reg_mr(dev_->pd(), static_cast<uint8_t*>(region->addr()) + r.req.offset, r.req.length,
                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (w.reg == nullptr) {
      fail(Status::kLocalError, std::string("ibv_reg_mr (a receive's ") + std::to_string(r.req.length) +
                                    " bytes, GREX_IB_CONFINE=register): " + std::strerror(errno));
      return 0;
    }
    w.key = w.reg->rkey;
    w.state = Window::kQueued;
    r.window = w.key;
    return w.key;
  }
  w.key = ibv_inc_rkey(w.key);
  w.mr = region->mr();
  w.state = Window::kQueued;
  r.window = w.key;
  return w.key;
}

// Receive `r` completed: its window closes. Bound, it is invalidated by the
// next work request the send queue takes (queued behind any control message
// before it); its advert not yet posted, the advert goes without a window
// (the peer will not write into a receive that is done).
void VerbsEndpoint::close_window(Recv& r) noexcept {
  if (r.window == 0) return;
  Window& w = windows_[r.seq & (recvs_.size() - 1)];
  if (dev_->registers()) {
    // Deregistered at once: a write with the key now fails at this device.
    // An advert still queued goes without the key (post_ctrls).
    if (w.key == r.window && w.reg != nullptr) {
      ibv_dereg_mr(w.reg);
      w.reg = nullptr;
      w.state = Window::kIdle;
    }
    r.window = 0;
    return;
  }
  if (w.key == r.window && w.state == Window::kBound) {
    Ctrl c;
    c.type = kCloseWindow;
    c.rkey = r.window;
    if (!ctrl_out_.push(c)) fail(Status::kLocalError, "internal: the control queue to the peer overflowed");
    post_pending_ctrls();
  }
  if (w.key == r.window) w.state = Window::kIdle;
  r.window = 0;
}

// An eager message landed in slot `slot` of our ring: match it to the oldest
// receive of its tag, or keep it until that receive is posted.
void VerbsEndpoint::on_eager(uint32_t slot, uint32_t byte_len) noexcept {
  if (!eager_slot_next(slot, rx_eagers_, rx_slots_n_)) {
    fail(Status::kLocalError, "protocol: an eager message in slot " + std::to_string(slot) + ", expected " +
                                  std::to_string(rx_slots_n_ == 0 ? 0 : rx_eagers_ % rx_slots_n_));
    return;
  }
  // A copy of the header, checked once: the peer may write into its slot again.
  EagerHeader h;
  std::memcpy(&h, &rx_eager_[slot * eager_stride(my_ring_.payload)], sizeof(h));
  if (!eager_fits(h, my_ring_.payload, byte_len)) {
    fail(Status::kLocalError, "protocol: an eager message of " + std::to_string(h.len) + " bytes in a write of " +
                                  std::to_string(byte_len));
    return;
  }
  ++rx_eagers_;
  on_peer_credit(h.eagers, h.freed);
  resume_eager();
  if (const uint32_t* seq = pending_.front(h.tag); seq != nullptr) {
    Recv& r = recvs_[*seq & (recvs_.size() - 1)];
    pending_.pop(h.tag);
    deliver_eager(slot, h.len, r);
    while (recv_head_ != recv_next_ && recvs_[recv_head_ & (recvs_.size() - 1)].done) {
      recvs_[recv_head_ & (recvs_.size() - 1)].used = false;
      ++recv_head_;
    }
  } else if (!unexpected_.push(h.tag, Unexpected{slot, h.len})) {
    fail(Status::kLocalError, "internal: more unexpected eager messages than slots");
    return;
  } else {
    dev_->stats.unexpected.add();
  }
  if (!ready_.empty()) match_sends();  // credits may have come back
}

// Copies an eager message out of its slot into receive `r` and completes it.
void VerbsEndpoint::deliver_eager(uint32_t slot, uint32_t len, Recv& r) noexcept {
  const uint8_t* at = &rx_eager_[slot * eager_stride(my_ring_.payload)];
  const uint64_t n = std::min<uint64_t>(len, r.req.length);
  if (n > 0) std::memcpy(static_cast<uint8_t*>(r.req.region->addr()) + r.req.offset, at + kHeaderBytes, n);
  r.done = true;
  close_window(r);  // an advertised receive an eager message took
  dev_->stats.recvs.add();
  dev_->stats.eager_recvs.add();
  dev_->stats.bytes_received.add(n);
  complete(Completion{r.req.context, n, r.req.tag, peer_, 0, grex::Op::kRecv,
                      len > r.req.length ? Status::kTruncated : Status::kSuccess});
  free_slot(slot);
}

void VerbsEndpoint::free_slot(uint32_t slot) noexcept {
  rx_slot_free_[slot] = 1;
  while (rx_freed_ != rx_eagers_ && rx_slot_free_[rx_freed_ % rx_slots_n_] != 0) {
    rx_slot_free_[rx_freed_ % rx_slots_n_] = 0;
    ++rx_freed_;
  }
}

}  // namespace grex::verbs
