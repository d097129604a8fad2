// SPDX-License-Identifier: Apache-2.0
// Verbs driver fast path, the posting side: RDMA WRITE (WITH IMMEDIATE)
// straight into the peer's buffer, selective signalling, batched post lists.
// Completions and failures: verbs_completions.cc; matching and the eager
// path: verbs_eager.cc.
#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

#include "core/clock.h"
#include "drivers/verbs/verbs_device.h"

namespace grex::verbs {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "Ctrl is sent in host order");

constexpr uint64_t kMaxChunk = uint64_t{1} << 30;  // bytes per RDMA WRITE (below every NIC's max_msg_sz)

uint32_t chunks(uint64_t len) { return len == 0 ? 1 : static_cast<uint32_t>((len + kMaxChunk - 1) / kMaxChunk); }

}  // namespace

// ---------------------------------------------------------------- posting

PostResult VerbsEndpoint::post_recv(std::span<const RecvRequest> reqs) noexcept {
  size_t n = 0;
  for (const auto& r : reqs) {
    if (failed_) break;
    if (recv_next_ - recv_head_ >= recvs_.size() || pending_.full()) break;
    uint32_t seq = recv_next_++;
    Recv& x = recvs_[seq & (recvs_.size() - 1)];
    x = Recv{r, seq, true, false, false};
    ++n;
    if (!request_in_bounds(r.region, r.offset, r.length)) {  // never advertised
      x.done = true;
      dev_->push_completion(Completion{r.context, 0, r.tag, peer_, 0, grex::Op::kRecv, Status::kLocalError});
      continue;
    }
    if (const Unexpected* u = unexpected_.front(r.tag); u != nullptr) {  // its message is here already
      const Unexpected m = *u;
      unexpected_.pop(r.tag);
      deliver_eager(m.slot, m.len, x);
      continue;
    }
    // Per tag, advertised receives come before silent ones: a receive is
    // advertised when it is too large for an eager message, or the peer asked
    // for one, unless a silent one of its tag waits before it.
    const uint32_t* last = pending_.back(r.tag);
    const bool silent_before = last != nullptr && !recvs_[*last & (recvs_.size() - 1)].advertised;
    pending_.push(r.tag, seq);
    if (silent_before) continue;
    const bool wanted = wants_.pop(r.tag);  // the peer's next send of this tag waits for this receive
    if (eager_payload_ == 0 || r.length > eager_payload_ || wanted) queue_advert(seq);
  }
  while (recv_head_ != recv_next_ && recvs_[recv_head_ & (recvs_.size() - 1)].done) {
    recvs_[recv_head_ & (recvs_.size() - 1)].used = false;
    ++recv_head_;
  }
  progress();
  return {n, n < reqs.size() && failed_ ? Errc::kPeerFailed : Errc::kOk};
}

PostResult VerbsEndpoint::post_send(std::span<const SendRequest> reqs) noexcept {
  size_t n = 0;
  for (const auto& s : reqs) {
    // Sends waiting (for an advert, or for the send queue) stay within the queue depth.
    if (failed_ || sends_.size() + ready_.size() >= sends_.capacity()) break;
    if (!request_in_bounds(s.region, s.offset, s.length)) {  // fails before it could consume an advert
      dev_->push_completion(Completion{s.context, 0, s.tag, peer_, 0, grex::Op::kSend, Status::kLocalError});
    } else {
      take_send(s);
    }
    ++n;
  }
  progress();
  return {n, n < reqs.size() && failed_ ? Errc::kPeerFailed : Errc::kOk};
}

PostResult VerbsEndpoint::post_write(std::span<const WriteRequest> reqs) noexcept {
  size_t n = 0;
  for (const auto& w : reqs) {
    if (failed_ || writes_.full()) break;
    if (!request_in_bounds(w.region, w.offset, w.length)) {
      dev_->push_completion(Completion{w.context, 0, 0, peer_, 0, grex::Op::kWrite, Status::kLocalError});
    } else if (w.remote_offset > w.remote.length || w.length > w.remote.length - w.remote_offset) {
      // Checked here so a bad range never reaches the NIC (where it would
      // break the queue pair for every later request).
      dev_->push_completion(Completion{w.context, 0, 0, peer_, 0, grex::Op::kWrite, Status::kRemoteAccess});
    } else {
      writes_.push(w);
    }
    ++n;
  }
  if (!failed_ && qp_ != nullptr) post_writes();  // adverts and matching are not affected
  return {n, n < reqs.size() && failed_ ? Errc::kPeerFailed : Errc::kOk};
}

void VerbsEndpoint::announce_abort(int culprit) noexcept {
  if (failed_ || qp_ == nullptr || sq_room() < 1) return;
  Ctrl c;
  c.type = Ctrl::kAbort;
  c.seq = static_cast<uint32_t>(culprit + 1);
  post_ctrls(&c, 1);
}

