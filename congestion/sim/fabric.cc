// SPDX-License-Identifier: Apache-2.0
// ccsim's leaf-spine fabric: the event loop, hosts, ECMP and spraying, output
// ports, spine failures (fabric.h has the model; the receivers' side is in
// fabric_feedback.cc).
#include "congestion/sim/fabric.h"

#include "congestion/sim/fabric_engine.h"

namespace grex::ccsim::detail {

Fabric::Fabric(const FabricConfig& cfg, const cc::Algorithm& algo) : cfg_(cfg), algo_(algo), rng_(cfg.seed) {
  L_ = cfg.leaves;
  S_ = cfg.spines;
  H_ = cfg.hosts_per_leaf;
  N_ = L_ * H_;
  hop_ns_ = us_to_ns(cfg.hop_us);
  host_npb_ = 1.0 / cfg.host_gbps;  // ns per bit at G Gbit/s
  mtu_ = cfg.mtu_bytes;
  hdr_ = cfg.header_bytes;
  buffer_ = static_cast<uint64_t>(cfg.buffer_kb * 1000);
  kmin_ = cfg.kmin_kb * 1000;
  kmax_ = cfg.kmax_kb * 1000;
  end_ns_ = us_to_ns(cfg.duration_ms * 1000);
  if (cfg.failed_spine >= 0) bins_.assign(end_ns_ / kBinNs + 1, 0);
  warmup_ns_ = cfg.flow_kb > 0 ? 0 : us_to_ns((cfg.warmup_ms < 0 ? cfg.duration_ms / 10 : cfg.warmup_ms) * 1000);
  // Ports: leaf l's uplink to spine s, spine s's downlink to leaf l, leaf's port to host h.
  ports_.resize(2 * static_cast<size_t>(L_) * S_ + N_);
  for (uint32_t l = 0; l < L_; ++l)
    for (uint32_t s = 0; s < S_; ++s) {
      const double g = cfg.spine_gbps * (static_cast<int>(s) == cfg.slow_spine ? cfg.slow_factor : 1.0);
      for (size_t id : {up(l, s), down(s, l)}) {
        ports_[id].ns_per_bit = 1.0 / g;
        ports_[id].spine = static_cast<int>(s);
      }
    }
  for (uint32_t h = 0; h < N_; ++h) ports_[to_host(h)].ns_per_bit = host_npb_;
  for (uint32_t s = 0; s < S_; ++s) alive_.push_back(s);
  // The idle RTT across leaves: a data packet's serialisation at each of the
  // four links, propagation there and back (the ACK takes an uncongested path).
  const double spine_npb = 1.0 / cfg.spine_gbps;
  const double wire_bits = 8.0 * (mtu_ + hdr_);
  idle_rtt_ns_ = wire_bits * (2 * host_npb_ + 2 * spine_npb) + 8.0 * hop_ns_;
  opts_ = cfg.cc_options;
  opts_.algorithm = algo.name;
  for (cc::RttccParams* rt : {&opts_.rttcc, &opts_.rttcc_template}) {
    rt->target_delay_ns = cfg.rttcc_target_us > 0 ? us_to_ns(cfg.rttcc_target_us)
                                                  : std::max(rt->target_delay_ns,
                                                             static_cast<uint64_t>(1.25 * idle_rtt_ns_));
    if (cfg.rttcc_hop_target_us >= 0) rt->hop_target_ns = us_to_ns(cfg.rttcc_hop_target_us);
    rt->max_delay_ns = std::max(rt->max_delay_ns, 4 * rt->target_delay_ns);
    target_ns_ = rt->target_delay_ns;
  }
  path_.line_rate_bps = cfg.host_gbps * 1e9;
  path_.mtu_bytes = mtu_;
  hosts_.resize(N_);
  make_flows();
}

void Fabric::run(FabricResult* r) {
  const auto wall0 = std::chrono::steady_clock::now();
  for (uint32_t h = 0; h < N_; ++h) schedule_wake(h, 0);
  if (cfg_.failed_spine >= 0) push(us_to_ns(cfg_.fail_at_ms * 1000), Fv::kFail, static_cast<uint32_t>(cfg_.failed_spine));
  while (!events_.empty()) {
    const FEvent e = events_.top();
    if (e.t > end_ns_ || (finite_ && done_ == nflows_)) break;
    events_.pop();
    now_ = e.t;
    if (!warmed_ && now_ >= warmup_ns_) mark_warmup();
    ++processed_;
    dispatch(e);
  }
  if (!finite_ || done_ < nflows_) now_ = std::max(now_, end_ns_);
  if (!warmed_) mark_warmup();
  finish(r);
  r->wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
}

void Fabric::make_flows() {
  const std::vector<std::pair<uint32_t, uint32_t>> pairs = fabric_flows(cfg_, cfg_.seed);
  finite_ = cfg_.flow_kb > 0;
  flows_ = std::make_unique<FFlow[]>(pairs.size());
  nflows_ = static_cast<uint32_t>(pairs.size());
  for (uint32_t f = 0; f < nflows_; ++f) {
    FFlow& x = flows_[f];
    x.src = pairs[f].first;
    x.dst = pairs[f].second;
    x.entropy = mix(cfg_.seed * 0x100000001b3ull + f);
    x.total = finite_ ? static_cast<uint64_t>(cfg_.flow_kb * 1000) : kUnlimited;
    x.to_send = x.total;
    x.ctl.reset(algo_, opts_, path_, 0);
    x.cnp = cc::CnpPacer(cnp_interval_ns());
    if (cfg_.spray == Spray::kReps) x.reps = cc::EntropyRecycler(mix(cfg_.seed ^ (uint64_t{f} << 20)));
    refresh(f);
    hosts_[x.src].flows.push_back(f);
    if (cfg_.credits) {  // an unscheduled first window, the rest on credit requested with it
      const auto first = static_cast<uint64_t>(
          cfg_.unscheduled_kb >= 0 ? cfg_.unscheduled_kb * 1000 : idle_rtt_ns_ * cfg_.host_gbps / 8);
      x.allowance = std::min(x.total, first);
      x.first_window = x.unscheduled = std::min(x.total, first);
      if (x.total > first) push(static_cast<uint64_t>(idle_rtt_ns_ / 2), Fv::kRequest, f, 0, /*all=*/1);
    }
  }
}

uint64_t Fabric::cnp_interval_ns() const {
  cc::DcqcnParams d = cfg_.cc_options.dcqcn;
  if (std::string_view(algo_.name) == "dcqcn-mlx5") cc::apply_dcqcn_set(&d, cc::DcqcnSet::kMlx5);
  return d.cnp_interval_ns;
}

void Fabric::refresh(uint32_t f) {
  FFlow& x = flows_[f];
  const cc::Decision d = x.ctl->decision();
  double rate = d.rate_bps;
  if (!(rate > 0) || !std::isfinite(rate)) {
    ++invalid_;
    rate = 1e3;
  }
  const double old = x.rate_bps;
  x.rate_bps = rate;
  x.window = d.window_bytes;
  repace(now_, old, rate, &x.eligible_exact, &x.eligible_ns);
}

void Fabric::schedule_wake(uint32_t h, uint64_t t) {
  FHost& host = hosts_[h];
  if (host.wake_at != kNever && host.wake_at <= t && host.wake_at >= now_) return;
  host.wake_at = t;
  push(t, Fv::kWake, h);
}

void Fabric::on_wake(uint32_t h) {
  FHost& host = hosts_[h];
  if (host.wake_at == now_) host.wake_at = kNever;
  if (host.nic.busy_until > now_) {
    schedule_wake(h, host.nic.busy_until);
    return;
  }
  // The earliest eligible flow with data and window (ties: the lowest id).
  uint32_t best = UINT32_MAX;
  uint64_t best_t = kNever;
  for (uint32_t f : host.flows) {
    const FFlow& x = flows_[f];
    if (!sendable(x)) continue;
    if (x.eligible_ns < best_t) {
      best_t = x.eligible_ns;
      best = f;
    }
  }
  if (best == UINT32_MAX) return;  // an ACK, NACK or rate change wakes it again
  if (best_t > now_) {
    schedule_wake(h, best_t);
    return;
  }
  send(h, best);
  schedule_wake(h, host.nic.busy_until);
}

void Fabric::send(uint32_t h, uint32_t f) {
  FHost& host = hosts_[h];
  FFlow& x = flows_[f];
  const bool retx = x.retx > 0;
  const auto payload = static_cast<uint32_t>(std::min<uint64_t>(mtu_, retx ? x.retx : x.to_send));
  if (retx) {
    x.retx -= payload;
    ++retransmits_;
  } else if (x.to_send != kUnlimited) {
    x.to_send -= payload;
  }
  const uint32_t p = pool_.alloc();
  FPacket& pk = pool_[p];
  pk.flow = f;
  pk.payload = payload;
  pk.wire = payload + hdr_;
  const uint32_t ls = x.src / H_, ld = x.dst / H_;
  if (ls == ld) {
    pk.route[0] = static_cast<uint32_t>(to_host(x.dst));
    pk.hops = 1;
  } else {
    pk.entropy = cfg_.spray == Spray::kReps ? x.reps.next() : static_cast<uint32_t>(x.packets % cfg_.paths);
    const uint32_t s = spine_for(x, pk.entropy);
    pk.route[0] = static_cast<uint32_t>(up(ls, s));
    pk.route[1] = static_cast<uint32_t>(down(s, ld));
    pk.route[2] = static_cast<uint32_t>(to_host(x.dst));
    pk.hops = 3;
  }
  ++x.packets;
  pk.sent_ns = now_;
  if (algo_.wants_rtt_probes && x.probes.on_send(now_)) {
    pk.probe = true;
    pk.probe_seq = x.probes.seq();
    x.probe_sent[pk.probe_seq % 8] = static_cast<double>(now_);
    ++probes_;
  }
  host.util.advance(now_, std::max(idle_rtt_ns_, 1.0));
  const double start = host.nic.start(now_, x.eligible_exact, pk.wire, host_npb_);
  host.util.busy_until = host.nic.busy_until;
  push(host.nic.busy_until + hop_ns_, Fv::kArrive, p);
  x.inflight += payload;
  if (x.allowance != kUnlimited) x.allowance -= std::min<uint64_t>(x.allowance, payload);
  if (x.unscheduled > 0) {  // still in the first window: the receiver will count it against its credits
    pk.unscheduled = true;
    x.unscheduled -= std::min<uint64_t>(x.unscheduled, payload);
  }
  ++data_packets_;
  x.ctl->on_bytes_sent(now_, payload);
  refresh(f);
  x.eligible_exact = start + 8.0 * payload * 1e9 / x.rate_bps;
  x.eligible_ns = std::max(now_, static_cast<uint64_t>(std::ceil(x.eligible_exact - 1e-6)));
}

void Fabric::arrive(uint32_t p) {
  FPacket& pk = pool_[p];
  Port& port = ports_[pk.route[pk.hop]];
  if (dead(port) || port.bytes + pk.wire > buffer_) {
    trim(p);
    return;
  }
  if (mark(port.bytes)) {
    pk.ce = true;
    ++marks_;
  }
  pk.enq_ns = now_;
  port.fifo.push_back(p);
  port.bytes += pk.wire;
  if (!port.busy) start_port(pk.route[pk.hop]);
}

void Fabric::start_port(uint32_t id) {
  Port& port = ports_[id];
  const FPacket& pk = pool_[port.fifo.front()];
  port.busy = true;
  const double start = port.ser.start(now_, static_cast<double>(now_), pk.wire, port.ns_per_bit);
  if (now_ >= warmup_ns_) queue_delay_.add(static_cast<uint64_t>(std::max(0.0, start - static_cast<double>(pk.enq_ns))));
  push(port.ser.busy_until, Fv::kPortDone, id);
}

void Fabric::port_done(uint32_t id) {
  Port& port = ports_[id];
  const uint32_t p = port.fifo.front();
  port.fifo.pop_front();
  FPacket& pk = pool_[p];
  port.bytes -= pk.wire;
  port.busy = false;
  if (now_ >= warmup_ns_) port.carried_bits += 8ull * pk.wire;
  ++pk.hop;
  if (pk.hop < pk.hops)
    push(now_ + hop_ns_, Fv::kArrive, p);
  else
    deliver(p);  // the receiver, one hop on (its delay is added to the ACK's)
  if (!port.fifo.empty()) start_port(id);
}

void Fabric::trim(uint32_t p) {
  const FPacket& pk = pool_[p];
  ++trimmed_;
  push(now_ + back_ns(pk), Fv::kNack, pk.flow, pk.payload, 0, pk.entropy);
  if (cfg_.credits)  // the trimmed header reaches the receiver, which owes credit for the payload again
    push(now_ + static_cast<uint64_t>(pk.hops + 1 - pk.hop) * hop_ns_, Fv::kRequest, pk.flow, pk.payload);
  pool_.release(p);
}

void Fabric::fail_spine(uint32_t s) {
  failed_ = static_cast<int>(s);
  alive_.erase(std::remove(alive_.begin(), alive_.end(), s), alive_.end());
  for (uint32_t l = 0; l < L_; ++l)
    for (size_t id : {up(l, s), down(s, l)}) {
      Port& port = ports_[id];
      // The head is on the wire: it completes. The rest is lost with the spine.
      while (port.fifo.size() > (port.busy ? 1u : 0u)) {
        const uint32_t p = port.fifo.back();
        port.fifo.pop_back();
        port.bytes -= pool_[p].wire;
        trim(p);
      }
    }
}

}  // namespace grex::ccsim::detail

namespace grex::ccsim {

bool run_fabric(const FabricConfig& cfg, FabricResult* out, std::string* error) {
  if (std::string e = check(cfg); !e.empty()) {
    if (error != nullptr) *error = e;
    return false;
  }
  const cc::Algorithm* algo = cc::find(cfg.cc);
  *out = FabricResult{};
  detail::Fabric(cfg, *algo).run(out);
  return true;
}

}  // namespace grex::ccsim
