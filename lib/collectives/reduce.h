// SPDX-License-Identifier: Apache-2.0
// Element-wise reduction kernels used by the collectives.
#pragma once

#include <grex/communicator.h>

#include <cstddef>

namespace grex::detail {

/// dst[i] = a[i] op b[i] for count elements (dst may alias a or b).
/// kAvg reduces as kSum; call scale_avg() on the final result.
void reduce(void* dst, const void* a, const void* b, size_t count, DataType type, ReduceOp op) noexcept;
/// buf[i] /= n (floats), integer division for integer types.
void scale_avg(void* buf, size_t count, DataType type, int n) noexcept;

}  // namespace grex::detail
