// SPDX-License-Identifier: Apache-2.0
// grex-perf's pure parts: the argument parser, size lists, busbw factors,
// latency statistics, table rows and the correctness-check pattern.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "collectives/reduce.h"
#include "perf_args.h"
#include "perf_check.h"
#include "perf_format.h"

namespace grex::perf {
namespace {

Result<PerfArgs> parse(std::vector<std::string_view> args) { return parse_args(args); }

TEST(PerfSize, Suffixes) {
  EXPECT_EQ(*parse_size("8"), 8u);
  EXPECT_EQ(*parse_size("1K"), 1024u);
  EXPECT_EQ(*parse_size("1k"), 1024u);
  EXPECT_EQ(*parse_size("64KiB"), 65536u);
  EXPECT_EQ(*parse_size("1M"), 1u << 20);
  EXPECT_EQ(*parse_size("256MB"), 256u << 20);
  EXPECT_EQ(*parse_size("2G"), size_t{2} << 30);
  EXPECT_EQ(*parse_size("0"), 0u);
  for (const char* bad : {"", "x", "1X", "-1", "1.5M", "1MM", "M", "99999999999999999999"})
    EXPECT_FALSE(parse_size(bad).ok()) << bad;
  EXPECT_FALSE(parse_size("20000000T").ok());  // overflows 64 bits
}

TEST(PerfArgs, AllreduceNcclTestsFlags) {
  auto a = parse({"allreduce", "-b", "8", "-e", "1M", "-f", "4", "-n", "3", "-w", "1", "-c", "1", "-d", "double",
                  "-o", "max"});
  ASSERT_TRUE(a.ok()) << a.error().message();
  EXPECT_EQ(a->mode, Mode::kAllreduce);
  EXPECT_EQ(a->min_bytes, 8u);
  EXPECT_EQ(a->max_bytes, 1u << 20);
  EXPECT_EQ(a->step_factor, 4u);
  EXPECT_EQ(a->effective_iters(), 3);
  EXPECT_EQ(a->effective_warmup(), 1);
  EXPECT_TRUE(a->check);
  ASSERT_EQ(a->types.size(), 1u);
  EXPECT_EQ(a->types[0], DataType::kFloat64);
  ASSERT_EQ(a->ops.size(), 1u);
  EXPECT_EQ(a->ops[0], ReduceOp::kMax);
  EXPECT_EQ(a->placement, Placement::kBoth);
  EXPECT_EQ(a->deadline_ms, 0);
  a = parse({"allreduce", "--deadline", "250"});
  ASSERT_TRUE(a.ok()) << a.error().message();
  EXPECT_EQ(a->deadline_ms, 250);
}

TEST(PerfArgs, DefaultsInlineValuesAndLongNames) {
  auto d = parse({"allreduce"});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->effective_iters(), 20);
  EXPECT_EQ(d->effective_warmup(), 5);
  EXPECT_EQ(d->types, std::vector<DataType>{DataType::kFloat32});
  EXPECT_EQ(d->ops, std::vector<ReduceOp>{ReduceOp::kSum});

