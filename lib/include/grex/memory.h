// SPDX-License-Identifier: Apache-2.0
/// @file memory.h
/// Registered memory: MemoryRegion (local handle) and RemoteRegion (what a peer may write into).
#pragma once

#include <cstddef>
#include <cstdint>

namespace grex {

/// Where the bytes of a region live.
enum class MemoryDomain : uint8_t {
  kHost = 0,        ///< ordinary (pageable or pinned) host memory
  kCudaDevice = 1,  ///< CUDA device memory (GPUDirect; see docs/gpudirect.md)
};

/// A region as a peer sees it: enough to target a one-sided write. Plain old
/// data of fixed size, sent to peers in messages or through the bootstrap store.
struct RemoteRegion {
  uint64_t addr = 0;    ///< start address in the owner's address space
  uint64_t length = 0;  ///< bytes
  uint64_t rkey = 0;    ///< driver-specific key the owner validates writes against
  uint64_t owner = 0;   ///< driver-specific owner tag (e.g. the owner's process id)
};
static_assert(sizeof(RemoteRegion) == 32, "RemoteRegion is a wire format");

/// Memory registered with a Device. Obtained from Device::register_memory
/// (user memory, cached by address range) or Device::allocate (memory the
/// device can serve best, e.g. shareable between processes for shm). Owned by
/// the Device: release with Device::deregister_memory / Device::free.
class MemoryRegion {
 public:
  virtual ~MemoryRegion() = default;
  MemoryRegion(const MemoryRegion&) = delete;
  MemoryRegion& operator=(const MemoryRegion&) = delete;

  /// First byte of the region.
  void* addr() const noexcept { return addr_; }
  /// Length in bytes.
  size_t length() const noexcept { return length_; }
  /// Where the memory lives.
  MemoryDomain domain() const noexcept { return domain_; }
  /// Local key used in work requests (driver-specific; shm: region id).
  uint64_t lkey() const noexcept { return lkey_; }
  /// The description a peer needs to write into this region.
  RemoteRegion remote() const noexcept { return remote_; }
  /// True when [offset, offset+n) of the region lies inside it.
  bool holds(uint64_t offset, uint64_t n) const noexcept { return offset <= length_ && n <= length_ - offset; }
  /// True when [p, p+n) lies inside the region.
  bool contains(const void* p, size_t n) const noexcept {
    auto a = reinterpret_cast<uintptr_t>(p);
    auto b = reinterpret_cast<uintptr_t>(addr_);
    return a >= b && n <= length_ && a - b <= length_ - n;
  }

 protected:
  MemoryRegion(void* addr, size_t length, MemoryDomain domain)
      : addr_(addr), length_(length), domain_(domain) {}
  void* addr_;
  size_t length_;
  MemoryDomain domain_;
  uint64_t lkey_ = 0;
  RemoteRegion remote_{};
};

}  // namespace grex
