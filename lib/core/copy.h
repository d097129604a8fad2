// SPDX-License-Identifier: Apache-2.0
// Copies for bytes that the copying core will not read again soon.
#pragma once

#include <cstddef>

namespace grex::detail {

/// memcpy with non-temporal (streaming) stores for the aligned middle: the
/// destination lines are written without first being read for ownership and
/// do not displace the cache. For large copies into memory someone else reads
/// next (a peer's buffer, a result the caller consumes later); about a third
/// less memory traffic than memcpy's ordinary stores. Ends with a store fence.
void copy_streaming(void* dst, const void* src, size_t n) noexcept;
/// copy_streaming() without its fence, for many pieces in a row (a fence
/// after each drains the stores before the next piece's loads can start):
/// streaming_fence() once after the last, before anything that publishes them.
void copy_streaming_unfenced(void* dst, const void* src, size_t n) noexcept;
void streaming_fence() noexcept;

/// One copy of a copy_together() call.
struct CopyJob {
  void* dst;
  const void* src;
  size_t bytes;
  bool streaming;  ///< streaming stores for dst (as copy_streaming), or ordinary ones
};
inline constexpr size_t kMaxCopyJobs = 3;

/// Up to kMaxCopyJobs independent copies in one pass, a cache line of each
/// in turn, then what is left of each. Where the sources are slow to load
/// (one from memory, another from a peer core's cache), the misses of all
/// of them are in flight at once, and the pass beats the copies one after
/// the other. Ends with a store fence when any job streams.
void copy_together(const CopyJob* jobs, size_t count) noexcept;

/// Copies at or above this size are worth streaming stores; below it the
/// destination is likely to be read from cache soon and memcpy is better.
inline constexpr size_t kStreamingCopyMinBytes = 64 * 1024;

/// A collective's output from this size on is unlikely to be in cache when
/// the caller reads it, so the steps that write it last (and read it no
/// more) use streaming stores: the direct and staged allreduces, the top-k
/// sum. (glibc's memcpy switches at three
/// quarters of this core's share of the last-level cache; the reduction
/// kernels follow that, reduce_streaming_min_bytes().)
inline constexpr size_t kStreamOutputMinBytes = size_t{8} << 20;

}  // namespace grex::detail