  auto a = parse({"allreduce", "-b8", "--maxbytes=64K", "--op", "avg", "-c0", "--inplace", "1", "-d", "all",
                  "--alloc", "--backend", "shm", "--json", "out.json", "--cc", "rttcc"});
  ASSERT_TRUE(a.ok()) << a.error().message();
  EXPECT_EQ(a->min_bytes, 8u);
  EXPECT_EQ(a->max_bytes, 65536u);
  EXPECT_FALSE(a->check);
  EXPECT_EQ(a->placement, Placement::kInPlace);
  EXPECT_EQ(a->types.size(), 5u);
  EXPECT_EQ(a->ops, std::vector<ReduceOp>{ReduceOp::kAvg});
  EXPECT_TRUE(a->shared_buffers);
  EXPECT_EQ(a->backend, "shm");
  EXPECT_EQ(a->json_path, "out.json");
  EXPECT_EQ(a->cc, "rttcc");
  EXPECT_FALSE(parse({"allreduce", "--cc", ""}).ok());
  EXPECT_EQ(parse({"allreduce", "--inplace", "0"})->placement, Placement::kOutOfPlace);
  EXPECT_EQ(parse({"allreduce", "-o", "all"})->ops.size(), 5u);
}

constexpr Mode kNewCollectives[] = {Mode::kReduceScatter, Mode::kAllgather, Mode::kBroadcast, Mode::kReduce,
                                    Mode::kAlltoall};
constexpr Mode kAllCollectives[] = {Mode::kAllreduce, Mode::kReduceScatter, Mode::kAllgather,
                                    Mode::kBroadcast, Mode::kReduce,    Mode::kAlltoall, Mode::kSendrecv};

TEST(PerfArgs, CollectiveModesTakeNcclTestsFlags) {
  for (Mode m : kNewCollectives) {
    std::string_view name = mode_name(m);
    SCOPED_TRACE(std::string(name));
    auto a = parse({name, "-b", "8", "-e", "1M", "-f", "4", "-n", "3", "-w", "1", "-c", "0", "-d", "int32", "-o", "max",
                    "--inplace", "1", "--json", "x.json"});
    ASSERT_TRUE(a.ok()) << a.error().message();
    EXPECT_EQ(a->mode, m);
    EXPECT_TRUE(is_collective(m));
    EXPECT_EQ(a->min_bytes, 8u);
    EXPECT_EQ(a->max_bytes, 1u << 20);
    EXPECT_EQ(a->step_factor, 4u);
    EXPECT_EQ(a->effective_iters(), 3);
    EXPECT_EQ(a->effective_warmup(), 1);
    EXPECT_FALSE(a->check);
    EXPECT_EQ(a->types, std::vector<DataType>{DataType::kInt32});
    EXPECT_EQ(a->ops, std::vector<ReduceOp>{ReduceOp::kMax});
    EXPECT_EQ(a->placement, Placement::kInPlace);
    EXPECT_EQ(a->json_path, "x.json");
    EXPECT_EQ(a->root, 0);
    auto d = parse({name});  // nccl-tests defaults, as allreduce
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->effective_iters(), 20);
    EXPECT_EQ(d->effective_warmup(), 5);
    EXPECT_TRUE(d->check);
    EXPECT_EQ(d->placement, Placement::kBoth);
    EXPECT_EQ(collective_sizes(*parse({name, "-b", "1K", "-e", "4K"})), (std::vector<size_t>{1024, 2048, 4096}));
    EXPECT_EQ(collective_sizes(*parse({name, "-b", "0", "-e", "300", "-f", "1", "-i", "100"})),
              (std::vector<size_t>{0, 100, 200, 300}));
  }
  for (std::string_view rooted : {"broadcast", "reduce"}) {
    EXPECT_EQ(parse({rooted, "-r", "3"})->root, 3);
    EXPECT_EQ(parse({rooted, "--root", "2"})->root, 2);
    EXPECT_EQ(parse({rooted, "--root=1"})->root, 1);
    EXPECT_EQ(parse({rooted, "-r1"})->root, 1);
  }
  EXPECT_EQ(parse({"reduce_scatter", "-o", "all"})->ops.size(), 5u);
  EXPECT_EQ(parse({"allgather", "-d", "all"})->types.size(), 5u);
  EXPECT_TRUE(mode_reduces(Mode::kReduceScatter) && mode_reduces(Mode::kReduce) && mode_reduces(Mode::kAllreduce));
  EXPECT_FALSE(mode_reduces(Mode::kAllgather) || mode_reduces(Mode::kBroadcast) || mode_reduces(Mode::kAlltoall));
  EXPECT_TRUE(mode_has_root(Mode::kBroadcast) && mode_has_root(Mode::kReduce));
  EXPECT_FALSE(mode_has_root(Mode::kAllreduce) || mode_has_root(Mode::kReduceScatter) ||
               mode_has_root(Mode::kAllgather) || mode_has_root(Mode::kAlltoall));
  EXPECT_FALSE(is_collective(Mode::kSendBw) || is_collective(Mode::kSendLat));
  EXPECT_EQ(mode_name(Mode::kReduceScatter), "reduce_scatter");
  EXPECT_EQ(mode_name(Mode::kAllgather), "allgather");
  EXPECT_EQ(mode_name(Mode::kBroadcast), "broadcast");
  EXPECT_EQ(mode_name(Mode::kReduce), "reduce");
  EXPECT_EQ(mode_name(Mode::kAlltoall), "alltoall");
  EXPECT_EQ(mode_name(Mode::kSendrecv), "sendrecv");
  EXPECT_TRUE(is_collective(Mode::kSendrecv));
  EXPECT_FALSE(mode_reduces(Mode::kSendrecv) || mode_has_root(Mode::kSendrecv) || mode_blocks_per_rank(Mode::kSendrecv));
  for (const char* word : {"reduce_scatter", "allgather", "broadcast", "alltoall", "sendrecv", "--root"})
    EXPECT_NE(usage().find(word), std::string_view::npos) << word;
}

