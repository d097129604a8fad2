// SPDX-License-Identifier: Apache-2.0
// Layout of the shared segment between two ranks: a header and one slot ring per direction.
#pragma once

#include <grex/result.h>

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace grex::shm {

inline constexpr uint64_t kSegmentMagic = 0x67726578'73686d31ull;  // "grexshm1"
inline constexpr uint32_t kSegmentVersion = 4;  // 4: each side's shared heap in the header, pin tables
inline constexpr size_t kSlotHeaderBytes = 64;

/// Message kinds carried in a slot.
enum class SlotType : uint8_t {
  kEager = 1,     ///< payload inline; slot freed when matched
  kRts = 2,       ///< rendezvous: receiver copies from the sender; slot freed when done (the sender's completion)
  kWriteImm = 3,  ///< notification after a one-sided write landed
};

/// First 64 bytes of every slot. `state` is written last by the sender
/// (release) and cleared by the receiver (release) when it is done.
struct alignas(64) SlotHeader {
  std::atomic<uint32_t> state;  // 0 free, 1 full
  SlotType type;
  uint8_t pad_[3];
  uint64_t seq;      // sender's message sequence number (checked by the receiver)
  uint64_t tag;      // kEager/kRts: tag; kWriteImm: remote offset
  uint64_t length;   // message length in bytes
  uint64_t addr;     // kRts: source virtual address in the sender
  uint64_t region;   // kRts: sender region id; kWriteImm: target region id
  uint64_t aux;      // kRts: offset of the data inside the sender's region
  uint32_t imm;      // kRts: sender memfd number + 1 (0: not shareable; informational); kWriteImm: immediate
  uint32_t inline_bytes;
};
static_assert(sizeof(SlotHeader) == kSlotHeaderBytes, "slot header is a shared-memory format");
/// An eager message this short travels in the header's own cache line, in
/// the addr/region/aux words it does not use: the receiver's one load of the
/// line brings flag and payload together (one cross-core transfer, not two).
inline constexpr size_t kHeaderInlineBytes = 24;
static_assert(offsetof(SlotHeader, aux) + sizeof(uint64_t) - offsetof(SlotHeader, addr) == kHeaderInlineBytes);
/// Where in its slot an eager message of `len` bytes lies (sender and receiver alike).
inline size_t eager_offset(uint64_t len) noexcept {
  return len <= kHeaderInlineBytes ? offsetof(SlotHeader, addr) : kSlotHeaderBytes;
}
inline uint8_t* eager_payload(SlotHeader* s) noexcept { return reinterpret_cast<uint8_t*>(s) + eager_offset(s->length); }

/// Segment header, at offset 0.
struct alignas(64) SegmentHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t slots;
  uint32_t slot_bytes;
  std::atomic<uint32_t> ready;     // set by the creator after initialising
  std::atomic<uint32_t> attached;  // set by the opener
  int32_t pid[2];                  // [0] lower rank, [1] higher rank
  uint64_t probe_addr[2];          // address of a probe word in each process (CMA check)
  std::atomic<int32_t> abort_culprit[2];  // culprit rank + 1 announced by each side (0: none)
  std::atomic<uint32_t> closed[2];        // set by each side when it closes its endpoint normally
  // Each side's shared heap (shm_heap.h), written before its pid / attached
  // flag is published: memfd number (-1: none), where that side maps it, length.
  int32_t heap_fd[2];
  uint64_t heap_addr[2];
  uint64_t heap_bytes[2];
};
static_assert(sizeof(SegmentHeader) == 128, "segment header is a shared-memory format");

/// Pieces of the other side's shared heap that one side holds through
/// Endpoint::map(), by region id (0: free entry). The owner neither returns
/// nor reuses a pinned piece while the pinning side's endpoint is open: a
/// map() pointer stays valid for the endpoint's life, as the contract says.
inline constexpr uint32_t kMaxPins = 32;
struct alignas(64) PinTable {
  std::atomic<uint32_t> region[kMaxPins];
};
static_assert(sizeof(PinTable) == 128, "pin table is a shared-memory format");

/// A mapped segment shared by ranks lo < hi: the header, each side's pin
/// table, then the rings. Ring 0 carries lo -> hi, ring 1 hi -> lo.
class Segment {
 public:
  Segment() = default;
  ~Segment();
  Segment(Segment&& o) noexcept { *this = std::move(o); }
  Segment& operator=(Segment&& o) noexcept;

  /// Creates, sizes and initialises the segment `name` (lower rank).
  static Result<Segment> create(const std::string& name, uint32_t slots, uint32_t slot_bytes);
  /// Opens `name` created by the peer, retrying until it is ready or the
  /// deadline passes. Refuses a segment this user does not own or others
  /// may open (mode beyond 0600), and a header whose geometry does not fit
  /// the mapping.
  static Result<Segment> open(const std::string& name, int64_t timeout_ms);
  /// Bytes needed for a segment with these dimensions.
  static size_t bytes_for(uint32_t slots, uint32_t slot_bytes) noexcept;

  SegmentHeader* header() const noexcept { return reinterpret_cast<SegmentHeader*>(base_); }
  /// The pins of side `side` (0 or 1) in the other side's heap.
  PinTable* pins(int side) const noexcept {
    return reinterpret_cast<PinTable*>(base_ + sizeof(SegmentHeader)) + side;
  }
  /// Slot i (0..slots-1) of ring `dir` (0 or 1). The geometry is this
  /// process's copy, checked once against the mapping (open): a peer that
  /// rewrites the shared header cannot move where we write.
  SlotHeader* slot(int dir, uint32_t i) const noexcept {
    return reinterpret_cast<SlotHeader*>(base_ + sizeof(SegmentHeader) + 2 * sizeof(PinTable) +
                                         (static_cast<size_t>(dir) * slots_ + i) * slot_bytes_);
  }
  uint32_t slots() const noexcept { return slots_; }
  size_t max_inline() const noexcept { return slot_bytes_ - kSlotHeaderBytes; }
  /// Geometry a segment may have: 1..kMaxSlots slots of 128..kMaxSlotBytes
  /// bytes, a multiple of 64 (what create() accepts and open() checks).
  static constexpr uint32_t kMaxSlots = 1u << 16;
  static constexpr uint32_t kMaxSlotBytes = 1u << 24;
  static bool valid_geometry(uint32_t slots, uint32_t slot_bytes) noexcept {
    return slots >= 1 && slots <= kMaxSlots && slot_bytes >= 128 && slot_bytes <= kMaxSlotBytes && slot_bytes % 64 == 0;
  }
  const std::string& name() const noexcept { return name_; }
  /// Bytes mapped (the segment file's size when it was opened).
  size_t bytes() const noexcept { return bytes_; }

 private:
  uint8_t* base_ = nullptr;
  size_t bytes_ = 0;
  uint32_t slots_ = 1, slot_bytes_ = 128;
  std::string name_;
};

}  // namespace grex::shm
