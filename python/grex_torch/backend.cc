// SPDX-License-Identifier: Apache-2.0
// GrexBackend's life cycle (creation, coalescing, abort, shutdown), its Work,
// the completer thread and the Python module that torch.distributed calls.
#include "backend.h"

#include "torch_store.h"

#include <grex/bootstrap.h>

#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/utils/pybind.h>

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/version.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <stdexcept>

#if __has_include(<torch/csrc/distributed/c10d/FlightRecorder.hpp>)
#include <torch/csrc/distributed/c10d/FlightRecorder.hpp>
#define GREX_TORCH_HAS_DEBUG_WRITER 1
#else
#define GREX_TORCH_HAS_DEBUG_WRITER 0
#endif

namespace grex::torch_backend {

Path path_of(const at::Tensor& t, const char* op) {
  if (t.device().is_cpu()) return Path::kCpu;
  if (t.device().is_cuda()) return Path::kCuda;
  TORCH_CHECK(false, "grex: ", op, " on a ", t.device().type(), " tensor is not supported: grex moves CPU and CUDA ",
              "tensors; map that device to another backend (init_process_group(\"cpu:grex,xpu:xccl\"))");
}

bool on_cuda(const at::Tensor& t, const std::vector<at::Tensor>& others, const char* op) {
  for (const auto& o : others)
    TORCH_CHECK(o.device() == t.device(), "grex: ", op, ": every tensor must be on one device; got ", t.device(),
                " and ", o.device());
  return path_of(t, op) == Path::kCuda;
}

namespace {

// The stream's CUstream, where this torch's c10::Stream tells it (2.11 does,
// 2.7.1 does not). A template, so that the test for the member is made on
// the instantiation and an older torch still builds (CPU tensors work there).
template <class S>
GpuStream native_stream(const S& s) {
  if constexpr (requires { s.native_handle(); }) {
    return GpuStream{s.native_handle()};
  } else {
    TORCH_CHECK(false, "grex: CUDA tensors need a torch whose c10::Stream has native_handle() (2.11 has it; ",
                TORCH_VERSION, " does not); CPU tensors work");
    return GpuStream{};
  }
}

}  // namespace

GpuStream stream_of(const at::Tensor& t) {
  return native_stream(c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(t.device()));
}

DataType dtype_of(const at::Tensor& t, const char* op) {
  switch (t.scalar_type()) {
    case at::kFloat: return DataType::kFloat32;
    case at::kDouble: return DataType::kFloat64;
    case at::kHalf: return DataType::kFloat16;
    case at::kBFloat16: return DataType::kBFloat16;
    case at::kInt: return DataType::kInt32;
    case at::kLong: return DataType::kInt64;
    case at::kByte: return DataType::kUint8;
    default: break;
  }
  TORCH_CHECK(false, "grex: ", op, ": tensors of type ", t.scalar_type(), " are not supported (float, double, half, ",
              "bfloat16, int32, int64 and uint8 are)");
}

void check_tensor(const at::Tensor& t, const char* op) {
  (void)path_of(t, op);
  TORCH_CHECK(t.is_contiguous(), "grex: ", op, ": the tensor must be contiguous");
  (void)dtype_of(t, op);
}

// ---- GrexWork ----

GrexWork::GrexWork(int rank, c10d::OpType type, const char* op, std::vector<at::Tensor> outputs, int pieces)
    : c10d::Work(rank, type),
      op_(op),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))),
      pieces_left_(pieces) {
  if (pieces <= 0) {
    std::unique_lock<std::mutex> lock(mu_);
    complete_locked(lock);
  }
  constructing_ = false;
}

bool GrexWork::isCompleted() {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

bool GrexWork::isSuccess() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_ && error_.empty();
}

std::exception_ptr GrexWork::exception() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_ && !error_.empty() ? std::make_exception_ptr(std::runtime_error(error_)) : nullptr;
}

std::vector<at::Tensor> GrexWork::result() { return outputs_; }

