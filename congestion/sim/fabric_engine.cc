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
  if (cfg.sample_us > 0) {
    sample_ns_ = std::max<uint64_t>(1, us_to_ns(cfg.sample_us));
    sample_bytes_.assign(end_ns_ / sample_ns_ + 1, 0);
    sample_queue_.assign(end_ns_ / sample_ns_ + 1, 0);
  }
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
    x.cnp = cc::CnpPacer(cnp_interval_ns());
    if (cfg_.spray == Spray::kReps) x.reps = cc::EntropyRecycler(mix(cfg_.seed ^ (uint64_t{f} << 20)));
    x.own.ctl.reset(algo_, opts_, path_, 0);
    refresh(x.own);
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

void Fabric::refresh(FPace& pc) {
  const cc::Decision d = pc.ctl->decision();
  double rate = d.rate_bps;
  if (!(rate > 0) || !std::isfinite(rate)) {
    ++invalid_;
    rate = 1e3;
  }
  const double old = pc.rate_bps;
  pc.rate_bps = rate;
  pc.window = d.window_bytes;
  repace(now_, old, rate, &pc.eligible_exact, &pc.eligible_ns);
}

uint64_t Fabric::next_send(const FFlow& x, uint32_t* path) const {
  *path = 0;
  if (!per_path(x)) return room(x.own, next_bytes(x)) ? x.own.eligible_ns : kNever;
  // The round robin's next path if it may send now, else the next one after
  // it that may; none may: the earliest that will, with room in its window.
  // Not before the flow's own pace, the sum of its paths' rates (x.own).
  uint64_t best = kNever;
  for (uint32_t i = 0; i < cfg_.paths; ++i) {
    const auto e = static_cast<uint32_t>((x.packets + i) % cfg_.paths);
    const FPace& pc = x.paths[e];
    if (!room(pc, next_bytes(x))) continue;
    if (pc.eligible_ns <= now_) {
      *path = e;
      best = pc.eligible_ns;
      break;
    }
    if (pc.eligible_ns < best) {
      best = pc.eligible_ns;
      *path = e;
    }
  }
  return best == kNever ? kNever : std::max(best, x.own.eligible_ns);
}

// The flow's controller ran its slow start and met congestion; now each
// path's controller takes over at an equal share of the flow's rate, past
// slow start, and cuts for its own path's queue alone. (Started at line
// rate, each in slow start, 64 paths of 15 flows into an incast overflowed
// the buffer: 8960 packets trimmed, 2.2 x the flow's completion time.
// Growing by 1/P of the flow's steps as well, as MPTCP couples its
// subflows' increase, changed nothing there and slowed the 16 MB ring by
// 28 %.)
void Fabric::hand_over(FFlow& x) {
  const double p = cfg_.paths;
  cc::Options o = opts_;
  o.rttcc.start_past_congestion = true;
  o.rttcc.start_rate_fraction = x.own.rate_bps / path_.line_rate_bps / p;
  // Flow scaling raises the target of flows far below line rate, for
  // fairness between flows; a path is a 1/P share of its flow, not a slow
  // flow (with it the ring's p99 queue was 19 us, at the target; without, 13).
  o.rttcc.fs_range_ns = 0;
  x.paths = std::make_unique<FPace[]>(cfg_.paths);
  for (uint32_t e = 0; e < cfg_.paths; ++e) {
    FPace& pc = x.paths[e];
    pc.ctl.reset(algo_, o, path_, now_);
    refresh(pc);
    pc.eligible_exact = x.own.eligible_exact;
    pc.eligible_ns = x.own.eligible_ns;
  }
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
  uint32_t best = UINT32_MAX, best_path = 0;
  uint64_t best_t = kNever;
  for (uint32_t f : host.flows) {
    const FFlow& x = flows_[f];
    if (!sendable(x)) continue;
    uint32_t path = 0;
    const uint64_t t = next_send(x, &path);
    if (t < best_t) {
      best_t = t;
      best = f;
      best_path = path;
    }
  }
  if (best == UINT32_MAX) return;  // an ACK, NACK or rate change wakes it again
  if (best_t > now_) {
    schedule_wake(h, best_t);
    return;
  }
  send(h, best, best_path);
  schedule_wake(h, host.nic.busy_until);
}

void Fabric::send(uint32_t h, uint32_t f, uint32_t path) {
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
    pk.entropy = cfg_.spray == Spray::kReps ? x.reps.next()
                 : per_path(x)                ? path
                                              : static_cast<uint32_t>(x.packets % cfg_.paths);
    const uint32_t s = spine_for(x, pk.entropy);
    pk.route[0] = static_cast<uint32_t>(up(ls, s));
    pk.route[1] = static_cast<uint32_t>(down(s, ld));
    pk.route[2] = static_cast<uint32_t>(to_host(x.dst));
    pk.hops = 3;
  }
  x.packets = per_path(x) ? path + 1 : x.packets + 1;
  FPace& pc = per_path(x) ? x.paths[path] : x.own;
  if (!per_path(x) && cfg_.path_cc) pk.entropy |= kOwnPace;
  pk.sent_ns = now_;
  if (algo_.wants_rtt_probes && pc.probes.on_send(now_)) {
    pk.probe = true;
    pk.probe_seq = pc.probes.seq();
    pc.probe_sent[pk.probe_seq % 8] = static_cast<double>(now_);
    ++probes_;
  }
  host.util.advance(now_, std::max(idle_rtt_ns_, 1.0));
  const double start =
      host.nic.start(now_, std::max(pc.eligible_exact, per_path(x) ? x.own.eligible_exact : 0.0), pk.wire, host_npb_);
  host.util.busy_until = host.nic.busy_until;
  push(host.nic.busy_until + hop_ns_, Fv::kArrive, p);
  pc.inflight += payload;
  if (x.allowance != kUnlimited) x.allowance -= std::min<uint64_t>(x.allowance, payload);
  if (x.unscheduled > 0) {  // still in the first window: the receiver will count it against its credits
    pk.unscheduled = true;
    x.unscheduled -= std::min<uint64_t>(x.unscheduled, payload);
  }
  ++data_packets_;
  pc.ctl->on_bytes_sent(now_, payload);
  refresh(pc);
  pc.eligible_exact = start + 8.0 * payload * 1e9 / pc.rate_bps;
  pc.eligible_ns = std::max(now_, static_cast<uint64_t>(std::ceil(pc.eligible_exact - 1e-6)));
  if (per_path(x)) {  // the flow's pace: its paths' rates summed, at most its link's
    double sum = 0;
    for (uint32_t e = 0; e < cfg_.paths; ++e) sum += x.paths[e].rate_bps;
    x.own.eligible_exact = start + 8.0 * payload * 1e9 / std::min(sum, path_.line_rate_bps);
    x.own.eligible_ns = std::max(now_, static_cast<uint64_t>(std::ceil(x.own.eligible_exact - 1e-6)));
  }
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
  if (const size_t i = sample_ns_ > 0 ? now_ / sample_ns_ : SIZE_MAX; i < sample_queue_.size())
    sample_queue_[i] = std::max(sample_queue_[i], port.bytes);
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
