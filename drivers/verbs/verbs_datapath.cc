// SPDX-License-Identifier: Apache-2.0
// Verbs driver fast path: receive adverts, matching sends to them, RDMA
// WRITE (WITH IMMEDIATE) straight into the peer's buffer, selective
// signalling, batched post lists, completion processing and failures.
#include <arpa/inet.h>
#include <poll.h>

#include <algorithm>
#include <cstring>

#include "core/clock.h"
#include "core/log.h"
#include "drivers/verbs/verbs_device.h"

namespace grex::verbs {
namespace {

constexpr const char* kSubsys = "verbs";
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "Ctrl is sent in host order");

constexpr uint64_t kMaxChunk = uint64_t{1} << 30;  // bytes per RDMA WRITE (below every NIC's max_msg_sz)
constexpr uint32_t kTruncBit = 0x80000000u;
constexpr int kBatch = 32;  // work requests per post list

uint32_t chunks(uint64_t len) { return len == 0 ? 1 : static_cast<uint32_t>((len + kMaxChunk - 1) / kMaxChunk); }

bool bad_range(const MemoryRegion* r, uint64_t off, uint64_t len) {
  return len > 0 && (r == nullptr || off > r->length() || len > r->length() - off);
}

Status status_of(ibv_wc_status s) {
  switch (s) {
    case IBV_WC_RETRY_EXC_ERR:
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return Status::kPeerGone;
    case IBV_WC_REM_ACCESS_ERR:
    case IBV_WC_REM_INV_REQ_ERR:
      return Status::kRemoteAccess;
    case IBV_WC_WR_FLUSH_ERR:
      return Status::kCancelled;
    default:
      return Status::kLocalError;
  }
}

}  // namespace

// ---------------------------------------------------------------- posting

PostResult VerbsEndpoint::post_recv(std::span<const RecvRequest> reqs) noexcept {
  size_t n = 0;
  for (const auto& r : reqs) {
    if (failed_) break;
    if (recv_next_ - recv_head_ >= recvs_.size()) break;
    uint32_t seq = recv_next_++;
    Recv& x = recvs_[seq & (recvs_.size() - 1)];
    x = Recv{r, seq, true, false};
    if (bad_range(r.region, r.offset, r.length)) {  // never advertised
      x.done = true;
      dev_->push_completion(Completion{r.context, 0, r.tag, peer_, 0, grex::Op::kRecv, Status::kLocalError});
    }
    ++n;
  }
  progress();
  return {n, n < reqs.size() && failed_ ? Errc::kPeerFailed : Errc::kOk};
}

PostResult VerbsEndpoint::post_send(std::span<const SendRequest> reqs) noexcept {
  size_t n = 0;
  for (const auto& s : reqs) {
    if (failed_ || sends_n_ == sends_.size()) break;
    if (bad_range(s.region, s.offset, s.length)) {  // fails before it could consume an advert
      dev_->push_completion(Completion{s.context, 0, s.tag, peer_, 0, grex::Op::kSend, Status::kLocalError});
    } else {
      sends_[(sends_head_ + sends_n_++) % sends_.size()] = s;
    }
    ++n;
  }
  progress();
  return {n, n < reqs.size() && failed_ ? Errc::kPeerFailed : Errc::kOk};
}