bool GrexWork::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (timeout == kNoTimeout) {
    cv_.wait(lock, [&] { return done_; });
  } else if (!cv_.wait_for(lock, timeout, [&] { return done_; })) {
    throw std::runtime_error("grex: rank " + std::to_string(rank_) + ": " + op_ + " did not finish within " +
                             std::to_string(timeout.count()) + " ms (Work.wait timeout); it goes on in the background");
  }
  if (!error_.empty()) throw std::runtime_error(error_);
  return true;
}

c10::intrusive_ptr<c10::ivalue::Future> GrexWork::getFuture() { return future_; }

int GrexWork::sourceRank() const {
  // Set before the Work completes; torch reads it after wait().
  return source_ >= 0 ? source_ : c10d::Work::sourceRank();
}

void GrexWork::piece_done(const Result<void>& r) {
  std::unique_lock<std::mutex> lock(mu_);
  if (completing_) return;
  if (!r && error_.empty()) error_ = r.error().message();
  if (--pieces_left_ == 0) complete_locked(lock);
}

void GrexWork::fail(const std::string& message) {
  std::unique_lock<std::mutex> lock(mu_);
  if (completing_) return;
  error_ = message;
  complete_locked(lock);
}

namespace {

// Where futures complete: never on the completer or a channel thread.
// Completing a future runs its callbacks, and a callback may wait for a later
// operation of the same group (PowerSGD's DDP hook waits inside one), which
// only the completer can finish. A thread busy in a callback is not idle, so
// a completion that finds no idle thread gets a new one: a blocked callback
// never holds up the completions it waits for. Threads beyond the first end
// after a second with nothing to do.
class CompletionRunner {
 public:
  static CompletionRunner& get() {
    static auto* runner = new CompletionRunner;  // never destroyed: its threads are detached
    return *runner;
  }
  void post(std::function<void()> fn) {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(fn));
    if (queue_.size() > idle_) {
      ++threads_;
      std::thread([this] { loop(); }).detach();
    } else {
      cv_.notify_one();
    }
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      ++idle_;
      const bool got = cv_.wait_for(lock, std::chrono::seconds(1), [&] { return !queue_.empty(); });
      --idle_;
      if (!got) {
        if (threads_ > 1) {
          --threads_;
          return;
        }
        continue;
      }
      std::function<void()> fn = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      fn();
      lock.lock();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  size_t idle_ = 0;
  size_t threads_ = 0;
};

}  // namespace

// The future completes outside the lock and off the calling thread (see
// CompletionRunner); wait() returns once it has. A Work made complete (no
// pieces) has no callbacks yet and completes at once.
void GrexWork::complete_locked(std::unique_lock<std::mutex>& lock) {
  if (completing_) return;
  completing_ = true;
  std::string error = error_;
  auto finish = [error](GrexWork* w) {
    if (error.empty()) {
      w->future_->markCompleted(c10::IValue(w->outputs_));
    } else {
      w->future_->setError(std::make_exception_ptr(std::runtime_error(error)));
    }
    std::lock_guard<std::mutex> l(w->mu_);
    w->done_ = true;
    w->cv_.notify_all();
  };
  lock.unlock();
  if (constructing_) {
    finish(this);
  } else {
    CompletionRunner::get().post(
        [finish, self = c10::intrusive_ptr<GrexWork>::reclaim_copy(this)] { finish(self.get()); });
  }
  lock.lock();
}

// ---- Core ----

std::string Core::describe(const std::string& what) const { return "grex: rank " + std::to_string(rank) + ": " + what; }

