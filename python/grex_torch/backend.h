// SPDX-License-Identifier: Apache-2.0
// GrexBackend: grex as a torch 2 c10d::Backend (torch 2.4 and later).
//
// Collectives go through one grex Communicator per group: its *_async calls run
// in issue order on the communicator's worker thread, and a completer thread
// waits for them in that same order, runs copy-outs and completes each Work's
// future (so DDP's comm hooks fire as soon as a bucket is reduced).
//
// Point-to-point goes through channels: one two-rank Communicator per peer and
// direction, created on first use, each driven by its own thread. A send to
// rank p never waits behind a receive from p, so isend/irecv pairs and
// batch_isend_irecv cannot deadlock, and each peer's messages stay in order.
//
// Device dispatch: every tensor passes through path_of(), which names the
// engine for its device. CPU tensors take the *_async calls; CUDA tensors take
// the stream-ordered calls on torch's current stream of their device (as
// ProcessGroupNCCL's users expect: the collective starts after the work queued
// on that stream, and work queued after it sees the result), and their
// copy-outs are queued on that stream too. Point-to-point of CUDA tensors goes
// through host copies in the channels.
#pragma once

#include <grex/communicator.h>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <optional>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace grex::torch_backend {

/// Which engine moves a tensor's bytes.
enum class Path { kCpu, kCuda };

/// The engine for `t`, or an error naming grex and `op`.
Path path_of(const at::Tensor& t, const char* op);
/// True for CUDA tensors; raises if `others` are not on `t`'s device.
bool on_cuda(const at::Tensor& t, const std::vector<at::Tensor>& others, const char* op);
/// torch's current stream on `t`'s CUDA device.
GpuStream stream_of(const at::Tensor& t);
/// grex's element type for `t`'s dtype; raises for types grex lacks.
DataType dtype_of(const at::Tensor& t, const char* op);
/// Checks that `t` is contiguous, of a grex dtype and on a device grex serves.
void check_tensor(const at::Tensor& t, const char* op);

/// A Work whose future completes once all of its `pieces` reported; the first
/// error wins. Any thread may report; wait() blocks on a condition variable.
class GrexWork final : public c10d::Work {
 public:
  GrexWork(int rank, c10d::OpType type, const char* op, std::vector<at::Tensor> outputs, int pieces = 1);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override;
  /// Blocks until done; raises the Work's error, or a timeout error naming the op.
  bool wait(std::chrono::milliseconds timeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

  /// recv_anysource: the rank the message came from (set before it completes).
  void set_source(int rank) { source_ = rank; }
  int sourceRank() const override;
  /// One piece finished with `r` (message already prefixed by the caller).
  void piece_done(const Result<void>& r);
  /// Completes at once with `message` as the error (abort); later pieces are ignored.
  void fail(const std::string& message);

 private:
  void complete_locked(std::unique_lock<std::mutex>& lock);

  const char* op_;
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int pieces_left_;
  int source_ = -1;
  bool constructing_ = true;  // complete_locked from the constructor: no callbacks yet
  bool completing_ = false;   // the future's completion is queued or running
  bool done_ = false;         // the future is complete
  std::string error_;
};

/// A receive from whichever rank sends first (recv_anysource). Every
/// receiving channel looks for its message (the pair communicators carry
/// notices: CommOptions::any_source) until one channel claims it.
struct AnyRecv {
  at::Tensor tensor;  // host memory the message lands in
  at::Tensor dest;    // a CUDA tensor it is then copied into, if any
  int tag = 0;
  c10::intrusive_ptr<GrexWork> work;
  std::chrono::steady_clock::time_point posted, deadline;
};

/// What the threads of one backend share; it outlives the backend while a
/// thread still finishes an operation (abort never waits for them).
struct Core {
  int rank = 0;
  int size = 0;
  std::chrono::milliseconds timeout{0};
  c10::intrusive_ptr<c10d::Store> store;
  std::unique_ptr<Communicator> comm;

  struct Pending {
    std::vector<WorkPtr> works;
    c10::intrusive_ptr<GrexWork> handle;
    std::function<void()> after;  // copy-outs once every piece succeeded
  };
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Pending> pending;
  c10::intrusive_ptr<GrexWork> in_flight;  // the one the completer waits for
  bool stopping = false;
  bool completer_done = false;
  std::string aborted;  // non-empty: why every later call fails