PostResult VerbsEndpoint::post_write(std::span<const WriteRequest> reqs) noexcept {
  size_t n = 0;
  for (const auto& w : reqs) {
    if (failed_ || writes_n_ == writes_.size()) break;
    if (bad_range(w.region, w.offset, w.length)) {
      dev_->push_completion(Completion{w.context, 0, 0, peer_, 0, grex::Op::kWrite, Status::kLocalError});
    } else if (w.remote_offset > w.remote.length || w.length > w.remote.length - w.remote_offset) {
      // Checked here so a bad range never reaches the NIC (where it would
      // break the queue pair for every later request).
      dev_->push_completion(Completion{w.context, 0, 0, peer_, 0, grex::Op::kWrite, Status::kRemoteAccess});
    } else {
      writes_[(writes_head_ + writes_n_++) % writes_.size()] = w;
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
  post_adverts();
  match_sends();
  post_writes();
}

// Control SENDs in one post list; unsignalled, except one in every quarter
// of the send queue so its slots can be reclaimed. Inline when the QP allows.
bool VerbsEndpoint::post_ctrls(const Ctrl* cs, uint32_t n) noexcept {
  if (n == 0) return true;
  if (sq_room() < n || n > kBatch) return false;
  ibv_send_wr wrs[kBatch];
  ibv_sge sges[kBatch];
  for (uint32_t k = 0; k < n; ++k) {
    ibv_send_wr& wr = wrs[k];
    wr = ibv_send_wr{};
    wr.opcode = IBV_WR_SEND;
    wr.sg_list = &sges[k];
    wr.num_sge = 1;
    wr.next = k + 1 < n ? &wrs[k + 1] : nullptr;
    if (max_inline_ >= sizeof(Ctrl)) {
      sges[k] = {reinterpret_cast<uint64_t>(&cs[k]), sizeof(Ctrl), 0};
      wr.send_flags = IBV_SEND_INLINE;
    } else {
      Ctrl& slot = tx_slots_[(sq_posted_ + k) % tx_slots_.size()];
      slot = cs[k];
      sges[k] = {reinterpret_cast<uint64_t>(&slot), sizeof(Ctrl), tx_mr_->lkey};
    }
    wr.wr_id = wr_id(id_, kSqMark, sq_posted_ + k + 1);  // also names us in an error completion
    if (++unsignalled_ >= sq_depth_ / 4) {
      wr.send_flags |= IBV_SEND_SIGNALED;
      unsignalled_ = 0;
    }
  }
  ibv_send_wr* bad = nullptr;
  if (int e = ibv_post_send(qp_, wrs, &bad); e != 0) {
    fail(Status::kLocalError, std::string("ibv_post_send (control): ") + std::strerror(e));
    return false;
  }
  sq_posted_ += n;
  dev_->stats.wr_posted.add(n);
  if (max_inline_ >= sizeof(Ctrl)) dev_->stats.inline_sends.add(n);
  return true;
}

// Advertises posted receives, up to a post list at a time.
bool VerbsEndpoint::post_adverts() noexcept {
  while (advertised_ != recv_next_) {
    Ctrl batch[kBatch];
    uint32_t n = 0;
    uint32_t seq = advertised_;
    uint32_t room = std::min<uint32_t>(sq_room(), kBatch);
    for (; seq != recv_next_ && n < room; ++seq) {
      const Recv& r = recvs_[seq & (recvs_.size() - 1)];
      if (r.done) continue;  // failed locally, never advertised
      Ctrl& c = batch[n++];
      c = Ctrl{};
      c.type = Ctrl::kAdvert;
      c.seq = r.seq;
      c.tag = r.req.tag;
      c.len = r.req.length;
      c.addr = r.req.region != nullptr ? reinterpret_cast<uint64_t>(r.req.region->addr()) + r.req.offset : 0;
      c.rkey = r.req.region != nullptr ? static_cast<uint32_t>(r.req.region->remote().rkey) : 0;
    }
    if (n == 0 && seq == advertised_) return false;  // no send-queue room
    if (!post_ctrls(batch, n)) return false;
    dev_->stats.adverts.add(n);
    advertised_ = seq;
  }
  return true;
}

// Work requests gathered for one ibv_post_send. Control messages sent inline
// live here until the post (the NIC copies them then).
struct VerbsEndpoint::PostList {
  ibv_send_wr wrs[kBatch];  // filled as appended: nothing to zero up front
  ibv_sge sges[kBatch];
  Ctrl* ctrls;              // the endpoint's inline control storage
  uint32_t n = 0;
};

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
      pl.sges[k] = {reinterpret_cast<uint64_t>(mr->addr()) + off + done, static_cast<uint32_t>(piece),
                    static_cast<uint32_t>(mr->lkey())};
      w.sg_list = &pl.sges[k];
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
      pl.sges[k] = {reinterpret_cast<uint64_t>(&pl.ctrls[k]), sizeof(Ctrl), 0};
      w.send_flags = IBV_SEND_INLINE;
    } else {
      Ctrl& slot = tx_slots_[(sq_posted_ + k) % tx_slots_.size()];
      slot = *then;
      pl.sges[k] = {reinterpret_cast<uint64_t>(&slot), sizeof(Ctrl), tx_mr_->lkey};
    }
    w.sg_list = &pl.sges[k];
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
    pl.n = 0;
    return false;
  }
  sq_posted_ += pl.n;
  dev_->stats.wr_posted.add(pl.n);
  pl.n = 0;
  return true;
}

