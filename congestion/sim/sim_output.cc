// SPDX-License-Identifier: Apache-2.0
// ccsim output: the JSON summary (written by nlohmann-json) and the CSV time series.
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "congestion/sim/fabric.h"
#include "congestion/sim/sim.h"

namespace grex::ccsim {
namespace {

using Json = nlohmann::ordered_json;

// A number as the summary gives it: 6 significant digits (nlohmann-json writes
// a value that is not finite as null).
double num(double v) {
  if (!std::isfinite(v)) return v;
  char b[40];
  std::snprintf(b, sizeof b, "%.6g", v);
  return std::strtod(b, nullptr);
}

Json dist_json(const Dist& d) {
  return {{"count", d.count}, {"mean", num(d.mean)}, {"p50", num(d.p50)}, {"p99", num(d.p99)}, {"max", num(d.max)}};
}

Json metrics_json(const Metrics& m) {
  return {
      {"seconds", num(m.seconds)},
      {"goodput", num(m.goodput)},
      {"goodput_of_line_rate", num(m.goodput_of_line_rate)},
      {"goodput_gbps", num(m.goodput_gbps)},
      {"link_utilization", num(m.link_utilization)},
      {"jain", num(m.jain)},
      {"jain_flows", m.jain_flows},
      {"queue_delay_us", dist_json(m.queue_delay_us)},
      {"queue_kb", dist_json(m.queue_kb)},
      {"rtt_us", dist_json(m.rtt_us)},
      {"data_packets", m.data_packets},
      {"retransmits", m.retransmits},
      {"probes", m.probes},
      {"probe_overhead", num(m.probe_overhead)},
      {"drops", m.drops},
      {"probe_drops", m.probe_drops},
      {"nacks", m.nacks},
      {"ecn_marks", m.ecn_marks},
      {"cnps", m.cnps},
      {"stale_probe_replies", m.stale_probe_replies},
      {"pfc_pause_fraction", num(m.pfc_pause_fraction)},
      {"pfc_pauses", m.pfc_pauses},
  };
}

Json config_json(const Config& cfg, const Result& r) {
  Json c = {
      {"cc", cfg.cc},
      {"flows", cfg.flows},
      {"hosts", r.hosts},
      {"gbps", num(cfg.gbps)},
      {"mtu", cfg.mtu_bytes},
      {"base_rtt_us", num(cfg.base_rtt_us)},
      {"rttcc_target_us", num(r.rttcc_target_us)},
      {"buffer_mb", num(cfg.buffer_mb)},
      {"lossy", cfg.lossy},
      {"ecn", cfg.ecn},
      {"kmin_kb", num(cfg.kmin_kb)},
      {"kmax_kb", num(cfg.kmax_kb)},
      {"pmax", num(cfg.pmax)},
      {"scenario", scenario_name(cfg.scenario)},
  };
  if (cfg.scenario == Scenario::kBurst) {
    c["burst_kb"] = num(cfg.burst_kb);
    c["burst_period_us"] = num(cfg.burst_period_us);
  }
  if (cfg.scenario == Scenario::kJoinLeave) c["stagger_us"] = num(cfg.stagger_us);
  c["duration_ms"] = num(cfg.duration_ms);
  c["warmup_ms"] = num(r.warmup_ms);
  c["pace"] = cfg.pace_wire_bytes ? "wire" : "payload";
  c["jitter_ns"] = cfg.jitter_ns;
  c["seed"] = cfg.seed;
  return c;
}

// A summary of the join-leave changes, then every change (there is one per join that fits the run).
Json convergence_json(const Result& r) {
  std::vector<double> times;
  uint32_t unconverged = 0;
  Json list = Json::array();
  for (const Convergence& c : r.convergence) {
    if (c.time_us >= 0)
      times.push_back(c.time_us);
    else
      ++unconverged;
    list.push_back({{"change", c.join ? "join" : "leave"}, {"at_us", num(c.at_us)},
                    {"active_flows", c.active_flows}, {"time_us", num(c.time_us)}});
  }
  std::sort(times.begin(), times.end());
  return {
      {"changes", r.convergence.size()},
      {"not_converged", unconverged},
      {"median_us", num(times.empty() ? -1 : times[times.size() / 2])},
      {"max_us", num(times.empty() ? -1 : times.back())},
      {"list", std::move(list)},
  };
}

}  // namespace

std::string to_json(const Config& cfg, const Result& r, bool with_wall_time) {
  Json j = {
      {"config", config_json(cfg, r)},
      {"idle_probe_rtt_us", num(r.idle_probe_rtt_us)},
      {"cnp_interval_us", num(r.cnp_interval_us)},
      {"pfc_xoff_kb", num(static_cast<double>(r.pfc_xoff_bytes) / 1e3)},
      {"pfc_xon_kb", num(static_cast<double>(r.pfc_xon_bytes) / 1e3)},
      {"window", metrics_json(r.window)},
      {"whole", metrics_json(r.whole)},
      {"max_queue_kb", num(static_cast<double>(r.max_queue_bytes) / 1e3)},
      {"buffer_overflows", r.buffer_overflows},
      {"final_mean_rate_gbps", num(r.final_mean_rate_gbps)},
      {"invalid_decisions", r.invalid_decisions},
  };
  if (cfg.scenario == Scenario::kBurst)
    j["bursts"] = {{"started", r.bursts_started},
                   {"completed", r.bursts_completed},
                   {"completion_us", dist_json(r.burst_completion_us)}};
  if (cfg.scenario == Scenario::kJoinLeave) j["convergence"] = convergence_json(r);
  j["events"] = r.events;
  if (with_wall_time) j["wall_seconds"] = num(r.wall_seconds);
  return j.dump(2) + "\n";
}

std::string series_csv(const FabricResult& r) {
  std::string out = "t_us,goodput_gbps,max_queue_kb\n";
  char line[96];
  for (const FabricResult::Point& p : r.series) {
    std::snprintf(line, sizeof line, "%.3f,%.3f,%.3f\n", p.t_us, p.goodput_gbps, p.max_queue_kb);
    out += line;
  }
  return out;
}

std::string to_json(const FabricConfig& c, const FabricResult& r, bool with_wall_time) {
  Json cfg = {{"topology", "leaf-spine"},
              {"cc", c.cc},
              {"leaves", c.leaves},
              {"spines", c.spines},
              {"hosts_per_leaf", c.hosts_per_leaf},
              {"host_gbps", num(c.host_gbps)},
              {"spine_gbps", num(c.spine_gbps)},
              {"mtu_bytes", c.mtu_bytes},
              {"hop_us", num(c.hop_us)},
              {"buffer_kb", num(c.buffer_kb)},
              {"ecn", c.ecn},
              {"paths", c.paths},
              {"spray", c.spray == Spray::kReps ? "reps" : "oblivious"},
              {"credits", c.credits},
              {"path_cc", c.path_cc},
              {"pattern", pattern_name(c.pattern)},
              {"flow_kb", num(c.flow_kb)},
              {"duration_ms", num(c.duration_ms)},
              {"failed_spine", c.failed_spine},
              {"fail_at_ms", num(c.fail_at_ms)},
              {"slow_spine", c.slow_spine},
              {"slow_factor", num(c.slow_factor)},
              {"rttcc_hop_target_us", num(c.rttcc_hop_target_us)},
              {"seed", c.seed}};
  Json util = Json::array();
  for (double u : r.spine_utilization) util.push_back(num(u));
  Json j = {{"config", cfg},
            {"hosts", r.hosts},
            {"flows", r.flows},
            {"idle_rtt_us", num(r.idle_rtt_us)},
            {"rttcc_target_us", num(r.rttcc_target_us)},
            {"rttcc_hop_target_us", num(r.rttcc_hop_target_us)},
            {"flows_done", r.flows_done},
            {"completion_ms", num(r.completion_ms)},
            {"mean_flow_ms", num(r.mean_flow_ms)},
            {"goodput_gbps", num(r.goodput_gbps)},
            {"per_flow_min_gbps", num(r.per_flow_min_gbps)},
            {"per_flow_mean_gbps", num(r.per_flow_mean_gbps)},
            {"jain", num(r.jain)},
            {"queue_delay_us", dist_json(r.queue_delay_us)},
            {"rtt_us", dist_json(r.rtt_us)},
            {"spine_utilization", util},
            {"before_fail_gbps", num(r.before_fail_gbps)},
            {"dip_gbps", num(r.dip_gbps)},
            {"after_fail_gbps", num(r.after_fail_gbps)},
            {"recovery_ms", num(r.recovery_ms)},
            {"data_packets", r.data_packets},
            {"trimmed", r.trimmed},
            {"retransmits", r.retransmits},
            {"ecn_marks", r.ecn_marks},
            {"cnps", r.cnps},
            {"probes", r.probes},
            {"explored", r.explored},
            {"credits", r.credits},
            {"invalid_decisions", r.invalid_decisions},
            {"events", r.events}};
  if (with_wall_time) j["wall_seconds"] = num(r.wall_seconds);
  return j.dump(2) + "\n";
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

}  // namespace grex::ccsim
