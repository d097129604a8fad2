// SPDX-License-Identifier: Apache-2.0
// Communicator internals shared by the algorithm files.
#pragma once

#include <grex/communicator.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <thread>
#include <type_traits>
#include <vector>

#include "collectives/cost_model.h"
#include "collectives/engine.h"
#include "core/counters.h"

namespace grex {
namespace detail {

/// A move-only job: a callable returning Result<void>, kept inline when its
/// captures fit (every collective's but alltoallv's do), so a blocking call
/// allocates nothing; larger ones go to the heap.
class JobFn {
 public:
  JobFn() = default;
  template <class F, class D = std::decay_t<F>,
            class = std::enable_if_t<!std::is_same_v<D, JobFn> && std::is_invocable_r_v<Result<void>, D&>>>
  JobFn(F&& f) {  // NOLINT(google-explicit-constructor): built from lambdas like std::function
    if constexpr (sizeof(D) <= kInlineBytes && alignof(D) <= alignof(std::max_align_t) &&
                  std::is_nothrow_move_constructible_v<D>) {
      ::new (static_cast<void*>(buf_)) D(std::forward<F>(f));
      ops_ = &kInlineOps<D>;
    } else {
      ptr_ = new D(std::forward<F>(f));
      ops_ = &kHeapOps<D>;
    }
  }
  JobFn(JobFn&& o) noexcept { take(o); }
  JobFn& operator=(JobFn&& o) noexcept {
    if (this != &o) {
      reset();
      take(o);
    }
    return *this;
  }
  JobFn(const JobFn&) = delete;
  JobFn& operator=(const JobFn&) = delete;
  ~JobFn() { reset(); }
  Result<void> operator()() { return ops_->call(*this); }
  explicit operator bool() const noexcept { return ops_ != nullptr; }

 private:
  static constexpr size_t kInlineBytes = 64;
  struct Ops {
    Result<void> (*call)(JobFn&);
    void (*move)(JobFn& to, JobFn& from) noexcept;  // from's object ends up in to
    void (*destroy)(JobFn&) noexcept;
  };
  template <class D>
  static const Ops kInlineOps;
  template <class D>
  static const Ops kHeapOps;
  void take(JobFn& o) noexcept {
    if (o.ops_ != nullptr) o.ops_->move(*this, o);
    ops_ = o.ops_;
    o.ops_ = nullptr;
  }
  void reset() noexcept {
    if (ops_ != nullptr) ops_->destroy(*this);
    ops_ = nullptr;
  }
  const Ops* ops_ = nullptr;
  union {
    alignas(std::max_align_t) unsigned char buf_[kInlineBytes];
    void* ptr_;
  };
};

template <class D>
inline const JobFn::Ops JobFn::kInlineOps{
    [](JobFn& j) { return (*std::launder(reinterpret_cast<D*>(j.buf_)))(); },
    [](JobFn& to, JobFn& from) noexcept {
      D* src = std::launder(reinterpret_cast<D*>(from.buf_));
      ::new (static_cast<void*>(to.buf_)) D(std::move(*src));
      src->~D();
    },
    [](JobFn& j) noexcept { std::launder(reinterpret_cast<D*>(j.buf_))->~D(); }};
template <class D>
inline const JobFn::Ops JobFn::kHeapOps{[](JobFn& j) { return (*static_cast<D*>(j.ptr_))(); },
                                            [](JobFn& to, JobFn& from) noexcept { to.ptr_ = from.ptr_; },
                                            [](JobFn& j) noexcept { delete static_cast<D*>(j.ptr_); }};

/// Makes `mr` (device-allocated, `have` bytes) hold at least `want` bytes:
/// freed and allocated anew when it is smaller. The scratch, staging and work
/// buffers all grow this way.
Result<void> grow_region(Device& dev, MemoryRegion*& mr, size_t& have, size_t want);

}  // namespace detail

struct Communicator::Impl {
  std::shared_ptr<Bootstrap> bootstrap;
  std::unique_ptr<Device> device;
  std::vector<std::unique_ptr<Endpoint>> endpoints;  // [rank]; null for self
  std::unique_ptr<detail::Engine> engine;
  CommOptions opts;
  /// opts.stage_sends, read once at creation (the data path compares no strings).
  enum class Stage : uint8_t { kAuto, kAlways, kNever } stage = Stage::kAuto;
  CommStats stats;             // filled by Communicator::stats() on the caller's thread
  Counter collectives_done;    // finish() counts here (the worker's thread, maybe)
  int rank = 0;
  int size = 1;
  uint32_t seq = 0;                  // collective sequence number, for tags
  std::optional<Error> broken;       // set by the first failed collective
  MemoryRegion* scratch = nullptr;   // reduction landing zone (allocate())
  size_t scratch_bytes = 0;
  MemoryRegion* staging = nullptr;   // send-side staging ring (allocate()), shm only
  size_t staging_bytes = 0;
  MemoryRegion* work = nullptr;      // whole-vector temporary (allocate())
  size_t work_bytes = 0;
  MemoryRegion* bounce = nullptr;    // small vectors of memory that would be registered per call (allocate())
  std::map<void*, MemoryRegion*> user_allocs;  // alloc() results
  detail::CostModel cost;                    // picks the allreduce algorithm
  std::optional<detail::Algo> forced_algo;   // GREX_ALGO