// Each posted send, oldest first, takes the oldest advert with its tag and
// is written straight into that receive buffer; several per post list.
bool VerbsEndpoint::match_sends() noexcept {
  if (sends_n_ == 0 || adverts_n_ == 0) return true;
  const uint64_t now = dev_->vopts().cc != nullptr ? now_ns() : 0;
  PostList pl;
  pl.ctrls = post_ctrls_;
  for (size_t i = 0; i < sends_n_ && !failed_;) {
    SendRequest& s = sends_[(sends_head_ + i) % sends_.size()];
    size_t k = 0;
    while (k < adverts_n_ && adverts_[(adverts_head_ + k) % adverts_.size()].tag != s.tag) ++k;
    if (k == adverts_n_) {
      ++i;
      continue;
    }
    const Advert a = adverts_[(adverts_head_ + k) % adverts_.size()];
    const uint64_t len = std::min<uint64_t>(s.length, a.len);  // the receiver reports truncation
    const uint32_t imm = (a.seq & ~kTruncBit) | (s.length > a.len ? kTruncBit : 0);
    if (ops_n_ == ops_.size()) break;
    if (!pace_allows(now)) break;  // the congestion controller's rate: retry on a later poll
    if (!append(pl, s.region, s.offset, len, a.addr, a.rkey, true, imm, nullptr)) {
      if (pl.n == 0 || !flush(pl)) break;  // no send-queue room: the order per tag holds, retry on the next poll
      continue;
    }
    paced(len, now);
    ops_[(ops_head_ + ops_n_++) % ops_.size()] =
        Op{s.context, len, s.tag, grex::Op::kSend, Status::kSuccess, sq_posted_ + pl.n};
    dev_->stats.sends.add();
    dev_->stats.bytes_sent.add(len);
    for (size_t j = k; j + 1 < adverts_n_; ++j)
      adverts_[(adverts_head_ + j) % adverts_.size()] = adverts_[(adverts_head_ + j + 1) % adverts_.size()];
    --adverts_n_;
    for (size_t j = i; j + 1 < sends_n_; ++j)
      sends_[(sends_head_ + j) % sends_.size()] = sends_[(sends_head_ + j + 1) % sends_.size()];
    --sends_n_;
  }
  if (probe_due_ && pl.n < kBatch && sq_room() > pl.n) append_probe(pl);
  return flush(pl);
}

