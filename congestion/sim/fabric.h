// SPDX-License-Identifier: Apache-2.0
// ccsim's leaf-spine fabric (issue 31): L leaves, S spines, H hosts per leaf,
// every leaf joined to every spine. A packet from one leaf to another takes
// the leaf's uplink to the spine that ECMP picks (a hash of source,
// destination and the packet's entropy, the UDP source port a sender varies),
// the spine's downlink to the destination leaf, then that leaf's port to the
// host. Flows send under the same congestion controllers as the single-switch
// simulator (cc::Flow, cc::ProbeScheduler, cc::CnpPacer). A flow sprays over
// `paths` entropies, round robin per packet (1: one path, plain ECMP), under
// one controller for the flow or one per path (path_cc).
//
// Ports are output queues over a per-port buffer, with RED-style ECN marking
// where asked. A packet that finds its port's buffer full is trimmed (the
// switch forwards its header, as Ultra Ethernet's and NDP's switches do) and
// the receiver's NACK brings it back; so is a packet on a spine that failed.
// The model and its simplifications are in README.md ("Leaf-spine fabric").
//
// Units as sim.h: integer nanoseconds, decimal sizes, bit/s.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "congestion/cc.h"
#include "congestion/sim/sim.h"

namespace grex::ccsim {

/// Who sends to whom. N = leaves x hosts_per_leaf hosts, numbered leaf by leaf.
enum class Pattern : uint8_t {
  kPermutation,  ///< a random permutation without fixed points (seeded)
  kRing,         ///< host i to host i + H (mod N): a ring across leaves, as rail-ordered rings run
  kIncast,       ///< hosts 1..senders to host 0
  kAlltoall,     ///< every host to every other host
};

const char* pattern_name(Pattern p) noexcept;

/// How a flow picks each packet's entropy.
enum class Spray : uint8_t {
  kOblivious,  ///< round robin over `paths` fixed entropies (1: plain ECMP)
  kReps,       ///< cc::EntropyRecycler: reuse entropies whose packets came back clean (ECN marks steer it)
};

struct FabricConfig {
  std::string cc = "rttcc";
  cc::Options cc_options;
  uint32_t leaves = 2;
  uint32_t spines = 4;
  uint32_t hosts_per_leaf = 4;
  double host_gbps = 100;   ///< host <-> leaf links
  double spine_gbps = 100;  ///< leaf <-> spine links
  uint32_t mtu_bytes = 4096;
  uint32_t header_bytes = 64;
  double hop_us = 1;         ///< propagation of every link
  double buffer_kb = 1000;   ///< per output port (wire bytes); a packet past it is trimmed
  bool ecn = false;
  double kmin_kb = 100;
  double kmax_kb = 400;
  double pmax = 0.2;
  uint32_t paths = 1;        ///< kOblivious: entropies each flow sprays over, round robin per packet
  Spray spray = Spray::kOblivious;
  /// A controller per path (rttcc, kOblivious, paths 2..256), as the dpdk
  /// driver's GREX_DPDK_PATH_CC=path: once the flow's own controller met
  /// congestion, each entropy's controller takes over (its own probes, rate
  /// and window, from an equal share of the flow's rate); a packet takes the
  /// round robin's next path that may send now, and the flow is paced at the
  /// sum of its paths' rates.
  bool path_cc = false;
  /// Receiver credits (as EQDS and Ultra Ethernet's RCCC): a flow sends a
  /// first window unscheduled, then only what its receiver credits; each
  /// receiver grants one MTU at a time, round robin over its senders, paced at
  /// its own link's rate. A trimmed packet is credited again.
  bool credits = false;
  double unscheduled_kb = -1;  ///< the first window (< 0: one idle RTT at the host rate)
  Pattern pattern = Pattern::kPermutation;
  uint32_t incast_senders = 0;  ///< kIncast: 0 = every other host
  double flow_kb = 0;        ///< bytes each flow sends; 0: long-lived until the end
  double duration_ms = 10;   ///< the end (finite flows: at the latest)
  double warmup_ms = -1;     ///< long-lived flows' goodput is measured after it (< 0: 10 %)
  int failed_spine = -1;     ///< this spine fails at fail_at_ms (-1: none)
  double fail_at_ms = 0;
  int slow_spine = -1;       ///< this spine's links run at slow_factor of spine_gbps (-1: none)
  double slow_factor = 0.25;
  double rttcc_target_us = 0;  ///< 0: the larger of cc_options' and 1.25 x the idle cross-leaf RTT
  /// RTTCC's target grows by this for every switch hop past the first (a
  /// flow across leaves crosses three); < 0: cc_options' (3 us).
  double rttcc_hop_target_us = -1;
  double sample_us = 0;        ///< > 0: FabricResult::series, one point per this much simulated time
  uint64_t seed = 1;
};

struct FabricResult {
  uint32_t hosts = 0;
  uint32_t flows = 0;
  double idle_rtt_us = 0;       ///< a probe's RTT across leaves on an empty fabric
  double rttcc_target_us = 0;      ///< one switch hop's (a flow inside a leaf)
  double rttcc_hop_target_us = 0;  ///< added per hop past the first (across leaves: + 2 x this)
  // Finite flows.
  uint32_t flows_done = 0;
  double completion_ms = -1;    ///< when the last flow delivered its last byte (-1: not all did)
  double mean_flow_ms = -1;     ///< mean of the flows' completion times
  // Goodput: payload delivered per second, over the measured interval
  // (long-lived: [warmup, end]; finite: [0, completion]).
  double goodput_gbps = 0;
  double per_flow_min_gbps = 0;  ///< the slowest flow's
  double per_flow_mean_gbps = 0;
  double jain = -1;
  Dist queue_delay_us;           ///< every switch port, per packet forwarded in the measured interval
  Dist rtt_us;                   ///< RTT samples given to controllers
  std::vector<double> spine_utilization;  ///< per spine: payload+header bits through its links / capacity / time
  // A failed spine (long-lived flows): the delivered rate before it failed,
  // its lowest 50 us window after, its level over the run's last half after
  // the failure, and how long until every later 50 us window held 0.9 of the
  // rate before, or of what the remaining spines carry across leaves if that
  // is less (-1: no failure, or not within the run).
  double before_fail_gbps = 0, dip_gbps = 0, after_fail_gbps = 0;
  double recovery_ms = -1;
  uint64_t data_packets = 0;
  uint64_t trimmed = 0;          ///< dropped to a header at a full buffer or a failed spine
  uint64_t retransmits = 0;
  uint64_t ecn_marks = 0;
  uint64_t cnps = 0;
  uint64_t probes = 0;
  uint64_t explored = 0;         ///< kReps: fresh entropies drawn
  uint64_t credits = 0;          ///< credits granted
  uint64_t invalid_decisions = 0;
  /// With FabricConfig::sample_us: per interval, its end, the payload
  /// delivered over it, and the largest queue any switch port held in it.
  struct Point {
    double t_us = 0, goodput_gbps = 0, max_queue_kb = 0;
  };
  std::vector<Point> series;
  uint64_t events = 0;
  double wall_seconds = 0;
};

/// "" when the configuration can run, else what is wrong with it.
std::string check(const FabricConfig& cfg);

/// The (source, destination) host of every flow of cfg.pattern; `seed` shuffles the permutation.
std::vector<std::pair<uint32_t, uint32_t>> fabric_flows(const FabricConfig& cfg, uint64_t seed);

/// Runs the fabric. False (with *error) when the configuration is invalid.
bool run_fabric(const FabricConfig& cfg, FabricResult* out, std::string* error);

std::string to_json(const FabricConfig& cfg, const FabricResult& r, bool with_wall_time = true);

/// The series as CSV: t_us,goodput_gbps,max_queue_kb, a header line first.
std::string series_csv(const FabricResult& r);

/// grex-ccsim --topology leaf-spine: parses argv[1..argc).
struct FabricCli {
  FabricConfig cfg;
  std::string json_path;
  std::string csv_path;  ///< --csv: the series (sample_us defaults to 50 with it)
  bool help = false;
};
bool parse_fabric_args(int argc, const char* const* argv, FabricCli* out, std::string* error);
std::string fabric_usage();

}  // namespace grex::ccsim
