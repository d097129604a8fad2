// SPDX-License-Identifier: Apache-2.0
// TorchStore: torch's c10d::Store as a grex::Store, so a group's bootstrap keys
// live in the store torch gives that group (a PrefixStore per group and device).
// Waits poll with check(): torch's TCPStore client holds its socket for the
// whole of a blocking wait, so two threads of one process (two channels being
// created) would otherwise stall each other until the timeout.
#pragma once

#include <grex/bootstrap.h>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <algorithm>
#include <chrono>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace grex::torch_backend {

class TorchStore final : public Store {
 public:
  explicit TorchStore(c10::intrusive_ptr<c10d::Store> s) : s_(std::move(s)) {}
  Result<void> set(std::string_view key, std::string_view value) override {
    return guard([&] { s_->set(std::string(key), std::vector<uint8_t>(value.begin(), value.end())); });
  }
  Result<std::string> get(std::string_view key, int64_t timeout_ms) override {
    const std::string k(key);
    GREX_TRY(wait(std::span<const std::string>(&k, 1), timeout_ms));
    std::string out;
    GREX_TRY(guard([&] {
      auto v = s_->get(k);
      out.assign(v.begin(), v.end());
    }));
    return out;
  }
  Result<int64_t> add(std::string_view key, int64_t delta) override {
    int64_t v = 0;
    GREX_TRY(guard([&] { v = s_->add(std::string(key), delta); }));
    return v;
  }
  Result<std::vector<bool>> check(std::span<const std::string> keys) override {
    std::vector<bool> out;
    GREX_TRY(guard([&] {
      for (const auto& k : keys) out.push_back(s_->check({k}));
    }));
    return out;
  }
  Result<int64_t> erase(std::span<const std::string> keys) override {
    int64_t n = 0;
    GREX_TRY(guard([&] {
      for (const auto& k : keys) n += s_->deleteKey(k) ? 1 : 0;
    }));
    return n;
  }
  Result<void> wait(std::span<const std::string> keys, int64_t timeout_ms) override {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    auto nap = std::chrono::microseconds(100);
    for (;;) {
      bool all = false;
      GREX_TRY(guard([&] { all = s_->check(std::vector<std::string>(keys.begin(), keys.end())); }));
      if (all) return ok();
      if (std::chrono::steady_clock::now() >= deadline) {
        std::string missing;
        for (const auto& k : keys) missing += (missing.empty() ? "" : ", ") + k;
        return Error(Errc::kTimeout, "torch store: waited " + std::to_string(timeout_ms) + " ms for " + missing);
      }
      std::this_thread::sleep_for(nap);
      nap = std::min(nap * 2, std::chrono::microseconds(10'000));
    }
  }

 private:
  template <typename Fn>
  static Result<void> guard(Fn&& fn) {
    try {
      fn();
      return ok();
    } catch (const std::exception& e) {
      std::string what = e.what();
      bool timeout = what.find("imeout") != std::string::npos || what.find("timed out") != std::string::npos;
      return Error(timeout ? Errc::kTimeout : Errc::kConnectionFailed, "torch store: " + what.substr(0, what.find('\n')));
    }
  }
  c10::intrusive_ptr<c10d::Store> s_;
};

}  // namespace grex::torch_backend
