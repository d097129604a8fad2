// SPDX-License-Identifier: Apache-2.0
/// @file communicator.h
/// grex::Communicator: a group of ranks connected over one backend, and the
/// collective operations on it.
///
/// Every rank of the group calls the same collectives in the same order.
/// Calls block until the operation finished on this rank, or return an Error:
/// kTimeout (naming the ranks still awaited), kPeerFailed (naming the rank
/// that died), kInvalidArgument (before any byte moves).
///
/// Threads: a Communicator is used by one thread at a time. Its *_async
/// collectives run on a worker thread of the communicator, which then drives
/// the Device; every other call that uses the Device (blocking collectives,
/// send/recv, alloc/free, register_memory/deregister_memory) runs after the
/// async work issued before it, in issue order, so each may be made while
/// async collectives are in flight. device() is the exception: calls on the
/// Device it returns race with the worker unless no async collective is in
/// flight (every Work waited for); use the Communicator's own calls instead.
#pragma once

#include <grex/bootstrap.h>
#include <grex/result.h>
#include <grex/transport.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace grex {

/// Element types.
enum class DataType : uint8_t {
  kFloat32 = 0,
  kFloat64 = 1,
  kInt32 = 2,
  kInt64 = 3,
  kUint8 = 4,
  kFloat16 = 5,   ///< IEEE 754 binary16; reduced in f32, rounded to nearest even
  kBFloat16 = 6,  ///< bfloat16 (the top half of an f32); reduced in f32, rounded to nearest even
};
/// Reduction operators. kAvg divides the sum by the group size.
enum class ReduceOp : uint8_t { kSum = 0, kProd = 1, kMin = 2, kMax = 3, kAvg = 4 };

/// How an allreduce's float32 vector travels (issue 29): as it is, as 16-bit
/// floats (half the bytes), or as int8 with a float32 scale per block of 256
/// values (about a quarter); accumulated in float32 at every hop.
/// kTopK sends each rank's largest `topk_fraction` of values as (index,
/// value) pairs, summed sparsely (use it with error_feedback).
enum class Compression : uint8_t { kNone = 0, kBf16 = 1, kFp16 = 2, kInt8 = 3, kTopK = 4 };

/// What a rank late for a deadline allreduce does with its own vector.
enum class LateInput : uint8_t {
  kDrop = 0,   ///< discard it: the call's result is the others' reduction
  kCarry = 1,  ///< keep it (per feedback_key) and add it to this rank's next deadline call's input
};

/// Per-call options of an allreduce.
struct AllreduceOptions {
  Compression compression = Compression::kNone;
  /// Keeps the rounding error this rank introduced and adds it to its input
  /// in the next call with the same key, so that over calls the results add
  /// up to the inputs' sum (error feedback).
  bool error_feedback = false;
  /// The buffer whose residual the call uses (null: recvbuf). A key's
  /// residual has the count of the call that made it; a call with another
  /// count starts it afresh.
  const void* feedback_key = nullptr;
  /// kTopK: the share of values each rank sends (0 < f <= 1; 1: every value, the exact sum).
  double topk_fraction = 0.01;
  /// Deadline allreduce (> 0; without compression): the first rank whose
  /// deadline_ms, counted from its own entry, passes before every rank
  /// entered closes the call. The ranks that entered by then are its
  /// contributors; the result is their reduction (kAvg divides by their
  /// count), the same bits on every rank. A late rank gets that same result
  /// when it enters, from the lowest contributor, which sends it without
  /// waiting. Ranks agree through the bootstrap store: each call costs a few
  /// store round trips, so use it for vectors whose reduction takes
  /// milliseconds. The contributors' reduction is a ring, or the
  /// hierarchical allreduce across hosts when every rank is in time and the
  /// model takes it for the size.
  int64_t deadline_ms = 0;
  /// What a late rank does with its vector (deadline_ms > 0).
  LateInput late = LateInput::kDrop;
  /// Where not null, set to the contributors (ascending ranks), on every rank.
  std::vector<int>* contributors = nullptr;
};

