// SPDX-License-Identifier: Apache-2.0
// ccsim: the event loop, the switch, the hosts and the receiver (sim.h).
//
// Cost model: every event does O(log) work at most (the event heap, one
// host's ready heap). Nothing scans the flows per packet; the few O(N) passes
// are per burst, per join-leave window and at the start and the end.
#include "congestion/sim/sim.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <queue>
#include <random>
#include <string_view>
#include <utility>

namespace grex::ccsim {

const char* scenario_name(Scenario s) noexcept {
  switch (s) {
    case Scenario::kLong: return "long";
    case Scenario::kBurst: return "burst";
    case Scenario::kJoinLeave: return "join-leave";
  }
  return "?";
}

namespace {

constexpr uint64_t kNever = ~uint64_t{0};
constexpr uint64_t kUnlimited = ~uint64_t{0};

uint64_t us_to_ns(double us) { return static_cast<uint64_t>(std::llround(us * 1e3)); }

uint32_t host_count(const Config& c) { return c.hosts != 0 ? c.hosts : std::min<uint32_t>(c.flows, 64); }

// One-way propagation host->switch (and switch->receiver): a quarter of the base RTT.
uint64_t hop_ns(const Config& c) { return us_to_ns(c.base_rtt_us) / 4; }

// The notification point's CNP spacing: --cnp-interval-us, else the one of
// the DCQCN parameter set the algorithm runs. cc::Algorithm does not say
// which set that is, so the registry's "dcqcn-mlx5" (which applies the mlx5
// set over the options it is given) is recognised by name here.
uint64_t cnp_interval_ns(const Config& c, const cc::Algorithm& algo) {
  if (c.cnp_interval_us >= 0) return us_to_ns(c.cnp_interval_us);
  cc::DcqcnParams d = c.cc_options.dcqcn;
  if (std::string_view(algo.name) == "dcqcn-mlx5") cc::apply_dcqcn_set(&d, cc::DcqcnSet::kMlx5);
  return d.cnp_interval_ns;
}

// PFC headroom: the bytes that may still reach the switch after the queue
// crossed XOFF. Per sender: the pause needs one hop to reach it and what it
// already put on the wire needs one hop to arrive (2 hops = base/2 at line
// rate), plus its largest transmission (a data packet and the probe behind
// it) twice, for the one straddling each end under store-and-forward.
uint64_t headroom_bytes(const Config& c) {
  const uint64_t largest = uint64_t{c.mtu_bytes} + c.header_bytes + c.probe_bytes;
  const double in_flight = c.gbps * 1e9 / 8 * static_cast<double>(2 * hop_ns(c)) * 1e-9;
  return uint64_t{host_count(c)} * (2 * largest + static_cast<uint64_t>(std::ceil(in_flight)));
}

// ---------------------------------------------------------------- histogram

// Log-linear histogram of non-negative integers: values below 256 exactly,
// above that 128 bins per power of two (relative bin width <= 1/128). About
// 60 KB whatever the number of samples, so 16 384 flows cost nothing extra.
class Histogram {
 public:
  void add(uint64_t v) {
    ++bins_[index(v)];
    ++count_;
    sum_ += static_cast<double>(v);
    max_ = std::max(max_, v);
  }

  // Percentiles by nearest rank, reported as the middle of their bin (the
  // maximum exactly); `scale` converts the unit (ns -> us, B -> KB).
  Dist summary(double scale) const {
    Dist d;
    d.count = count_;
    if (count_ == 0) return d;
    d.mean = sum_ / static_cast<double>(count_) * scale;
    d.p50 = quantile(0.50) * scale;
    d.p99 = quantile(0.99) * scale;
    d.max = static_cast<double>(max_) * scale;
    return d;
  }

 private:
  static constexpr int kSubBits = 7;
  static constexpr uint64_t kLinear = uint64_t{2} << kSubBits;  // 256
  static constexpr size_t kBins = kLinear + (64 - kSubBits - 1) * (size_t{1} << kSubBits);

  static size_t index(uint64_t v) {
    if (v < kLinear) return static_cast<size_t>(v);
    const int e = std::bit_width(v) - 1;  // > kSubBits
    const uint64_t sub = (v >> (e - kSubBits)) & ((uint64_t{1} << kSubBits) - 1);
    return kLinear + static_cast<size_t>(e - kSubBits - 1) * (size_t{1} << kSubBits) + static_cast<size_t>(sub);
  }
  // The middle of bin i.
  static double middle(size_t i) {
    if (i < kLinear) return static_cast<double>(i);
    const size_t k = i - kLinear;
    const int e = static_cast<int>(k >> kSubBits) + kSubBits + 1;
    const uint64_t sub = k & ((size_t{1} << kSubBits) - 1);
    const uint64_t width = uint64_t{1} << (e - kSubBits);
    const uint64_t lower = ((uint64_t{1} << kSubBits) + sub) * width;
    return static_cast<double>(lower) + static_cast<double>(width - 1) / 2;
  }
  double quantile(double q) const {
    const uint64_t rank = std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(q * static_cast<double>(count_))));
    uint64_t seen = 0;
    for (size_t i = 0; i < kBins; ++i) {
      seen += bins_[i];
      if (seen >= rank) return std::min(middle(i), static_cast<double>(max_));
    }
    return static_cast<double>(max_);
  }

  std::vector<uint64_t> bins_ = std::vector<uint64_t>(kBins, 0);
  uint64_t count_ = 0;
  double sum_ = 0;
  uint64_t max_ = 0;
};

// ---------------------------------------------------------------- links

