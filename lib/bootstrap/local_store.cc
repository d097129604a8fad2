// SPDX-License-Identifier: Apache-2.0
// LocalStore: the key-value store of ranks that are threads of one process.
#include <grex/bootstrap.h>

#include <chrono>
#include <charconv>
#include <condition_variable>
#include <map>

#include "bootstrap/store_util.h"

namespace grex {

struct LocalStore::Impl {
  std::mutex mu;
  std::condition_variable changed;  // notified on every set and add
  std::map<std::string, std::string, std::less<>> kv;

  bool has_all(std::span<const std::string> keys) const {
    for (const auto& k : keys)
      if (kv.find(k) == kv.end()) return false;
    return true;
  }
};

LocalStore::LocalStore() : impl_(std::make_unique<Impl>()) {}
LocalStore::~LocalStore() = default;

Result<void> LocalStore::set(std::string_view key, std::string_view value) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->kv.insert_or_assign(std::string(key), std::string(value));
  }
  impl_->changed.notify_all();
  return ok();
}

Result<int64_t> LocalStore::erase(std::span<const std::string> keys) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  int64_t n = 0;
  for (const auto& k : keys) n += static_cast<int64_t>(impl_->kv.erase(k));
  return n;
}

Result<std::string> LocalStore::get(std::string_view key, int64_t timeout_ms) {
  const std::string k(key);
  GREX_TRY(wait(std::span<const std::string>(&k, 1), timeout_ms));
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->kv.find(k)->second;
}

Result<int64_t> LocalStore::add(std::string_view key, int64_t delta) {
  int64_t next = 0;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    auto [it, created] = impl_->kv.try_emplace(std::string(key), "0");
    int64_t cur = 0;
    const std::string& v = it->second;
    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), cur);
    if (ec != std::errc() || p != v.data() + v.size())
      return Error(Errc::kInvalidArgument, "add on key '" + it->first + "': its value is not an integer");
    if (__builtin_add_overflow(cur, delta, &next))
      return Error(Errc::kInvalidArgument, "add on key '" + it->first + "' overflows int64");
    it->second = std::to_string(next);
  }
  impl_->changed.notify_all();
  return next;
}

Result<std::vector<bool>> LocalStore::check(std::span<const std::string> keys) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<bool> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(impl_->kv.find(k) != impl_->kv.end());
  return out;
}

Result<void> LocalStore::wait(std::span<const std::string> keys, int64_t timeout_ms) {
  std::unique_lock<std::mutex> lock(impl_->mu);
  auto ready = [&] { return impl_->has_all(keys); };
  if (timeout_ms < 0) {
    impl_->changed.wait(lock, ready);
    return ok();
  }
  if (impl_->changed.wait_for(lock, std::chrono::milliseconds(timeout_ms), ready)) return ok();
  std::vector<bool> present;
  for (const auto& k : keys) present.push_back(impl_->kv.find(k) != impl_->kv.end());
  return detail::store::missing_keys_error(keys, present, timeout_ms, "local store");
}

}  // namespace grex
