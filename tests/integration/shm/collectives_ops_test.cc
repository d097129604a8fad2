// SPDX-License-Identifier: Apache-2.0
// Every collective against a reference computed locally, over shm with 1..8
// ranks: allreduce with each algorithm (ring, Rabenseifner, recursive
// doubling, tree, direct, direct staged through shared slots, flat) x dtypes
// x ops x counts, in and out of place; reduce, reduce_scatter, allgather,
// alltoall, alltoallv, broadcast; bitwise-identical repeats; the shared
// slots reused over many calls; the non-blocking API (overlapping allreduces
// complete in order); placement and calibration at creation. Calls that
// disagree between ranks: collectives_errors_test.cc.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <map>
#include <random>
#include <sched.h>

#include "collective_check.h"
#include "shm_opts.h"
#include "collectives/reduce.h"

namespace grex::test {
namespace {

// "staged": direct with every size staged (GREX_STAGE_SENDS=always), which
// otherwise takes vectors of 8 MiB (32 MiB at 2 ranks) and more, in place 16 MiB (128 MiB).
constexpr const char* kAlgos[] = {"ring", "rabenseifner", "recursive_doubling", "tree", "direct", "staged", "flat"};

// Inputs that keep every op exact: small integers; products of ones and twos.
template <class T>
T value(int r, size_t i, ReduceOp op) {
  if (op == ReduceOp::kProd) return static_cast<T>((i + static_cast<size_t>(r)) % 2 + 1);
  return input<T>(r, i);
}

template <class T>
T reference(int n, size_t i, ReduceOp op) {
  T want = value<T>(0, i, op);
  for (int r = 1; r < n; ++r) {
    T v = value<T>(r, i, op);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: want = static_cast<T>(want + v); break;
      case ReduceOp::kProd: want = static_cast<T>(want * v); break;
      case ReduceOp::kMin: want = std::min(want, v); break;
      case ReduceOp::kMax: want = std::max(want, v); break;
    }
  }
  if (op == ReduceOp::kAvg) {  // floats: times the reciprocal (reduce.h); integers: division
    if constexpr (std::is_floating_point_v<T>)
      want = static_cast<T>(want * (T(1) / static_cast<T>(n)));
    else
      want = static_cast<T>(want / static_cast<T>(n));
  }
  return want;
}

template <class T>
int check_values(Communicator& c, const char* what, const T* got, size_t count, size_t base, ReduceOp op) {
  for (size_t i = 0; i < count; ++i) {
    T want = reference<T>(c.size(), base + i, op);
    if (got[i] != want) {
      std::fprintf(stderr, "rank %d %s: element %zu of %zu: got %g want %g\n", c.rank(), what, i, count,
                   double(got[i]), double(want));
      return 1;
    }
  }
  return 0;
}

template <class T>
int allreduce_case(Communicator& c, DataType dt, ReduceOp op, size_t count, bool in_place) {
  std::vector<T> in(count), out(count, T(77));
  for (size_t i = 0; i < count; ++i) in[i] = value<T>(c.rank(), i, op);
  if (in_place) {
    RANK_OK(c.allreduce(in.data(), count, dt, op));
    out = in;
  } else {
    RANK_OK(c.allreduce(in.data(), out.data(), count, dt, op));
  }
  return check_values<T>(c, "allreduce", out.data(), count, 0, op);
}

template <class T>
int allreduce_all_ops(Communicator& c, DataType dt) {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg})
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{10007}})
      RANK_CHECK(allreduce_case<T>(c, dt, op, count, count % 2 == 1) == 0);
  return 0;
}

class Algos : public ::testing::TestWithParam<int> {};

