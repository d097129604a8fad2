// SPDX-License-Identifier: Apache-2.0
// Store::wait's default (poll CHECK until the keys exist) and the missing-key error wording.
#include "bootstrap/store_util.h"
#include "core/clock.h"

#include <algorithm>
#include <chrono>
#include <thread>

namespace grex {

namespace detail::store {

constexpr size_t kMaxListed = 16;  // names shown in an error before "... (N in all)"
constexpr int64_t kFirstPollMs = 1;
constexpr int64_t kMaxPollMs = 50;

std::string compact_ranks(const std::vector<int>& ranks) {
  std::string out;
  size_t shown = 0;
  for (size_t i = 0; i < ranks.size(); ++i) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (shown == kMaxListed) {
      out += ", ... (" + std::to_string(ranks.size()) + " in all)";
      break;
    }
    if (!out.empty()) out += ", ";
    out += std::to_string(ranks[i]);
    if (j > i) out += (j == i + 1 ? ", " : "-") + std::to_string(ranks[j]);
    ++shown;
    i = j;
  }
  return out;
}

Error missing_keys_error(std::span<const std::string> keys, const std::vector<bool>& present,
                         int64_t timeout_ms, std::string_view where) {
  std::string list;
  size_t missing = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i < present.size() && present[i]) continue;
    if (++missing <= kMaxListed) list += (list.empty() ? "'" : ", '") + keys[i] + "'";
  }
  if (missing > kMaxListed) list += ", ... (" + std::to_string(missing) + " in all)";
  std::string cause = (missing == 1 ? "key " : "keys ") + list + " never appeared within " +
                      std::to_string(timeout_ms) + " ms";
  if (!where.empty()) cause += " (" + std::string(where) + ")";
  return Error(Errc::kTimeout, std::move(cause));
}

Result<void> report_missing(Store& store, std::span<const std::string> keys, int64_t timeout_ms,
                            std::string_view where) {
  std::vector<bool> present = GREX_TRY(store.check(keys));
  if (std::all_of(present.begin(), present.end(), [](bool b) { return b; })) return ok();
  return missing_keys_error(keys, present, timeout_ms, where);
}

}  // namespace detail::store

Result<int64_t> Store::erase(std::span<const std::string>) {
  return Error(Errc::kNotSupported, "this store cannot erase keys");
}

Result<void> Store::wait(std::span<const std::string> keys, int64_t timeout_ms) {
  Deadline deadline = Deadline::after_ms(timeout_ms);
  int64_t nap_ms = detail::store::kFirstPollMs;
  for (;;) {
    std::vector<bool> present = GREX_TRY(check(keys));
    if (std::all_of(present.begin(), present.end(), [](bool b) { return b; })) return ok();
    if (deadline.expired()) return detail::store::missing_keys_error(keys, present, timeout_ms, "");
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(nap_ms, deadline.remaining_ms())));
    nap_ms = std::min(nap_ms * 2, detail::store::kMaxPollMs);
  }
}

}  // namespace grex
