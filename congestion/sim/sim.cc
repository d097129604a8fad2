// SPDX-License-Identifier: Apache-2.0
// ccsim: construction, the event loop, the flows; the public check() and run().
#include "congestion/sim/sim_internal.h"

namespace grex::ccsim::detail {

Sim::Sim(const Config& cfg, const cc::Algorithm& algo) : cfg_(cfg), algo_(algo), rng_(cfg.seed) {
  opts_ = cfg.cc_options;
  opts_.algorithm = algo.name;
  n_ = cfg.flows;
  h_ = host_count(cfg);
  rate_bps_ = cfg.gbps * 1e9;
  ns_per_bit_ = 1e9 / rate_bps_;
  path_.line_rate_bps = rate_bps_;
  path_.mtu_bytes = cfg.mtu_bytes;
  mtu_ = cfg.mtu_bytes;
  hdr_ = cfg.header_bytes;
  probe_bytes_ = cfg.probe_bytes;
  const uint64_t base = us_to_ns(cfg.base_rtt_us);
  prop_ = hop_ns(cfg);
  back_ = base - 2 * prop_;
  jitter_ns_ = cfg.jitter_ns;
  tau_ns_ = static_cast<double>(std::max<uint64_t>(base, 1000));
  // RTTCC's target belongs to the fabric (DOCA's rtt_template takes its base
  // RTT as a setting). 13 us suits the default path (idle probe RTT
  // 10.34 us); on a longer one it is 1.25 x the idle probe RTT, as an
  // operator would set it (the drivers derive it from the smallest RTT seen
  // instead). A target below the path's RTT reads every sample as congested.
  // The template's base RTT likewise.
  idle_rtt_ns_ = static_cast<double>(base) + 8.0 * (mtu_ + hdr_ + probe_bytes_) * ns_per_bit_;
  for (cc::RttccParams* rt : {&opts_.rttcc, &opts_.rttcc_template}) {
    rt->target_delay_ns = cfg.rttcc_target_us > 0
                              ? us_to_ns(cfg.rttcc_target_us)
                              : std::max(rt->target_delay_ns, static_cast<uint64_t>(1.25 * idle_rtt_ns_));
    rt->max_delay_ns = std::max(rt->max_delay_ns, 4 * rt->target_delay_ns);
  }
  buffer_ = static_cast<uint64_t>(cfg.buffer_mb * 1e6);
  kmin_ = cfg.kmin_kb * 1e3;
  kmax_ = cfg.kmax_kb * 1e3;
  end_ns_ = us_to_ns(cfg.duration_ms * 1e3);
  warmup_ns_ = cfg.warmup_ms < 0 ? end_ns_ / 10 : std::min(end_ns_, us_to_ns(cfg.warmup_ms * 1e3));
  headroom_ = headroom_bytes(cfg);
  xoff_ = buffer_ > headroom_ ? buffer_ - headroom_ : 0;
  const uint64_t hysteresis = 2 * static_cast<uint64_t>(mtu_ + hdr_);
  xon_ = xoff_ > hysteresis ? xoff_ - hysteresis : 0;
  flows_ = std::make_unique<FlowState[]>(n_);
  hosts_ = std::make_unique<Host[]>(h_);
  cnp_interval_ns_ = cnp_interval_ns(cfg, algo);
  for (uint32_t i = 0; i < n_; ++i) {
    flows_[i].host = i % h_;
    flows_[i].cnp = cc::CnpPacer(cnp_interval_ns_);
  }
  if (cfg.scenario == Scenario::kBurst) burst_bytes_ = static_cast<uint64_t>(std::llround(cfg.burst_kb * 1e3));
  leave_ns_ = end_ns_ / 3 * 2;
  const uint32_t tracked = std::min(cfg.tracked_flows, n_);
  for (uint32_t i = 0; i < tracked; ++i) {
    const auto id = static_cast<uint32_t>(static_cast<uint64_t>(i) * n_ / tracked);
    if (tracked_.empty() || tracked_.back() != id) tracked_.push_back(id);
  }
}

void Sim::run(Result* r) {
  const auto wall0 = std::chrono::steady_clock::now();
  schedule_start();
  while (!events_.empty() && events_.top().t <= end_ns_) {
    const Event e = events_.top();
    events_.pop();
    now_ = e.t;
    ++processed_;
    dispatch(e);
  }
  now_ = end_ns_;
  if (paused_) account_pause(end_ns_);
  finish(r);
  r->events = processed_;
  r->wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
}

void Sim::dispatch(const Event& e) {
  switch (e.type) {
    case Ev::kWake: on_wake(e.a); break;
    case Ev::kSwitchArrive: switch_arrive(e.a); break;
    case Ev::kEgressDone: egress_done(); break;
    case Ev::kRecvArrive: receive(e.a); break;
    case Ev::kAck: on_ack(e.a, e.b); break;
    case Ev::kProbeReply: on_probe_reply(e.a, e.b); break;
    case Ev::kCnp: on_cnp(e.a); break;
    case Ev::kNack: on_nack(e.a, e.b); break;
    case Ev::kPause: on_pause(); break;
    case Ev::kResume: on_resume(); break;
    case Ev::kSample: on_sample(); break;
    case Ev::kFlowStart: start_flow(e.a); break;
    case Ev::kLeave: on_leave(); break;
    case Ev::kBurst: on_burst(); break;
    case Ev::kJainWindow: on_jain_window(); break;
  }
}

void Sim::schedule_start() {
  switch (cfg_.scenario) {
    case Scenario::kLong:
    case Scenario::kBurst:
      for (uint32_t i = 0; i < n_; ++i) start_flow(i);
      if (cfg_.scenario == Scenario::kBurst) push(0, Ev::kBurst);
      break;
    case Scenario::kJoinLeave: {
      const uint64_t stagger = us_to_ns(cfg_.stagger_us);
      for (uint32_t i = 0; i < n_; ++i) {
        const uint64_t t = stagger * i;
        if (t >= end_ns_ || (i < n_ / 2 && t >= leave_ns_)) break;  // starts too late to matter
        push(t, Ev::kFlowStart, i);
      }
      if (n_ / 2 > 0) push(leave_ns_, Ev::kLeave);
      jain_window_ns_ = std::max<uint64_t>(1, us_to_ns(cfg_.jain_window_us));
      push(jain_window_ns_, Ev::kJainWindow);
      break;
    }
  }
  sample_ns_ = us_to_ns(cfg_.sample_us);
  if (sample_ns_ > 0) push(sample_ns_, Ev::kSample);
}

void Sim::start_flow(uint32_t f) {
  FlowState& fs = flows_[f];
  if (cfg_.scenario == Scenario::kJoinLeave && f < n_ / 2 && now_ >= leave_ns_) return;
  fs.ctl.reset(algo_, opts_, path_, now_);
  fs.phase = FlowPhase::kActive;
  fs.start_ns = now_;
  fs.eligible_ns = now_;
  fs.eligible_exact = static_cast<double>(now_);
  fs.to_send = cfg_.scenario == Scenario::kBurst ? 0 : kUnlimited;
  ++active_;
  refresh(f);
  if (cfg_.scenario == Scenario::kJoinLeave) {
    if (!changes_.empty() && changes_.back().join && changes_.back().at_us == static_cast<double>(now_) / 1e3)
      changes_.back().active_flows = active_;  // joins at the same instant are one change
    else
      changes_.push_back({true, static_cast<double>(now_) / 1e3, active_, -1});
  }
  make_ready(f);
}

void Sim::on_leave() {
  for (uint32_t f = 0; f < n_ / 2; ++f) {
    FlowState& fs = flows_[f];
    if (fs.phase != FlowPhase::kActive) continue;
    fs.phase = FlowPhase::kGone;
    fs.stop_ns = now_;
    rate_sum_ -= fs.rate_units;
    --active_;
  }
  changes_.push_back({false, static_cast<double>(now_) / 1e3, active_, -1});
}

void Sim::on_burst() {
  for (uint32_t f = 0; f < n_; ++f) {
    flows_[f].to_send += burst_bytes_;
    make_ready(f);
  }
  burst_done_count_.push_back(0);
  ++bursts_started_;
  const uint64_t period = us_to_ns(cfg_.burst_period_us);
  if (period > 0 && now_ + period < end_ns_) push(now_ + period, Ev::kBurst);
}

void Sim::refresh(uint32_t f) {
  FlowState& fs = flows_[f];
  const cc::Decision d = fs.ctl->decision();
  double rate = d.rate_bps;
  if (!(rate > 0) || !std::isfinite(rate)) {
    ++invalid_decisions_;
    rate = 1e3;  // keep the pacer finite; the count reports the bug
  }
  const double old_rate = fs.rate_bps;
  fs.rate_bps = rate;
  fs.window_bytes = d.window_bytes;
  // The entry under the old time goes stale (try_send skips it).
  if (repace(now_, old_rate, rate, &fs.eligible_exact, &fs.eligible_ns) && fs.in_heap) {
    hosts_[fs.host].ready.push({fs.eligible_ns, f});
    schedule_wake(fs.host, fs.eligible_ns);
  }
  const auto units = static_cast<uint64_t>(std::llround(std::min(rate, 1e15)));
  if (fs.phase == FlowPhase::kActive) rate_sum_ += units - fs.rate_units;  // modular arithmetic: exact
  fs.rate_units = units;
}

uint32_t Sim::next_payload(const FlowState& fs) const {
  if (fs.retx_bytes > 0) return static_cast<uint32_t>(std::min<uint64_t>(mtu_, fs.retx_bytes));
  return static_cast<uint32_t>(std::min<uint64_t>(mtu_, fs.to_send));
}

bool Sim::window_ok(const FlowState& fs) const {
  // An empty pipe may always send one packet, so a window below one
  // packet cannot deadlock the flow.
  return fs.window_bytes == 0 || fs.inflight == 0 || fs.inflight + next_payload(fs) <= fs.window_bytes;
}

void Sim::make_ready(uint32_t f) {
  FlowState& fs = flows_[f];
  if (fs.phase != FlowPhase::kActive || fs.in_heap || !has_data(fs)) return;
  if (!window_ok(fs)) {
    fs.blocked = true;
    return;
  }
  fs.blocked = false;
  fs.in_heap = true;
  Host& h = hosts_[fs.host];
  h.ready.push({fs.eligible_ns, f});
  try_send(fs.host);
}

}  // namespace grex::ccsim::detail