/// Bytes per element.
size_t dtype_size(DataType t) noexcept;
/// "f32", "f64", "i32", "i64", "u8", "f16", "bf16".
std::string_view dtype_name(DataType t) noexcept;
/// "sum", "prod", "min", "max", "avg".
std::string_view reduce_op_name(ReduceOp op) noexcept;
/// "none", "bf16", "fp16", "int8", "topk" ("?" for a value outside the enum).
std::string_view compression_name(Compression c) noexcept;
/// The Compression compression_name() calls `name`; nullopt for any other word.
std::optional<Compression> compression_from_name(std::string_view name) noexcept;

/// Options for Communicator::create. The environment variable of each field
/// is in brackets; by default it overrides the field (see `precedence`).
struct CommOptions {
  /// Backend [GREX_BACKEND]: "auto" (the default) connects the ranks of one
  /// host over shm and ranks of different hosts over the network backend
  /// `net` (a host is a machine and network namespace, or GREX_HOST_ID);
  /// "shm", "dpdk", "verbs" or "loop" connect every pair over that one.
  std::string backend;
  /// The network backend of "auto" between hosts: "dpdk", "verbs", or "auto"
  /// (verbs where every rank sees an active RDMA port, else dpdk) [GREX_NET].
  std::string net = "auto";
  /// What makes ranks "one host" (shm between them): empty detects it (the
  /// machine and network namespace, core/host.h) [GREX_HOST_ID]. Ranks that
  /// give the same string are placed on one host.
  std::string host_id;
  /// Every collective and point-to-point call gives up after this [GREX_TIMEOUT_MS].
  int64_t timeout_ms = 60'000;
  /// A wait that lasts this long logs once which ranks it still waits for;
  /// -1: a tenth of timeout_ms; 0: never [GREX_WARN_AFTER_MS].
  int64_t warn_after_ms = -1;
  /// Waiting: "spin" (busy poll), "adaptive" (spin, then nap), or "auto":
  /// adaptive when this host runs more ranks than it has cores [GREX_PROGRESS].
  std::string progress = "auto";
  /// With several ranks on this host, start local rank i on the i-th CPU of
  /// its affinity mask (modulo their number), once, at the end of create();
  /// the mask itself is left as it was [GREX_SPREAD=0 turns it off].
  bool spread = true;
  /// Collective sends from user memory: "auto" copies each chunk into shared
  /// staging memory when the backend reads that faster (shm: a cached memcpy
  /// beats a CMA copy), "always", or "never" [GREX_STAGE_SENDS]. With every
  /// rank on one host it also decides the staged direct allreduce ("auto":
  /// from 32 MiB at 2 ranks, 8 MiB at more; 128 and 16 MiB where any rank
  /// runs in place; docs/collectives.md).
  std::string stage_sends = "auto";
  /// "auto" stages vectors of at least this many bytes (below it data stays
  /// in cache and a direct copy wins) [GREX_STAGE_MIN_BYTES].
  size_t stage_min_bytes = 8u << 20;
  /// Where every rank is on one host and the backend maps peers' memory
  /// (shm), an allreduce takes the flat algorithm (one shared slot per rank,
  /// no messages) when the bytes each rank reads from its peers, (ranks - 1)
  /// x the vector's size, are at most this. 0 turns it off [GREX_FLAT_MAX_BYTES].
  size_t flat_max_bytes = 64 * 1024;
  /// Pipeline chunk for large messages [GREX_CHUNK_BYTES].
  size_t chunk_bytes = 256 * 1024;
  /// Passed to Device::open (driver params, queue depth). driver/rank/job_id are set for you.
  DeviceOptions device;
  /// Store key prefix, unique per communicator of a job [GREX_COMM_NAME].
  std::string name = "grex";
  /// Allreduce algorithm: "auto" (flat for small vectors where it is set up,
  /// else the cost model picks per call), "ring", "rabenseifner",
  /// "recursive_doubling", "tree", "direct" or "flat" [GREX_ALGO].
  std::string algo = "auto";
  /// Alltoallv across hosts: "auto" (aggregated per host pair where the
  /// two-level model says so for the largest vector any rank sends, agreed
  /// per call), "pairwise" or "hierarchical" (where the ranks span hosts with
  /// several on one; else pairwise). Every rank must agree [GREX_ALLTOALLV].
  std::string alltoallv = "auto";
  /// Top-k allreduce across hosts: "flat" (every rank's pairs to every rank),
  /// "hierarchical" (each host's exact sum inside, then top-k of each shard
  /// along its rail: fewer bytes across hosts, a selection from the host's
  /// sum; where the ranks span hosts) or "auto" (the two-level model's pick
  /// per call). Every rank must agree [GREX_TOPK].
  std::string topk = "auto";
  /// Cost-model constants: "measure" (a short calibration at creation; the
  /// values are logged in this same format so a job can pin them), or
  /// "ALPHA_US,BETA_GBPS,GAMMA_GBPS" [GREX_COST]. Across hosts, "INTRA;INTER"
  /// gives each level its own (one triple: both).
  std::string cost = "measure";
  /// Receives from any source: every point-to-point send is preceded by a
  /// 16-byte notice (its tag and size), so recv_any() and iprobe() can see
  /// which ranks have messages waiting [GREX_P2P_ANY_SOURCE]. Off by default:
  /// the notice costs one small message per send. Every rank must agree
  /// (create() fails naming a rank that differs).
  bool any_source = false;
  /// The flight recorder's ring: the last this many calls, with their
  /// state and times, written as JSON to GREX_TRACE_DUMP's directory on an
  /// error, a timeout or SIGUSR1; 0 turns it off [GREX_TRACE_ENTRIES].
  size_t trace_entries = 2000;
  /// Congestion control of every flow (dpdk, verbs): "rttcc", "rttcc-template",
  /// "dcqcn", "dcqcn-mlx5", "timely", "swift", "none"; empty: rttcc on the
  /// network backend of a communicator whose ranks span hosts, none inside a
  /// host. Sets the driver parameter "cc" [GREX_CC].
  std::string cc;
  /// Which wins where a field above and its [GREX_*] variable both give a
  /// value. kEnvironment (the default): the variable, read by create() over
  /// whatever the program set, so users retune a program without rebuilding
  /// it. kOptions: a field the program changed from its default wins and its
  /// variable is not read; a field left at its default (even if set to it
  /// explicitly) still takes its variable. kOptions also makes device.params,
  /// and so `cc`, win over the drivers' variables (DeviceOptions::precedence).
  Precedence precedence = Precedence::kEnvironment;
};

