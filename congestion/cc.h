// SPDX-License-Identifier: Apache-2.0
// Per-flow congestion control. One small object per flow behind one
// interface, in the manner of Linux's tcp_congestion_ops:
//
//   - every callback returns void and cannot fail;
//   - time arrives in the arguments (no clock reads, no I/O, no allocation),
//     so the same object runs in a driver's data path and in the simulator;
//   - each algorithm's state lives inside the Flow that owns it, in a fixed
//     number of bytes (kStateBytes) checked at build time;
//   - decision() says how fast the flow may send (and how much may be in
//     flight), and the driver's pacer enforces it.
//
// Algorithms are found by name in a registry ("rttcc", "rttcc-template",
// "dcqcn", "timely", "swift", "none"). Parameters are plain structs with the
// unit in every field name; each algorithm documents where its defaults come
// from (docs/congestion.md).
//
// Beside the controllers: ProbeScheduler (when a flow sends an RTT probe,
// the rules RTTCC specifies) and CnpPacer (the DCQCN notification point:
// at most one CNP per flow per interval).
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <span>
#include <string>
#include <string_view>

namespace grex::cc {

/// What the flow's path offers; fixed when the flow is created.
struct PathInfo {
  double line_rate_bps = 100e9;  ///< the sender's link rate
  uint32_t mtu_bytes = 4096;     ///< data payload per packet (window and byte-counter units)
};

/// The controller's answer: how the pacer lets the flow send.
struct Decision {
  double rate_bps = 0;        ///< pacing rate (> 0)
  uint64_t window_bytes = 0;  ///< bytes allowed in flight; 0: no window, the rate alone limits
};

/// One RTT measurement from a timing probe (or an echoed timestamp).
struct RttSample {
  uint64_t now_ns = 0;  ///< when the reply arrived
  uint64_t rtt_ns = 0;  ///< round trip minus the target's dwell time
  /// The sending port's transmit utilisation (0..1) over about the last RTT,
  /// or a negative value when the caller does not know it.
  double port_utilization = -1;
  /// Up to this much of rtt_ns may be the hosts, not the path: the time the
  /// receiver had not read its receive ring before the read that brought the
  /// probe, plus the same gap at the sender before the reply was read (a
  /// compute phase, a preemption). 0: none, or not known.
  uint64_t host_gap_ns = 0;
  /// Switch hops the probe crossed on its way out (0: not known, counted as
  /// one): a delay target that allows queueing at each switch grows with them.
  uint32_t hops = 0;
};

/// The most hops a controller counts from RttSample::hops (a larger count
/// is taken as this many).
inline constexpr uint32_t kMaxSampleHops = 16;

// ---------------------------------------------------------------- parameters

/// The RTTCC parameter sets.
enum class RttccSet : uint8_t {
  kZtr,       ///< grex's default: bounded steps, hyper-increase, proportional decrease
  kTemplate,  ///< DOCA PCC rtt_template
};

/// RTTCC: timing-probe driven AIMD on the measured RTT (rttcc.cc).
struct RttccParams {
  RttccSet set = RttccSet::kZtr;
  uint64_t target_delay_ns = 13'000;  ///< base RTT / target: below it, increase
  /// ztr: added to the target for every switch hop past the first that a
  /// sample's probe crossed (RttSample::hops), as Swift scales its fabric
  /// target with the hop count. The 13 us target is one switch's queue;
  /// across a leaf-spine fabric a probe meets three, and sprayed packets
  /// find a short transient queue at each (docs/congestion.md).
  uint64_t hop_target_ns = 3'000;
  /// ztr: the target is at least this multiple of the smallest RTT seen
  /// (within [target, max delay / 2]), so a path whose unloaded RTT exceeds
  /// the target is not read as congested forever. 0 (the default): the
  /// target alone. use_software_timestamps() sets 1.25: probes timestamped in
  /// software carry the hosts' polling delays.
  double min_rtt_target_factor = 0;
  /// Cut from the rate actually sent since the previous sample when that is
  /// below half the allowance (a backlogged flow held back by its NIC share).
  /// Wrong for on/off traffic (collectives), where an idle gap reads as a low
  /// rate: use_software_timestamps() turns it off.
  bool cut_from_sent_rate = true;
  uint64_t max_delay_ns = 250'000;    ///< above it, the hard decrease
  double start_rate_fraction = 1.0;   ///< a new flow's rate, of line rate
  double min_rate_fraction = 1e-6;    ///< floor, of line rate (template: 2^-14)
  double ai_fraction = 0.0001;        ///< additive increase per uncongested sample, of line rate
  // template: multiplicative steps (DOCA: UPDATE_FACTOR 0.1 -> x0.9, 2x on
  // CNP -> x0.8, 5x on NACK past max delay -> x0.5), doubled above
  // high_utilization.
  double update_factor = 0.1;
  double high_utilization = 0.85;
  // ztr: bounded per-update change, hyper-increase, proportional decrease.
  double min_change = 0.97;                     ///< per update, lower bound of rate'/rate
  double max_change = 1.06;                     ///< per update, upper bound of rate'/rate
  uint64_t hyper_increase_period_ns = 200'000;  ///< each period without congestion: + k HAI (k-th in a row)
  double hai_fraction = 0.0005;                 ///< hyper-increase step, of line rate
  /// rate *= 1 - gain (rtt - target) / max(rtt, time since the previous
  /// sample): a flow that samples once per RTT cuts by its excess delay; one
  /// that samples once per 5 ms (a packet per 5 ms at 16 k flows) spreads
  /// the cut over that interval, as every flow on the queue cuts within it.
  double decrease_gain = 0.25;
  /// The gain past the max delay or with a NACK. use_software_timestamps()
  /// (the drivers) sets 0.5: without cut_from_sent_rate a flow that starts
  /// at line rate into a slower bottleneck comes down by these cuts alone,
  /// one per RTT.
  double severe_decrease_gain = 0.25;
  double first_congestion_factor = 0.5;         ///< the first congestion a flow sees
  /// ... when that first cut starts from what the flow sent (cut_from_sent_rate:
  /// held back to its share of the path, which halving would count twice).
  double first_cut_from_sent_factor = 0.8;
  /// A flow whose samples are at least this many RTTs apart projects its
  /// RTT one sample interval ahead: a falling RTT that would reach the
  /// target by its next sample counts as calm, so the flow grows while the
  /// queue drains instead of an interval after it emptied. 0: off.
  double rare_sample_rtts = 4;
  /// A congested sample whose RTT is below hold_ratio x the previous
  /// sample's leaves the rate alone (no NACK with it): the queue is already
  /// draining, and the cuts that drain it have not all shown yet, so another
  /// cut would undershoot. 0: off.
  double hold_ratio = 0.98;
  /// Besides max_change, an increase may reach + k x this fraction of line
  /// rate per ms since the previous sample, for the k-th calm sample in a
  /// row. Matters only to a flow that samples rarely (a packet per several
  /// ms, as at 16 k flows), where max_change alone lets it grow 6 % per
  /// packet; the term is the same per unit time for every flow, so it is
  /// additive and keeps shares fair. 0: off.
  double time_increase_fraction_per_ms = 0.6e-6;
  /// ztr flow scaling: extra target delay, up to fs_range_ns for a flow at
  /// fs_min_fraction of line rate, shrinking as 1/sqrt(rate) to 0 at line
  /// rate (Swift's flow scaling on rate instead of window). 0: off.
  double fs_range_ns = 50000;
  double fs_min_fraction = 1e-4;
  /// ztr slow start: a new flow keeps at most this many packets in flight
  /// until its first sample and doubles that window with each calm sample.
  /// At the first congested sample its rate becomes what the window
  /// delivered x first_cut_from_sent_factor, and the rate takes over: the
  /// window over max(RTT, time since the previous sample) with
  /// cut_from_sent_rate, else over the RTT (on/off traffic), and past the
  /// max delay without it the usual first cut instead. Past line rate x max
  /// delay of window, slow start ends without a cut. 0: start at
  /// start_rate_fraction with no window.
  double start_window_packets = 1;
  /// ztr: start as a flow that has met congestion already: no slow start's
  /// window, and its first congestion is cut as any later one (not halved).
  /// For a controller that takes over from another (the simulator's
  /// controllers per path take over from the flow's once it met congestion).
  bool start_past_congestion = false;
  /// ztr: after slow start, the bytes in flight stay within this many
  /// targets' worth of the rate (rate x target x window_targets, at least
  /// one packet), so a flow's own share of a queue is bounded before its
  /// next sample, and a flow whose share is under a packet per RTT keeps
  /// one packet in flight. 0: no window.
  double window_targets = 2;
  /// ztr: a rare sampler (samples at least rare_sample_rtts RTTs apart),
  /// past its first congestion, whose RTT and previous RTT are both within
  /// the max delay, takes one linear rule in place of the cut, the hold and
  /// the projection: rate x (1 - linear_gain ((RTT - aim) + (RTT - previous
  /// RTT)) / interval), within [min_change, max_change], a proportional
  /// term on the queue and a derivative one on its trend. The aim is the
  /// target + linear_aim_interval_fraction x the interval: the queue swings
  /// by about what 16 k flows add between two samples, so the level that
  /// keeps it from running empty grows with the interval. The usual
  /// increase (AI, hyper-increase, time term) applies as well once
  /// linear_calm_run samples in a row called for an increase, or at an RTT
  /// within the base target (an empty queue). 0: off (the drivers, whose
  /// intervals include idle spells).
  double linear_gain = 1;
  double linear_aim_interval_fraction = 0.014;
  uint32_t linear_calm_run = 5;
};

/// The DCQCN parameter sets.
enum class DcqcnSet : uint8_t {
  kPaper,  ///< the DCQCN paper's values, paced CNPs every 50 us (the default)
  kMlx5,   ///< ConnectX (mlx5) firmware defaults, CNPs every 4 us
};

/// DCQCN reaction point (dcqcn.cc) after Zhu et al., "Congestion Control for
/// Large-Scale RDMA Deployments", SIGCOMM 2015. Defaults: the paper's set;
/// apply_dcqcn_set(kMlx5) gives the mlx5 firmware defaults (mlxconfig names in
/// docs/congestion.md). The two differ in how fast a flow recovers between
/// CNPs, and each is consistent only with its own CNP spacing.
struct DcqcnParams {
  DcqcnSet set = DcqcnSet::kPaper;
  uint64_t cnp_interval_ns = 50'000;         ///< notification point: at most one CNP per flow per interval
  double alpha_keep = 255.0 / 256;           ///< alpha = keep alpha (+ 1 - keep on a CNP); paper g = 1/256
  uint64_t alpha_update_period_ns = 55'000;  ///< alpha timer
  double initial_alpha = 1.0;                ///< alpha at the first CNP
  uint64_t rate_reduce_period_ns = 4'000;    ///< at most one cut per period
  double min_dec_fraction = 0.5;             ///< one cut keeps at least this fraction of the rate
  uint64_t rate_increase_period_ns = 55'000;  ///< timer T
  uint64_t byte_counter_bytes = 10'000'000;  ///< byte counter B
  uint32_t fast_recovery_steps = 5;          ///< F
  double ai_rate_bps = 40e6;                 ///< R_AI
  double hai_rate_bps = 400e6;               ///< R_HAI (10 x R_AI, the ratio mlx5 uses too)
  double min_rate_bps = 1e6;                 ///< floor
  double start_rate_fraction = 1.0;          ///< flows start at line rate
};

/// Resets *p to the defaults of a parameter set.
void apply_dcqcn_set(DcqcnParams* p, DcqcnSet set) noexcept;

/// TIMELY (timely.cc): RTT-gradient rate control (Mittal et al., SIGCOMM 2015).
struct TimelyParams {
  uint64_t t_low_ns = 50'000;      ///< below: additive increase whatever the gradient (paper: 50 us)
  uint64_t t_high_ns = 500'000;    ///< above: rate *= 1 - beta (1 - T_high / rtt) (paper: 500 us)
  uint64_t min_rtt_ns = 20'000;    ///< gradient normalisation, the path's minimum RTT (paper: 20 us)
  double ewma_weight = 0.46;       ///< weight of a new RTT difference (eRPC's TIMELY: 0.46)
  double ai_rate_bps = 10e6;       ///< delta (paper: 10 Mbit/s)
  double beta = 0.8;               ///< multiplicative decrease gain (paper: 0.8)
  uint32_t hai_after_samples = 5;  ///< N: hyper-active increase after N non-positive gradients (paper: 5)
  double start_rate_fraction = 1.0;
  double min_rate_bps = 10e6;
};

/// Swift (swift.cc): delay target with flow scaling, AI/MD on a window
/// (SIGCOMM 2020).
struct SwiftParams {
  uint64_t base_target_ns = 25'000;    ///< fabric base target delay
  uint64_t hop_target_ns = 0;          ///< per-hop addition, times the sample's hops (at least one)
  double fs_range_ns = 50'000;         ///< flow-scaling range: extra target at tiny windows
  double fs_min_cwnd_packets = 0.1;    ///< flow scaling saturates here...
  double fs_max_cwnd_packets = 100;    ///< ... and vanishes here
  double ai_packets = 1.0;             ///< additive increase per RTT, in packets
  double beta = 0.8;                   ///< multiplicative decrease gain
  double max_mdf = 0.5;                ///< largest decrease in one step
  double min_cwnd_packets = 0.001;     ///< below one packet the flow is paced at cwnd / RTT
  double max_cwnd_packets = 1024;
  double start_cwnd_packets = 0;       ///< 0: one bandwidth-delay product at line rate
  uint64_t base_rtt_ns = 13'000;       ///< for the starting window and pacing before samples
};

/// The defaults of an RTTCC parameter set.
inline RttccParams rttcc_params(RttccSet set) noexcept {
  RttccParams d;  // ztr defaults
  if (set == RttccSet::kTemplate) {
    // DOCA PCC rtt_template (rtt_template_algo_params.h): BASE_RTT 13 us,
    // MAX_DELAY 150 us, AI 5 % of line rate, UPDATE_FACTOR 0.1, NEW_FLOW_RATE
    // = line rate, MIN_RATE = 2^-14 of it; decreases doubled above 85 % port
    // utilisation (HIGH_UTIL_THRESHOLD).
    d.set = RttccSet::kTemplate;
    d.target_delay_ns = 13'000;
    d.hop_target_ns = 0;  // the template's base RTT is one fixed number
    d.max_delay_ns = 150'000;
    d.ai_fraction = 0.05;
    d.update_factor = 0.1;
    d.high_utilization = 0.85;
    d.min_rate_fraction = 1.0 / 16384;
  }
  return d;
}

/// Everything a flow's controller may need; each algorithm reads its part.
struct Options {
  std::string algorithm = "rttcc";
  RttccParams rttcc;  ///< rttcc (the ztr set)
  /// rttcc-template (DOCA PCC rtt_template's set). Its base RTT and max
  /// delay are settings of the path, as the ztr set's target is: a caller
  /// that sets those (use_software_timestamps) sets them on both.
  RttccParams rttcc_template = rttcc_params(RttccSet::kTemplate);
  DcqcnParams dcqcn;
  TimelyParams timely;
  SwiftParams swift;
};

// ---------------------------------------------------------------- controllers

/// One flow's controller. Implementations keep all state inside the object.
class Controller {
 public:
  virtual ~Controller() = default;
  /// A timing probe came back.
  virtual void on_rtt_sample(const RttSample& s) noexcept { (void)s; }
  /// A congestion notification (DCQCN CNP, or an ECN echo) arrived.
  virtual void on_cnp(uint64_t now_ns) noexcept { (void)now_ns; }
  /// The receiver reported a loss (NACK, SACK gap).
  virtual void on_nack(uint64_t now_ns) noexcept { (void)now_ns; }
  /// Data went unacknowledged past the retransmission timeout.
  virtual void on_timeout(uint64_t now_ns) noexcept { (void)now_ns; }
  /// The latest timeout was the hosts' doing: the packet's lateness is
  /// explained by the time the two ends did not read their rings. A
  /// controller that has not acted on that timeout yet may forget it.
  virtual void on_spurious_timeout(uint64_t now_ns) noexcept { (void)now_ns; }
  /// The flow put `bytes` of data on the wire.
  virtual void on_bytes_sent(uint64_t now_ns, uint64_t bytes) noexcept {
    (void)now_ns;
    (void)bytes;
  }
  /// How the flow may send now.
  virtual Decision decision() const noexcept = 0;
};

/// Bytes every algorithm's state must fit in (checked at build time).
inline constexpr size_t kStateBytes = 384;

/// A registered algorithm.
struct Algorithm {
  const char* name;          ///< "rttcc", "dcqcn", ...
  const char* summary;       ///< one line for --help and docs
  bool wants_rtt_probes;     ///< the driver should run a ProbeScheduler for it
  bool wants_cnp;            ///< it reacts to CNPs (the receiver runs a CnpPacer)
  /// Constructs the controller in `storage` (kStateBytes, max_align_t aligned).
  Controller* (*construct)(void* storage, const Options& opts, const PathInfo& path, uint64_t now_ns) noexcept;
};

/// Every algorithm, in a fixed order.
std::span<const Algorithm> algorithms() noexcept;
/// The algorithm called `name`, or nullptr.
const Algorithm* find(std::string_view name) noexcept;
/// "rttcc, rttcc-template, dcqcn, timely, swift, none".
std::string algorithm_names();

/// Builds the construct function for controller type T, checking its size.
template <class T>
Controller* construct_in(void* storage, const Options& opts, const PathInfo& path, uint64_t now_ns) noexcept {
  static_assert(sizeof(T) <= kStateBytes, "a controller's state must fit in cc::kStateBytes");
  static_assert(alignof(T) <= alignof(std::max_align_t), "controller state is max_align_t aligned");
  return new (storage) T(opts, path, now_ns);
}

/// A flow's controller with its state inline: no allocation.
class Flow {
 public:
  Flow() = default;
  /// Makes the flow run `algo` (replacing any earlier controller).
  void reset(const Algorithm& algo, const Options& opts, const PathInfo& path, uint64_t now_ns) noexcept {
    destroy();
    algo_ = &algo;
    ctl_ = algo.construct(storage_, opts, path, now_ns);
  }
  ~Flow() { destroy(); }
  Flow(const Flow&) = delete;
  Flow& operator=(const Flow&) = delete;

