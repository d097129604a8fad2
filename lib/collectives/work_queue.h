// SPDX-License-Identifier: Apache-2.0
// The async worker queue: collectives run one at a time, in issue order,
// inline on the caller's thread when nothing is queued, else on one worker
// thread per communicator, so the device is only ever driven by one thread.
#pragma once

#include <grex/communicator.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <thread>
#include <type_traits>
#include <utility>

namespace grex::detail {

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

class WorkQueue {
 public:
  WorkQueue() = default;
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;
  ~WorkQueue() { stop(); }

  /// Runs fn now (or after what is queued) and returns its result.
  Result<void> run(JobFn fn);
  /// Queues fn; the Work reports its result.
  WorkPtr submit(JobFn fn);
  /// A Work that is already complete with `r`.
  static WorkPtr completed(Result<void> r);
  /// Runs what is queued, then ends the worker (and the background poll).
  void stop();
  /// Work that must progress between calls (a deadline allreduce's result
  /// on its way to a late rank): once kick()ed, `poll` runs on a thread of
  /// its own about every 50 us, whenever no job holds the device, until it
  /// returns false. Set once, before the first kick().
  void set_background(std::function<bool()> poll) { bg_poll_ = std::move(poll); }
  /// Called by a job (holding the device): the background poll has work.
  void kick();

 private:
  void worker_loop();
  void background_loop();
  /// Runs a job holding the device (device_mu_, once it is needed).
  Result<void> on_device(JobFn& fn);
  struct Job {
    JobFn fn;
    std::shared_ptr<Work::State> state;
  };
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  bool running_ = false;  // a job is using the device
  bool stopping_ = false;
  std::thread worker_;
  /// Jobs submitted and not yet returned. Only the one thread that uses the
  /// Communicator submits, so when it reads 0 (acquire; the worker releases
  /// after each job) nothing else can touch the device, and a blocking call
  /// runs inline without taking mu_.
  std::atomic<uint64_t> open_{0};
  /// Held by whatever drives the device: a job (inline or on the worker) or
  /// the background poll, which only try_locks it. Only from the first
  /// kick() on: before it no other thread drives the device, and a mutex
  /// costs two atomic operations a call once the process has a second
  /// thread (glibc skips them while it has one), about 5 ns of an 8-byte
  /// allreduce's 130 over shared memory.
  std::mutex device_mu_;
  std::atomic<bool> bg_started_{false};  // the background poll exists: jobs lock device_mu_
  /// The job running without the lock (bg_started_ was false): kick() takes
  /// it for the rest of the job when it starts the poll. Touched only by the
  /// thread running the job.
  bool unlocked_job_ = false;
  std::unique_lock<std::mutex> late_lock_;
  std::function<bool()> bg_poll_;
  std::thread bg_;
  std::mutex bg_mu_;
  std::condition_variable bg_cv_;
  bool bg_active_ = false;
  bool bg_stop_ = false;
  uint32_t bg_kicks_ = 0;  // kick()s so far: a new one polls at the short interval again
};

}  // namespace grex::detail
