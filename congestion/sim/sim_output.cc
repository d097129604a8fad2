// SPDX-License-Identifier: Apache-2.0
// ccsim output: the JSON summary and the CSV time series.
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <string>
#include <vector>

#include "congestion/sim/sim.h"

namespace grex::ccsim {
namespace {

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

}  // namespace

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
  j.num("rttcc_target_us", r.rttcc_target_us);
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

}  // namespace grex::ccsim
