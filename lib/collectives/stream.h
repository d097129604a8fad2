// SPDX-License-Identifier: Apache-2.0
// One pipelined exchange step: send a byte range to one peer while receiving a
// byte range from another, in chunks, with a bounded window of each in flight.
// Consecutive steps can run as one pipeline (stream_steps): each step's
// chunks follow the one before's on each side, inside the same window, so a
// step starts while the one before still ends.
#pragma once

#include <algorithm>
#include <cstring>
#include <span>

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

/// One step of a stream_steps() call: what goes to the send side's peer and
/// comes from the receive side's, under its own tag.
struct StreamStep {
  StreamSide send, recv;
  uint64_t tag = 0;
};

/// What else a step after the first waits for, chunk j against chunk j of
/// the step before (the two ranges then hold chunks of the same sizes).
struct StreamChain {
  /// Receive chunk j of step i lands where send chunk j of step i - 1 is
  /// read from: it is posted only after that send completed.
  bool recv_after_send = false;
};

namespace stream_detail {
/// A position in the steps' chunks on one side: step, chunk in it.
struct Cursor {
  size_t step = 0, j = 0;
  /// Before (step, j): every chunk up to it has passed.
  bool past(size_t s, size_t k) const noexcept { return step > s || (step == s && j > k); }
};
}  // namespace stream_detail

