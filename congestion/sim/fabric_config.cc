// SPDX-License-Identifier: Apache-2.0
// ccsim's leaf-spine fabric: names, the configuration's check, who sends to whom (fabric.h),
// and how fast the delivered rate came back after a spine failed.
#include <algorithm>
#include <random>
#include <string>

#include "congestion/sim/fabric.h"
#include "congestion/sim/fabric_internal.h"

namespace grex::ccsim {

const char* pattern_name(Pattern p) noexcept {
  switch (p) {
    case Pattern::kPermutation: return "permutation";
    case Pattern::kRing: return "ring";
    case Pattern::kIncast: return "incast";
    case Pattern::kAlltoall: return "alltoall";
  }
  return "?";
}

std::string check(const FabricConfig& c) {
  if (cc::find(c.cc) == nullptr) return "unknown congestion control '" + c.cc + "' (" + cc::algorithm_names() + ")";
  if (c.leaves < 1 || c.spines < 1 || c.hosts_per_leaf < 1) return "leaves, spines and hosts per leaf must be >= 1";
  if (c.leaves * c.hosts_per_leaf < 2) return "the fabric needs at least 2 hosts";
  if (c.leaves > 256 || c.spines > 256 || c.hosts_per_leaf > 256) return "at most 256 leaves, spines, hosts per leaf";
  if (!(c.host_gbps > 0) || !(c.spine_gbps > 0)) return "link rates must be > 0";
  if (c.mtu_bytes < 64 || c.mtu_bytes > 65536) return "mtu must be 64..65536 bytes";
  if (c.paths < 1 || c.paths > 65536) return "paths must be 1..65536";
  if (!(c.hop_us >= 0) || !(c.buffer_kb > 0) || !(c.duration_ms > 0)) return "hop, buffer and duration must be > 0";
  if (c.flow_kb < 0) return "flow size must be >= 0";
  if (c.failed_spine >= static_cast<int>(c.spines) || c.slow_spine >= static_cast<int>(c.spines))
    return "failed and slow spines must name a spine (0..spines-1)";
  if (c.failed_spine >= 0 && c.spines < 2) return "a failed spine needs another one";
  if (!(c.slow_factor > 0 && c.slow_factor <= 1)) return "slow factor must be in (0, 1]";
  if (!(c.rttcc_hop_target_us < 1e6)) return "hop target must be below 1 s";
  if (!(c.sample_us >= 0) || (c.sample_us > 0 && c.duration_ms * 1000 / c.sample_us > 1e7))
    return "sample interval must be >= 0 and give at most 10^7 points";
  if (c.path_cc && (c.paths < 2 || c.paths > 256 || c.spray != Spray::kOblivious || c.cc != "rttcc"))
    return "a controller per path needs --cc rttcc, --paths 2..256 and oblivious spraying";
  if (c.ecn && !(c.kmin_kb < c.kmax_kb && c.pmax > 0 && c.pmax <= 1)) return "ECN needs kmin < kmax and 0 < pmax <= 1";
  return "";
}

std::vector<std::pair<uint32_t, uint32_t>> fabric_flows(const FabricConfig& c, uint64_t seed) {
  const uint32_t n = c.leaves * c.hosts_per_leaf, h = c.hosts_per_leaf;
  std::vector<std::pair<uint32_t, uint32_t>> pairs;
  switch (c.pattern) {
    case Pattern::kPermutation: {  // a random derangement: shuffle until no host sends to itself
      std::mt19937_64 rng(seed);
      std::vector<uint32_t> p(n);
      for (uint32_t i = 0; i < n; ++i) p[i] = i;
      for (bool fixed = true; fixed;) {
        std::shuffle(p.begin(), p.end(), rng);
        fixed = false;
        for (uint32_t i = 0; i < n; ++i) fixed = fixed || p[i] == i;
      }
      for (uint32_t i = 0; i < n; ++i) pairs.emplace_back(i, p[i]);
      break;
    }
    case Pattern::kRing:  // one leaf: the next host
      for (uint32_t i = 0; i < n; ++i) pairs.emplace_back(i, c.leaves == 1 ? (i + 1) % n : (i + h) % n);
      break;
    case Pattern::kIncast: {
      const uint32_t k = c.incast_senders == 0 ? n - 1 : std::min(c.incast_senders, n - 1);
      for (uint32_t i = 1; i <= k; ++i) pairs.emplace_back(i, 0);
      break;
    }
    case Pattern::kAlltoall:
      for (uint32_t i = 0; i < n; ++i)
        for (uint32_t j = 0; j < n; ++j)
          if (i != j) pairs.emplace_back(i, j);
      break;
  }
  return pairs;
}

}  // namespace grex::ccsim

namespace grex::ccsim::detail {

void measure_recovery(const std::vector<uint64_t>& bins, uint64_t bin_ns, uint64_t warmup_ns, uint64_t fail_ns,
                      uint64_t end_ns, double capacity_gbps, FabricResult* r) {
  constexpr uint64_t kWindowNs = 50'000;
  const uint64_t per = std::max<uint64_t>(1, kWindowNs / bin_ns);
  const size_t n = std::min<size_t>(bins.size(), end_ns / bin_ns);  // whole bins before the end
  const size_t f = fail_ns / bin_ns, w0 = warmup_ns / bin_ns;
  if (f <= w0 || f + 2 * per > n) return;
  auto gbps = [&](size_t a, size_t b) {  // bins [a, b)
    uint64_t bytes = 0;
    for (size_t i = a; i < b; ++i) bytes += bins[i];
    return 8.0 * static_cast<double>(bytes) / (static_cast<double>((b - a) * bin_ns) * 1e-9) / 1e9;
  };
  r->before_fail_gbps = gbps(w0, f);
  r->after_fail_gbps = gbps(f + (n - f) / 2, n);
  std::vector<double> win;  // 50 us windows from the failure on
  for (size_t a = f; a + per <= n; a += per) win.push_back(gbps(a, a + per));
  r->dip_gbps = *std::min_element(win.begin(), win.end());
  // The last window below the bar: recovered at the end of it (if a later
  // window exists to show it).
  const double bar = 0.9 * std::min(r->before_fail_gbps, capacity_gbps);
  size_t last_low = win.size();
  for (size_t i = 0; i < win.size(); ++i)
    if (win[i] < bar) last_low = i;
  if (last_low == win.size()) r->recovery_ms = 0;
  else if (last_low + 1 < win.size()) r->recovery_ms = static_cast<double>((last_low + 1) * per * bin_ns) / 1e6;
}

}  // namespace grex::ccsim::detail
