// SPDX-License-Identifier: Apache-2.0
// Binomial-tree broadcast, pipelined in chunks: a rank forwards each chunk to
// its children as soon as it has it; barrier by dissemination.
#include <vector>

#include "collectives/comm_impl.h"
#include "collectives/stream.h"

namespace grex {

Result<void> Communicator::Impl::tree_broadcast(void* buf, size_t bytes, int root) {
  const int n = size;
  const int vr = (rank - root + n) % n;  // rank relative to the root
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

  ScopedRegistration reg(*this);
  GREX_TRY(reg.acquire(buf, bytes));
  const uint64_t off0 = reg.offset(buf);
  const size_t chunk = opts.chunk_bytes;
  const size_t nchunks = (bytes + chunk - 1) / chunk;
  const uint64_t tag = next_tag_base();
  detail::Engine& e = *engine;
  Deadline dl = deadline();

  std::vector<detail::OpId> sends;
  sends.reserve(nchunks * children.size());
  auto forward = [&](size_t c) -> Result<void> {
    uint64_t off = c * chunk;
    uint64_t len = std::min<uint64_t>(chunk, bytes - off);
    for (int ch : children) sends.push_back(GREX_TRY(e.send(ch, reg.get(), off0 + off, len, tag)));
    return ok();
  };
  if (parent < 0) {
    for (size_t c = 0; c < nchunks; ++c) GREX_TRY(forward(c));
  } else {
    detail::OpId rids[detail::kStreamWindow];
    size_t pr = 0, dr = 0, spins = 0;
    while (dr < nchunks) {
      while (pr < nchunks && pr - dr < detail::kStreamWindow) {
        uint64_t off = pr * chunk;
        rids[pr % detail::kStreamWindow] =
            GREX_TRY(e.recv(parent, reg.get(), off0 + off, std::min<uint64_t>(chunk, bytes - off), tag));
        ++pr;
      }
      GREX_TRY(e.progress());
      while (dr < pr && e.done(rids[dr % detail::kStreamWindow])) GREX_TRY(forward(dr++));
      if ((++spins & 1023) == 0 && dl.expired()) return e.timeout_error("broadcast");
    }
  }
  return e.wait_all(sends, dl, "broadcast");
}

Result<void> Communicator::Impl::dissemination_barrier() {
  const uint64_t tag = next_tag_base();
  Deadline dl = deadline();
  for (int k = 1, round = 0; k < size; k <<= 1, ++round) {
    int to = (rank + k) % size;
    int from = (rank - k + size) % size;
    detail::OpId ids[2];
    ids[0] = GREX_TRY(engine->recv(from, nullptr, 0, 0, tag | static_cast<uint64_t>(round)));
    ids[1] = GREX_TRY(engine->send(to, nullptr, 0, 0, tag | static_cast<uint64_t>(round)));
    GREX_TRY(engine->wait_all(ids, dl, "barrier"));
  }
  return ok();
}

}  // namespace grex