// A transmitter at a fixed rate. Event times are whole nanoseconds, but a
// transmission's exact start and end are kept as doubles: a packet that
// could start a fraction of a nanosecond before the event that sends it
// starts there, so rounding never accumulates and a saturated link (or a
// flow paced at line rate) carries exactly its rate.
struct Serializer {
  double free_exact = 0;    // when the last transmission ends
  uint64_t busy_until = 0;  // the same, rounded up

  // Starts `bytes` at `now` (>= busy_until); `ready_exact` (<= now) is when
  // the packet could have gone. Returns the exact start.
  double start(uint64_t now, double ready_exact, uint32_t bytes, double ns_per_bit) {
    double s = std::max(free_exact, ready_exact);
    const auto t = static_cast<double>(now);
    if (s <= t - 1 || s > t) s = t;  // idle for longer than the rounding: starts now
    free_exact = s + 8.0 * bytes * ns_per_bit;
    busy_until = std::max(now, static_cast<uint64_t>(std::ceil(free_exact - 1e-6)));
    return s;
  }
};

// ---------------------------------------------------------------- state

enum class Ev : uint8_t {
  kWake,          // a = host: its NIC may send
  kSwitchArrive,  // a = packet: its last bit reached the switch
  kEgressDone,    // the switch port finished the head packet
  kRecvArrive,    // a = packet: reached the receiver
  kAck,           // a = flow, b = payload bytes
  kProbeReply,    // a = flow, b = probe seq
  kCnp,           // a = flow
  kNack,          // a = flow, b = payload bytes
  kPause,         // the PFC pause reached the senders
  kResume,        // ... and the resume
  kSample,        // time-series row
  kFlowStart,     // a = flow
  kLeave,         // join-leave: the first half of the flows leaves
  kBurst,         // burst scenario: every flow gets burst_kb more to send
  kJainWindow,    // join-leave: a Jain window ends
};

struct Event {
  uint64_t t;
  // Sub-nanosecond rank (bits 48..) then insertion order: equal times run
  // in a fixed order, so a run is deterministic.
  uint64_t seq;
  uint32_t a;
  uint32_t b;
  Ev type;
};
struct Later {
  bool operator()(const Event& x, const Event& y) const noexcept { return x.t != y.t ? x.t > y.t : x.seq > y.seq; }
};

struct Packet {
  uint64_t enq_ns = 0;  // arrival at the switch
  uint32_t flow = 0;
  uint32_t wire = 0;     // bytes on the wire
  uint32_t payload = 0;  // 0 for a probe
  uint32_t seq = 0;      // probe sequence number
  bool probe = false;
  bool ce = false;  // ECN congestion experienced
};

// Packets live in a pool and travel by index through events and the FIFO.
class PacketPool {
 public:
  uint32_t alloc() {
    if (free_.empty()) {
      pool_.emplace_back();
      return static_cast<uint32_t>(pool_.size() - 1);
    }
    const uint32_t i = free_.back();
    free_.pop_back();
    pool_[i] = Packet{};
    return i;
  }
  void release(uint32_t i) { free_.push_back(i); }
  Packet& operator[](uint32_t i) { return pool_[i]; }

 private:
  std::vector<Packet> pool_;
  std::vector<uint32_t> free_;
};

enum class FlowPhase : uint8_t { kNotStarted, kActive, kGone };

struct FlowState {
  cc::Flow ctl;
  cc::ProbeScheduler probes;
  cc::CnpPacer cnp;
  uint64_t start_ns = kNever;
  uint64_t stop_ns = kNever;
  uint64_t eligible_ns = 0;   // the pacer lets it send from here on (rounded up)...
  double eligible_exact = 0;  // ... exactly
  double rate_bps = 0;       // decision(), cached after every callback
  uint64_t rate_units = 0;   // the same in whole bit/s, for the exact running sum
  uint64_t window_bytes = 0;
  uint64_t inflight = 0;     // payload sent and neither acked nor nacked
  uint64_t to_send = 0;      // payload not yet sent (kUnlimited: long-lived)
  uint64_t retx_bytes = 0;   // payload nacked and waiting to be resent
  // When each recent probe left (by seq % kProbeRing): a late reply to a probe
  // already given up still yields a sample from its own send time, as the
  // echoed timestamp gives it on the wire.
  static constexpr uint32_t kProbeRing = 8;
  double probe_sent_ns[kProbeRing] = {};
  uint64_t delivered = 0;
  uint64_t delivered_window = 0;  // since warmup
  uint64_t jain_mark = 0;         // delivered when the current Jain window began
  uint32_t host = 0;
  uint32_t bursts_done = 0;
  FlowPhase phase = FlowPhase::kNotStarted;
  bool in_heap = false;  // in its host's ready heap
  bool blocked = false;  // waiting for the window to open
};

struct Host {
  // (eligible time, flow): the NIC serves the earliest eligible flow; ties by id.
  std::priority_queue<std::pair<uint64_t, uint32_t>, std::vector<std::pair<uint64_t, uint32_t>>, std::greater<>>
      ready;
  Serializer nic;
  uint64_t wake_at = kNever;  // earliest pending wake event
  // Transmit utilisation: an exponential average of "NIC busy" with time
  // constant one base RTT, advanced lazily (one exp() per packet).
  double util = 0;
  uint64_t util_ns = 0;
  uint64_t util_busy_until = 0;
  uint64_t last_arrival = 0;  // at the switch, of this host's latest packet
  bool stalled = false;       // has work but PFC holds it; on the resume list
};

