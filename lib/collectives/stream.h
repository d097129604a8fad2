// SPDX-License-Identifier: Apache-2.0
// One pipelined exchange step: send a byte range to one peer while receiving a
// byte range from another, in chunks, with a bounded window of each in flight.
#pragma once

#include <algorithm>
#include <cstring>

#include "collectives/context.h"
#include "collectives/group.h"

namespace grex::detail {

/// Where received chunks land: a fixed range (dst != nullptr) or the scratch ring.
struct StreamSide {
  int peer = -1;
  const MemoryRegion* mr = nullptr;  // nullptr for the receive side: scratch ring
  uint64_t offset = 0;
  uint64_t length = 0;
  /// Send side: copy each chunk into the shared staging ring first, so the
  /// peer reads it through its mapping instead of with a slower CMA copy.
  bool stage = false;
};

inline constexpr size_t kStreamWindow = 8;

/// Runs the step (peers are member indexes of `g`). `on_chunk(index, data,
/// offset_in_range, length)` is called in chunk order as each received chunk
/// lands (data points at it); `before_send(offset_in_range, length)` just
/// before each send chunk is posted (to fill it: the compressed allreduce
/// rounds a chunk while earlier ones are on the wire).
template <class OnChunk, class BeforeSend>
Result<void> stream(Context& c, const Group& g, const StreamSide& send, const StreamSide& recv, size_t chunk,
                    uint64_t tag, OnChunk on_chunk, BeforeSend before_send) {
  Engine& e = g.engine();
  MemoryRegion* scratch_mr = c.bufs->scratch();
  MemoryRegion* staging_mr = c.bufs->staging();
  const size_t ns = send.peer < 0 ? 0 : (send.length + chunk - 1) / chunk;
  const size_t nr = recv.peer < 0 ? 0 : (recv.length + chunk - 1) / chunk;
  OpId sids[kStreamWindow];
  OpId rids[kStreamWindow];
  size_t ps = 0, ds = 0, pr = 0, dr = 0;
  uint8_t* scratch = scratch_mr != nullptr ? static_cast<uint8_t*>(scratch_mr->addr()) : nullptr;
  SpinDeadline deadline(c.opts->timeout_ms);  // most exchanges end before its first check
  size_t spins = 0;
  uint64_t t0 = 0;  // read at the first check, as the deadline's clock (spin loops mostly end before)
  bool warned = false;
  while (dr < nr || ds < ns) {
    // What the window has room for goes out in one post call per side.
    if (pr < nr && pr - dr < kStreamWindow) {
      RecvRequest reqs[kStreamWindow];
      OpId ids[kStreamWindow];
      const size_t first = pr;
      size_t k = 0;
      for (; pr < nr && pr - dr < kStreamWindow; ++pr, ++k) {
        uint64_t off = pr * chunk;
        uint64_t len = std::min<uint64_t>(chunk, recv.length - off);
        reqs[k] = recv.mr != nullptr ? RecvRequest{recv.mr, recv.offset + off, len, tag, 0}
                                     : RecvRequest{scratch_mr, (pr % kStreamWindow) * chunk, len, tag, 0};
      }
      GREX_TRY(g.recv_batch(recv.peer, std::span(reqs, k), ids));
      for (size_t i = 0; i < k; ++i) rids[(first + i) % kStreamWindow] = ids[i];
    }
    if (ps < ns && ps - ds < kStreamWindow) {
      SendRequest reqs[kStreamWindow];
      OpId ids[kStreamWindow];
      const size_t first = ps;
      size_t k = 0;
      for (; ps < ns && ps - ds < kStreamWindow; ++ps, ++k) {
        uint64_t off = ps * chunk;
        uint64_t len = std::min<uint64_t>(chunk, send.length - off);
        before_send(off, len);
        if (send.stage) {
          uint64_t slot = (ps % kStreamWindow) * chunk;
          std::memcpy(static_cast<uint8_t*>(staging_mr->addr()) + slot,
                      static_cast<const uint8_t*>(send.mr->addr()) + send.offset + off, len);
          reqs[k] = SendRequest{staging_mr, slot, len, tag, 0};
        } else {
          reqs[k] = SendRequest{send.mr, send.offset + off, len, tag, 0};
        }
      }
      GREX_TRY(g.send_batch(send.peer, std::span(reqs, k), ids));
      for (size_t i = 0; i < k; ++i) sids[(first + i) % kStreamWindow] = ids[i];
    }
    GREX_TRY(e.progress());
    while (dr < pr && e.done(rids[dr % kStreamWindow])) {
      uint64_t off = dr * chunk;
      uint64_t len = std::min<uint64_t>(chunk, recv.length - off);
      const uint8_t* data = recv.mr != nullptr
                                ? static_cast<const uint8_t*>(recv.mr->addr()) + recv.offset + off
                                : scratch + (dr % kStreamWindow) * chunk;
      on_chunk(dr, data, off, len);
      ++dr;
    }
    while (ds < ps && e.done(sids[ds % kStreamWindow])) ++ds;
    if ((++spins & 1023) == 0) {
      if (t0 == 0) t0 = now_ns();
      e.warn_if_long(t0, &warned, "exchange");
      if (deadline.expired()) return e.timeout_error("exchange");
    }
  }
  return ok();
}

template <class OnChunk>
Result<void> stream(Context& c, const Group& g, const StreamSide& send, const StreamSide& recv, size_t chunk,
                    uint64_t tag, OnChunk on_chunk) {
  return stream(c, g, send, recv, chunk, tag, on_chunk, [](uint64_t, uint64_t) {});
}

}  // namespace grex::detail
