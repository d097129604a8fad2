// SPDX-License-Identifier: Apache-2.0
// Non-blocking collectives: a queue run by one worker thread per communicator,
// in issue order. A blocking call runs inline when nothing is queued or
// running, else it queues behind the others and waits, so the device is only
// ever driven by one thread at a time.
#include <algorithm>
#include <chrono>
#include <optional>

#include "collectives/work_queue.h"

namespace grex {

struct Work::State {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::optional<Error> error;

  void finish(Result<void> r) {
    std::lock_guard<std::mutex> lk(mu);
    if (!r) error = std::move(r).error();
    done = true;
    cv.notify_all();
  }
  Result<void> outcome() const {
    if (error) return *error;
    return ok();
  }
};

Result<void> Work::wait() {
  std::unique_lock<std::mutex> lk(state_->mu);
  state_->cv.wait(lk, [&] { return state_->done; });
  return state_->outcome();
}

Result<void> Work::wait(int64_t timeout_ms) {
  std::unique_lock<std::mutex> lk(state_->mu);
  if (!state_->cv.wait_for(lk, std::chrono::milliseconds(timeout_ms), [&] { return state_->done; }))
    return Error(Errc::kTimeout, "collective still running after " + std::to_string(timeout_ms) + " ms");
  return state_->outcome();
}

bool Work::test() const {
  std::lock_guard<std::mutex> lk(state_->mu);
  return state_->done;
}

namespace detail {

Result<void> WorkQueue::on_device(JobFn& fn) {
  if (!bg_started_.load(std::memory_order_acquire)) {
    unlocked_job_ = true;
    Result<void> r = fn();
    unlocked_job_ = false;
    if (late_lock_.owns_lock()) late_lock_.unlock();  // kick() started the poll meanwhile
    return r;
  }
  std::lock_guard<std::mutex> dev(device_mu_);
  return fn();
}

Result<void> WorkQueue::run(JobFn fn) {
  // Nothing submitted is still running: the device is ours (see open_),
  // but for the background poll, which yields it.
  if (open_.load(std::memory_order_acquire) == 0) return on_device(fn);
  {
    std::unique_lock<std::mutex> lk(mu_);
    if (queue_.empty() && !running_) {
      running_ = true;
      lk.unlock();
      Result<void> r = on_device(fn);
      lk.lock();
      running_ = false;
      cv_.notify_all();
      return r;
    }
  }
  return submit(std::move(fn))->wait();
}

WorkPtr WorkQueue::completed(Result<void> r) {
  auto state = std::make_shared<Work::State>();
  state->finish(std::move(r));
  return std::make_shared<Work>(state);
}

WorkPtr WorkQueue::submit(JobFn fn) {
  auto state = std::make_shared<Work::State>();
  open_.fetch_add(1, std::memory_order_relaxed);  // only this thread submits
  {
    std::lock_guard<std::mutex> lk(mu_);
    queue_.push_back(Job{std::move(fn), state});
    if (!worker_.joinable()) worker_ = std::thread([this] { worker_loop(); });
  }
  cv_.notify_all();
  return std::make_shared<Work>(state);
}

void WorkQueue::worker_loop() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return (stopping_ && queue_.empty()) || (!queue_.empty() && !running_); });
    if (queue_.empty()) return;  // stopping
    Job job = std::move(queue_.front());
    queue_.pop_front();
    running_ = true;
    lk.unlock();
    Result<void> r = on_device(job.fn);
    // Done with the device before the Work says so: a blocking call the
    // caller makes after wait() may then run inline.
    open_.fetch_sub(1, std::memory_order_release);
    job.state->finish(std::move(r));
    lk.lock();
    running_ = false;
    cv_.notify_all();
  }
}

void WorkQueue::stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();  // what was queued still runs first
  {
    std::lock_guard<std::mutex> lk(bg_mu_);
    bg_stop_ = true;
  }
  bg_cv_.notify_all();
  if (bg_.joinable()) bg_.join();
}

void WorkQueue::kick() {
  // The job that starts the background poll holds the device from here on
  // (taken before bg_mu_, in the order the poll takes them).
  if (unlocked_job_ && !late_lock_.owns_lock() && !bg_started_.load(std::memory_order_relaxed))
    late_lock_ = std::unique_lock<std::mutex>(device_mu_);
  {
    std::lock_guard<std::mutex> lk(bg_mu_);
    if (bg_stop_ || !bg_poll_) return;
    bg_active_ = true;
    ++bg_kicks_;
    if (!bg_.joinable()) {
      bg_started_.store(true, std::memory_order_release);  // from now on every job holds the device
      bg_ = std::thread([this] { background_loop(); });
    }
  }
  bg_cv_.notify_all();
}

void WorkQueue::background_loop() {
  // Every 50 us after a kick, then twice as long after each poll up to 1 ms:
  // what waits here is for a rank that is late anyway (a deadline
  // allreduce's result), and polling at 20 kHz took a core's tenth from the
  // ranks' own work on a busy host.
  constexpr int64_t kFirstUs = 50, kMaxUs = 1000;
  int64_t us = kFirstUs;
  uint32_t seen = 0;
  std::unique_lock<std::mutex> lk(bg_mu_);
  for (;;) {
    bg_cv_.wait(lk, [&] { return bg_stop_ || bg_active_; });
    if (bg_stop_) return;
    if (bg_kicks_ != seen) {
      seen = bg_kicks_;
      us = kFirstUs;
    }
    bg_cv_.wait_for(lk, std::chrono::microseconds(us), [&] { return bg_stop_; });
    if (bg_stop_) return;
    us = std::min(us * 2, kMaxUs);
    lk.unlock();
    // Only between jobs: a job that holds the device makes the progress itself.
    std::unique_lock<std::mutex> dev(device_mu_, std::try_to_lock);
    bool more = true;
    if (dev.owns_lock()) more = bg_poll_();
    lk.lock();  // still holding the device: a kick() (a job's) cannot slip in before the flag
    if (!more) bg_active_ = false;
    if (dev.owns_lock()) dev.unlock();
  }
}

}  // namespace detail

}  // namespace grex
