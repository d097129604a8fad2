// SPDX-License-Identifier: Apache-2.0
// The collectives' public calls, blocking and non-blocking: argument checks,
// then a job run inline or on the worker (work_queue.cc) that picks the algorithm.
#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "collectives/comm_impl.h"
#include "collectives/jobs.h"
#include "gpu/cuda_api.h"

namespace grex {

using detail::bad_arg;
using detail::Coll;
using detail::CollArgs;

// Each collective: argument checks on the caller's thread, then a job that
// runs inline or on the worker (work_queue.cc); the job checks that no earlier
// collective broke the communicator.
namespace {

using Job = detail::JobFn;

Result<void> check_root(int rank, int size, const char* what, int root) {
  if (root < 0 || root >= size)
    return bad_arg(rank, what, "root " + std::to_string(root) + " is outside 0.." + std::to_string(size - 1));
  return ok();
}

Result<void> check_bufs(int rank, const char* what, size_t bytes, const void* a, const void* b) {
  if (bytes > 0 && (a == nullptr || b == nullptr)) return bad_arg(rank, what, "null buffer");
  return ok();
}

// An allreduce inside a running call: the algorithm the selector picks for
// this size, on the call's next tag.
Result<void> allreduce_run(Communicator::Impl& c, const void* in, void* out, size_t count, DataType type,
                           ReduceOp op) {
  const detail::Group& g = *c.world;
  detail::Algo id = c.select.allreduce_memo(c.ctx, g, count * dtype_size(type));  // flat only where it fits
  // The small-vector path, called directly (no tag: flat sends no message).
  if (id == detail::Algo::kFlat) return detail::flat_allreduce(c.ctx, g, CollArgs{in, out, count, type, op});
  const CollArgs a{in, out, count, type, op, 0, c.next_tag_base()};
  // GREX_ALGO=direct on a device without one-sided operations: ring.
  if (id == detail::Algo::kDirect && !detail::direct_usable(c.ctx, g, a)) id = detail::Algo::kRing;
  // GREX_ALGO=hierarchical with every rank on one host (or one per host): ring.
  if (id == detail::Algo::kHierarchical && !detail::hierarchical_usable(c.ctx, g, a)) id = detail::Algo::kRing;
  return detail::allreduce_algorithm(id).run(c.ctx, g, a);
}

// Alltoallv across hosts: aggregated per host pair (hier_alltoallv.cc) where
// the two-level model says so for the largest vector any rank sends, which
// the ranks agree on first (their counts differ); else pairwise.
// CommOptions::alltoallv forces one or the other.
Result<void> alltoallv_run(Communicator::Impl& c, const void* sendbuf, const std::vector<uint64_t>& sc,
                           const std::vector<uint64_t>& sd, void* recvbuf, const std::vector<uint64_t>& rc,
                           const std::vector<uint64_t>& rd) {
  const detail::Hierarchy* h = c.ctx.hier;
  const bool layered = h != nullptr && h->host_count() > 1 && h->host_count() < c.size &&
                       detail::hierarchical_usable(c.ctx, *c.world, CollArgs{});
  bool aggregate = layered && c.opts.alltoallv == "hierarchical";
  if (layered && c.opts.alltoallv == "auto") {
    uint64_t most = 0;
    for (uint64_t b : sc) most += b;
    uint8_t* b = GREX_TRY(c.bufs->small_bounce(&most, sizeof most));  // registered where the device wants it
    uint64_t* v = b != nullptr ? reinterpret_cast<uint64_t*>(b) : &most;
    *v = most;
    GREX_TRY(allreduce_run(c, v, v, 1, DataType::kInt64, ReduceOp::kMax));  // byte counts: far below 2^63
    const double block = static_cast<double>(*v) / c.size;
    aggregate = detail::hierarchical_alltoallv_wins(c.ctx, *c.world, block);
  }
  if (aggregate) return detail::hierarchical_alltoallv(c.ctx, sendbuf, sc, sd, recvbuf, rc, rd, c.next_tag_base());
  return detail::pairwise_alltoallv(c.ctx, *c.world, sendbuf, sc, sd, recvbuf, rc, rd, c.next_tag_base());
}

}  // namespace

Result<Job> barrier_job(Communicator::Impl& c) {
  return Job([&c]() -> Result<void> {
    GREX_TRY(c.check_usable("barrier"));
    c.begin({"barrier"});
    if (c.size == 1) return ok();
    // Chosen at creation: a barrier's usable entry does not depend on its call.
    CollArgs a{};
    a.tag = c.next_tag_base();
    return c.finish(c.barrier_algo->run(c.ctx, *c.world, a), "barrier");
  });
}

static Result<Job> broadcast_job(Communicator::Impl& c, void* buf, size_t count, DataType type, int root) {
  GREX_TRY(check_root(c.rank, c.size, "broadcast", root));
  size_t bytes = count * dtype_size(type);
  GREX_TRY(check_bufs(c.rank, "broadcast", bytes, buf, buf));
  return Job([&c, buf, bytes, root]() -> Result<void> {
    GREX_TRY(c.check_usable("broadcast"));
    c.begin({"broadcast", "bytes", bytes, -1, -1, root});
    if (c.size == 1 || bytes == 0) return ok();
    return c.finish(c.run_first(Coll::kBroadcast, CollArgs{nullptr, buf, bytes, DataType::kUint8, ReduceOp::kSum, root}),
                    "broadcast");
  });
}

Result<Job> allreduce_job(Communicator::Impl& c, const void* sendbuf, void* recvbuf, size_t count,
                                 DataType type, ReduceOp op) {
  size_t bytes = count * dtype_size(type);
  GREX_TRY(check_bufs(c.rank, "allreduce", bytes, sendbuf, recvbuf));
  return Job([&c, sendbuf, recvbuf, count, type, op, bytes]() -> Result<void> {
    GREX_TRY(c.check_usable("allreduce"));
    c.begin({"allreduce", "count", count, static_cast<int>(type), static_cast<int>(op), -1});
    if (bytes == 0) return ok();
    if (c.size == 1) {
      if (sendbuf != recvbuf) std::memmove(recvbuf, sendbuf, bytes);
      return ok();
    }
    auto run = [&](const void* in, void* out) { return allreduce_run(c, in, out, count, type, op); };
    // A small vector in memory the device would register for this call only
    // (verbs: pinning the pages costs more than the whole exchange) goes
    // through a buffer the Communicator keeps registered, as NCCL's do.
    if (uint8_t* b = GREX_TRY(c.bufs->small_bounce(recvbuf, bytes)); b != nullptr) {
      std::memcpy(b, sendbuf, bytes);
      GREX_TRY(c.finish(run(b, b), "allreduce"));
      std::memcpy(recvbuf, b, bytes);
      return ok();
    }
    return c.finish(run(sendbuf, recvbuf), "allreduce");
  });
}

static Result<Job> reduce_scatter_job(Communicator::Impl& c, const void* sendbuf, void* recvbuf, size_t recvcount,
                                      DataType type, ReduceOp op) {
  size_t block = recvcount * dtype_size(type);
  GREX_TRY(check_bufs(c.rank, "reduce_scatter", block, sendbuf, recvbuf));
  return Job([&c, sendbuf, recvbuf, recvcount, type, op, block]() -> Result<void> {
    GREX_TRY(c.check_usable("reduce_scatter"));
    c.begin({"reduce_scatter", "recvcount", recvcount, static_cast<int>(type), static_cast<int>(op), -1});
    if (block == 0) return ok();
    if (c.size == 1) {
      if (sendbuf != recvbuf) std::memmove(recvbuf, sendbuf, block);
      return ok();
    }
    return c.finish(c.run_first(Coll::kReduceScatter, CollArgs{sendbuf, recvbuf, recvcount, type, op}),
                    "reduce_scatter");
  });
}

Result<Job> allgather_job(Communicator::Impl& c, const void* sendbuf, void* recvbuf, size_t count,
                                 DataType type) {
  size_t block = count * dtype_size(type);
  GREX_TRY(check_bufs(c.rank, "allgather", block, sendbuf, recvbuf));
  return Job([&c, sendbuf, recvbuf, count, type, block]() -> Result<void> {
    GREX_TRY(c.check_usable("allgather"));
    c.begin({"allgather", "count", count, static_cast<int>(type), -1, -1});
    if (block == 0) return ok();
    if (c.size == 1) {
      if (sendbuf != recvbuf) std::memmove(recvbuf, sendbuf, block);
      return ok();
    }
    return c.finish(c.run_first(Coll::kAllgather, CollArgs{sendbuf, recvbuf, count, type}), "allgather");
  });
}

static Result<Job> reduce_job(Communicator::Impl& c, const void* sendbuf, void* recvbuf, size_t count, DataType type,
                              ReduceOp op, int root) {
  GREX_TRY(check_root(c.rank, c.size, "reduce", root));
  size_t bytes = count * dtype_size(type);
  GREX_TRY(check_bufs(c.rank, "reduce", bytes, sendbuf, c.rank == root ? recvbuf : sendbuf));
  return Job([&c, sendbuf, recvbuf, count, type, op, root, bytes]() -> Result<void> {
    GREX_TRY(c.check_usable("reduce"));
    c.begin({"reduce", "count", count, static_cast<int>(type), static_cast<int>(op), root});
    if (bytes == 0) return ok();
    if (c.size == 1) {
      if (sendbuf != recvbuf) std::memmove(recvbuf, sendbuf, bytes);
      return ok();
    }
    return c.finish(c.run_first(Coll::kReduce, CollArgs{sendbuf, recvbuf, count, type, op, root}), "reduce");
  });
}

static Result<Job> alltoall_job(Communicator::Impl& c, const void* sendbuf, void* recvbuf, size_t count,
                                DataType type) {
  size_t block = count * dtype_size(type);
  GREX_TRY(check_bufs(c.rank, "alltoall", block, sendbuf, recvbuf));
  return Job([&c, sendbuf, recvbuf, count, type, block]() -> Result<void> {
    GREX_TRY(c.check_usable("alltoall"));
    c.begin({"alltoall", "count", count, static_cast<int>(type), -1, -1});
    if (block == 0) return ok();
    if (c.size == 1) {
      if (sendbuf != recvbuf) std::memmove(recvbuf, sendbuf, block);
      return ok();
    }
    return c.finish(c.run_first(Coll::kAlltoall, CollArgs{sendbuf, recvbuf, count, type}), "alltoall");
  });
}

static Result<Job> alltoallv_job(Communicator::Impl& c, const void* sendbuf, std::span<const size_t> scounts,
                                 std::span<const size_t> sdispls, void* recvbuf, std::span<const size_t> rcounts,
                                 std::span<const size_t> rdispls, DataType type) {
  const auto n = static_cast<size_t>(c.size);
  if (scounts.size() != n || sdispls.size() != n || rcounts.size() != n || rdispls.size() != n)
    return bad_arg(c.rank, "alltoallv", "counts and displacements need one entry per rank (" + std::to_string(n) + ")");
  const uint64_t es = dtype_size(type);
  std::vector<uint64_t> sc(n), sd(n), rc(n), rd(n);
  uint64_t sbytes = 0, rbytes = 0;
  for (size_t r = 0; r < n; ++r) {
    sc[r] = scounts[r] * es, sd[r] = sdispls[r] * es, rc[r] = rcounts[r] * es, rd[r] = rdispls[r] * es;
    sbytes += sc[r], rbytes += rc[r];
  }
  GREX_TRY(check_bufs(c.rank, "alltoallv", sbytes, sendbuf, sendbuf));
  GREX_TRY(check_bufs(c.rank, "alltoallv", rbytes, recvbuf, recvbuf));
  if (sendbuf == recvbuf && sbytes + rbytes > 0)
    return bad_arg(c.rank, "alltoallv", "sendbuf and recvbuf are the same buffer (not supported in place)");
  return Job([&c, sendbuf, recvbuf, type, sc = std::move(sc), sd = std::move(sd), rc = std::move(rc),
              rd = std::move(rd)]() -> Result<void> {
    GREX_TRY(c.check_usable("alltoallv"));
    c.begin({"alltoallv", nullptr, 0, static_cast<int>(type), -1, -1});
    if (c.size == 1) return detail::alltoallv_own_block(c.ctx, *c.world, sendbuf, sc, sd, recvbuf, rc, rd);
    return c.finish(alltoallv_run(c, sendbuf, sc, sd, recvbuf, rc, rd), "alltoallv");
  });
}

Result<void> Communicator::barrier() { return impl_->run(GREX_TRY(barrier_job(*impl_))); }
Result<void> Communicator::broadcast(void* buf, size_t count, DataType type, int root) {
  return impl_->run(GREX_TRY(broadcast_job(*impl_, buf, count, type, root)));
}
Result<void> Communicator::allreduce(const void* sendbuf, void* recvbuf, size_t count, DataType type, ReduceOp op) {
  return impl_->run(GREX_TRY(allreduce_job(*impl_, sendbuf, recvbuf, count, type, op)));
}
Result<void> Communicator::reduce_scatter(const void* sendbuf, void* recvbuf, size_t recvcount, DataType type,
                                          ReduceOp op) {
  return impl_->run(GREX_TRY(reduce_scatter_job(*impl_, sendbuf, recvbuf, recvcount, type, op)));
}
Result<void> Communicator::allgather(const void* sendbuf, void* recvbuf, size_t count, DataType type) {
  return impl_->run(GREX_TRY(allgather_job(*impl_, sendbuf, recvbuf, count, type)));
}
Result<void> Communicator::reduce(const void* sendbuf, void* recvbuf, size_t count, DataType type, ReduceOp op,
                                  int root) {
  return impl_->run(GREX_TRY(reduce_job(*impl_, sendbuf, recvbuf, count, type, op, root)));
}
Result<void> Communicator::alltoall(const void* sendbuf, void* recvbuf, size_t count, DataType type) {
  return impl_->run(GREX_TRY(alltoall_job(*impl_, sendbuf, recvbuf, count, type)));
}

Result<void> Communicator::alltoallv(const void* sendbuf, std::span<const size_t> send_counts,
                                     std::span<const size_t> send_displs, void* recvbuf,
                                     std::span<const size_t> recv_counts, std::span<const size_t> recv_displs,
                                     DataType type) {
  return impl_->run(
      GREX_TRY(alltoallv_job(*impl_, sendbuf, send_counts, send_displs, recvbuf, recv_counts, recv_displs, type)));
}
Result<WorkPtr> Communicator::alltoallv_async(const void* sendbuf, std::span<const size_t> send_counts,
                                              std::span<const size_t> send_displs, void* recvbuf,
                                              std::span<const size_t> recv_counts,
                                              std::span<const size_t> recv_displs, DataType type) {
  return impl_->submit(
      GREX_TRY(alltoallv_job(*impl_, sendbuf, send_counts, send_displs, recvbuf, recv_counts, recv_displs, type)));
}

Result<WorkPtr> Communicator::barrier_async() { return impl_->submit(GREX_TRY(barrier_job(*impl_))); }
Result<WorkPtr> Communicator::broadcast_async(void* buf, size_t count, DataType type, int root) {
  return impl_->submit(GREX_TRY(broadcast_job(*impl_, buf, count, type, root)));
}
Result<WorkPtr> Communicator::allreduce_async(const void* sendbuf, void* recvbuf, size_t count, DataType type,
                                              ReduceOp op) {
  return impl_->submit(GREX_TRY(allreduce_job(*impl_, sendbuf, recvbuf, count, type, op)));
}
Result<WorkPtr> Communicator::reduce_scatter_async(const void* sendbuf, void* recvbuf, size_t recvcount,
                                                   DataType type, ReduceOp op) {
  return impl_->submit(GREX_TRY(reduce_scatter_job(*impl_, sendbuf, recvbuf, recvcount, type, op)));
}
Result<WorkPtr> Communicator::allgather_async(const void* sendbuf, void* recvbuf, size_t count, DataType type) {
  return impl_->submit(GREX_TRY(allgather_job(*impl_, sendbuf, recvbuf, count, type)));
}
Result<WorkPtr> Communicator::reduce_async(const void* sendbuf, void* recvbuf, size_t count, DataType type,
                                           ReduceOp op, int root) {
  return impl_->submit(GREX_TRY(reduce_job(*impl_, sendbuf, recvbuf, count, type, op, root)));
}
Result<WorkPtr> Communicator::alltoall_async(const void* sendbuf, void* recvbuf, size_t count, DataType type) {
  return impl_->submit(GREX_TRY(alltoall_job(*impl_, sendbuf, recvbuf, count, type)));
}

// ---- Stream-ordered calls on GPU buffers (gpu_calls.cc) ----
// Each plans its pieces on pinned staging memory: copies in from the caller's
// buffers, the host collective in place on the staging, copies out.

namespace {
using GpuPiece = Communicator::Impl::GpuPiece;
using GpuCopy = Communicator::Impl::GpuCopy;
}  // namespace

// GPU buffers are staged; host buffers (pageable or not) are used in place by
// the same job a blocking call runs, ordered on the stream all the same
// (gpu_call's note says why they never take a copy). Mixed: an error.
static Result<bool> host_buffers(int rank, const char* what, std::initializer_list<const void*> ptrs) {
  int host = 0, device = 0;
  for (const void* p : ptrs) {
    if (p == nullptr) continue;
    (gpu::pointer_domain(p) == MemoryDomain::kCudaDevice ? device : host) += 1;
  }
  if (host > 0 && device > 0)
    return bad_arg(rank, what, "its buffers mix GPU and host memory; give it GPU buffers (or host buffers) only");
  return device == 0;
}

static Result<WorkPtr> host_call(Communicator::Impl& c, const char* what, GpuStream stream, Result<Job> job) {
  Job j = GREX_TRY(std::move(job));
  return c.gpu_call(what, stream, nullptr, 0, [&](uint8_t*) -> Result<std::vector<GpuPiece>> {
    std::vector<GpuPiece> pieces(1);
    pieces[0].job = std::move(j);
    return pieces;
  });
}

// Allreduce, broadcast and reduce are element-wise: pieces of the vector are
// independent collectives, so the copies of later pieces overlap the network
// time of earlier ones. make(off, bytes) builds a piece's job.
template <class Make>
static Result<std::vector<GpuPiece>> gpu_pieces(Communicator::Impl& c, size_t bytes, const void* in, bool copy_in,
                                                const void* out, bool copy_out, Make make) {
  std::vector<GpuPiece> pieces;
  const size_t chunk = c.gpu_chunk_bytes(bytes);
  for (size_t off = 0; off < bytes || (bytes == 0 && pieces.empty()); off += chunk) {
    const size_t n = std::min(chunk, bytes - off);
    GpuPiece p;
    if (copy_in && n > 0) p.ins.push_back(GpuCopy{off, static_cast<const uint8_t*>(in) + off, n});
    if (copy_out && n > 0) p.outs.push_back(GpuCopy{off, static_cast<const uint8_t*>(out) + off, n});
    p.job = GREX_TRY(make(off, n));
    pieces.push_back(std::move(p));
    if (bytes == 0) break;
  }
  return pieces;
}

Result<WorkPtr> Communicator::allreduce(const void* sendbuf, void* recvbuf, size_t count, DataType type, ReduceOp op,
                                        GpuStream stream) {
  Impl& c = *impl_;
  const size_t es = dtype_size(type), bytes = count * es;
  GREX_TRY(check_bufs(c.rank, "allreduce", bytes, sendbuf, recvbuf));
  if (GREX_TRY(host_buffers(c.rank, "allreduce", {sendbuf, recvbuf})))
    return host_call(c, "allreduce", stream, allreduce_job(c, sendbuf, recvbuf, count, type, op));
  if (auto direct = c.gpu_ipc_allreduce(sendbuf, recvbuf, count, type, op, stream)) return std::move(*direct);
  return c.gpu_call("allreduce", stream, recvbuf, bytes, [&](uint8_t* pin) {
    return gpu_pieces(c, bytes, sendbuf, true, recvbuf, true, [&](size_t off, size_t n) {
      return allreduce_job(c, pin + off, pin + off, n / es, type, op);
    });
  });
}

Result<WorkPtr> Communicator::broadcast(void* buf, size_t count, DataType type, int root, GpuStream stream) {
  Impl& c = *impl_;
  GREX_TRY(check_root(c.rank, c.size, "broadcast", root));
  const size_t es = dtype_size(type), bytes = count * es;
  GREX_TRY(check_bufs(c.rank, "broadcast", bytes, buf, buf));
  const bool is_root = c.rank == root;
  if (GREX_TRY(host_buffers(c.rank, "broadcast", {buf})))
    return host_call(c, "broadcast", stream, broadcast_job(c, buf, count, type, root));
  if (auto d = c.gpu_ipc_other(Coll::kBroadcast, buf, buf, count, type, ReduceOp::kSum, root, stream))
    return std::move(*d);
  return c.gpu_call("broadcast", stream, buf, bytes, [&](uint8_t* pin) {
    return gpu_pieces(c, bytes, buf, is_root, buf, !is_root, [&](size_t off, size_t n) {
      return broadcast_job(c, pin + off, n / es, type, root);
    });
  });
}

Result<WorkPtr> Communicator::reduce(const void* sendbuf, void* recvbuf, size_t count, DataType type, ReduceOp op,
                                     int root, GpuStream stream) {
  Impl& c = *impl_;
  GREX_TRY(check_root(c.rank, c.size, "reduce", root));
  const size_t es = dtype_size(type), bytes = count * es;
  const bool is_root = c.rank == root;
  GREX_TRY(check_bufs(c.rank, "reduce", bytes, sendbuf, is_root ? recvbuf : sendbuf));
  if (GREX_TRY(host_buffers(c.rank, "reduce", {sendbuf, is_root ? recvbuf : nullptr})))
    return host_call(c, "reduce", stream, reduce_job(c, sendbuf, recvbuf, count, type, op, root));
  if (auto d = c.gpu_ipc_other(Coll::kReduce, sendbuf, recvbuf, count, type, op, root, stream)) return std::move(*d);
  return c.gpu_call("reduce", stream, sendbuf, bytes, [&](uint8_t* pin) {
    return gpu_pieces(c, bytes, sendbuf, true, recvbuf, is_root, [&](size_t off, size_t n) {
      return reduce_job(c, pin + off, pin + off, n / es, type, op, root);
    });
  });
}

// The others move blocks per rank: one piece, the host collective in place.
static Result<std::vector<GpuPiece>> one_piece(GpuCopy in, GpuCopy out, Result<Job> job) {
  std::vector<GpuPiece> pieces(1);
  if (in.bytes > 0) pieces[0].ins.push_back(in);
  if (out.bytes > 0) pieces[0].outs.push_back(out);
  pieces[0].job = GREX_TRY(std::move(job));
  return pieces;
}

Result<WorkPtr> Communicator::reduce_scatter(const void* sendbuf, void* recvbuf, size_t recvcount, DataType type,
                                             ReduceOp op, GpuStream stream) {
  Impl& c = *impl_;
  const size_t block = recvcount * dtype_size(type), all = block * static_cast<size_t>(c.size);
  GREX_TRY(check_bufs(c.rank, "reduce_scatter", block, sendbuf, recvbuf));
  const size_t mine = block * static_cast<size_t>(c.rank);
  if (GREX_TRY(host_buffers(c.rank, "reduce_scatter", {sendbuf, recvbuf})))
    return host_call(c, "reduce_scatter", stream, reduce_scatter_job(c, sendbuf, recvbuf, recvcount, type, op));
  if (auto d = c.gpu_ipc_other(Coll::kReduceScatter, sendbuf, recvbuf, recvcount, type, op, -1, stream))
    return std::move(*d);
  return c.gpu_call("reduce_scatter", stream, recvbuf, all, [&](uint8_t* pin) {
    return one_piece(GpuCopy{0, sendbuf, all}, GpuCopy{mine, recvbuf, block},
                     reduce_scatter_job(c, pin, pin + mine, recvcount, type, op));
  });
}

Result<WorkPtr> Communicator::allgather(const void* sendbuf, void* recvbuf, size_t count, DataType type,
                                        GpuStream stream) {
  Impl& c = *impl_;
  const size_t block = count * dtype_size(type), all = block * static_cast<size_t>(c.size);
  GREX_TRY(check_bufs(c.rank, "allgather", block, sendbuf, recvbuf));
  const size_t mine = block * static_cast<size_t>(c.rank);
  if (GREX_TRY(host_buffers(c.rank, "allgather", {sendbuf, recvbuf})))
    return host_call(c, "allgather", stream, allgather_job(c, sendbuf, recvbuf, count, type));
  if (auto d = c.gpu_ipc_other(Coll::kAllgather, sendbuf, recvbuf, count, type, ReduceOp::kSum, -1, stream))
    return std::move(*d);
  return c.gpu_call("allgather", stream, recvbuf, all, [&](uint8_t* pin) {
    return one_piece(GpuCopy{mine, sendbuf, block}, GpuCopy{0, recvbuf, all}, allgather_job(c, pin + mine, pin, count, type));
  });
}

Result<WorkPtr> Communicator::alltoall(const void* sendbuf, void* recvbuf, size_t count, DataType type,
                                       GpuStream stream) {
  Impl& c = *impl_;
  const size_t all = count * dtype_size(type) * static_cast<size_t>(c.size);
  GREX_TRY(check_bufs(c.rank, "alltoall", all, sendbuf, recvbuf));
  if (GREX_TRY(host_buffers(c.rank, "alltoall", {sendbuf, recvbuf})))
    return host_call(c, "alltoall", stream, alltoall_job(c, sendbuf, recvbuf, count, type));
  if (auto d = c.gpu_ipc_other(Coll::kAlltoall, sendbuf, recvbuf, count, type, ReduceOp::kSum, -1, stream))
    return std::move(*d);
  return c.gpu_call("alltoall", stream, recvbuf, 2 * all, [&](uint8_t* pin) {
    return one_piece(GpuCopy{0, sendbuf, all}, GpuCopy{all, recvbuf, all}, alltoall_job(c, pin, pin + all, count, type));
  });
}

// Where the receive half of a two-sided call's staging starts, after
// `send_bytes`: page aligned, and never at the send half's address (a
// zero-byte send would make the two buffers look like one: in place).
static size_t second_half(size_t send_bytes) { return std::max<size_t>(4096, (send_bytes + 4095) & ~size_t{4095}); }

// Uneven alltoall: the send extent in, the job between the two halves of
// the staging, each received block out on its own (the gaps of recvbuf
// between blocks are the caller's and stay as they were).
Result<WorkPtr> Communicator::alltoallv(const void* sendbuf, std::span<const size_t> send_counts,
                                        std::span<const size_t> send_displs, void* recvbuf,
                                        std::span<const size_t> recv_counts, std::span<const size_t> recv_displs,
                                        DataType type, GpuStream stream) {
  Impl& c = *impl_;
  const auto n = static_cast<size_t>(c.size);
  if (send_counts.size() != n || send_displs.size() != n || recv_counts.size() != n || recv_displs.size() != n)
    return bad_arg(c.rank, "alltoallv", "counts and displacements need " + std::to_string(n) + " entries each");
  const size_t es = dtype_size(type);
  size_t sext = 0, rext = 0;
  for (size_t i = 0; i < n; ++i) {
    if (send_counts[i] > 0) sext = std::max(sext, (send_displs[i] + send_counts[i]) * es);
    if (recv_counts[i] > 0) rext = std::max(rext, (recv_displs[i] + recv_counts[i]) * es);
  }
  if (GREX_TRY(host_buffers(c.rank, "alltoallv", {sext > 0 ? sendbuf : nullptr, rext > 0 ? recvbuf : nullptr})))
    return host_call(c, "alltoallv", stream,
                     alltoallv_job(c, sendbuf, send_counts, send_displs, recvbuf, recv_counts, recv_displs, type));
  const size_t roff = second_half(sext);
  return c.gpu_call("alltoallv", stream, rext > 0 ? recvbuf : sendbuf, roff + rext,
                    [&](uint8_t* pin) -> Result<std::vector<GpuPiece>> {
                      std::vector<GpuPiece> pieces(1);
                      GpuPiece& p = pieces[0];
                      if (sext > 0) p.ins.push_back(GpuCopy{0, sendbuf, sext});
                      for (size_t i = 0; i < n; ++i)
                        if (recv_counts[i] > 0)
                          p.outs.push_back(GpuCopy{roff + recv_displs[i] * es,
                                                   static_cast<uint8_t*>(recvbuf) + recv_displs[i] * es,
                                                   recv_counts[i] * es});
                      p.job = GREX_TRY(alltoallv_job(c, pin, send_counts, send_displs, pin + roff, recv_counts,
                                                     recv_displs, type));
                      return pieces;
                    });
}

// Point-to-point on a stream: staged through pinned memory as the
// collectives are, the blocking send's or recv's job between the copies.
Result<WorkPtr> Communicator::send(const void* buf, size_t bytes, int peer, uint32_t tag, GpuStream stream) {
  Impl& c = *impl_;
  if (GREX_TRY(host_buffers(c.rank, "send", {buf}))) return host_call(c, "send", stream, send_job(c, buf, bytes, peer, tag));
  return c.gpu_call("send", stream, buf, bytes, [&](uint8_t* pin) {
    return one_piece(GpuCopy{0, buf, bytes}, GpuCopy{0, nullptr, 0}, send_job(c, pin, bytes, peer, tag));
  });
}

Result<WorkPtr> Communicator::recv(void* buf, size_t bytes, int peer, uint32_t tag, GpuStream stream) {
  Impl& c = *impl_;
  if (GREX_TRY(host_buffers(c.rank, "recv", {buf}))) return host_call(c, "recv", stream, recv_job(c, buf, bytes, peer, tag));
  return c.gpu_call("recv", stream, buf, bytes, [&](uint8_t* pin) {
    return one_piece(GpuCopy{0, nullptr, 0}, GpuCopy{0, buf, bytes}, recv_job(c, pin, bytes, peer, tag));
  });
}

Result<WorkPtr> Communicator::sendrecv(const void* sendbuf, size_t sendbytes, int dst, void* recvbuf,
                                       size_t recvbytes, int src, uint32_t tag, GpuStream stream) {
  Impl& c = *impl_;
  if (GREX_TRY(host_buffers(c.rank, "sendrecv", {sendbuf, recvbuf})))
    return host_call(c, "sendrecv", stream, sendrecv_job(c, sendbuf, sendbytes, dst, recvbuf, recvbytes, src, tag));
  const size_t roff = second_half(sendbytes);
  return c.gpu_call("sendrecv", stream, recvbuf, roff + recvbytes, [&](uint8_t* pin) {
    return one_piece(GpuCopy{0, sendbuf, sendbytes}, GpuCopy{roff, recvbuf, recvbytes},
                     sendrecv_job(c, pin, sendbytes, dst, pin + roff, recvbytes, src, tag));
  });
}

std::string Communicator::allreduce_algorithm(size_t bytes) const {
  return detail::algo_name(impl_->allreduce_algo(bytes));
}


}  // namespace grex
