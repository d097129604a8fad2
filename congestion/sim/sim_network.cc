// SPDX-License-Identifier: Apache-2.0
// ccsim: the sending hosts, the switch port, the receiver and the feedback
// (ACKs, probe replies, CNPs, NACKs) back to the senders.
#include "congestion/sim/sim_internal.h"

namespace grex::ccsim::detail {

void Sim::schedule_wake(uint32_t hi, uint64_t t) {
  Host& h = hosts_[hi];
  if (h.wake_at != kNever && h.wake_at <= t && h.wake_at >= now_) return;  // an earlier one is pending
  h.wake_at = t;
  push(t, Ev::kWake, hi);
}

void Sim::on_wake(uint32_t hi) {
  Host& h = hosts_[hi];
  if (h.wake_at == now_) h.wake_at = kNever;
  try_send(hi);
}

void Sim::try_send(uint32_t hi) {
  Host& h = hosts_[hi];
  if (h.ready.empty()) return;
  if (paused_) {
    if (!h.stalled) {
      h.stalled = true;
      stalled_.push_back(hi);
    }
    return;
  }
  if (h.nic.busy_until > now_) {
    schedule_wake(hi, h.nic.busy_until);
    return;
  }
  while (!h.ready.empty()) {
    const auto [t, f] = h.ready.top();
    FlowState& fs = flows_[f];
    if (fs.phase != FlowPhase::kActive) {  // left while waiting: drop lazily
      h.ready.pop();
      fs.in_heap = false;
      continue;
    }
    if (t != fs.eligible_ns) {  // a rate change moved it (refresh): a newer entry stands
      h.ready.pop();
      continue;
    }
    if (t > now_) {
      schedule_wake(hi, t);
      return;
    }
    h.ready.pop();
    fs.in_heap = false;
    if (!has_data(fs)) continue;
    if (!window_ok(fs)) {  // the window shrank while it waited
      fs.blocked = true;
      continue;
    }
    send(hi, f);
    if (has_data(fs)) {
      if (window_ok(fs)) {
        fs.in_heap = true;
        h.ready.push({fs.eligible_ns, f});
      } else {
        fs.blocked = true;
      }
    }
    schedule_wake(hi, h.nic.busy_until);
    return;
  }
}

uint64_t Sim::wire_arrival(Host& h, uint64_t end, uint32_t* sub) {
  uint64_t t = end + prop_;
  *sub = 0;
  if (jitter_ns_ > 0) {
    const uint64_t ps = rng_() % (jitter_ns_ * 1000);
    t += ps / 1000;
    *sub = static_cast<uint32_t>(ps % 1000) + 1;
  }
  t = std::max(t, h.last_arrival + 1);
  h.last_arrival = t;
  return t;
}

void Sim::send(uint32_t hi, uint32_t f) {
  Host& h = hosts_[hi];
  FlowState& fs = flows_[f];
  const bool retx = fs.retx_bytes > 0;
  const uint32_t payload = next_payload(fs);
  if (retx)
    fs.retx_bytes -= payload;
  else if (fs.to_send != kUnlimited)
    fs.to_send -= payload;
  const uint32_t wire = payload + hdr_;
  h.util.advance(now_, tau_ns_);
  const double start = h.nic.start(now_, fs.eligible_exact, wire, ns_per_bit_);
  const uint64_t end = h.nic.busy_until;
  const uint32_t p = pool_.alloc();
  pool_[p].flow = f;
  pool_[p].wire = wire;
  pool_[p].payload = payload;
  uint32_t sub = 0;
  const uint64_t arrive = wire_arrival(h, end, &sub);
  push(arrive, Ev::kSwitchArrive, p, 0, sub);
  fs.inflight += payload;
  tally([&](Counters& c) {
    ++c.data_packets;
    c.data_wire_bytes += wire;
    if (retx) ++c.retransmits;
  });
  fs.ctl->on_bytes_sent(now_, payload);
  if (algo_.wants_rtt_probes && fs.probes.on_send(now_)) {
    // The probe goes right behind the data packet, through the same NIC
    // and switch queue; its timestamp is when it starts on the wire.
    fs.probe_sent_ns[fs.probes.seq() % FlowState::kProbeRing] = h.nic.start(end, h.nic.free_exact, probe_bytes_, ns_per_bit_);
    const uint32_t q = pool_.alloc();
    pool_[q].flow = f;
    pool_[q].wire = probe_bytes_;
    pool_[q].probe = true;
    pool_[q].seq = fs.probes.seq();
    const uint64_t parrive = wire_arrival(h, h.nic.busy_until, &sub);
    push(parrive, Ev::kSwitchArrive, q, 0, sub);
    tally([&](Counters& c) {
      ++c.probes;
      c.probe_wire_bytes += probe_bytes_;
    });
  }
  h.util.busy_until = h.nic.busy_until;
  refresh(f);
  // The pacer meters payload by default: the unit of on_bytes_sent(), so a
  // controller that compares what it sent with its rate (RTTCC) sees its
  // own rate. Metering wire bytes instead makes every flow send 1.5 % (at
  // 4 KB) less payload than its rate says.
  const uint32_t metered = cfg_.pace_wire_bytes ? wire : payload;
  fs.eligible_exact = start + std::min(static_cast<double>(metered) * 8e9 / fs.rate_bps, 1e15);
  fs.eligible_ns = std::max(now_, static_cast<uint64_t>(std::ceil(fs.eligible_exact - 1e-6)));
}

void Sim::on_pause() {
  paused_ = true;
  pause_since_ = now_;
  tally([](Counters& c) { ++c.pauses; });
}

void Sim::account_pause(uint64_t until) {
  whole_.pause_ns += until - pause_since_;
  if (until > warmup_ns_) window_.pause_ns += until - std::max(pause_since_, warmup_ns_);
}

void Sim::on_resume() {
  if (!paused_) return;
  account_pause(now_);
  paused_ = false;
  std::vector<uint32_t> stalled;
  stalled.swap(stalled_);
  for (uint32_t hi : stalled) {
    hosts_[hi].stalled = false;
    try_send(hi);
  }
}

bool Sim::ecn_mark(uint64_t q) { return red_mark(static_cast<double>(q), kmin_, kmax_, cfg_.pmax, rng_); }

void Sim::switch_arrive(uint32_t p) {
  Packet& pk = pool_[p];
  if (queue_bytes_ + pk.wire > buffer_) {
    if (cfg_.lossy) {
      drop(p);
      return;
    }
    // Lossless: the headroom is sized so this cannot happen; count it
    // (release builds) and stop a debug build at once.
    ++overflows_;
    assert(false && "lossless switch buffer overflow: PFC headroom too small");
  }
  const uint64_t q = queue_bytes_;
  tally([&](Counters& c) { c.queue_bytes.add(q); });
  if (cfg_.ecn && !pk.probe && ecn_mark(q)) {
    pk.ce = true;
    tally([](Counters& c) { ++c.marks; });
  }
  pk.enq_ns = now_;
  fifo_.push_back(p);
  queue_bytes_ += pk.wire;
  max_queue_ = std::max(max_queue_, queue_bytes_);
  if (!cfg_.lossy && !xoff_sent_ && queue_bytes_ > xoff_) {
    xoff_sent_ = true;
    push(now_ + prop_, Ev::kPause);
  }
  if (!egress_busy_) start_egress();
}

void Sim::drop(uint32_t p) {
  Packet& pk = pool_[p];
  if (pk.probe) {
    tally([](Counters& c) { ++c.probe_drops; });
  } else {
    tally([](Counters& c) { ++c.drops; });
    // The receiver sees the gap when the next packet arrives: the rest of
    // the way there, then the reverse path.
    push(now_ + prop_ + back_, Ev::kNack, pk.flow, pk.payload);
  }
  pool_.release(p);
}

void Sim::start_egress() {
  const uint32_t p = fifo_.front();
  Packet& pk = pool_[p];
  egress_busy_ = true;
  const double start = egress_.start(now_, static_cast<double>(pk.enq_ns), pk.wire, ns_per_bit_);
  const auto wait = static_cast<uint64_t>(std::llround(std::max(0.0, start - static_cast<double>(pk.enq_ns))));
  tally([&](Counters& c) { c.queue_delay_ns.add(wait); });
  push(egress_.busy_until, Ev::kEgressDone);
}

void Sim::egress_done() {
  const uint32_t p = fifo_.front();
  fifo_.pop_front();
  const uint32_t wire = pool_[p].wire;
  queue_bytes_ -= wire;
  egress_busy_ = false;
  tally([&](Counters& c) { c.egress_wire_bytes += wire; });
  push(now_ + prop_, Ev::kRecvArrive, p);
  if (xoff_sent_ && queue_bytes_ < xon_) {
    xoff_sent_ = false;
    push(now_ + prop_, Ev::kResume);
  }
  if (!fifo_.empty()) start_egress();
}

void Sim::receive(uint32_t p) {
  const Packet pk = pool_[p];
  pool_.release(p);
  if (pk.probe) {  // answered at once: no dwell time to subtract
    push(now_ + back_, Ev::kProbeReply, pk.flow, pk.seq);
    return;
  }
  FlowState& fs = flows_[pk.flow];
  // Every delivery is a first delivery here: a packet is resent only
  // after its drop was reported, so nothing arrives twice.
  fs.delivered += pk.payload;
  if (now_ >= warmup_ns_) fs.delivered_window += pk.payload;
  tally([&](Counters& c) { c.delivered_bytes += pk.payload; });
  if (burst_bytes_ > 0) {
    while (fs.bursts_done < bursts_started_ && fs.delivered >= (uint64_t{fs.bursts_done} + 1) * burst_bytes_) {
      const uint32_t k = fs.bursts_done++;
      if (++burst_done_count_[k] == n_) {
        burst_completion_.add(now_ - k * us_to_ns(cfg_.burst_period_us));
        ++bursts_completed_;
      }
    }
  }
  if (pk.ce && algo_.wants_cnp && fs.cnp.on_marked(now_)) {
    push(now_ + back_, Ev::kCnp, pk.flow);
    tally([](Counters& c) { ++c.cnps; });
  }
  push(now_ + back_, Ev::kAck, pk.flow, pk.payload);
}

void Sim::on_ack(uint32_t f, uint32_t payload) {
  FlowState& fs = flows_[f];
  fs.inflight -= payload;
  if (fs.blocked) make_ready(f);
}

void Sim::on_probe_reply(uint32_t f, uint32_t seq) {
  FlowState& fs = flows_[f];
  if (fs.phase != FlowPhase::kActive) return;
  if (!fs.probes.on_reply(seq)) {
    tally([](Counters& c) { ++c.stale; });
    return;
  }
  Host& h = hosts_[fs.host];
  h.util.advance(now_, tau_ns_);
  const auto rtt = static_cast<uint64_t>(
      std::llround(static_cast<double>(now_) - fs.probe_sent_ns[seq % FlowState::kProbeRing]));
  fs.ctl->on_rtt_sample(cc::RttSample{now_, rtt, h.util.value});
  tally([&](Counters& c) { c.rtt_ns.add(rtt); });
  refresh(f);
  make_ready(f);
}

void Sim::on_cnp(uint32_t f) {
  FlowState& fs = flows_[f];
  if (fs.phase != FlowPhase::kActive) return;
  fs.ctl->on_cnp(now_);
  refresh(f);
  make_ready(f);
}

void Sim::on_nack(uint32_t f, uint32_t payload) {
  FlowState& fs = flows_[f];
  fs.inflight -= payload;
  tally([](Counters& c) { ++c.nacks; });
  if (fs.phase != FlowPhase::kActive) return;  // gone: nothing to resend
  fs.retx_bytes += payload;
  fs.ctl->on_nack(now_);
  refresh(f);
  make_ready(f);
}

}  // namespace grex::ccsim::detail