// torch's flight recorder dumps on a timeout where TORCH_FR_DUMP_ON_TIMEOUT
// (TORCH_NCCL_DUMP_ON_TIMEOUT before 2.8) is set: grex writes its own ring
// (JSON, as GREX_TRACE_DUMP does) the same way, once per backend, through
// torch's DebugInfoWriter where torch has one (a writer the job registered
// gets it), else to the file torch would write:
// ${TORCH_FR_DUMP_TEMP_FILE:-/tmp/nccl_trace_rank_}<rank>.
void Core::dump_on_timeout() {
  auto on = [](const char* name) {
    const char* v = std::getenv(name);
    return v != nullptr && (std::strcmp(v, "1") == 0 || std::strcmp(v, "true") == 0);
  };
  if (!(on("TORCH_FR_DUMP_ON_TIMEOUT") || on("TORCH_NCCL_DUMP_ON_TIMEOUT")) || dumped.exchange(true) || !comm) return;
  const std::string json = comm->trace_json();
  if (json.empty()) return;
#if GREX_TORCH_HAS_DEBUG_WRITER
  c10d::DebugInfoWriter::getWriter(rank).write(json);
#else
  const char* prefix = std::getenv("TORCH_FR_DUMP_TEMP_FILE");
  if (prefix == nullptr) prefix = std::getenv("TORCH_NCCL_DEBUG_INFO_TEMP_FILE");
  std::ofstream out(std::string(prefix != nullptr ? prefix : "/tmp/nccl_trace_rank_") + std::to_string(rank));
  out << json;
#endif
}

void Core::complete_loop() {
  for (;;) {
    Pending p;
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return stopping || !pending.empty(); });
      if (pending.empty()) {
        completer_done = true;
        cv.notify_all();
        return;
      }
      p = std::move(pending.front());
      pending.pop_front();
      in_flight = p.handle;
    }
    Result<void> r = ok();
    for (auto& w : p.works) {
      Result<void> one = w->wait();
      if (!one && r) r = std::move(one);
    }
    if (r && p.after) {
      try {
        p.after();
      } catch (const std::exception& e) {
        r = Error(Errc::kInternal, std::string("copying the result out: ") + e.what());
      }
    }
    if (r) {
      p.handle->piece_done(r);
    } else {
      if (r.error().code() == Errc::kTimeout) dump_on_timeout();
      p.handle->fail(describe(r.error().message()));
    }
    std::lock_guard<std::mutex> lock(mu);
    in_flight.reset();
  }
}

// ---- GrexBackend ----

GrexBackend::GrexBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                         std::chrono::milliseconds timeout, const std::string& group_name)
    : c10d::Backend(rank, size),
      core_(std::make_shared<Core>()),
      options_(c10::make_intrusive<GrexOptions>(timeout, group_name)) {
  core_->rank = rank;
  core_->size = size;
  core_->timeout = timeout;
  core_->store = store;
  auto bs = Bootstrap::with_store(std::make_shared<TorchStore>(store), rank, size, timeout.count());
  CommOptions opts;
  opts.timeout_ms = timeout.count();
  // The group's timeout (init_process_group / new_group) wins over GREX_TIMEOUT_MS;
  // the other fields still take their GREX_* variables.
  opts.precedence = Precedence::kOptions;
  auto comm = Communicator::create(std::shared_ptr<Bootstrap>(std::move(bs)), opts);
  if (!comm) throw std::runtime_error(core_->describe("creating the group: " + comm.error().message()));
  core_->comm = std::move(*comm);
  std::thread([core = core_] { core->complete_loop(); }).detach();
}

GrexBackend::~GrexBackend() {
  // destroy_process_group calls shutdown() first; a backend dropped without it
  // must not block its caller either.
  if (!closed_) abort();
}

c10::intrusive_ptr<c10d::Backend::Options> GrexBackend::getBackendOptions() { return options_; }

Communicator& GrexBackend::comm(const char* op) const {
  std::lock_guard<std::mutex> lock(core_->mu);
  TORCH_CHECK(core_->aborted.empty(), core_->describe(std::string(op) + ": " + core_->aborted));
  return *core_->comm;
}

void GrexBackend::startCoalescing() {
  TORCH_CHECK(!coalescing_, "grex: startCoalescing called twice without endCoalescing");
  coalescing_ = true;
  coalesced_.clear();
}