/// A collective issued with one of the *_async calls. Collectives run one at a
/// time in issue order (blocking calls too); the caller's thread is free
/// meanwhile, as DDP needs while backward runs. The buffers belong to the
/// collective until it finished.
class Work {
 public:
  struct State;
  explicit Work(std::shared_ptr<State> state) : state_(std::move(state)) {}
  /// Blocks until the collective finished; its outcome.
  Result<void> wait();
  /// Blocks up to timeout_ms; kTimeout when it has not finished (it goes on).
  Result<void> wait(int64_t timeout_ms);
  /// True once finished (wait() then returns at once).
  bool test() const;

 private:
  std::shared_ptr<State> state_;
};
using WorkPtr = std::shared_ptr<Work>;

/// A message waiting to be received, as iprobe() saw its notice.
struct Probe {
  int source = -1;  ///< the sending rank
  size_t bytes = 0;  ///< its size
};

/// A CUDA stream for the stream-ordered collectives: a CUstream or
/// cudaStream_t; nullptr is the legacy default stream.
struct GpuStream {
  void* handle = nullptr;
};

/// Counters of one communicator (cumulative).
struct CommStats {
  uint64_t collectives = 0;   ///< calls completed
  uint64_t bytes_sent = 0;    ///< payload bytes this rank posted for sending
  uint64_t bytes_inter_host = 0;  ///< the part of bytes_sent posted to ranks of other hosts
  uint64_t wait_ns = 0;       ///< time spent polling in collectives
  uint64_t gpu_direct = 0;    ///< stream-ordered calls that went GPU to GPU (CUDA IPC, no host bounce)
  uint64_t gpu_staged = 0;    ///< stream-ordered calls on GPU buffers staged through pinned host memory
};

