// SPDX-License-Identifier: Apache-2.0
// Buffers: growing device buffers, alloc()ed memory, the registration cache.
#include "collectives/buffers.h"

#include <algorithm>

namespace grex::detail {

Result<void> grow_region(Device& dev, MemoryRegion*& mr, size_t& have, size_t want) {
  if (have >= want) return ok();
  if (mr != nullptr) GREX_TRY(dev.free(mr));
  mr = nullptr;
  have = 0;
  mr = GREX_TRY(dev.allocate(want));
  have = mr->length();
  return ok();
}

Buffers::~Buffers() {
  release_retired();
  for (auto& c : reg_cache_) (void)dev_->deregister_memory(c.mr);
  for (auto& [p, mr] : user_allocs_) (void)dev_->free(mr);
  for (MemoryRegion* mr : {scratch_, staging_, work_, bounce_})
    if (mr != nullptr) (void)dev_->free(mr);
}

Result<void> Buffers::ensure_work(size_t bytes) {
  return grow_region(*dev_, work_, work_bytes_, std::max<size_t>(bytes, 4096));
}

Result<uint8_t*> Buffers::small_bounce(const void* p, size_t bytes) {
  if (bytes > kBounceBytes || !dev_->capabilities().registration_pins_pages) return nullptr;
  for (const auto& c : reg_cache_)
    if (c.mr->contains(p, bytes)) return nullptr;
  for (const auto& [base, mr] : user_allocs_)
    if (mr->contains(p, bytes)) return nullptr;
  if (bounce_ == nullptr) bounce_ = GREX_TRY(dev_->allocate(kBounceBytes));
  return static_cast<uint8_t*>(bounce_->addr());
}

Result<void*> Buffers::alloc(size_t bytes) {
  MemoryRegion* mr = GREX_TRY(dev_->allocate(bytes));
  user_allocs_[mr->addr()] = mr;
  return mr->addr();
}

Result<bool> Buffers::free(void* p) {
  auto it = user_allocs_.find(p);
  if (it == user_allocs_.end()) return false;
  MemoryRegion* mr = it->second;
  user_allocs_.erase(it);
  evict_registrations(mr);
  GREX_TRY(dev_->free(mr));
  return true;
}

Result<MemoryRegion*> Buffers::registration(const void* p, size_t n, bool* transient) {
  *transient = false;
  for (auto& c : reg_cache_)
    if (c.mr->contains(p, n)) {
      c.last_use = ++reg_clock_;
      return c.mr;
    }
  MemoryRegion* mr = GREX_TRY(dev_->register_memory(const_cast<void*>(p), n));
  if (dev_->capabilities().registration_pins_pages) {
    // User memory is registered for this call only. (Memory from alloc()
    // stays registered in the device's cache, which finds it again cheaply.)
    *transient = true;
    return mr;
  }
  if (reg_cache_.size() == kMaxCachedRegistrations) {
    auto victim = std::min_element(reg_cache_.begin(), reg_cache_.end(),
                                   [](const auto& a, const auto& b) { return a.last_use < b.last_use; });
    (void)dev_->deregister_memory(victim->mr);
    reg_cache_.erase(victim);
  }
  reg_cache_.push_back({mr, ++reg_clock_});
  return mr;
}

void Buffers::release_retired() {
  for (MemoryRegion* mr : retired_) (void)dev_->deregister_memory(mr);
  retired_.clear();
}

void Buffers::evict_registrations(const MemoryRegion* mr) {
  for (size_t i = 0; i < reg_cache_.size();) {
    if (mr->contains(reg_cache_[i].mr->addr(), reg_cache_[i].mr->length()) || reg_cache_[i].mr == mr) {
      (void)dev_->deregister_memory(reg_cache_[i].mr);
      reg_cache_.erase(reg_cache_.begin() + static_cast<long>(i));
    } else {
      ++i;
    }
  }
}

}  // namespace grex::detail
