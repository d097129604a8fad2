// SPDX-License-Identifier: Apache-2.0
// ccsim: a packet-level, discrete-event incast simulator that drives the
// congestion controllers of congestion/cc.h (the very objects the drivers
// run) through cc::Flow, cc::ProbeScheduler and cc::CnpPacer.
//
// Topology: H sender hosts, N flows spread round-robin over them (flow i on
// host i % H), one switch egress port towards one receiver. Every link runs
// at the same line rate. The switch port is a FIFO over a shared buffer with
// optional RED-style ECN marking, and either PFC-like pause (lossless, the
// default) or tail drop (lossy). README.md has the model and its assumptions.
//
// Units: time in integer nanoseconds; sizes decimal (1 KB = 1000 B,
// 1 MB = 10^6 B); rates in bit/s (Gbit/s on the command line).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "congestion/cc.h"

namespace grex::ccsim {

enum class Scenario : uint8_t {
  kLong,       ///< every flow long-lived from t = 0
  kBurst,      ///< every flow sends burst_kb at t = 0 and every burst_period_us
  kJoinLeave,  ///< flow i starts at i * stagger_us; the first half leaves at 2/3 of the run
};

const char* scenario_name(Scenario s) noexcept;

struct Config {
  std::string cc = "rttcc";  ///< a registered algorithm (cc::find)
  cc::Options cc_options;    ///< controller parameters (its `algorithm` field is ignored)
  uint32_t flows = 2;
  uint32_t hosts = 0;        ///< 0: min(flows, 64)
  double gbps = 100;         ///< line rate of every link
  uint32_t mtu_bytes = 4096;  ///< data payload per packet
  uint32_t header_bytes = 64;  ///< added to every data packet on the wire
  uint32_t probe_bytes = 64;   ///< a timing probe on the wire
  double base_rtt_us = 10;     ///< propagation only: host->switch and switch->receiver base/4 each, back base/2
  /// RTTCC's target delay, a setting of the fabric; 0: the larger of
  /// cc_options' (13 us) and 1.25 x the idle probe RTT.
  double rttcc_target_us = 0;
  bool pace_wire_bytes = false;  ///< the pacer meters wire bytes (payload + header), not payload
  uint32_t jitter_ns = 4;      ///< host->switch: up to this much random extra delay per packet (order kept)
  double buffer_mb = 32;       ///< switch buffer, wire bytes
  bool ecn = false;
  double kmin_kb = 100;        ///< RED-style marking: no mark below
  double kmax_kb = 400;        ///< ... always above
  double pmax = 0.2;           ///< ... probability at kmax
  bool lossy = false;          ///< tail drop instead of PFC
  double cnp_interval_us = -1;  ///< the receiver's CnpPacer; < 0: the algorithm's DCQCN set's (cnp_interval_ns)
  Scenario scenario = Scenario::kLong;
  double burst_kb = 64;
  double burst_period_us = 1000;
  double stagger_us = 1000;
  double duration_ms = 100;
  double warmup_ms = -1;       ///< < 0: 10 % of the duration
  uint64_t seed = 1;
  double sample_us = 10;       ///< time-series period; 0: no series
  double jain_window_us = 50;  ///< join-leave convergence: window of the Jain index
  double converged_jain = 0.9;  ///< ... and the level it must stay at
  uint32_t tracked_flows = 4;  ///< flows whose rate the time series shows (spread over the ids)
};

/// A distribution summary (from a log-linear histogram: bins under 0.8 % wide).
struct Dist {
  uint64_t count = 0;
  double mean = 0;
  double p50 = 0;
  double p99 = 0;
  double max = 0;
};

/// Metrics over one interval (the measurement window or the whole run).
struct Metrics {
  double seconds = 0;               ///< length of the interval
  double goodput = 0;               ///< delivered payload / (time x line rate x mtu/(mtu+header)): 1 = a saturated link
  double goodput_of_line_rate = 0;  ///< delivered payload bits / time / line rate (at most mtu/(mtu+header))
  double goodput_gbps = 0;
  double link_utilization = 0;      ///< wire bits (data and probes) leaving the switch port / time / line rate
  double jain = -1;                 ///< Jain index of per-flow delivered bytes, flows active throughout; -1: none
  uint32_t jain_flows = 0;
  Dist queue_delay_us;              ///< wait in the switch queue, per dequeued packet (data and probes)
  Dist queue_kb;                    ///< switch queue occupancy seen by each arriving packet (before it)
  Dist rtt_us;                      ///< probe RTT samples given to controllers
  uint64_t data_packets = 0;        ///< data packets put on the wire (retransmissions included)
  uint64_t retransmits = 0;
  uint64_t probes = 0;
  uint64_t drops = 0;               ///< data packets dropped (lossy)
  uint64_t probe_drops = 0;
  uint64_t cnps = 0;
  uint64_t nacks = 0;
  uint64_t ecn_marks = 0;
  uint64_t stale_probe_replies = 0;  ///< replies to probes the scheduler had given up
  double probe_overhead = 0;        ///< probe wire bytes / data wire bytes sent
  double pfc_pause_fraction = 0;    ///< time the senders were paused / interval
  uint64_t pfc_pauses = 0;          ///< XOFF events
};

/// Join-leave: how long after a change of the flow set the Jain index of the
/// active flows' delivered bytes per window got to stay >= converged_jain.
struct Convergence {
  bool join = true;
  double at_us = 0;
  uint32_t active_flows = 0;  ///< after the change
  double time_us = -1;        ///< -1: not converged before the next change (or the end)
};

/// One row of the time series.
struct Sample {
  double t_us = 0;
  uint64_t queue_bytes = 0;
  double goodput = 0;          ///< over the sample interval, normalised as Metrics::goodput
  double mean_rate_gbps = 0;   ///< controllers' pacing rate, mean over the active flows
  double min_rate_gbps = 0;    ///< min / max over the tracked flows that are active
  double max_rate_gbps = 0;
  bool paused = false;         ///< senders paused by PFC at the sample time
  std::vector<double> tracked_gbps;  ///< per tracked flow (-1 when it is not active)
};

struct Result {
  Metrics window;  ///< [warmup, end]
  Metrics whole;   ///< [0, end]
  double warmup_ms = 0;
  uint32_t hosts = 0;
  double idle_probe_rtt_us = 0;  ///< a probe's RTT right behind one data packet on an empty path
  double rttcc_target_us = 0;    ///< the target delay RTTCC ran with
  double cnp_interval_us = -1;   ///< the CnpPacer's interval (-1: the algorithm takes no CNPs)
  uint64_t pfc_xoff_bytes = 0;
  uint64_t pfc_xon_bytes = 0;
  uint64_t max_queue_bytes = 0;
  uint64_t buffer_overflows = 0;  ///< lossless: enqueues past the buffer (must stay 0)
  std::vector<Convergence> convergence;
  uint32_t bursts_started = 0;
  uint32_t bursts_completed = 0;
  Dist burst_completion_us;  ///< from a burst's start until every flow's share of it was delivered
  std::vector<uint32_t> tracked_flows;
  std::vector<Sample> series;
  double final_mean_rate_gbps = 0;  ///< controllers' pacing rate at the end, mean over the active flows
  uint64_t invalid_decisions = 0;   ///< decision().rate_bps <= 0 or not finite (a controller bug)
  uint64_t events = 0;
  double wall_seconds = 0;
};

/// "" when the configuration can run, else what is wrong with it.
std::string check(const Config& cfg);

/// Runs the simulation. False (with *error) when the configuration is invalid.
bool run(const Config& cfg, Result* out, std::string* error);

/// The summary as JSON (wall_seconds left out when !with_wall_time, so two
/// runs can be compared byte for byte).
std::string to_json(const Config& cfg, const Result& r, bool with_wall_time = true);

/// The time series as CSV (a header line, then one row per sample).
std::string to_csv(const Result& r);

/// The command line of grex-ccsim.
struct Cli {
  Config cfg;
  std::string json_path;  ///< empty: JSON to stdout
  std::string csv_path;   ///< empty: no CSV
  bool help = false;
};

/// Parses argv[1..argc); false with *error on a bad option.
bool parse_args(int argc, const char* const* argv, Cli* out, std::string* error);

std::string usage();

}  // namespace grex::ccsim