TEST_P(Algos, AllreduceEveryAlgorithmDtypeOpAndCount) {
  const int n = GetParam();
  auto res = run_ranks(n, [n](Rank& r) -> int {
    for (const char* algo : kAlgos) {
      CommOptions o = opts_for(algo);
      o.name = std::string("ar-") + algo;
      auto c = make_comm(r, o);
      RANK_CHECK(c != nullptr);
      // (flat needs peers; vectors past its limit take the model's choice)
      RANK_CHECK(c->allreduce_algorithm(1) == algo_name(algo) || (n == 1 && std::strcmp(algo, "flat") == 0));
      RANK_CHECK(allreduce_all_ops<float>(*c, DataType::kFloat32) == 0);
      RANK_CHECK(allreduce_all_ops<double>(*c, DataType::kFloat64) == 0);
      RANK_CHECK(allreduce_all_ops<int32_t>(*c, DataType::kInt32) == 0);
      RANK_CHECK(allreduce_all_ops<int64_t>(*c, DataType::kInt64) == 0);
      RANK_CHECK(allreduce_all_ops<uint8_t>(*c, DataType::kUint8) == 0);
      if (n <= 4) RANK_CHECK(allreduce_case<float>(*c, DataType::kFloat32, ReduceOp::kSum, size_t{1} << 20, false) == 0);
      // Same algorithm, same inputs: the same bits, on every rank and every run.
      std::vector<float> x(100'003), a(x.size()), b(x.size());
      std::mt19937 g(static_cast<unsigned>(r.rank) + 1);
      std::uniform_real_distribution<float> d(-1, 1);
      for (auto& v : x) v = d(g);
      RANK_OK(c->allreduce(x.data(), a.data(), x.size(), DataType::kFloat32, ReduceOp::kSum));
      RANK_OK(c->allreduce(x.data(), b.data(), x.size(), DataType::kFloat32, ReduceOp::kSum));
      RANK_CHECK(std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
      std::vector<float> root = a;
      RANK_OK(c->broadcast(root.data(), root.size(), DataType::kFloat32, 0));
      RANK_CHECK(std::memcmp(a.data(), root.data(), a.size() * 4) == 0);
      // The same for a vector small enough for flat.
      std::vector<float> xs(1000), as(xs.size()), bs(xs.size());
      for (auto& v : xs) v = d(g);
      RANK_OK(c->allreduce(xs.data(), as.data(), xs.size(), DataType::kFloat32, ReduceOp::kSum));
      RANK_OK(c->allreduce(xs.data(), bs.data(), xs.size(), DataType::kFloat32, ReduceOp::kSum));
      RANK_CHECK(std::memcmp(as.data(), bs.data(), as.size() * 4) == 0);
      std::vector<float> roots = as;
      RANK_OK(c->broadcast(roots.data(), roots.size(), DataType::kFloat32, 0));
      RANK_CHECK(std::memcmp(as.data(), roots.data(), as.size() * 4) == 0);
    }
    return 0;
  }, 600);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// reduce (every root), reduce_scatter, allgather, alltoall, broadcast,
// barrier; in and out of place.
TEST_P(Algos, EveryOtherCollective) {
  const int n = GetParam();
  auto res = run_ranks(n, [n](Rank& r) -> int {
    auto c = make_comm(r, opts_for("ring"));
    RANK_CHECK(c != nullptr);
    const size_t un = static_cast<size_t>(n);
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1009}}) {
      for (int root = 0; root < n; ++root) {
        std::vector<int64_t> in(count), out(count, -1);
        for (size_t i = 0; i < count; ++i) in[i] = value<int64_t>(r.rank, i, ReduceOp::kSum);
        RANK_OK(c->reduce(in.data(), r.rank == root ? out.data() : nullptr, count, DataType::kInt64,
                          ReduceOp::kSum, root));
        if (r.rank == root) RANK_CHECK(check_values<int64_t>(*c, "reduce", out.data(), count, 0, ReduceOp::kSum) == 0);
      }
      // reduce_scatter: block b of everyone's input is elements [b*count, (b+1)*count)
      for (bool in_place : {false, true}) {
        std::vector<float> in(count * un), out(count, -1);
        for (size_t i = 0; i < in.size(); ++i) in[i] = value<float>(r.rank, i, ReduceOp::kMax);
        float* dst = in_place ? in.data() + static_cast<size_t>(r.rank) * count : out.data();
        RANK_OK(c->reduce_scatter(in.data(), dst, count, DataType::kFloat32, ReduceOp::kMax));
        RANK_CHECK(check_values<float>(*c, "reduce_scatter", dst, count, static_cast<size_t>(r.rank) * count,
                                       ReduceOp::kMax) == 0);
      }
      for (bool in_place : {false, true}) {  // allgather
        std::vector<int32_t> all(count * un, -1), mine(count);
        for (size_t i = 0; i < count; ++i) mine[i] = static_cast<int32_t>(1000 * r.rank + static_cast<int>(i));
        int32_t* src = mine.data();
        if (in_place) {
          if (count > 0) std::memcpy(all.data() + static_cast<size_t>(r.rank) * count, mine.data(), count * 4);
          src = all.data() + static_cast<size_t>(r.rank) * count;
        }
        RANK_OK(c->allgather(src, all.data(), count, DataType::kInt32));
        for (size_t b = 0; b < un; ++b)
          for (size_t i = 0; i < count; ++i) RANK_CHECK(all[b * count + i] == static_cast<int32_t>(1000 * b + i));
      }
      for (bool in_place : {false, true}) {  // alltoall: rank r sends j*1000 + r*10 + i to rank j
        std::vector<int32_t> in(count * un), out(count * un, -1);
        for (size_t j = 0; j < un; ++j)
          for (size_t i = 0; i < count; ++i)
            in[j * count + i] = static_cast<int32_t>(j * 1000 + static_cast<size_t>(r.rank) * 10 + i);
        int32_t* dst = in_place ? in.data() : out.data();
        RANK_OK(c->alltoall(in.data(), dst, count, DataType::kInt32));
        for (size_t src = 0; src < un; ++src)
          for (size_t i = 0; i < count; ++i)
            RANK_CHECK(dst[src * count + i] ==
                       static_cast<int32_t>(static_cast<size_t>(r.rank) * 1000 + src * 10 + i));
      }
      {  // alltoallv: rank r sends (r + j) % 3 * count + j elements to rank j, packed in reverse
        // rank order with a gap of 5 after each block; received blocks land in rank order, gap 2
        auto elems = [count](size_t from, size_t to) { return (from + to) % 3 * count + to; };
        std::vector<size_t> sc(un), sd(un), rc(un), rd(un);
        size_t so = 0, ro = 0;
        for (size_t j = un; j-- > 0;) sd[j] = so, sc[j] = elems(static_cast<size_t>(r.rank), j), so += sc[j] + 5;
        for (size_t i = 0; i < un; ++i) rd[i] = ro, rc[i] = elems(i, static_cast<size_t>(r.rank)), ro += rc[i] + 2;
        std::vector<int32_t> in(so, -7), out(ro, -1);
        for (size_t j = 0; j < un; ++j)
          for (size_t k = 0; k < sc[j]; ++k)
            in[sd[j] + k] = static_cast<int32_t>(j * 100000 + static_cast<size_t>(r.rank) * 1000 + k);
        auto w = c->alltoallv_async(in.data(), sc, sd, out.data(), rc, rd, DataType::kInt32);
        RANK_CHECK(static_cast<bool>(w));
        sc.assign(un, 999);  // the call copied its counts
        RANK_OK((*w)->wait());
        for (size_t i = 0; i < un; ++i) {
          for (size_t k = 0; k < rc[i]; ++k)
            RANK_CHECK(out[rd[i] + k] == static_cast<int32_t>(static_cast<size_t>(r.rank) * 100000 + i * 1000 + k));
          RANK_CHECK(out[rd[i] + rc[i]] == -1 && out[rd[i] + rc[i] + 1] == -1);  // the gaps stay untouched
        }
      }
      for (int root = 0; root < n; ++root) {
        std::vector<double> v(count, -1);
        if (r.rank == root)
          for (size_t i = 0; i < count; ++i) v[i] = 0.5 * static_cast<double>(i + static_cast<size_t>(root));
        RANK_OK(c->broadcast(v.data(), count, DataType::kFloat64, root));
        for (size_t i = 0; i < count; ++i) RANK_CHECK(v[i] == 0.5 * static_cast<double>(i + static_cast<size_t>(root)));
      }
      RANK_OK(c->barrier());
    }
    return 0;
  }, 600);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// f16 and bf16: integers small enough to be exact in each format, reduced in
// f32 and rounded back; avg multiplies by the f32 reciprocal, then rounds.
TEST_P(Algos, HalfPrecisionAllreduce) {
  const int n = GetParam();
  auto res = run_ranks(n, [n](Rank& r) -> int {
    for (const char* algo : kAlgos) {
      CommOptions o = opts_for(algo);
      o.name = std::string("half-") + algo;
      auto c = make_comm(r, o);
      RANK_CHECK(c != nullptr);
      for (bool bf : {false, true}) {
        const int range = bf ? 16 : 100;  // |sum| <= 8 * range: exact in bf16 (8 bits) and f16 (11 bits)
        auto to_half = [bf](float f) { return bf ? detail::f32_to_bf16(f) : detail::f32_to_f16(f); };
        auto to_float = [bf](uint16_t h) { return bf ? detail::bf16_to_f32(h) : detail::f16_to_f32(h); };
        auto val = [&](int rank, size_t i, ReduceOp op) -> float {
          if (op == ReduceOp::kProd) return static_cast<float>((i + static_cast<size_t>(rank)) % 2 + 1);
          return static_cast<float>(static_cast<int>((i * 7 + static_cast<size_t>(rank) * 3) % (2 * range + 1)) - range);
        };
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg})
          for (size_t count : {size_t{1}, size_t{7}, size_t{1009}}) {
            std::vector<uint16_t> v(count);
            for (size_t i = 0; i < count; ++i) v[i] = to_half(val(r.rank, i, op));
            RANK_OK(c->allreduce(v.data(), count, bf ? DataType::kBFloat16 : DataType::kFloat16, op));
            for (size_t i = 0; i < count; ++i) {
              float want = val(0, i, op);
              for (int k = 1; k < n; ++k) {
                float x = val(k, i, op);
                want = op == ReduceOp::kProd ? want * x
                       : op == ReduceOp::kMin ? std::min(want, x)
                       : op == ReduceOp::kMax ? std::max(want, x)
                                              : want + x;
              }
              if (op == ReduceOp::kAvg) want = want * (1.0f / static_cast<float>(n));
              if (v[i] != to_half(want)) {
                std::fprintf(stderr, "rank %d %s %s: element %zu: got %g want %g\n", r.rank, algo, bf ? "bf16" : "f16",
                             i, double(to_float(v[i])), double(want));
                return 1;
              }
            }
          }
      }
    }
    return 0;
  }, 300);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// The direct algorithm's other paths: buffers from Communicator::alloc (peers