TEST(PerfArgs, PerftestFlags) {
  auto bw = parse({"send_bw", "-a", "-e", "256M", "-n", "20", "-t", "128", "--report_gbits", "--memcpy-ref"});
  ASSERT_TRUE(bw.ok()) << bw.error().message();
  EXPECT_EQ(bw->mode, Mode::kSendBw);
  EXPECT_TRUE(bw->all_sizes);
  EXPECT_EQ(bw->all_max_bytes, 256u << 20);
  EXPECT_EQ(bw->tx_depth, 128);
  EXPECT_TRUE(bw->report_gbits);
  EXPECT_TRUE(bw->memcpy_ref);
  EXPECT_EQ(bw->effective_iters(), 20);

  auto lat = parse({"send_lat", "-s", "8", "-n", "100"});
  ASSERT_TRUE(lat.ok());
  EXPECT_EQ(lat->size_bytes, 8u);
  EXPECT_EQ(p2p_sizes(*lat), std::vector<size_t>{8});
  EXPECT_EQ(parse({"send_lat"})->size_bytes, 2u);          // perftest defaults
  EXPECT_EQ(parse({"send_bw"})->size_bytes, 65536u);
  EXPECT_EQ(parse({"send_bw"})->effective_iters(), 1000);
  EXPECT_EQ(parse({"send_bw"})->tx_depth, 128);             // perftest's default TX depth
  EXPECT_EQ(parse({"send_bw"})->port, 18515);
}

TEST(PerfArgs, WriteModesFlowsDurationAndServerClient) {
  auto w = parse({"write_bw", "-q", "4", "-t", "64", "-D", "2.5", "-R", "-p", "20000", "-s", "1M", "--plot",
                  "bw.png", "host-a"});
  ASSERT_TRUE(w.ok()) << w.error().message();
  EXPECT_EQ(w->mode, Mode::kWriteBw);
  EXPECT_EQ(w->flows, 4);
  EXPECT_EQ(w->tx_depth, 64);
  EXPECT_DOUBLE_EQ(w->duration_s, 2.5);
  EXPECT_TRUE(w->rdma_cm);
  EXPECT_EQ(w->port, 20000);
  EXPECT_EQ(w->size_bytes, 1u << 20);
  EXPECT_EQ(w->plot_path, "bw.png");
  EXPECT_EQ(w->server_host, "host-a");
  EXPECT_EQ(w->command_line, "grex-perf write_bw -q 4 -t 64 -D 2.5 -R -p 20000 -s 1M --plot bw.png host-a");

  auto l = parse({"write_lat", "-a", "-e", "64K", "--qp=1"});
  ASSERT_FALSE(l.ok());  // -q is for the bandwidth modes, as in this tool's table
  l = parse({"write_lat", "-a", "-e", "64K"});
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->size_bytes, 2u);
  EXPECT_EQ(p2p_sizes(*l).back(), 64u << 10);
  EXPECT_TRUE(l->server_host.empty());
  EXPECT_TRUE(is_bw(Mode::kWriteBw) && is_bw(Mode::kSendBw) && !is_bw(Mode::kWriteLat));
  EXPECT_TRUE(is_lat(Mode::kWriteLat) && is_lat(Mode::kSendLat) && !is_lat(Mode::kSendBw));
  EXPECT_TRUE(is_write(Mode::kWriteBw) && is_write(Mode::kWriteLat) && !is_write(Mode::kSendBw));
  EXPECT_FALSE(is_collective(Mode::kWriteBw) || is_collective(Mode::kWriteLat));
  EXPECT_EQ(mode_name(Mode::kWriteLat), "write_lat");
  EXPECT_DOUBLE_EQ(busbw_factor(Mode::kWriteBw, 2), 1.0);
  for (const char* word : {"write_bw", "write_lat", "--duration", "--qp", "--plot", "HOST"})
    EXPECT_NE(usage().find(word), std::string_view::npos) << word;
}

TEST(PerfArgs, HelpNeedsNoMode) {
  EXPECT_TRUE(parse({"--help"})->help);
  EXPECT_TRUE(parse({"-h"})->help);
  EXPECT_TRUE(parse({"send_bw", "-h"})->help);
  EXPECT_NE(usage().find("allreduce"), std::string_view::npos);
}

