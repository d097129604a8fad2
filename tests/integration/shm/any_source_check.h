// SPDX-License-Identifier: Apache-2.0
// Receives from any source (CommOptions::any_source), checked on whatever
// backend `o` names: the shm, dpdk and verbs tests run it alike.
#pragma once

#include <cstring>
#include <set>
#include <vector>

#include "harness.h"

namespace grex::test {

inline uint8_t any_byte(int from, uint32_t round, size_t i) {
  return static_cast<uint8_t>(i * 13 + static_cast<size_t>(from) * 71 + round * 5);
}

/// Every rank but 0 sends to rank 0; rank 0 takes them with recv_any and
/// must see each sender once with its bytes. Then named receives and recv_any
/// share one tag (the named one takes its sender's message, recv_any the
/// other), iprobe sees a message before it is received, a chunked message
/// (past the staging threshold) arrives through recv_any, and a size that
/// differs fails naming the sender. `big`: the largest message.
inline int any_source_rank(Rank& r, CommOptions o, size_t big = (9u << 20) + 3) {
  o.any_source = true;
  auto c = make_comm(r, o);
  RANK_CHECK(c != nullptr);
  const int n = r.size;
  // 1. Everyone to rank 0, three rounds, sizes from eager to rendezvous.
  for (uint32_t round = 0; round < 3; ++round) {
    const size_t bytes = round == 0 ? 24 : round == 1 ? 70'000 : big;
    std::vector<uint8_t> buf(bytes);
    if (r.rank != 0) {
      for (size_t i = 0; i < bytes; ++i) buf[i] = any_byte(r.rank, round, i);
      RANK_OK(c->send(buf.data(), bytes, 0, 40 + round));
    } else {
      std::set<int> seen;
      for (int k = 1; k < n; ++k) {
        std::fill(buf.begin(), buf.end(), 0);
        auto from = c->recv_any(buf.data(), bytes, 40 + round);
        RANK_OK(from);
        RANK_CHECK(*from >= 1 && *from < n && seen.insert(*from).second);
        for (size_t i = 0; i < bytes; ++i)
          if (buf[i] != any_byte(*from, round, i)) {
            std::fprintf(stderr, "round %u: byte %zu from rank %d wrong\n", round, i, *from);
            return 1;
          }
      }
    }
    RANK_OK(c->barrier());
  }
  // 2. iprobe: nothing yet; then rank 1's message is seen, with its size,
  // before a named receive takes it.
  if (r.rank == 0) {
    auto none = c->iprobe(50);
    RANK_OK(none);
    RANK_CHECK(!none->has_value());
  }
  RANK_OK(c->barrier());
  if (r.rank == 1) {
    uint32_t v = 0xfeed;
    RANK_OK(c->send(&v, sizeof v, 0, 50));
  } else if (r.rank == 0) {
    std::optional<Probe> p;
    for (int spins = 0; !p && spins < 1'000'000; ++spins) {
      auto q = c->iprobe(50);
      RANK_OK(q);
      p = *q;
    }
    RANK_CHECK(p && p->source == 1 && p->bytes == 4);
    auto only1 = c->iprobe(50, 1);
    RANK_OK(only1);
    RANK_CHECK(only1->has_value());
    if (n > 2) {
      auto from2 = c->iprobe(50, 2);
      RANK_OK(from2);
      RANK_CHECK(!from2->has_value());
    }
    uint32_t v = 0;
    RANK_OK(c->recv(&v, sizeof v, 1, 50));
    RANK_CHECK(v == 0xfeed);
    auto gone = c->iprobe(50);
    RANK_OK(gone);
    RANK_CHECK(!gone->has_value());
  }
  RANK_OK(c->barrier());
  // 3. One tag, two messages from rank 1: a named receive takes the first,
  // recv_any the second (its notice, not the first's).
  if (r.rank == 1) {
    for (uint32_t v : {111u, 222u}) RANK_OK(c->send(&v, sizeof v, 0, 60));
  } else if (r.rank == 0) {
    uint32_t a = 0, b = 0;
    RANK_OK(c->recv(&a, sizeof a, 1, 60));
    auto from = c->recv_any(&b, sizeof b, 60);
    RANK_OK(from);
    RANK_CHECK(*from == 1 && a == 111 && b == 222);
  }
  RANK_OK(c->barrier());
  // 4. sendrecv on a ring still works with notices on, and leaves none.
  {
    const int next = (r.rank + 1) % n, prev = (r.rank + n - 1) % n;
    uint64_t out = 1000u + static_cast<uint64_t>(r.rank), in = 0;
    RANK_OK(c->sendrecv(&out, sizeof out, next, &in, sizeof in, prev, 70));
    RANK_CHECK(in == 1000u + static_cast<uint64_t>(prev));
    auto left = c->iprobe(70);
    RANK_OK(left);
    RANK_CHECK(!left->has_value());
  }
  RANK_OK(c->barrier());
  // 5. A size that differs: kMismatch naming the sender (it breaks the
  // communicator, as a named receive of the wrong size does), last. The
  // other ranks stay until rank 0 checked (a rank that exits while rank 0
  // waits on any rank is named instead), meeting through the store.
  if (r.rank == 1) {
    uint64_t v = 7;
    (void)c->send(&v, sizeof v, 0, 80);  // may fail once rank 0 gave up
  } else if (r.rank == 0) {
    uint32_t small = 0;
    auto bad = c->recv_any(&small, sizeof small, 80);
    RANK_CHECK(!bad.ok() && bad.error().code() == Errc::kMismatch);
    RANK_CHECK(bad.error().message().find("rank 1 sent 8 bytes") != std::string::npos);
  }
  RANK_OK(r.bootstrap->barrier("any-source-done"));
  return 0;
}

}  // namespace grex::test