  std::mutex any_mu;  // taken after a channel's own lock, never before
  std::deque<std::shared_ptr<AnyRecv>> any;  // recv_anysource calls no channel has claimed, oldest first
  /// The unclaimed receives from any source, oldest first.
  std::vector<std::shared_ptr<AnyRecv>> any_waiting();
  /// Takes `r` off the board; false when another channel took it first.
  bool claim(const AnyRecv* r);

  /// "grex: rank R: " + what, the prefix of every error this backend raises.
  std::string describe(const std::string& what) const;
  /// Waits for queued collectives in issue order until stopping and drained.
  void complete_loop();
  /// After a timeout, torch's dump-on-timeout for grex's flight recorder (backend.cc).
  void dump_on_timeout();
  std::atomic<bool> dumped{false};
};

/// One direction of point-to-point traffic with one peer. Its thread is
/// detached and holds the channel, so abort() never waits for it.
class Channel : public std::enable_shared_from_this<Channel> {
 public:
  Channel(std::shared_ptr<Core> core, int peer, bool sending);
  /// Starts the thread (once, after construction).
  void start();
  /// Queues the send or receive of `t` (tag `tag`); `w` completes when it is done.
  void post(const at::Tensor& t, int tag, c10::intrusive_ptr<GrexWork> w, at::Tensor dest = {});
  /// A receive from any source was posted: a receiving channel looks for it.
  void nudge();
  /// Fails what is queued with `message`; the op in flight ends by the timeout.
  void abort(const std::string& message);
  /// Stops the thread after what is queued; with `wait`, returns once it did
  /// (each queued op is bounded by the group's timeout).
  void stop(bool wait);

 private:
  struct Op {
    at::Tensor tensor;
    int tag;
    c10::intrusive_ptr<GrexWork> work;
    at::Tensor dest;  // a CUDA tensor a host receive is copied into before the Work completes
  };
  void loop();
  Result<void> run(Op& op);
  /// Makes the pair communicator (a two-rank rendezvous with the peer).
  Result<void> connect();
  /// Receiving channels while a receive from any source waits: the first
  /// message noticed from this peer with its tag goes to it. Without a pair
  /// yet, only once the peer has begun making its side (a store key says).
  /// True while one of them was posted less than 10 ms ago (look again soon).
  bool poll_any();
  std::string pair_name() const;

  std::shared_ptr<Core> core_;
  int peer_;
  bool sending_;
  std::unique_ptr<Communicator> pair_;  // ranks {min(me, peer), max}, made on first use
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Op> ops_;
  c10::intrusive_ptr<GrexWork> in_flight_;  // the op the thread runs now
  bool stopping_ = false;
  bool done_ = false;
  std::chrono::steady_clock::time_point next_store_check_{};  // poll_any without a pair: the store, at most each ms
};

/// The group name in torch's options, or "" where torch (2.4) has none.
template <typename O>
std::string group_name_of(const O& o) {
  if constexpr (requires { o.group_name; }) {
    return o.group_name;
  } else {
    return "";
  }
}

/// Sets the group name in torch's options where torch has the field.
template <typename O>
void set_group_name(O& o, const std::string& name) {
  if constexpr (requires { o.group_name = name; }) o.group_name = name;
}

/// The group's options as torch sees them (split_group deep-copies them).
struct GrexOptions final : c10d::Backend::Options {
  GrexOptions(std::chrono::milliseconds timeout, const std::string& group) : Options("grex", timeout) {
    set_group_name(static_cast<Options&>(*this), group);
  }
  GrexOptions(const GrexOptions&) = default;
};

class GrexBackend final : public c10d::Backend {
 public:
  /// Connects the group through torch's store; blocks until every rank did.
  GrexBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout,
              const std::string& group_name);
  ~GrexBackend() override;