bool VerbsEndpoint::post_writes() noexcept {
  if (writes_n_ == 0) return true;
  const uint64_t now = dev_->vopts().cc != nullptr ? now_ns() : 0;
  PostList pl;
  pl.ctrls = post_ctrls_;
  while (writes_n_ > 0 && !failed_) {
    const WriteRequest& w = writes_[writes_head_];
    if (ops_n_ == ops_.size()) break;
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
    ops_[(ops_head_ + ops_n_++) % ops_.size()] =
        Op{w.context, w.length, 0, grex::Op::kWrite, Status::kSuccess, sq_posted_ + pl.n};
    dev_->stats.writes.add();
    dev_->stats.bytes_sent.add(w.length);
    writes_head_ = (writes_head_ + 1) % writes_.size();
    --writes_n_;
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

// ---------------------------------------------------------------- completions

void VerbsEndpoint::complete(const Completion& c) noexcept { dev_->push_completion(c); }

void VerbsEndpoint::on_send_wc(const ibv_wc& wc) noexcept {
  if (wc.status != IBV_WC_SUCCESS) {
    if (failed_) return;  // flushed after the first error
    dev_->stats.wc_errors.add();
    Status st = status_of(wc.status);
    const Op* head = ops_n_ > 0 && ops_[ops_head_].sq_seq >= wr_value(wc.wr_id) ? &ops_[ops_head_] : nullptr;
    // A tagged send writes into a buffer the peer advertised: its rkey being
    // refused means the peer tore its memory down, i.e. it exited or died
    // (its registrations go before its queue pair). Only a one-sided write
    // names a key the user chose.
    if (st == Status::kRemoteAccess && (head == nullptr || head->op == grex::Op::kSend)) st = Status::kPeerGone;
    if (head != nullptr) {  // the failing request gets the precise status
      const Op& o = *head;
      complete(Completion{o.context, 0, o.op == grex::Op::kSend ? o.tag : 0, peer_, 0, o.op, st});
      ops_head_ = (ops_head_ + 1) % ops_.size();
      --ops_n_;
    }
    std::string why = std::string(ibv_wc_status_str(wc.status)) + " (vendor error " + std::to_string(wc.vendor_err) +
                      ")";
    if (wc.status == IBV_WC_RETRY_EXC_ERR || wc.status == IBV_WC_RNR_RETRY_EXC_ERR)
      why += ": transport retries exhausted; the peer is dead or unreachable (check its process, the port state, "
             "GID index " + std::to_string(dev_->vopts().gid_index) + " and path MTU " + std::to_string(path_mtu_) + ")";
    else if (st == Status::kPeerGone)
      why += ": the peer's receive buffer is gone; it exited or died";
    fail(st == Status::kRemoteAccess ? Status::kCancelled : st, why);
    return;
  }
  sq_done_ = std::max<uint64_t>(sq_done_, wr_value(wc.wr_id));  // in order: everything before it is done too
  if (probe_sq_ != 0 && sq_done_ >= probe_sq_) on_probe_done(now_ns());
  while (ops_n_ > 0 && ops_[ops_head_].sq_seq <= sq_done_) {
    Op& o = ops_[ops_head_];
    sq_bytes_ -= std::min(sq_bytes_, o.bytes);
    complete(Completion{o.context, o.bytes, o.op == grex::Op::kSend ? o.tag : 0, peer_, 0, o.op, o.status});
    ops_head_ = (ops_head_ + 1) % ops_.size();
    --ops_n_;
  }
}

void VerbsEndpoint::on_recv_wc(const ibv_wc& wc, const Ctrl* c) noexcept {
  if (failed_) return;
  if (wc.status != IBV_WC_SUCCESS) {
    if (wc.status == IBV_WC_WR_FLUSH_ERR) return;
    dev_->stats.wc_errors.add();
    fail(status_of(wc.status), std::string("receive: ") + ibv_wc_status_str(wc.status));
    return;
  }
  if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
    // A message landed in one of our advertised receives.
    uint32_t imm = ntohl(wc.imm_data);
    uint32_t seq = imm & ~kTruncBit;
    Recv& r = recvs_[seq & (recvs_.size() - 1)];
    if (!r.used || r.done || (r.seq & ~kTruncBit) != seq || wc.byte_len > r.req.length) {
      fail(Status::kLocalError, "protocol: a write named receive " + std::to_string(seq) + " that is not pending");
      return;
    }
    r.done = true;
    dev_->stats.recvs.add();
    dev_->stats.bytes_received.add(wc.byte_len);
    complete(Completion{r.req.context, wc.byte_len, r.req.tag, peer_, 0, grex::Op::kRecv,
                        (imm & kTruncBit) != 0 ? Status::kTruncated : Status::kSuccess});
    while (recv_head_ != recv_next_ && recvs_[recv_head_ & (recvs_.size() - 1)].done) {
      recvs_[recv_head_ & (recvs_.size() - 1)].used = false;
      ++recv_head_;
    }
    return;
  }
  if (wc.opcode != IBV_WC_RECV || wc.byte_len != sizeof(Ctrl) || c == nullptr) {
    fail(Status::kLocalError, "protocol: a control message of " + std::to_string(wc.byte_len) + " bytes");
    return;
  }
  switch (c->type) {
    case Ctrl::kAdvert:
      // RC delivers adverts in order: each must be the next one.
      if (c->seq != advert_expected_ || adverts_n_ == adverts_.size()) {
        fail(Status::kLocalError, "protocol: advert " + std::to_string(c->seq) + ", expected " +
                                      std::to_string(advert_expected_));
        return;
      }
      ++advert_expected_;
      adverts_[(adverts_head_ + adverts_n_++) % adverts_.size()] = Advert{c->seq, c->tag, c->addr, c->len, c->rkey};
      match_sends();
      return;
    case Ctrl::kWriteImm:
      dev_->stats.remote_writes.add();
      dev_->stats.bytes_received.add(c->len);
      complete(Completion{0, c->len, 0, peer_, c->seq, grex::Op::kRemoteWrite, Status::kSuccess});
      return;
    case Ctrl::kAbort:
      abort_culprit_ = static_cast<int>(c->seq) - 1;
      fail(Status::kPeerGone, "the peer aborted the job (culprit rank " + std::to_string(abort_culprit_) + ")");
      return;
    default:
      fail(Status::kLocalError, "protocol: unknown control message type " + std::to_string(c->type));
  }
}

// Fails every pending request with `why` and stops the queue pair (no more
// DMA into or out of user buffers).
void VerbsEndpoint::fail(Status why, const std::string& reason) noexcept {
  if (failed_) return;
  failed_ = true;
  GREX_WARN(kSubsys, "connection to %s failed: %s", describe_peer().c_str(), reason.c_str());
  if (qp_ != nullptr) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_ERR;
    ibv_modify_qp(qp_, &a, IBV_QP_STATE);
  }
  for (; ops_n_ > 0; --ops_n_, ops_head_ = (ops_head_ + 1) % ops_.size()) {
    const Op& o = ops_[ops_head_];
    complete(Completion{o.context, 0, o.op == grex::Op::kSend ? o.tag : 0, peer_, 0, o.op, why});
  }
  for (; sends_n_ > 0; --sends_n_, sends_head_ = (sends_head_ + 1) % sends_.size()) {
    const SendRequest& s = sends_[sends_head_];
    complete(Completion{s.context, 0, s.tag, peer_, 0, grex::Op::kSend, why});
  }
  for (; writes_n_ > 0; --writes_n_, writes_head_ = (writes_head_ + 1) % writes_.size())
    complete(Completion{writes_[writes_head_].context, 0, 0, peer_, 0, grex::Op::kWrite, why});
  for (uint32_t s = recv_head_; s != recv_next_; ++s) {
    Recv& r = recvs_[s & (recvs_.size() - 1)];
    if (r.used && !r.done) complete(Completion{r.req.context, 0, r.req.tag, peer_, 0, grex::Op::kRecv, why});
    r.used = false;
  }
  recv_head_ = advertised_ = recv_next_;
}