// Everything counted per interval; the run keeps one for the whole run and
// one for the measurement window.
struct Counters {
  uint64_t delivered_bytes = 0;
  uint64_t egress_wire_bytes = 0;
  uint64_t data_wire_bytes = 0;
  uint64_t probe_wire_bytes = 0;
  uint64_t data_packets = 0;
  uint64_t retransmits = 0;
  uint64_t probes = 0;
  uint64_t drops = 0;
  uint64_t probe_drops = 0;
  uint64_t cnps = 0;
  uint64_t nacks = 0;
  uint64_t marks = 0;
  uint64_t stale = 0;
  uint64_t pause_ns = 0;
  uint64_t pauses = 0;
  Histogram queue_delay_ns;
  Histogram queue_bytes;
  Histogram rtt_ns;
};

double jain_index(double sum, double sum_sq, uint32_t n) {
  if (n == 0) return -1;
  if (sum_sq <= 0) return 1;  // nobody got anything: equal shares
  return sum * sum / (static_cast<double>(n) * sum_sq);
}

// ---------------------------------------------------------------- simulator

class Sim {
 public:
  Sim(const Config& cfg, const cc::Algorithm& algo) : cfg_(cfg), algo_(algo), rng_(cfg.seed) {
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

  void run(Result* r) {
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

 private:
  // ------------------------------------------------------------ events
  // `sub` (0..1000) orders events within one nanosecond before insertion order does.
  void push(uint64_t t, Ev type, uint32_t a = 0, uint32_t b = 0, uint32_t sub = 0) {
    events_.push(Event{t, (uint64_t{sub} << 48) | seq_++, a, b, type});
  }

  void dispatch(const Event& e) {
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

  template <class F>
  void tally(F&& f) {
    f(whole_);
    if (now_ >= warmup_ns_) f(window_);
  }

  void schedule_start() {
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

  // ------------------------------------------------------------ flows
  void start_flow(uint32_t f) {
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

  void on_leave() {
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

  void on_burst() {
    for (uint32_t f = 0; f < n_; ++f) {
      flows_[f].to_send += burst_bytes_;
      make_ready(f);
    }
    burst_done_count_.push_back(0);
    ++bursts_started_;
    const uint64_t period = us_to_ns(cfg_.burst_period_us);
    if (period > 0 && now_ + period < end_ns_) push(now_ + period, Ev::kBurst);
  }

  // Re-reads the controller's decision after a callback (controllers have
  // no clock, so it changes only then) and keeps the running rate sum.
  void refresh(uint32_t f) {
    FlowState& fs = flows_[f];
    const cc::Decision d = fs.ctl->decision();
    double rate = d.rate_bps;
    if (!(rate > 0) || !std::isfinite(rate)) {
      ++invalid_decisions_;
      rate = 1e3;  // keep the pacer finite; the count reports the bug
    }
    fs.rate_bps = rate;
    fs.window_bytes = d.window_bytes;
    const auto units = static_cast<uint64_t>(std::llround(std::min(rate, 1e15)));
    if (fs.phase == FlowPhase::kActive) rate_sum_ += units - fs.rate_units;  // modular arithmetic: exact
    fs.rate_units = units;
  }

  static bool has_data(const FlowState& fs) { return fs.retx_bytes > 0 || fs.to_send > 0; }

  uint32_t next_payload(const FlowState& fs) const {
    if (fs.retx_bytes > 0) return static_cast<uint32_t>(std::min<uint64_t>(mtu_, fs.retx_bytes));
    return static_cast<uint32_t>(std::min<uint64_t>(mtu_, fs.to_send));
  }

  bool window_ok(const FlowState& fs) const {
    // An empty pipe may always send one packet, so a window below one
    // packet cannot deadlock the flow.
    return fs.window_bytes == 0 || fs.inflight == 0 || fs.inflight + next_payload(fs) <= fs.window_bytes;
  }

  // Puts an active flow with data and an open window into its host's heap.
  void make_ready(uint32_t f) {
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

  // ------------------------------------------------------------ hosts
  void schedule_wake(uint32_t hi, uint64_t t) {
    Host& h = hosts_[hi];
    if (h.wake_at != kNever && h.wake_at <= t && h.wake_at >= now_) return;  // an earlier one is pending
    h.wake_at = t;
    push(t, Ev::kWake, hi);
  }

  void on_wake(uint32_t hi) {
    Host& h = hosts_[hi];
    if (h.wake_at == now_) h.wake_at = kNever;
    try_send(hi);
  }

  void try_send(uint32_t hi) {
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

  // When a packet whose last bit left the NIC at `end` reaches the switch:
  // one hop later, plus a little random timing noise (PHY, NIC pipeline)
  // that never reorders one host's packets. Without it, identical senders
  // started together stay in lock-step forever, and tail drop (or FIFO
  // ties) then favours whichever host the event order puts first.
  // The noise is drawn in picoseconds: the whole nanoseconds delay the
  // arrival, the fraction orders arrivals within one nanosecond (`sub`).
  uint64_t wire_arrival(Host& h, uint64_t end, uint32_t* sub) {
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

  void util_advance(Host& h, uint64_t t) {
    if (t <= h.util_ns) return;
    const uint64_t busy_end = std::min(t, h.util_busy_until);
    if (busy_end > h.util_ns) {
      h.util = 1 + (h.util - 1) * std::exp(-static_cast<double>(busy_end - h.util_ns) / tau_ns_);
      h.util_ns = busy_end;
    }
    if (t > h.util_ns) {
      h.util *= std::exp(-static_cast<double>(t - h.util_ns) / tau_ns_);
      h.util_ns = t;
    }
  }

  void send(uint32_t hi, uint32_t f) {
    Host& h = hosts_[hi];
    FlowState& fs = flows_[f];
    const bool retx = fs.retx_bytes > 0;
    const uint32_t payload = next_payload(fs);
    if (retx)
      fs.retx_bytes -= payload;
    else if (fs.to_send != kUnlimited)
      fs.to_send -= payload;
    const uint32_t wire = payload + hdr_;
    util_advance(h, now_);
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
    h.util_busy_until = h.nic.busy_until;
    refresh(f);
    // The pacer meters payload by default: the unit of on_bytes_sent(), so a
    // controller that compares what it sent with its rate (RTTCC) sees its
    // own rate. Metering wire bytes instead makes every flow send 1.5 % (at
    // 4 KB) less payload than its rate says.
    const uint32_t metered = cfg_.pace_wire_bytes ? wire : payload;
    fs.eligible_exact = start + std::min(static_cast<double>(metered) * 8e9 / fs.rate_bps, 1e15);
    fs.eligible_ns = std::max(now_, static_cast<uint64_t>(std::ceil(fs.eligible_exact - 1e-6)));
  }

  void on_pause() {
    paused_ = true;
    pause_since_ = now_;
    tally([](Counters& c) { ++c.pauses; });
  }

  void account_pause(uint64_t until) {
    whole_.pause_ns += until - pause_since_;
    if (until > warmup_ns_) window_.pause_ns += until - std::max(pause_since_, warmup_ns_);
  }

  void on_resume() {
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

  // ------------------------------------------------------------ switch
  bool ecn_mark(uint64_t q) {
    const double qb = static_cast<double>(q);
    if (qb <= kmin_) return false;
    if (qb >= kmax_) return true;
    const double p = cfg_.pmax * (qb - kmin_) / (kmax_ - kmin_);
    return static_cast<double>(rng_() >> 11) * 0x1.0p-53 < p;
  }

  void switch_arrive(uint32_t p) {
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

  void drop(uint32_t p) {
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

  void start_egress() {
    const uint32_t p = fifo_.front();
    Packet& pk = pool_[p];
    egress_busy_ = true;
    const double start = egress_.start(now_, static_cast<double>(pk.enq_ns), pk.wire, ns_per_bit_);
    const auto wait = static_cast<uint64_t>(std::llround(std::max(0.0, start - static_cast<double>(pk.enq_ns))));
    tally([&](Counters& c) { c.queue_delay_ns.add(wait); });
    push(egress_.busy_until, Ev::kEgressDone);
  }

  void egress_done() {
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

  // ------------------------------------------------------------ receiver
  void receive(uint32_t p) {
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

  // ------------------------------------------------------------ sender feedback
  void on_ack(uint32_t f, uint32_t payload) {
    FlowState& fs = flows_[f];
    fs.inflight -= payload;
    if (fs.blocked) make_ready(f);
  }

  void on_probe_reply(uint32_t f, uint32_t seq) {
    FlowState& fs = flows_[f];
    if (fs.phase != FlowPhase::kActive) return;
    if (!fs.probes.on_reply(seq)) {
      tally([](Counters& c) { ++c.stale; });
      return;
    }
    Host& h = hosts_[fs.host];
    util_advance(h, now_);
    const auto rtt = static_cast<uint64_t>(
        std::llround(static_cast<double>(now_) - fs.probe_sent_ns[seq % FlowState::kProbeRing]));
    fs.ctl->on_rtt_sample(cc::RttSample{now_, rtt, h.util});
    tally([&](Counters& c) { c.rtt_ns.add(rtt); });
    refresh(f);
    make_ready(f);
  }

  void on_cnp(uint32_t f) {
    FlowState& fs = flows_[f];
    if (fs.phase != FlowPhase::kActive) return;
    fs.ctl->on_cnp(now_);
    refresh(f);
    make_ready(f);
  }

  void on_nack(uint32_t f, uint32_t payload) {
    FlowState& fs = flows_[f];
    fs.inflight -= payload;
    tally([](Counters& c) { ++c.nacks; });
    if (fs.phase != FlowPhase::kActive) return;  // gone: nothing to resend
    fs.retx_bytes += payload;
    fs.ctl->on_nack(now_);
    refresh(f);
    make_ready(f);
  }

  // ------------------------------------------------------------ measurement
  void on_sample() {
    Sample s;
    s.t_us = static_cast<double>(now_) / 1e3;
    s.queue_bytes = queue_bytes_;
    const uint64_t delivered = whole_.delivered_bytes;
    const double secs = static_cast<double>(sample_ns_) * 1e-9;
    s.goodput = static_cast<double>(delivered - last_sample_delivered_) * 8 / (secs * payload_rate_bps());
    last_sample_delivered_ = delivered;
    s.mean_rate_gbps = active_ > 0 ? static_cast<double>(rate_sum_) / active_ / 1e9 : 0;
    s.paused = paused_;
    bool any = false;
    for (uint32_t f : tracked_) {
      const FlowState& fs = flows_[f];
      if (fs.phase != FlowPhase::kActive) {
        s.tracked_gbps.push_back(-1);
        continue;
      }
      const double g = fs.rate_bps / 1e9;
      s.tracked_gbps.push_back(g);
      s.min_rate_gbps = any ? std::min(s.min_rate_gbps, g) : g;
      s.max_rate_gbps = any ? std::max(s.max_rate_gbps, g) : g;
      any = true;
    }
    series_.push_back(std::move(s));
    push(now_ + sample_ns_, Ev::kSample);
  }

  // The Jain index over one window of the flows active throughout it.
  void on_jain_window() {
    const uint64_t begin = now_ - jain_window_ns_;
    double sum = 0, sum_sq = 0;
    uint32_t n = 0;
    for (uint32_t f = 0; f < n_; ++f) {
      FlowState& fs = flows_[f];
      if (fs.phase == FlowPhase::kActive && fs.start_ns <= begin) {
        const auto x = static_cast<double>(fs.delivered - fs.jain_mark);
        sum += x;
        sum_sq += x * x;
        ++n;
      }
      fs.jain_mark = fs.delivered;
    }
    jain_windows_.push_back(n == 0 ? 1.0 : jain_index(sum, sum_sq, n));
    push(now_ + jain_window_ns_, Ev::kJainWindow);
  }

  double payload_rate_bps() const { return rate_bps_ * mtu_ / (mtu_ + hdr_); }

  Metrics metrics(const Counters& c, uint64_t t0, uint64_t t1, bool window) const {
    Metrics m;
    m.seconds = static_cast<double>(t1 - t0) * 1e-9;
    if (m.seconds > 0) {
      const double bits = static_cast<double>(c.delivered_bytes) * 8;
      m.goodput_gbps = bits / m.seconds / 1e9;
      m.goodput_of_line_rate = bits / (m.seconds * rate_bps_);
      m.goodput = bits / (m.seconds * payload_rate_bps());
      m.link_utilization = static_cast<double>(c.egress_wire_bytes) * 8 / (m.seconds * rate_bps_);
      m.pfc_pause_fraction = static_cast<double>(c.pause_ns) * 1e-9 / m.seconds;
    }
    // Jain over the flows active throughout the interval.
    double sum = 0, sum_sq = 0;
    uint32_t n = 0;
    for (uint32_t f = 0; f < n_; ++f) {
      const FlowState& fs = flows_[f];
      if (fs.start_ns > t0 || fs.start_ns == kNever || fs.stop_ns < t1) continue;
      const auto x = static_cast<double>(window ? fs.delivered_window : fs.delivered);
      sum += x;
      sum_sq += x * x;
      ++n;
    }
    m.jain = jain_index(sum, sum_sq, n);
    m.jain_flows = n;
    m.queue_delay_us = c.queue_delay_ns.summary(1e-3);
    m.queue_kb = c.queue_bytes.summary(1e-3);
    m.rtt_us = c.rtt_ns.summary(1e-3);
    m.data_packets = c.data_packets;
    m.retransmits = c.retransmits;
    m.probes = c.probes;
    m.drops = c.drops;
    m.probe_drops = c.probe_drops;
    m.cnps = c.cnps;
    m.nacks = c.nacks;
    m.ecn_marks = c.marks;
    m.stale_probe_replies = c.stale;
    m.probe_overhead =
        c.data_wire_bytes > 0 ? static_cast<double>(c.probe_wire_bytes) / static_cast<double>(c.data_wire_bytes) : 0;
    m.pfc_pauses = c.pauses;
    return m;
  }

  void finish(Result* r) {
    r->window = metrics(window_, warmup_ns_, end_ns_, true);
    r->whole = metrics(whole_, 0, end_ns_, false);
    r->warmup_ms = static_cast<double>(warmup_ns_) / 1e6;
    r->hosts = h_;
    r->idle_probe_rtt_us =
        static_cast<double>(2 * prop_ + back_) / 1e3 + 8.0 * (mtu_ + hdr_ + probe_bytes_) * ns_per_bit_ / 1e3;
    r->cnp_interval_us = algo_.wants_cnp ? static_cast<double>(cnp_interval_ns_) / 1e3 : -1;
    r->pfc_xoff_bytes = cfg_.lossy ? 0 : xoff_;
    r->pfc_xon_bytes = cfg_.lossy ? 0 : xon_;
    r->max_queue_bytes = max_queue_;
    r->buffer_overflows = overflows_;
    r->bursts_started = bursts_started_;
    r->bursts_completed = bursts_completed_;
    r->burst_completion_us = burst_completion_.summary(1e-3);
    r->tracked_flows = tracked_;
    r->series = std::move(series_);
    r->final_mean_rate_gbps = active_ > 0 ? static_cast<double>(rate_sum_) / active_ / 1e9 : 0;
    r->invalid_decisions = invalid_decisions_;
    // Convergence after each change of the flow set: the windows that lie
    // wholly between this change and the next; converged from the end of
    // the last window below the level (or the first window's start if none
    // was); not converged if the last one is below it.
    if (cfg_.scenario == Scenario::kJoinLeave) {
      const uint64_t w = jain_window_ns_;
      for (size_t i = 0; i < changes_.size(); ++i) {
        Convergence c = changes_[i];
        const auto te = static_cast<uint64_t>(std::llround(c.at_us * 1e3));
        const uint64_t tn =
            i + 1 < changes_.size() ? static_cast<uint64_t>(std::llround(changes_[i + 1].at_us * 1e3)) : end_ns_;
        const uint64_t k0 = (te + w - 1) / w;  // first window starting at or after te
        const uint64_t k1 = std::min<uint64_t>(tn / w, jain_windows_.size());  // windows [k0, k1) end by tn
        if (k0 >= k1) continue;                                                 // none fits: not measurable
        uint64_t settled = k0 * w;
        bool ok = true;
        for (uint64_t k = k0; k < k1; ++k) {
          if (jain_windows_[k] < cfg_.converged_jain) {
            settled = (k + 1) * w;
            ok = k + 1 < k1;
          }
        }
        c.time_us = ok ? static_cast<double>(settled - te) / 1e3 : -1;
        r->convergence.push_back(c);
      }
    }
  }

  const Config& cfg_;
  const cc::Algorithm& algo_;
  cc::Options opts_;
  cc::PathInfo path_;
  std::mt19937_64 rng_;
  uint32_t n_ = 0;
  uint32_t h_ = 0;
  double rate_bps_ = 0;
  double ns_per_bit_ = 0;
  uint32_t mtu_ = 0;
  uint32_t hdr_ = 0;
  uint32_t probe_bytes_ = 0;
  uint64_t prop_ = 0;  // host->switch and switch->receiver
  uint64_t back_ = 0;  // receiver->sender
  uint64_t jitter_ns_ = 0;
  uint64_t cnp_interval_ns_ = 0;
  double tau_ns_ = 0;
  uint64_t buffer_ = 0;
  double kmin_ = 0;
  double kmax_ = 0;
  uint64_t headroom_ = 0;
  uint64_t xoff_ = 0;
  uint64_t xon_ = 0;
  uint64_t end_ns_ = 0;
  uint64_t warmup_ns_ = 0;
  uint64_t leave_ns_ = 0;
  uint64_t sample_ns_ = 0;
  uint64_t jain_window_ns_ = 1;
  uint64_t burst_bytes_ = 0;

  std::unique_ptr<FlowState[]> flows_;
  std::unique_ptr<Host[]> hosts_;
  PacketPool pool_;
  std::priority_queue<Event, std::vector<Event>, Later> events_;
  uint64_t seq_ = 0;
  uint64_t now_ = 0;
  uint64_t processed_ = 0;

  // switch
  std::deque<uint32_t> fifo_;
  Serializer egress_;
  uint64_t queue_bytes_ = 0;
  uint64_t max_queue_ = 0;
  uint64_t overflows_ = 0;
  bool egress_busy_ = false;
  bool xoff_sent_ = false;
  // senders' pause state (PFC)
  bool paused_ = false;
  uint64_t pause_since_ = 0;
  std::vector<uint32_t> stalled_;

  uint32_t active_ = 0;
  uint64_t rate_sum_ = 0;
  uint64_t invalid_decisions_ = 0;
  Counters whole_;
  Counters window_;
  std::vector<uint32_t> tracked_;
  std::vector<Sample> series_;
  uint64_t last_sample_delivered_ = 0;
  std::vector<double> jain_windows_;
  std::vector<Convergence> changes_;
  uint32_t bursts_started_ = 0;
  uint32_t bursts_completed_ = 0;
  std::vector<uint32_t> burst_done_count_;
  Histogram burst_completion_;
};

// ---------------------------------------------------------------- output

class Json {
 public:
  void open(const char* k, char brace = '{') {
    if (k != nullptr)
      key(k);
    else
      item();
    out_ += brace;
    ++depth_;
    first_ = true;
  }
  void close(char brace = '}') {
    --depth_;
    out_ += '\n';
    out_.append(static_cast<size_t>(depth_) * 2, ' ');
    out_ += brace;
    first_ = false;
  }
  void num(const char* k, double v) {
    key(k);
    if (!std::isfinite(v)) {
      out_ += "null";
      return;
    }
    char b[40];
    std::snprintf(b, sizeof b, "%.6g", v);
    out_ += b;
  }
  void u64(const char* k, uint64_t v) {
    key(k);
    char b[32];
    std::snprintf(b, sizeof b, "%" PRIu64, v);
    out_ += b;
  }
  void str(const char* k, const std::string& v) {
    key(k);
    out_ += '"';
    for (char c : v) {
      if (c == '"' || c == '\\') out_ += '\\';
      out_ += c;
    }
    out_ += '"';
  }
  void boolean(const char* k, bool v) {
    key(k);
    out_ += v ? "true" : "false";
  }
  void dist(const char* k, const Dist& d) {
    open(k);
    u64("count", d.count);
    num("mean", d.mean);
    num("p50", d.p50);
    num("p99", d.p99);
    num("max", d.max);
    close();
  }
  std::string take() { return std::move(out_); }

 private:
  // Starts an element: the comma after the previous one, a new line, the indent.
  void item() {
    if (!first_) out_ += ',';
    if (depth_ > 0) {
      out_ += '\n';
      out_.append(static_cast<size_t>(depth_) * 2, ' ');
    }
    first_ = false;
  }
  void key(const char* k) {
    item();
    out_ += '"';
    out_ += k;
    out_ += "\": ";
  }
  std::string out_;
  int depth_ = 0;
  bool first_ = true;
};

void metrics_json(Json& j, const char* name, const Metrics& m) {
  j.open(name);
  j.num("seconds", m.seconds);
  j.num("goodput", m.goodput);
  j.num("goodput_of_line_rate", m.goodput_of_line_rate);
  j.num("goodput_gbps", m.goodput_gbps);
  j.num("link_utilization", m.link_utilization);
  j.num("jain", m.jain);
  j.u64("jain_flows", m.jain_flows);
  j.dist("queue_delay_us", m.queue_delay_us);
  j.dist("queue_kb", m.queue_kb);
  j.dist("rtt_us", m.rtt_us);
  j.u64("data_packets", m.data_packets);
  j.u64("retransmits", m.retransmits);
  j.u64("probes", m.probes);
  j.num("probe_overhead", m.probe_overhead);
  j.u64("drops", m.drops);
  j.u64("probe_drops", m.probe_drops);
  j.u64("nacks", m.nacks);
  j.u64("ecn_marks", m.ecn_marks);
  j.u64("cnps", m.cnps);
  j.u64("stale_probe_replies", m.stale_probe_replies);
  j.num("pfc_pause_fraction", m.pfc_pause_fraction);
  j.u64("pfc_pauses", m.pfc_pauses);
  j.close();
}

// ---------------------------------------------------------------- arguments

bool parse_double(const char* s, double* out) {
  if (s == nullptr || *s == '\0') return false;
  char* end = nullptr;
  const double v = std::strtod(s, &end);
  if (*end != '\0' || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

bool parse_u64(const char* s, uint64_t* out) {
  if (s == nullptr || *s == '\0' || *s == '-') return false;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s, &end, 10);
  if (*end != '\0') return false;
  *out = v;
  return true;
}

bool parse_u32(const char* s, uint32_t* out) {
  uint64_t v = 0;
  if (!parse_u64(s, &v) || v > UINT32_MAX) return false;
  *out = static_cast<uint32_t>(v);
  return true;
}

}  // namespace

// ---------------------------------------------------------------- public API

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

std::string to_json(const Config& cfg, const Result& r, bool with_wall_time) {
  Json j;
  j.open(nullptr);
  j.open("config");
  j.str("cc", cfg.cc);
  j.u64("flows", cfg.flows);
  j.u64("hosts", r.hosts);
  j.num("gbps", cfg.gbps);
  j.u64("mtu", cfg.mtu_bytes);
  j.num("base_rtt_us", cfg.base_rtt_us);
  j.num("buffer_mb", cfg.buffer_mb);
  j.boolean("lossy", cfg.lossy);
  j.boolean("ecn", cfg.ecn);
  j.num("kmin_kb", cfg.kmin_kb);
  j.num("kmax_kb", cfg.kmax_kb);
  j.num("pmax", cfg.pmax);
  j.str("scenario", scenario_name(cfg.scenario));
  if (cfg.scenario == Scenario::kBurst) {
    j.num("burst_kb", cfg.burst_kb);
    j.num("burst_period_us", cfg.burst_period_us);
  }
  if (cfg.scenario == Scenario::kJoinLeave) j.num("stagger_us", cfg.stagger_us);
  j.num("duration_ms", cfg.duration_ms);
  j.num("warmup_ms", r.warmup_ms);
  j.str("pace", cfg.pace_wire_bytes ? "wire" : "payload");
  j.u64("jitter_ns", cfg.jitter_ns);
  j.u64("seed", cfg.seed);
  j.close();
  j.num("idle_probe_rtt_us", r.idle_probe_rtt_us);
  j.num("cnp_interval_us", r.cnp_interval_us);
  j.num("pfc_xoff_kb", static_cast<double>(r.pfc_xoff_bytes) / 1e3);
  j.num("pfc_xon_kb", static_cast<double>(r.pfc_xon_bytes) / 1e3);
  metrics_json(j, "window", r.window);
  metrics_json(j, "whole", r.whole);
  j.num("max_queue_kb", static_cast<double>(r.max_queue_bytes) / 1e3);
  j.u64("buffer_overflows", r.buffer_overflows);
  j.num("final_mean_rate_gbps", r.final_mean_rate_gbps);
  j.u64("invalid_decisions", r.invalid_decisions);
  if (cfg.scenario == Scenario::kBurst) {
    j.open("bursts");
    j.u64("started", r.bursts_started);
    j.u64("completed", r.bursts_completed);
    j.dist("completion_us", r.burst_completion_us);
    j.close();
  }
  if (cfg.scenario == Scenario::kJoinLeave) {
    // A summary, then every change (there is one per join that fits the run).
    std::vector<double> times;
    uint32_t unconverged = 0;
    for (const Convergence& c : r.convergence) {
      if (c.time_us >= 0)
        times.push_back(c.time_us);
      else
        ++unconverged;
    }
    std::sort(times.begin(), times.end());
    j.open("convergence");
    j.u64("changes", r.convergence.size());
    j.u64("not_converged", unconverged);
    j.num("median_us", times.empty() ? -1 : times[times.size() / 2]);
    j.num("max_us", times.empty() ? -1 : times.back());
    j.open("list", '[');
    for (const Convergence& c : r.convergence) {
      j.open(nullptr);
      j.str("change", c.join ? "join" : "leave");
      j.num("at_us", c.at_us);
      j.u64("active_flows", c.active_flows);
      j.num("time_us", c.time_us);
      j.close();
    }
    j.close(']');
    j.close();
  }
  j.u64("events", r.events);
  if (with_wall_time) j.num("wall_seconds", r.wall_seconds);
  j.close();
  std::string s = j.take();
  s += '\n';
  return s;
}

std::string to_csv(const Result& r) {
  std::string s = "t_us,queue_bytes,goodput,mean_rate_gbps,min_rate_gbps,max_rate_gbps,paused";
  char b[64];
  for (uint32_t f : r.tracked_flows) {
    std::snprintf(b, sizeof b, ",flow%u_gbps", f);
    s += b;
  }
  s += '\n';
  for (const Sample& x : r.series) {
    std::snprintf(b, sizeof b, "%.3f,%" PRIu64, x.t_us, x.queue_bytes);
    s += b;
    for (double v : {x.goodput, x.mean_rate_gbps, x.min_rate_gbps, x.max_rate_gbps}) {
      std::snprintf(b, sizeof b, ",%.6g", v);
      s += b;
    }
    s += x.paused ? ",1" : ",0";
    for (double v : x.tracked_gbps) {
      std::snprintf(b, sizeof b, ",%.6g", v);
      s += b;
    }
    s += '\n';
  }
  return s;
}

std::string usage() {
  return "usage: grex-ccsim [options]\n"
         "  packet-level incast simulator driving the congestion controllers of congestion/cc.h\n"
         "  --cc NAME            algorithm: " +
         cc::algorithm_names() +
         " (default rttcc)\n"
         "  --flows N            flows (default 2), flow i on host i % H\n"
         "  --hosts H            sender hosts (default min(N, 64))\n"
         "  --gbps G             line rate of every link, Gbit/s (default 100)\n"
         "  --mtu B              data payload per packet (default 4096; +64 B header on the wire)\n"
         "  --base-rtt-us T      propagation RTT (default 10: idle probe RTT 10.34 us at 100G)\n"
         "  --buffer-mb M        switch buffer, MB = 1e6 B (default 32)\n"
         "  --ecn                RED-like ECN marking at the switch\n"
         "  --kmin-kb K --kmax-kb K --pmax P   marking (default 100, 400, 0.2)\n"
         "  --lossy              tail drop + NACK/resend instead of PFC (lossless is the default)\n"
         "  --cnp-interval-us T  receiver's CnpPacer interval (default: the DCQCN set's, 50; dcqcn-mlx5 4)\n"
         "  --scenario S         long | burst | join-leave (default long)\n"
         "  --burst-kb K         burst: bytes per flow per burst (default 64)\n"
         "  --burst-period-us T  burst: period (default 1000)\n"
         "  --stagger-us T       join-leave: flow i starts at i*T (default 1000)\n"
         "  --duration-ms T      simulated time (default 100)\n"
         "  --warmup-ms T        metrics window starts here (default 10 % of the duration)\n"
         "  --pace payload|wire  bytes the pacer meters against the rate (default payload)\n"
         "  --jitter-ns J        random extra host->switch delay per packet, 0..J ns (default 4)\n"
         "  --seed S             random seed (ECN marking, jitter), default 1\n"
         "  --sample-us T        time-series period (default 10)\n"
         "  --json FILE          write the JSON summary there (default: stdout)\n"
         "  --csv FILE           write the time series there\n"
         "  --help\n";
}

bool parse_args(int argc, const char* const* argv, Cli* out, std::string* error) {
  Config& c = out->cfg;
  for (int i = 1; i < argc; ++i) {
    std::string opt = argv[i];
    const char* val = nullptr;
    std::string inline_val;
    if (const size_t eq = opt.find('='); opt.rfind("--", 0) == 0 && eq != std::string::npos) {
      inline_val = opt.substr(eq + 1);
      opt.resize(eq);
      val = inline_val.c_str();
    }
    // Flags take no value.
    if (opt == "--help" || opt == "-h") {
      out->help = true;
      continue;
    }
    if (opt == "--ecn" || opt == "--lossy" || opt == "--lossless") {
      if (val != nullptr) {
        *error = opt + " takes no value";
        return false;
      }
      if (opt == "--ecn") c.ecn = true;
      if (opt == "--lossy") c.lossy = true;
      if (opt == "--lossless") c.lossy = false;
      continue;
    }
    if (val == nullptr) {
      if (i + 1 >= argc) {
        *error = opt + " needs a value";
        return false;
      }
      val = argv[++i];
    }
    bool ok = true;
    if (opt == "--cc") {
      c.cc = val;
    } else if (opt == "--flows") {
      ok = parse_u32(val, &c.flows);
    } else if (opt == "--hosts") {
      ok = parse_u32(val, &c.hosts);
    } else if (opt == "--gbps") {
      ok = parse_double(val, &c.gbps);
    } else if (opt == "--mtu") {
      ok = parse_u32(val, &c.mtu_bytes);
    } else if (opt == "--base-rtt-us") {
      ok = parse_double(val, &c.base_rtt_us);
    } else if (opt == "--buffer-mb") {
      ok = parse_double(val, &c.buffer_mb);
    } else if (opt == "--kmin-kb") {
      ok = parse_double(val, &c.kmin_kb);
    } else if (opt == "--kmax-kb") {
      ok = parse_double(val, &c.kmax_kb);
    } else if (opt == "--pmax") {
      ok = parse_double(val, &c.pmax);
    } else if (opt == "--cnp-interval-us") {
      ok = parse_double(val, &c.cnp_interval_us);
    } else if (opt == "--scenario") {
      const std::string s = val;
      if (s == "long")
        c.scenario = Scenario::kLong;
      else if (s == "burst")
        c.scenario = Scenario::kBurst;
      else if (s == "join-leave")
        c.scenario = Scenario::kJoinLeave;
      else
        ok = false;
    } else if (opt == "--burst-kb") {
      ok = parse_double(val, &c.burst_kb);
    } else if (opt == "--burst-period-us") {
      ok = parse_double(val, &c.burst_period_us);
    } else if (opt == "--stagger-us") {
      ok = parse_double(val, &c.stagger_us);
    } else if (opt == "--duration-ms") {
      ok = parse_double(val, &c.duration_ms);
    } else if (opt == "--warmup-ms") {
      ok = parse_double(val, &c.warmup_ms);
    } else if (opt == "--pace") {
      const std::string s = val;
      if (s == "payload")
        c.pace_wire_bytes = false;
      else if (s == "wire")
        c.pace_wire_bytes = true;
      else
        ok = false;
    } else if (opt == "--jitter-ns") {
      ok = parse_u32(val, &c.jitter_ns);
    } else if (opt == "--seed") {
      ok = parse_u64(val, &c.seed);
    } else if (opt == "--sample-us") {
      ok = parse_double(val, &c.sample_us);
    } else if (opt == "--json") {
      out->json_path = val;
    } else if (opt == "--csv") {
      out->csv_path = val;
    } else {
      *error = "unknown option " + opt;
      return false;
    }
    if (!ok) {
      *error = "bad value '" + std::string(val) + "' for " + opt;
      return false;
    }
  }
  return true;
}

}  // namespace grex::ccsim
