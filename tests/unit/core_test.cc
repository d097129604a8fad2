// SPDX-License-Identifier: Apache-2.0
// Config/env parsing, the replaceable clock and Deadline, log level parsing, the copies of core/copy.h.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/copy.h"
#include "core/config.h"
#include "core/log.h"

namespace grex {
namespace {

TEST(Config, ParsesIntegersStrictly) {
  EXPECT_EQ(*config::parse_int("42", "X"), 42);
  EXPECT_EQ(*config::parse_int("-7", "X"), -7);
  for (const char* bad : {"", "4x", "abc", "99999999999999999999", " 1"}) {
    auto r = config::parse_int(bad, "GREX_X");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().code(), Errc::kInvalidArgument);
    EXPECT_NE(r.error().message().find("GREX_X"), std::string::npos);
  }
}

TEST(Config, ParsesSizesWithSuffixes) {
  EXPECT_EQ(*config::parse_size("4096", "S"), 4096u);
  EXPECT_EQ(*config::parse_size("64K", "S"), 65536u);
  EXPECT_EQ(*config::parse_size("1M", "S"), 1u << 20);
  EXPECT_EQ(*config::parse_size("2GiB", "S"), 2ull << 30);
  EXPECT_EQ(*config::parse_size("3mb", "S"), 3u << 20);
  EXPECT_FALSE(config::parse_size("1Q", "S").ok());
  EXPECT_FALSE(config::parse_size("K", "S").ok());
  EXPECT_FALSE(config::parse_size("99999999999G", "S").ok());
}

TEST(Config, ParsesBooleans) {
  for (const char* t : {"1", "true", "YES", "on"}) EXPECT_TRUE(*config::parse_bool(t, "B")) << t;
  for (const char* f : {"0", "false", "No", "off"}) EXPECT_FALSE(*config::parse_bool(f, "B")) << f;
  EXPECT_FALSE(config::parse_bool("maybe", "B").ok());
}

TEST(Config, EnvOverridesOnlyWhenSetAndChecksRange) {
  ::unsetenv("GREX_TEST_INT");
  int64_t v = 5;
  ASSERT_TRUE(config::env_int("GREX_TEST_INT", &v, 0, 10).ok());
  EXPECT_EQ(v, 5);
  ::setenv("GREX_TEST_INT", "9", 1);
  ASSERT_TRUE(config::env_int("GREX_TEST_INT", &v, 0, 10).ok());
  EXPECT_EQ(v, 9);
  ::setenv("GREX_TEST_INT", "11", 1);
  auto r = config::env_int("GREX_TEST_INT", &v, 0, 10);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("GREX_TEST_INT=11 is outside [0, 10]"), std::string::npos) << r.error().message();
  EXPECT_EQ(v, 9);  // unchanged on error
  ::setenv("GREX_TEST_INT", "ten", 1);
  EXPECT_FALSE(config::env_int("GREX_TEST_INT", &v, 0, 10).ok());
  ::unsetenv("GREX_TEST_INT");

  uint64_t s = 1;
  ::setenv("GREX_TEST_SIZE", "2M", 1);
  ASSERT_TRUE(config::env_size("GREX_TEST_SIZE", &s, 0, 1ull << 30).ok());
  EXPECT_EQ(s, 2u << 20);
  ::unsetenv("GREX_TEST_SIZE");
}