TEST(PerfArgs, ErrorsNameTheOption) {
  struct Case {
    std::vector<std::string_view> args;
    const char* needle;
  };
  const std::vector<Case> cases = {
      {{}, "missing MODE"},
      {{"allgatherv"}, "unknown mode 'allgatherv'"},
      {{"alltoall", "-b", "2M", "-e", "1M"}, "larger than -e"},
      {{"reduce_scatter", "-s", "8"}, "-s does not apply to reduce_scatter"},
      {{"allgather", "-r", "1"}, "-r does not apply to allgather"},
      {{"allreduce", "-r", "1"}, "-r does not apply to allreduce"},
      {{"send_bw", "-r", "1"}, "-r does not apply to send_bw"},
      {{"broadcast", "-r", "-1"}, "-r needs an integer from 0"},
      {{"reduce", "-r"}, "-r needs a value"},
      {{"reduce", "-o", "xor"}, "unknown reduction 'xor'"},
      {{"allreduce", "-x"}, "unknown option '-x'"},
      {{"allreduce", "-b"}, "-b needs a value"},
      {{"allreduce", "-b", "2M", "-e", "1M"}, "larger than -e"},
      {{"allreduce", "-d", "half"}, "unknown data type 'half'"},
      {{"allreduce", "-o", "xor"}, "unknown reduction 'xor'"},
      {{"allreduce", "-c", "2"}, "-c needs an integer from 0 to 1"},
      {{"allreduce", "-n", "0"}, "-n needs an integer"},
      {{"allreduce", "-s", "8"}, "-s does not apply to allreduce"},
      {{"send_bw", "-o", "sum"}, "-o does not apply to send_bw"},
      {{"send_lat", "--memcpy-ref"}, "--memcpy-ref does not apply to send_lat"},
      {{"send_bw", "-s", "8", "-a"}, "exclude each other"},
      {{"send_bw", "-e", "1M"}, "add -a"},
      {{"send_bw", "--alloc=1"}, "takes no value"},
      {{"send_bw", "host-a", "stray"}, "unknown option 'stray'"},
      {{"allreduce", "host-a"}, "unknown option 'host-a'"},
      {{"write_bw", "-n", "10", "-D", "1"}, "-n and -D exclude each other"},
      {{"write_bw", "-D", "0"}, "-D needs a duration"},
      {{"write_bw", "-D", "1s"}, "-D needs a duration"},
      {{"write_bw", "-q", "0"}, "-q needs an integer from 1 to 64"},
      {{"write_lat", "-q", "2"}, "-q does not apply to write_lat"},
      {{"write_lat", "-t", "2"}, "-t does not apply to write_lat"},
      {{"write_bw", "--memcpy-ref"}, "--memcpy-ref does not apply to write_bw"},
      {{"write_bw", "-p", "70000"}, "-p needs an integer from 1 to 65535"},
      {{"allreduce", "--plot"}, "--plot needs a value"},
      {{"allreduce", "--deadline", "0"}, "--deadline needs an integer from 1"},
      {{"allreduce", "--deadline", "5", "--compress", "bf16"}, "exclude each other"},
      {{"broadcast", "--deadline", "5"}, "--deadline does not apply to broadcast"},
  };
  for (const auto& c : cases) {
    auto r = parse(c.args);
    ASSERT_FALSE(r.ok()) << c.needle;
    EXPECT_EQ(r.error().code(), Errc::kInvalidArgument);
    EXPECT_NE(r.error().message().find(c.needle), std::string::npos) << r.error().message();
  }
}

TEST(PerfSizes, CollectiveSweep) {
  auto a = parse({"allreduce", "-b", "8", "-e", "1M", "-f", "4"});
  std::vector<size_t> want = {8, 32, 128, 512, 2048, 8192, 32768, 131072, 524288};
  EXPECT_EQ(collective_sizes(*a), want);
  auto lin = parse({"allreduce", "-b", "0", "-e", "300", "-f", "1", "-i", "100"});
  EXPECT_EQ(collective_sizes(*lin), (std::vector<size_t>{0, 100, 200, 300}));
  auto one = parse({"allreduce", "-b", "1M", "-e", "1M"});
  EXPECT_EQ(collective_sizes(*one), std::vector<size_t>{1u << 20});
  auto zero = parse({"allreduce", "-b", "0", "-e", "64"});  // 0 * factor never grows
  EXPECT_EQ(collective_sizes(*zero), std::vector<size_t>{0});
}

TEST(PerfSizes, AllSizesArePowersOfTwo) {
  auto a = parse({"send_bw", "-a"});
  auto s = p2p_sizes(*a);
  ASSERT_EQ(s.size(), 23u);  // 2 B .. 8 MiB
  EXPECT_EQ(s.front(), 2u);
  EXPECT_EQ(s.back(), 8u << 20);
  auto big = parse({"send_bw", "-a", "-e", "256M"});
  EXPECT_EQ(p2p_sizes(*big).size(), 28u);
  EXPECT_EQ(p2p_sizes(*big).back(), 256u << 20);
}

