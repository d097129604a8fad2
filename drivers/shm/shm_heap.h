// SPDX-License-Identifier: Apache-2.0
// The shm device's shared heap (one memfd that allocate() carves) and mappings of peers' memory.
//
// Why one heap: a peer maps our allocate()d memory to copy from and into it
// with plain loads and stores. Mapping a region when it is first used would
// put open() and mmap() on the data path (inside poll), and regions are
// exchanged by the layers above in ordinary messages, so the driver sees no
// control-path moment between a peer's allocate() and our first use. Instead
// each device reserves one sparse memfd at open and publishes it in every
// pair segment; connect() maps the peer's whole heap once. Every region the
// peer allocates later lies inside that mapping, so the data path finds a
// peer address with one range check. Pages cost memory only once written;
// free() punches them out of the file, which also takes them out of every
// peer's mapping.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>

namespace grex::shm {

/// A fixed reservation in one memfd, mapped here, handed out in page-aligned
/// pieces. Setup-time only: take() and give_back() allocate and make system calls.
class SharedHeap {
 public:
  SharedHeap() = default;
  ~SharedHeap();
  SharedHeap(const SharedHeap&) = delete;
  SharedHeap& operator=(const SharedHeap&) = delete;

  /// Reserves `bytes` (rounded to pages), halving while the address space
  /// refuses it (ulimit -v, valgrind) down to kMinHeapBytes. False, with
  /// errno set, when nothing could be reserved (allocate() then makes one
  /// memfd per region).
  bool reserve(uint64_t bytes) noexcept;
  bool enabled() const noexcept { return base_ != nullptr; }
  int fd() const noexcept { return fd_; }
  uint8_t* base() const noexcept { return base_; }
  uint64_t bytes() const noexcept { return bytes_; }
  uint64_t in_use() const noexcept { return in_use_; }

  /// First fit: the offset of `len` bytes (rounded up to pages), or -1 when
  /// no free piece is large enough. Marks the pages dumpable in core files.
  int64_t take(uint64_t len);
  /// Returns what take() gave at `offset`: its pages leave the file (and
  /// every mapping of it), and the range merges with its free neighbours.
  void give_back(uint64_t offset, uint64_t len) noexcept;
  /// `len` as take() rounds it.
  uint64_t rounded(uint64_t len) const noexcept { return (len + page_ - 1) / page_ * page_; }

  /// Smallest reservation worth having.
  static constexpr uint64_t kMinHeapBytes = 64ull << 20;

 private:
  int fd_ = -1;
  uint8_t* base_ = nullptr;
  uint64_t bytes_ = 0;
  uint64_t page_ = 4096;
  uint64_t in_use_ = 0;
  std::map<uint64_t, uint64_t> free_;  // offset -> length; disjoint, never adjacent
};

/// A range of a peer's memory mapped into this process: the peer's address
/// `addr` is at `base` here.
struct PeerMapping {
  uint64_t addr = 0;
  uint64_t bytes = 0;
  uint8_t* base = nullptr;
  uint32_t region = 0;  ///< the peer's region id (0: its whole heap)
  int fd = -1;          ///< the peer's memfd number
};

/// Seals a memfd at its size (no shrink, no grow, no more seals): what a peer
/// maps of it stays backed. False if the kernel refuses.
bool seal_size(int fd) noexcept;

/// Maps `len` bytes at `offset` of the peer's fd `fd` (opened through
/// /proc/<pid>/fd, which needs only read access to the process, not ptrace
/// attach as process_vm_readv does), read-write. With `shrink`, halves `len`
/// while mmap() refuses it, down to SharedHeap::kMinHeapBytes, and stores
/// the length mapped back into it. Only a file sealed against shrinking
/// (seal_size) is mapped, within its real size (fstat), never what the peer
/// claims. nullptr with errno set on failure (EPERM: not sealed).
uint8_t* map_peer_fd(pid_t pid, int fd, uint64_t offset, uint64_t* len, bool shrink) noexcept;

}  // namespace grex::shm
