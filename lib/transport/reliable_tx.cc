// SPDX-License-Identifier: Apache-2.0
// Reliable flow, sending side: posting, matching sends to adverts,
// segmentation, the send window, ACK/NACK handling, retransmission, probes.
#include <algorithm>

#include "transport/reliable_flow.h"

namespace grex::reliable {

namespace {
uint32_t span_of(const Config& c) { return c.span != 0 ? c.span : 4 * c.window; }
uint32_t advert_pack_of(const Config& c) {
  const uint32_t fit = 1 + c.max_payload / static_cast<uint32_t>(wire::kAdvertEntryBytes);
  return std::clamp<uint32_t>(c.adverts_per_packet, 1, std::min<uint32_t>(fit, 256));
}
}  // namespace

Flow::Flow(const Config& cfg, uint32_t local_flow, uint32_t remote_flow, int peer, RegionTable* regions)
    : cfg_(cfg),
      local_flow_(local_flow),
      remote_flow_(remote_flow),
      peer_(peer),
      regions_(regions),
      sends_(cfg.queue_depth),
      adverts_(cfg.queue_depth * 2),
      matched_(cfg.queue_depth),
      early_(span_of(cfg)),
      txmsgs_(cfg.queue_depth * 3),
      advert_pack_(advert_pack_of(cfg)),
      advert_wire_(kMaxTxPerPoll * (advert_pack_ - 1) * wire::kAdvertEntryBytes),  // declared after advert_pack_
      win_(span_of(cfg)),
      span_(span_of(cfg)),
      retx_(span_of(cfg)),
      done_(cfg.queue_depth * 3),
      recvs_(cfg.queue_depth),
      rxwrites_(cfg.queue_depth * 4),  // > writes in flight (<= 3 x queue_depth): no slot collisions
      rcv_bits_((span_of(cfg) + 63) / 64, 0),
      grant_limit_(cfg.credits ? cfg.credit_initial : 0),
      ctrl_(256) {
  // Receiver credits: the initial grant leaves in the first poll, ahead of
  // any advert, so the peer knows it is granted before it may send at all.
  if (cfg_.credits) push_ack();
}

wire::Header Flow::make(wire::Type t) const noexcept {
  wire::Header h;
  h.type = t;
  h.flow = remote_flow_;
  return h;
}

wire::Header Flow::make_acking(wire::Type t) const noexcept {
  wire::Header h = make(t);
  h.ack = rcv_nxt_;
  h.sack = sack_bits();
  h.rx_above = rx_above_;
  return h;
}

void Flow::push_ack() noexcept {
  wire::Header a = make_acking(wire::Type::kAck);
  a.psn = echo_psn_;  // an RTT sample for the sender (zero timestamp: none)
  a.timestamp = echo_ts_;
  a.tag = echo_rx_ns_;  // poll_tx turns it into the wait, as the ACK leaves
  a.remote = echo_gap_ns_;  // the data may have waited this long in our ring
  echo_gap_ns_ = 0;
  a.msg_id = reorder_tolerance_;
  a.msg_len = credit_wanted_ ? 1 : 0;  // credits: this end waits for the peer's grants
  if (cfg_.credits) {
    a.offset = wire::kGrantBit | grant_limit_;
    grant_told_ = grant_limit_;
  }
  echo_late_ = false;
  echo_ts_ = 0;  // each echo once: a repeated ACK would report a stale send as slow
  push_ctrl(a);
  ++stats_.acks_sent;
  ack_due_ = false;
  unacked_rx_ = 0;
}

void Flow::push_ctrl(const wire::Header& h) noexcept {
  if (ctrl_.full()) ctrl_.pop();  // keep the newest: an old ACK is superseded anyway
  ctrl_.push(Ctrl{h});
}

bool Flow::post_send(const SendRequest& r) noexcept {
  if (failed_ || sends_.size() + matched_.size() >= sends_.capacity() || tx_n_ >= txmsgs_.size() - 1) return false;
  if (!request_in_bounds(r.region, r.offset, r.length)) {
    // Fails here, before it could consume one of the peer's adverts.
    return done_.push(Completion{r.context, 0, r.tag, peer_, 0, Op::kSend, Status::kLocalError});
  }
  take_send(r);
  match_sends();
  return true;
}

bool Flow::post_write(const WriteRequest& r) noexcept {
  if (failed_ || tx_n_ >= txmsgs_.size() - 1) return false;
  TxMsg& m = txmsgs_[(tx_head_ + tx_n_++) % txmsgs_.size()];
  m = TxMsg{};
  m.kind = Kind::kWrite;
  m.flags = wire::kFlagWrite | (r.with_imm ? wire::kFlagImm : 0);
  m.msg_id = next_write_id_++;
  m.src = r.region != nullptr ? static_cast<const uint8_t*>(r.region->addr()) + r.offset : nullptr;
  m.region = r.region;
  m.wire_len = m.send_len = r.length;
  m.base_offset = r.remote_offset;
  m.tag = (static_cast<uint64_t>(static_cast<uint32_t>(r.remote.rkey)) << 32) | r.imm;
  m.context = r.context;
  if (!request_in_bounds(r.region, r.offset, r.length)) {
    m.done = true;
    m.status = Status::kLocalError;
    m.segmented = true;
    ++unreported_done_;
  } else if (r.remote_offset > r.remote.length || r.length > r.remote.length - r.remote_offset) {
    m.done = true;
    m.status = Status::kRemoteAccess;
    m.segmented = true;
    ++unreported_done_;
  }
  retire_msgs();
  return true;
}

// Each posted send takes the oldest advert with its tag (and each advert the
// oldest send): the pair waits in matched_, in the order it was made, for a
// free message entry.
void Flow::take_send(const SendRequest& s) noexcept {
  if (const Advert* a = adverts_.front(s.tag); a != nullptr) {
    matched_.push(Matched{s, *a});
    adverts_.pop(s.tag);
  } else {
    sends_.push(s.tag, s);
  }
}

void Flow::take_advert(const Advert& a) noexcept {
  if (const SendRequest* s = sends_.front(a.tag); s != nullptr) {
    matched_.push(Matched{*s, a});
    sends_.pop(a.tag);
  } else {
    adverts_.push(a.tag, a);
  }
}

void Flow::match_sends() noexcept {
  while (!matched_.empty() && tx_n_ < txmsgs_.size() - 1) {
    const SendRequest& s = matched_.front().send;
    const Advert& a = matched_.front().advert;
    TxMsg& m = txmsgs_[(tx_head_ + tx_n_++) % txmsgs_.size()];
    m = TxMsg{};
    m.kind = Kind::kSend;
    m.msg_id = a.seq;
    m.region = s.region;
    m.src = s.region != nullptr ? static_cast<const uint8_t*>(s.region->addr()) + s.offset : nullptr;
    m.wire_len = s.length;
    m.send_len = std::min<uint64_t>(s.length, a.len);  // the receiver reports truncation
    m.tag = s.tag;
    m.context = s.context;
    if (!request_in_bounds(s.region, s.offset, s.length)) {
      m.done = m.segmented = true;
      m.status = Status::kLocalError;
      ++unreported_done_;
    }
    matched_.pop();
  }
  retire_msgs();
}

// Picks the next unsent piece of the oldest message that still has bytes to
// segment. Every message, even an empty one, sends at least one packet.
bool Flow::next_data(TxPacket* p, uint64_t now_ns) noexcept {
  // The span bounds how far PSNs run ahead of the oldest hole; the window
  // bounds what is in flight: outstanding minus what the peer says arrived.
  const uint32_t outstanding = snd_nxt_ - snd_una_;
  if (outstanding >= span_ || outstanding - std::min(peer_above_, outstanding) >= cfg_.window) return false;
  while (tx_seg_ < tx_n_) {
    uint32_t mi = static_cast<uint32_t>((tx_head_ + tx_seg_) % txmsgs_.size());
    TxMsg& m = txmsgs_[mi];
    if (m.segmented) {
      ++tx_seg_;
      continue;
    }
    if (m.kind != Kind::kAdvert) {
      // Receiver credits: new data only within the peer's grants.
      if (peer_grants_ && static_cast<int32_t>(data_sent_n_ - credit_limit_) >= 0) {
        credit_blocked_ = true;
        return false;
      }
      ++data_sent_n_;
    }
    uint32_t psn = snd_nxt_++;
    Slot& s = win_[psn % span_];
    s = Slot{true, false, mi, m.next, static_cast<uint32_t>(std::min<uint64_t>(cfg_.max_payload, m.send_len - m.next)),
             now_ns, 1};
    m.next += s.len;
    ++m.pkts;
    if (m.next >= m.send_len) m.segmented = true;
    if (m.kind == Kind::kAdvert) {
      // The receives posted right after it (next in the ring, not sent yet)
      // ride in the same packet; their ordinals follow its own.
      s.len = 0;
      while (s.msgs < advert_pack_ && tx_seg_ + s.msgs < tx_n_) {
        TxMsg& a = txmsgs_[(mi + s.msgs) % txmsgs_.size()];
        if (a.kind != Kind::kAdvert || a.segmented) break;
        a.segmented = true;
        a.pkts = 1;
        ++s.msgs;
      }
    }
    fill_data(p, psn, now_ns);
    last_data_ns_ = now_ns;
    ++stats_.data_sent;
    stats_.bytes_sent += s.len;
    if (probes_.on_send(now_ns)) probe_due_ = true;
    return true;
  }
  return false;
}

void Flow::fill_data(TxPacket* p, uint32_t psn, uint64_t now_ns) noexcept {
  const Slot& s = win_[psn % span_];
  const TxMsg& m = txmsgs_[s.msg];
  wire::Header h = make_acking(wire::Type::kData);
  h.psn = psn;
  h.msg_id = m.msg_id;
  h.payload_len = s.len;
  h.timestamp = now_ns;
  h.tag = m.tag;
  const uint8_t* payload = s.len > 0 ? m.src + s.offset : nullptr;
  if (m.kind == Kind::kAdvert) {
    h.flags = wire::kFlagAdvert;
    h.msg_len = m.wire_len;
    h.offset = m.base_offset;  // ordinal
    if (s.msgs > 1) {  // the packed ones, in this packet's slice of advert_wire_
      uint8_t* w = advert_wire_.data() + static_cast<size_t>(p - tx_out_) * (advert_pack_ - 1) * wire::kAdvertEntryBytes;
      for (uint32_t i = 1; i < s.msgs; ++i) {
        const TxMsg& a = txmsgs_[(s.msg + i) % txmsgs_.size()];
        wire::encode_advert({a.msg_id, a.wire_len, a.tag}, w + (i - 1) * wire::kAdvertEntryBytes);
      }
      h.payload_len = static_cast<uint32_t>((s.msgs - 1) * wire::kAdvertEntryBytes);
      payload = w;
    }
  } else if (m.kind == Kind::kWrite) {
    h.flags = m.flags;
    h.offset = s.offset;
    h.msg_len = m.wire_len;
    h.remote = m.base_offset;
  } else {
    // A send carries its true length; it only sends what fits the advertised
    // buffer, and the receiver reports kTruncated when msg_len exceeds it.
    h.offset = s.offset;
    h.msg_len = m.wire_len;
  }
  if (cfg_.payload_crc) h.flags |= wire::kFlagPayloadCrc;
  p->hdr = h;
  p->payload = payload;
  p->region = m.kind == Kind::kAdvert ? nullptr : m.region;
  ack_due_ = false;  // the ACK rides along
  unacked_rx_ = 0;
}

void Flow::ack_psn(uint32_t psn) noexcept {
  Slot& s = win_[psn % span_];
  if (!s.used || s.acked) return;
  s.acked = true;
  for (uint32_t i = 0; i < s.msgs; ++i) {
    TxMsg& m = txmsgs_[(s.msg + i) % txmsgs_.size()];
    if (++m.pkts_acked == m.pkts && m.segmented) {
      m.done = true;
      ++unreported_done_;
    }
  }
}

void Flow::retire_msgs() noexcept {
  // Report every finished message, even behind one still waiting for a
  // retransmission (a stalled head must not stall the caller's pipeline);
  // free ring entries from the head as they are reported.
  // unreported_done_ ends the scan at the last finished message, so a deep
  // queue of messages still in flight costs nothing per call.
  for (size_t i = 0; i < tx_n_ && unreported_done_ > 0 && !done_.full(); ++i) {
    TxMsg& m = txmsgs_[(tx_head_ + i) % txmsgs_.size()];
    if (!m.done || m.reported) continue;
    m.reported = true;
    --unreported_done_;
    if (m.kind == Kind::kAdvert) continue;
    Op op = m.kind == Kind::kWrite ? Op::kWrite : Op::kSend;
    uint64_t bytes = m.status == Status::kSuccess ? m.send_len : 0;
    done_.push(Completion{m.context, bytes, m.kind == Kind::kSend ? m.tag : 0, peer_, static_cast<uint32_t>(m.tag),
                          op, m.status});
  }
  while (tx_n_ > 0 && txmsgs_[tx_head_].reported) {
    tx_head_ = (tx_head_ + 1) % txmsgs_.size();
    --tx_n_;
    if (tx_seg_ > 0) --tx_seg_;
  }
}

void Flow::on_ack(const wire::Header& h, bool dup_candidate, uint64_t now_ns) noexcept {
  const uint32_t ack = h.ack;
  const uint64_t sack = h.sack;
  if (static_cast<int32_t>(ack - snd_una_) < 0 || static_cast<int32_t>(snd_nxt_ - ack) < 0) return;  // stale/bogus
  bool progress = ack != snd_una_;
  for (uint32_t p = snd_una_; p != ack; ++p) ack_psn(p);
  for (int i = 0; i < 64 && sack != 0; ++i)
    if ((sack >> i) & 1) {
      uint32_t p = ack + 1 + static_cast<uint32_t>(i);
      if (static_cast<int32_t>(snd_nxt_ - p) > 0) ack_psn(p);
    }
  while (snd_una_ != snd_nxt_ && win_[snd_una_ % span_].acked) {
    win_[snd_una_ % span_].used = false;
    ++snd_una_;
  }
  // What arrived above the hole, as the peer counts it; never more than could
  // have (a bogus count only shrinks our own estimate of what is in flight).
  if (ack == snd_una_) peer_above_ = std::min(h.rx_above, snd_nxt_ - snd_una_);
  else if (progress) peer_above_ = 0;
  // SACK recovery: every packet below the highest one the peer has is lost
  // (or reordered). Resend them all now rather than one hole per round trip;
  // skip those resent within half an RTO (their copy may still be queued).
  if (sack != 0 && snd_una_ != snd_nxt_) {
    uint32_t top = ack + 1 + static_cast<uint32_t>(63 - __builtin_clzll(sack));
    uint64_t guard = rto_ns() / 2;
    for (uint32_t p = snd_una_; p != top && static_cast<int32_t>(snd_nxt_ - p) > 0; ++p) {
      if (top - p <= tx_reorder()) break;  // close enough below the top to be reordered, not lost
      Slot& s = win_[p % span_];
      if (s.used && !s.acked && now_ns - s.sent_ns > guard) {
        s.sent_ns = now_ns;  // counts as sent for the guard; poll_tx stamps it again
        queue_retransmit(p);
      }
    }
  }
  if (progress) {
    rto_backoff_ = 1;
    dupacks_ = 0;
    tlp_armed_ = false;
  } else if (dup_candidate && sack != 0 && ack == last_ack_ && snd_una_ != snd_nxt_) {
    const Slot& s = win_[snd_una_ % span_];
    if (++dupacks_ == cfg_.dupack_threshold + tx_reorder() &&
        !(s.sends > 1 && now_ns - s.sent_ns < rto_ns() / 2)) {
      queue_retransmit(snd_una_);  // unless a NACK had it resent already
      ++stats_.fast_retransmits;
    }
  }
  last_ack_ = ack;
  retire_msgs();
}

// A NACK names the first missing psn and how many follow it: a gap the peer
// just saw open (or its oldest hole, repeated). Resend each at once, unless it
// was already resent within half an RTO (its copy may still be queued).
void Flow::on_nack(const wire::Header& h, uint64_t now_ns) noexcept {
  on_ack(h, false, now_ns);
  uint32_t first = h.psn, count = std::max<uint32_t>(h.msg_id, 1);
  if (static_cast<int32_t>(first - snd_una_) < 0) {  // partly below the ACK: clip
    uint32_t skip = snd_una_ - first;
    if (skip >= count) return;
    count -= skip;
    first = snd_una_;
  }
  uint64_t guard = rto_ns() / 2;
  for (uint32_t i = 0; i < count && i < span_; ++i) {
    uint32_t p = first + i;
    if (static_cast<int32_t>(snd_nxt_ - p) <= 0) break;
    Slot& s = win_[p % span_];
    if (!s.used || s.acked || (s.sends > 1 && now_ns - s.sent_ns < guard)) continue;
    queue_retransmit(p);
    ++stats_.fast_retransmits;
  }
}

void Flow::queue_retransmit(uint32_t psn) noexcept {
  if (static_cast<int32_t>(psn - snd_una_) < 0 || static_cast<int32_t>(snd_nxt_ - psn) <= 0) return;
  const Slot& s = win_[psn % span_];
  if (!s.used || s.acked) return;
  for (size_t i = 0; i < retx_.size(); ++i)
    if (retx_[i] == psn) return;
  retx_.push(psn);
}

bool Flow::pending_work() const noexcept {
  return tx_n_ > 0 || !sends_.empty() || !matched_.empty() || recv_next_ != recv_head_;
}

// The pacer: a token bucket at the controller's rate, holding at most pace_burst_ns worth (and
// two packets); a packet goes while it is positive, and within the controller's window if any.
bool Flow::pace_allows(uint64_t now_ns, bool resend) noexcept {
  if (!pacer_.active()) return true;
  const uint32_t outstanding = snd_nxt_ - snd_una_;
  // Paced per path (pace_at), new data counts what the peer holds above a hole, as the paths do;
  // a resend does not (a full window must not hold back the packet that can empty it).
  const uint32_t above = pacer_.decision_set() && !resend ? 0 : std::min(peer_above_, outstanding);
  const uint64_t in_flight = static_cast<uint64_t>(outstanding - above) * cfg_.max_payload;
  const bool ok = pacer_.allows(now_ns, in_flight);
  stats_.cc_rate_bps = pacer_.rate_bps();
  stats_.paced_waits = pacer_.waits();
  return ok;
}

void Flow::paced(uint32_t payload_len, uint64_t now_ns) noexcept {
  pacer_.sent(payload_len + wire::kHeaderBytes, payload_len, now_ns);
}

size_t Flow::poll_tx(std::span<TxPacket> out, uint64_t now_ns, bool timers) noexcept {
  out = out.first(std::min(out.size(), kMaxTxPerPoll));  // advert_wire_ has a slice for each
  tx_out_ = out.data();
  if (cfg_.cc != nullptr && !pacer_.active())  // the controller starts with the flow's first poll
    pacer_.start(*cfg_.cc, cfg_.cc_options, cfg_.cc_path(), now_ns, cfg_.pace_min_burst(), cfg_.pace_burst_ns);
  // A matched send may wait for a free message entry: retry.
  if (!matched_.empty()) match_sends();
  size_t n = 0;
  if (failed_) {
    while (n < out.size() && !ctrl_.empty()) {  // a final kClose may still go out
      out[n++] = TxPacket{ctrl_.front().hdr, nullptr, nullptr};
      ctrl_.pop();
    }
    return n;
  }
  // A peer silent for too long while we wait on it is gone. Only the time we
  // wait counts: work posted after an idle spell (a long compute phase, or a
  // step of the algorithm that talks to other peers) starts the clock anew,
  // else the first poll after it would call a live peer gone.
  const bool waiting = pending_work();
  if (waiting && !waiting_) last_rx_ns_ = now_ns;
  waiting_ = waiting;
  if (timers && waiting && now_ns - last_rx_ns_ > cfg_.give_up_ns) {
    fail_all(Status::kPeerGone);
    return 0;
  }
  if (ack_due_) push_ack();
  while (n < out.size() && !ctrl_.empty()) {
    TxPacket& p = out[n++];
    p = TxPacket{ctrl_.front().hdr, nullptr, nullptr};
    if (p.hdr.type == wire::Type::kTimingResp) p.hdr.msg_len = now_ns;  // reply tx time, as late as possible
    if (p.hdr.type == wire::Type::kAck && p.hdr.timestamp != 0)  // the echoed packet's wait here
      p.hdr.tag = now_ns >= p.hdr.tag ? now_ns - p.hdr.tag : 0;
    ctrl_.pop();
  }
  // Timing probe: the scheduler asked for one with a data send (below, in the
  // previous call); a keepalive probes a quiet peer while we wait on it.
  if (probe_due_ && n < out.size()) {
    wire::Header h = make(wire::Type::kTimingReq);
    h.psn = probes_.seq();
    h.timestamp = now_ns;
    out[n++] = TxPacket{h, nullptr, nullptr};
    probe_due_ = false;
    ++stats_.probes_sent;
  } else if (timers && n < out.size() && waiting && now_ns - last_rx_ns_ > cfg_.keepalive_ns &&
             now_ns - keepalive_sent_ns_ > cfg_.keepalive_ns) {
    wire::Header h = make(wire::Type::kTimingReq);
    h.psn = 0;  // a keepalive: its reply only shows the peer is alive
    h.timestamp = now_ns;
    out[n++] = TxPacket{h, nullptr, nullptr};
    keepalive_sent_ns_ = now_ns;
  }
  stats_.probe_timeouts = probes_.probes_lost();
  // RTO on the oldest unacknowledged packet.
  if (timers && snd_una_ != snd_nxt_) {
    const Slot& s = win_[snd_una_ % span_];
    if (s.used && !s.acked && now_ns - s.sent_ns > rto_ns()) {
      rto_open_ = true;
      rto_psn_ = snd_una_;
      rto_sent_ns_ = s.sent_ns;
      rto_was_ns_ = rto_ns();
      queue_retransmit(snd_una_);
      ++stats_.timeouts;
      if (pacer_.active()) pacer_->on_timeout(now_ns);
      rto_backoff_ = std::min<uint64_t>(rto_backoff_ * 2, 1024);
    }
  }
  while (n < out.size() && !retx_.empty() && pace_allows(now_ns, true)) {
    const uint32_t psn = retx_.front();
    retx_.pop();
    Slot& s = win_[psn % span_];
    if (!s.used || s.acked) continue;
    s.sent_ns = now_ns;
    ++s.sends;
    fill_data(&out[n++], psn, now_ns);
    paced(s.len, now_ns);
    ++stats_.retransmits;
  }
  size_t before = n;
  bool held = false;  // the pacer or the peer's credits, not a lack of data, stopped us
  credit_blocked_ = false;
  while (n < out.size()) {
    if (!pace_allows(now_ns)) {
      held = true;
      break;
    }
    if (!next_data(&out[n], now_ns)) {
      if (credit_blocked_) {
        held = true;  // no tail probe: the grants, not a loss, hold the data
        ++stats_.credit_waits;
      }
      break;
    }
    paced(out[n++].hdr.payload_len, now_ns);
  }
  // Credits: a sender the grants hold asks for more (its ACKs say so), at
  // once and then once an RTO while held: a receiver grants a writer it has
  // no posted receive from only on request.
  if (credit_blocked_ && (!credit_wanted_ || now_ns - credit_asked_ns_ > rto_ns())) {
    credit_wanted_ = true;
    credit_asked_ns_ = now_ns;
    push_ack();
  } else if (!credit_blocked_ && credit_wanted_) {
    credit_wanted_ = false;  // the next ACK says so
  }
  // Tail-loss probe: nothing new to send, packets unacknowledged for ~2 RTT:
  // resend the newest one so the receiver's SACK/NACK names any hole now
  // instead of waiting for the RTO.
  if (timers && n == before && !held && n < out.size() && snd_una_ != snd_nxt_ && !tlp_armed_) {
    // Sprayed (rto_from_acks): two smoothed RTTs, the ACKs' echoes included
    // (RFC 8985's PTO), since data over slower paths than the probes' takes
    // longer to be acknowledged. One path: two of the last probe's RTT.
    uint64_t tlp_ns = 200'000;
    if (cfg_.rto_from_acks && rto_sampled_) tlp_ns = std::max<uint64_t>(static_cast<uint64_t>(2 * srtt_ns_), 20'000);
    else if (!cfg_.rto_from_acks && stats_.rtt_samples > 0) tlp_ns = std::max<uint64_t>(2 * stats_.last_rtt_ns, 20'000);
    if (now_ns - last_data_ns_ > tlp_ns) {
      for (uint32_t psn = snd_nxt_ - 1; psn != snd_una_ - 1; --psn) {
        Slot& s = win_[psn % span_];
        if (!s.used || s.acked) continue;
        s.sent_ns = now_ns;
        ++s.sends;
        fill_data(&out[n++], psn, now_ns);
        ++stats_.tail_probes;
        ++stats_.retransmits;
        break;
      }
      tlp_armed_ = true;
    }
  }
  return n;
}

size_t Flow::poll_completions(std::span<Completion> out) noexcept {
  size_t n = 0;
  while (n < out.size() && !done_.empty()) {
    out[n++] = done_.front();
    done_.pop();
    if (done_.empty()) retire_msgs();  // finished messages held back while the ring was full
  }
  // Receives finish out of order (different tags); report each once, and
  // free ring slots from the oldest.
  for (uint32_t s = recv_head_; recv_ready_ > 0 && s != recv_next_ && n < out.size(); ++s) {
    RxRecv& r = recvs_[s % recvs_.size()];
    if (r.done && !r.reported) {
      out[n++] = Completion{r.req.context, r.got, r.tag, peer_, 0, Op::kRecv, r.status};
      r.reported = true;
      --recv_ready_;
    }
  }
  while (recv_head_ != recv_next_ && recvs_[recv_head_ % recvs_.size()].reported) {
    recvs_[recv_head_ % recvs_.size()].used = false;
    ++recv_head_;
  }
  return n;
}

void Flow::fail_all(Status why) noexcept {
  failed_ = true;
  auto push = [&](const Completion& c) { done_.push(c); };
  for (size_t i = 0; i < tx_n_; ++i) {
    TxMsg& m = txmsgs_[(tx_head_ + i) % txmsgs_.size()];
    if (m.kind == Kind::kAdvert || m.reported) continue;
    push(Completion{m.context, 0, m.kind == Kind::kSend ? m.tag : 0, peer_, 0,
                    m.kind == Kind::kWrite ? Op::kWrite : Op::kSend, m.done ? m.status : why});
  }
  tx_n_ = tx_seg_ = unreported_done_ = 0;
  for (; !matched_.empty(); matched_.pop()) {
    const SendRequest& s = matched_.front().send;
    push(Completion{s.context, 0, s.tag, peer_, 0, Op::kSend, why});
  }
  sends_.drain([&](uint64_t, const SendRequest& s) { push(Completion{s.context, 0, s.tag, peer_, 0, Op::kSend, why}); });
  for (uint32_t s = recv_head_; s != recv_next_; ++s) {
    RxRecv& r = recvs_[s % recvs_.size()];
    if (!r.reported) push(Completion{r.req.context, r.done ? r.got : 0, r.tag, peer_, 0, Op::kRecv,
                                     r.done ? r.status : why});
    r.used = false;
  }
  recv_head_ = recv_next_;
  recv_ready_ = 0;
  retx_.clear();
  snd_una_ = snd_nxt_;
}

void Flow::close(int culprit) noexcept {
  // Carry our ACK state: the peer's sends that arrived complete at the peer
  // even if the ACKs for them were lost.
  wire::Header h = make_acking(wire::Type::kClose);
  if (culprit >= 0) {
    h.flags = wire::kFlagAbort;
    h.msg_id = static_cast<uint32_t>(culprit + 1);
  }
  push_ctrl(h);
}

}  // namespace grex::reliable
