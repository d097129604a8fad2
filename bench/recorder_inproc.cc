// SPDX-License-Identifier: Apache-2.0
// The flight recorder's cost inside one process (issue 30): 8-byte float32
// allreduces at 2 (or more) ranks in short blocks, the recorder on and off
// by turns on one communicator (Communicator::set_recording; the recorder
// and the job status exist throughout, as with trace_entries 2000, the
// default). Each round runs one block of each, in alternating order, so a
// ratio compares blocks a millisecond apart: the VM's slow and fast phases,
// which move whole runs by tens of percent, fall on both sides alike, and
// so does where the communicator's buffers lie.
// A second communicator with no recorder at all (trace_entries 0) runs a
// third block each round: "none/off" compares the two ways of being off, and
// its spread also shows what the placement of buffers alone does.
// Prints, on rank 0, per pair the median of the per-round ratios with its
// quartiles and min-max, and the median block times.
//   grex-run -n 2 -- recorder_inproc [ROUNDS] [CALLS_PER_BLOCK]
#include <grex/bootstrap.h>
#include <grex/communicator.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

namespace {

[[noreturn]] void die(const char* what, const grex::Error& e) {
  std::fprintf(stderr, "recorder_inproc: %s: %s\n", what, e.message().c_str());
  std::exit(1);
}

struct Spread {
  double median, q1, q3, min, max;
};
Spread spread(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  auto at = [&](double f) { return v[static_cast<size_t>(f * static_cast<double>(v.size() - 1) + 0.5)]; };
  return {at(0.5), at(0.25), at(0.75), v.front(), v.back()};
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 1000;
  const int calls = argc > 2 ? std::atoi(argv[2]) : 1000;
  if (rounds < 1 || calls < 1) {
    std::fprintf(stderr, "usage: recorder_inproc [ROUNDS] [CALLS_PER_BLOCK]\n");
    return 2;
  }
  auto cfg = grex::bootstrap_from_env();
  if (!cfg) die("bootstrap", cfg.error());
  auto bs = grex::Bootstrap::create(*cfg);
  if (!bs) die("bootstrap", bs.error());
  std::shared_ptr<grex::Bootstrap> boot = std::move(*bs);
  const size_t entries[2] = {2000, 0};  // toggled; none
  std::unique_ptr<grex::Communicator> comm[2];
  for (int k = 0; k < 2; ++k) {
    grex::CommOptions o;
    o.trace_entries = entries[k];
    o.precedence = grex::Precedence::kOptions;
    auto c = grex::Communicator::create(boot, o);
    if (!c) die("communicator", c.error());
    comm[k] = std::move(*c);
  }
  float x = 1, y = 0;
  auto block = [&](grex::Communicator& c, int n) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i)
      if (auto r = c.allreduce(&x, &y, 1, grex::DataType::kFloat32, grex::ReduceOp::kSum); !r)
        die("allreduce", r.error());
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / n;
  };
  for (auto& c : comm) block(*c, 20 * calls);  // warm-up
  if (y != static_cast<float>(comm[0]->size())) {
    std::fprintf(stderr, "recorder_inproc: the allreduce gave %g, not %d\n", static_cast<double>(y), comm[0]->size());
    return 1;
  }
  // Blocks: 0 on, 1 off (the same communicator), 2 none (the other one).
  std::vector<double> t[3], on_off, none_off;
  static const int kOrders[2][3] = {{0, 1, 2}, {2, 1, 0}};
  for (int r = 0; r < rounds; ++r) {
    double us[3];
    for (int k : kOrders[r % 2]) {
      comm[0]->set_recording(k == 0);
      us[k] = block(*comm[k == 2 ? 1 : 0], calls);
    }
    for (int k = 0; k < 3; ++k) t[k].push_back(us[k]);
    on_off.push_back(us[0] / us[1]);
    none_off.push_back(us[2] / us[1]);
  }
  if (comm[0]->rank() == 0) {
    const Spread a = spread(on_off), b = spread(none_off);
    std::printf("rounds %d, %d calls a block, %d ranks\n", rounds, calls, comm[0]->size());
    std::printf("block us (median): on %.4f  off %.4f  none %.4f\n", spread(t[0]).median, spread(t[1]).median,
                spread(t[2]).median);
    std::printf("on/off   %.4f (quartiles %.4f-%.4f, min-max %.4f-%.4f)\n", a.median, a.q1, a.q3, a.min, a.max);
    std::printf("none/off %.4f (quartiles %.4f-%.4f, min-max %.4f-%.4f)\n", b.median, b.q1, b.q3, b.min, b.max);
  }
  return 0;
}