/// Runs `steps` in order on each side, as one pipeline: a side's chunks are
/// step 0's, then step 1's, ..., with one window of each side in flight
/// across them. Send chunk j of step i is what on_chunk made of receive chunk
/// j of step i - 1: it is posted only after that chunk was handed over, so a
/// ring's chunks go around without waiting for a step's end, as NCCL's do.
/// `on_chunk(step, index, data, offset_in_range, length)` is
/// called in that order as each received chunk lands (data points at it);
/// `before_send(step, offset_in_range, length)` just before each send chunk
/// is posted (to fill it: the compressed allreduce rounds a chunk while
/// earlier ones are on the wire).
template <class OnChunk, class BeforeSend>
Result<void> stream_steps(Context& c, const Group& g, std::span<const StreamStep> steps, size_t chunk,
                          StreamChain chain, OnChunk on_chunk, BeforeSend before_send) {
  using stream_detail::Cursor;
  Engine& e = g.engine();
  MemoryRegion* scratch_mr = c.bufs->scratch();
  MemoryRegion* staging_mr = c.bufs->staging();
  auto chunks = [chunk](const StreamSide& s) { return s.peer < 0 ? size_t{0} : (s.length + chunk - 1) / chunk; };
  auto sends = [&](size_t i) { return chunks(steps[i].send); };
  auto recvs = [&](size_t i) { return chunks(steps[i].recv); };
  // The next chunk (skipping steps with none on this side).
  auto advance = [&](Cursor& at, auto count) {
    ++at.j;
    while (at.step < steps.size() && at.j >= count(at.step)) {
      ++at.step;
      at.j = 0;
    }
  };
  auto first = [&](auto count) {
    Cursor at{0, 0};
    while (at.step < steps.size() && count(at.step) == 0) ++at.step;
    return at;
  };
  size_t ns = 0, nr = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    ns += sends(i);
    nr += recvs(i);
  }
  Cursor cps = first(sends), cds = cps, cpr = first(recvs), cdr = cpr;
  OpId sids[kStreamWindow];
  OpId rids[kStreamWindow];
  size_t ps = 0, ds = 0, pr = 0, dr = 0;
  uint8_t* scratch = scratch_mr != nullptr ? static_cast<uint8_t*>(scratch_mr->addr()) : nullptr;
  SpinDeadline deadline(c.opts->timeout_ms);  // most exchanges end before its first check
  size_t spins = 0;
  uint64_t t0 = 0;  // read at the first check, as the deadline's clock (spin loops mostly end before)
  bool warned = false;
  while (dr < nr || ds < ns) {
    // What the window has room for goes out in one post call per side (and peer).
    if (pr < nr && pr - dr < kStreamWindow) {
      RecvRequest reqs[kStreamWindow];
      OpId ids[kStreamWindow];
      const size_t at = pr;
      const int peer = steps[cpr.step].recv.peer;
      size_t k = 0;
      for (; pr < nr && pr - dr < kStreamWindow; ++pr, ++k, advance(cpr, recvs)) {
        const StreamStep& st = steps[cpr.step];
        if (st.recv.peer != peer) break;
        if (cpr.step > 0 && chain.recv_after_send && !cds.past(cpr.step - 1, cpr.j)) break;
        uint64_t off = cpr.j * chunk;
        uint64_t len = std::min<uint64_t>(chunk, st.recv.length - off);
        reqs[k] = st.recv.mr != nullptr ? RecvRequest{st.recv.mr, st.recv.offset + off, len, st.tag, 0}
                                        : RecvRequest{scratch_mr, (pr % kStreamWindow) * chunk, len, st.tag, 0};
      }
      if (k > 0) GREX_TRY(g.recv_batch(peer, std::span(reqs, k), ids));
      for (size_t i = 0; i < k; ++i) rids[(at + i) % kStreamWindow] = ids[i];
    }
    if (ps < ns && ps - ds < kStreamWindow) {
      SendRequest reqs[kStreamWindow];
      OpId ids[kStreamWindow];
      const size_t at = ps;
      const int peer = steps[cps.step].send.peer;
      size_t k = 0;
      for (; ps < ns && ps - ds < kStreamWindow; ++ps, ++k, advance(cps, sends)) {
        const StreamStep& st = steps[cps.step];
        if (st.send.peer != peer) break;
        if (cps.step > 0 && !cdr.past(cps.step - 1, cps.j)) break;  // not made yet
        uint64_t off = cps.j * chunk;
        uint64_t len = std::min<uint64_t>(chunk, st.send.length - off);
        before_send(cps.step, off, len);
        if (st.send.stage) {
          uint64_t slot = (ps % kStreamWindow) * chunk;
          std::memcpy(static_cast<uint8_t*>(staging_mr->addr()) + slot,
                      static_cast<const uint8_t*>(st.send.mr->addr()) + st.send.offset + off, len);
          reqs[k] = SendRequest{staging_mr, slot, len, st.tag, 0};
        } else {
          reqs[k] = SendRequest{st.send.mr, st.send.offset + off, len, st.tag, 0};
        }
      }
      if (k > 0) GREX_TRY(g.send_batch(peer, std::span(reqs, k), ids));
      for (size_t i = 0; i < k; ++i) sids[(at + i) % kStreamWindow] = ids[i];
    }
    GREX_TRY(e.progress());
    while (dr < pr && e.done(rids[dr % kStreamWindow])) {
      const StreamSide& s = steps[cdr.step].recv;
      uint64_t off = cdr.j * chunk;
      uint64_t len = std::min<uint64_t>(chunk, s.length - off);
      const uint8_t* data = s.mr != nullptr ? static_cast<const uint8_t*>(s.mr->addr()) + s.offset + off
                                            : scratch + (dr % kStreamWindow) * chunk;
      on_chunk(cdr.step, cdr.j, data, off, len);
      ++dr;
      advance(cdr, recvs);
    }
    while (ds < ps && e.done(sids[ds % kStreamWindow])) {
      ++ds;
      advance(cds, sends);
    }
    if ((++spins & 1023) == 0) {
      if (t0 == 0) t0 = now_ns();
      e.warn_if_long(t0, &warned, "exchange");
      if (deadline.expired()) return e.timeout_error("exchange");
    }
  }
  return ok();
}

/// One step: `on_chunk(index, data, offset_in_range, length)`, `before_send(offset_in_range, length)`.
template <class OnChunk, class BeforeSend>
Result<void> stream(Context& c, const Group& g, const StreamSide& send, const StreamSide& recv, size_t chunk,
                    uint64_t tag, OnChunk on_chunk, BeforeSend before_send) {
  const StreamStep step{send, recv, tag};
  return stream_steps(
      c, g, std::span(&step, 1), chunk, StreamChain{},
      [&](size_t, size_t i, const uint8_t* data, uint64_t off, uint64_t len) { on_chunk(i, data, off, len); },
      [&](size_t, uint64_t off, uint64_t len) { before_send(off, len); });
}

template <class OnChunk>
Result<void> stream(Context& c, const Group& g, const StreamSide& send, const StreamSide& recv, size_t chunk,
                    uint64_t tag, OnChunk on_chunk) {
  return stream(c, g, send, recv, chunk, tag, on_chunk, [](uint64_t, uint64_t) {});
}

}  // namespace grex::detail
