// SPDX-License-Identifier: Apache-2.0
// GrexBackend's point-to-point: a Channel per peer and direction, each a
// two-rank grex Communicator driven by its own thread (see backend.h).
#include "backend.h"

#include "torch_store.h"

#include <grex/bootstrap.h>

namespace grex::torch_backend {

Channel::Channel(std::shared_ptr<Core> core, int peer, bool sending)
    : core_(std::move(core)), peer_(peer), sending_(sending) {}

void Channel::start() {
  std::thread([self = shared_from_this()] { self->loop(); }).detach();
}

void Channel::post(const at::Tensor& t, int tag, c10::intrusive_ptr<GrexWork> w, at::Tensor dest) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ops_.push_back(Op{t, tag, std::move(w), std::move(dest)});
  }
  cv_.notify_all();
}

void Channel::nudge() {
  std::lock_guard<std::mutex> lock(mu_);  // under the lock: loop() checks the board under it
  cv_.notify_all();
}

void Channel::abort(const std::string& message) {
  std::deque<Op> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    dropped.swap(ops_);
    if (in_flight_) dropped.push_back(Op{at::Tensor(), 0, in_flight_});
  }
  cv_.notify_all();
  for (auto& op : dropped) op.work->fail(message);
}

void Channel::stop(bool wait) {
  std::unique_lock<std::mutex> lock(mu_);
  stopping_ = true;
  cv_.notify_all();
  if (wait) cv_.wait(lock, [&] { return done_; });
}

void Channel::loop() {
  for (;;) {
    Op op;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // A receiving channel with a receive from any source waiting looks
      // for its message every 20 us, after its first 10 ms every 200 us (a
      // server waiting for requests); otherwise it sleeps until an op comes.
      bool look = false;
      cv_.wait(lock, [&] { return stopping_ || !ops_.empty() || (look = !sending_ && !core_->any_waiting().empty()); });
      if (ops_.empty() && stopping_) {
        pair_.reset();
        done_ = true;
        cv_.notify_all();
        return;
      }
      if (ops_.empty() && look) {
        lock.unlock();
        const bool recent = poll_any();
        lock.lock();
        cv_.wait_for(lock, std::chrono::microseconds(recent ? 20 : 200), [&] { return stopping_ || !ops_.empty(); });
        continue;
      }
      op = std::move(ops_.front());
      ops_.pop_front();
      in_flight_ = op.work;
    }
    Result<void> r = run(op);
    std::string copy_error;
    if (r && op.dest.defined()) {
      try {
        op.dest.copy_(op.tensor);  // host to GPU, done before the Work completes
      } catch (const std::exception& e) {
        copy_error = e.what();
      }
    }
    if (!copy_error.empty()) {
      op.work->fail(core_->describe("recv from rank " + std::to_string(peer_) + ": copying into the CUDA tensor: " +
                                    copy_error));
    } else if (r) {
      op.work->piece_done(r);
    } else {
      op.work->fail(core_->describe(std::string(sending_ ? "send to" : "recv from") + " rank " +
                                    std::to_string(peer_) + " (tag " + std::to_string(op.tag) +
                                    "): " + r.error().message()));
    }
    std::lock_guard<std::mutex> lock(mu_);
    in_flight_.reset();
  }
}

std::string Channel::pair_name() const {
  // Both ends name the channel the same way: the lower rank, the higher, and
  // which of them sends.
  const int me = core_->rank;
  const int lo = std::min(me, peer_), hi = std::max(me, peer_);
  const bool lo_sends = (me == lo) == sending_;
  return "grex-p2p-" + std::to_string(lo) + "-" + std::to_string(hi) + (lo_sends ? "-up" : "-down");
}