  // Collectives run one at a time, in issue order: inline on the caller's
  // thread when nothing is queued, else on the worker thread (work.cc).
  struct Job {
    detail::JobFn fn;
    std::shared_ptr<Work::State> state;
  };
  std::mutex q_mu;
  std::condition_variable q_cv;
  std::deque<Job> queue;
  bool running = false;  // a collective is using the device
  bool stopping = false;
  std::thread worker;
  /// Collectives submitted and not yet returned from their job. Only the one
  /// thread that uses the Communicator submits, so when it reads 0 (acquire;
  /// the worker releases after each job) nothing else can touch the device,
  /// and a blocking call runs inline without taking q_mu.
  std::atomic<uint64_t> async_open{0};
  /// Runs fn now (or after what is queued) and returns its result.
  Result<void> run(detail::JobFn fn);
  /// Queues fn; the Work reports its result.
  WorkPtr submit(detail::JobFn fn);
  void worker_loop();
  void stop_worker();
  /// Measures alpha, beta (ping-pong with a neighbour) and gamma (a local
  /// reduction); every rank ends with the slowest pair's values.
  Result<void> calibrate();
  detail::Algo allreduce_algo(size_t bytes) const noexcept {
    if (forced_algo && (*forced_algo != detail::Algo::kFlat || flat_fits(bytes))) return *forced_algo;
    if (!forced_algo && flat_fits(bytes)) return detail::Algo::kFlat;
    return cost.choose_allreduce(size, bytes, direct_preferred());
  }
  /// The same inside a running collective (jobs run one at a time): training
  /// loops repeat sizes, so the last answer is remembered.
  detail::Algo job_allreduce_algo(size_t bytes) noexcept {
    if (bytes != algo_memo_bytes) {
      algo_memo = allreduce_algo(bytes);
      algo_memo_bytes = bytes;
    }
    return algo_memo;
  }
  size_t algo_memo_bytes = ~size_t{0};
  detail::Algo algo_memo = detail::Algo::kRing;
  /// Registrations of user buffers kept across calls (least recently used
  /// goes first): registering on every call costs page faults and syscalls.
  struct CachedRegistration {
    MemoryRegion* mr;
    uint64_t last_use;
  };
  std::vector<CachedRegistration> reg_cache;
  // Registrations made for one call only (registration_pins_pages), retired
  // by their ScopedRegistration. A successful finish() releases them; after a
  // failure the flows may still hold operations on them, so they stay until
  // ~Communicator has destroyed the endpoints.
  std::vector<MemoryRegion*> retired;
  void release_retired() {
    for (MemoryRegion* mr : retired) (void)device->deregister_memory(mr);
    retired.clear();
  }
  uint64_t reg_clock = 0;
  static constexpr size_t kMaxCachedRegistrations = 32;
  /// A registration covering [p, p+n), from the cache or new. *transient is
  /// set when the caller must release it after the call: on devices whose
  /// registrations pin pages, user memory is never cached across calls (the
  /// user may free it and get other pages at the same address).
  Result<MemoryRegion*> registration(const void* p, size_t n, bool* transient);
  /// Drops cached registrations inside `mr`'s range (before it is freed).
  void evict_registrations(const MemoryRegion* mr);

