// SPDX-License-Identifier: Apache-2.0
// grex-perf's pure parts: the argument parser, size lists, busbw factors,
// latency statistics, table rows and the correctness-check pattern.
#include <gtest/gtest.h>

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
}

TEST(PerfArgs, DefaultsInlineValuesAndLongNames) {
  auto d = parse({"allreduce"});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->effective_iters(), 20);
  EXPECT_EQ(d->effective_warmup(), 5);
  EXPECT_EQ(d->types, std::vector<DataType>{DataType::kFloat32});
  EXPECT_EQ(d->ops, std::vector<ReduceOp>{ReduceOp::kSum});

  auto a = parse({"allreduce", "-b8", "--maxbytes=64K", "--op", "avg", "-c0", "--inplace", "1", "-d", "all",
                  "--alloc", "--backend", "shm", "--json", "out.json"});
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
  EXPECT_EQ(parse({"allreduce", "--inplace", "0"})->placement, Placement::kOutOfPlace);
  EXPECT_EQ(parse({"allreduce", "-o", "all"})->ops.size(), 5u);
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
      {{"alltoall"}, "unknown mode 'alltoall'"},
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
      {{"send_bw", "stray"}, "unknown option 'stray'"},
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
  EXPECT_DOUBLE_EQ(busbw_factor(Mode::kSendBw, 2), 1.0);
  EXPECT_DOUBLE_EQ(algbw_gbs(1'000'000, 100.0), 10.0);  // 1 MB in 100 us = 10 GB/s
  EXPECT_DOUBLE_EQ(algbw_gbs(8, 0.0), 0.0);
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
  EXPECT_EQ(format_time_us(123.45), "  123.5");
  EXPECT_EQ(bw_row(8, 10, 1, 2, 3, -1, 0).find("memcpy"), std::string::npos);
  EXPECT_NE(bw_header(true, true).find("BW average[Gb/sec]"), std::string::npos);
  EXPECT_NE(bw_header(false, true).find("ratio"), std::string::npos);
}

TEST(PerfFormat, Json) {
  std::string j = render_json({{"mode", std::string("send_bw")}}, {{{"bytes", int64_t{8}}, {"bw", 1.5},
                                                                    {"s", std::string("a\"b")}}});
  EXPECT_EQ(j, "{\"mode\": \"send_bw\", \"rows\": [\n  {\"bytes\": 8, \"bw\": 1.5, \"s\": \"a\\\"b\"}\n]}\n");
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

}  // namespace
}  // namespace grex::perf
