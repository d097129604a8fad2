// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the store and Bootstrap: compact rank lists and "keys still missing" errors.
#pragma once

#include <grex/bootstrap.h>

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace grex::detail::store {

/// "2, 5-7, 9" for sorted ranks; long lists end in "... (N in all)".
std::string compact_ranks(const std::vector<int>& ranks);

/// The kTimeout error for a wait on keys of which those with present[i] false never appeared.
/// `where` names the store ("store 10.0.0.1:29500"), or is empty.
Error missing_keys_error(std::span<const std::string> keys, const std::vector<bool>& present,
                         int64_t timeout_ms, std::string_view where);

/// After a wait timed out: asks the store which keys are missing and returns
/// missing_keys_error (or ok if they all arrived meanwhile).
Result<void> report_missing(Store& store, std::span<const std::string> keys, int64_t timeout_ms,
                            std::string_view where);

}  // namespace grex::detail::store