size_t VerbsDevice::poll(std::span<Completion> out) noexcept {
  // Disconnects and async events, every few milliseconds: one poll(2) on
  // both channels, and the reads only when something is there.
  if ((++polls_ & 127) == 0) {
    uint64_t t = now_ns();
    if (t - events_ns_ > 5'000'000) {
      events_ns_ = t;
      pollfd fds[2] = {{ec_->fd, POLLIN, 0}, {ctx_->async_fd, POLLIN, 0}};
      if (::poll(fds, 2, 0) > 0) poll_events();
    }
  }
  // Process at most what the completion ring can still hold (each work
  // completion makes at most one Completion).
  size_t room = done_.size() - done_n_;
  bool cq_empty = false;
  if (room > 0) {
    ibv_wc wcs[32];
    const int want = static_cast<int>(std::min<size_t>(32, room));
    int n = ibv_poll_cq(cq_, want, wcs);
    cq_empty = n < want;
    if (n > 0) stats.wc_polled.add(static_cast<uint64_t>(n));
    for (int i = 0; i < n; ++i) {
      const ibv_wc& wc = wcs[i];
      const bool recv = wr_kind(wc.wr_id) == kRecvSlot;
      if (!recv) {
        uint16_t id = wr_ep(wc.wr_id);
        if (id < eps_.size() && eps_[id] != nullptr) eps_[id]->on_send_wc(wc);
        continue;
      }
      VerbsEndpoint* ep = srq_ != nullptr ? by_qp(wc.qp_num) : nullptr;
      if (srq_ == nullptr) {
        uint16_t id = wr_ep(wc.wr_id);
        ep = id < eps_.size() ? eps_[id] : nullptr;
      }
      const uint64_t slot = wr_value(wc.wr_id);
      if (srq_ != nullptr) {
        if (ep != nullptr) ep->on_recv_wc(wc, slot < srq_slots_.size() ? &srq_slots_[slot] : nullptr);
        if (wc.status != IBV_WC_WR_FLUSH_ERR && slot < srq_slots_.size()) {
          ibv_sge sge{reinterpret_cast<uint64_t>(&srq_slots_[slot]), sizeof(Ctrl), srq_mr_->lkey};
          ibv_recv_wr wr{};
          wr.wr_id = wr_id(0, kRecvSlot, slot);
          wr.sg_list = &sge;
          wr.num_sge = 1;
          ibv_recv_wr* bad = nullptr;
          ibv_post_srq_recv(srq_, &wr, &bad);
        }
      } else if (ep != nullptr) {
        ep->on_recv_wc(wc, slot < ep->rx_slots_.size() ? &ep->rx_slots_[slot] : nullptr);
        if (!ep->failed_ && wc.status == IBV_WC_SUCCESS && slot < ep->rx_slots_.size())
          ep->repost_recv(static_cast<uint32_t>(slot));
      }
    }
  }
  for (VerbsEndpoint* ep : eps_) {
    if (ep == nullptr) continue;
    if (ep->disconnected_ && cq_empty && !ep->failed_)
      ep->fail(Status::kPeerGone, "the connection was closed (the peer exited or died)");
    if (ep->has_work()) ep->progress();
  }
  size_t k = 0;
  while (k < out.size() && done_n_ > 0) {
    out[k++] = done_[done_head_];
    done_head_ = (done_head_ + 1) % done_.size();
    --done_n_;
  }
  return k;
}

}  // namespace grex::verbs