  // getBackendOptions, supportsCoalescing, abort and shutdown became virtual
  // after torch 2.4: declared without `override`, they override where torch
  // has them (the same signatures) and are plain members on 2.4.
  const std::string getBackendName() const override { return "grex"; }
  c10::intrusive_ptr<Options> getBackendOptions();
  bool supportsCoalescing() const { return true; }
  bool supportsSplitting() const override { return true; }
  /// split_group: a new backend for `ranks` (this group's ranks, sorted) over
  /// `store`. No `override`: Backend::split is newer than torch 2.4, where this
  /// is a plain member nobody calls. torch calls it once per device this
  /// backend serves; those calls share one backend.
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<Options>& opts);
  /// Collectives issued on this group so far (torch's debug checks compare them).
  void setSequenceNumberForGroup() override { seq_ = 0; }
  uint64_t getSequenceNumberForGroup() override { return seq_; }
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;
  /// Fails every queued and in-flight operation at once; never blocks.
  void abort();
  /// Finishes queued operations (each bounded by the timeout), then releases grex.
  void shutdown();

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& ts, const c10d::BroadcastOptions& o) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& ts, const c10d::AllreduceOptions& o) override;
  /// grex's compressed allreduce (issue 29), for the DDP hook in
  /// grex_torch/hooks.py: averages a float32 CPU tensor in place, the vector
  /// travelling as "bf16", "fp16", "int8" or "topk" (each rank's largest
  /// `topk_fraction` of values); with error_feedback the rounding error is
  /// kept per `key` (a bucket's index) for the next call.
  c10::intrusive_ptr<c10d::Work> compressed_allreduce(at::Tensor t, const std::string& compression,
                                                      bool error_feedback, int64_t key, double topk_fraction = 0.01);
  /// grex's deadline allreduce (issue 29), for grex_torch/hooks.py's
  /// deadline_hook: averages `t` in place over the ranks that entered within
  /// deadline_ms (the same result on every rank); a late rank's vector is
  /// dropped, or with `carry` added into its next call of the same `key`.
  /// `mask` (optional, int32, one per rank) gets 1 for each contributor.
  c10::intrusive_ptr<c10d::Work> deadline_allreduce(at::Tensor t, int64_t deadline_ms, bool carry, int64_t key,
                                                    std::optional<at::Tensor> mask);
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& ts,
                                                     const c10d::AllreduceCoalescedOptions& o) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& ts, const c10d::ReduceOptions& o) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outs, std::vector<at::Tensor>& ins,
                                           const c10d::AllgatherOptions& o) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& out, at::Tensor& in,
                                                 const c10d::AllgatherOptions& o) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outs,
                                                     std::vector<at::Tensor>& ins,
                                                     const c10d::AllgatherOptions& o) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outs,
                                                                 std::vector<at::Tensor>& ins,
                                                                 const c10d::AllgatherOptions& o) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outs, std::vector<at::Tensor>& ins,
                                        const c10d::GatherOptions& o) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outs, std::vector<std::vector<at::Tensor>>& ins,
                                         const c10d::ScatterOptions& o) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outs,
                                                std::vector<std::vector<at::Tensor>>& ins,
                                                const c10d::ReduceScatterOptions& o) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& out, at::Tensor& in,
                                                      const c10d::ReduceScatterOptions& o) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outs,
                                                                 std::vector<at::Tensor>& ins,
                                                                 const c10d::ReduceScatterOptions& o) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& out, at::Tensor& in, std::vector<int64_t>& out_splits,
                                               std::vector<int64_t>& in_splits,
                                               const c10d::AllToAllOptions& o) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outs, std::vector<at::Tensor>& ins,
                                          const c10d::AllToAllOptions& o) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& o) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& ts, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& ts, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& ts, int tag) override;

 private:
  using Started = std::vector<Result<WorkPtr>>;
  /// Queues started grex collectives as one Work completed in issue order.
  c10::intrusive_ptr<c10d::Work> submit(c10d::OpType type, const char* op, std::vector<at::Tensor> outputs,
                                        Started started, std::function<void()> after = {});
  /// The group's communicator; raises when the backend was aborted or shut down.
  Communicator& comm(const char* op) const;
  Channel& channel(int peer, bool sending);
  /// Fails the receives from any source no channel has claimed.
  void fail_any_source(const std::string& why);
  c10::intrusive_ptr<c10d::Work> remember(c10::intrusive_ptr<c10d::Work> w);
  /// alltoallv on flat staging buffers (gather, scatter, the list alltoall).
  c10::intrusive_ptr<c10d::Work> exchange(c10d::OpType type, const char* op, at::Tensor send_flat,
                                          std::vector<size_t> send_counts, at::Tensor recv_flat,
                                          std::vector<size_t> recv_counts, std::vector<at::Tensor> outputs,
                                          std::function<void()> after);

  std::shared_ptr<Core> core_;
  c10::intrusive_ptr<Options> options_;
  std::map<std::pair<int, bool>, std::shared_ptr<Channel>> channels_;
  std::map<std::pair<const c10d::Store*, std::vector<int>>, c10::intrusive_ptr<c10d::Backend>> splits_;
  uint64_t seq_ = 0;
  bool coalescing_ = false;
  std::vector<c10::intrusive_ptr<c10d::Work>> coalesced_;
  bool closed_ = false;
};

}  // namespace grex::torch_backend
