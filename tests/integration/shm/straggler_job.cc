// SPDX-License-Identifier: Apache-2.0
// A job for status_cli_test.sh, started by grex-run: CALLS allreduces of 16
// floats; rank LATE sleeps SLEEP_MS in the application before call AT.
//   straggler_job LATE AT SLEEP_MS CALLS
#include <grex/communicator.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: straggler_job LATE AT SLEEP_MS CALLS\n");
    return 2;
  }
  const int late = std::atoi(argv[1]), at = std::atoi(argv[2]), sleep_ms = std::atoi(argv[3]),
            calls = std::atoi(argv[4]);
  auto c = grex::Communicator::from_env();
  if (!c.ok()) {
    std::fprintf(stderr, "straggler_job: %s\n", c.error().message().c_str());
    return 1;
  }
  std::vector<float> v(16, 1.0f);
  for (int i = 1; i <= calls; ++i) {
    if ((*c)->rank() == late && i == at) {
      std::printf("sleeping before allreduce %d\n", i);
      std::fflush(stdout);
      std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
    }
    auto r = (*c)->allreduce(v.data(), v.size(), grex::DataType::kFloat32, grex::ReduceOp::kSum);
    if (!r.ok()) {
      std::fprintf(stderr, "straggler_job: %s\n", r.error().message().c_str());
      return 1;
    }
  }
  std::printf("done after %d allreduces\n", calls);
  return 0;
}
