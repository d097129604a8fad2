// SPDX-License-Identifier: Apache-2.0
// Alltoallv across hosts (issue 27: embedding exchanges), aggregated per host
// pair as hier_collectives.cc's alltoall: each host's rank 0 gathers its
// ranks' counts and data, sends host x one bundle on rail 0 (for each of x's
// ranks, what each local rank sends it), and hands each local rank what came
// for it. Each host pair exchanges one message instead of one per rank pair.
//
// The counts differ per rank, so the choice against the flat pairwise
// exchange is made from the largest vector any rank sends, agreed by one
// small allreduce (Communicator::alltoallv): the same on every rank.
#include <cstring>
#include <string>
#include <vector>

#include "collectives/algorithm.h"
#include "collectives/hierarchy.h"

namespace grex::detail {

namespace {

// Offsets of consecutive pieces: start[r] = counts[0] + ... + counts[r-1].
std::vector<uint64_t> prefix(const uint64_t* counts, size_t n) {
  std::vector<uint64_t> start(n + 1, 0);
  for (size_t r = 0; r < n; ++r) start[r + 1] = start[r] + counts[r];
  return start;
}

}  // namespace

Result<void> hierarchical_alltoallv(Context& c, const void* sendbuf, const std::vector<uint64_t>& scounts,
                                    const std::vector<uint64_t>& sdispls, void* recvbuf,
                                    const std::vector<uint64_t>& rcounts, const std::vector<uint64_t>& rdispls,
                                    uint64_t tag) {
  Hierarchy& h = *c.hier;
  enter_levels(c, h);
  const size_t n = h.host_of.size(), H = h.hosts.size();
  const int me = c.rank;
  const auto& here = h.hosts[static_cast<size_t>(h.host_of[static_cast<size_t>(me)])];
  const size_t L = here.size();
  const bool lead = h.local_of[static_cast<size_t>(me)] == 0;
  const uint64_t tag_data = tag | (1ull << 17), tag_out = tag | (1ull << 18);
  // This rank's pieces, in destination rank order, and its counts for the rank 0.
  const std::vector<uint64_t> spos = prefix(scounts.data(), n), rpos = prefix(rcounts.data(), n);
  std::vector<uint8_t> packed(spos[n]), got(rpos[n]);
  for (size_t r = 0; r < n; ++r)
    if (scounts[r] > 0) std::memcpy(packed.data() + spos[r], static_cast<const uint8_t*>(sendbuf) + sdispls[r], scounts[r]);
  std::vector<uint64_t> mine(scounts);
  mine.insert(mine.end(), rcounts.begin(), rcounts.end());
  // counts[k]: local rank k's send counts, then its receive counts (2n each).
  std::vector<uint64_t> counts(lead ? L * 2 * n : 0);
  const std::vector<uint64_t> count_bytes(L, 2 * n * sizeof(uint64_t));
  GREX_TRY(via_lead(h.local, lead, true, mine.data(), counts.data(), 2 * n * sizeof(uint64_t), count_bytes, tag));
  // Per local rank: its pieces' offsets, sent and received, and their totals.
  std::vector<std::vector<uint64_t>> from_k(lead ? L : 0), to_k(lead ? L : 0);
  std::vector<uint64_t> sent(L), owed(L);
  for (size_t k = 0; lead && k < L; ++k) {
    from_k[k] = prefix(&counts[k * 2 * n], n);
    to_k[k] = prefix(&counts[k * 2 * n + n], n);
    sent[k] = from_k[k][n];
    owed[k] = to_k[k][n];
  }
  uint64_t total_in = 0, total_out = 0;
  for (size_t k = 0; k < L; ++k) total_in += sent[k], total_out += owed[k];
  if (lead) {  // the bundles carry a length per piece: L x n of them each way
    const uint64_t lens = L * n * sizeof(uint64_t);
    GREX_TRY(grow_buffer(c, h.pack, std::max(total_in, total_out + lens)));
    GREX_TRY(grow_buffer(c, h.mid, std::max(total_in + lens, total_out)));
  }
  GREX_TRY(via_lead(h.local, lead, true, packed.data(), lead ? h.pack.data() : nullptr, spos[n], sent, tag_data));
  if (lead) {
    auto sc_of = [&](size_t k, size_t r) { return counts[k * 2 * n + r]; };      // local k sends rank r
    auto rc_of = [&](size_t k, size_t r) { return counts[k * 2 * n + n + r]; };  // local k gets from rank r
    std::vector<uint64_t> base(L + 1, 0), out_base(L + 1, 0);
    for (size_t k = 0; k < L; ++k) {
      base[k + 1] = base[k] + sent[k];
      out_base[k + 1] = out_base[k] + owed[k];
    }
    // mid: bundle x = the pieces' lengths, then the pieces: for each of x's
    // ranks d, what each local rank sends d. The receiver checks each length
    // against what its rank expects (equal totals could hide a pair that
    // disagrees), as the pairwise exchange does per pair.
    std::vector<uint64_t> bsc(H), bsd(H), brc(H), brd(H);
    uint64_t at = 0, in_at = 0;
    for (size_t x = 0; x < H; ++x) {
      bsd[x] = at;
      const size_t pieces = h.hosts[x].size() * L;
      uint8_t* lens = h.mid.data() + at;  // not aligned: the pieces before are any length
      at += pieces * sizeof(uint64_t);
      for (int d : h.hosts[x])
        for (size_t k = 0; k < L; ++k) {
          const uint64_t len = sc_of(k, static_cast<size_t>(d));
          std::memcpy(lens, &len, sizeof len);
          lens += sizeof len;
          if (len > 0) std::memcpy(h.mid.data() + at, h.pack.data() + base[k] + from_k[k][static_cast<size_t>(d)], len);
          at += len;
        }
      bsc[x] = at - bsd[x];
      brd[x] = in_at;  // from host x: the lengths, then for each local rank k what each of x's ranks sends it
      in_at += L * h.hosts[x].size() * sizeof(uint64_t);
      for (size_t k = 0; k < L; ++k)
        for (int s : h.hosts[x]) in_at += rc_of(k, static_cast<size_t>(s));
      brc[x] = in_at - brd[x];
    }
    if (H > 1) {
      GREX_TRY(pairwise_alltoallv(h.rail.ctx, *h.rail.group, h.mid.data(), bsc, bsd, h.pack.data(), brc, brd, tag));
    } else if (at > 0) {
      std::memcpy(h.pack.data(), h.mid.data(), at);
    }
    // mid: local rank k's pieces in source rank order, one rank after another.
    for (size_t x = 0; x < H; ++x) {
      const uint8_t* lens = h.pack.data() + brd[x];
      uint64_t pos = brd[x] + L * h.hosts[x].size() * sizeof(uint64_t);
      for (size_t k = 0; k < L; ++k)
        for (int s : h.hosts[x]) {
          const uint64_t len = rc_of(k, static_cast<size_t>(s));
          uint64_t theirs;
          std::memcpy(&theirs, lens, sizeof theirs);
          lens += sizeof theirs;
          if (theirs != len)
            return Error(Errc::kMismatch, "alltoallv: rank " + std::to_string(s) + " sends " + std::to_string(theirs) +
                                              " bytes to rank " + std::to_string(here[k]) + ", which expects " +
                                              std::to_string(len))
                .rank(c.rank)
                .peer(s);
          if (len > 0) std::memcpy(h.mid.data() + out_base[k] + to_k[k][static_cast<size_t>(s)], h.pack.data() + pos, len);
          pos += len;
        }
    }
  }
  GREX_TRY(via_lead(h.local, lead, false, lead ? h.mid.data() : nullptr, got.data(), rpos[n], owed, tag_out));
  for (size_t r = 0; r < n; ++r)
    if (rcounts[r] > 0) std::memcpy(static_cast<uint8_t*>(recvbuf) + rdispls[r], got.data() + rpos[r], rcounts[r]);
  return ok();
}

}  // namespace grex::detail
