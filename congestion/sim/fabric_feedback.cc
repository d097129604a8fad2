// SPDX-License-Identifier: Apache-2.0
// ccsim's leaf-spine fabric, the receivers' side: deliveries and the ACKs,
// NACKs and CNPs they send back, receiver credits, and the run's results.
#include "congestion/sim/fabric_engine.h"

namespace grex::ccsim::detail {

void Fabric::deliver(uint32_t p) {
  const FPacket pk = pool_[p];
  pool_.release(p);
  FFlow& x = flows_[pk.flow];
  x.delivered += pk.payload;
  delivered_ += pk.payload;
  if (const size_t b = now_ / kBinNs; b < bins_.size()) bins_[b] += pk.payload;
  if (const size_t i = sample_ns_ > 0 ? now_ / sample_ns_ : SIZE_MAX; i < sample_bytes_.size())
    sample_bytes_[i] += pk.payload;
  if (pk.unscheduled && hosts_[x.dst].crediting) hosts_[x.dst].debt += pk.wire;
  if (finite_ && x.done_ns == kNever && x.delivered >= x.total) {
    x.done_ns = now_ + hop_ns_;
    ++done_;
  }
  const uint64_t back = static_cast<uint64_t>(pk.hops + 2) * hop_ns_;
  // A delay-based controller's path signal: this packet's round trip (its
  // ACK's arrival, as the sender will time it) passed the target.
  const bool late = algo_.wants_rtt_probes && now_ + back - pk.sent_ns > target_ns(pk.hops);
  push(now_ + back, Fv::kAck, pk.flow, pk.probe ? pk.probe_seq : UINT32_MAX,
       pk.payload | (pk.ce ? kCeBit : 0) | (late ? kLateBit : 0),
       pk.entropy);
  if (pk.ce && algo_.wants_cnp && x.cnp.on_marked(now_)) push(now_ + back, Fv::kCnp, pk.flow, pk.entropy);
}

void Fabric::on_ack(uint32_t f, uint32_t probe_seq, uint32_t payload_ce, uint32_t entropy) {
  FFlow& x = flows_[f];
  const uint32_t payload = payload_ce & ~(kCeBit | kLateBit);
  if (cfg_.spray == Spray::kReps) {
    if ((payload_ce & (kCeBit | kLateBit)) != 0)
      x.reps.on_congested(entropy);
    else
      x.reps.on_clean(entropy);
  }
  FPace& pc = pace(x, entropy);
  pc.inflight -= std::min<uint64_t>(pc.inflight, payload);
  if (retired(x, pc)) {  // sent before the hand-over: its controller no longer paces anything
    schedule_wake(x.src, now_);
    return;
  }
  if (probe_seq != UINT32_MAX && pc.probes.on_reply(probe_seq)) {
    cc::RttSample s;
    s.now_ns = now_;
    s.rtt_ns = static_cast<uint64_t>(static_cast<double>(now_) - pc.probe_sent[probe_seq % 8]);
    FHost& h = hosts_[x.src];
    h.util.advance(now_, std::max(idle_rtt_ns_, 1.0));
    s.port_utilization = h.util.value;
    s.hops = hops(x);
    rtt_.add(s.rtt_ns);
    pc.ctl->on_rtt_sample(s);
    refresh(pc);
    if (cfg_.path_cc && !per_path(x) && s.hops == 3 && (x.own_nacked || s.rtt_ns > target_ns(s.hops))) hand_over(x);
  } else {
    refresh(pc);
  }
  schedule_wake(x.src, now_);
}

void Fabric::on_nack(uint32_t f, uint32_t payload, uint32_t entropy) {
  FFlow& x = flows_[f];
  if (cfg_.spray == Spray::kReps) x.reps.on_congested(entropy);
  FPace& pc = pace(x, entropy);
  pc.inflight -= std::min<uint64_t>(pc.inflight, payload);
  x.retx += payload;
  if (&pc == &x.own) x.own_nacked = true;
  if (!retired(x, pc)) {
    pc.ctl->on_nack(now_);
    refresh(pc);
  }
  schedule_wake(x.src, now_);
}

void Fabric::dispatch(const FEvent& e) {
  switch (e.type) {
    case Fv::kWake: on_wake(e.a); break;
    case Fv::kArrive: arrive(e.a); break;
    case Fv::kPortDone: port_done(e.a); break;
    case Fv::kAck: on_ack(e.a, e.b, e.c, e.d); break;
    case Fv::kNack: on_nack(e.a, e.b, e.d); break;
    case Fv::kCnp: {
      ++cnps_;
      FPace& pc = pace(flows_[e.a], e.b);
      if (!retired(flows_[e.a], pc)) {
        pc.ctl->on_cnp(now_);
        refresh(pc);
      }
      schedule_wake(flows_[e.a].src, now_);
      break;
    }
    case Fv::kFail: fail_spine(e.a); break;
    case Fv::kRequest: on_request(e.a, e.b, e.c != 0); break;
    case Fv::kCreditTick: credit_tick(e.a); break;
    case Fv::kCredit: {
      FFlow& x = flows_[e.a];
      x.allowance += e.b;
      schedule_wake(x.src, now_);
      break;
    }
  }
}

void Fabric::on_request(uint32_t f, uint32_t bytes, bool all) {
  FFlow& x = flows_[f];
  const uint64_t add = !all ? bytes : x.total == kUnlimited ? kUnlimited : x.total - x.first_window;
  x.demand = add == kUnlimited || x.demand == kUnlimited ? kUnlimited : x.demand + add;
  FHost& r = hosts_[x.dst];
  if (!x.pulling) {
    x.pulling = true;
    r.pull.push_back(f);
  }
  if (!r.crediting) {
    r.crediting = true;
    push(now_, Fv::kCreditTick, x.dst);
  }
}

// One credit of at most an MTU to the next flow in the receiver's queue, then
// the next one a packet time of the receiver's link later.
void Fabric::credit_tick(uint32_t h) {
  FHost& r = hosts_[h];
  if (r.pull.empty()) {
    r.crediting = false;
    r.debt = 0;
    return;
  }
  if (r.debt > 0) {  // an unscheduled packet took this link time: no credit for it
    const uint64_t d = std::min<uint64_t>(r.debt, mtu_ + hdr_);
    r.debt -= d;
    push(now_ + static_cast<uint64_t>(std::ceil(8.0 * d * host_npb_)), Fv::kCreditTick, h);
    return;
  }
  const uint32_t f = r.pull.front();
  r.pull.pop_front();
  FFlow& x = flows_[f];
  const auto g = static_cast<uint32_t>(std::min<uint64_t>(mtu_, x.demand));
  if (x.demand != kUnlimited) x.demand -= g;
  ++credits_;
  const uint64_t hops = x.src / H_ == x.dst / H_ ? 2 : 4;  // back to the sender
  push(now_ + hops * hop_ns_, Fv::kCredit, f, g);
  if (x.demand > 0)
    r.pull.push_back(f);
  else
    x.pulling = false;
  push(now_ + static_cast<uint64_t>(std::ceil(8.0 * (g + hdr_) * host_npb_)), Fv::kCreditTick, h);
}
void Fabric::finish(FabricResult* r) {
  r->hosts = N_;
  r->flows = nflows_;
  r->idle_rtt_us = idle_rtt_ns_ / 1e3;
  r->rttcc_target_us = static_cast<double>(target_ns_) / 1e3;
  r->rttcc_hop_target_us = static_cast<double>(opts_.rttcc.hop_target_ns) / 1e3;
  r->flows_done = done_;
  uint64_t t0 = warmup_ns_, t1 = now_;
  double sum_done = 0;
  uint64_t last = 0;
  for (uint32_t f = 0; f < nflows_; ++f)
    if (flows_[f].done_ns != kNever) {
      sum_done += static_cast<double>(flows_[f].done_ns);
      last = std::max(last, flows_[f].done_ns);
    }
  if (finite_) {
    t0 = 0;
    if (done_ == nflows_) {
      t1 = last;
      r->completion_ms = static_cast<double>(last) / 1e6;
    }
    if (done_ > 0) r->mean_flow_ms = sum_done / done_ / 1e6;
  }
  const double secs = std::max(1e-12, static_cast<double>(t1 - t0) / 1e9);
  r->goodput_gbps = 8.0 * static_cast<double>(delivered_ - delivered_at_warmup_) / secs / 1e9;
  double sum = 0, sum_sq = 0, mn = 1e300;
  for (uint32_t f = 0; f < nflows_; ++f) {
    const FFlow& x = flows_[f];
    const double secs_f = finite_ && x.done_ns != kNever ? std::max(1e-12, static_cast<double>(x.done_ns) / 1e9) : secs;
    const double g = 8.0 * static_cast<double>(x.delivered - x.delivered_at_warmup) / secs_f / 1e9;
    sum += g;
    sum_sq += g * g;
    mn = std::min(mn, g);
  }
  r->per_flow_min_gbps = nflows_ > 0 ? mn : 0;
  r->per_flow_mean_gbps = nflows_ > 0 ? sum / nflows_ : 0;
  r->jain = jain_index(sum, sum_sq, nflows_);
  r->queue_delay_us = queue_delay_.summary(1e-3);
  r->rtt_us = rtt_.summary(1e-3);
  // Each spine's 2L links, both directions: their bits over their capacity.
  const double span = static_cast<double>(now_ - std::min(now_, warmup_ns_)) / 1e9;
  for (uint32_t s = 0; s < S_; ++s) {
    double bits = 0, cap = 0;
    for (uint32_t l = 0; l < L_; ++l)
      for (size_t id : {up(l, s), down(s, l)}) {
        bits += static_cast<double>(ports_[id].carried_bits);
        cap += 1e9 / ports_[id].ns_per_bit * span;
      }
    r->spine_utilization.push_back(cap > 0 ? bits / cap : 0);
  }
  r->data_packets = data_packets_;
  r->trimmed = trimmed_;
  r->retransmits = retransmits_;
  r->ecn_marks = marks_;
  r->cnps = cnps_;
  r->probes = probes_;
  r->credits = credits_;
  for (uint32_t f = 0; f < nflows_; ++f) r->explored += flows_[f].reps.explored();
  r->invalid_decisions = invalid_;
  for (size_t i = 0; sample_ns_ > 0 && i < sample_bytes_.size() && (i + 1) * sample_ns_ <= now_; ++i)
    r->series.push_back({static_cast<double>((i + 1) * sample_ns_) / 1e3,
                         8.0 * static_cast<double>(sample_bytes_[i]) / static_cast<double>(sample_ns_),
                         static_cast<double>(sample_queue_[i]) / 1e3});
  if (cfg_.failed_spine >= 0 && !finite_)
    measure_recovery(bins_, kBinNs, warmup_ns_, us_to_ns(cfg_.fail_at_ms * 1000), now_,
                     static_cast<double>(L_) * (S_ - 1) * cfg_.spine_gbps, r);
  r->events = processed_;
}

}  // namespace grex::ccsim::detail