c10::intrusive_ptr<c10d::Work> GrexBackend::endCoalescing() {
  TORCH_CHECK(coalescing_, "grex: endCoalescing without startCoalescing");
  coalescing_ = false;
  auto works = std::move(coalesced_);
  coalesced_.clear();
  auto all = c10::make_intrusive<GrexWork>(getRank(), c10d::OpType::COALESCED, "coalesced operations",
                                           std::vector<at::Tensor>{}, static_cast<int>(works.size()));
  for (auto& w : works) {
    w->getFuture()->addCallback([all](c10::ivalue::Future& f) {
      if (f.hasError()) {
        all->fail(f.tryRetrieveErrorMessage());
      } else {
        all->piece_done(ok());
      }
    });
  }
  return all;
}

c10::intrusive_ptr<c10d::Backend> GrexBackend::split(const c10::intrusive_ptr<c10d::Store>& store,
                                                     const std::vector<int>& ranks,
                                                     const c10::intrusive_ptr<Options>& opts) {
  auto& made = splits_[{store.get(), ranks}];
  if (made) return made;
  auto me = std::find(ranks.begin(), ranks.end(), getRank());
  TORCH_CHECK(me != ranks.end(), "grex: split: rank ", getRank(), " is not among the split's ranks");
  const auto timeout = opts ? opts->timeout : options_->timeout;
  const std::string name = opts ? group_name_of(*opts) : "";
  std::optional<pybind11::gil_scoped_release> release;  // the rendezvous blocks: let Python threads run
  if (PyGILState_Check()) release.emplace();
  made = c10::make_intrusive<GrexBackend>(store, static_cast<int>(me - ranks.begin()), static_cast<int>(ranks.size()),
                                          timeout, name);
  return made;
}

c10::intrusive_ptr<c10d::Work> GrexBackend::remember(c10::intrusive_ptr<c10d::Work> w) {
  if (coalescing_) coalesced_.push_back(w);
  return w;
}

c10::intrusive_ptr<c10d::Work> GrexBackend::submit(c10d::OpType type, const char* op, std::vector<at::Tensor> outputs,
                                                   Started started, std::function<void()> after) {
  ++seq_;
  Core::Pending p;
  std::string error;
  for (auto& s : started) {
    if (s) {
      p.works.push_back(std::move(*s));
    } else if (error.empty()) {
      error = core_->describe(std::string(op) + ": " + s.error().message());
    }
  }
  p.handle = c10::make_intrusive<GrexWork>(getRank(), type, op, std::move(outputs));
  p.after = std::move(after);
  auto handle = p.handle;
  if (!error.empty()) {
    handle->fail(error);
    p.after = {};  // still queued: the parts that started own the buffers until they end
  }
  {
    std::lock_guard<std::mutex> lock(core_->mu);
    core_->pending.push_back(std::move(p));
  }
  core_->cv.notify_all();
  if (!error.empty()) throw std::runtime_error(error);
  return remember(handle);
}

void GrexBackend::abort() {
  if (closed_) return;
  closed_ = true;
  const std::string why = "the process group was aborted";
  std::vector<c10::intrusive_ptr<GrexWork>> queued;
  {
    std::lock_guard<std::mutex> lock(core_->mu);
    core_->aborted = why;
    core_->stopping = true;
    // Queued collectives keep their grex Work (the completer still waits them
    // out, bounded by the timeout, so their buffers stay alive); their torch
    // Works fail now, outside the lock (their callbacks may call back in).
    for (auto& p : core_->pending) queued.push_back(p.handle);
    if (core_->in_flight) queued.push_back(core_->in_flight);
  }
  core_->cv.notify_all();
  for (auto& w : queued) w->fail(core_->describe(why));
  for (auto& [key, ch] : channels_) ch->abort(core_->describe(why));
  channels_.clear();
  fail_any_source(why);
}

void GrexBackend::fail_any_source(const std::string& why) {
  std::deque<std::shared_ptr<AnyRecv>> left;
  {
    std::lock_guard<std::mutex> lock(core_->any_mu);
    left.swap(core_->any);
  }
  for (auto& a : left) a->work->fail(core_->describe(why));
}

