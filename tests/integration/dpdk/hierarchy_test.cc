// SPDX-License-Identifier: Apache-2.0
// A communicator across "hosts" on one machine (issue 27): each rank's host
// is GREX_HOST_ID, ranks of one host talk over shm and hosts over DPDK memif
// (GREX_BACKEND=auto, GREX_NET=dpdk). Every collective with the hierarchical
// allreduce and the flat ones equals the reference on even, interleaved and
// uneven layouts; the bytes that cross hosts are what the algorithms say;
// one host dying whole leaves the other's ranks with errors naming a dead
// rank, in time. (The namespaces-and-veth version is hosts_netns_test.sh.)
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <string>

#include "../shm/collective_check.h"
#include "collectives/reduce.h"
#include "../shm/compressed_check.h"
#include "../shm/deadline_check.h"

namespace grex::test {
namespace {

bool have_dpdk() {
  for (const auto& d : Device::available_drivers())
    if (d == "dpdk") return true;
  return false;
}

// Layout: one letter per rank, its host ("AABB": ranks 0, 1 on A).
CommOptions across_hosts(Rank& r, const std::string& layout, const char* algo, const std::string& name) {
  setenv("GREX_HOST_ID", ("hier-test-" + std::string(1, layout[static_cast<size_t>(r.rank)])).c_str(), 1);
  CommOptions o;
  o.backend = "auto";
  o.net = "dpdk";
  o.algo = algo;
  o.cost = "1,20,5;20,2,5";  // fixed (intra;inter): no calibration per communicator
  o.timeout_ms = 60'000;
  o.name = name;
  return o;
}

int hosts_in(const std::string& layout) {
  std::string seen;
  for (char ch : layout)
    if (seen.find(ch) == std::string::npos) seen += ch;
  return static_cast<int>(seen.size());
}

// Ranks of the smallest host.
int rails_in(const std::string& layout) {
  int rails = static_cast<int>(layout.size());
  for (char ch : layout) rails = std::min(rails, static_cast<int>(std::count(layout.begin(), layout.end(), ch)));
  return rails;
}

// alltoallv: rank a sends rank b (a + b) % 3 * count + b int32s, packed in
// reverse rank order with a gap of 5; blocks land in rank order with a gap
// of 2, which stays untouched. Returns the bytes this rank sent to ranks on
// other hosts (in `crossing`, where given).
int check_alltoallv(Communicator& c, const std::string& layout, size_t count, uint64_t* crossing = nullptr) {
  const int rank = c.rank();
  const size_t un = static_cast<size_t>(c.size());
  auto elems = [count](size_t from, size_t to) { return (from + to) % 3 * count + to; };
  std::vector<size_t> sc(un), sd(un), rc(un), rd(un);
  size_t so = 0, ro = 0;
  for (size_t j = un; j-- > 0;) sd[j] = so, sc[j] = elems(static_cast<size_t>(rank), j), so += sc[j] + 5;
  for (size_t i = 0; i < un; ++i) rd[i] = ro, rc[i] = elems(i, static_cast<size_t>(rank)), ro += rc[i] + 2;
  std::vector<int32_t> in(so, -7), out(ro, -1);
  for (size_t j = 0; j < un; ++j)
    for (size_t k = 0; k < sc[j]; ++k) in[sd[j] + k] = static_cast<int32_t>(j * 100000 + static_cast<size_t>(rank) * 1000 + k);
  if (!c.alltoallv(in.data(), sc, sd, out.data(), rc, rd, DataType::kInt32)) return 1;
  for (size_t i = 0; i < un; ++i) {
    for (size_t k = 0; k < rc[i]; ++k)
      if (out[rd[i] + k] != static_cast<int32_t>(static_cast<size_t>(rank) * 100000 + i * 1000 + k)) return 1;
    if (out[rd[i] + rc[i]] != -1 || out[rd[i] + rc[i] + 1] != -1) return 1;
  }
  if (crossing != nullptr) {
    *crossing = 0;
    for (size_t j = 0; j < un; ++j)
      if (layout[j] != layout[static_cast<size_t>(rank)]) *crossing += sc[j] * 4;
  }
  return 0;
}

class Hosts : public ::testing::TestWithParam<const char*> {};

TEST_P(Hosts, EveryCollectiveMatchesTheReference) {
  if (!have_dpdk()) GTEST_SKIP() << "libgrex was built without DPDK (install libdpdk-dev and reconfigure)";
  const std::string layout = GetParam();
  const int nhosts = hosts_in(layout);
  const bool layered = nhosts > 1 && nhosts < static_cast<int>(layout.size());
  auto res = run_ranks(static_cast<int>(layout.size()), [&](Rank& r) -> int {
    for (const char* algo : {"auto", "hierarchical", "ring", "recursive_doubling"}) {
      auto c = make_comm(r, across_hosts(r, layout, algo, std::string("hosts-") + algo));
      RANK_CHECK(c != nullptr);
      const std::string topo = c->topology();
      RANK_CHECK(topo.rfind(std::to_string(nhosts) + (nhosts == 1 ? " host" : " hosts"), 0) == 0);
      RANK_CHECK((c->device().capabilities().driver == "shm+dpdk") == layered);
      if (layered && std::string(algo) == "auto") {
        RANK_CHECK(topo.find("intra-host shm, inter-host dpdk") != std::string::npos);
        // With one rail the shards are the whole vector: the model may keep a flat algorithm.
        if (rails_in(layout) > 1) RANK_CHECK(c->allreduce_algorithm(size_t{64} << 20) == "hierarchical");
      }
      RANK_CHECK(check_every_collective(*c) == 0);
      for (size_t count : {size_t{1}, size_t{33}, size_t{20000}}) RANK_CHECK(check_alltoallv(*c, layout, count) == 0);
      for (int root = 0; root < c->size(); ++root) {  // every root: its rail and its host differ
        std::vector<int32_t> b(70001, r.rank == root ? root * 3 + 1 : -1);
        RANK_OK(c->broadcast(b.data(), b.size(), DataType::kInt32, root));
        RANK_CHECK(b.front() == root * 3 + 1 && b.back() == root * 3 + 1);
        std::vector<double> v(5003, r.rank + 1.0), sum(v.size(), 0);
        RANK_OK(c->reduce(v.data(), sum.data(), v.size(), DataType::kFloat64, ReduceOp::kAvg, root));
        if (r.rank == root) RANK_CHECK(sum[5002] == (c->size() + 1) / 2.0);
      }
      std::vector<float> rs_in(size_t{3000} * layout.size()), rs_out(3000, -1);
      for (size_t i = 0; i < rs_in.size(); ++i) rs_in[i] = static_cast<float>(i % 97 + r.rank);
      RANK_OK(c->reduce_scatter(rs_in.data(), rs_out.data(), 3000, DataType::kFloat32, ReduceOp::kAvg));
      for (size_t i = 0; i < 3000; i += 7) {
        const size_t gi = static_cast<size_t>(r.rank) * 3000 + i;
        RANK_CHECK(std::fabs(rs_out[i] - (static_cast<float>(gi % 97) + (c->size() - 1) / 2.0f)) < 1e-4f);
      }
      for (size_t count : {size_t{0}, size_t{1}, size_t{5}, size_t{4099}, (size_t{1} << 18) + 3}) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin})
          RANK_CHECK(check_allreduce<int32_t>(*c, count, DataType::kInt32, op, count == 5) == 0);
        RANK_CHECK(check_allreduce<double>(*c, count, DataType::kFloat64, ReduceOp::kAvg, false) == 0);
        RANK_CHECK(check_allreduce<float>(*c, count, DataType::kFloat32, ReduceOp::kSum, true) == 0);
      }
      RANK_CHECK(check_allreduce<int64_t>(*c, 333, DataType::kInt64, ReduceOp::kProd, false) == 0);
      RANK_CHECK(check_allreduce<uint8_t>(*c, 1001, DataType::kUint8, ReduceOp::kMax, false) == 0);
    }
    return 0;
  }, 400);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// Even (AABB), interleaved (ABAB: host order is not rank order), uneven
