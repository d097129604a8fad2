// SPDX-License-Identifier: Apache-2.0
// Point-to-point notices: posting, reading and matching them (notices.h).
#include "collectives/notices.h"

#include <cstring>

namespace grex::detail {

namespace {

// A notice: tag, a marker, the message's size. The marker tells a notice
// from a slot a failed receive left as it was (cleared before each repost).
constexpr uint32_t kMarker = 0x4e585247;  // "GRXN"

struct Wire {
  uint32_t tag;
  uint32_t marker;
  uint64_t bytes;
};
static_assert(sizeof(Wire) == Notices::kBytes);

}  // namespace

Notices::~Notices() {
  // The endpoints are gone by now (~Communicator closes them first), so no
  // posted receive still points here.
  if (mr_ != nullptr) (void)dev_->free(mr_);
}

uint8_t* Notices::slot(int peer, size_t k) const noexcept {
  return static_cast<uint8_t*>(mr_->addr()) + kBytes * (1 + static_cast<size_t>(peer) * kDepth + k);
}

Result<void> Notices::start(Device& dev, Engine& eng, int rank, int size) {
  dev_ = &dev;
  rank_ = rank;
  peers_.assign(static_cast<size_t>(size), Peer{});
  mr_ = GREX_TRY(dev.allocate(kBytes * (1 + static_cast<size_t>(size) * kDepth)));
  std::memset(mr_->addr(), 0, mr_->length());
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    for (size_t k = 0; k < kDepth; ++k) GREX_TRY(repost(eng, p, k));
  }
  return ok();
}

Result<void> Notices::repost(Engine& eng, int peer, size_t k) {
  std::memset(slot(peer, k), 0, kBytes);
  Peer& p = peers_[static_cast<size_t>(peer)];
  const auto off = static_cast<uint64_t>(slot(peer, k) - static_cast<uint8_t*>(mr_->addr()));
  p.posted[k] = GREX_TRY(eng.recv_background(peer, mr_, off, kBytes, kTag));
  return ok();
}

Result<OpId> Notices::post(Engine& eng, int dst, uint32_t tag, uint64_t bytes) {
  const Wire w{tag, kMarker, bytes};
  std::memcpy(mr_->addr(), &w, sizeof w);
  return eng.send(dst, mr_, 0, kBytes, kTag);
}

Result<void> Notices::service(Engine& eng) {
  for (size_t i = 0; i < peers_.size(); ++i) {
    Peer& p = peers_[i];
    if (static_cast<int>(i) == rank_ || p.failed) continue;
    while (eng.done(p.posted[p.head])) {
      Wire w;
      std::memcpy(&w, slot(static_cast<int>(i), p.head), sizeof w);
      if (w.marker != kMarker) {  // the receive failed: the peer is gone
        p.failed = true;
        break;
      }
      auto owed = p.owed.find(w.tag);
      if (owed != p.owed.end()) {
        if (--owed->second == 0) p.owed.erase(owed);
      } else {
        p.landed.push_back(Landed{order_++, w.tag, w.bytes});
      }
      GREX_TRY(repost(eng, static_cast<int>(i), p.head));
      p.head = (p.head + 1) % kDepth;
    }
  }
  return ok();
}

void Notices::consume(int src, uint32_t tag) {
  Peer& p = peers_[static_cast<size_t>(src)];
  for (auto it = p.landed.begin(); it != p.landed.end(); ++it)
    if (it->tag == tag) {
      p.landed.erase(it);
      return;
    }
  ++p.owed[tag];
}

std::optional<std::pair<int, uint64_t>> Notices::peek(uint32_t tag, int src) const {
  std::optional<std::pair<int, uint64_t>> best;
  uint64_t best_order = 0;
  for (size_t i = 0; i < peers_.size(); ++i) {
    if (src >= 0 && static_cast<int>(i) != src) continue;
    for (const Landed& l : peers_[i].landed)
      if (l.tag == tag) {
        if (!best || l.order < best_order) {
          best = std::make_pair(static_cast<int>(i), l.bytes);
          best_order = l.order;
        }
        break;
      }
  }
  return best;
}

}  // namespace grex::detail
