// SPDX-License-Identifier: Apache-2.0
// The memory a communicator's collectives use besides the caller's: device
// buffers that grow on demand (scratch, staging, work, bounce), the memory
// handed out by Communicator::alloc, and the cache of user registrations.
// Driven by the thread that runs collectives (one at a time).
#pragma once

#include <grex/transport.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

namespace grex::detail {

/// Makes `mr` (device-allocated, `have` bytes) hold at least `want` bytes:
/// freed and allocated anew when it is smaller.
Result<void> grow_region(Device& dev, MemoryRegion*& mr, size_t& have, size_t want);

class Buffers {
 public:
  explicit Buffers(Device& dev) noexcept : dev_(&dev) {}
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;
  /// Frees everything still held (after the endpoints are gone: see release_retired).
  ~Buffers();

  Device& device() const noexcept { return *dev_; }

  /// Reduction landing zone (chunks received before they are folded in).
  MemoryRegion* scratch() const noexcept { return scratch_; }
  Result<void> ensure_scratch(size_t bytes) { return grow_region(*dev_, scratch_, scratch_bytes_, bytes); }
  /// Send-side staging ring (shm: peers read it through their mapping).
  MemoryRegion* staging() const noexcept { return staging_; }
  Result<void> ensure_staging(size_t bytes) { return grow_region(*dev_, staging_, staging_bytes_, bytes); }
  /// Whole-vector temporary.
  MemoryRegion* work() const noexcept { return work_; }
  Result<void> ensure_work(size_t bytes);

  /// Up to this many bytes, a collective on memory the device registers per
  /// call only runs on a kept bounce buffer instead (copied in and out).
  static constexpr size_t kBounceBytes = 64 * 1024;
  /// The bounce buffer for a collective on [p, p+bytes), or nullptr when the
  /// memory is used in place (registered already, cheap to register, or large).
  Result<uint8_t*> small_bounce(const void* p, size_t bytes);

  /// Communicator::alloc / free.
  Result<void*> alloc(size_t bytes);
  /// false when `p` did not come from alloc().
  Result<bool> free(void* p);
  /// `mr` is memory from alloc() (peers map it and reach it in place).
  bool is_user_alloc(const MemoryRegion* mr) const noexcept {
    for (const auto& [p, a] : user_allocs_)
      if (a == mr) return true;
    return false;
  }
  /// Memory the communicator owns: never staged (peers read it in place).
  bool owned(const MemoryRegion* mr) const noexcept {
    return mr == scratch_ || mr == staging_ || is_user_alloc(mr);
  }

  /// A registration covering [p, p+n), from the cache or new. *transient is
  /// set when the caller must retire it after the call: on devices whose
  /// registrations pin pages, user memory is never cached across calls (the
  /// user may free it and get other pages at the same address).
  Result<MemoryRegion*> registration(const void* p, size_t n, bool* transient);
  /// A transient registration whose call ended. A successful call releases
  /// them (release_retired); after a failure the flows may still hold
  /// operations on them, so they stay until the endpoints are destroyed.
  void retire(MemoryRegion* mr) { retired_.push_back(mr); }
  void release_retired();

 private:
  static constexpr size_t kMaxCachedRegistrations = 32;
  /// Drops cached registrations inside `mr`'s range (before it is freed).
  void evict_registrations(const MemoryRegion* mr);

  Device* dev_;
  MemoryRegion* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  MemoryRegion* staging_ = nullptr;
  size_t staging_bytes_ = 0;
  MemoryRegion* work_ = nullptr;
  size_t work_bytes_ = 0;
  MemoryRegion* bounce_ = nullptr;
  std::map<void*, MemoryRegion*> user_allocs_;
  struct CachedRegistration {
    MemoryRegion* mr;
    uint64_t last_use;
  };
  std::vector<CachedRegistration> reg_cache_;  // least recently used goes first
  uint64_t reg_clock_ = 0;
  std::vector<MemoryRegion*> retired_;
};

/// The registration a call uses for one buffer: it stays in the cache after
/// the call, or is retired at the end of the scope where caching would be
/// unsafe (see Buffers::registration).
class ScopedRegistration {
 public:
  explicit ScopedRegistration(Buffers& b) noexcept : b_(b) {}
  ~ScopedRegistration() {
    if (transient_ && mr_ != nullptr) b_.retire(mr_);
  }
  ScopedRegistration(const ScopedRegistration&) = delete;
  ScopedRegistration& operator=(const ScopedRegistration&) = delete;
  Result<MemoryRegion*> acquire(const void* p, size_t bytes) {
    auto r = b_.registration(p, bytes, &transient_);
    if (r) mr_ = *r;
    return r;
  }
  MemoryRegion* get() const noexcept { return mr_; }
  /// Offset of p inside the registration.
  uint64_t offset(const void* p) const noexcept {
    return static_cast<uint64_t>(static_cast<const char*>(p) - static_cast<const char*>(mr_->addr()));
  }

 private:
  Buffers& b_;
  MemoryRegion* mr_ = nullptr;
  bool transient_ = false;
};

}  // namespace grex::detail