TEST(Clock, ManualClockDrivesDeadlines) {
  ManualClock fake(1'000'000'000);
  set_clock_for_testing(&fake);
  Deadline d = Deadline::after_ms(100);
  EXPECT_FALSE(d.expired());
  EXPECT_EQ(d.remaining_ms(), 100);
  fake.advance_ns(99'000'000);
  EXPECT_FALSE(d.expired());
  EXPECT_EQ(d.remaining_ms(), 1);
  fake.advance_ns(1'000'000);
  EXPECT_TRUE(d.expired());
  EXPECT_EQ(d.remaining_ms(), 0);
  EXPECT_FALSE(Deadline::never().expired());
  EXPECT_FALSE(Deadline::after_ms(-1).expired());
  EXPECT_EQ(now_ns(), 1'100'000'000u);
  set_clock_for_testing(nullptr);
  uint64_t a = now_ns();
  uint64_t b = now_ns();
  EXPECT_LE(a, b);
  EXPECT_GT(a, 0u);
}

// SpinDeadline starts counting at its first check, not at construction.
TEST(Clock, SpinDeadlineCountsFromItsFirstCheck) {
  ManualClock fake(1'000'000'000);
  set_clock_for_testing(&fake);
  SpinDeadline d(100);
  fake.advance_ns(500'000'000);  // before the first check: not counted
  EXPECT_FALSE(d.expired());     // the first check starts the clock
  fake.advance_ns(99'000'000);
  EXPECT_FALSE(d.expired());
  fake.advance_ns(1'000'000);
  EXPECT_TRUE(d.expired());
  SpinDeadline never(-1);
  EXPECT_FALSE(never.expired());
  fake.advance_ns(UINT64_C(1) << 62);
  EXPECT_FALSE(never.expired());
  set_clock_for_testing(nullptr);
}

TEST(Log, ParsesLevelsByNameAndNumber) {
  log::Level l;
  ASSERT_TRUE(log::parse_level("debug", &l));
  EXPECT_EQ(l, log::Level::kDebug);
  ASSERT_TRUE(log::parse_level("WARN", &l));
  EXPECT_EQ(l, log::Level::kWarn);
  ASSERT_TRUE(log::parse_level("4", &l));
  EXPECT_EQ(l, log::Level::kTrace);
  EXPECT_FALSE(log::parse_level("loud", &l));
  log::set_level(log::Level::kError);
  EXPECT_FALSE(log::enabled(log::Level::kWarn));
  EXPECT_TRUE(log::enabled(log::Level::kError));
  log::set_level(log::Level::kWarn);
}

std::string host() {
  char h[64] = {};
  gethostname(h, sizeof h - 1);
  if (char* dot = std::strchr(h, '.')) *dot = '\0';
  return h;
}

TEST(Log, LinesCarryRankHostAndSubsystem) {
  log::set_level(log::Level::kInfo);
  log::set_rank(3);
  testing::internal::CaptureStderr();
  GREX_INFO("shm", "hello %d", 7);
  GREX_DEBUG("shm", "hidden");
  std::string out = testing::internal::GetCapturedStderr();
  EXPECT_EQ(out, "[rank 3 host " + host() + " shm] INFO hello 7\n");
  log::set_rank(-1);
  log::set_level(log::Level::kWarn);
}

// GREX_LOG_SUBSYS as NCCL_DEBUG_SUBSYS: a list of groups, ^X leaves one out;
// warnings and errors print whatever the list.
TEST(Log, SubsystemFilterSelectsExactlyTheLinesAskedFor) {
  unsigned m = 0;
  const char* bad = nullptr;
  ASSERT_TRUE(log::parse_subsys("INIT,NET", &m, &bad));
  EXPECT_EQ(m, log::kInit | log::kNet);
  ASSERT_TRUE(log::parse_subsys("^NET", &m, &bad));
  EXPECT_EQ(m, log::kAll & ~log::kNet);
  ASSERT_TRUE(log::parse_subsys("ALL,^shm,^boot", &m, &bad));
  EXPECT_EQ(m, log::kAll & ~(log::kShm | log::kBoot));
  EXPECT_FALSE(log::parse_subsys("INIT,WIRE", &m, &bad));
  EXPECT_STREQ(bad, "WIRE");
  EXPECT_EQ(log::group_of("dpdk"), log::kNet);
  EXPECT_EQ(log::group_of("verbs"), log::kNet);
  EXPECT_EQ(log::group_of("comm"), log::kColl);
  EXPECT_EQ(log::group_of("bootstrap"), log::kBoot);
  EXPECT_EQ(log::group_of("grex-perf"), log::kOther);

  log::set_level(log::Level::kTrace);
  log::set_rank(1);
  log::set_subsys(log::kInit | log::kNet);
  testing::internal::CaptureStderr();
  GREX_INFO("init", "a");
  GREX_DEBUG("dpdk", "b");
  GREX_TRACE("verbs", "c");
  GREX_INFO("shm", "d");       // not asked for
  GREX_DEBUG("comm", "e");     // not asked for
  GREX_INFO("bootstrap", "f"); // not asked for
  GREX_WARN("shm", "g");       // a warning prints anyway
  std::string out = testing::internal::GetCapturedStderr();
  const std::string h = host();
  EXPECT_EQ(out, "[rank 1 host " + h + " init] INFO a\n[rank 1 host " + h + " dpdk] DEBUG b\n[rank 1 host " + h +
                     " verbs] TRACE c\n[rank 1 host " + h + " shm] WARN g\n");
  log::set_subsys(log::kAll);
  log::set_rank(-1);
  log::set_level(log::Level::kWarn);
}

// The first communicator names the process's rank; a sub-group made later (a
// torch group, a two-rank p2p pair) must not rename it.
TEST(Log, TheFirstRankSetStays) {
  log::set_level(log::Level::kInfo);
  log::set_rank(-1);
  log::set_rank_if_unset(5);
  log::set_rank_if_unset(0);
  testing::internal::CaptureStderr();
  GREX_INFO("comm", "x");
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "[rank 5 host " + host() + " comm] INFO x\n");
  log::set_rank(-1);
  log::set_level(log::Level::kWarn);
}

}  // namespace
}  // namespace grex