void VerbsEndpoint::progress() noexcept {
  if (failed_ || qp_ == nullptr) return;
  if (credit_due()) {  // nothing went back that carried the freed slots: say so
    Ctrl c;
    c.type = Ctrl::kCredit;
    queue_ctrl(c);
  }
  post_pending_ctrls();
  match_sends();
  post_writes();
}

// Control SENDs in one post list; unsignalled, except one in every quarter
// of the send queue so its slots can be reclaimed. Inline when the QP allows.
// With memory windows an advert takes two work requests (the bind of its
// window, then the SEND) and closing a window one (LOCAL_INV, nothing sent).
// Returns how many of `cs` were posted: as many as kBatch work requests and
// the send queue's room allow, in order.
uint32_t VerbsEndpoint::post_ctrls(const Ctrl* cs, uint32_t n) noexcept {
  ibv_send_wr wrs[kBatch];
  ibv_sge sges[kBatch];
  Ctrl sent[kBatch];  // inline data is copied by ibv_post_send
  Window* bound[kBatch];
  uint32_t nb = 0, w = 0, k = 0, sends = 0;
  const uint32_t room = std::min<uint32_t>(kBatch, sq_room());
  for (; k < n; ++k) {
    const Ctrl& c = cs[k];
    Window* win = nullptr;
    if (c.type == Ctrl::kAdvert && c.rkey != 0 && !windows_.empty()) {
      Window& x = windows_[c.seq & (recvs_.size() - 1)];
      if (x.state == Window::kQueued && x.key == c.rkey) win = &x;
    }
    const bool registered = win != nullptr && win->mw == nullptr;  // GREX_IB_CONFINE=register: nothing to bind
    if (w + (win != nullptr && !registered ? 2 : 1) > room) break;
    auto next_wr = [&]() -> ibv_send_wr& {
      ibv_send_wr& wr = wrs[w];
      wr = ibv_send_wr{};
      wr.wr_id = wr_id(id_, kSqMark, sq_posted_ + w + 1);  // also names us in an error completion
      if (++unsignalled_ >= sq_depth_ / 4) {
        wr.send_flags = IBV_SEND_SIGNALED;
        unsignalled_ = 0;
      }
      if (w > 0) wrs[w - 1].next = &wr;
      ++w;
      return wr;
    };
    if (c.type == kCloseWindow) {
      ibv_send_wr& wr = next_wr();
      wr.opcode = IBV_WR_LOCAL_INV;
      wr.invalidate_rkey = c.rkey;
      continue;
    }
    if (registered) {
      bound[nb++] = win;
    } else if (win != nullptr) {
      ibv_send_wr& wr = next_wr();
      wr.opcode = IBV_WR_BIND_MW;
      wr.bind_mw.mw = win->mw;
      wr.bind_mw.rkey = c.rkey;
      wr.bind_mw.bind_info = ibv_mw_bind_info{win->mr, c.addr, c.len, IBV_ACCESS_REMOTE_WRITE};
      bound[nb++] = win;
    }
    Ctrl& m = sent[k];
    m = c;
    if (c.type == Ctrl::kAdvert && !windows_.empty() && win == nullptr) m.rkey = 0;  // done before it was posted
    ibv_send_wr& wr = next_wr();
    ++sends;
    wr.opcode = IBV_WR_SEND;
    wr.num_sge = 1;
    wr.sg_list = &sges[w - 1];
    if (max_inline_ >= sizeof(Ctrl)) {
      sges[w - 1] = {reinterpret_cast<uint64_t>(&m), sizeof(Ctrl), 0};
      wr.send_flags |= IBV_SEND_INLINE;
    } else {
      Ctrl& slot = tx_slots_[(sq_posted_ + w - 1) % tx_slots_.size()];
      slot = m;
      sges[w - 1] = {reinterpret_cast<uint64_t>(&slot), sizeof(Ctrl), tx_mr_->lkey};
    }
  }
  if (w == 0) return 0;
  ibv_send_wr* bad = nullptr;
  if (int e = ibv_post_send(qp_, wrs, &bad); e != 0) {
    fail(Status::kLocalError, std::string("ibv_post_send (control): ") + std::strerror(e));
    return 0;
  }
  // The provider names a window by its current rkey: from here on, the new one.
  for (uint32_t i = 0; i < nb; ++i) {
    if (bound[i]->mw != nullptr) bound[i]->mw->rkey = bound[i]->key;
    bound[i]->state = Window::kBound;
  }
  sq_posted_ += w;
  dev_->stats.wr_posted.add(w);
  if (max_inline_ >= sizeof(Ctrl)) dev_->stats.inline_sends.add(sends);
  return k;
}