void GrexBackend::shutdown() {
  if (closed_) return;
  closed_ = true;
  fail_any_source("the process group was shut down");  // no rank sent: nothing else ends them
  for (auto& [key, ch] : channels_) ch->stop(true);
  channels_.clear();
  std::unique_lock<std::mutex> lock(core_->mu);
  core_->aborted = "the process group was shut down";
  core_->stopping = true;
  core_->cv.notify_all();
  // Each queued collective ends by the group's timeout at the latest.
  core_->cv.wait(lock, [&] { return core_->completer_done; });
  core_->comm.reset();
}

namespace {

c10::intrusive_ptr<c10d::Backend> create(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                         std::chrono::milliseconds timeout, const std::string& group_name) {
  pybind11::gil_scoped_release release;  // the rendezvous blocks; other Python threads may run
  return c10::make_intrusive<GrexBackend>(store, rank, size, timeout, group_name);
}

}  // namespace
}  // namespace grex::torch_backend

PYBIND11_MODULE(_grex_torch, m) {
  m.doc() = "grex backend for torch.distributed (use: import grex_torch; dist.init_process_group('grex'))";
  // The Backend subclass, so Python sees its `options` (split_group copies the parent's).
  // The Backend subclass, so Python reaches abort/shutdown on any torch (2.4
  // binds neither for backends) and `options` (split_group deep-copies the
  // parent's; torch's base Options cannot be, a GrexOptions can) where torch
  // binds Backend.Options (not 2.4, which has no split_group either).
  using Options = c10d::Backend::Options;
  using grex::torch_backend::GrexBackend;
  using grex::torch_backend::GrexOptions;
  auto backend = pybind11::class_<GrexBackend, c10d::Backend, c10::intrusive_ptr<GrexBackend>>(m, "GrexBackend")
                     .def("abort", &GrexBackend::abort, "Fails every queued and in-flight operation; never blocks.")
                     .def("shutdown", &GrexBackend::shutdown, pybind11::call_guard<pybind11::gil_scoped_release>(),
                          "Finishes the queued operations (each bounded by the timeout), then releases grex.")
                     .def("compressed_allreduce", &GrexBackend::compressed_allreduce, pybind11::arg("tensor"),
                          pybind11::arg("compression") = "bf16", pybind11::arg("error_feedback") = true,
                          pybind11::arg("key") = 0, pybind11::arg("topk_fraction") = 0.01,
                          "Averages a float32 CPU tensor in place over the group, the vector travelling as bf16, "
                          "fp16, int8 or top-k (topk_fraction of its values) inside grex's ring (error feedback "
                          "per key); returns a Work.")
                     .def("deadline_allreduce", &GrexBackend::deadline_allreduce, pybind11::arg("tensor"),
                          pybind11::arg("deadline_ms"), pybind11::arg("carry") = false, pybind11::arg("key") = 0,
                          pybind11::arg("mask") = pybind11::none(),
                          "Averages a CPU tensor in place over the ranks that entered within deadline_ms (the "
                          "same result everywhere); a late rank's vector is dropped or, with carry, added into "
                          "its next call of the same key. mask (int32, one per rank) gets the contributors. "
                          "Returns a Work.");
  if (pybind11::detail::get_type_info(typeid(Options)) != nullptr) {
    pybind11::class_<GrexOptions, Options, c10::intrusive_ptr<GrexOptions>>(m, "GrexOptions")
        .def("__copy__", [](const GrexOptions& o) { return c10::make_intrusive<GrexOptions>(o); })
        .def("__deepcopy__",
             [](const GrexOptions& o, pybind11::dict) { return c10::make_intrusive<GrexOptions>(o); });
    backend.def_property_readonly("options", &GrexBackend::getBackendOptions);
  }
  m.def("create_backend", &grex::torch_backend::create, pybind11::arg("store"), pybind11::arg("rank"),
        pybind11::arg("size"), pybind11::arg("timeout"), pybind11::arg("group_name") = "",
        "Creates a grex c10d::Backend over torch's store (what torch.distributed calls for backend 'grex').");
}