namespace grex::ccsim {

using namespace detail;

const char* scenario_name(Scenario s) noexcept {
  switch (s) {
    case Scenario::kLong: return "long";
    case Scenario::kBurst: return "burst";
    case Scenario::kJoinLeave: return "join-leave";
  }
  return "?";
}

std::string check(const Config& c) {
  if (cc::find(c.cc) == nullptr) return "unknown --cc '" + c.cc + "' (one of: " + cc::algorithm_names() + ")";
  if (c.flows == 0) return "--flows must be >= 1";
  if (c.flows > (1u << 24)) return "--flows must be <= 16777216";
  if (c.hosts > c.flows) return "--hosts must be <= --flows";
  if (!(c.gbps > 0) || c.gbps > 1e4) return "--gbps must be in (0, 10000]";
  if (c.mtu_bytes < 64 || c.mtu_bytes > 65536) return "--mtu must be in [64, 65536]";
  if (c.header_bytes == 0 || c.probe_bytes == 0) return "header and probe sizes must be > 0";
  if (!(c.base_rtt_us >= 0.004) || c.base_rtt_us > 1e6) return "--base-rtt-us must be in [0.004, 1e6]";
  if (!(c.duration_ms > 0) || c.duration_ms > 1e6) return "--duration-ms must be in (0, 1e6]";
  if (c.warmup_ms >= c.duration_ms) return "--warmup-ms must be < --duration-ms";
  if (!(c.buffer_mb > 0)) return "--buffer-mb must be > 0";
  if (c.buffer_mb * 1e6 < 2.0 * (c.mtu_bytes + c.header_bytes)) return "--buffer-mb must hold two packets";
  if (c.ecn && !(c.kmin_kb >= 0 && c.kmax_kb > c.kmin_kb && c.pmax >= 0 && c.pmax <= 1))
    return "ECN needs 0 <= --kmin-kb < --kmax-kb and 0 <= --pmax <= 1";
  if (c.sample_us < 0 || c.stagger_us < 0 || c.burst_period_us < 0)
    return "times must be >= 0";
  if (c.scenario == Scenario::kBurst && !(c.burst_kb > 0)) return "--burst-kb must be > 0";
  if (c.scenario == Scenario::kJoinLeave && !(c.jain_window_us > 0)) return "the Jain window must be > 0";
  if (!c.lossy) {
    // The PFC headroom must fit, with XON a few packets above empty, or
    // lossless is a lie.
    const uint64_t headroom = headroom_bytes(c);
    if (static_cast<double>(headroom + 4 * (uint64_t{c.mtu_bytes} + c.header_bytes)) > c.buffer_mb * 1e6) {
      char b[200];
      std::snprintf(b, sizeof b,
                    "--buffer-mb %.6g cannot hold the PFC headroom of %u hosts (%.3f MB); raise it, lower --hosts "
                    "or use --lossy",
                    c.buffer_mb, host_count(c), static_cast<double>(headroom) / 1e6);
      return b;
    }
  }
  return "";
}

bool run(const Config& cfg, Result* out, std::string* error) {
  const std::string bad = check(cfg);
  if (!bad.empty()) {
    if (error != nullptr) *error = bad;
    return false;
  }
  *out = Result{};
  Sim sim(cfg, *cc::find(cfg.cc));
  sim.run(out);
  return true;
}

}  // namespace grex::ccsim
