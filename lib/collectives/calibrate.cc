// SPDX-License-Identifier: Apache-2.0
// The cost model's constants, measured at creation (Communicator::Impl::calibrate).
#include <algorithm>
#include <cstdio>

#include "collectives/comm_impl.h"
#include "collectives/reduce.h"

namespace grex {

// Ping-pong with a neighbour (pairs 0-1, 2-3, ...): alpha from empty
// messages, beta from 1 MiB ones; gamma from reducing 1 MiB of f32 here.
// Each is the best of a few short batches, so one preemption or interrupt
// does not stand for the link (a 16-round mean moved alpha from 0.5 to 1 us
// and with it the 2-rank 256 KiB allreduce from direct to recursive
// doubling, 3x slower). Every rank then takes the slowest values any rank
// saw, so all choose alike.
Result<void> Communicator::Impl::calibrate() {
  constexpr size_t kBig = size_t{1} << 20;
  GREX_TRY(bufs->ensure_work(2 * kBig));
  MemoryRegion* work = bufs->work();
  // alpha and beta with the partner in g (members 0-1, 2-3, ...); zeros
  // where this rank has none. Tags of their own (bit 62; collectives use bit
  // 63, user messages 32 bits): an unpaired rank must not fall behind in the
  // collective sequence; the level in bits 48.., the round in 32..
  auto measure = [&](const detail::Group& g, uint64_t level, double* alpha, double* beta) -> Result<void> {
    *alpha = *beta = 0;
    uint64_t round = 0;  // per level: a rank without a partner at one level skips its rounds
    const int me = g.rank();
    const int partner = me % 2 == 0 ? me + 1 : me - 1;
    if (partner >= g.size()) return ok();
    auto one_way_s = [&](size_t bytes, int iters) -> Result<double> {
      const uint64_t tag = (1ull << 62) | (level << 48) | (++round << 32);
      Deadline dl = ctx.deadline();
      uint64_t t0 = 0;
      for (int i = -2; i < iters; ++i) {  // two untimed rounds first
        if (i == 0) t0 = now_ns();
        uint64_t t = tag | static_cast<uint64_t>(i + 2);
        if (me < partner) {
          GREX_TRY(engine->wait(GREX_TRY(g.send(partner, work, 0, bytes, t)), dl, "calibration"));
          GREX_TRY(engine->wait(GREX_TRY(g.recv(partner, work, kBig, bytes, t)), dl, "calibration"));
        } else {
          GREX_TRY(engine->wait(GREX_TRY(g.recv(partner, work, kBig, bytes, t)), dl, "calibration"));
          GREX_TRY(engine->wait(GREX_TRY(g.send(partner, work, 0, bytes, t)), dl, "calibration"));
        }
      }
      return static_cast<double>(now_ns() - t0) / 1e9 / (2.0 * iters);
    };
    auto best_of = [&](int batches, size_t bytes, int iters) -> Result<double> {
      double best = GREX_TRY(one_way_s(bytes, iters));
      for (int b = 1; b < batches; ++b) best = std::min(best, GREX_TRY(one_way_s(bytes, iters)));
      return best;
    };
    *alpha = GREX_TRY(best_of(4, 0, 8));
    double big = GREX_TRY(best_of(3, kBig, 2));
    *beta = std::max(1e-13, (big - *alpha) / static_cast<double>(kBig));
    return ok();
  };
  double alpha = 0, beta = 0, alpha2 = 0, beta2 = 0, gamma = 0;
  if (hier) {
    GREX_TRY(measure(*hier->local.group, 1, &alpha, &beta));
    GREX_TRY(measure(*hier->rail.group, 2, &alpha2, &beta2));
  } else {
    GREX_TRY(measure(*world, 0, &alpha, &beta));
  }
  auto* f = static_cast<float*>(work->addr());
  detail::reduce(f, f, f + kBig / 8, kBig / 8, DataType::kFloat32, ReduceOp::kSum);  // warm
  uint64_t best = UINT64_MAX;
  for (int b = 0; b < 3; ++b) {
    uint64_t t0 = now_ns();
    for (int i = 0; i < 2; ++i) detail::reduce(f, f, f + kBig / 8, kBig / 8, DataType::kFloat32, ReduceOp::kSum);
    best = std::min(best, now_ns() - t0);
  }
  gamma = std::max(1e-13, static_cast<double>(best) / 1e9 / (2.0 * kBig / 2));
  char mine[160];
  std::snprintf(mine, sizeof mine, "%a %a %a %a %a", alpha, beta, gamma, alpha2, beta2);
  auto all = GREX_TRY(bootstrap->all_gather(opts.name + "/cost", mine));
  detail::CostModel m, m2;
  m.alpha_s = m.beta_s_per_byte = m.gamma_s_per_byte = 0;
  m2.alpha_s = m2.beta_s_per_byte = 0;
  for (const auto& v : all) {
    double a = 0, b = 0, g = 0, a2 = 0, b2 = 0;
    if (std::sscanf(v.c_str(), "%la %la %la %la %la", &a, &b, &g, &a2, &b2) != 5)
      return Error(Errc::kProtocol, "calibration: bad record '" + v + "'").rank(rank);
    m.alpha_s = std::max(m.alpha_s, a);
    m.beta_s_per_byte = std::max(m.beta_s_per_byte, b);
    m.gamma_s_per_byte = std::max(m.gamma_s_per_byte, g);
    m2.alpha_s = std::max(m2.alpha_s, a2);
    m2.beta_s_per_byte = std::max(m2.beta_s_per_byte, b2);
  }
  m2.gamma_s_per_byte = m.gamma_s_per_byte;
  if (hier) {
    hier->local.select.cost = m;
    hier->rail.select.cost = m2;
    hier->world_cost = m2;
    select.cost = m2;  // a flat algorithm waits on its slowest links
  } else {
    select.cost = m;
  }
  return ok();
}

}  // namespace grex
