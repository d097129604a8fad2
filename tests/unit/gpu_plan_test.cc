// SPDX-License-Identifier: Apache-2.0
// How the stream-ordered calls cut their work (collectives/gpu_plan.h), held
// to its promises without a GPU: pieces and shards cover every element once,
// start on 16-byte boundaries (the kernels' vector loads), and never outgrow
// the scratch or the 32-piece pipeline.
#include <gtest/gtest.h>

#include <vector>

#include "collectives/gpu_plan.h"

namespace grex::detail {
namespace {

constexpr size_t kSizes[] = {1, 2, 7, 8, 15, 16, 17, 1000, 4096, 1000003, 3000001};
constexpr size_t kElem[] = {1, 2, 4, 8};

TEST(GpuPlan, StagedPiecesCoverTheVectorInAtMost32) {
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{4096}, size_t{4} << 20, size_t{12} << 20, size_t{1} << 30,
                       (size_t{1} << 30) + 5})
    for (uint64_t chunk : {uint64_t{4096}, uint64_t{4} << 20, uint64_t{64} << 20}) {
      const size_t piece = staged_piece_bytes(bytes, chunk);
      EXPECT_EQ(piece % 4096, 0u) << bytes;
      EXPECT_GE(piece, chunk);
      EXPECT_LE((bytes + piece - 1) / piece, 32u) << bytes << " in pieces of " << piece;
    }
}

TEST(GpuPlan, ShardsCoverEachPieceOnceOn16ByteBoundaries) {
  for (size_t es : kElem)
    for (size_t cnt : kSizes)
      for (size_t n : {2, 3, 4, 7, 8}) {
        std::vector<int> seen(cnt, 0);
        size_t end = 0;
        for (size_t r = 0; r < n; ++r) {
          auto [lo, hi] = ipc_shard(cnt, n, es, r);
          ASSERT_LE(lo, hi);
          ASSERT_LE(hi, cnt);
          if (hi > lo) {
            EXPECT_EQ(lo, end) << "shards in rank order, back to back";
            EXPECT_EQ(lo * es % 16, 0u) << "es " << es << " cnt " << cnt << " n " << n << " r " << r;
          }
          for (size_t i = lo; i < hi; ++i) ++seen[i];
          end = std::max(end, hi);
        }
        for (size_t i = 0; i < cnt; ++i) ASSERT_EQ(seen[i], 1) << "element " << i << " es " << es << " n " << n;
      }
}

TEST(GpuPlan, PiecesFitTheScratch) {
  for (size_t scratch : {size_t{1} << 20, (size_t{1} << 20) + 4096, size_t{64} << 20})
    for (size_t es : kElem) {
      const size_t e = ipc_piece_elems(scratch, es);
      EXPECT_GT(e, 0u);
      EXPECT_LE(e * es, scratch);
      EXPECT_EQ(e * es % 16, 0u);
      for (size_t n : {2, 3, 4, 7, 8, 64}) {
        const size_t b = ipc_block_piece_elems(scratch, n, es);
        EXPECT_LE(n * b * es, scratch) << "reduce_scatter: n pieces side by side";
        EXPECT_EQ(b * es % 16, 0u);
        const size_t a = ipc_block_piece_bytes(scratch, n);
        EXPECT_LE(n * a, scratch) << "alltoall: n pieces side by side";
        EXPECT_EQ(a % 16, 0u);
      }
    }
}

}  // namespace
}  // namespace grex::detail