namespace {
// A byte pattern that differs for every offset of every buffer.
std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 8));
  return v;
}
}  // namespace

TEST(Copy, StreamingCopiesEveryByteAtAnyAlignment) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{15}, size_t{63}, size_t{64}, size_t{65}, size_t{1000}, size_t{70000}})
    for (size_t shift : {0, 1, 16, 33}) {
      auto src = pattern(n + 64, 3);
      std::vector<uint8_t> dst(n + 128, 0xee);
      grex::detail::copy_streaming(dst.data() + shift, src.data() + 5, n);
      for (size_t i = 0; i < dst.size(); ++i) {
        const bool inside = i >= shift && i < shift + n;
        ASSERT_EQ(dst[i], inside ? src[i - shift + 5] : 0xee) << "n " << n << " shift " << shift << " at " << i;
      }
    }
}

// Every job's bytes land, and nothing around them is touched, whatever the
// lengths (equal, unequal, zero, below a line), the alignments and which
// jobs stream, with up to one job beyond the interleaved ones.
TEST(Copy, TogetherCopiesEachJobExactly) {
  using grex::detail::CopyJob;
  const size_t lengths[][4] = {{4096, 4096, 4096, 0}, {70000, 1000, 65, 0}, {0, 300, 0, 0}, {63, 64, 65, 0},
                               {262144, 262144, 131072, 0}, {5000, 0, 7000, 9000}, {129, 4000, 4000, 4000}};
  int round = 0;
  for (const auto& len : lengths)
    for (unsigned streaming = 0; streaming < 16; streaming += 5) {
      ++round;
      std::vector<std::vector<uint8_t>> src, dst;
      CopyJob jobs[4];
      size_t count = 0;
      for (size_t j = 0; j < 4; ++j) {
        const size_t shift = (j * 17 + static_cast<size_t>(round)) % 64;  // dst offset
        src.push_back(pattern(len[j] + 64, static_cast<uint8_t>(round * 4 + static_cast<int>(j))));
        dst.emplace_back(len[j] + 128, 0xee);
        jobs[j] = {dst[j].data() + shift, src[j].data() + j, len[j], ((streaming >> j) & 1) != 0};
        if (len[j] > 0 || j < 3) count = j + 1;
      }
      grex::detail::copy_together(jobs, count);
      for (size_t j = 0; j < count; ++j) {
        const auto* d = static_cast<const uint8_t*>(jobs[j].dst);
        const size_t shift = static_cast<size_t>(d - dst[j].data());
        for (size_t i = 0; i < dst[j].size(); ++i) {
          const bool inside = i >= shift && i < shift + len[j];
          ASSERT_EQ(dst[j][i], inside ? src[j][i - shift + j] : 0xee)
              << "round " << round << " job " << j << " of " << count << " (" << len[j] << " B, streaming "
              << jobs[j].streaming << ") at " << i;
        }
      }
    }
}
