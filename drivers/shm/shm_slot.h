// SPDX-License-Identifier: Apache-2.0
// The shm slot reader: what a receiver makes of the bytes its peer wrote into
// a slot, and which of the peer's bytes it may copy. Everything the peer
// wrote is untrusted and may change while it is read: each field is read
// once, checked, and only the checked copy is used. Pure functions of the
// slot and of this process's own geometry, so tests/fuzz/shm_fuzz.cc drives
// them with hostile slots exactly as ShmEndpoint does.
#pragma once

#include <cstdint>

#include "drivers/shm/shm_heap.h"
#include "drivers/shm/shm_segment.h"

namespace grex::shm {

/// What the slot at the head of the incoming ring holds.
enum class SlotVerdict : uint8_t {
  kEmpty,          ///< not yet written (state 0)
  kMessage,        ///< an eager or rendezvous message, to be matched by tag
  kWriteImm,       ///< a one-sided write's notice
  kOutOfSequence,  ///< a sequence number other than the expected one: the ring is corrupt
  kUnknownType,    ///< a type no sender writes: the ring is corrupt
};

/// The head slot `s`, when the receiver expects message number `expected`.
/// Its state is read with acquire, so the fields written before it are seen.
inline SlotVerdict read_head(const SlotHeader* s, uint64_t expected) noexcept {
  if (s->state.load(std::memory_order_acquire) == 0) return SlotVerdict::kEmpty;
  const auto* v = reinterpret_cast<const volatile SlotHeader*>(s);
  if (v->seq != expected) return SlotVerdict::kOutOfSequence;
  switch (static_cast<SlotType>(v->type)) {
    case SlotType::kEager:
    case SlotType::kRts:
      return SlotVerdict::kMessage;
    case SlotType::kWriteImm:
      return SlotVerdict::kWriteImm;
  }
  return SlotVerdict::kUnknownType;
}

/// Reads a field of a slot the peer may be rewriting, once.
template <class T>
inline T read_once(const T& field) noexcept {
  return *reinterpret_cast<const volatile T*>(&field);
}

/// Where the bytes of an eager message of `len` bytes (its length as read
/// once) lie in slot `s`: in the header's inline words up to
/// kHeaderInlineBytes, else in the slot's payload. nullptr when `len` is more
/// than a slot of `max_inline` payload bytes holds: the peer's ring is corrupt.
inline const uint8_t* eager_source(const SlotHeader* s, uint64_t len, size_t max_inline) noexcept {
  if (len > max_inline) return nullptr;
  return reinterpret_cast<const uint8_t*>(s) + eager_offset(len);
}

/// Whether [offset, offset + len) lies inside `bytes` bytes, without overflow.
inline bool within(uint64_t offset, uint64_t len, uint64_t bytes) noexcept {
  return offset <= bytes && len <= bytes - offset;
}

/// Where the peer's bytes [addr, addr + n) are in mapping `m` of its memory,
/// or nullptr when they are not all inside it.
inline uint8_t* in_mapping(const PeerMapping& m, uint64_t addr, uint64_t n) noexcept {
  if (m.base == nullptr) return nullptr;
  // Below the mapping, addr - m.addr wraps to a huge offset: one compare covers both ends.
  const uint64_t off = addr - m.addr;
  return off < m.bytes && n <= m.bytes - off ? m.base + off : nullptr;
}

}  // namespace grex::shm