// Appends RDMA WRITEs of [off, off+len) of `mr` to raddr, at most 1 GiB each,
// the last WITH IMMEDIATE when asked, then an optional control SEND. The last
// work request completes the request (kOpDone); it is signalled every 16
// requests, and flush() signals the last of each list, so each request's
// completion is reported by the first signalled one at or after it (RC
// completes in order). False when the list or the send queue is full.
bool VerbsEndpoint::append(PostList& pl, const MemoryRegion* mr, uint64_t off, uint64_t len, uint64_t raddr,
                           uint32_t rkey, bool with_imm, uint32_t imm, const Ctrl* then) noexcept {
  const uint32_t n = chunks(len) + (then != nullptr ? 1 : 0);
  if (pl.n + n > kBatch || sq_room() < pl.n + n) return false;
  uint32_t k = pl.n;
  for (uint64_t done = 0; k < pl.n + chunks(len); ++k) {
    uint64_t piece = std::min(kMaxChunk, len - done);
    ibv_send_wr& w = pl.wrs[k];
    w = ibv_send_wr{};
    w.wr_id = wr_id(id_, kSqMark, sq_posted_ + k + 1);
    w.opcode = IBV_WR_RDMA_WRITE;
    w.wr.rdma.remote_addr = raddr + done;
    w.wr.rdma.rkey = rkey;
    if (piece > 0) {
      pl.sges[2 * k] = {reinterpret_cast<uint64_t>(mr->addr()) + off + done, static_cast<uint32_t>(piece),
                    static_cast<uint32_t>(mr->lkey())};
      w.sg_list = &pl.sges[2 * k];
      w.num_sge = 1;
      if (piece <= max_inline_) {
        w.send_flags |= IBV_SEND_INLINE;
        dev_->stats.inline_sends.add();
      }
    }
    done += piece;
  }
  if (with_imm) {
    pl.wrs[k - 1].opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    pl.wrs[k - 1].imm_data = htonl(imm);
  }
  if (then != nullptr) {
    ibv_send_wr& w = pl.wrs[k];
    w = ibv_send_wr{};
    w.wr_id = wr_id(id_, kSqMark, sq_posted_ + k + 1);
    w.opcode = IBV_WR_SEND;
    if (max_inline_ >= sizeof(Ctrl)) {
      pl.ctrls[k] = *then;
      pl.sges[2 * k] = {reinterpret_cast<uint64_t>(&pl.ctrls[k]), sizeof(Ctrl), 0};
      w.send_flags = IBV_SEND_INLINE;
    } else {
      Ctrl& slot = tx_slots_[(sq_posted_ + k) % tx_slots_.size()];
      slot = *then;
      pl.sges[2 * k] = {reinterpret_cast<uint64_t>(&slot), sizeof(Ctrl), tx_mr_->lkey};
    }
    w.sg_list = &pl.sges[2 * k];
    w.num_sge = 1;
    ++k;
  }
  ibv_send_wr& last = pl.wrs[k - 1];
  last.wr_id = wr_id(id_, kOpDone, sq_posted_ + k);
  unsignalled_ += n;
  if (++ops_unsignalled_ >= 16 || unsignalled_ >= sq_depth_ / 4) {
    last.send_flags |= IBV_SEND_SIGNALED;
    ops_unsignalled_ = 0;
    unsignalled_ = 0;
  }
  pl.n = k;
  return true;
}

bool VerbsEndpoint::flush(PostList& pl) noexcept {
  if (pl.n == 0) return true;
  for (uint32_t k = 0; k + 1 < pl.n; ++k) pl.wrs[k].next = &pl.wrs[k + 1];
  pl.wrs[pl.n - 1].next = nullptr;
  pl.wrs[pl.n - 1].send_flags |= IBV_SEND_SIGNALED;
  ops_unsignalled_ = 0;
  unsignalled_ = 0;
  ibv_send_wr* bad = nullptr;
  if (int e = ibv_post_send(qp_, pl.wrs, &bad); e != 0) {
    fail(Status::kLocalError, std::string("ibv_post_send: ") + std::strerror(e));
    for (uint32_t k = 0; k < pl.n_early; ++k) complete({pl.early[k].context, 0, pl.early[k].tag, peer_, 0,
                                                        grex::Op::kSend, Status::kLocalError});
    pl.n = pl.n_early = 0;
    return false;
  }
  sq_posted_ += pl.n;
  dev_->stats.wr_posted.add(pl.n);
  for (uint32_t k = 0; k < pl.n_early; ++k)
    complete({pl.early[k].context, pl.early[k].bytes, pl.early[k].tag, peer_, 0, grex::Op::kSend, Status::kSuccess});
  pl.n = pl.n_early = 0;
  return true;
}