  /// Fresh tag space for one collective: bit 63 set, sequence in bits 32..62,
  /// the call's signature in bits 20..31 (ranks that disagree on count, dtype,
  /// op or root post tags that never match; finish() then names the disagreement).
  uint64_t next_tag_base() noexcept {
    return (1ull << 63) | (static_cast<uint64_t>(++seq & 0x7fffffff) << 32) | (uint64_t{sig & 0xfff} << 20);
  }
  /// The collective about to run, as every rank should see it (what,
  /// "count"=N, dtype, op, root; -1 / nullptr for what it lacks). Sets the
  /// tag signature and counts the call. No allocation: the text ("allreduce
  /// count=100 f32 sum") is built only when a timeout needs it.
  struct CallSig {
    const char* what = "";
    const char* count_name = nullptr;  // "count", "recvcount", "bytes"
    uint64_t count = 0;
    int dtype = -1;  // DataType, or -1
    int op = -1;     // ReduceOp, or -1
    int root = -1;
  };
  void begin(const CallSig& s) noexcept;
  std::string sig_text() const { return describe(call); }
  static std::string describe(const CallSig& s);
  /// kMismatch naming both calls: what a peer's header said it called.
  Error mismatch(int peer, const CallSig& theirs) const;
  /// After a timeout: compares this call's signature with the other ranks'
  /// through the store; a kMismatch naming both calls if one differs, else e.
  Error diagnose(Error e);
  uint32_t sig = 0;
  CallSig call;
  uint64_t ncoll = 0;
  Deadline deadline() const noexcept { return Deadline::after_ms(opts.timeout_ms); }
  /// Makes sure scratch holds at least `bytes`.
  Result<void> ensure_scratch(size_t bytes);
  /// Whether sends from `mr` should be staged through shared memory (the
  /// backend serves allocate()d memory faster than arbitrary user memory).
  bool should_stage(const MemoryRegion* mr, size_t bytes) const;
  /// `mr` is memory from Communicator::alloc (peers map it and reach it in place).
  bool is_user_alloc(const MemoryRegion* mr) const noexcept {
    for (const auto& [p, a] : user_allocs)
      if (a == mr) return true;
    return false;
  }
  /// Large point-to-point messages travel as a stream of chunks (both ranks
  /// decide alike from the size), so the sender can stage them.
  bool p2p_chunked(size_t bytes) const noexcept {
    return device->capabilities().allocate_shared && bytes >= opts.stage_min_bytes && bytes > opts.chunk_bytes;
  }
  /// Makes sure the staging ring holds at least `bytes`.
  Result<void> ensure_staging(size_t bytes);
  /// Makes sure the work buffer holds at least `bytes`.
  Result<void> ensure_work(size_t bytes);
  /// Up to this many bytes, a collective on memory the device registers per
  /// call only runs on `bounce` instead (copied in and out).
  static constexpr size_t kBounceBytes = 64 * 1024;
  /// The bounce buffer for a collective on [p, p+bytes), or nullptr when the
  /// memory is used in place (registered already, cheap to register, or large).
  Result<uint8_t*> small_bounce(const void* p, size_t bytes);
  /// Fails fast if an earlier error broke the communicator.
  Result<void> check_usable(const char* what) const;
  /// Argument checks shared by send and recv.
  Result<void> check_p2p(const char* what, const void* buf, size_t bytes, int peer) const;
  /// Records a collective's outcome (marks the communicator broken on error).
  Result<void> finish(Result<void> r, const char* what);

  // Algorithms (ring_allreduce.cc, tree_broadcast.cc, algorithms.cc).
  Result<void> ring_allreduce(const void* sendbuf, void* recvbuf, size_t count, DataType type, ReduceOp op);
  /// One-sided reads and writes, segment r reduced by rank r (direct_allreduce.cc).
  Result<void> direct_allreduce(const void* sendbuf, void* recvbuf, size_t count, DataType type, ReduceOp op);
  /// The device offers what direct_allreduce needs.
  bool direct_ok() const noexcept;
  /// ... and its one-sided operations are CPU copies on this host (shm).
  bool direct_preferred() const noexcept { return direct_ok() && device->capabilities().allocate_shared; }
  /// Recursive doubling (halving = false) or Rabenseifner (halving = true).
  Result<void> allreduce_recursive(const void* sendbuf, void* recvbuf, size_t count, DataType type, ReduceOp op,
                                   bool halving);
  Result<void> allreduce_tree(const void* sendbuf, void* recvbuf, size_t count, DataType type, ReduceOp op);
  Result<void> tree_broadcast(void* buf, size_t bytes, int root);
  Result<void> tree_reduce(const void* sendbuf, void* recvbuf, size_t count, DataType type, ReduceOp op, int root);
  Result<void> ring_reduce_scatter(const void* sendbuf, void* recvbuf, size_t count, DataType type, ReduceOp op);
  Result<void> ring_allgather(const void* sendbuf, void* recvbuf, size_t count, DataType type);
  Result<void> pairwise_alltoall(const void* sendbuf, void* recvbuf, size_t count, DataType type);
  /// The copy of this rank's own block; kMismatch when it sends itself
  /// another byte count than it expects.
  Result<void> alltoallv_own_block(const void* sendbuf, const std::vector<uint64_t>& scounts,
                                   const std::vector<uint64_t>& sdispls, void* recvbuf,
                                   const std::vector<uint64_t>& rcounts, const std::vector<uint64_t>& rdispls);
  /// Byte counts and offsets per rank (already scaled by the element size).
  Result<void> pairwise_alltoallv(const void* sendbuf, const std::vector<uint64_t>& scounts,
                                  const std::vector<uint64_t>& sdispls, void* recvbuf,
                                  const std::vector<uint64_t>& rcounts, const std::vector<uint64_t>& rdispls);
  Result<void> dissemination_barrier();