class Communicator {
 public:
  /// Opens the backend and connects every pair of ranks through `bootstrap`.
  static Result<std::unique_ptr<Communicator>> create(std::shared_ptr<Bootstrap> bootstrap,
                                                      CommOptions opts = {});
  /// bootstrap_from_env() + Bootstrap::create() + create(): the one-liner for
  /// programs started by grex-run, torchrun, mpirun or srun.
  static Result<std::unique_ptr<Communicator>> from_env(CommOptions opts = {});
  ~Communicator();

  int rank() const noexcept;
  int size() const noexcept;
  /// The transport device (capabilities, counters). Calls that change it
  /// (register_memory, allocate, poll, ...) must not overlap async
  /// collectives: use register_memory() / alloc() below, which are ordered
  /// with them (see the thread rules above).
  Device& device() noexcept;
  /// Counters so far; may be read while async collectives run (they may
  /// lag the collective in flight).
  const CommStats& stats() const noexcept;
  /// Options in force (after environment overrides).
  const CommOptions& options() const noexcept;
  /// Where the ranks are and how they are connected, one line: "2 hosts
  /// (0-1 | 2-3), intra-host shm, inter-host dpdk, 2 rails" or "1 host, shm".
  std::string topology() const;
  /// The flight recorder's ring as JSON (what GREX_TRACE_DUMP writes): the
  /// last CommOptions::trace_entries calls, oldest first; "" where it is off.
  std::string trace_json() const;
  /// Pauses (false) or resumes (true) the flight recorder, from any thread:
  /// calls that begin while it is paused leave no entry, and the job status
  /// shows the last call recorded. Where trace_entries is 0 there is no
  /// recorder, and this does nothing. bench/recorder_inproc measures the
  /// recorder's cost with it, in alternating blocks of one process.
  void set_recording(bool on) noexcept;