// Sends matched to adverts, eager messages and requests for adverts, in the
// order they were made; a post list at a time, as the send queue, the op ring
// and the pacer allow. Control messages queued before go first (an eager
// header's credit must not overtake an advert made before it).
bool VerbsEndpoint::match_sends() noexcept {
  if (ready_.empty() || !post_pending_ctrls()) return true;
  const uint64_t now = dev_->vopts().cc != nullptr ? now_ns() : 0;
  PostList pl;
  pl.ctrls = post_ctrls_;
  while (!ready_.empty() && !failed_) {
    const Ready& r = ready_.front();
    if (r.kind == Ready::kWant) {
      Ctrl c;
      c.type = Ctrl::kWant;
      c.tag = r.send.tag;
      if (!append_ctrl(pl, c)) {
        if (pl.n == 0 || !flush(pl)) break;
        continue;
      }
      ready_.pop();
      continue;
    }
    if (ops_.full()) break;
    if (!pace_allows(now)) break;  // the congestion controller's rate: retry on a later poll
    const SendRequest& s = r.send;
    uint64_t len = s.length;
    bool appended;
    if (r.kind == Ready::kEager) {
      appended = append_eager(pl, r);
    } else {
      len = std::min<uint64_t>(s.length, r.advert.len);  // the receiver reports truncation
      const uint32_t imm = (r.advert.seq & kSeqMask) | (s.length > r.advert.len ? kTruncBit : 0);
      appended = append(pl, s.region, s.offset, len, r.advert.addr, r.advert.rkey, true, imm, nullptr);
    }
    if (!appended) {
      if (pl.n == 0 || !flush(pl)) break;  // no send-queue room: the order holds, retry on the next poll
      continue;
    }
    paced(len, now);
    if (r.kind == Ready::kEager && eager_inline(len)) {
      sq_bytes_ -= len;  // not waited for: nothing of it stays on the queue
      pl.early[pl.n_early++] = {s.context, len, s.tag};
    } else {
      ops_.push(Op{s.context, len, s.tag, grex::Op::kSend, Status::kSuccess, sq_posted_ + pl.n});
    }
    dev_->stats.sends.add();
    dev_->stats.bytes_sent.add(len);
    ready_.pop();
  }
  if (probe_due_ && pl.n < kBatch && sq_room() > pl.n) append_probe(pl);
  return flush(pl);
}

bool VerbsEndpoint::post_writes() noexcept {
  if (writes_.empty()) return true;
  const uint64_t now = dev_->vopts().cc != nullptr ? now_ns() : 0;
  PostList pl;
  pl.ctrls = post_ctrls_;
  while (!writes_.empty() && !failed_) {
    const WriteRequest& w = writes_.front();
    if (ops_.full()) break;
    if (!pace_allows(now)) break;
    Ctrl notice;
    notice.type = Ctrl::kWriteImm;
    notice.seq = w.imm;
    notice.len = w.length;
    if (!append(pl, w.region, w.offset, w.length, w.remote.addr + w.remote_offset, static_cast<uint32_t>(w.remote.rkey),
                false, 0, w.with_imm ? &notice : nullptr)) {
      if (pl.n == 0 || !flush(pl)) break;
      continue;
    }
    paced(w.length, now);
    ops_.push(Op{w.context, w.length, 0, grex::Op::kWrite, Status::kSuccess, sq_posted_ + pl.n});
    dev_->stats.writes.add();
    dev_->stats.bytes_sent.add(w.length);
    writes_.pop();
  }
  if (probe_due_ && pl.n < kBatch && sq_room() > pl.n) append_probe(pl);
  return flush(pl);
}

// A signalled zero-length RDMA WRITE: no address or key is needed for zero
// bytes (IBTA C9-88); its completion means the responder's ACK came back.
bool VerbsEndpoint::append_probe(PostList& pl) noexcept {
  ibv_send_wr& w = pl.wrs[pl.n];
  w = ibv_send_wr{};
  w.opcode = IBV_WR_RDMA_WRITE;
  w.send_flags = IBV_SEND_SIGNALED;
  w.wr_id = wr_id(id_, kSqMark, sq_posted_ + pl.n + 1);
  probe_sq_ = sq_posted_ + pl.n + 1;
  probe_post_ns_ = now_ns();
  probe_ahead_bytes_ = sq_bytes_;
  probe_seq_ = probes_.seq();
  probe_due_ = false;
  ++cc_stats_.probes_sent;
  ++pl.n;
  return true;
}

void VerbsEndpoint::repost_recv(uint32_t slot) noexcept {
  ibv_sge sge{reinterpret_cast<uint64_t>(&rx_slots_[slot]), sizeof(Ctrl), rx_mr_->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = wr_id(id_, kRecvSlot, slot);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  if (int e = ibv_post_recv(qp_, &wr, &bad); e != 0 && !failed_)
    fail(Status::kLocalError, std::string("ibv_post_recv: ") + std::strerror(e));
}

}  // namespace grex::verbs