TEST(PerfFormat, BusBandwidthFactor) {
  EXPECT_DOUBLE_EQ(busbw_factor(Mode::kAllreduce, 1), 0.0);
  EXPECT_DOUBLE_EQ(busbw_factor(Mode::kAllreduce, 2), 1.0);
  EXPECT_DOUBLE_EQ(busbw_factor(Mode::kAllreduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(busbw_factor(Mode::kAllreduce, 8), 1.75);
  // nccl-tests PERFORMANCE.md: (n-1)/n for reduce_scatter, allgather, alltoall; 1 for broadcast, reduce.
  for (Mode m : {Mode::kReduceScatter, Mode::kAllgather, Mode::kAlltoall}) {
    EXPECT_DOUBLE_EQ(busbw_factor(m, 1), 0.0) << mode_name(m);
    EXPECT_DOUBLE_EQ(busbw_factor(m, 2), 0.5) << mode_name(m);
    EXPECT_DOUBLE_EQ(busbw_factor(m, 4), 0.75) << mode_name(m);
    EXPECT_DOUBLE_EQ(busbw_factor(m, 8), 0.875) << mode_name(m);
  }
  for (Mode m : {Mode::kBroadcast, Mode::kReduce, Mode::kSendrecv})
    for (int n : {1, 2, 4, 8}) EXPECT_DOUBLE_EQ(busbw_factor(m, n), 1.0) << mode_name(m) << " " << n;
  for (Mode m : kAllCollectives) EXPECT_DOUBLE_EQ(busbw_factor(m, 0), 0.0) << mode_name(m);
  EXPECT_DOUBLE_EQ(busbw_factor(Mode::kSendBw, 2), 1.0);
  EXPECT_DOUBLE_EQ(algbw_gbs(1'000'000, 100.0), 10.0);  // 1 MB in 100 us = 10 GB/s
  EXPECT_DOUBLE_EQ(algbw_gbs(8, 0.0), 0.0);
}

// nccl-tests' size and count columns: the sweep size is the whole operation;
// reduce_scatter, allgather and alltoall pass size / typesize / nranks per rank.
TEST(PerfFormat, CollectiveCountAndBytes) {
  for (Mode m : {Mode::kAllreduce, Mode::kBroadcast, Mode::kReduce}) {
    EXPECT_EQ(collective_count(m, 1024, DataType::kFloat32, 4), 256u) << mode_name(m);
    EXPECT_EQ(collective_bytes(m, 256, DataType::kFloat32, 4), 1024u) << mode_name(m);
    EXPECT_EQ(collective_count(m, 1026, DataType::kFloat64, 3), 128u) << mode_name(m);
  }
  for (Mode m : {Mode::kReduceScatter, Mode::kAllgather, Mode::kAlltoall}) {
    EXPECT_EQ(collective_count(m, 1024, DataType::kFloat32, 4), 64u) << mode_name(m);
    EXPECT_EQ(collective_bytes(m, 64, DataType::kFloat32, 4), 1024u) << mode_name(m);
    EXPECT_EQ(collective_count(m, 1024, DataType::kFloat32, 3), 85u) << mode_name(m);   // 256 / 3
    EXPECT_EQ(collective_bytes(m, 85, DataType::kFloat32, 3), 1020u) << mode_name(m);   // 85 * 3 * 4
    EXPECT_EQ(collective_count(m, 8, DataType::kFloat64, 2), 0u) << mode_name(m);
    EXPECT_EQ(collective_count(m, 1024, DataType::kUint8, 1), 1024u) << mode_name(m);
  }
}

TEST(PerfFormat, LatencyStats) {
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);
  LatencyStats s = latency_stats(v);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 100);
  EXPECT_DOUBLE_EQ(s.typical, 50.5);
  EXPECT_DOUBLE_EQ(s.avg, 50.5);
  EXPECT_NEAR(s.stdev, 28.866, 1e-3);
  EXPECT_DOUBLE_EQ(s.p99, 99);
  EXPECT_DOUBLE_EQ(s.p999, 100);
  std::vector<double> empty;
  EXPECT_DOUBLE_EQ(latency_stats(empty).max, 0);
}

