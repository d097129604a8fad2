// SPDX-License-Identifier: Apache-2.0
// Binomial-tree broadcast, pipelined in chunks: a rank forwards each chunk to
// its children as soon as it has it; barrier by dissemination.
#include <vector>

#include "collectives/algorithm.h"
#include "collectives/stream.h"

namespace grex::detail {

// Broadcasts a.count bytes at a.recv from member a.root.
Result<void> tree_broadcast(Context& c, const Group& g, const CollArgs& a) {
  void* buf = a.recv;
  const size_t bytes = a.count;
  const int root = a.root;
  const int n = g.size();
  const int vr = (g.rank() - root + n) % n;  // rank relative to the root
  int parent = -1;
  int mask = 1;
  while (mask < n) {
    if (vr & mask) {
      parent = (vr - mask + root) % n;
      break;
    }
    mask <<= 1;
  }
  std::vector<int> children;
  for (int m = mask >> 1; m > 0; m >>= 1)
    if (vr + m < n) children.push_back((vr + m + root) % n);

  ScopedRegistration reg(*c.bufs);
  GREX_TRY(reg.acquire(buf, bytes));
  const uint64_t off0 = reg.offset(buf);
  const size_t chunk = c.opts->chunk_bytes;
  const size_t nchunks = (bytes + chunk - 1) / chunk;
  const uint64_t tag = a.tag;
  Engine& e = g.engine();
  Deadline dl = c.deadline();

  std::vector<OpId> sends;
  sends.reserve(nchunks * children.size());
  auto forward = [&](size_t k) -> Result<void> {
    uint64_t off = k * chunk;
    uint64_t len = std::min<uint64_t>(chunk, bytes - off);
    for (int ch : children) sends.push_back(GREX_TRY(g.send(ch, reg.get(), off0 + off, len, tag)));
    return ok();
  };
  if (parent < 0) {
    for (size_t k = 0; k < nchunks; ++k) GREX_TRY(forward(k));
  } else {
    OpId rids[kStreamWindow];
    size_t pr = 0, dr = 0, spins = 0;
    const uint64_t t0 = now_ns();
    bool warned = false;
    while (dr < nchunks) {
      while (pr < nchunks && pr - dr < kStreamWindow) {
        uint64_t off = pr * chunk;
        rids[pr % kStreamWindow] =
            GREX_TRY(g.recv(parent, reg.get(), off0 + off, std::min<uint64_t>(chunk, bytes - off), tag));
        ++pr;
      }
      GREX_TRY(e.progress());
      while (dr < pr && e.done(rids[dr % kStreamWindow])) GREX_TRY(forward(dr++));
      if ((++spins & 1023) == 0) {
        e.warn_if_long(t0, &warned, "broadcast");
        if (dl.expired()) return e.timeout_error("broadcast");
      }
    }
  }
  return e.wait_all(sends, dl, "broadcast");
}

Result<void> dissemination_barrier(Context& c, const Group& g, const CollArgs& a) {
  const uint64_t tag = a.tag;
  const int n = g.size(), r = g.rank();
  Deadline dl = c.deadline();
  for (int k = 1, round = 0; k < n; k <<= 1, ++round) {
    int to = (r + k) % n;
    int from = (r - k + n) % n;
    OpId ids[2];
    ids[0] = GREX_TRY(g.recv(from, nullptr, 0, 0, tag | static_cast<uint64_t>(round)));
    ids[1] = GREX_TRY(g.send(to, nullptr, 0, 0, tag | static_cast<uint64_t>(round)));
    GREX_TRY(g.engine().wait_all(ids, dl, "barrier"));
  }
  return ok();
}

}  // namespace grex::detail