Result<void> Channel::connect() {
  const int me = core_->rank;
  CommOptions opts;
  opts.timeout_ms = core_->timeout.count();
  opts.name = pair_name();
  opts.cost = "5,5,5";  // no calibration: a channel runs no allreduce
  opts.spread = false;  // the group's communicator already placed this process
  opts.any_source = true;  // sends carry notices: the receiving end can serve recv_anysource
  opts.precedence = Precedence::kOptions;
  if (sending_) {
    // Tells a receiver looking for any source that this side is coming.
    try {
      core_->store->set(opts.name + "/open", std::vector<uint8_t>{1});
    } catch (const std::exception& e) {
      return Error(Errc::kSystem, std::string("torch store: ") + e.what());
    }
  }
  auto bs = Bootstrap::with_store(std::make_shared<TorchStore>(core_->store), me == std::min(me, peer_) ? 0 : 1, 2,
                                  opts.timeout_ms);
  pair_ = GREX_TRY(Communicator::create(std::shared_ptr<Bootstrap>(std::move(bs)), opts));
  return ok();
}

bool Channel::poll_any() {
  const auto now = std::chrono::steady_clock::now();
  auto waiting = core_->any_waiting();
  bool recent = false;
  for (auto& a : waiting) {  // past its timeout: the first channel to see it fails it
    if (now >= a->deadline && core_->claim(a.get()))
      a->work->fail(core_->describe("recv from any source (tag " + std::to_string(a->tag) + "): no rank sent within " +
                                    std::to_string(core_->timeout.count()) + " ms"));
    recent |= now < a->posted + std::chrono::milliseconds(10);
  }
  if (!pair_) {
    if (now < next_store_check_) return recent;
    next_store_check_ = now + std::chrono::milliseconds(1);
    bool coming = false;
    try {
      coming = core_->store->check({pair_name() + "/open"});
    } catch (const std::exception&) {
      return recent;  // the store is going away: abort or shutdown follows
    }
    if (!coming) return recent;
    if (auto r = connect(); !r) {
      for (auto& a : waiting)
        if (core_->claim(a.get()))
          a->work->fail(core_->describe("recv from any source: connecting to rank " + std::to_string(peer_) + ": " +
                                        r.error().message()));
      return recent;
    }
  }
  const int other = core_->rank == std::min(core_->rank, peer_) ? 1 : 0;
  for (auto& a : waiting) {  // one claimed meanwhile (here, or by another channel) fails claim() below
    auto seen = pair_->iprobe(static_cast<uint32_t>(a->tag), other);
    std::string error;
    if (!seen) {
      error = seen.error().message();
    } else if (!seen->has_value()) {
      continue;
    } else if ((*seen)->bytes != a->tensor.nbytes()) {
      error = "rank " + std::to_string(peer_) + " sent " + std::to_string((*seen)->bytes) + " bytes, the tensor holds " +
              std::to_string(a->tensor.nbytes());
    }
    if (!core_->claim(a.get())) continue;  // another channel took it
    if (error.empty()) {
      // The noticed message is the next with this tag from this peer: a
      // named receive takes it.
      auto r = pair_->recv(a->tensor.data_ptr(), a->tensor.nbytes(), other, static_cast<uint32_t>(a->tag));
      if (r) {
        try {
          if (a->dest.defined()) a->dest.copy_(a->tensor);
        } catch (const std::exception& e) {
          r = Error(Errc::kSystem, std::string("copying into the CUDA tensor: ") + e.what());
        }
      }
      if (!r) error = r.error().message();
    }
    if (!error.empty()) {
      a->work->fail(core_->describe("recv from any source (tag " + std::to_string(a->tag) + "): " + error));
    } else {
      a->work->set_source(peer_);
      a->work->piece_done(ok());
    }
  }
  return recent;
}

Result<void> Channel::run(Op& op) {
  if (!pair_) GREX_TRY(connect());
  const int other = core_->rank == std::min(core_->rank, peer_) ? 1 : 0;
  const auto tag = static_cast<uint32_t>(op.tag);
  if (sending_) return pair_->send(op.tensor.data_ptr(), op.tensor.nbytes(), other, tag);
  return pair_->recv(op.tensor.data_ptr(), op.tensor.nbytes(), other, tag);
}

Channel& GrexBackend::channel(int peer, bool sending) {
  auto& ch = channels_[{peer, sending}];
  if (!ch) {
    ch = std::make_shared<Channel>(core_, peer, sending);
    ch->start();
  }
  return *ch;
}