  bool active() const noexcept { return ctl_ != nullptr; }
  const Algorithm& algorithm() const noexcept { return *algo_; }
  Controller* operator->() noexcept { return ctl_; }
  const Controller* operator->() const noexcept { return ctl_; }

 private:
  void destroy() noexcept {
    if (ctl_ != nullptr) ctl_->~Controller();
    ctl_ = nullptr;
  }
  alignas(std::max_align_t) unsigned char storage_[kStateBytes];
  const Algorithm* algo_ = nullptr;
  Controller* ctl_ = nullptr;
};

// ---------------------------------------------------------------- probes

/// When to send a timing probe (RTTCC's rules, after DOCA PCC rtt_template):
///   - one probe outstanding per flow;
///   - the next goes with the first data send after a reply;
///   - a probe not answered within the timeout (300 us, doubling with each
///     consecutive loss, up to 64x) is given up and sent again, with the next
///     send once at least 2 sends went out without a probe;
///   - a late reply to a probe given up still counts (the reply echoes the
///     probe's own send time, so the sample is exact); a duplicate or a reply
///     older than one already counted does not.
class ProbeScheduler {
 public:
  static constexpr uint64_t kTimeoutNs = 300'000;
  static constexpr uint32_t kMaxBackoffShift = 6;
  static constexpr uint32_t kSendsBeforeResend = 2;

