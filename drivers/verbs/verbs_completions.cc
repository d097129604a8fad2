// SPDX-License-Identifier: Apache-2.0
// Verbs driver fast path, the completion side: send and receive work
// completions (control messages, rendezvous writes, eager messages), failing
// an endpoint, and the device's poll.
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

void VerbsEndpoint::complete(const Completion& c) noexcept { dev_->push_completion(c); }

void VerbsEndpoint::on_send_wc(const ibv_wc& wc) noexcept {
  if (wc.status != IBV_WC_SUCCESS) {
    if (failed_) return;  // flushed after the first error
    dev_->stats.wc_errors.add();
    Status st = status_of(wc.status);
    const Op* head = !ops_.empty() && ops_.front().sq_seq >= wr_value(wc.wr_id) ? &ops_.front() : nullptr;
    // A tagged send writes into a buffer the peer advertised: its rkey being
    // refused means the peer tore its memory down, i.e. it exited or died
    // (its registrations go before its queue pair). Only a one-sided write
    // names a key the user chose.
    if (st == Status::kRemoteAccess && (head == nullptr || head->op == grex::Op::kSend)) st = Status::kPeerGone;
    if (head != nullptr) {  // the failing request gets the precise status
      const Op& o = *head;
      complete(Completion{o.context, 0, o.op == grex::Op::kSend ? o.tag : 0, peer_, 0, o.op, st});
      ops_.pop();
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
  while (!ops_.empty() && ops_.front().sq_seq <= sq_done_) {
    const Op& o = ops_.front();
    sq_bytes_ -= std::min(sq_bytes_, o.bytes);
    complete(Completion{o.context, o.bytes, o.op == grex::Op::kSend ? o.tag : 0, peer_, 0, o.op, o.status});
    ops_.pop();
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
  const bool with_imm = wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM;
  const Arrival a = classify_arrival(with_imm, with_imm ? ntohl(wc.imm_data) : 0, wc.byte_len);
  if (a.kind == Arrival::kEager) {  // an eager message in our ring
    on_eager(a.value, wc.byte_len);
    return;
  }
  if (a.kind == Arrival::kRendezvous) {
    // A message landed in one of our advertised receives: the oldest of its tag.
    const uint32_t seq = a.value;
    Recv& r = recvs_[seq & (recvs_.size() - 1)];
    const uint32_t* head = r.used ? pending_.front(r.req.tag) : nullptr;
    if (!r.used || r.done || !r.advertised || (r.seq & kSeqMask) != seq || head == nullptr || *head != r.seq ||
        wc.byte_len > r.req.length) {
      fail(Status::kLocalError, "protocol: a write named receive " + std::to_string(seq) + " that is not pending");
      return;
    }
    pending_.pop(r.req.tag);
    r.done = true;
    close_window(r);
    dev_->stats.recvs.add();
    dev_->stats.bytes_received.add(wc.byte_len);
    complete(Completion{r.req.context, wc.byte_len, r.req.tag, peer_, 0, grex::Op::kRecv,
                        a.truncated ? Status::kTruncated : Status::kSuccess});
    while (recv_head_ != recv_next_ && recvs_[recv_head_ & (recvs_.size() - 1)].done) {
      recvs_[recv_head_ & (recvs_.size() - 1)].used = false;
      ++recv_head_;
    }
    return;
  }
  if (a.kind != Arrival::kControl || wc.opcode != IBV_WC_RECV || c == nullptr) {
    fail(Status::kLocalError, "protocol: a control message of " + std::to_string(wc.byte_len) + " bytes");
    return;
  }
  switch (c->type) {
    case Ctrl::kAdvert:
      if (adverts_.full() || ready_.size() + 2 > ready_.capacity()) {
        fail(Status::kLocalError, "protocol: advert " + std::to_string(c->seq) + " beyond the receives it may have");
        return;
      }
      take_advert(*c);
      match_sends();
      return;
    case Ctrl::kWant: {
      // The send heading the peer's queue for this tag has no advert: it
      // takes our oldest receive of the tag not yet matched. Advertised ones
      // are on their way to it; else advertise the oldest silent one, or the
      // next one posted.
      const uint32_t* seq = pending_.find_if(c->tag, [&](uint32_t s) {
        return !recvs_[s & (recvs_.size() - 1)].advertised;
      });
      if (seq != nullptr) {
        queue_advert(*seq);
        post_pending_ctrls();
      } else if (pending_.front(c->tag) == nullptr && !wants_.push(c->tag, 1)) {
        fail(Status::kLocalError, "protocol: more advert requests than the peer may have sends");
      }
      return;
    }
    case Ctrl::kCredit:
      on_peer_credit(c->eagers, c->freed);
      resume_eager();
      dev_->stats.credits.add();
      if (!ready_.empty()) match_sends();
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
  for (; !ops_.empty(); ops_.pop()) {
    const Op& o = ops_.front();
    complete(Completion{o.context, 0, o.op == grex::Op::kSend ? o.tag : 0, peer_, 0, o.op, why});
  }
  for (; !ready_.empty(); ready_.pop()) {
    if (ready_.front().kind == Ready::kWant) continue;
    const SendRequest& s = ready_.front().send;
    complete(Completion{s.context, 0, s.tag, peer_, 0, grex::Op::kSend, why});
  }
  sends_.drain([&](uint64_t, const SendRequest& s) {
    complete(Completion{s.context, 0, s.tag, peer_, 0, grex::Op::kSend, why});
  });
  for (; !writes_.empty(); writes_.pop())
    complete(Completion{writes_.front().context, 0, 0, peer_, 0, grex::Op::kWrite, why});
  for (uint32_t s = recv_head_; s != recv_next_; ++s) {
    Recv& r = recvs_[s & (recvs_.size() - 1)];
    if (r.used && !r.done) complete(Completion{r.req.context, 0, r.req.tag, peer_, 0, grex::Op::kRecv, why});
    r.used = false;
  }
  recv_head_ = recv_next_;
  pending_.clear();
  unexpected_.clear();
  wants_.clear();
  adverts_.clear();
  eagers_out_.clear();
  credit_waiters_.clear();
  ctrl_out_.clear();
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
  size_t room = done_.capacity() - done_.size();
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
          if (int e = ibv_post_srq_recv(srq_, &wr, &bad); e != 0) {
            // The shared queue runs dry for every peer: fail them all, loudly.
            const std::string why = std::string("ibv_post_srq_recv: ") + std::strerror(e);
            for (VerbsEndpoint* other : eps_)
              if (other != nullptr) other->fail(Status::kLocalError, why);
          }
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
  while (k < out.size() && !done_.empty()) {
    out[k++] = done_.front();
    done_.pop();
  }
  return k;
}

}  // namespace grex::verbs
