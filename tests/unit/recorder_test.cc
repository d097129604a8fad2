// SPDX-License-Identifier: Apache-2.0
// The flight recorder's ring (issue 30): it wraps keeping the newest entries,
// each whole, and readers on 7 threads parse a consistent JSON ring while a
// writer records 200000 calls.
#include <gtest/gtest.h>

#include <atomic>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "collectives/recorder.h"

namespace grex::detail {
namespace {

TEST(Recorder, WrapsKeepingTheNewestWholeEntries) {
  Recorder rec(16, 3, "unit");
  for (uint64_t i = 0; i < 40; ++i) {
    rec.start("allreduce", i + 1, 100 + i, 0, 0, -1, -1, i * 10);
    rec.end(i % 7 != 3, i * 10 + 8);
  }
  rec.start("send", 0, 5, -1, -1, -1, 2, 0);  // still running
  auto j = nlohmann::json::parse(rec.json());
  EXPECT_EQ(j["rank"], 3);
  EXPECT_EQ(j["comm"], "unit");
  const auto& e = j["entries"];
  ASSERT_EQ(e.size(), 16u);
  for (size_t k = 0; k < 15; ++k) {
    const uint64_t i = 25 + k;  // entries 0..40 written; the last 16 kept
    EXPECT_EQ(e[k]["seq"], i);
    EXPECT_EQ(e[k]["op"], "allreduce");
    EXPECT_EQ(e[k]["count"], 100 + i);
    EXPECT_EQ(e[k]["dtype"], "f32");
    EXPECT_EQ(e[k]["redop"], "sum");
    EXPECT_EQ(e[k]["bytes"], 8);
    EXPECT_EQ(e[k]["state"], i % 7 == 3 ? "failed" : "done");
    EXPECT_TRUE(e[k]["duration_ns"].is_number());
  }
  EXPECT_EQ(e[15]["op"], "send");
  EXPECT_EQ(e[15]["peer"], 2);
  EXPECT_EQ(e[15]["state"], "running");
  EXPECT_TRUE(e[15]["duration_ns"].is_null());
}

TEST(Recorder, ReadersSeeAConsistentRingWhileItIsWritten) {
  Recorder rec(64, 0, "threads");
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> parsed{0}, bad{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 7; ++t)
    readers.emplace_back([&] {
      while (!stop.load()) {
        auto j = nlohmann::json::parse(rec.json(), nullptr, false);
        if (j.is_discarded()) {
          ++bad;
          continue;
        }
        const auto& e = j["entries"];
        for (size_t k = 0; k < e.size(); ++k) {
          // Each entry whole: its count and bytes were written with its seq.
          const uint64_t seq = e[k]["seq"];
          if (e[k]["count"] != seq * 3 || (e[k]["state"] != "running" && e[k]["bytes"] != 1)) ++bad;
          if (k > 0 && e[k - 1]["seq"].get<uint64_t>() >= seq) ++bad;
        }
        ++parsed;
      }
    });
  for (uint64_t i = 0; i < 200'000; ++i) {
    rec.start("allreduce", i, i * 3, 0, 0, -1, -1, 0);
    rec.end(true, 1);
  }
  stop = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(bad.load(), 0u);
  EXPECT_GT(parsed.load(), 0u);
}

}  // namespace
}  // namespace grex::detail