  // Flat allreduce (flat_allreduce.cc): vectors of up to flat_max bytes go
  // through one small shared area per rank that every rank maps. Set up at
  // creation where all ranks share this host and the device offers
  // load/store access to peer memory; flat_max stays 0 otherwise.
  MemoryRegion* flat_area = nullptr;
  std::vector<uint8_t*> flat_bases;  // [rank]: each rank's area as mapped here
  size_t flat_stride = 0;            // bytes per slot (two slots, by call parity)
  size_t flat_max = 0;
  uint64_t flat_seq = 0;             // flat calls so far
  bool flat_fits(size_t bytes) const noexcept { return bytes > 0 && bytes <= flat_max; }
  /// Collective (store exchanges): every rank must call it alike.
  Result<void> setup_flat(bool all_local);
  /// Publishes `bytes` of data under `sig` in this rank's next slot and
  /// waits until every peer published the same call; returns the slot's offset.
  Result<size_t> flat_exchange(const void* data, size_t bytes, uint64_t sig, const char* what);
  Result<void> flat_wait(int peer, uint64_t seq, size_t slot, const char* what);
  /// A call's count (low 48 bits), dtype and op in one word, as the
  /// shared-slot algorithms (flat, staged) publish it beside their data.
  static uint64_t pack_sig(uint64_t count, DataType type, ReduceOp op) noexcept {
    return (count & ((uint64_t{1} << 48) - 1)) | (uint64_t{static_cast<uint8_t>(type)} << 48) |
           (uint64_t{static_cast<uint8_t>(op)} << 56);
  }
  /// kMismatch naming both calls, from a peer's packed signature (or the
  /// flat barrier's).
  Error packed_mismatch(int peer, uint64_t theirs) const;
  /// The packed signature `peer` published at `line` + 8 (beside the
  /// sequence), if it differs from `sig`: kMismatch naming both calls.
  std::optional<Error> published_mismatch(int peer, const uint8_t* line, uint64_t sig) const;
  /// Spins until the 64-bit sequence at the start of `line` (in `peer`'s
  /// area) equals `want` (or is at least `want`), letting the engine notice
  /// a dead peer and yielding when ranks outnumber cores; kTimeout names the peer.
  Result<void> wait_line(int peer, uint8_t* line, uint64_t want, bool at_least, const char* what);
  Result<void> flat_allreduce(const void* sendbuf, void* recvbuf, size_t count, DataType type, ReduceOp op);
  /// A barrier through the same slots (no data).
  Result<void> flat_barrier();

  // Staged direct allreduce (staged_allreduce.cc): direct's division of the
  // work (rank r reduces segment r), with user memory copied block by block
  // into cache-sized slots of the flat area, which peers read and write with
  // loads and stores instead of kernel copies. Set up with the flat area.
  bool staged_on = false;
  size_t stage_off = 0;    // where the staging part starts in each rank's area
  uint64_t stage_seq = 0;  // staged blocks so far (every rank counts alike)
  size_t staged_flags_bytes() const noexcept;
  size_t staged_slot_bytes() const noexcept;
  size_t staged_area_bytes() const noexcept;
  /// Same decision on every rank: it depends on the size, the options and
  /// whether any rank runs in place (from the descriptors every rank has).
  bool staged_fits(size_t bytes, bool any_in_place) const noexcept;
  Result<void> staged_allreduce(const void* sendbuf, void* recvbuf, size_t count, DataType type, ReduceOp op);
};

/// kInvalidArgument for a bad call: "what: msg", from `rank`.
inline Error bad_arg(int rank, const char* what, std::string msg) {
  return Error(Errc::kInvalidArgument, std::string(what) + ": " + msg).rank(rank);
}

/// The registration a call uses for one buffer: it stays in the
/// communicator's cache after the call, or is released at the end of the
/// scope where caching would be unsafe (see Impl::registration).
class ScopedRegistration {
 public:
  explicit ScopedRegistration(Communicator::Impl& c) : c_(c) {}
  ~ScopedRegistration();
  ScopedRegistration(const ScopedRegistration&) = delete;
  ScopedRegistration& operator=(const ScopedRegistration&) = delete;
  Result<MemoryRegion*> acquire(const void* p, size_t bytes) {
    auto r = c_.registration(p, bytes, &transient_);
    if (r) mr_ = *r;
    return r;
  }
  MemoryRegion* get() const noexcept { return mr_; }
  /// Offset of p inside the registration.
  uint64_t offset(const void* p) const noexcept {
    return static_cast<uint64_t>(static_cast<const char*>(p) - static_cast<const char*>(mr_->addr()));
  }

 private:
  Communicator::Impl& c_;
  MemoryRegion* mr_ = nullptr;
  bool transient_ = false;
};

}  // namespace grex
