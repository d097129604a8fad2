// SPDX-License-Identifier: Apache-2.0
// How the stream-ordered calls cut their work (gpu_calls.cc, gpu_ipc.cc):
// pure arithmetic, so unit tests hold it to its promises on hosts without a
// GPU (tests/unit/gpu_plan_test.cc).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>

namespace grex::detail {

/// A staged piece of a `bytes` vector: at least `chunk`, so at most 32
/// pieces, rounded up to a multiple of 4 KiB (so of every element size).
inline size_t staged_piece_bytes(size_t bytes, uint64_t chunk) noexcept {
  const uint64_t c = std::max<uint64_t>(chunk, (bytes + 31) / 32);
  return static_cast<size_t>((c + 4095) & ~uint64_t{4095});
}

/// Elements of one GPU-to-GPU piece of a vector: as many as the scratch
/// holds, a multiple of 16 bytes (es: element size, 1 to 8).
inline size_t ipc_piece_elems(size_t scratch_bytes, size_t es) noexcept {
  const size_t align = 16 / es;
  return scratch_bytes / es / align * align;
}

/// Rank r's shard [lo, hi) (elements) of a piece of `cnt` elements over n
/// ranks: every shard starts at a multiple of 16 bytes; the last ones may be
/// short or empty; together they cover [0, cnt) once.
inline std::pair<size_t, size_t> ipc_shard(size_t cnt, size_t n, size_t es, size_t r) noexcept {
  const size_t align = 16 / es;
  const size_t per = ((cnt + n - 1) / n + align - 1) / align * align;
  return {std::min(r * per, cnt), std::min((r + 1) * per, cnt)};
}

/// reduce_scatter: elements per piece of each rank's block when the n
/// blocks' pieces sit side by side in the scratch (a multiple of 16 bytes).
inline size_t ipc_block_piece_elems(size_t scratch_bytes, size_t n, size_t es) noexcept {
  const size_t align = 16 / es;
  return std::max<size_t>(scratch_bytes / n / es / align * align, align);
}

/// alltoall: bytes per piece of each block, n of them side by side.
inline size_t ipc_block_piece_bytes(size_t scratch_bytes, size_t n) noexcept {
  return std::max<size_t>(scratch_bytes / n / 16 * 16, 16);
}

}  // namespace grex::detail
