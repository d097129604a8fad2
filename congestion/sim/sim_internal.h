// SPDX-License-Identifier: Apache-2.0
// ccsim internals shared by its files: the event loop's state (events,
// packets, flows, hosts, counters), the histogram, and the Sim class whose
// parts live in sim.cc (construction, events, flows), sim_network.cc (hosts,
// switch, receiver, sender feedback) and sim_measure.cc (measurement).
//
// Cost model: every event does O(log) work at most (the event heap, one
// host's ready heap). Nothing scans the flows per packet; the few O(N) passes
// are per burst, per join-leave window and at the start and the end.
#pragma once

#include <algorithm>
#include <bit>
#include <cassert>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdarg>
#include <cstdint>
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
#include <vector>

#include "congestion/sim/sim.h"

namespace grex::ccsim::detail {

constexpr uint64_t kNever = ~uint64_t{0};
constexpr uint64_t kUnlimited = ~uint64_t{0};

inline uint64_t us_to_ns(double us) { return static_cast<uint64_t>(std::llround(us * 1e3)); }

inline uint32_t host_count(const Config& c) { return c.hosts != 0 ? c.hosts : std::min<uint32_t>(c.flows, 64); }

// One-way propagation host->switch (and switch->receiver): a quarter of the base RTT.
inline uint64_t hop_ns(const Config& c) { return us_to_ns(c.base_rtt_us) / 4; }

// The notification point's CNP spacing: --cnp-interval-us, else the one of
// the DCQCN parameter set the algorithm runs. cc::Algorithm does not say
// which set that is, so the registry's "dcqcn-mlx5" (which applies the mlx5
// set over the options it is given) is recognised by name here.
inline uint64_t cnp_interval_ns(const Config& c, const cc::Algorithm& algo) {
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
inline uint64_t headroom_bytes(const Config& c) {
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

// Transmit utilisation: an exponential average of "busy" with time constant
// tau, advanced lazily (one exp() per packet).
struct Utilisation {
  double value = 0;
  uint64_t at_ns = 0;
  uint64_t busy_until = 0;  // the transmitter's, as of its latest start

  void advance(uint64_t t, double tau_ns) {
    if (t <= at_ns) return;
    const uint64_t busy_end = std::min(t, busy_until);
    if (busy_end > at_ns) {
      value = 1 + (value - 1) * std::exp(-static_cast<double>(busy_end - at_ns) / tau_ns);
      at_ns = busy_end;
    }
    if (t > at_ns) {
      value *= std::exp(-static_cast<double>(t - at_ns) / tau_ns);
      at_ns = t;
    }
  }
};

// A flow's pacer after its controller changed the rate from `old_rate` to
// `rate`. The drivers pace with a token bucket filled at the rate in force
// (cc::TokenBucket): what a packet left owing is paid at the new rate from
// now on. A flow at 6 Mbit/s sends a packet every 5 ms, so waiting for the
// next packet to apply a new rate would lag it by that much. True when the
// flow's next send moved.
inline bool repace(uint64_t now, double old_rate, double rate, double* eligible_exact, uint64_t* eligible_ns) {
  if (!(old_rate > 0) || rate == old_rate || !(*eligible_exact > static_cast<double>(now))) return false;
  const double t = static_cast<double>(now);
  *eligible_exact = t + std::min((*eligible_exact - t) * old_rate / rate, 1e15);
  *eligible_ns = std::max(now, static_cast<uint64_t>(std::ceil(*eligible_exact - 1e-6)));
  return true;
}

// RED-style ECN marking of a packet that finds `q` bytes queued: never at or
// below kmin, always from kmax, in between with probability
// pmax (q - kmin) / (kmax - kmin).
inline bool red_mark(double q, double kmin, double kmax, double pmax, std::mt19937_64& rng) {
  if (q <= kmin) return false;
  if (q >= kmax) return true;
  return static_cast<double>(rng() >> 11) * 0x1.0p-53 < pmax * (q - kmin) / (kmax - kmin);
}

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
template <class P>
class Pool {
 public:
  uint32_t alloc() {
    if (free_.empty()) {
      pool_.emplace_back();
      return static_cast<uint32_t>(pool_.size() - 1);
    }
    const uint32_t i = free_.back();
    free_.pop_back();
    pool_[i] = P{};
    return i;
  }
  void release(uint32_t i) { free_.push_back(i); }
  P& operator[](uint32_t i) { return pool_[i]; }
  const P& operator[](uint32_t i) const { return pool_[i]; }

 private:
  std::vector<P> pool_;
  std::vector<uint32_t> free_;
};
using PacketPool = Pool<Packet>;

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
  Utilisation util;  // of the NIC
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

inline double jain_index(double sum, double sum_sq, uint32_t n) {
  if (n == 0) return -1;
  if (sum_sq <= 0) return 1;  // nobody got anything: equal shares
  return sum * sum / (static_cast<double>(n) * sum_sq);
}

// ---------------------------------------------------------------- simulator

class Sim {
 public:
  Sim(const Config& cfg, const cc::Algorithm& algo);

  void run(Result* r);

 private:
  // ------------------------------------------------------------ events
  // `sub` (0..1000) orders events within one nanosecond before insertion order does.
  void push(uint64_t t, Ev type, uint32_t a = 0, uint32_t b = 0, uint32_t sub = 0) {
    events_.push(Event{t, (uint64_t{sub} << 48) | seq_++, a, b, type});
  }

  void dispatch(const Event& e);

  template <class F>
  void tally(F&& f) {
    f(whole_);
    if (now_ >= warmup_ns_) f(window_);
  }

  void schedule_start();

  // ------------------------------------------------------------ flows
  void start_flow(uint32_t f);

  void on_leave();

  void on_burst();

  // Re-reads the controller's decision after a callback (controllers have
  // no clock, so it changes only then) and keeps the running rate sum.
  void refresh(uint32_t f);

  static bool has_data(const FlowState& fs) { return fs.retx_bytes > 0 || fs.to_send > 0; }

  uint32_t next_payload(const FlowState& fs) const;

  bool window_ok(const FlowState& fs) const;

  // Puts an active flow with data and an open window into its host's heap.
  void make_ready(uint32_t f);

  // ------------------------------------------------------------ hosts
  void schedule_wake(uint32_t hi, uint64_t t);

  void on_wake(uint32_t hi);

  void try_send(uint32_t hi);

  // When a packet whose last bit left the NIC at `end` reaches the switch:
  // one hop later, plus a little random timing noise (PHY, NIC pipeline)
  // that never reorders one host's packets. Without it, identical senders
  // started together stay in lock-step forever, and tail drop (or FIFO
  // ties) then favours whichever host the event order puts first.
  // The noise is drawn in picoseconds: the whole nanoseconds delay the
  // arrival, the fraction orders arrivals within one nanosecond (`sub`).
  uint64_t wire_arrival(Host& h, uint64_t end, uint32_t* sub);

  void send(uint32_t hi, uint32_t f);

  void on_pause();

  void account_pause(uint64_t until);

  void on_resume();

  // ------------------------------------------------------------ switch
  bool ecn_mark(uint64_t q);

  void switch_arrive(uint32_t p);

  void drop(uint32_t p);

  void start_egress();

  void egress_done();

  // ------------------------------------------------------------ receiver
  void receive(uint32_t p);

  // ------------------------------------------------------------ sender feedback
  void on_ack(uint32_t f, uint32_t payload);

  void on_probe_reply(uint32_t f, uint32_t seq);

  void on_cnp(uint32_t f);

  void on_nack(uint32_t f, uint32_t payload);

  // ------------------------------------------------------------ measurement
  void on_sample();

  // The Jain index over one window of the flows active throughout it.
  void on_jain_window();

  double payload_rate_bps() const { return rate_bps_ * mtu_ / (mtu_ + hdr_); }

  Metrics metrics(const Counters& c, uint64_t t0, uint64_t t1, bool window) const;

  void finish(Result* r);

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
  double idle_rtt_ns_ = 0;  // a probe's RTT right behind one data packet on an empty path
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

}  // namespace grex::ccsim::detail
