// SPDX-License-Identifier: Apache-2.0
// Non-blocking collectives: a queue run by one worker thread per communicator,
// in issue order. A blocking call runs inline when nothing is queued or
// running, else it queues behind the others and waits, so the device is only
// ever driven by one thread at a time.
#include <chrono>

#include "collectives/comm_impl.h"

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

Result<void> Communicator::Impl::run(detail::JobFn fn) {
  // Nothing submitted is still running: the device is ours (see async_open).
  if (async_open.load(std::memory_order_acquire) == 0) return fn();
  {
    std::unique_lock<std::mutex> lk(q_mu);
    if (queue.empty() && !running) {
      running = true;
      lk.unlock();
      Result<void> r = fn();
      lk.lock();
      running = false;
      q_cv.notify_all();
      return r;
    }
  }
  return submit(std::move(fn))->wait();
}

WorkPtr Communicator::Impl::submit(detail::JobFn fn) {
  auto state = std::make_shared<Work::State>();
  async_open.fetch_add(1, std::memory_order_relaxed);  // only this thread submits
  {
    std::lock_guard<std::mutex> lk(q_mu);
    queue.push_back(Job{std::move(fn), state});
    if (!worker.joinable()) worker = std::thread([this] { worker_loop(); });
  }
  q_cv.notify_all();
  return std::make_shared<Work>(state);
}

void Communicator::Impl::worker_loop() {
  std::unique_lock<std::mutex> lk(q_mu);
  for (;;) {
    q_cv.wait(lk, [&] { return (stopping && queue.empty()) || (!queue.empty() && !running); });
    if (queue.empty()) return;  // stopping
    Job job = std::move(queue.front());
    queue.pop_front();
    running = true;
    lk.unlock();
    Result<void> r = job.fn();
    // Done with the device before the Work says so: a blocking call the
    // caller makes after wait() may then run inline.
    async_open.fetch_sub(1, std::memory_order_release);
    job.state->finish(std::move(r));
    lk.lock();
    running = false;
    q_cv.notify_all();
  }
}

void Communicator::Impl::stop_worker() {
  {
    std::lock_guard<std::mutex> lk(q_mu);
    stopping = true;
  }
  q_cv.notify_all();
  if (worker.joinable()) worker.join();  // what was queued still runs first
}

}  // namespace grex