// map them and copy with loads and stores instead of process_vm_readv/writev),
// vectors large enough for streaming stores (>= 8 MiB), in and out of place,
// a count that is not a multiple of the ranks, and avg over the segments.
TEST_P(Algos, DirectOnSharedAndLargeBuffers) {
  const int n = GetParam();
  auto res = run_ranks(n, [n](Rank& r) -> int {
    CommOptions o = opts_for("direct");
    o.name = "direct-big";
    auto c = make_comm(r, o);
    RANK_CHECK(c != nullptr);
    const size_t count = (size_t{3} << 20) + 5;  // 12 MiB of f32
    for (bool shared : {true, false})
      for (bool in_place : {false, true})
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
          void* a = nullptr;
          void* b = nullptr;
          std::vector<float> va, vb;
          if (shared) {
            auto pa = c->alloc(count * 4);
            auto pb = c->alloc(count * 4);
            RANK_CHECK(pa && pb);
            a = *pa;
            b = *pb;
          } else {
            va.resize(count);
            vb.resize(count);
            a = va.data();
            b = vb.data();
          }
          auto* in = static_cast<float*>(a);
          auto* out = static_cast<float*>(in_place ? a : b);
          for (size_t i = 0; i < count; ++i) in[i] = value<float>(r.rank, i, op);
          if (!in_place) std::fill(out, out + count, 77.0f);
          RANK_OK(c->allreduce(in, out, count, DataType::kFloat32, op));
          if (check_values<float>(*c, shared ? "direct (alloc)" : "direct (malloc)", out, count, 0, op) != 0) {
            std::fprintf(stderr, "rank %d: n=%d in_place=%d\n", r.rank, n, int(in_place));
            return 1;
          }
          if (shared) {
            RANK_OK(c->free(a));
            RANK_OK(c->free(b));
          }
        }
    return 0;
  }, 300);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