  /// Sends `bytes` bytes to `peer`; returns when the buffer may be reused.
  Result<void> send(const void* buf, size_t bytes, int peer, uint32_t tag = 0);
  /// Receives exactly `bytes` bytes from `peer` with `tag`.
  Result<void> recv(void* buf, size_t bytes, int peer, uint32_t tag = 0);
  /// With CommOptions::any_source: receives exactly `bytes` bytes with `tag`
  /// from whichever rank's message was noticed first (MPI_ANY_SOURCE) and
  /// returns that rank. A message of another size fails with kMismatch
  /// naming its sender; none within the timeout fails with kTimeout and
  /// leaves the communicator usable.
  Result<int> recv_any(void* buf, size_t bytes, uint32_t tag = 0);
  /// With CommOptions::any_source: a message with `tag` from `source` (-1:
  /// any rank) waiting to be received, or nullopt (MPI_Iprobe). Polls once;
  /// never waits. The next recv(buf, bytes, probe->source, tag) gets it.
  Result<std::optional<Probe>> iprobe(uint32_t tag, int source = -1);
  /// Sends `sendbytes` to `dst` while receiving exactly `recvbytes` from `src`
  /// (MPI_Sendrecv): neither waits for the other, so ranks in a ring (each
  /// sending to the next, receiving from the previous) never deadlock. `dst`
  /// and `src` may be the same rank; the buffers must not overlap.
  Result<void> sendrecv(const void* sendbuf, size_t sendbytes, int dst, void* recvbuf, size_t recvbytes, int src,
                        uint32_t tag = 0);
  /// Returns on every rank after all ranks entered it.
  Result<void> barrier();
  /// Copies `count` elements from `root`'s buf to every rank's buf.
  Result<void> broadcast(void* buf, size_t count, DataType type, int root);
  /// recvbuf = op over ranks of sendbuf. sendbuf == recvbuf is in-place.
  Result<void> allreduce(const void* sendbuf, void* recvbuf, size_t count, DataType type, ReduceOp op);
  /// With options: compression (float32 with kSum or kAvg only; every rank
  /// must pass the same compression) and error feedback. A compressed call
  /// runs the compressed ring whatever the cost model would pick; every rank
  /// gets the same bits.
  Result<void> allreduce(const void* sendbuf, void* recvbuf, size_t count, DataType type, ReduceOp op,
                         const AllreduceOptions& options);
  Result<WorkPtr> allreduce_async(const void* sendbuf, void* recvbuf, size_t count, DataType type, ReduceOp op,
                                  const AllreduceOptions& options);
  /// Drops the error-feedback residual of `key` (null: every residual). Runs
  /// after the async calls issued before it.
  Result<void> clear_feedback(const void* key = nullptr);
  /// In-place allreduce.
  Result<void> allreduce(void* buf, size_t count, DataType type, ReduceOp op) {
    return allreduce(buf, buf, count, type, op);
  }
  /// sendbuf holds size() blocks of recvcount elements; rank r's recvbuf gets
  /// op over ranks of block r. In place: recvbuf == sendbuf + r * block.
  Result<void> reduce_scatter(const void* sendbuf, void* recvbuf, size_t recvcount, DataType type, ReduceOp op);
  /// recvbuf gets size() blocks of `count` elements, block r from rank r's
  /// sendbuf. In place: sendbuf == recvbuf + r * block.
  Result<void> allgather(const void* sendbuf, void* recvbuf, size_t count, DataType type);
  /// root's recvbuf = op over ranks of sendbuf (recvbuf unused elsewhere, may
  /// be null). sendbuf == recvbuf is in place.
  Result<void> reduce(const void* sendbuf, void* recvbuf, size_t count, DataType type, ReduceOp op, int root);
  /// Block j (count elements) of rank i's sendbuf goes to block i of rank j's
  /// recvbuf. sendbuf == recvbuf is in place.
  Result<void> alltoall(const void* sendbuf, void* recvbuf, size_t count, DataType type);
  /// Uneven alltoall (MPI_Alltoallv): send_counts[j] elements from sendbuf +
  /// send_displs[j] go to rank j, which receives them at recvbuf +
  /// recv_displs[i] (recv_counts[i] elements from rank i). Counts and
  /// displacements are in elements, one entry per rank. Each pair must agree
  /// (my send_counts[j] is j's recv_counts[me]): a pair that does not fails
  /// with kMismatch naming both counts. Not in place (sendbuf != recvbuf).
  Result<void> alltoallv(const void* sendbuf, std::span<const size_t> send_counts,
                         std::span<const size_t> send_displs, void* recvbuf, std::span<const size_t> recv_counts,
                         std::span<const size_t> recv_displs, DataType type);

  /// Non-blocking forms: the same collectives, returning at once.
  Result<WorkPtr> allreduce_async(const void* sendbuf, void* recvbuf, size_t count, DataType type, ReduceOp op);
  Result<WorkPtr> reduce_scatter_async(const void* sendbuf, void* recvbuf, size_t recvcount, DataType type,
                                       ReduceOp op);
  Result<WorkPtr> allgather_async(const void* sendbuf, void* recvbuf, size_t count, DataType type);
  Result<WorkPtr> broadcast_async(void* buf, size_t count, DataType type, int root);
  Result<WorkPtr> reduce_async(const void* sendbuf, void* recvbuf, size_t count, DataType type, ReduceOp op,
                               int root);
  Result<WorkPtr> alltoall_async(const void* sendbuf, void* recvbuf, size_t count, DataType type);
  /// The counts and displacements are copied: the spans may go at once.
  Result<WorkPtr> alltoallv_async(const void* sendbuf, std::span<const size_t> send_counts,
                                  std::span<const size_t> send_displs, void* recvbuf,
                                  std::span<const size_t> recv_counts, std::span<const size_t> recv_displs,
                                  DataType type);
  Result<WorkPtr> barrier_async();

