// SPDX-License-Identifier: Apache-2.0
// ccsim command line: usage() and parse_args().
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "congestion/sim/sim.h"

namespace grex::ccsim {
namespace {

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
         "  --rttcc-target-us T  RTTCC's target delay (default: max(13, 1.25 x the idle probe RTT))\n"
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
    } else if (opt == "--rttcc-target-us") {
      ok = parse_double(val, &c.rttcc_target_us) && c.rttcc_target_us > 0;
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