c10::intrusive_ptr<c10d::Work> GrexBackend::send(std::vector<at::Tensor>& ts, int dst, int tag) {
  TORCH_CHECK(ts.size() == 1, "grex: send takes one tensor, got ", ts.size());
  check_tensor(ts[0], "send");
  TORCH_CHECK(dst >= 0 && dst < getSize() && dst != getRank(), "grex: send to rank ", dst, ": not another rank of ",
              "this group of ", getSize());
  (void)comm("send");  // raises once aborted
  auto w = c10::make_intrusive<GrexWork>(getRank(), c10d::OpType::SEND, "send", std::vector<at::Tensor>{ts[0]});
  // A CUDA tensor goes through host memory: copied here, after the work
  // queued on its stream (the caller waits for that copy), then sent as a
  // CPU tensor by the channel's thread.
  const bool gpu = path_of(ts[0], "send") == Path::kCuda;
  channel(dst, true).post(gpu ? ts[0].to(at::kCPU) : ts[0], tag, w);
  return remember(w);
}

c10::intrusive_ptr<c10d::Work> GrexBackend::recv(std::vector<at::Tensor>& ts, int src, int tag) {
  TORCH_CHECK(ts.size() == 1, "grex: recv takes one tensor, got ", ts.size());
  check_tensor(ts[0], "recv");
  TORCH_CHECK(src >= 0 && src < getSize() && src != getRank(), "grex: recv from rank ", src,
              ": not another rank of this group of ", getSize());
  (void)comm("recv");
  auto w = c10::make_intrusive<GrexWork>(getRank(), c10d::OpType::RECV, "recv", std::vector<at::Tensor>{ts[0]});
  // A CUDA tensor: received into host memory, copied into it by the channel's
  // thread before the Work completes (wait() then sees it on any stream).
  if (path_of(ts[0], "recv") == Path::kCuda) {
    channel(src, false).post(at::empty_like(ts[0], ts[0].options().device(at::kCPU)), tag, w, ts[0]);
  } else {
    channel(src, false).post(ts[0], tag, w);
  }
  return remember(w);
}

c10::intrusive_ptr<c10d::Work> GrexBackend::recvAnysource(std::vector<at::Tensor>& ts, int tag) {
  TORCH_CHECK(ts.size() == 1, "grex: recv takes one tensor, got ", ts.size());
  check_tensor(ts[0], "recv");
  TORCH_CHECK(getSize() > 1, "grex: recv from any source in a group of one rank");
  (void)comm("recv");
  auto w = c10::make_intrusive<GrexWork>(getRank(), c10d::OpType::RECVANYSOURCE, "recv",
                                         std::vector<at::Tensor>{ts[0]});
  auto a = std::make_shared<AnyRecv>();
  a->tag = tag;
  a->work = w;
  a->posted = std::chrono::steady_clock::now();
  a->deadline = a->posted + core_->timeout;
  if (path_of(ts[0], "recv") == Path::kCuda) {
    a->tensor = at::empty_like(ts[0], ts[0].options().device(at::kCPU));
    a->dest = ts[0];
  } else {
    a->tensor = ts[0];
  }
  {
    std::lock_guard<std::mutex> lock(core_->any_mu);
    core_->any.push_back(a);
  }
  // Every peer's receiving channel looks (made now where missing).
  for (int p = 0; p < getSize(); ++p)
    if (p != getRank()) channel(p, false).nudge();
  return remember(w);
}

std::vector<std::shared_ptr<AnyRecv>> Core::any_waiting() {
  std::lock_guard<std::mutex> lock(any_mu);
  return {any.begin(), any.end()};
}

bool Core::claim(const AnyRecv* r) {
  std::lock_guard<std::mutex> lock(any_mu);
  for (auto it = any.begin(); it != any.end(); ++it)
    if (it->get() == r) {
      any.erase(it);
      return true;
    }
  return false;
}

}  // namespace grex::torch_backend