INSTANTIATE_TEST_SUITE_P(Ranks, Algos, ::testing::Values(1, 2, 3, 4, 5, 8),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

// Eight allreduces in flight at once (one per 25 MiB DDP bucket, scaled
// down): each returns a Work at once; they complete correctly and in order.
TEST(NonBlocking, EightOverlappingAllreducesCompleteInOrder) {
  auto res = run_ranks(3, [](Rank& r) -> int {
    CommOptions o = opts_for("ring");
    auto c = make_comm(r, o);
    RANK_CHECK(c != nullptr);
    constexpr int kBuckets = 8;
    constexpr size_t kCount = 300'000;
    std::vector<std::vector<float>> bufs(kBuckets, std::vector<float>(kCount));
    std::vector<WorkPtr> work;
    for (int b = 0; b < kBuckets; ++b) {
      for (size_t i = 0; i < kCount; ++i) bufs[b][i] = static_cast<float>(r.rank + b) + static_cast<float>(i % 7);
      auto w = c->allreduce_async(bufs[b].data(), bufs[b].data(), kCount, DataType::kFloat32, ReduceOp::kSum);
      RANK_OK(w);
      work.push_back(*w);
    }
    // In issue order: when bucket b is done, every earlier one is too.
    for (int b = 0; b < kBuckets; ++b) {
      RANK_OK(work[static_cast<size_t>(b)]->wait());
      for (int e = 0; e <= b; ++e) RANK_CHECK(work[static_cast<size_t>(e)]->test());
    }
    for (int b = 0; b < kBuckets; ++b)
      for (size_t i = 0; i < kCount; i += 997) {
        float want = static_cast<float>(3 * b + 3 + 3 * static_cast<int>(i % 7));
        RANK_CHECK(bufs[b][i] == want);
      }
    // A blocking call after async ones runs after them.
    auto w = c->barrier_async();
    RANK_OK(w);
    RANK_OK((*w)->wait(30'000));
    std::vector<int32_t> v(5, r.rank);
    RANK_OK(c->allreduce(v.data(), v.size(), DataType::kInt32, ReduceOp::kSum));
    RANK_CHECK(v[4] == 3);
    return 0;
  }, 300);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// Flat's two slots per rank are reused without acknowledgements: many calls
// in a row, with calls that take other algorithms in between (their own
// sequence), each give every rank's contribution to that very call.
TEST_P(Algos, FlatSlotsReusedOverManyCalls) {
  const int n = GetParam();
  auto res = run_ranks(n, [n](Rank& r) -> int {
    CommOptions o = opts_for("auto");
    o.name = "flat-many";
    auto c = make_comm(r, o);
    RANK_CHECK(c != nullptr);
    RANK_CHECK((c->allreduce_algorithm(24) == std::string("flat")) == (n > 1));  // flat needs peers
    RANK_CHECK(c->allreduce_algorithm(size_t{1} << 20) != std::string("flat"));
    std::vector<int64_t> big(1 << 17);
    for (int64_t it = 0; it < 3000; ++it) {
      int64_t v[3] = {it * 8 + r.rank, -it, r.rank == it % n ? it : 0};
      RANK_OK(c->allreduce(v, 3, DataType::kInt64, ReduceOp::kSum));
      const int64_t ranks = n * (n - 1) / 2;
      if (v[0] != it * 8 * n + ranks || v[1] != -it * n || v[2] != it) {
        std::fprintf(stderr, "rank %d call %lld: got %lld %lld %lld\n", r.rank, static_cast<long long>(it),
                     static_cast<long long>(v[0]), static_cast<long long>(v[1]), static_cast<long long>(v[2]));
        return 1;
      }
      if (it % 100 == 50) RANK_OK(c->barrier());  // a flat barrier in between
      if (it % 500 == 499) {  // a message algorithm in between
        std::fill(big.begin(), big.end(), r.rank);
        RANK_OK(c->allreduce(big.data(), big.size(), DataType::kInt64, ReduceOp::kSum));
        RANK_CHECK(big[0] == n * (n - 1) / 2 && big.back() == big[0]);
      }
    }
    return 0;
  }, 300);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// The staged direct allreduce reuses a few slots and flags across calls by
// a block sequence every rank counts alike: calls of many sizes (so many
// block counts and block sizes), in and out of place, dtypes and ops in
// turn, with other algorithms' calls in between, each give that very
// call's result.
TEST_P(Algos, StagedSlotsReusedOverManyCalls) {
  const int n = GetParam();
  auto res = run_ranks(n, [n](Rank& r) -> int {
    CommOptions o = opts_for("staged");
    o.name = "staged-many";
    auto c = make_comm(r, o);
    RANK_CHECK(c != nullptr);
    std::mt19937 g(7);  // the same sizes on every rank
    std::vector<int64_t> v, out;
    for (int it = 0; it < 300; ++it) {
      const size_t count = it % 7 == 0 ? g() % 9 : it % 7 == 1 ? (size_t{1} << 18) + g() % 1000 : g() % 20000;
      const bool in_place = it % 2 == 0;
      const ReduceOp op = it % 3 == 0 ? ReduceOp::kMax : ReduceOp::kSum;
      v.assign(count, 0);
      for (size_t i = 0; i < count; ++i) v[i] = static_cast<int64_t>(i * 3 + static_cast<size_t>(r.rank) + it);
      out.assign(count, -1);
      if (in_place)
        RANK_OK(c->allreduce(v.data(), count, DataType::kInt64, op));
      else
        RANK_OK(c->allreduce(v.data(), out.data(), count, DataType::kInt64, op));
      const int64_t* got = in_place ? v.data() : out.data();
      for (size_t i = 0; i < count; ++i) {
        const int64_t base = static_cast<int64_t>(i * 3) + it;
        const int64_t want = op == ReduceOp::kMax ? base + n - 1 : base * n + n * (n - 1) / 2;
        if (got[i] != want) {
          std::fprintf(stderr, "rank %d call %d (count %zu): element %zu got %lld want %lld\n", r.rank, it, count, i,
                       static_cast<long long>(got[i]), static_cast<long long>(want));
          return 1;
        }
      }
      if (it % 50 == 25) RANK_OK(c->barrier());
      if (it % 60 == 30) {  // f32 through the same slots, and a ring call beside them
        std::vector<float> f(5000, static_cast<float>(r.rank));
        RANK_OK(c->allreduce(f.data(), f.size(), DataType::kFloat32, ReduceOp::kSum));
        RANK_CHECK(f[0] == static_cast<float>(n * (n - 1) / 2) && f.back() == f[0]);
      }
    }
    return 0;
  }, 300);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// Direct at 16 MiB and 3 ranks: with every rank's buffers from alloc() the
// peers' memory is read and written in place; with any rank's from malloc
// the call is staged (every rank decides alike, from every rank's
// descriptor). Both give the reference, in and out of place.
TEST(Algos, DirectWithAllocatedMallocAndMixedBuffers) {
  auto res = run_ranks(3, [](Rank& r) -> int {
    CommOptions o = opts_for("direct");
    o.name = "mixed-buffers";
    auto c = make_comm(r, o);
    RANK_CHECK(c != nullptr);
    constexpr size_t kCount = size_t{4} << 20;  // 16 MiB of f32: staged at 3 ranks when not all allocated
    std::vector<float> heap_in(kCount), heap_out(kCount);
    auto a_in = c->alloc(kCount * 4), a_out = c->alloc(kCount * 4);
    RANK_CHECK(a_in.ok() && a_out.ok());
    for (int mode = 0; mode < 3; ++mode) {  // 0: all allocated, 1: rank 1 malloc, 2: all malloc
      const bool mine_alloc = mode == 0 || (mode == 1 && r.rank != 1);
      float* in = mine_alloc ? static_cast<float*>(*a_in) : heap_in.data();
      float* out = mine_alloc ? static_cast<float*>(*a_out) : heap_out.data();
      for (bool in_place : {false, true}) {
        for (size_t i = 0; i < kCount; ++i) in[i] = static_cast<float>((i + static_cast<size_t>(r.rank)) % 1000);
        if (in_place)
          RANK_OK(c->allreduce(in, kCount, DataType::kFloat32, ReduceOp::kSum));
        else
          RANK_OK(c->allreduce(in, out, kCount, DataType::kFloat32, ReduceOp::kSum));
        const float* got = in_place ? in : out;
        for (size_t i = 0; i < kCount; i += 997) {
          const float want = static_cast<float>(i % 1000 + (i + 1) % 1000 + (i + 2) % 1000);
          if (got[i] != want) {
            std::fprintf(stderr, "rank %d mode %d in_place %d: element %zu got %g want %g\n", r.rank, mode,
                         in_place, i, double(got[i]), double(want));
            return 1;
          }
        }
      }
    }
    RANK_OK(c->free(*a_in));
    RANK_OK(c->free(*a_out));
    return 0;
  }, 120);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// create() leaves the local ranks spread evenly over the CPUs of their masks
// (different CPUs where there are enough), and the masks as they were
// (GREX_SPREAD): with spin progress (2 ranks) and with more ranks than CPUs
// (8 ranks: adaptive progress unless the machine has 8 CPUs).
class Placement : public ::testing::TestWithParam<int> {};

TEST_P(Placement, LocalRanksLeaveCreateSpreadOverCpus) {
  const int n = GetParam();
  cpu_set_t mask;
  ASSERT_EQ(sched_getaffinity(0, sizeof mask, &mask), 0);
  const int ncpu = CPU_COUNT(&mask);
  if (ncpu < 2) GTEST_SKIP() << "needs 2 CPUs, this process may use " << ncpu;
  auto res = run_ranks(n, [&mask, n, ncpu](Rank& r) -> int {
    // Start both ranks on the same CPU (then give the mask back: the kernel
    // leaves them there), as bootstrap's wake-ups often do.
    cpu_set_t first;
    CPU_ZERO(&first);
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
      if (CPU_ISSET(cpu, &mask)) {
        CPU_SET(cpu, &first);
        break;
      }
    RANK_CHECK(sched_setaffinity(0, sizeof first, &first) == 0);
    RANK_CHECK(sched_setaffinity(0, sizeof mask, &mask) == 0);
    CommOptions o = opts_for("ring");
    if (n == 2) o.progress = "spin";
    auto c = make_comm(r, o);
    RANK_CHECK(c != nullptr);
    int32_t cpu = sched_getcpu();
    std::vector<int32_t> cpus(static_cast<size_t>(n), -1);
    RANK_OK(c->allgather(&cpu, cpus.data(), 1, DataType::kInt32));
    std::map<int32_t, int> per_cpu;
    for (int32_t x : cpus) ++per_cpu[x];
    for (auto [x, k] : per_cpu) RANK_CHECK(k <= (n + ncpu - 1) / ncpu);
    cpu_set_t now;
    RANK_CHECK(sched_getaffinity(0, sizeof now, &now) == 0);
    RANK_CHECK(CPU_EQUAL(&now, &mask));  // a starting place, not a binding
    return 0;
  }, 60);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

INSTANTIATE_TEST_SUITE_P(Ranks, Placement, ::testing::Values(2, 8),
                         [](const ::testing::TestParamInfo<int>& i) { return std::to_string(i.param) + "ranks"; });

// The measured model: a communicator created with GREX_COST unset calibrates
// and then picks an algorithm for each size.
TEST(CostModel, CalibratedAtCreationAndUsed) {
  auto res = run_ranks(4, [](Rank& r) -> int {
    CommOptions o;
    o.name = "calib";
    auto c = make_comm(r, o);
    RANK_CHECK(c != nullptr);
    std::string small = c->allreduce_algorithm(8), large = c->allreduce_algorithm(size_t{256} << 20);
    std::fprintf(stderr, "rank %d: 8 B -> %s, 256 MiB -> %s\n", r.rank, small.c_str(), large.c_str());
    RANK_CHECK(large != "recursive_doubling");  // whole-vector steps never win for huge vectors
    std::vector<double> x(4096, 1.0);
    RANK_OK(c->allreduce(x.data(), x.size(), DataType::kFloat64, ReduceOp::kSum));
    RANK_CHECK(x[4095] == 4.0);
    return 0;
  }, 120);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

}  // namespace
}  // namespace grex::test