  /// Call on every data send; true: send a probe with this send, carrying seq().
  bool on_send(uint64_t now_ns) noexcept;
  /// Call when a reply for probe `seq` arrives; true: take an RTT sample from
  /// it (timed from that probe's own send time). False for a duplicate, a
  /// reply older than one already taken, or a seq never sent.
  bool on_reply(uint32_t seq) noexcept;
  /// Sequence number of the newest probe.
  uint32_t seq() const noexcept { return seq_; }
  bool outstanding() const noexcept { return outstanding_; }
  uint64_t probes_sent() const noexcept { return sent_; }
  uint64_t probes_lost() const noexcept { return lost_; }
  /// The current timeout (with backoff).
  uint64_t timeout_ns() const noexcept { return kTimeoutNs << backoff_; }

 private:
  uint64_t sent_at_ns_ = 0;
  uint64_t sent_ = 0;
  uint64_t lost_ = 0;
  uint32_t seq_ = 0;
  uint32_t answered_ = 0;  // the newest seq whose reply was taken
  uint32_t backoff_ = 0;
  uint32_t sends_since_ = 0;
  bool outstanding_ = false;
};

/// The pacer both drivers put in front of a flow: a token bucket filled at
/// the controller's rate. It saves at most `burst_ns` of tokens while idle
/// (and at least `min_bytes`, so a packet always fits); something may go
/// while the bucket is positive, so a message larger than the bucket goes
/// whole and the next one waits until the bucket refills.
class TokenBucket {
 public:
  void reset(uint64_t now_ns, double initial_bytes) noexcept {
    tokens_ = initial_bytes;
    at_ns_ = now_ns;
  }
  bool allows(uint64_t now_ns, double rate_bps, double min_bytes, uint64_t burst_ns) noexcept {
    const double per_ns = rate_bps / 8e9;
    const double cap = per_ns * static_cast<double>(burst_ns) > min_bytes ? per_ns * static_cast<double>(burst_ns)
                                                                           : min_bytes;
    if (now_ns > at_ns_) {
      tokens_ += per_ns * static_cast<double>(now_ns - at_ns_);
      if (tokens_ > cap) tokens_ = cap;
    }
    at_ns_ = now_ns;
    return tokens_ > 0;
  }
  void take(double bytes) noexcept { tokens_ -= bytes; }