TEST(PerfFormat, NcclTestsRows) {
  std::string h = collective_header(Placement::kBoth);
  EXPECT_NE(h.find("out-of-place"), std::string::npos);
  EXPECT_NE(h.find("in-place"), std::string::npos);
  EXPECT_NE(h.find("redop     time   algbw   busbw  #wrong     time"), std::string::npos) << h;
  CollectiveResult good{12.5, 1.0, 1.0, 0, true}, unchecked{12345.6, 2.0, 2.0, 0, false};
  std::vector<CollectiveResult> groups = {good, unchecked};
  std::string row = collective_row(1024, 256, DataType::kFloat32, ReduceOp::kSum, groups);
  EXPECT_EQ(row, "        1024           256     float     sum    12.50    1.00    1.00       0    12346    2.00"
                 "    2.00     N/A\n");
  // The other collectives add nccl-tests' root column; redop none, root -1 where they have none.
  std::string hr = collective_header(Placement::kBoth, true);
  EXPECT_NE(hr.find("redop    root     time   algbw   busbw  #wrong     time"), std::string::npos) << hr;
  EXPECT_EQ(collective_header(Placement::kBoth, false), h);
  std::string rr = collective_row(1024, 128, DataType::kFloat32, "none", -1, groups);
  EXPECT_EQ(rr, "        1024           128     float    none      -1    12.50    1.00    1.00       0    12346    2.00"
                "    2.00     N/A\n");
  std::string r3 = collective_row(64, 16, DataType::kInt32, "sum", 3, std::span(groups).first(1));
  EXPECT_EQ(r3, "          64            16     int32     sum       3    12.50    1.00    1.00       0\n");
  EXPECT_EQ(collective_row(1024, 256, DataType::kFloat32, "sum", std::nullopt, groups), row);
  EXPECT_EQ(format_time_us(123.45), "  123.5");
  EXPECT_EQ(bw_row(8, 10, 1, 2, 3, -1, 0).find("memcpy"), std::string::npos);
  EXPECT_NE(bw_header(true, true).find("BW average[Gb/sec]"), std::string::npos);
  EXPECT_NE(bw_header(false, false).find("BW peak[MB/sec]"), std::string::npos);  // perftest's default unit
  EXPECT_NE(bw_header(false, true).find("ratio"), std::string::npos);
}

TEST(PerfFormat, StatsLinesSplitFlows) {
  std::string s = stats_lines("rank 0 (dpdk)", {{"rx_packets", 5}, {"tx_ring_full", 0}, {"peer.1.rtt_samples", 7},
                                                {"peer.1.cc_rate_kbps", 0}, {"peer.2.rtt_samples", 3},
                                                {"peer.1.last_rtt_ns", 900}, {"peer.bad", 1}});
  EXPECT_EQ(s,
            "# stats rank 0 (dpdk): rx_packets=5\n"
            "# stats rank 0 (dpdk) flow to rank 1: rtt_samples=7 last_rtt_ns=900\n"
            "# stats rank 0 (dpdk) flow to rank 2: rtt_samples=3\n");
  EXPECT_EQ(stats_lines("rank 1 (shm)", {}), "# stats rank 1 (shm):\n");
}

TEST(PerfFormat, Json) {
  std::string j = render_json({{"mode", std::string("send_bw")}}, {},
                              {{{"bytes", int64_t{8}}, {"bw", 1.5}, {"s", std::string("a\"b")}}});
  EXPECT_EQ(j, "{\"mode\": \"send_bw\", \"rows\": [\n  {\"bytes\": 8, \"bw\": 1.5, \"s\": \"a\\\"b\"}\n]}\n");
  std::string e = render_json({{"mode", std::string("write_bw")}}, {{"backend", std::string("shm")}, {"ranks", int64_t{2}}},
                              {});
  EXPECT_EQ(e, "{\"mode\": \"write_bw\", \"environment\": {\"backend\": \"shm\", \"ranks\": 2},\n \"rows\": []}\n");
}

// Reduces every rank's pattern with the library kernels, as a ring would, and checks it.
int wrong_after_local_reduce(DataType type, ReduceOp op, int nranks, size_t count) {
  size_t bytes = count * dtype_size(type);
  std::vector<unsigned char> acc(bytes), in(bytes);
  CheckPattern(type, op, 0, nranks).fill_input(acc.data(), count);
  for (int r = 1; r < nranks; ++r) {
    CheckPattern(type, op, r, nranks).fill_input(in.data(), count);
    detail::reduce(acc.data(), acc.data(), in.data(), count, type, op);
  }
  if (op == ReduceOp::kAvg) detail::scale_avg(acc.data(), count, type, nranks);
  return static_cast<int>(CheckPattern(type, op, 0, nranks).count_wrong(acc.data(), count));
}

TEST(PerfCheck, PatternReducesExactlyForEveryTypeAndOp) {
  for (DataType t : {DataType::kFloat32, DataType::kFloat64, DataType::kInt32, DataType::kInt64, DataType::kUint8})
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg})
      for (int n : {1, 2, 3, 7, 64})
        EXPECT_EQ(wrong_after_local_reduce(t, op, n, 1000), 0)
            << dtype_name(t) << " " << reduce_op_name(op) << " ranks " << n;
}

