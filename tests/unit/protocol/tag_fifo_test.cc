// SPDX-License-Identifier: Apache-2.0
// Ring<T> and TagFifo<T>, the queues under both drivers' matching: FIFO per
// tag, bounded pools, deletion that keeps every other tag findable, and a
// long random run checked against a plain model.
#include <gtest/gtest.h>

#include <deque>
#include <map>
#include <random>

#include "core/ring.h"
#include "transport/tag_fifo.h"

namespace grex {
namespace {

TEST(Ring, RoundsUpToAPowerOfTwoAndWrapsInOrder) {
  Ring<int> r(5);
  EXPECT_EQ(r.capacity(), 8u);
  for (int round = 0; round < 5; ++round) {
    for (int i = 0; i < 8; ++i) ASSERT_TRUE(r.push(round * 10 + i));
    EXPECT_TRUE(r.full());
    EXPECT_FALSE(r.push(99));  // full: refused, nothing changes
    EXPECT_EQ(r.back(), round * 10 + 7);
    for (int i = 0; i < 8; ++i) EXPECT_EQ(r[static_cast<size_t>(i)], round * 10 + i);
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(r.front(), round * 10 + i);
      r.pop();
    }
    EXPECT_TRUE(r.empty());
    ASSERT_TRUE(r.push(1));  // move the head off zero for the next round
    r.pop();
  }
}

TEST(TagFifo, FirstInFirstOutPerTagAcrossInterleavedTags) {
  TagFifo<int> q(16);
  for (int i = 0; i < 12; ++i) ASSERT_TRUE(q.push(static_cast<uint64_t>(i % 3), i));
  EXPECT_EQ(q.size(), 12u);
  for (uint64_t tag : {2u, 0u, 1u})
    for (int k = 0; k < 4; ++k) {
      ASSERT_NE(q.front(tag), nullptr);
      EXPECT_EQ(*q.front(tag), static_cast<int>(tag) + 3 * k);
      EXPECT_TRUE(q.pop(tag));
    }
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.front(0), nullptr);
  EXPECT_FALSE(q.pop(0));
}

TEST(TagFifo, AFullPoolRefusesAndRecoversAfterPops) {
  TagFifo<int> q(4);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(q.push(7, i));
  EXPECT_TRUE(q.full());
  EXPECT_FALSE(q.push(8, 100));
  EXPECT_EQ(q.front(8), nullptr);
  EXPECT_TRUE(q.pop(7));
  EXPECT_TRUE(q.push(8, 100));
  EXPECT_EQ(*q.front(8), 100);
  EXPECT_EQ(*q.front(7), 1);
}

TEST(TagFifo, FindIfWalksOneTagOldestFirst) {
  TagFifo<int> q(8);
  q.push(1, 10);
  q.push(2, 20);
  q.push(1, 11);
  q.push(1, 12);
  int* hit = q.find_if(1, [](int v) { return v > 10; });
  ASSERT_NE(hit, nullptr);
  EXPECT_EQ(*hit, 11);
  *hit = 111;  // entries can be changed in place
  q.pop(1);
  EXPECT_EQ(*q.front(1), 111);
  EXPECT_EQ(q.find_if(2, [](int v) { return v == 0; }), nullptr);
  EXPECT_EQ(q.find_if(3, [](int) { return true; }), nullptr);
}

TEST(TagFifo, DrainVisitsEverythingInPushOrder) {
  TagFifo<int> q(8);
  const uint64_t tags[] = {5, 9, 5, 1, 9, 5};
  for (int i = 0; i < 6; ++i) q.push(tags[i], i);
  q.pop(9);  // drops 1
  std::vector<std::pair<uint64_t, int>> seen;
  q.drain([&](uint64_t t, int v) { seen.emplace_back(t, v); });
  const std::vector<std::pair<uint64_t, int>> want = {{5, 0}, {5, 2}, {1, 3}, {9, 4}, {5, 5}};
  EXPECT_EQ(seen, want);
  EXPECT_TRUE(q.empty());
  for (int i = 0; i < 8; ++i) EXPECT_TRUE(q.push(42, i));  // the whole pool is free again
}

TEST(TagFifo, ClearFreesEveryEntry) {
  TagFifo<int> q(4);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(q.push(static_cast<uint64_t>(i), i));
  q.clear();
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.front(2), nullptr);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(q.push(9, i));
  EXPECT_EQ(*q.front(9), 0);
}

// Tags chosen to collide in the table (same low bits after the mix are not
// predictable, so use many) and queues emptied in random order: deletion must
// keep every other tag findable.
TEST(TagFifo, MatchesAModelOverALongRandomRun) {
  std::mt19937_64 rng(7);
  constexpr size_t kCap = 64;
  TagFifo<uint64_t> q(kCap);
  std::map<uint64_t, std::deque<uint64_t>> model;
  size_t n = 0;
  for (uint64_t step = 0; step < 200'000; ++step) {
    const uint64_t tag = (rng() % 40) * 0x10000;  // strided tags, as collectives use
    if (rng() % 2 == 0) {
      const bool ok = q.push(tag, step);
      ASSERT_EQ(ok, n < kCap);
      if (ok) model[tag].push_back(step), ++n;
    } else {
      auto it = model.find(tag);
      const bool has = it != model.end() && !it->second.empty();
      ASSERT_EQ(q.front(tag) != nullptr, has) << "tag " << tag << " step " << step;
      if (!has) continue;
      ASSERT_EQ(*q.front(tag), it->second.front());
      ASSERT_EQ(*q.back(tag), it->second.back());
      ASSERT_TRUE(q.pop(tag));
      it->second.pop_front();
      --n;
    }
    ASSERT_EQ(q.size(), n);
  }
}

}  // namespace
}  // namespace grex