  /// Stream-ordered forms, for GPU buffers (CUDA device memory; host memory
  /// works too), as NCCL's calls: each returns once its work is enqueued on
  /// `stream`. The collective starts after the work already on the stream,
  /// and work enqueued after it sees the result; the Work completes once the
  /// result is in place. Runs in issue order with every other collective, so
  /// the stream of an earlier call must not wait for a later call's work.
  /// On one host over shm the collectives go GPU to GPU (CUDA IPC);
  /// elsewhere GPU buffers are staged through pinned host memory, pipelined
  /// in chunks for allreduce, broadcast and reduce (docs/gpudirect.md).
  /// Without CUDA: kNotFound "no CUDA driver".
  Result<WorkPtr> allreduce(const void* sendbuf, void* recvbuf, size_t count, DataType type, ReduceOp op,
                            GpuStream stream);
  Result<WorkPtr> reduce_scatter(const void* sendbuf, void* recvbuf, size_t recvcount, DataType type, ReduceOp op,
                                 GpuStream stream);
  Result<WorkPtr> allgather(const void* sendbuf, void* recvbuf, size_t count, DataType type, GpuStream stream);
  Result<WorkPtr> broadcast(void* buf, size_t count, DataType type, int root, GpuStream stream);
  Result<WorkPtr> reduce(const void* sendbuf, void* recvbuf, size_t count, DataType type, ReduceOp op, int root,
                         GpuStream stream);
  Result<WorkPtr> alltoall(const void* sendbuf, void* recvbuf, size_t count, DataType type, GpuStream stream);
  /// Uneven alltoall on a stream: one piece, staged; recvbuf's bytes outside
  /// the received blocks are left alone.
  Result<WorkPtr> alltoallv(const void* sendbuf, std::span<const size_t> send_counts,
                            std::span<const size_t> send_displs, void* recvbuf, std::span<const size_t> recv_counts,
                            std::span<const size_t> recv_displs, DataType type, GpuStream stream);
  /// Point-to-point on a stream, staged through pinned host memory. Each is
  /// the blocking call's job on the worker, in issue order with the
  /// collectives: pair a rank's sends and receives as blocking ones would
  /// be (a rank that sends a large message to a peer that sends to it first
  /// waits, as with NCCL outside a group), or use one communicator per
  /// direction as grex_torch does.
  Result<WorkPtr> send(const void* buf, size_t bytes, int peer, uint32_t tag, GpuStream stream);
  Result<WorkPtr> recv(void* buf, size_t bytes, int peer, uint32_t tag, GpuStream stream);
  Result<WorkPtr> sendrecv(const void* sendbuf, size_t sendbytes, int dst, void* recvbuf, size_t recvbytes, int src,
                           uint32_t tag, GpuStream stream);

  /// The allreduce algorithm used for `bytes` ("ring", "rabenseifner", ...).
  std::string allreduce_algorithm(size_t bytes) const;

  /// Memory the backend moves fastest (shm: shared between processes, read by
  /// peers in place). Optional: collectives work on any host memory. Runs
  /// after the async collectives issued before it (it waits for them).
  Result<void*> alloc(size_t bytes);
  /// Releases memory from alloc(); after the async collectives issued before
  /// it, which may still use that memory.
  Result<void> free(void* ptr);
  /// Registers [addr, addr+bytes) with the device once (Device::register_memory,
  /// reference counted), so collectives on buffers inside it skip
  /// registration. Ordered with async collectives like alloc().
  Result<MemoryRegion*> register_memory(void* addr, size_t bytes, MemoryDomain domain = MemoryDomain::kHost);
  /// Drops one reference taken by register_memory(); after the async
  /// collectives issued before it.
  Result<void> deregister_memory(MemoryRegion* region);

  struct Impl;

 private:
  explicit Communicator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace grex
