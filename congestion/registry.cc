// SPDX-License-Identifier: Apache-2.0
// The algorithm registry, the "none" controller, and the RTTCC parameter sets.
#include <array>

#include "congestion/algorithms.h"
#include "congestion/cc.h"

namespace grex::cc {
namespace {

// No congestion control: line rate, no window. The baseline that builds a
// deep queue (and what the shm backend implicitly runs).
class NoneController final : public Controller {
 public:
  NoneController(const Options&, const PathInfo& path, uint64_t) noexcept : rate_bps_(path.line_rate_bps) {}
  Decision decision() const noexcept override { return {rate_bps_, 0}; }

 private:
  double rate_bps_;
};

Controller* make_rttcc_template(void* storage, const Options& opts, const PathInfo& path, uint64_t now_ns) noexcept {
  Options o = opts;
  o.rttcc = opts.rttcc_template;
  o.rttcc.set = RttccSet::kTemplate;
  return detail::construct_rttcc(storage, o, path, now_ns);
}

Controller* make_dcqcn_mlx5(void* storage, const Options& opts, const PathInfo& path, uint64_t now_ns) noexcept {
  Options o = opts;
  apply_dcqcn_set(&o.dcqcn, DcqcnSet::kMlx5);
  return detail::construct_dcqcn(storage, o, path, now_ns);
}

Controller* make_rttcc(void* storage, const Options& opts, const PathInfo& path, uint64_t now_ns) noexcept {
  return detail::construct_rttcc(storage, opts, path, now_ns);
}

const std::array<Algorithm, 7> kAlgorithms = {{
    {"rttcc", "RTT-probe AIMD, ZTR-like parameter set (target 13 us, bounded steps)", true, false, make_rttcc},
    {"rttcc-template", "RTT-probe AIMD with DOCA PCC rtt_template's parameters", true, true, make_rttcc_template},
    {"dcqcn", "DCQCN (ECN marks -> CNPs every 50 us at most), the paper's parameters", false, true,
     detail::construct_dcqcn},
    {"dcqcn-mlx5", "DCQCN with the ConnectX firmware defaults (CNPs every 4 us at most)", false, true,
     make_dcqcn_mlx5},
    {"timely", "TIMELY: RTT-gradient rate control", true, false, detail::construct_timely},
    {"swift", "Swift: delay target with flow scaling, window AIMD", true, false, detail::construct_swift},
    {"none", "no congestion control: line rate", false, false, construct_in<NoneController>},
}};

}  // namespace

std::span<const Algorithm> algorithms() noexcept { return kAlgorithms; }

const Algorithm* find(std::string_view name) noexcept {
  for (const Algorithm& a : kAlgorithms)
    if (name == a.name) return &a;
  return nullptr;
}

std::string algorithm_names() {
  std::string s;
  for (const Algorithm& a : kAlgorithms) s += std::string(s.empty() ? "" : ", ") + a.name;
  return s;
}

void apply_dcqcn_set(DcqcnParams* p, DcqcnSet set) noexcept {
  DcqcnParams d;  // the paper's set
  if (set == DcqcnSet::kMlx5) {
    // mlxconfig / sysfs defaults: MIN_TIME_BETWEEN_CNPS 4, DCE_TCP_G 1019,
    // DCE_TCP_RTT 1, INITIAL_ALPHA_VALUE 1023, RATE_REDUCE_MONITOR_PERIOD 4,
    // RPG_MIN_DEC_FAC 50, RPG_TIME_RESET 300, RPG_BYTE_RESET 32767,
    // RPG_THRESHOLD 1, RPG_AI_RATE 5, RPG_HAI_RATE 50, RPG_MIN_RATE 1.
    d.set = DcqcnSet::kMlx5;
    d.cnp_interval_ns = 4'000;
    d.alpha_keep = 1019.0 / 1024;
    d.alpha_update_period_ns = 1'000;
    d.initial_alpha = 1023.0 / 1024;
    d.rate_reduce_period_ns = 4'000;
    d.min_dec_fraction = 0.5;
    d.rate_increase_period_ns = 300'000;
    d.byte_counter_bytes = 32'767;
    d.fast_recovery_steps = 1;
    d.ai_rate_bps = 5e6;
    d.hai_rate_bps = 50e6;
    d.min_rate_bps = 1e6;
  }
  *p = d;
}

}  // namespace grex::cc
