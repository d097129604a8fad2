// SPDX-License-Identifier: Apache-2.0
// Reliable flow, receiving side: receive advertisements, duplicate
// suppression by PSN, placement at (message, offset), ACK/NACK generation,
// timing-probe echoes.
#include <algorithm>
#include <cstring>

#include <cmath>

#include "transport/reliable_flow.h"

namespace grex::reliable {

bool Flow::post_recv(const RecvRequest& r) noexcept {
  if (failed_ || recv_next_ - recv_head_ >= recvs_.size() || tx_n_ >= txmsgs_.size() - 1) return false;
  uint32_t seq = recv_next_++;
  RxRecv& x = recvs_[seq % recvs_.size()];
  x = RxRecv{};
  x.req = r;
  x.used = true;
  x.tag = r.tag;
  if (!request_in_bounds(r.region, r.offset, r.length)) {
    x.done = true;
    x.status = Status::kLocalError;
    ++recv_ready_;
    return true;  // reported by poll_completions; never advertised
  }
  // Advertise it: a reliable, payload-free kData the peer matches sends against.
  TxMsg& m = txmsgs_[(tx_head_ + tx_n_++) % txmsgs_.size()];
  m = TxMsg{};
  m.kind = Kind::kAdvert;
  m.msg_id = seq;
  m.base_offset = next_advert_ordinal_++;
  m.wire_len = r.length;
  m.tag = r.tag;
  return true;
}

bool Flow::rx_seen(uint32_t psn) const noexcept {
  uint32_t d = psn - rcv_nxt_;
  return (rcv_bits_[(psn % span_) / 64] >> (psn % 64)) & 1 && d < span_;
}

void Flow::rx_mark(uint32_t psn) noexcept { rcv_bits_[(psn % span_) / 64] |= 1ull << (psn % 64); }

uint64_t Flow::sack_bits() const noexcept {
  if (rx_above_ == 0) return 0;  // nothing arrived above the hole: the common case
  uint64_t bits = 0;
  for (uint32_t i = 0; i < 64 && i + 1 < span_; ++i) {
    uint32_t psn = rcv_nxt_ + 1 + i;
    if ((rcv_bits_[(psn % span_) / 64] >> (psn % 64)) & 1) bits |= 1ull << i;
  }
  return bits;
}

void Flow::on_packet(const wire::Header& h, const uint8_t* payload, uint64_t now_ns, uint64_t rx_gap_ns,
                     bool ack_trusted) noexcept {
  if (failed_) return;
  last_rx_ns_ = now_ns;
  rx_gap_ns_ = rx_gap_ns;
  switch (h.type) {
    case wire::Type::kData:
      if (ack_trusted) on_ack(h, false, now_ns);
      on_data(h, payload, now_ns);
      break;
    case wire::Type::kAck:
      ++stats_.acks_received;
      peer_reorder_ = std::min(h.msg_id, span_ / 2);
      if ((h.offset & wire::kGrantBit) != 0) on_grant(h.offset);
      peer_wants_credit_ = h.msg_len != 0;
      if (h.timestamp != 0 && h.timestamp <= now_ns && now_ns - h.timestamp < cfg_.give_up_ns) {
        ++stats_.ack_rtt_samples;
        if (cfg_.rto_from_acks) rto_sample(static_cast<double>(now_ns - h.timestamp));  // wait included: the RTO covers it
      }
      if (rto_open_) judge_timeout(h, now_ns);
      on_ack(h, true, now_ns);
      break;
    case wire::Type::kNack:
      ++stats_.nacks_received;
      if (pacer_.active()) pacer_->on_nack(now_ns);
      on_nack(h, now_ns);
      break;
    case wire::Type::kTimingReq:
    case wire::Type::kTimingResp:
      on_timing(h, now_ns);
      break;
    case wire::Type::kClose:
      if ((h.flags & wire::kFlagAbort) != 0 && h.msg_id > 0) abort_culprit_ = static_cast<int>(h.msg_id) - 1;
      on_ack(h, false, now_ns);  // what it received completes first
      fail_all(Status::kPeerGone);
      break;
    case wire::Type::kConnect:
    case wire::Type::kConnectAck:
      break;  // handled by the driver before the flow exists
  }
}

// The first ACK past the packet of the latest RTO judges it: the RTO was
// the hosts' doing when, less the receiver's gap in reading its ring, the
// ACK's wait there and our own gap in reading ours, the packet would have
// been acknowledged within the RTO. A packet that was lost instead left a
// hole the receiver saw and NACKed (on one path at once), and the NACK
// reaches the controller whatever this says.
void Flow::judge_timeout(const wire::Header& h, uint64_t now_ns) noexcept {
  if (static_cast<int32_t>(h.ack - rto_psn_) <= 0) return;
  rto_open_ = false;
  const uint64_t peer = peer_gap(h.remote) + std::min(h.tag, cfg_.give_up_ns);
  const uint64_t late = now_ns - rto_sent_ns_, hosts = peer + rx_gap_ns_;
  if (h.remote + rx_gap_ns_ == 0 || late - std::min(late, hosts) > rto_was_ns_) return;
  ++stats_.spurious_timeouts;
  if (pacer_.active()) pacer_->on_spurious_timeout(now_ns);
}

void Flow::on_data(const wire::Header& h, const uint8_t* payload, uint64_t now_ns) noexcept {
  uint32_t d = h.psn - rcv_nxt_;
  if (static_cast<int32_t>(d) < 0 || rx_seen(h.psn)) {
    ++stats_.duplicates;
    ack_due_ = true;  // our ACK may have been lost: repeat it
    return;
  }
  if (d >= span_) {
    ++stats_.out_of_window;
    return;
  }
  if ((h.flags & wire::kFlagImm) != 0 && done_.full()) {
    // No room for the completion it may raise: leave it unreceived; the
    // sender repeats it once the application has polled.
    ++stats_.rx_backpressure;
    return;
  }
  rx_mark(h.psn);
  if (d != 0) ++rx_above_;
  if (cfg_.reorder_packets != 0 && h.seq != 0) measure_reordering(h.seq);
  if ((h.flags & wire::kFlagAdvert) == 0) {  // credits count data packets, first arrivals
    ++data_rcvd_;
    data_rx_ns_ = now_ns;
    // Sent before our first grant reached the peer: what it used is granted.
    if (static_cast<int32_t>(data_rcvd_ - grant_limit_) > 0) grant_limit_ = data_rcvd_;
  }
  // The ACK echoes the newest packet, unless one since the last ACK filled
  // the hole at the cumulative point while later packets waited above it:
  // that one was overtaken, and the path that held it back (a slow link's
  // queue) is seldom the newest, so its own RTT would hardly ever be seen.
  const bool late = d == 0 && rx_above_ > 0;
  if (late || !echo_late_) {
    echo_psn_ = h.psn;
    echo_ts_ = h.timestamp;
    echo_rx_ns_ = now_ns;
    echo_late_ = late;
  }
  echo_gap_ns_ = std::max(echo_gap_ns_, rx_gap_ns_);
  // A psn beyond the highest seen opens a gap: on an in-order link (memif,
  // one queue) everything in it is lost. NACK the whole gap now, so every
  // hole is repaired one round trip after it appears, however far above the
  // ACK it lies. (Reordering costs a spurious resend, never correctness.)
  if (static_cast<int32_t>(rcv_high_ - rcv_nxt_) < 0) rcv_high_ = rcv_nxt_;
  // Where packets may arrive out of order, a gap is not yet a loss: the
  // oldest hole is asked for once the highest psn is far enough above it (below).
  if (static_cast<int32_t>(h.psn - rcv_high_) > 0 && cfg_.reorder_packets == 0) {
    wire::Header n = make_acking(wire::Type::kNack);
    n.psn = rcv_high_;
    n.msg_id = h.psn - rcv_high_;
    push_ctrl(n);
    ++stats_.nacks_sent;
    if (rcv_high_ == rcv_nxt_) {  // it names the oldest hole too: no second NACK for it below
      nacked_psn_ = rcv_nxt_;
      nack_ns_ = now_ns;
    }
  }
  if (static_cast<int32_t>(h.psn + 1 - rcv_high_) > 0) rcv_high_ = h.psn + 1;
  if ((h.flags & wire::kFlagAdvert) != 0) {
    on_advert(h, payload);
  } else if ((h.flags & wire::kFlagWrite) != 0) {
    place_write(h, payload);
  } else {
    place(h, payload);
  }
  // Advance the cumulative point over everything that has arrived.
  bool first = true;
  while ((rcv_bits_[(rcv_nxt_ % span_) / 64] >> (rcv_nxt_ % 64)) & 1) {
    rcv_bits_[(rcv_nxt_ % span_) / 64] &= ~(1ull << (rcv_nxt_ % 64));
    if (!first || d != 0) --rx_above_;  // every packet after the first was counted above
    first = false;
    ++rcv_nxt_;
  }
  if (sack_bits() != 0 && rcv_high_ - rcv_nxt_ > std::max(cfg_.reorder_packets, reorder_tolerance_)) {
    // Packets above a hole at rcv_nxt_ (beyond what reordering explains): ask
    // for it, once per rto_min per hole.
    if (nacked_psn_ != rcv_nxt_ || now_ns - nack_ns_ > cfg_.rto_min_ns) {
      wire::Header n = make_acking(wire::Type::kNack);
      n.psn = rcv_nxt_;
      push_ctrl(n);
      ++stats_.nacks_sent;
      nacked_psn_ = rcv_nxt_;
      nack_ns_ = now_ns;
    }
  }
  ack_due_ = true;
  if (++unacked_rx_ >= cfg_.ack_every) push_ack();
}

void Flow::on_advert(const wire::Header& h, const uint8_t* payload) noexcept {
  // Matching is first-in first-out per tag in the order receives were posted,
  // so adverts are admitted strictly by ordinal; early ones wait. The packet
  // names ordinals [offset, offset + 1 + entries): all must fit the window.
  const size_t extra = h.payload_len / wire::kAdvertEntryBytes;
  uint64_t d = h.offset - advert_expected_;
  if (h.offset < advert_expected_ || d >= early_.size() || extra >= early_.size() - d) {
    ++stats_.bad_placement;
    return;
  }
  early_[h.offset % early_.size()] = Advert{h.msg_id, h.msg_len, h.tag, true};
  for (size_t i = 0; i < extra; ++i) {
    const wire::AdvertEntry e = wire::decode_advert(payload, i);
    early_[(h.offset + 1 + i) % early_.size()] = Advert{e.seq, e.len, e.tag, true};
  }
  bool admitted = false;
  while (early_[advert_expected_ % early_.size()].held && !adverts_.full()) {
    Advert& a = early_[advert_expected_ % early_.size()];
    a.held = false;
    take_advert(a);
    ++advert_expected_;
    admitted = true;
  }
  if (admitted) match_sends();
}

void Flow::place(const wire::Header& h, const uint8_t* payload) noexcept {
  // msg_id names one of our receive sequences that the peer has seen advertised.
  uint32_t seq = h.msg_id;
  if (seq - recv_head_ >= recv_next_ - recv_head_) {
    ++stats_.bad_placement;  // not a live receive: drop (counted), never trusted
    return;
  }
  RxRecv& r = recvs_[seq % recvs_.size()];
  if (!r.used || r.done) {
    ++stats_.bad_placement;
    return;
  }
  if (r.msg_len == 0 && r.got == 0) {
    r.msg_len = h.msg_len;
    r.expect = std::min<uint64_t>(h.msg_len, r.req.length);
  } else if (r.msg_len != h.msg_len) {
    ++stats_.bad_placement;  // packets of one message disagree on its length
    return;
  }
  if (h.offset + h.payload_len > r.expect || !segment_fits(h, r.expect, r.got == 0, &r.base_psn)) {
    ++stats_.bad_placement;  // out of the buffer, or over bytes another psn carries
    return;
  }
  if (h.payload_len > 0)
    std::memcpy(static_cast<uint8_t*>(r.req.region->addr()) + r.req.offset + h.offset, payload, h.payload_len);
  r.got += h.payload_len;
  stats_.bytes_received += h.payload_len;
  if (r.got == r.expect) {
    r.done = true;
    r.status = h.msg_len > r.req.length ? Status::kTruncated : Status::kSuccess;
    ++recv_ready_;
  }
}

// A sender segments each message in order, max_payload bytes a packet under
// consecutive psns (reliable_tx.cc next_data), and both ends agree on
// max_payload (the driver's handshake): packet k of a message carries bytes
// [k * max_payload, ...) under psn base + k. A packet that says otherwise
// would overlap bytes another psn places (completing a receive early, or never).
bool Flow::segment_fits(const wire::Header& h, uint64_t len, bool first, uint32_t* base) const noexcept {
  const uint64_t mp = cfg_.max_payload;
  if (h.offset % mp != 0 || h.offset > len || h.payload_len != std::min<uint64_t>(mp, len - h.offset)) return false;
  const uint32_t b = h.psn - static_cast<uint32_t>(h.offset / mp);
  if (first) {
    *base = b;
    return true;
  }
  return *base == b;
}

void Flow::place_write(const wire::Header& h, const uint8_t* payload) noexcept {
  uint32_t rkey = static_cast<uint32_t>(h.tag >> 32);
  RxWrite& w = rxwrites_[h.msg_id % rxwrites_.size()];
  if (!w.used || w.msg_id != h.msg_id) w = RxWrite{h.msg_id, true, 0, h.msg_len, 0, 0, h.tag, h.flags};
  if (!segment_fits(h, w.len, w.got == 0, &w.base_psn)) {
    ++stats_.bad_placement;
    return;
  }
  if (h.payload_len > 0) {
    uint8_t* dst = regions_ != nullptr ? regions_->resolve(rkey, h.remote + h.offset, h.payload_len) : nullptr;
    if (dst == nullptr) {
      ++stats_.bad_placement;
      w.status = Status::kRemoteAccess;  // reported once, when the whole write has arrived
    } else {
      std::memcpy(dst, payload, h.payload_len);
    }
  }
  w.got += h.payload_len;
  stats_.bytes_received += h.payload_len;
  if (w.got >= w.len) {
    if ((w.flags & wire::kFlagImm) != 0)
      done_.push(Completion{0, w.len, 0, peer_, static_cast<uint32_t>(w.tag), Op::kRemoteWrite, w.status});
    w.used = false;
  }
}

void Flow::on_timing(const wire::Header& h, uint64_t now_ns) noexcept {
  if (h.type == wire::Type::kTimingReq) {
    // Answer at once: echo the sender's timestamp, our receive time, our byte count.
    wire::Header r = make(wire::Type::kTimingResp);
    r.psn = h.psn;
    r.timestamp = h.timestamp;
    r.offset = now_ns;
    r.tag = stats_.bytes_received;
    r.remote = rx_gap_ns_;  // the probe may have waited this long in our ring
    push_ctrl(r);
    return;
  }
  if (h.psn == 0 || h.msg_len < h.offset) return;  // a keepalive's reply, or bogus
  uint64_t dwell = h.msg_len - h.offset;
  uint64_t total = now_ns - h.timestamp;
  if (h.timestamp > now_ns || dwell > total) return;
  if (!probes_.on_reply(h.psn)) return;  // a duplicate, or older than a reply already taken
  stats_.last_rtt_ns = total - dwell;
  rto_sample(static_cast<double>(stats_.last_rtt_ns));  // the RTO covers the peer's gaps too
  if (stats_.rtt_samples == 0 || stats_.last_rtt_ns < stats_.min_rtt_ns) stats_.min_rtt_ns = stats_.last_rtt_ns;
  ++stats_.rtt_samples;
  // The hosts' gaps in reading their rings (the peer's before the probe,
  // ours before the reply: a compute phase, a preemption) go with the
  // sample: the controller must not read a host as a queue.
  const uint64_t gaps = peer_gap(h.remote) + rx_gap_ns_;
  if (2 * gaps >= stats_.last_rtt_ns) ++stats_.rtt_samples_stalled;
  // The controller acts on the forward path only. Where the peer sends us
  // data too (every ring step of a collective), the reply waits behind that
  // data on the way back, and an RTT counts the reverse queue as this
  // flow's: at 2 ranks through a 5 Gbit/s bottleneck each way, RTTCC held
  // each forward queue near 40 us against a 100 us target and lost a tenth
  // of the goodput. So while the peer's data arrives, it is given the RTT
  // less the reply's queueing on the way back (our own gap in reading the
  // reply included): the reply's one-way delay above its recent minimum
  // (LEDBAT's base delay, RFC 6817). A base taken while a queue stood
  // understates that queue and leaves more of the RTT: cautious, never
  // greedy. Where only ACKs come back (an incast's senders) the RTT stays
  // whole: there, bases taken at different moments by each sender made the
  // flows unequal (first sender done at 0.3-0.6 of the last). The RTO keeps
  // the whole round trip, which every ACK makes.
  stats_.rev_queue_ns = reverse_queue(static_cast<int64_t>(now_ns - h.msg_len), now_ns);
  uint64_t out = stats_.last_rtt_ns, gaps_out = gaps;
  if (data_rx_ns_ != 0 && now_ns - data_rx_ns_ < 1'000'000) {
    out = std::max(stats_.min_rtt_ns, out - std::min(out, stats_.rev_queue_ns));
    gaps_out = peer_gap(h.remote);
  }
  if (pacer_.active()) pacer_->on_rtt_sample({now_ns, out, -1, gaps_out});
}

// A one-way delay's rise above the smallest of the current window (1 s) and
// the one before it: a base that follows a route change, or the clocks'
// drift, within two seconds.
uint64_t Flow::reverse_queue(int64_t owd, uint64_t now_ns) noexcept {
  constexpr uint64_t kWindowNs = 1'000'000'000;
  if (owd_window_ns_ == 0) {
    owd_min_ = owd_min_prev_ = owd;
    owd_window_ns_ = now_ns;
  } else if (now_ns - owd_window_ns_ >= kWindowNs) {
    owd_min_prev_ = owd_min_;
    owd_min_ = owd;
    owd_window_ns_ = now_ns;
  }
  owd_min_ = std::min(owd_min_, owd);
  const int64_t base = std::min(owd_min_, owd_min_prev_);
  return static_cast<uint64_t>(owd - base);
}

// A packet that arrives after others sent later was overtaken by as many
// packets as their counters are ahead of its own (a resend carries a new
// counter, so repairs do not count). The tolerance is a quarter more than
// the farthest seen: it rises at once when a path slows; each period (span_
// packets) it falls to that period's farthest, by half at most, so it decays
// when the paths even out.
void Flow::measure_reordering(uint64_t seq) noexcept {
  if (seq > rx_seq_high_) {
    rx_seq_high_ = seq;
  } else {
    const auto by = static_cast<uint32_t>(std::min<uint64_t>(rx_seq_high_ - seq, span_));
    reorder_period_max_ = std::max(reorder_period_max_, by);
    reorder_tolerance_ = std::max(reorder_tolerance_, by + by / 4);
  }
  if (++reorder_period_n_ >= span_) {
    reorder_tolerance_ = std::max(reorder_period_max_ + reorder_period_max_ / 4, reorder_tolerance_ / 2);
    reorder_period_max_ = 0;
    reorder_period_n_ = 0;
  }
  reorder_tolerance_ = std::min(reorder_tolerance_, span_ / 2);
  stats_.reorder_tolerance = reorder_tolerance_;
}

bool Flow::wants_credit(uint64_t now_ns) const noexcept {
  if (!cfg_.credits || failed_ || grant_limit_ - data_rcvd_ >= cfg_.credit_window) return false;
  return peer_wants_credit_ || recv_next_ != recv_head_ || now_ns - data_rx_ns_ < 1'000'000;
}

void Flow::grant(uint32_t packets) noexcept {
  grant_limit_ += packets;
  stats_.credits_granted += packets;
  // Grants leave in small batches: an ACK per 4 packets granted.
  if (grant_limit_ - grant_told_ >= 4) push_ack();
}

// A grant moves the limit forward only, and never past a span of data
// beyond what we sent (an authenticated peer's bug, not ours to follow).
void Flow::on_grant(uint64_t field) noexcept {
  const auto limit = static_cast<uint32_t>(field);
  if (static_cast<int32_t>(limit - data_sent_n_) > static_cast<int32_t>(span_)) return;
  if (!peer_grants_ || static_cast<int32_t>(limit - credit_limit_) > 0) credit_limit_ = limit;
  peer_grants_ = true;
}

uint64_t Flow::rto_ns() const noexcept {
  // RFC 6298: smoothed RTT plus four deviations, so a queue that builds
  // (and with it the RTT) does not fire spurious timeouts, each of which a
  // congestion controller would answer by halving its rate.
  uint64_t base = cfg_.rto_initial_ns;
  if (rto_sampled_)
    base = std::max<uint64_t>(cfg_.rto_min_ns, static_cast<uint64_t>(srtt_ns_ + 4 * rttvar_ns_) + 100'000);
  return std::min<uint64_t>(cfg_.rto_max_ns, base * rto_backoff_);
}

void Flow::rto_sample(double r) noexcept {
  if (!rto_sampled_) {
    srtt_ns_ = r;
    rttvar_ns_ = r / 2;
    rto_sampled_ = true;
  } else {
    rttvar_ns_ = 0.75 * rttvar_ns_ + 0.25 * std::abs(srtt_ns_ - r);
    srtt_ns_ = 0.875 * srtt_ns_ + 0.125 * r;
  }
}

}  // namespace grex::reliable
