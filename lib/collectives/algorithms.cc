// SPDX-License-Identifier: Apache-2.0
// The collectives beyond ring allreduce and tree broadcast:
//  - allreduce by recursive doubling (whole vector each step: log2(n) steps,
//    latency-optimal) and by Rabenseifner (reduce-scatter by recursive halving,
//    allgather by recursive doubling: bandwidth-optimal in 2 log2(n) steps);
//    both fold the ranks beyond the largest power of two into their neighbours
//    first (MPICH's scheme), so any n works
//  - allreduce as tree reduce + tree broadcast
//  - reduce (binomial tree), reduce_scatter and allgather (ring), alltoall
//    (pairwise exchange)
// Every reduction puts the lower ranks' operand first, so each algorithm
// gives the same bits on every rank and in every run.
#include <cstring>
#include <vector>

#include "collectives/algorithm.h"
#include "collectives/reduce.h"
#include "collectives/stream.h"

namespace grex::detail {
namespace {

constexpr auto kNoChunk = [](size_t, const uint8_t*, uint64_t, uint64_t) {};

int largest_pow2_at_most(int n) {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

// A registered byte range: user memory (scoped registration) or our work buffer.
struct Span {
  const MemoryRegion* mr = nullptr;
  uint64_t off = 0;  // offset of byte 0 inside mr
  uint8_t* p = nullptr;
};

}  // namespace

// Sends `len` bytes at `s`+`at` to `to` while receiving `rlen` bytes from `from`
// into `r`+`rat` (either side may be absent: peer -1).
static Result<void> exchange(Context& c, const Group& g, int to, const Span& s, uint64_t at, uint64_t len, int from,
                             const Span& r, uint64_t rat, uint64_t rlen, uint64_t tag) {
  StreamSide snd{to, s.mr, s.off + at, len};
  StreamSide rcv{from, r.mr, r.off + rat, rlen};
  return stream(c, g, snd, rcv, c.opts->chunk_bytes, tag, kNoChunk);
}

// Sends [at, at+len) of `s` to `to` (may be -1) while receiving `rlen` bytes
// from `from` and folding them into dst[rat..]: dst = lower-first(a, received).
static Result<void> exchange_reduce(Context& c, const Group& g, int to, const Span& s, uint64_t at, uint64_t len, int from,
                                    uint8_t* dst, const uint8_t* a, uint64_t rlen, bool mine_first, uint64_t tag,
                                    DataType type, ReduceOp op) {
  const size_t es = dtype_size(type);
  GREX_TRY(c.bufs->ensure_scratch(c.opts->chunk_bytes * kStreamWindow));
  StreamSide snd{to, s.mr, s.off + at, len};
  StreamSide rcv{from, nullptr, 0, rlen};
  return stream(c, g, snd, rcv, c.opts->chunk_bytes, tag,
                        [&](size_t, const uint8_t* data, uint64_t off, uint64_t n) {
                          if (mine_first)
                            reduce(dst + off, a + off, data, n / es, type, op);
                          else
                            reduce(dst + off, data, a + off, n / es, type, op);
                        });
}

// ---------------------------------------------------------------- allreduce

// Ranks beyond the largest power of two p: of the first 2*rem ranks, each even
// one hands its vector to the odd one above it and sits out; the others form a
// group of p with "virtual" ranks. Returns the virtual rank, or -1.
static int fold_in(int rank, int rem) {
  if (rank < 2 * rem) return rank % 2 == 1 ? rank / 2 : -1;
  return rank - rem;
}
static int real_rank(int v, int rem) { return v < rem ? 2 * v + 1 : v + rem; }

static Result<void> allreduce_recursive(Context& c, const Group& g, const CollArgs& a, bool halving) {
  const void* sendbuf = a.send;
  void* recvbuf = a.recv;
  const size_t count = a.count;
  const DataType type = a.type;
  const ReduceOp op = a.op;
  const int rank = g.rank(), size = g.size();
  const size_t es = dtype_size(type);
  const size_t bytes = count * es;
  ScopedRegistration rreg(*c.bufs);
  GREX_TRY(rreg.acquire(recvbuf, bytes));
  if (sendbuf != recvbuf) std::memcpy(recvbuf, sendbuf, bytes);
  Span acc{rreg.get(), rreg.offset(recvbuf), static_cast<uint8_t*>(recvbuf)};
  const int p2 = largest_pow2_at_most(size);
  const int rem = size - p2;
  const uint64_t tag = a.tag;
  const int v = fold_in(rank, rem);

  if (rank < 2 * rem) {
    if (v < 0) {
      GREX_TRY(exchange(c, g, rank + 1, acc, 0, bytes, -1, Span{}, 0, 0, tag | 0xffff));
    } else {  // the even neighbour's vector is the lower operand
      GREX_TRY(exchange_reduce(c, g, -1, Span{}, 0, 0, rank - 1, acc.p, acc.p, bytes, false, tag | 0xffff, type, op));
    }
  }
  if (v >= 0 && !halving) {
    // Recursive doubling: whole vector each step. The result of a step is
    // written to the other buffer, so what we send stays intact meanwhile.
    GREX_TRY(c.bufs->ensure_work(bytes));
    Span other{c.bufs->work(), 0, static_cast<uint8_t*>(c.bufs->work()->addr())};
    Span cur = acc;
    for (int dist = 1, step = 0; dist < p2; dist *= 2, ++step) {
      int partner = real_rank(v ^ dist, rem);
      bool mine_first = (v & dist) == 0;
      GREX_TRY(exchange_reduce(c, g, partner, cur, 0, bytes, partner, other.p, cur.p, bytes, mine_first,
                               tag | static_cast<uint64_t>(step), type, op));
      std::swap(cur, other);
    }
    if (cur.p != acc.p) std::memcpy(acc.p, cur.p, bytes);
    if (op == ReduceOp::kAvg) scale_avg(acc.p, count, type, size);
  } else if (v >= 0) {
    // Rabenseifner: reduce-scatter by recursive halving (each step keeps half
    // of the current range, folding in the partner's copy of it), then
    // allgather by recursive doubling back up.
    std::vector<std::pair<size_t, size_t>> ranges;  // elements, before each halving
    size_t lo = 0, hi = count;
    int step = 0;
    for (int dist = p2 / 2; dist >= 1; dist /= 2, ++step) {
      int partner = real_rank(v ^ dist, rem);
      size_t mid = lo + (hi - lo) / 2;
      bool lower = (v & dist) == 0;
      size_t klo = lower ? lo : mid, khi = lower ? mid : hi;
      size_t slo = lower ? mid : lo, shi = lower ? hi : mid;
      GREX_TRY(exchange_reduce(c, g, partner, acc, slo * es, (shi - slo) * es, partner, acc.p + klo * es,
                               acc.p + klo * es, (khi - klo) * es, lower, tag | static_cast<uint64_t>(step), type, op));
      ranges.emplace_back(lo, hi);
      lo = klo;
      hi = khi;
    }
    if (op == ReduceOp::kAvg) scale_avg(acc.p + lo * es, hi - lo, type, size);
    for (int dist = 1; dist < p2; dist *= 2, ++step) {
      auto [plo, phi] = ranges.back();
      ranges.pop_back();
      int partner = real_rank(v ^ dist, rem);
      size_t mid = plo + (phi - plo) / 2;
      bool lower = (v & dist) == 0;  // we kept the lower half at this level (ranges may be empty)
      size_t olo = lower ? mid : plo, ohi = lower ? phi : mid;
      GREX_TRY(exchange(c, g, partner, acc, lo * es, (hi - lo) * es, partner, acc, olo * es, (ohi - olo) * es,
                        tag | static_cast<uint64_t>(step)));
      lo = plo;
      hi = phi;
    }
  }
  if (rank < 2 * rem) {  // unfold: the odd rank returns the result
    if (v < 0)
      GREX_TRY(exchange(c, g, -1, Span{}, 0, 0, rank + 1, acc, 0, bytes, tag | 0xfffe));
    else
      GREX_TRY(exchange(c, g, rank - 1, acc, 0, bytes, -1, Span{}, 0, 0, tag | 0xfffe));
  }
  return ok();
}

Result<void> rabenseifner_allreduce(Context& c, const Group& g, const CollArgs& a) {
  return allreduce_recursive(c, g, a, true);
}

Result<void> recursive_doubling_allreduce(Context& c, const Group& g, const CollArgs& a) {
  return allreduce_recursive(c, g, a, false);
}

// Tree reduce to member 0, then tree broadcast from it (a phase tag of its own).
Result<void> tree_allreduce(Context& c, const Group& g, const CollArgs& a) {
  CollArgs r = a;
  r.root = 0;
  GREX_TRY(tree_reduce(c, g, r));
  CollArgs b{nullptr, a.recv, a.count * dtype_size(a.type), DataType::kUint8, a.op, 0, a.tag | (uint64_t{1} << 18)};
  return tree_broadcast(c, g, b);
}

// ---------------------------------------------------------------- reduce

// Binomial tree towards the root: a rank folds in its children (lowest
// subtree first), then hands its partial result to its parent.
Result<void> tree_reduce(Context& c, const Group& g, const CollArgs& a) {
  const void* sendbuf = a.send;
  void* recvbuf = a.recv;
  const size_t count = a.count;
  const DataType type = a.type;
  const ReduceOp op = a.op;
  const int rank = g.rank(), size = g.size();
  const int root = a.root;
  const size_t es = dtype_size(type);
  const size_t bytes = count * es;
  const int vr = (rank - root + size) % size;
  Span acc;
  ScopedRegistration rreg(*c.bufs);
  if (rank == root) {
    GREX_TRY(rreg.acquire(recvbuf, bytes));
    acc = Span{rreg.get(), rreg.offset(recvbuf), static_cast<uint8_t*>(recvbuf)};
  } else {
    GREX_TRY(c.bufs->ensure_work(bytes));
    acc = Span{c.bufs->work(), 0, static_cast<uint8_t*>(c.bufs->work()->addr())};
  }
  if (acc.p != sendbuf) std::memcpy(acc.p, sendbuf, bytes);
  const uint64_t tag = a.tag;
  for (int mask = 1; mask < size; mask <<= 1) {
    if ((vr & mask) != 0) {
      int parent = (vr - mask + root) % size;
      return exchange(c, g, parent, acc, 0, bytes, -1, Span{}, 0, 0, tag);
    }
    if (vr + mask < size) {
      int child = (vr + mask + root) % size;
      GREX_TRY(exchange_reduce(c, g, -1, Span{}, 0, 0, child, acc.p, acc.p, bytes, true, tag, type, op));
    }
  }
  if (op == ReduceOp::kAvg) scale_avg(acc.p, count, type, size);
  return ok();
}

// ---------------------------------------------------------------- ring collectives

// Ring reduce-scatter of n blocks of `count` elements: block b's sum travels
// b+1, b+2, ... and ends, complete, at rank b (written to recvbuf).
Result<void> ring_reduce_scatter(Context& c, const Group& g, const CollArgs& a) {
  const void* sendbuf = a.send;
  void* recvbuf = a.recv;
  const size_t count = a.count;
  const DataType type = a.type;
  const ReduceOp op = a.op;
  const int rank = g.rank(), size = g.size();
  const size_t es = dtype_size(type);
  const size_t block = count * es;
  const int n = size;
  auto mod = [n](int x) { return ((x % n) + n) % n; };
  ScopedRegistration sreg(*c.bufs);
  GREX_TRY(sreg.acquire(sendbuf, block * static_cast<size_t>(n)));
  GREX_TRY(c.bufs->ensure_work(block * static_cast<size_t>(n)));
  Span in{sreg.get(), sreg.offset(sendbuf), static_cast<uint8_t*>(const_cast<void*>(sendbuf))};
  Span acc{c.bufs->work(), 0, static_cast<uint8_t*>(c.bufs->work()->addr())};
  const uint64_t tag = a.tag;
  const int next = mod(rank + 1), prev = mod(rank - 1);
  for (int k = 0; k < n - 1; ++k) {
    int s = mod(rank - 1 - k), q = mod(rank - 2 - k);
    const Span& from = k == 0 ? in : acc;
    uint8_t* dst = k == n - 2 ? static_cast<uint8_t*>(recvbuf) : acc.p + static_cast<size_t>(q) * block;
    GREX_TRY(exchange_reduce(c, g, next, from, static_cast<size_t>(s) * block, block, prev, dst,
                             in.p + static_cast<size_t>(q) * block, block, true, tag | static_cast<uint64_t>(k), type,
                             op));
  }
  if (op == ReduceOp::kAvg) scale_avg(recvbuf, count, type, n);
  return ok();
}

// Ring allgather: block b starts at rank b and moves one rank per step.
Result<void> ring_allgather(Context& c, const Group& g, const CollArgs& a) {
  const void* sendbuf = a.send;
  void* recvbuf = a.recv;
  const size_t count = a.count;
  const DataType type = a.type;
  const int rank = g.rank(), size = g.size();
  const size_t block = count * dtype_size(type);
  const int n = size;
  auto mod = [n](int x) { return ((x % n) + n) % n; };
  ScopedRegistration rreg(*c.bufs);
  GREX_TRY(rreg.acquire(recvbuf, block * static_cast<size_t>(n)));
  Span out{rreg.get(), rreg.offset(recvbuf), static_cast<uint8_t*>(recvbuf)};
  uint8_t* mine = out.p + static_cast<size_t>(rank) * block;
  if (mine != sendbuf) std::memcpy(mine, sendbuf, block);
  const uint64_t tag = a.tag;
  for (int k = 0; k < n - 1; ++k) {
    int s = mod(rank - k), q = mod(rank - k - 1);
    GREX_TRY(exchange(c, g, mod(rank + 1), out, static_cast<size_t>(s) * block, block, mod(rank - 1), out,
                      static_cast<size_t>(q) * block, block, tag | static_cast<uint64_t>(k)));
  }
  return ok();
}

// Pairwise exchange: at step k, send block rank+k to rank+k and receive block
// rank-k from rank-k (n-1 steps, one peer each way at a time).
Result<void> pairwise_alltoall(Context& c, const Group& g, const CollArgs& a) {
  const void* sendbuf = a.send;
  void* recvbuf = a.recv;
  const size_t count = a.count;
  const DataType type = a.type;
  const int rank = g.rank(), size = g.size();
  const size_t block = count * dtype_size(type);
  const size_t total = block * static_cast<size_t>(size);
  ScopedRegistration rreg(*c.bufs);
  GREX_TRY(rreg.acquire(recvbuf, total));
  Span out{rreg.get(), rreg.offset(recvbuf), static_cast<uint8_t*>(recvbuf)};
  Span in;
  ScopedRegistration sreg(*c.bufs);
  if (sendbuf == recvbuf) {  // in place: work from a copy
    GREX_TRY(c.bufs->ensure_work(total));
    std::memcpy(c.bufs->work()->addr(), sendbuf, total);
    in = Span{c.bufs->work(), 0, static_cast<uint8_t*>(c.bufs->work()->addr())};
  } else {
    GREX_TRY(sreg.acquire(sendbuf, total));
    in = Span{sreg.get(), sreg.offset(sendbuf), static_cast<uint8_t*>(const_cast<void*>(sendbuf))};
  }
  std::memcpy(out.p + static_cast<size_t>(rank) * block, in.p + static_cast<size_t>(rank) * block, block);
  const uint64_t tag = a.tag;
  for (int k = 1; k < size; ++k) {
    int to = (rank + k) % size, from = (rank - k + size) % size;
    GREX_TRY(exchange(c, g, to, in, static_cast<size_t>(to) * block, block, from, out,
                      static_cast<size_t>(from) * block, block, tag | static_cast<uint64_t>(k)));
  }
  return ok();
}

// The block a rank sends itself: a local copy, after checking that it
// expects as many bytes as it sends.
Result<void> alltoallv_own_block(const Context& c, const Group& g, const void* sendbuf,
                                 const std::vector<uint64_t>& scounts, const std::vector<uint64_t>& sdispls,
                                 void* recvbuf, const std::vector<uint64_t>& rcounts,
                                 const std::vector<uint64_t>& rdispls) {
  const int rank = g.rank();
  if (scounts[rank] != rcounts[rank])
    return Error(Errc::kMismatch, "alltoallv: rank " + std::to_string(c.rank) + " sends itself " +
                                      std::to_string(scounts[rank]) + " bytes but expects " +
                                      std::to_string(rcounts[rank]))
        .rank(c.rank);
  if (scounts[rank] > 0)
    std::memmove(static_cast<uint8_t*>(recvbuf) + rdispls[rank],
                 static_cast<const uint8_t*>(sendbuf) + sdispls[rank], scounts[rank]);
  return ok();
}

// Uneven pairwise exchange (alltoallv): the same schedule as above, with
// each step's two byte counts traded first (8 bytes each way), so a pair whose
// counts disagree fails with kMismatch naming both instead of truncating a
// block or waiting for bytes that never come.
Result<void> pairwise_alltoallv(Context& c, const Group& g, const void* sendbuf, const std::vector<uint64_t>& scounts,
                                const std::vector<uint64_t>& sdispls, void* recvbuf,
                                const std::vector<uint64_t>& rcounts, const std::vector<uint64_t>& rdispls,
                                uint64_t tag) {
  const int rank = g.rank(), size = g.size();
  uint64_t send_end = 0, recv_end = 0;
  for (int r = 0; r < size; ++r) {
    send_end = std::max(send_end, sdispls[r] + scounts[r]);
    recv_end = std::max(recv_end, rdispls[r] + rcounts[r]);
  }
  ScopedRegistration rreg(*c.bufs), sreg(*c.bufs);
  if (recv_end > 0) GREX_TRY(rreg.acquire(recvbuf, recv_end));
  if (send_end > 0) GREX_TRY(sreg.acquire(sendbuf, send_end));
  Span out = recv_end > 0 ? Span{rreg.get(), rreg.offset(recvbuf), static_cast<uint8_t*>(recvbuf)} : Span{};
  Span in = send_end > 0
                ? Span{sreg.get(), sreg.offset(sendbuf), static_cast<uint8_t*>(const_cast<void*>(sendbuf))}
                : Span{};
  GREX_TRY(alltoallv_own_block(c, g, sendbuf, scounts, sdispls, recvbuf, rcounts, rdispls));
  GREX_TRY(c.bufs->ensure_work(2 * sizeof(uint64_t)));
  auto* lens = static_cast<uint64_t*>(c.bufs->work()->addr());
  Span hdr{c.bufs->work(), 0, static_cast<uint8_t*>(c.bufs->work()->addr())};
  for (int k = 1; k < size; ++k) {
    int to = (rank + k) % size, from = (rank - k + size) % size;
    lens[0] = scounts[to];
    GREX_TRY(exchange(c, g, to, hdr, 0, sizeof(uint64_t), from, hdr, sizeof(uint64_t), sizeof(uint64_t),
                      tag | (uint64_t{1} << 19) | static_cast<uint64_t>(k)));
    if (lens[1] != rcounts[from])
      return Error(Errc::kMismatch, "alltoallv: rank " + std::to_string(g.global(from)) + " sends " +
                                        std::to_string(lens[1]) + " bytes to rank " + std::to_string(c.rank) +
                                        ", which expects " +
                                        std::to_string(rcounts[from]))
          .rank(c.rank)
          .peer(g.global(from));
    GREX_TRY(exchange(c, g, scounts[to] > 0 ? to : -1, in, sdispls[to], scounts[to], rcounts[from] > 0 ? from : -1,
                      out, rdispls[from], rcounts[from], tag | static_cast<uint64_t>(k)));
  }
  return ok();
}

}  // namespace grex::detail
