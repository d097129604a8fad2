// SPDX-License-Identifier: Apache-2.0
// Registration cache: an interval map from address ranges to registered regions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>

namespace grex::mem {

/// Maps non-overlapping-by-start address ranges to values with a reference
/// count. lookup() finds an entry whose range covers a query range. Not
/// thread-safe (the owning Device serialises access).
template <class V>
class IntervalCache {
 public:
  struct Entry {
    uintptr_t begin;
    uintptr_t end;  // one past the last byte
    V value;
    size_t refs;
  };

  /// Returns the entry covering [addr, addr+len), or nullptr. When several
  /// cover it, the one starting closest below addr wins.
  Entry* lookup(uintptr_t addr, size_t len) noexcept {
    auto it = map_.upper_bound(addr);
    // Walk down: any entry starting at or below addr may cover the range.
    while (it != map_.begin()) {
      --it;
      Entry& e = it->second;
      if (e.end >= addr + len && e.begin <= addr) return &e;
      if (it->first + max_len_ < addr) break;  // nothing further down can reach
    }
    return nullptr;
  }

  /// Inserts a new entry with one reference. A second entry at the same start
  /// replaces neither; callers look up first.
  Entry* insert(uintptr_t addr, size_t len, V value) {
    auto it = map_.emplace(addr, Entry{addr, addr + len, std::move(value), 1});
    if (len > max_len_) max_len_ = len;
    return &it->second;
  }

  /// Finds the entry whose value satisfies pred (linear; used on deregister).
  template <class Pred>
  bool erase_if_last_ref(Pred pred, bool* erased) {
    for (auto it = map_.begin(); it != map_.end(); ++it) {
      if (pred(it->second.value)) {
        if (--it->second.refs == 0) {
          map_.erase(it);
          *erased = true;
        } else {
          *erased = false;
        }
        return true;
      }
    }
    return false;
  }

  size_t size() const noexcept { return map_.size(); }
  template <class F>
  void for_each(F f) {
    for (auto& [k, e] : map_) f(e);
  }
  void clear() { map_.clear(); max_len_ = 0; }

 private:
  std::multimap<uintptr_t, Entry> map_;
  size_t max_len_ = 0;
};

}  // namespace grex::mem
