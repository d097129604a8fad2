// SPDX-License-Identifier: Apache-2.0
// The grex backend of torch.distributed: a c10d::ProcessGroup over a grex
// Communicator, rendezvousing through torch's own Store.
//
// Collectives go through the Communicator's non-blocking calls, which run one
// at a time in issue order on its worker thread. A completer thread waits for
// them in that same order and completes each Work's future (running copy-outs
// first), so DDP's future callbacks fire as soon as a bucket is reduced.
#include <grex/bootstrap.h>
#include <grex/communicator.h>

#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace grex::torch_backend {
namespace {

using c10d::OpType;

[[noreturn]] void raise(const Error& e) { throw std::runtime_error("grex: " + e.message()); }

template <typename T>
T value_or_raise(Result<T> r) {
  if (!r) raise(r.error());
  return std::move(*r);
}

// torch's Store as a grex::Store: the bootstrap's keys live in torch's store
// (under the PrefixStore torch gives each group).
class TorchStore final : public Store {
 public:
  explicit TorchStore(c10::intrusive_ptr<c10d::Store> s) : s_(std::move(s)) {}
  Result<void> set(std::string_view key, std::string_view value) override {
    return guard([&] { s_->set(std::string(key), std::vector<uint8_t>(value.begin(), value.end())); });
  }
  Result<std::string> get(std::string_view key, int64_t timeout_ms) override {
    std::string out;
    GREX_TRY(guard([&] {
      s_->wait({std::string(key)}, std::chrono::milliseconds(timeout_ms));
      auto v = s_->get(std::string(key));
      out.assign(v.begin(), v.end());
    }));
    return out;
  }
  Result<int64_t> add(std::string_view key, int64_t delta) override {
    int64_t v = 0;
    GREX_TRY(guard([&] { v = s_->add(std::string(key), delta); }));
    return v;
  }
  Result<std::vector<bool>> check(std::span<const std::string> keys) override {
    std::vector<bool> out;
    GREX_TRY(guard([&] {
      for (const auto& k : keys) out.push_back(s_->check({k}));
    }));
    return out;
  }
  Result<void> wait(std::span<const std::string> keys, int64_t timeout_ms) override {
    return guard([&] { s_->wait(std::vector<std::string>(keys.begin(), keys.end()), std::chrono::milliseconds(timeout_ms)); });
  }

 private:
  template <typename Fn>
  static Result<void> guard(Fn&& fn) {
    try {
      fn();
      return ok();
    } catch (const std::exception& e) {
      std::string what = e.what();
      bool timeout = what.find("imeout") != std::string::npos || what.find("timed out") != std::string::npos;
      return Error(timeout ? Errc::kTimeout : Errc::kConnectionFailed, "torch store: " + what.substr(0, what.find('\n')));
    }
  }
  c10::intrusive_ptr<c10d::Store> s_;
};

DataType dtype_of(const at::Tensor& t) {
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
  TORCH_CHECK(false, "grex: tensors of type ", t.scalar_type(), " are not supported (float, double, half, bfloat16, ",
              "int32, int64, uint8 are)");
}

ReduceOp op_of(const c10d::ReduceOp& op) {
  switch (static_cast<c10d::ReduceOp::RedOpType>(op)) {
    case c10d::ReduceOp::SUM: return ReduceOp::kSum;
    case c10d::ReduceOp::AVG: return ReduceOp::kAvg;
    case c10d::ReduceOp::PRODUCT: return ReduceOp::kProd;
    case c10d::ReduceOp::MIN: return ReduceOp::kMin;
    case c10d::ReduceOp::MAX: return ReduceOp::kMax;
    default: break;
  }
  TORCH_CHECK(false, "grex: reduction op ", static_cast<int>(static_cast<c10d::ReduceOp::RedOpType>(op)),
              " is not supported (SUM, AVG, PRODUCT, MIN, MAX are)");
}

void check_tensor(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.device().is_cpu(), "grex: ", what, " must be a CPU tensor (GPU tensors arrive with GPUDirect)");
  TORCH_CHECK(t.is_contiguous(), "grex: ", what, " must be contiguous");
  (void)dtype_of(t);
}

