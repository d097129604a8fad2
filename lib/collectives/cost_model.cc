// SPDX-License-Identifier: Apache-2.0
// Costs with N bytes, n ranks, p the largest power of two <= n and
// lg = log2(p); ranks beyond p fold in first and get the result back, which
// adds 2 (alpha + N beta) + N gamma to the power-of-two algorithms:
//   ring                2(n-1) alpha + 2 (n-1)/n N beta + (n-1)/n N gamma
//   recursive doubling  lg (alpha + N beta + N gamma)
//   Rabenseifner        2 lg alpha + 2 (p-1)/p N beta + (p-1)/p N gamma
//   tree (reduce+bcast) 2 ceil(log2 n) (alpha + N beta) + ceil(log2 n) N gamma
//   direct              4 alpha + 2 (n-1)/n N beta + (n-1)/n N gamma
//                       (two message rounds, then reads and writes: four
//                       rounds, each posting to all n-1 peers at once, so a
//                       round costs one latency, not n-1)
// (Thakur, Rabenseifner and Gropp, "Optimization of collective communication
// operations in MPICH", 2005, derive the same forms.)
#include "collectives/cost_model.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace grex::detail {

const char* algo_name(Algo a) noexcept {
  switch (a) {
    case Algo::kRing: return "ring";
    case Algo::kRabenseifner: return "rabenseifner";
    case Algo::kRecursiveDoubling: return "recursive_doubling";
    case Algo::kTree: return "tree";
    case Algo::kDirect: return "direct";
    case Algo::kFlat: return "flat";
    case Algo::kHierarchical: return "hierarchical";
  }
  return "?";
}

std::optional<Algo> parse_algo(std::string_view s) noexcept {
  if (s == "ring") return Algo::kRing;
  if (s == "rabenseifner" || s == "rab") return Algo::kRabenseifner;
  if (s == "recursive_doubling" || s == "rd") return Algo::kRecursiveDoubling;
  if (s == "tree") return Algo::kTree;
  if (s == "direct") return Algo::kDirect;
  if (s == "flat") return Algo::kFlat;
  if (s == "hierarchical" || s == "hier") return Algo::kHierarchical;
  return std::nullopt;
}

double CostModel::allreduce_s(Algo a, int n, double N) const noexcept {
  if (n <= 1) return 0;
  int p = 1, lg = 0;
  while (p * 2 <= n) {
    p *= 2;
    ++lg;
  }
  int clg = 0;
  while ((1 << clg) < n) ++clg;
  const double fold = p == n ? 0 : 2 * (alpha_s + N * beta_s_per_byte) + N * gamma_s_per_byte;
  const double al = alpha_s, be = beta_s_per_byte, ga = gamma_s_per_byte;
  switch (a) {
    case Algo::kRing:
      return 2.0 * (n - 1) * al + 2.0 * (n - 1) / n * N * be + 1.0 * (n - 1) / n * N * ga;
    case Algo::kRecursiveDoubling:
      return fold + lg * (al + N * be + N * ga);
    case Algo::kRabenseifner:
      return fold + 2.0 * lg * al + 2.0 * (p - 1) / p * N * be + 1.0 * (p - 1) / p * N * ga;
    case Algo::kTree:
      return 2.0 * clg * (al + N * be) + clg * N * ga;
    case Algo::kDirect:
      return 4.0 * al + 2.0 * (n - 1) / n * N * be + 1.0 * (n - 1) / n * N * ga;
    case Algo::kFlat:  // no message: chosen by size, outside the model
    case Algo::kHierarchical:  // two levels: hierarchical_allreduce_s()
      return 0;
  }
  return 0;
}

Algo CostModel::choose_allreduce(int n, size_t bytes, bool direct) const noexcept {
  const Algo first = direct && n > 1 ? Algo::kDirect : Algo::kRing;
  Algo best = first;
  double best_s = allreduce_s(first, n, static_cast<double>(bytes));
  for (Algo a : kAllAlgos) {
    if (direct && (a == Algo::kRing || a == Algo::kRabenseifner)) continue;
    double s = allreduce_s(a, n, static_cast<double>(bytes));
    if (s < best_s * (1 - 1e-9)) {
      best = a;
      best_s = s;
    }
  }
  return best;
}

std::string CostModel::describe() const {
  char b[160];
  std::snprintf(b, sizeof b, "%.3f,%.3f,%.3f", alpha_s * 1e6, 1e-9 / beta_s_per_byte, 1e-9 / gamma_s_per_byte);
  return b;
}

Result<CostModel> CostModel::parse(std::string_view s) {
  std::string str(s);
  double a = 0, b = 0, g = 0;
  char tail = 0;
  if (std::sscanf(str.c_str(), "%lf,%lf,%lf%c", &a, &b, &g, &tail) != 3 || !(a >= 0) || !(b > 0) || !(g > 0))
    return Error(Errc::kInvalidArgument, "GREX_COST='" + str + "' is not ALPHA_US,BETA_GBPS,GAMMA_GBPS")
        .hint("e.g. GREX_COST=2.5,10,8 (2.5 us per message, 10 GB/s on the wire, 8 GB/s reduction)");
  CostModel m;
  m.alpha_s = a * 1e-6;
  m.beta_s_per_byte = 1e-9 / b;
  m.gamma_s_per_byte = 1e-9 / g;
  return m;
}

}  // namespace grex::detail
