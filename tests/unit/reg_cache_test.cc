// SPDX-License-Identifier: Apache-2.0
// The registration interval cache: covering lookups, reference counts, nesting.
#include <gtest/gtest.h>

#include "mem/reg_cache.h"

namespace grex::mem {
namespace {

TEST(IntervalCache, FindsCoveringRangesOnly) {
  IntervalCache<int> c;
  c.insert(1000, 100, 1);  // [1000, 1100)
  c.insert(5000, 10, 2);
  EXPECT_EQ(c.lookup(1000, 100)->value, 1);
  EXPECT_EQ(c.lookup(1050, 50)->value, 1);
  EXPECT_EQ(c.lookup(1050, 51), nullptr);  // runs past the end
  EXPECT_EQ(c.lookup(999, 2), nullptr);    // starts before
  EXPECT_EQ(c.lookup(5005, 5)->value, 2);
  EXPECT_EQ(c.lookup(3000, 1), nullptr);
}

TEST(IntervalCache, LargeEarlierRangeStillCoversAfterSmallerOnes) {
  IntervalCache<int> c;
  c.insert(0, 1 << 20, 1);    // big
  c.insert(4096, 16, 2);      // small inside it
  c.insert(8192, 16, 3);
  EXPECT_EQ(c.lookup(100000, 10)->value, 1);  // found by walking down past 2 and 3
  EXPECT_EQ(c.lookup(4100, 4)->value, 2);
}

TEST(IntervalCache, ReferenceCountsGateErasure) {
  IntervalCache<int> c;
  auto* e = c.insert(10, 10, 7);
  ++e->refs;
  bool erased = true;
  ASSERT_TRUE(c.erase_if_last_ref([](int v) { return v == 7; }, &erased));
  EXPECT_FALSE(erased);
  EXPECT_EQ(c.size(), 1u);
  ASSERT_TRUE(c.erase_if_last_ref([](int v) { return v == 7; }, &erased));
  EXPECT_TRUE(erased);
  EXPECT_EQ(c.size(), 0u);
  EXPECT_FALSE(c.erase_if_last_ref([](int v) { return v == 7; }, &erased));
}

}  // namespace
}  // namespace grex::mem