const at::Tensor& single(const std::vector<at::Tensor>& ts, const char* op) {
  TORCH_CHECK(ts.size() == 1, "grex: ", op, " takes exactly one tensor per process, got ", ts.size());
  check_tensor(ts[0], op);
  return ts[0];
}

// A collective's Work: its future completes when the grex collective did.
class GrexWork final : public c10d::Work {
 public:
  GrexWork(int rank, OpType type, std::vector<at::Tensor> outputs)
      : c10d::Work(rank, type),
        outputs_(std::move(outputs)),
        future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

  bool isCompleted() override { return future_->completed(); }
  bool isSuccess() const override { return future_->completed() && !future_->hasError(); }
  std::exception_ptr exception() const override { return future_->hasError() ? future_->exception_ptr() : nullptr; }
  std::vector<at::Tensor> result() override { return outputs_; }
  bool wait(std::chrono::milliseconds timeout) override {
    if (timeout == kNoTimeout) {
      future_->wait();
    } else {
      auto deadline = std::chrono::steady_clock::now() + timeout;
      while (!future_->completed()) {
        if (std::chrono::steady_clock::now() > deadline)
          throw std::runtime_error("grex: " + c10d::opTypeToString(retrieveOpType()) + " did not finish within " +
                                   std::to_string(timeout.count()) + " ms");
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
    if (future_->hasError()) std::rethrow_exception(future_->exception_ptr());
    return true;
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  void finish(const Result<void>& r) {
    if (r) {
      future_->markCompleted(c10::IValue(outputs_));
    } else {
      future_->setError(std::make_exception_ptr(std::runtime_error("grex: " + r.error().message())));
    }
  }

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class GrexProcessGroup final : public c10d::ProcessGroup {
 public:
  GrexProcessGroup(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout)
      : c10d::ProcessGroup(rank, size) {
    auto bs = Bootstrap::with_store(std::make_shared<TorchStore>(store), rank, size, timeout.count());
    CommOptions opts;
    opts.timeout_ms = timeout.count();
    comm_ = value_or_raise(Communicator::create(std::shared_ptr<Bootstrap>(std::move(bs)), opts));
    completer_ = std::thread([this] { complete_loop(); });
  }

  ~GrexProcessGroup() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (completer_.joinable()) completer_.join();
  }

  const std::string getBackendName() const override { return "grex"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& ts, const c10d::BroadcastOptions& o) override {
    const at::Tensor& t = single(ts, "broadcast");
    return submit(OpType::BROADCAST, {t},
                  comm_->broadcast_async(t.data_ptr(), t.numel(), dtype_of(t), static_cast<int>(o.rootRank)));
  }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& ts, const c10d::AllreduceOptions& o) override {
    const at::Tensor& t = single(ts, "allreduce");
    return submit(OpType::ALLREDUCE, {t},
                  comm_->allreduce_async(t.data_ptr(), t.data_ptr(), t.numel(), dtype_of(t), op_of(o.reduceOp)));
  }

  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& ts, const c10d::ReduceOptions& o) override {
    const at::Tensor& t = single(ts, "reduce");
    return submit(OpType::REDUCE, {t},
                  comm_->reduce_async(t.data_ptr(), t.data_ptr(), t.numel(), dtype_of(t), op_of(o.reduceOp),
                                      static_cast<int>(o.rootRank)));
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outs, std::vector<at::Tensor>& ins,
                                           const c10d::AllgatherOptions&) override {
    const at::Tensor& t = single(ins, "allgather");
    TORCH_CHECK(outs.size() == 1 && static_cast<int>(outs[0].size()) == getSize(),
                "grex: allgather needs one list of ", getSize(), " output tensors");
    for (const auto& o : outs[0]) TORCH_CHECK(o.numel() == t.numel() && o.scalar_type() == t.scalar_type(),
                                              "grex: allgather outputs must match the input's size and type");
    at::Tensor flat = at::empty({getSize() * t.numel()}, t.options());
    std::vector<at::Tensor> dst = outs[0];
    int64_t n = t.numel();
    return submit(OpType::ALLGATHER, dst, comm_->allgather_async(t.data_ptr(), flat.data_ptr(), n, dtype_of(t)),
                  [flat, dst, n, t] {
                    for (size_t r = 0; r < dst.size(); ++r)
                      dst[r].copy_(flat.narrow(0, static_cast<int64_t>(r) * n, n).view_as(dst[r]));
                  });
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& out, at::Tensor& in,
                                                 const c10d::AllgatherOptions&) override {
    check_tensor(in, "allgather input");
    check_tensor(out, "allgather output");
    TORCH_CHECK(out.numel() == getSize() * in.numel() && out.scalar_type() == in.scalar_type(),
                "grex: _allgather_base output must hold size x input");
    return submit(OpType::_ALLGATHER_BASE, {out},
                  comm_->allgather_async(in.data_ptr(), out.data_ptr(), in.numel(), dtype_of(in)));
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outs,
                                                std::vector<std::vector<at::Tensor>>& ins,
                                                const c10d::ReduceScatterOptions& o) override {
    const at::Tensor& out = single(outs, "reduce_scatter");
    TORCH_CHECK(ins.size() == 1 && static_cast<int>(ins[0].size()) == getSize(),
                "grex: reduce_scatter needs one list of ", getSize(), " input tensors");
    at::Tensor flat = at::empty({getSize() * out.numel()}, out.options());
    for (int r = 0; r < getSize(); ++r) {
      TORCH_CHECK(ins[0][r].numel() == out.numel(), "grex: reduce_scatter inputs must match the output's size");
      flat.narrow(0, r * out.numel(), out.numel()).copy_(ins[0][r].reshape({-1}));
    }
    return submit(OpType::REDUCE_SCATTER, {out},
                  comm_->reduce_scatter_async(flat.data_ptr(), out.data_ptr(), out.numel(), dtype_of(out),
                                              op_of(o.reduceOp)),
                  [flat] {});  // holds the staged input until the collective finished
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& out, at::Tensor& in,
                                                      const c10d::ReduceScatterOptions& o) override {
    check_tensor(in, "reduce_scatter input");
    check_tensor(out, "reduce_scatter output");
    TORCH_CHECK(in.numel() == getSize() * out.numel() && out.scalar_type() == in.scalar_type(),
                "grex: _reduce_scatter_base input must hold size x output");
    return submit(OpType::_REDUCE_SCATTER_BASE, {out},
                  comm_->reduce_scatter_async(in.data_ptr(), out.data_ptr(), out.numel(), dtype_of(out),
                                              op_of(o.reduceOp)));
  }

  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& out, at::Tensor& in, std::vector<int64_t>& out_splits,
                                               std::vector<int64_t>& in_splits,
                                               const c10d::AllToAllOptions&) override {
    check_tensor(in, "alltoall input");
    check_tensor(out, "alltoall output");
    TORCH_CHECK(in.scalar_type() == out.scalar_type(), "grex: alltoall_base input and output types differ");
    const int n = getSize();
    if (out_splits.empty() && in_splits.empty()) {  // equal blocks: the regular alltoall
      TORCH_CHECK(in.numel() == out.numel() && in.numel() % n == 0,
                  "grex: alltoall_base without splits needs equal input and output sizes divisible by the group size");
      return submit(OpType::ALLTOALL_BASE, {out},
                    comm_->alltoall_async(in.data_ptr(), out.data_ptr(), in.numel() / n, dtype_of(in)));
    }
    // Splits count rows along dim 0 (an empty list: equal rows); a row is
    // the product of the other dims, the same for both tensors.
    TORCH_CHECK(in.dim() > 0 && out.dim() > 0, "grex: alltoall_base with splits needs tensors of at least one dim");
    const int64_t row = in.size(0) > 0 ? in.numel() / in.size(0) : 0;
    const int64_t orow = out.size(0) > 0 ? out.numel() / out.size(0) : 0;
    TORCH_CHECK(row == orow || in.numel() == 0 || out.numel() == 0,
                "grex: alltoall_base input and output rows differ in size");
    const auto elems = [&](const std::vector<int64_t>& splits, const at::Tensor& t, const char* what,
                           std::vector<size_t>* counts, std::vector<size_t>* displs) {
      counts->assign(n, 0);
      displs->assign(n, 0);
      if (splits.empty()) {
        TORCH_CHECK(t.size(0) % n == 0, "grex: alltoall_base ", what, ": ", t.size(0), " rows do not split ", n,
                    " ways");
        for (int r = 0; r < n; ++r) (*counts)[r] = static_cast<size_t>(t.size(0) / n * row);
      } else {
        TORCH_CHECK(static_cast<int>(splits.size()) == n, "grex: alltoall_base ", what, " splits need ", n,
                    " entries");
        int64_t rows = 0;
        for (int r = 0; r < n; ++r) {
          TORCH_CHECK(splits[r] >= 0, "grex: alltoall_base ", what, " split ", r, " is negative");
          (*counts)[r] = static_cast<size_t>(splits[r] * row);
          rows += splits[r];
        }
        TORCH_CHECK(rows == t.size(0), "grex: alltoall_base ", what, " splits sum to ", rows, ", the tensor has ",
                    t.size(0), " rows");
      }
      for (int r = 1; r < n; ++r) (*displs)[r] = (*displs)[r - 1] + (*counts)[r - 1];
    };
    std::vector<size_t> sc, sd, rc, rd;
    elems(in_splits, in, "input", &sc, &sd);
    elems(out_splits, out, "output", &rc, &rd);
    at::Tensor src = in;
    return submit(OpType::ALLTOALL_BASE, {out},
                  comm_->alltoallv_async(in.data_ptr(), sc, sd, out.data_ptr(), rc, rd, dtype_of(in)),
                  [src] {});  // holds the input until the exchange finished
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions&) override {
    return submit(OpType::BARRIER, {}, comm_->barrier_async());
  }