TEST(PerfCheck, CountsCorruptedElements) {
  std::vector<float> buf(200);
  CheckPattern p(DataType::kFloat32, ReduceOp::kSum, 0, 1);
  p.fill_input(buf.data(), buf.size());
  EXPECT_EQ(p.count_wrong(buf.data(), buf.size()), 0u);
  buf[3] += 1.0f;
  buf[150] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(p.count_wrong(buf.data(), buf.size()), 2u);
  // Ranks differ, and the expected value is the sum over them.
  EXPECT_NE(CheckPattern::input_value(DataType::kInt32, ReduceOp::kSum, 0, 0),
            CheckPattern::input_value(DataType::kInt32, ReduceOp::kSum, 1, 0));
  CheckPattern two(DataType::kInt32, ReduceOp::kSum, 0, 2);
  EXPECT_DOUBLE_EQ(two.expected_at(0), double(CheckPattern::input_value(DataType::kInt32, ReduceOp::kSum, 0, 0) +
                                              CheckPattern::input_value(DataType::kInt32, ReduceOp::kSum, 1, 0)));
}

TEST(PerfCheck, OffsetsAndSourceRanks) {
  // count_wrong with an offset compares against the reduction further along the pattern.
  CheckPattern p(DataType::kInt64, ReduceOp::kSum, 1, 3);
  std::vector<int64_t> all(200);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(p.expected_at(i));
  EXPECT_EQ(p.count_wrong(all.data() + 80, 120, 80), 0u);
  EXPECT_GT(p.count_wrong(all.data() + 80, 120, 0), 0u) << "offset 80 is not a period (55) apart";
  // count_wrong_input compares against another rank's input.
  std::vector<int64_t> two(130);
  CheckPattern(DataType::kInt64, ReduceOp::kSum, 2, 3).fill_input(two.data(), two.size());
  EXPECT_EQ(p.count_wrong_input(2, two.data(), two.size()), 0u);
  EXPECT_EQ(p.count_wrong_input(2, two.data() + 60, 70, 60), 0u);
  EXPECT_GT(p.count_wrong_input(0, two.data(), two.size()), 0u);
  two[129] += 1;
  EXPECT_EQ(p.count_wrong_input(2, two.data(), two.size()), 1u);
  // Poisoned floats are NaN and never match.
  std::vector<float> f(64);
  poison(f.data(), f.size(), DataType::kFloat32);
  EXPECT_EQ(CheckPattern(DataType::kFloat32, ReduceOp::kSum, 0, 2).count_wrong(f.data(), f.size()), f.size());
}

// Adds one to element `i` of a buffer of `type`.
void bump(void* buf, size_t i, DataType type) {
  switch (type) {
    case DataType::kFloat32: static_cast<float*>(buf)[i] += 1.0f; break;
    case DataType::kFloat64: static_cast<double*>(buf)[i] += 1.0; break;
    case DataType::kInt32: static_cast<int32_t*>(buf)[i] += 1; break;
    case DataType::kInt64: static_cast<int64_t*>(buf)[i] += 1; break;
    case DataType::kUint8: {
      auto* p = static_cast<uint8_t*>(buf);
      p[i] = static_cast<uint8_t>(p[i] + 1);
      break;
    }
    default: FAIL() << "no bump for " << dtype_name(type);
  }
}

using Bytes = std::vector<unsigned char>;

// What each rank's output of `mode` holds when every rank sent the check
// pattern, computed here with the library's reduction kernels and plain copies.
std::vector<Bytes> emulate(Mode mode, DataType type, ReduceOp op, int n, size_t count, int root) {
  size_t ts = dtype_size(type), block = count * ts;
  std::vector<Bytes> in(static_cast<size_t>(n)), out(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    in[r].resize(collective_input_elems(mode, count, n, r, root) * ts);
    CheckPattern(type, op, r, n).fill_input(in[r].data(), in[r].size() / ts);
    out[r].resize(collective_output_elems(mode, count, n, r, root) * ts);
  }
  auto reduce_block = [&](size_t offset_elems, void* dst) {  // op over ranks of elements offset..offset+count
    std::memcpy(dst, in[0].data() + offset_elems * ts, block);
    for (int k = 1; k < n; ++k) detail::reduce(dst, dst, in[k].data() + offset_elems * ts, count, type, op);
    if (op == ReduceOp::kAvg) detail::scale_avg(dst, count, type, n);
  };
  for (int r = 0; r < n; ++r) {
    auto me = static_cast<size_t>(r);
    switch (mode) {
      case Mode::kAllreduce: reduce_block(0, out[r].data()); break;
      case Mode::kReduce: if (r == root) reduce_block(0, out[r].data()); break;
      case Mode::kReduceScatter: reduce_block(me * count, out[r].data()); break;
      case Mode::kBroadcast: if (block > 0) std::memcpy(out[r].data(), in[root].data(), block); break;
      case Mode::kAllgather:
        for (int j = 0; j < n; ++j)
          if (block > 0) std::memcpy(out[r].data() + static_cast<size_t>(j) * block, in[j].data(), block);
        break;
      case Mode::kAlltoall:  // block j of rank i's input goes to block i of rank j's output
        for (int j = 0; j < n; ++j)
          if (block > 0) std::memcpy(out[r].data() + static_cast<size_t>(j) * block, in[j].data() + me * block, block);
        break;
      case Mode::kSendrecv:  // from the previous rank
        if (block > 0) std::memcpy(out[r].data(), in[static_cast<size_t>((r + n - 1) % n)].data(), block);
        break;
      default: break;
    }
  }
  return out;
}

