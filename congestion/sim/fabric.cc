// SPDX-License-Identifier: Apache-2.0
// ccsim's leaf-spine fabric: hosts, ECMP and spraying, output ports, the
// receivers' ACKs, NACKs and CNPs, spine failures (fabric.h has the model).
#include "congestion/sim/fabric.h"

#include "congestion/sim/fabric_internal.h"

namespace grex::ccsim::detail {
namespace {

class Fabric {
 public:
  Fabric(const FabricConfig& cfg, const cc::Algorithm& algo) : cfg_(cfg), algo_(algo), rng_(cfg.seed) {
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
      rt->max_delay_ns = std::max(rt->max_delay_ns, 4 * rt->target_delay_ns);
      target_ns_ = rt->target_delay_ns;
    }
    path_.line_rate_bps = cfg.host_gbps * 1e9;
    path_.mtu_bytes = mtu_;
    hosts_.resize(N_);
    make_flows();
  }

  void run(FabricResult* r) {
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

 private:
  size_t up(uint32_t l, uint32_t s) const { return static_cast<size_t>(l) * S_ + s; }
  size_t down(uint32_t s, uint32_t l) const { return static_cast<size_t>(L_) * S_ + static_cast<size_t>(s) * L_ + l; }
  size_t to_host(uint32_t h) const { return 2 * static_cast<size_t>(L_) * S_ + h; }

  void push(uint64_t t, Fv type, uint32_t a = 0, uint32_t b = 0, uint32_t c = 0, uint32_t d = 0) {
    events_.push(FEvent{t, seq_++, a, b, c, d, type});
  }

  void make_flows() {
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

  uint64_t cnp_interval_ns() const {
    cc::DcqcnParams d = cfg_.cc_options.dcqcn;
    if (std::string_view(algo_.name) == "dcqcn-mlx5") cc::apply_dcqcn_set(&d, cc::DcqcnSet::kMlx5);
    return d.cnp_interval_ns;
  }

  void refresh(uint32_t f) {
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

  // ------------------------------------------------------------ hosts

  bool sendable(const FFlow& x) const {
    if (x.retx == 0 && x.to_send == 0) return false;
    if (x.allowance != kUnlimited && x.allowance < std::min<uint64_t>(mtu_, x.retx > 0 ? x.retx : x.to_send))
      return false;
    return x.window == 0 || x.inflight + std::min<uint64_t>(mtu_, x.retx > 0 ? x.retx : x.to_send) <= x.window ||
           x.inflight == 0;
  }

  void schedule_wake(uint32_t h, uint64_t t) {
    FHost& host = hosts_[h];
    if (host.wake_at != kNever && host.wake_at <= t && host.wake_at >= now_) return;
    host.wake_at = t;
    push(t, Fv::kWake, h);
  }

  void on_wake(uint32_t h) {
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

  // The spine ECMP sends entropy `e` of a flow from leaf a to leaf b through.
  uint32_t spine_for(const FFlow& x, uint64_t e) const {
    const uint64_t k = mix((x.entropy + e * 0x9e3779b97f4a7c15ull) ^ (uint64_t{x.src} << 32 | x.dst));
    return alive_[k % alive_.size()];
  }

  void send(uint32_t h, uint32_t f) {
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

  // ------------------------------------------------------------ switches

  bool mark(uint64_t q) { return cfg_.ecn && red_mark(static_cast<double>(q), kmin_, kmax_, cfg_.pmax, rng_); }

  bool dead(const Port& port) const { return port.spine >= 0 && port.spine == failed_; }

  void arrive(uint32_t p) {
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

  void start_port(uint32_t id) {
    Port& port = ports_[id];
    const FPacket& pk = pool_[port.fifo.front()];
    port.busy = true;
    const double start = port.ser.start(now_, static_cast<double>(now_), pk.wire, port.ns_per_bit);
    if (now_ >= warmup_ns_) queue_delay_.add(static_cast<uint64_t>(std::max(0.0, start - static_cast<double>(pk.enq_ns))));
    push(port.ser.busy_until, Fv::kPortDone, id);
  }

  void port_done(uint32_t id) {
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

  // What is left of the path (forward hops not yet taken and the way back).
  uint64_t back_ns(const FPacket& pk) const {
    return static_cast<uint64_t>(pk.hops + 1 - pk.hop) * hop_ns_ + static_cast<uint64_t>(pk.hops + 1) * hop_ns_;
  }

  void trim(uint32_t p) {
    const FPacket& pk = pool_[p];
    ++trimmed_;
    push(now_ + back_ns(pk), Fv::kNack, pk.flow, pk.payload, 0, pk.entropy);
    if (cfg_.credits)  // the trimmed header reaches the receiver, which owes credit for the payload again
      push(now_ + static_cast<uint64_t>(pk.hops + 1 - pk.hop) * hop_ns_, Fv::kRequest, pk.flow, pk.payload);
    pool_.release(p);
  }

  void fail_spine(uint32_t s) {
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

  // ------------------------------------------------------------ receivers and feedback

  void deliver(uint32_t p) {
    const FPacket pk = pool_[p];
    pool_.release(p);
    FFlow& x = flows_[pk.flow];
    x.delivered += pk.payload;
    delivered_ += pk.payload;
    if (const size_t b = now_ / kBinNs; b < bins_.size()) bins_[b] += pk.payload;
    if (pk.unscheduled && hosts_[x.dst].crediting) hosts_[x.dst].debt += pk.wire;
    if (finite_ && x.done_ns == kNever && x.delivered >= x.total) {
      x.done_ns = now_ + hop_ns_;
      ++done_;
    }
    const uint64_t back = static_cast<uint64_t>(pk.hops + 2) * hop_ns_;
    // A delay-based controller's path signal: this packet's round trip (its
    // ACK's arrival, as the sender will time it) passed the target.
    const bool late = algo_.wants_rtt_probes && now_ + back - pk.sent_ns > target_ns_;
    push(now_ + back, Fv::kAck, pk.flow, pk.probe ? pk.probe_seq : UINT32_MAX,
         pk.payload | (pk.ce ? kCeBit : 0) | (late ? kLateBit : 0),
         pk.entropy);
    if (pk.ce && algo_.wants_cnp && x.cnp.on_marked(now_)) push(now_ + back, Fv::kCnp, pk.flow);
  }

  void on_ack(uint32_t f, uint32_t probe_seq, uint32_t payload_ce, uint32_t entropy) {
    FFlow& x = flows_[f];
    const uint32_t payload = payload_ce & ~(kCeBit | kLateBit);
    if (cfg_.spray == Spray::kReps) {
      if ((payload_ce & (kCeBit | kLateBit)) != 0)
        x.reps.on_congested(entropy);
      else
        x.reps.on_clean(entropy);
    }
    x.inflight -= std::min<uint64_t>(x.inflight, payload);
    if (probe_seq != UINT32_MAX && x.probes.on_reply(probe_seq)) {
      cc::RttSample s;
      s.now_ns = now_;
      s.rtt_ns = static_cast<uint64_t>(static_cast<double>(now_) - x.probe_sent[probe_seq % 8]);
      FHost& h = hosts_[x.src];
      h.util.advance(now_, std::max(idle_rtt_ns_, 1.0));
      s.port_utilization = h.util.value;
      rtt_.add(s.rtt_ns);
      x.ctl->on_rtt_sample(s);
    }
    refresh(f);
    schedule_wake(x.src, now_);
  }

  void on_nack(uint32_t f, uint32_t payload, uint32_t entropy) {
    FFlow& x = flows_[f];
    if (cfg_.spray == Spray::kReps) x.reps.on_congested(entropy);
    x.inflight -= std::min<uint64_t>(x.inflight, payload);
    x.retx += payload;
    x.ctl->on_nack(now_);
    refresh(f);
    schedule_wake(x.src, now_);
  }

  void dispatch(const FEvent& e) {
    switch (e.type) {
      case Fv::kWake: on_wake(e.a); break;
      case Fv::kArrive: arrive(e.a); break;
      case Fv::kPortDone: port_done(e.a); break;
      case Fv::kAck: on_ack(e.a, e.b, e.c, e.d); break;
      case Fv::kNack: on_nack(e.a, e.b, e.d); break;
      case Fv::kCnp:
        ++cnps_;
        flows_[e.a].ctl->on_cnp(now_);
        refresh(e.a);
        schedule_wake(flows_[e.a].src, now_);
        break;
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

  // ------------------------------------------------------------ receiver credits

  void on_request(uint32_t f, uint32_t bytes, bool all) {
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
  void credit_tick(uint32_t h) {
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

  void mark_warmup() {
    warmed_ = true;
    delivered_at_warmup_ = delivered_;
    for (uint32_t f = 0; f < nflows_; ++f) flows_[f].delivered_at_warmup = flows_[f].delivered;
  }

  void finish(FabricResult* r);

  const FabricConfig& cfg_;
  const cc::Algorithm& algo_;
  cc::Options opts_;
  cc::PathInfo path_;
  std::mt19937_64 rng_;
  uint32_t L_ = 0, S_ = 0, H_ = 0, N_ = 0, nflows_ = 0;
  uint64_t hop_ns_ = 0;
  double host_npb_ = 0;
  uint32_t mtu_ = 0, hdr_ = 0;
  uint64_t buffer_ = 0;
  double kmin_ = 0, kmax_ = 0;
  uint64_t end_ns_ = 0, warmup_ns_ = 0;
  double idle_rtt_ns_ = 0;
  uint64_t target_ns_ = 0;
  bool finite_ = false;
  bool warmed_ = false;
  int failed_ = -1;
  std::vector<uint32_t> alive_;
  std::vector<Port> ports_;
  std::vector<FHost> hosts_;
  std::unique_ptr<FFlow[]> flows_;
  Pool<FPacket> pool_;
  std::priority_queue<FEvent, std::vector<FEvent>, FLater> events_;
  uint64_t seq_ = 0, now_ = 0, processed_ = 0;
  uint64_t delivered_ = 0, delivered_at_warmup_ = 0;
  static constexpr uint64_t kBinNs = 10'000;  // payload delivered per 10 us, for a failure's recovery
  std::vector<uint64_t> bins_;
  uint32_t done_ = 0;
  uint64_t credits_ = 0;
  uint64_t data_packets_ = 0, trimmed_ = 0, retransmits_ = 0, marks_ = 0, cnps_ = 0, probes_ = 0, invalid_ = 0;
  Histogram queue_delay_;
  Histogram rtt_;
};

void Fabric::finish(FabricResult* r) {
  r->hosts = N_;
  r->flows = nflows_;
  r->idle_rtt_us = idle_rtt_ns_ / 1e3;
  r->rttcc_target_us = static_cast<double>(target_ns_) / 1e3;
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
  if (cfg_.failed_spine >= 0 && !finite_)
    measure_recovery(bins_, kBinNs, warmup_ns_, us_to_ns(cfg_.fail_at_ms * 1000), now_,
                     static_cast<double>(L_) * (S_ - 1) * cfg_.spine_gbps, r);
  r->events = processed_;
}

}  // namespace
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