  // Point-to-point runs blocking, in order with the queued collectives.
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& ts, int dst, int tag) override {
    const at::Tensor& t = single(ts, "send");
    auto w = c10::make_intrusive<GrexWork>(getRank(), OpType::SEND, std::vector<at::Tensor>{t});
    w->finish(comm_->send(t.data_ptr(), t.nbytes(), dst, static_cast<uint32_t>(tag)));
    return w;
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& ts, int src, int tag) override {
    const at::Tensor& t = single(ts, "recv");
    auto w = c10::make_intrusive<GrexWork>(getRank(), OpType::RECV, std::vector<at::Tensor>{t});
    w->finish(comm_->recv(t.data_ptr(), t.nbytes(), src, static_cast<uint32_t>(tag)));
    return w;
  }

 private:
  struct Pending {
    WorkPtr work;
    c10::intrusive_ptr<GrexWork> handle;
    std::function<void()> after;  // copy-outs once the collective succeeded
  };

  c10::intrusive_ptr<c10d::Work> submit(OpType type, std::vector<at::Tensor> outputs, Result<WorkPtr> started,
                                        std::function<void()> after = {}) {
    WorkPtr work = value_or_raise(std::move(started));
    auto handle = c10::make_intrusive<GrexWork>(getRank(), type, std::move(outputs));
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending_.push_back(Pending{std::move(work), handle, std::move(after)});
    }
    cv_.notify_one();
    return handle;
  }

  // Collectives finish in issue order: wait for the oldest, complete it, repeat.
  void complete_loop() {
    for (;;) {
      Pending p;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !pending_.empty(); });
        if (pending_.empty()) return;
        p = std::move(pending_.front());
        pending_.pop_front();
      }
      Result<void> r = p.work->wait();
      if (r && p.after) {
        try {
          p.after();
        } catch (const std::exception& e) {
          r = Error(Errc::kInternal, std::string("copying the result out: ") + e.what());
        }
      }
      p.handle->finish(r);
    }
  }

  std::unique_ptr<Communicator> comm_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> pending_;
  bool stopping_ = false;
  std::thread completer_;
};

c10::intrusive_ptr<c10d::ProcessGroup> create(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                              std::chrono::duration<float> timeout) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
  pybind11::gil_scoped_release release;  // rendezvous blocks; other Python threads may run
  return c10::make_intrusive<GrexProcessGroup>(store, rank, size, ms);
}

}  // namespace
}  // namespace grex::torch_backend

PYBIND11_MODULE(_grex_torch, m) {
  m.doc() = "grex backend for torch.distributed (use: import grex_torch; dist.init_process_group('grex'))";
  m.def("create_process_group", &grex::torch_backend::create, pybind11::arg("store"), pybind11::arg("rank"),
        pybind11::arg("size"), pybind11::arg("timeout"),
        "Creates a grex ProcessGroup over torch's store (what torch.distributed calls for backend 'grex').");
}