// Every collective's expected output, for any rank count and root, and a
// deliberately corrupted element of any rank counted once (as CountsCorruptedElements
// does for the allreduce pattern).
TEST(PerfCheck, CollectiveOutputsAndCorruptedResults) {
  const DataType types[] = {DataType::kFloat32, DataType::kFloat64, DataType::kInt32, DataType::kInt64,
                            DataType::kUint8};
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg};
  for (Mode mode : kAllCollectives)
    for (DataType type : types)
      for (ReduceOp op : ops) {
        if (!mode_reduces(mode) && op != ReduceOp::kSum) continue;
        for (int n : {1, 2, 3, 4})
          for (int root = 0; root < (mode_has_root(mode) ? n : 1); ++root) {
            size_t count = 70;  // more than one pattern period per block
            SCOPED_TRACE(std::string(mode_name(mode)) + " " + std::string(dtype_name(type)) + " " +
                         std::string(reduce_op_name(op)) + " ranks " + std::to_string(n) + " root " +
                         std::to_string(root));
            auto out = emulate(mode, type, op, n, count, root);
            for (int r = 0; r < n; ++r)
              EXPECT_EQ(count_wrong_output(mode, CheckPattern(type, op, r, n), out[r].data(), count, root), 0u)
                  << "rank " << r;
            int victim = mode == Mode::kReduce ? root : n - 1;
            size_t elems = collective_output_elems(mode, count, n, victim, root);
            ASSERT_GT(elems, 0u);
            bump(out[victim].data(), elems - 1, type);
            bump(out[victim].data(), elems / 2, type);
            EXPECT_EQ(count_wrong_output(mode, CheckPattern(type, op, victim, n), out[victim].data(), count, root), 2u);
          }
      }
}

TEST(PerfCheck, CollectiveBufferLayout) {
  // reduce_scatter and alltoall read size() blocks; allgather and alltoall write size() blocks.
  EXPECT_EQ(collective_input_elems(Mode::kReduceScatter, 10, 4, 0, 0), 40u);
  EXPECT_EQ(collective_output_elems(Mode::kReduceScatter, 10, 4, 0, 0), 10u);
  EXPECT_EQ(collective_input_elems(Mode::kAllgather, 10, 4, 1, 0), 10u);
  EXPECT_EQ(collective_output_elems(Mode::kAllgather, 10, 4, 1, 0), 40u);
  EXPECT_EQ(collective_input_elems(Mode::kAlltoall, 10, 4, 2, 0), 40u);
  EXPECT_EQ(collective_output_elems(Mode::kAlltoall, 10, 4, 2, 0), 40u);
  // Only broadcast's root has input; only reduce's root has output.
  EXPECT_EQ(collective_input_elems(Mode::kBroadcast, 10, 4, 2, 2), 10u);
  EXPECT_EQ(collective_input_elems(Mode::kBroadcast, 10, 4, 1, 2), 0u);
  EXPECT_EQ(collective_output_elems(Mode::kBroadcast, 10, 4, 1, 2), 10u);
  EXPECT_EQ(collective_output_elems(Mode::kReduce, 10, 4, 1, 2), 0u);
  EXPECT_EQ(collective_output_elems(Mode::kReduce, 10, 4, 2, 2), 10u);
  EXPECT_EQ(collective_input_elems(Mode::kReduce, 10, 4, 1, 2), 10u);
  // A rank that gets nothing has nothing wrong.
  CheckPattern off_root(DataType::kInt32, ReduceOp::kSum, 1, 4);
  EXPECT_EQ(count_wrong_output(Mode::kReduce, off_root, nullptr, 10, 2), 0u);
}

}  // namespace
}  // namespace grex::perf