 private:
  double tokens_ = 0;
  uint64_t at_ns_ = 0;
};

/// RTTCC's settings for a path whose RTT samples are timestamped in software
/// (the DPDK and verbs drivers): the target is `target_ns` and at least 1.25 x
/// the smallest RTT seen (host polling jitter is in every sample), the max
/// delay at least 4 targets, and cuts start from the allowed rate (collectives
/// are on/off traffic: an idle gap must not read as a low sending rate), so
/// past the max delay they cut with gain 0.5 instead of 0.25, and rare
/// samplers keep the cut and hold rules instead of the linear one.
inline void use_software_timestamps(RttccParams* p, uint64_t target_ns) noexcept {
  p->target_delay_ns = target_ns;
  p->max_delay_ns = p->max_delay_ns > 4 * target_ns ? p->max_delay_ns : 4 * target_ns;
  p->min_rtt_target_factor = 1.25;
  p->cut_from_sent_rate = false;
  p->severe_decrease_gain = 0.5;
  p->linear_gain = 0;  // its aim grows with the sample interval, which idle spells stretch
}

/// The same for both RTTCC sets: the template's base RTT is `target_ns` too.
inline void use_software_timestamps(Options* o, uint64_t target_ns) noexcept {
  use_software_timestamps(&o->rttcc, target_ns);
  use_software_timestamps(&o->rttcc_template, target_ns);
}

/// DCQCN notification point, per flow at the receiver: a CE-marked packet
/// yields a CNP unless one went out less than `interval_ns` ago.
class CnpPacer {
 public:
  static constexpr uint64_t kDefaultIntervalNs = 50'000;  ///< the DCQCN paper's spacing (DcqcnParams::cnp_interval_ns)
  explicit CnpPacer(uint64_t interval_ns = kDefaultIntervalNs) noexcept : interval_ns_(interval_ns) {}
  /// A marked packet arrived; true: send a CNP now.
  bool on_marked(uint64_t now_ns) noexcept {
    if (sent_any_ && now_ns - last_ns_ < interval_ns_) return false;
    sent_any_ = true;
    last_ns_ = now_ns;
    return true;
  }

 private:
  uint64_t interval_ns_;
  uint64_t last_ns_ = 0;
  bool sent_any_ = false;
};

}  // namespace grex::cc
