// SPDX-License-Identifier: Apache-2.0
/// @file cuda.h
/// CUDA device memory for programs that use grex's stream-ordered calls
/// without linking CUDA themselves (grex-perf --use_cuda, tests): grex loads
/// the CUDA driver at run time. Programs that use CUDA already keep their own
/// allocations; these are a convenience, not a requirement.
#pragma once

#include <grex/communicator.h>
#include <grex/result.h>

#include <cstddef>
#include <string>

namespace grex::cuda {

/// "NAME (CUDA driver X.Y)" of GPU `device`; kNotFound without CUDA.
Result<std::string> describe(int device = 0);
/// `bytes` of device memory on GPU `device`, whose primary context becomes
/// current on this thread. kNotFound without CUDA, kNoMemory when it is full.
Result<void*> alloc(size_t bytes, int device = 0);
/// Frees memory from alloc() (nullptr is accepted).
Result<void> free(void* p);
/// Copies `bytes` between any two of host and device memory, and returns
/// once the copy is done (after the work already on the legacy default stream).
Result<void> copy(void* dst, const void* src, size_t bytes);
/// Returns once every call queued on `stream` finished.
Result<void> synchronize(GpuStream stream);

}  // namespace grex::cuda
