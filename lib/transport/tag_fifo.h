// SPDX-License-Identifier: Apache-2.0
// TagFifo<T>: one first-in first-out queue per tag, sharing a fixed pool of
// entries. The matching core of both datagram and verbs drivers: posted sends
// wait per tag for the peer's receive adverts (and adverts for sends), so
// finding "the oldest entry with this tag" is one hash probe, and taking it
// shifts nothing, however many tags are in flight.
//
// Entries live in a slab linked per tag; a small open-addressed table (linear
// probing, backward-shift deletion) maps a tag to its list. Every operation is
// O(1) expected; nothing allocates after reset(). Not thread-safe.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace grex {

template <typename T>
class TagFifo {
 public:
  TagFifo() = default;
  explicit TagFifo(size_t capacity) { reset(capacity); }

  /// Empties the queues and sizes the pool for `capacity` entries (allocates).
  void reset(size_t capacity) {
    nodes_.assign(capacity, Node{});
    free_ = kNone;
    for (size_t i = capacity; i-- > 0;) {
      nodes_[i].next = free_;
      free_ = static_cast<uint32_t>(i);
    }
    size_t n = 4;
    while (n < 2 * capacity) n <<= 1;
    table_.assign(n, Bucket{});
    order_.clear();
    order_.reserve(capacity);
    size_ = 0;
    seq_ = 0;
  }

  size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  bool full() const noexcept { return free_ == kNone; }
  size_t capacity() const noexcept { return nodes_.size(); }

  /// Appends `v` to the queue of `tag`; false (nothing changes) when the pool is full.
  bool push(uint64_t tag, const T& v) noexcept {
    if (free_ == kNone) return false;
    const uint32_t id = free_;
    Node& nd = nodes_[id];
    free_ = nd.next;
    nd = Node{v, kNone, seq_++, tag};
    Bucket& b = table_[slot_for(tag)];
    if (!b.used) {
      b = Bucket{tag, id, id, true};
    } else {
      nodes_[b.tail].next = id;
      b.tail = id;
    }
    ++size_;
    return true;
  }

  /// The oldest entry of `tag`, or nullptr.
  T* front(uint64_t tag) noexcept {
    const size_t s = find(tag);
    return s == kNoSlot ? nullptr : &nodes_[table_[s].head].value;
  }

  /// The newest entry of `tag`, or nullptr.
  T* back(uint64_t tag) noexcept {
    const size_t s = find(tag);
    return s == kNoSlot ? nullptr : &nodes_[table_[s].tail].value;
  }

  /// Removes the oldest entry of `tag`; false when it has none.
  bool pop(uint64_t tag) noexcept {
    const size_t s = find(tag);
    if (s == kNoSlot) return false;
    Bucket& b = table_[s];
    const uint32_t id = b.head;
    b.head = nodes_[id].next;
    release(id);
    if (b.head == kNone) erase_slot(s);
    return true;
  }

  /// Calls f(T&) on the entries of `tag`, oldest first, until f returns true;
  /// returns that entry, or nullptr.
  template <typename F>
  T* find_if(uint64_t tag, F&& f) noexcept {
    const size_t s = find(tag);
    if (s == kNoSlot) return nullptr;
    for (uint32_t id = table_[s].head; id != kNone; id = nodes_[id].next)
      if (f(nodes_[id].value)) return &nodes_[id].value;
    return nullptr;
  }

  /// Empties every queue (no allocation).
  void clear() noexcept { reset_keep_capacity(); }

  /// Calls f(tag, T&) on every entry in the order they were pushed, then
  /// empties every queue. For failing what is pending (no allocation).
  template <typename F>
  void drain(F&& f) noexcept {
    order_.clear();
    for (size_t s = 0; s < table_.size(); ++s) {
      if (!table_[s].used) continue;
      for (uint32_t id = table_[s].head; id != kNone; id = nodes_[id].next) order_.push_back(id);
    }
    std::sort(order_.begin(), order_.end(), [&](uint32_t a, uint32_t b) { return nodes_[a].seq < nodes_[b].seq; });
    for (uint32_t id : order_) f(nodes_[id].tag, nodes_[id].value);
    reset_keep_capacity();
  }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  static constexpr size_t kNoSlot = SIZE_MAX;
  struct Node {
    T value{};
    uint32_t next = kNone;
    uint64_t seq = 0;  // push order, for drain()
    uint64_t tag = 0;
  };
  struct Bucket {
    uint64_t tag = 0;
    uint32_t head = kNone, tail = kNone;
    bool used = false;
  };

  static size_t hash(uint64_t tag) noexcept {  // a 64-bit mix: tags are often small or strided
    tag ^= tag >> 33;
    tag *= 0xff51afd7ed558ccdull;
    tag ^= tag >> 33;
    return static_cast<size_t>(tag);
  }
  size_t find(uint64_t tag) const noexcept {
    if (table_.empty()) return kNoSlot;  // never reset: no entries
    const size_t mask = table_.size() - 1;
    for (size_t s = hash(tag) & mask;; s = (s + 1) & mask) {
      if (!table_[s].used) return kNoSlot;
      if (table_[s].tag == tag) return s;
    }
  }
  // The bucket of `tag`, or the empty one where it would go (the table is at
  // most half full, so there always is one).
  size_t slot_for(uint64_t tag) const noexcept {
    const size_t mask = table_.size() - 1;
    size_t s = hash(tag) & mask;
    while (table_[s].used && table_[s].tag != tag) s = (s + 1) & mask;
    return s;
  }
  void release(uint32_t id) noexcept {
    nodes_[id].value = T{};
    nodes_[id].next = free_;
    free_ = id;
    --size_;
  }
  // Linear probing's deletion: move later members of the cluster back so no
  // lookup stops early at the hole.
  void erase_slot(size_t hole) noexcept {
    const size_t mask = table_.size() - 1;
    table_[hole].used = false;
    for (size_t s = (hole + 1) & mask; table_[s].used; s = (s + 1) & mask) {
      const size_t home = hash(table_[s].tag) & mask;
      // Move it when its home does not lie cyclically in (hole, s].
      const bool stays = hole < s ? (home > hole && home <= s) : (home > hole || home <= s);
      if (stays) continue;
      table_[hole] = table_[s];
      table_[s].used = false;
      hole = s;
    }
  }
  void reset_keep_capacity() noexcept {
    const size_t cap = nodes_.size();
    for (size_t i = cap; i-- > 0;) {
      nodes_[i] = Node{};
      nodes_[i].next = i + 1 < cap ? static_cast<uint32_t>(i + 1) : kNone;
    }
    free_ = cap > 0 ? 0 : kNone;
    std::fill(table_.begin(), table_.end(), Bucket{});
    size_ = 0;
  }

  std::vector<Node> nodes_;
  std::vector<Bucket> table_;
  std::vector<uint32_t> order_;
  uint32_t free_ = kNone;
  size_t size_ = 0;
  uint64_t seq_ = 0;
};

}  // namespace grex