// (AAB, ABBC: the smallest host sets the rails), one rank per host (ABC: the
// network alone) and one host (AAA: shm alone).
INSTANTIATE_TEST_SUITE_P(Layouts, Hosts, ::testing::Values("AABB", "ABAB", "AAB", "ABBC", "ABC", "AAA"),
                         [](const auto& info) { return std::string(info.param); });

// Issue 29 on the two-level communicator (2 hosts x 2 ranks): the compressed
// and deadline allreduces give what they give on one backend (hierarchical
// where the model takes it; a deadline call with late ranks runs a ring among
// the contributors, shm and memif links alike).
TEST(HostsIssue29, CompressedAndDeadlineAllreduce) {
  if (!have_dpdk()) GTEST_SKIP() << "libgrex was built without DPDK (install libdpdk-dev and reconfigure)";
  auto res = run_ranks(4, [](Rank& r) -> int {
    RANK_CHECK(check_bounds(r, Compression::kBf16, ReduceOp::kSum, false, across_hosts(r, "AABB", "auto", "c29a")) == 0);
    RANK_CHECK(check_topk_exact(r, across_hosts(r, "AABB", "auto", "c29b")) == 0);
    return deadline_rank(r, across_hosts(r, "AABB", "auto", "d29"), 100'003);
  }, 300);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// Top-k across hosts (GREX_TOPK=hierarchical) selects from each host's exact
// sum, shard by shard (each rail its own): at every 64th element the host's
// two ranks send halves of a value that grows along the vector (100 and up),
// and at every 64th from 32 a value of 1000 that they cancel. A rank's own
// top 1/64 is the cancelled values; the host's is the halves' sums, which are
// exactly what arrives, with no residual and only the rail's pairs crossing
// hosts (the count, then 32 pairs of 8 bytes each way). The flat form sends
// the cancelled values, which sum to zero everywhere: at these costs (a
// network 10 x slower than shm) the model picks it ("auto").
TEST(HostsIssue29, TopkSelectsFromEachHostsSum) {
  if (!have_dpdk()) GTEST_SKIP() << "libgrex was built without DPDK (install libdpdk-dev and reconfigure)";
  auto res = run_ranks(4, [](Rank& r) -> int {
    CommOptions opts = across_hosts(r, "AABB", "auto", "topk-hosts");
    opts.topk = "hierarchical";
    auto c = make_comm(r, opts);
    RANK_CHECK(c != nullptr);
    constexpr size_t kCount = 4096;  // two shards of 2048, 32 of the grown values in each
    const int host = r.rank / 2, local = r.rank % 2;
    auto grown = [](size_t i, int h) { return 100.0f + static_cast<float>(i / 64) + static_cast<float>(h); };
    std::vector<float> in(kCount), out(kCount, -1.0f);
    for (size_t i = 0; i < kCount; ++i) {
      float v = local == 0 ? 0.25f * static_cast<float>(static_cast<int>(i % 7) - 3) : 0.0f;  // below every pick
      if (i % 64 == 0) v = grown(i, host) / 2;
      if (i % 64 == 32) v = local == 0 ? 1000.0f : -1000.0f;
      in[i] = v;
    }
    AllreduceOptions o;
    o.compression = Compression::kTopK;
    o.topk_fraction = 1.0 / 64;
    o.error_feedback = false;
    RANK_CHECK(c->allreduce_algorithm(kCount * sizeof(float)) == "hierarchical");
    const uint64_t before = c->stats().bytes_inter_host;
    RANK_OK(c->allreduce(in.data(), out.data(), kCount, DataType::kFloat32, ReduceOp::kSum, o));
    const uint64_t crossed = c->stats().bytes_inter_host - before;
    for (size_t i = 0; i < kCount; ++i) {
      const float want = i % 64 == 0 ? grown(i, 0) + grown(i, 1) : 0.0f;
      if (out[i] != want) {
        std::fprintf(stderr, "rank %d: out[%zu] = %g, want %g\n", r.rank, i, static_cast<double>(out[i]),
                     static_cast<double>(want));
        return 1;
      }
    }
    if (crossed != sizeof(uint32_t) + 32 * 8) {
      std::fprintf(stderr, "rank %d: %llu bytes crossed hosts, want %zu\n", r.rank,
                   static_cast<unsigned long long>(crossed), sizeof(uint32_t) + 32 * 8);
      return 1;
    }
    auto flat = make_comm(r, across_hosts(r, "AABB", "auto", "topk-hosts-auto"));
    RANK_CHECK(flat != nullptr);
    RANK_OK(flat->allreduce(in.data(), out.data(), kCount, DataType::kFloat32, ReduceOp::kSum, o));
    RANK_CHECK(std::all_of(out.begin(), out.end(), [](float v) { return v == 0.0f; }));
    return 0;
  }, 300);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// Top-k across hosts, hierarchical, on even and uneven hosts: every value sent is the exact sum, and error
// feedback on the hosts' sums keeps the running sum bounded.
TEST(HostsIssue29, TopkExactAndBoundedWithFeedbackAcrossHosts) {
  if (!have_dpdk()) GTEST_SKIP() << "libgrex was built without DPDK (install libdpdk-dev and reconfigure)";
  for (const std::string layout : {"AABB", "AAB"}) {
    auto res = run_ranks(static_cast<int>(layout.size()), [&](Rank& r) -> int {
      CommOptions exact = across_hosts(r, layout, "auto", "topk-exact"), feedback = exact;
      exact.topk = feedback.topk = "hierarchical";
      feedback.name = "topk-feedback";
      RANK_CHECK(check_topk_exact(r, exact) == 0);
      RANK_CHECK(check_topk_feedback(r, feedback) == 0);
      CommOptions bad = exact;
      bad.topk = "sideways";
      RANK_CHECK(!Communicator::create(r.bootstrap, bad));  // a mode nobody knows is refused
      return 0;
    }, 300);
    EXPECT_TRUE(res.all_ok()) << layout << ": " << res.describe();
  }
}

// 2 hosts x 2 ranks, a vector whose input and output outgrow this core's
// share of the last-level cache: the reduction inside each host writes its
// segment with streaming stores (staged_allreduce.cc), and the sums stay
// exact, in place and out of place.
TEST(HostsLarge, AVectorPastTheCacheSumsExactly) {
  if (!have_dpdk()) GTEST_SKIP() << "libgrex was built without DPDK (install libdpdk-dev and reconfigure)";
  const size_t count = detail::reduce_streaming_min_bytes() / (2 * sizeof(float)) + 4099;
  auto res = run_ranks(4, [&](Rank& r) -> int {
    auto c = make_comm(r, across_hosts(r, "AABB", "hierarchical", "large"));
    RANK_CHECK(c != nullptr);
    RANK_CHECK(check_allreduce<float>(*c, count, DataType::kFloat32, ReduceOp::kSum, false) == 0);
    RANK_CHECK(check_allreduce<float>(*c, count, DataType::kFloat32, ReduceOp::kAvg, true) == 0);
    return 0;
  }, 300);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// 2 hosts x 2 ranks, 4 MiB: the hierarchical allreduce sends each shard (half
// the vector) once across hosts per rank (2 ranks on a rail: each algorithm
// moves the shard once); a flat ring sends 2 (n-1)/n = 1.5 vectors from each
// of the two ranks whose successor is on the other host, nothing across from
// the others. The driver's per-flow counters agree with the communicator's.
TEST(HostsCounters, BytesCrossingHostsAsTheorySays) {
  if (!have_dpdk()) GTEST_SKIP() << "libgrex was built without DPDK (install libdpdk-dev and reconfigure)";
  const std::string layout = "AABB";
  auto res = run_ranks(4, [&](Rank& r) -> int {
    constexpr size_t kCount = size_t{1} << 20;  // f32: 4 MiB
    constexpr uint64_t kBytes = kCount * 4;
    for (const char* algo : {"hierarchical", "ring"}) {
      auto c = make_comm(r, across_hosts(r, layout, algo, std::string("bytes-") + algo));
      RANK_CHECK(c != nullptr);
      std::vector<float> v(kCount, 1.0f);
      const uint64_t before = c->stats().bytes_inter_host;
      RANK_OK(c->allreduce(v.data(), kCount, DataType::kFloat32, ReduceOp::kSum));
      RANK_CHECK(v[kCount - 1] == 4.0f);
      const uint64_t crossed = c->stats().bytes_inter_host - before;
      const uint64_t want = std::string(algo) == "hierarchical" ? kBytes / 2 : r.rank % 2 == 1 ? kBytes * 3 / 2 : 0;
      if (crossed != want) {
        std::fprintf(stderr, "rank %d %s: %llu bytes crossed hosts, want %llu\n", r.rank, algo,
                     static_cast<unsigned long long>(crossed), static_cast<unsigned long long>(want));
        return 1;
      }
      uint64_t flows = 0;  // what the dpdk flows to the other host's ranks sent (everything so far)
      for (int p : {0, 1, 2, 3})
        if ((p < 2) != (r.rank < 2)) flows += device_counter(*c, "peer." + std::to_string(p) + ".bytes_sent");
      RANK_CHECK(flows >= crossed && flows == c->stats().bytes_inter_host);
    }
    {  // bf16 across hosts: the same shards, at half the bytes (sums inside a host stay float32)
      auto c = make_comm(r, across_hosts(r, layout, "auto", "bytes-bf16"));
      RANK_CHECK(c != nullptr);
      RANK_CHECK(c->allreduce_algorithm(kBytes) == "hierarchical");
      std::vector<float> v(kCount, 1.5f);
      AllreduceOptions o;
      o.compression = Compression::kBf16;
      const uint64_t before = c->stats().bytes_inter_host;
      RANK_OK(c->allreduce(v.data(), v.data(), kCount, DataType::kFloat32, ReduceOp::kSum, o));
      RANK_CHECK(v[0] == 6.0f && v[kCount - 1] == 6.0f);
      const uint64_t crossed = c->stats().bytes_inter_host - before;
      if (crossed != kBytes / 4) {
        std::fprintf(stderr, "rank %d bf16: %llu bytes crossed hosts, want %llu\n", r.rank,
                     static_cast<unsigned long long>(crossed), static_cast<unsigned long long>(kBytes / 4));
        return 1;
      }
    }
    {  // a deadline allreduce that every rank makes: the hierarchical allreduce's bytes
      auto c = make_comm(r, across_hosts(r, layout, "auto", "bytes-deadline"));
      RANK_CHECK(c != nullptr);
      std::vector<float> v(kCount, 2.0f);
      std::vector<int> in;
      AllreduceOptions o;
      o.deadline_ms = 60'000;
      o.contributors = &in;
      const uint64_t before = c->stats().bytes_inter_host;
      RANK_OK(c->allreduce(v.data(), v.data(), kCount, DataType::kFloat32, ReduceOp::kSum, o));
      RANK_CHECK(in.size() == 4 && v[0] == 8.0f && v[kCount - 1] == 8.0f);
      const uint64_t crossed = c->stats().bytes_inter_host - before;
      if (crossed != kBytes / 2) {
        std::fprintf(stderr, "rank %d deadline: %llu bytes crossed hosts, want %llu\n", r.rank,
                     static_cast<unsigned long long>(crossed), static_cast<unsigned long long>(kBytes / 2));
        return 1;
      }
    }
    // allgather and reduce_scatter (hierarchical wherever hosts are even):
    // one block of each rank crosses to the other host's rail member.
    auto c = make_comm(r, across_hosts(r, layout, "auto", "bytes-blocks"));
    RANK_CHECK(c != nullptr);
    constexpr size_t kBlock = size_t{1} << 18;  // f32: 1 MiB per rank
    std::vector<float> mine(kBlock, static_cast<float>(r.rank)), all(kBlock * 4, -1.0f);
    uint64_t before = c->stats().bytes_inter_host;
    RANK_OK(c->allgather(mine.data(), all.data(), kBlock, DataType::kFloat32));
    for (int p = 0; p < 4; ++p) RANK_CHECK(all[static_cast<size_t>(p) * kBlock + 5] == static_cast<float>(p));
    RANK_CHECK(c->stats().bytes_inter_host - before == kBlock * 4);
    before = c->stats().bytes_inter_host;
    RANK_OK(c->reduce_scatter(all.data(), mine.data(), kBlock, DataType::kFloat32, ReduceOp::kSum));
    RANK_CHECK(mine[7] == 4.0f * static_cast<float>(r.rank));
    RANK_CHECK(c->stats().bytes_inter_host - before == kBlock * 4);
    return 0;
  }, 300);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// Uneven hosts (AAAB): a broadcast or reduce rooted at A's second rank has
// no rail reaching B, so it runs through A's rank 0 and rail 0: the vector
// crosses hosts once, where the flat binomial trees cross twice. Allgather
// and reduce_scatter go through each host's rank 0 too, as host bundles
// (A: 3 blocks, B: 1): 4 blocks cross, where a flat ring moves 3 blocks over
// each of its 2 crossing links. Alltoall sends one bundle each way (3
// blocks), the flat exchange the same bytes as 6 messages. (Small blocks:
// the fixed model picks the hierarchical forms there; the Hosts suite checks
// every size's values.)
TEST(HostsUneven, ThroughRailZero) {
  if (!have_dpdk()) GTEST_SKIP() << "libgrex was built without DPDK (install libdpdk-dev and reconfigure)";
  const std::string layout = "AAAB";
  auto res = run_ranks(4, [&](Rank& r) -> int {
    auto c = make_comm(r, across_hosts(r, layout, "auto", "uneven-roots"));
    RANK_CHECK(c != nullptr);
    constexpr size_t kCount = size_t{1} << 18;  // i32: 1 MiB
    constexpr int kRoot = 1;
    std::vector<int32_t> b(kCount, r.rank == kRoot ? 7 : -1);
    uint64_t before = c->stats().bytes_inter_host;
    RANK_OK(c->broadcast(b.data(), b.size(), DataType::kInt32, kRoot));
    const uint64_t bcast = c->stats().bytes_inter_host - before;
    RANK_CHECK(b.front() == 7 && b.back() == 7);
    std::vector<int32_t> v(kCount, r.rank + 1), sum(kCount, 0);
    before = c->stats().bytes_inter_host;
    RANK_OK(c->reduce(v.data(), sum.data(), kCount, DataType::kInt32, ReduceOp::kSum, kRoot));
    const uint64_t red = c->stats().bytes_inter_host - before;
    if (r.rank == kRoot) RANK_CHECK(sum.front() == 10 && sum.back() == 10);
    constexpr size_t kBlock = 256;  // f32: 1 KiB
    std::vector<float> mine(kBlock, static_cast<float>(r.rank)), all(kBlock * 4, -1.0f);
    before = c->stats().bytes_inter_host;
    RANK_OK(c->allgather(mine.data(), all.data(), kBlock, DataType::kFloat32));
    const uint64_t ag = c->stats().bytes_inter_host - before;
    for (int p = 0; p < 4; ++p) RANK_CHECK(all[static_cast<size_t>(p) * kBlock + 9] == static_cast<float>(p));
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<float>(i / kBlock * 10 + r.rank);
    before = c->stats().bytes_inter_host;
    RANK_OK(c->reduce_scatter(all.data(), mine.data(), kBlock, DataType::kFloat32, ReduceOp::kSum));
    const uint64_t rs = c->stats().bytes_inter_host - before;
    RANK_CHECK(mine.front() == 40.0f * static_cast<float>(r.rank) + 6.0f && mine.back() == mine.front());
    // Alltoall: one bundle each way between the hosts' rank 0s (3 blocks each);
    // the flat pairwise exchange sends the same 6 blocks as 6 messages.
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<float>(100 * r.rank + i / kBlock);
    std::vector<float> got(all.size(), -1.0f);
    before = c->stats().bytes_inter_host;
    RANK_OK(c->alltoall(all.data(), got.data(), kBlock, DataType::kFloat32));
    const uint64_t a2a = c->stats().bytes_inter_host - before;
    for (int p = 0; p < 4; ++p)
      RANK_CHECK(got[static_cast<size_t>(p) * kBlock + 3] == static_cast<float>(100 * p + r.rank));
    // Alltoallv of small vectors: one bundle each way too (its 8-byte length
    // ahead, and a length per piece inside: 3 each way), after the ranks
    // agree on the largest vector (an 8-byte allreduce, once across each
    // way): 80 bytes beyond the data. The flat exchange would send 6 pieces
    // across, each with a length ahead: 64 with the agreement.
    uint64_t v_data = 0;
    before = c->stats().bytes_inter_host;
    RANK_CHECK(check_alltoallv(*c, layout, 3, &v_data) == 0);
    const uint64_t a2av = c->stats().bytes_inter_host - before - v_data;
    // Every rank's share, summed (read before this allreduce's own bytes).
    std::vector<int64_t> t{static_cast<int64_t>(bcast), static_cast<int64_t>(red), static_cast<int64_t>(ag),
                           static_cast<int64_t>(rs), static_cast<int64_t>(a2a), static_cast<int64_t>(a2av)};
    RANK_OK(c->allreduce(t.data(), t.size(), DataType::kInt64, ReduceOp::kSum));
    // Rail 0's exchange of bundles sends an 8-byte length ahead each way.
    const int64_t vec = kCount * 4, blocks = 4 * kBlock * 4 + 2 * 8, a2a_want = 6 * kBlock * 4 + 2 * 8;
    if (t[0] != vec || t[1] != vec || t[2] != blocks || t[3] != blocks || t[4] != a2a_want || t[5] != 2 * 8 + 6 * 8 + 2 * 8) {
      std::fprintf(stderr,
                   "rank %d: bytes across hosts: broadcast %lld, reduce %lld (want %lld), allgather %lld, "
                   "reduce_scatter %lld (want %lld), alltoall %lld (want %lld), alltoallv beyond its data %lld "
                   "(want 80)\n",
                   r.rank, static_cast<long long>(t[0]), static_cast<long long>(t[1]), static_cast<long long>(vec),
                   static_cast<long long>(t[2]), static_cast<long long>(t[3]), static_cast<long long>(blocks),
                   static_cast<long long>(t[4]), static_cast<long long>(a2a_want), static_cast<long long>(t[5]));
      return 1;
    }
    return 0;
  }, 300);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// GREX_ALLTOALLV (CommOptions::alltoallv) forces a form and skips the
// agreement: on AAAB, pairwise sends a length ahead of each of its 6
// crossing pieces (48 bytes beyond the data); hierarchical one per bundle
// and one per piece inside (16 + 48). A mode nobody knows is refused.
TEST(HostsUneven, AlltoallvForcedForms) {
  if (!have_dpdk()) GTEST_SKIP() << "libgrex was built without DPDK (install libdpdk-dev and reconfigure)";
  auto res = run_ranks(4, [&](Rank& r) -> int {
    for (const char* mode : {"pairwise", "hierarchical"}) {
      CommOptions o = across_hosts(r, "AAAB", "auto", std::string("forced-") + mode);
      o.alltoallv = mode;
      auto c = make_comm(r, o);
      RANK_CHECK(c != nullptr);
      uint64_t data = 0;
      const uint64_t before = c->stats().bytes_inter_host;
      RANK_CHECK(check_alltoallv(*c, "AAAB", 3, &data) == 0);
      std::vector<int64_t> t{static_cast<int64_t>(c->stats().bytes_inter_host - before - data)};
      RANK_OK(c->allreduce(t.data(), 1, DataType::kInt64, ReduceOp::kSum));
      RANK_CHECK(t[0] == (std::string(mode) == "pairwise" ? 48 : 64));
    }
    CommOptions bad = across_hosts(r, "AAAB", "auto", "forced-bad");
    bad.alltoallv = "sideways";
    RANK_CHECK(!Communicator::create(r.bootstrap, bad));
    return 0;
  }, 120);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// Alltoallv through the hosts' rank 0s still names a pair that disagrees,
// even where the bundle's total is right: rank 0 sends rank 3 one int32 more
// than rank 3 expects, rank 1 one less. Rank 3 (B's rank 0) finds it in the
// pieces' lengths and fails the call naming the pair; every other rank fails
// this call or, where its own data had come whole, its next one.
TEST(HostsUneven, AlltoallvMismatchIsNamed) {
  if (!have_dpdk()) GTEST_SKIP() << "libgrex was built without DPDK (install libdpdk-dev and reconfigure)";
  auto res = run_ranks(4, [&](Rank& r) -> int {
    auto c = make_comm(r, across_hosts(r, "AAAB", "auto", "uneven-mismatch"));
    RANK_CHECK(c != nullptr);
    std::vector<size_t> sc(4, 2), sd{0, 4, 8, 12}, rc(4, 2), rd{0, 4, 8, 12};
    if (r.rank == 0) sc[3] = 3;
    if (r.rank == 1) sc[3] = 1;
    std::vector<int32_t> in(16, r.rank), out(16, -1);
    auto e = c->alltoallv(in.data(), sc, sd, out.data(), rc, rd, DataType::kInt32);
    if (e) RANK_CHECK(!c->barrier());
    if (r.rank == 3) {
      RANK_CHECK(!e);
      RANK_CHECK(e.error().code() == Errc::kMismatch);
      RANK_CHECK(e.error().message().find("rank 0 sends 12 bytes to rank 3, which expects 8") != std::string::npos);
    }
    return 0;
  }, 120);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// Flows between hosts run RTTCC unless the job names a controller; the
// counters show each one's RTT samples and rate. None inside a host (shm).
TEST(HostsCongestion, RttccOnInterHostFlowsByDefault) {
  if (!have_dpdk()) GTEST_SKIP() << "libgrex was built without DPDK (install libdpdk-dev and reconfigure)";
  const std::string layout = "AABB";
  auto res = run_ranks(4, [&](Rank& r) -> int {
    for (const char* cc : {"", "none"}) {
      CommOptions o = across_hosts(r, layout, "auto", std::string("cc-") + cc);
      o.cc = cc;
      auto c = make_comm(r, o);
      RANK_CHECK(c != nullptr);
      std::vector<float> v(size_t{1} << 20, 1.0f);
      for (int i = 0; i < 3; ++i) RANK_OK(c->allreduce(v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum));
      {
        const int p = (r.rank + 2) % 4;  // the rail peer: the hierarchical allreduce's only flow
        const std::string k = "peer." + std::to_string(p) + ".";
        const bool paced = device_counter(*c, k + "cc_rate_kbps") > 0;
        if (std::string(cc).empty()) {
          RANK_CHECK(paced && device_counter(*c, k + "probes_sent") > 0);
        } else {
          RANK_CHECK(!paced);
        }
      }
    }
    return 0;
  }, 300);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// Every rank of host B exits at once while host A's ranks run an allreduce:
// each survivor returns an error naming rank 2 or 3 within twice the timeout.
TEST(HostsFailure, AHostDyingWholeIsNamedByTheOther) {
  if (!have_dpdk()) GTEST_SKIP() << "libgrex was built without DPDK (install libdpdk-dev and reconfigure)";
  const std::string layout = "AABB";
  constexpr int64_t kTimeoutMs = 3000;
  auto res = run_ranks(4, [&](Rank& r) -> int {
    CommOptions o = across_hosts(r, layout, "auto", "dying-host");
    o.timeout_ms = kTimeoutMs;
    auto c = make_comm(r, o);
    RANK_CHECK(c != nullptr);
    std::vector<float> v(size_t{1} << 18, 1.0f);
    RANK_OK(c->allreduce(v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum));
    RANK_OK(c->barrier());
    // A rank's barrier may return before its last message has reached every
    // peer: host B leaves only once host A's ranks are past the barrier too (a
    // CI run caught rank 1's barrier failing on rank 3's exit).
    RANK_OK(r.bootstrap->barrier("past-barrier"));
    if (r.rank >= 2) _exit(0);  // host B goes, both ranks together
    const auto t0 = std::chrono::steady_clock::now();
    auto e = c->allreduce(v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
    RANK_CHECK(!e.ok());
    const std::string m = e.error().message();
    std::fprintf(stderr, "rank %d after %lld ms: %s\n", r.rank, static_cast<long long>(ms), m.c_str());
    RANK_CHECK(m.find("rank 2") != std::string::npos || m.find("rank 3") != std::string::npos ||
               m.find("peer 2") != std::string::npos || m.find("peer 3") != std::string::npos);
    RANK_CHECK(ms <= 2 * kTimeoutMs);
    return 0;
  }, 120);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

}  // namespace
}  // namespace grex::test
