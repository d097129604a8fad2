// SPDX-License-Identifier: Apache-2.0
// Communicator options for the shm collectives suites: one algorithm by
// label, fixed cost-model constants.
#pragma once

#include <cstring>
#include <string>

#include "harness.h"

namespace grex::test {

// "staged": direct with every size staged (GREX_STAGE_SENDS=always), which
// otherwise takes vectors of 8 MiB (32 MiB at 2 ranks) and more, in place 16 MiB (128 MiB).
// The algorithm a communicator built by opts_for(label) reports.
inline std::string algo_name(const char* label) { return std::strcmp(label, "staged") == 0 ? "direct" : label; }

inline CommOptions opts_for(const char* algo, int64_t timeout_ms = 60'000) {
  CommOptions o;
  o.algo = algo_name(algo);
  if (std::strcmp(algo, "staged") == 0) o.stage_sends = "always";
  o.cost = "5,5,5";  // fixed constants: no calibration in every test
  o.timeout_ms = timeout_ms;
  return o;
}

}  // namespace grex::test
