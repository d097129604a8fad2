// SPDX-License-Identifier: Apache-2.0
// GrexBackend's collectives: each maps onto the group Communicator's *_async
// calls; list forms stage through one flat tensor; gather, scatter and the
// list alltoall are one alltoallv (only the pairs that move data have counts).
#include "backend.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace grex::torch_backend {
namespace {

using c10d::OpType;

// A torch ReduceOp as grex's, with PREMUL_SUM's factor (applied to the input,
// then summed).
struct Reduction {
  ReduceOp op = ReduceOp::kSum;
  bool premul = false;
  double factor = 1.0;
  at::Tensor tensor_factor;

  void premultiply(at::Tensor& t) const {
    if (!premul) return;
    if (tensor_factor.defined()) {
      t.mul_(tensor_factor.to(t.device()));
    } else {
      t.mul_(factor);
    }
  }
};

Reduction reduction_of(const c10d::ReduceOp& op, const char* what) {
  Reduction r;
  switch (op.op_) {
    case c10d::ReduceOp::SUM: r.op = ReduceOp::kSum; return r;
    case c10d::ReduceOp::AVG: r.op = ReduceOp::kAvg; return r;
    case c10d::ReduceOp::PRODUCT: r.op = ReduceOp::kProd; return r;
    case c10d::ReduceOp::MIN: r.op = ReduceOp::kMin; return r;
    case c10d::ReduceOp::MAX: r.op = ReduceOp::kMax; return r;
    case c10d::ReduceOp::PREMUL_SUM: {
      auto* s = static_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
      TORCH_CHECK(s != nullptr, "grex: ", what, ": PREMUL_SUM without its factor");
      r.premul = true;
      r.factor = s->double_factor;
      r.tensor_factor = s->tensor_factor;
      return r;
    }
    default: break;
  }
  TORCH_CHECK(false, "grex: ", what, ": reduction op ", static_cast<int>(op.op_),
              " is not supported (SUM, AVG, PRODUCT, MIN, MAX and PREMUL_SUM are)");
}

// PREMUL_SUM multiplies integers by a real factor: torch (like NCCL) defines it for floating types.
void check_reduction(const Reduction& r, const at::Tensor& t, const char* what) {
  TORCH_CHECK(!r.premul || t.is_floating_point(), "grex: ", what, ": PREMUL_SUM needs a floating-point tensor, got ",
              t.scalar_type());
}

const at::Tensor& single(const std::vector<at::Tensor>& ts, const char* op) {
  TORCH_CHECK(ts.size() == 1, "grex: ", op, " takes exactly one tensor per process, got ", ts.size());
  check_tensor(ts[0], op);
  return ts[0];
}

void check_same(const at::Tensor& a, const at::Tensor& b, int64_t numel, const char* op) {
  check_tensor(a, op);
  TORCH_CHECK(a.numel() == numel && a.scalar_type() == b.scalar_type(), "grex: ", op, ": a tensor of ", a.numel(),
              " ", a.scalar_type(), " elements where ", numel, " ", b.scalar_type(), " were expected");
}

std::vector<size_t> displacements(const std::vector<size_t>& counts) {
  std::vector<size_t> d(counts.size(), 0);
  for (size_t r = 1; r < counts.size(); ++r) d[r] = d[r - 1] + counts[r - 1];
  return d;
}

size_t total(const std::vector<size_t>& counts) { return std::accumulate(counts.begin(), counts.end(), size_t{0}); }

// The grex call for a tensor's device: CUDA tensors take the stream-ordered
// form on torch's current stream of `t`, CPU tensors the *_async one.
Result<WorkPtr> allreduce_on(Communicator& c, bool gpu, const at::Tensor& t, ReduceOp op, const char* what) {
  const DataType dt = dtype_of(t, what);
  return gpu ? c.allreduce(t.data_ptr(), t.data_ptr(), t.numel(), dt, op, stream_of(t))
             : c.allreduce_async(t.data_ptr(), t.data_ptr(), t.numel(), dt, op);
}
Result<WorkPtr> allgather_on(Communicator& c, bool gpu, const at::Tensor& in, const at::Tensor& out,
                             const char* what) {
  const DataType dt = dtype_of(in, what);
  return gpu ? c.allgather(in.data_ptr(), out.data_ptr(), in.numel(), dt, stream_of(in))
             : c.allgather_async(in.data_ptr(), out.data_ptr(), in.numel(), dt);
}
Result<WorkPtr> reduce_scatter_on(Communicator& c, bool gpu, const at::Tensor& in, const at::Tensor& out,
                                  ReduceOp op, const char* what) {
  const DataType dt = dtype_of(out, what);
  return gpu ? c.reduce_scatter(in.data_ptr(), out.data_ptr(), out.numel(), dt, op, stream_of(out))
             : c.reduce_scatter_async(in.data_ptr(), out.data_ptr(), out.numel(), dt, op);
}

}  // namespace

c10::intrusive_ptr<c10d::Work> GrexBackend::broadcast(std::vector<at::Tensor>& ts, const c10d::BroadcastOptions& o) {
  const at::Tensor& t = single(ts, "broadcast");
  Started s;
  if (on_cuda(t, {}, "broadcast")) {
    s.push_back(comm("broadcast").broadcast(t.data_ptr(), t.numel(), dtype_of(t, "broadcast"),
                                            static_cast<int>(o.rootRank), stream_of(t)));
  } else {
    s.push_back(comm("broadcast").broadcast_async(t.data_ptr(), t.numel(), dtype_of(t, "broadcast"),
                                                    static_cast<int>(o.rootRank)));
  }
  return submit(OpType::BROADCAST, "broadcast", {t}, std::move(s));
}

c10::intrusive_ptr<c10d::Work> GrexBackend::allreduce(std::vector<at::Tensor>& ts, const c10d::AllreduceOptions& o) {
  at::Tensor t = single(ts, "allreduce");
  Reduction r = reduction_of(o.reduceOp, "allreduce");
  check_reduction(r, t, "allreduce");
  Communicator& c = comm("allreduce");
  r.premultiply(t);
  Started s;
  s.push_back(allreduce_on(c, on_cuda(t, {}, "allreduce"), t, r.op, "allreduce"));
  return submit(OpType::ALLREDUCE, "allreduce", {t}, std::move(s));
}

c10::intrusive_ptr<c10d::Work> GrexBackend::compressed_allreduce(at::Tensor t, const std::string& compression,
                                                                bool error_feedback, int64_t key,
                                                                double topk_fraction) {
  const char* what = "compressed allreduce";
  check_tensor(t, what);
  TORCH_CHECK(path_of(t, what) == Path::kCpu, "grex: ", what, " takes CPU tensors (the compressed ring runs on the ",
              "host); got ", t.device());
  TORCH_CHECK(t.scalar_type() == at::kFloat, "grex: ", what, " takes float32 tensors, got ", t.scalar_type());
  AllreduceOptions o;
  const auto kind = compression_from_name(compression);
  TORCH_CHECK(kind.has_value(), "grex: ", what, ": compression '", compression, "': bf16, fp16, int8, topk or none");
  o.compression = *kind;
  o.error_feedback = error_feedback;
  TORCH_CHECK(topk_fraction > 0.0 && topk_fraction <= 1.0, "grex: ", what, ": topk_fraction ", topk_fraction,
              " is not in (0, 1]");
  o.topk_fraction = topk_fraction;
  // An opaque key per bucket: DDP may hand a bucket's buffer at a new address.
  o.feedback_key = reinterpret_cast<const void*>(static_cast<uintptr_t>(key) + 1);
  Started s;
  s.push_back(comm(what).allreduce_async(t.data_ptr(), t.data_ptr(), t.numel(), DataType::kFloat32, ReduceOp::kAvg, o));
  return submit(OpType::ALLREDUCE, what, {t}, std::move(s));
}

c10::intrusive_ptr<c10d::Work> GrexBackend::deadline_allreduce(at::Tensor t, int64_t deadline_ms, bool carry,
                                                              int64_t key, std::optional<at::Tensor> given) {
  at::Tensor mask = given.value_or(at::Tensor());
  const char* what = "deadline allreduce";
  check_tensor(t, what);
  TORCH_CHECK(path_of(t, what) == Path::kCpu, "grex: ", what, " takes CPU tensors; got ", t.device());
  TORCH_CHECK(deadline_ms > 0, "grex: ", what, ": the deadline must be > 0 ms, got ", deadline_ms);
  TORCH_CHECK(!mask.defined() || (mask.device().is_cpu() && mask.scalar_type() == at::kInt &&
                                  mask.is_contiguous() && mask.numel() == getSize()),
              "grex: ", what, ": the contributor mask must be a contiguous int32 CPU tensor of ", getSize(),
              " elements");
  auto in = std::make_shared<std::vector<int>>();
  AllreduceOptions o;
  o.deadline_ms = deadline_ms;
  o.late = carry ? LateInput::kCarry : LateInput::kDrop;
  o.contributors = in.get();  // written by the worker before the Work completes
  o.feedback_key = reinterpret_cast<const void*>(static_cast<uintptr_t>(key) + 1);  // the carried vector's key
  Started s;
  s.push_back(comm(what).allreduce_async(t.data_ptr(), t.data_ptr(), t.numel(), dtype_of(t, what), ReduceOp::kAvg, o));
  return submit(OpType::ALLREDUCE, what, {t}, std::move(s), [in, mask]() mutable {
    if (!mask.defined()) return;
    mask.zero_();
    int32_t* m = mask.data_ptr<int32_t>();
    for (int r : *in) m[r] = 1;
  });
}

c10::intrusive_ptr<c10d::Work> GrexBackend::allreduce_coalesced(std::vector<at::Tensor>& ts,
                                                               const c10d::AllreduceCoalescedOptions& o) {
  Reduction r = reduction_of(o.reduceOp, "allreduce_coalesced");
  for (auto& t : ts) {
    check_tensor(t, "allreduce_coalesced");
    check_reduction(r, t, "allreduce_coalesced");
  }
  Communicator& c = comm("allreduce_coalesced");
  Started s;
  const bool gpu = !ts.empty() && on_cuda(ts[0], ts, "allreduce_coalesced");
  for (auto& t : ts) {
    r.premultiply(t);
    s.push_back(allreduce_on(c, gpu, t, r.op, "allreduce_coalesced"));
  }
  return submit(OpType::ALLREDUCE_COALESCED, "allreduce_coalesced", ts, std::move(s));
}

c10::intrusive_ptr<c10d::Work> GrexBackend::reduce(std::vector<at::Tensor>& ts, const c10d::ReduceOptions& o) {
  at::Tensor t = single(ts, "reduce");
  Reduction r = reduction_of(o.reduceOp, "reduce");
  check_reduction(r, t, "reduce");
  Communicator& c = comm("reduce");
  r.premultiply(t);
  Started s;
  if (on_cuda(t, {}, "reduce")) {
    s.push_back(c.reduce(t.data_ptr(), t.data_ptr(), t.numel(), dtype_of(t, "reduce"), r.op,
                         static_cast<int>(o.rootRank), stream_of(t)));
  } else {
    s.push_back(c.reduce_async(t.data_ptr(), t.data_ptr(), t.numel(), dtype_of(t, "reduce"), r.op,
                               static_cast<int>(o.rootRank)));
  }
  return submit(OpType::REDUCE, "reduce", {t}, std::move(s));
}

c10::intrusive_ptr<c10d::Work> GrexBackend::allgather(std::vector<std::vector<at::Tensor>>& outs,
                                                     std::vector<at::Tensor>& ins, const c10d::AllgatherOptions&) {
  const at::Tensor& t = single(ins, "allgather");
  TORCH_CHECK(outs.size() == 1 && static_cast<int>(outs[0].size()) == getSize(), "grex: allgather needs one list of ",
              getSize(), " output tensors");
  for (const auto& o : outs[0]) check_same(o, t, t.numel(), "allgather");
  at::Tensor flat = at::empty({getSize() * t.numel()}, t.options());
  std::vector<at::Tensor> dst = outs[0];
  const int64_t n = t.numel();
  Started s;
  auto copy_out = [flat, dst, n, t] {
    for (size_t r = 0; r < dst.size(); ++r) dst[r].copy_(flat.narrow(0, static_cast<int64_t>(r) * n, n).view_as(dst[r]));
  };
  if (on_cuda(t, dst, "allgather")) {  // the copies out queue on the stream, behind the collective
    s.push_back(comm("allgather").allgather(t.data_ptr(), flat.data_ptr(), n, dtype_of(t, "allgather"), stream_of(t)));
    if (s.back()) copy_out();
    return submit(OpType::ALLGATHER, "allgather", dst, std::move(s), [flat, t] {});
  }
  s.push_back(comm("allgather").allgather_async(t.data_ptr(), flat.data_ptr(), n, dtype_of(t, "allgather")));
  return submit(OpType::ALLGATHER, "allgather", dst, std::move(s), copy_out);
}

c10::intrusive_ptr<c10d::Work> GrexBackend::_allgather_base(at::Tensor& out, at::Tensor& in,
                                                           const c10d::AllgatherOptions&) {
  check_tensor(in, "all_gather_into_tensor");
  check_same(out, in, getSize() * in.numel(), "all_gather_into_tensor");
  Started s;
  s.push_back(allgather_on(comm("all_gather_into_tensor"), on_cuda(in, {out}, "all_gather_into_tensor"), in, out,
                           "all_gather_into_tensor"));
  return submit(OpType::_ALLGATHER_BASE, "all_gather_into_tensor", {out}, std::move(s), [in] {});
}

// all_gather_coalesced: outs[r][i] gets rank r's ins[i] (one list per rank).
c10::intrusive_ptr<c10d::Work> GrexBackend::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outs,
                                                               std::vector<at::Tensor>& ins,
                                                               const c10d::AllgatherOptions&) {
  const char* what = "all_gather_coalesced";
  const size_t k = ins.size();
  TORCH_CHECK(static_cast<int>(outs.size()) == getSize(), "grex: ", what, " needs one output list per rank (",
              getSize(), "), got ", outs.size());
  std::vector<at::Tensor> flats, dst;
  for (size_t i = 0; i < k; ++i) {
    check_tensor(ins[i], what);
    flats.push_back(at::empty({getSize() * ins[i].numel()}, ins[i].options()));
  }
  for (const auto& list : outs) {
    TORCH_CHECK(list.size() == k, "grex: ", what, " needs ", k, " tensors in each output list, got ", list.size());
    for (size_t i = 0; i < k; ++i) {
      check_same(list[i], ins[i], ins[i].numel(), what);
      dst.push_back(list[i]);
    }
  }
  Communicator& c = comm(what);
  Started s;
  auto copy_out = [flats, dst, k, ins] {
    for (size_t j = 0; j < dst.size(); ++j) {  // dst[r * k + i] is outs[r][i]
      const size_t r = j / k, i = j % k;
      const int64_t n = ins[i].numel();
      dst[j].copy_(flats[i].narrow(0, static_cast<int64_t>(r) * n, n).view_as(dst[j]));
    }
  };
  std::vector<at::Tensor> all = ins;
  all.insert(all.end(), dst.begin(), dst.end());
  const bool gpu = k > 0 && on_cuda(ins[0], all, what);
  for (size_t i = 0; i < k; ++i) s.push_back(allgather_on(c, gpu, ins[i], flats[i], what));
  if (gpu) {
    if (std::all_of(s.begin(), s.end(), [](const auto& r) { return r.ok(); })) copy_out();
    return submit(OpType::ALLGATHER_COALESCED, what, dst, std::move(s), [flats, ins] {});
  }
  return submit(OpType::ALLGATHER_COALESCED, what, dst, std::move(s), copy_out);
}

c10::intrusive_ptr<c10d::Work> GrexBackend::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outs,
                                                                           std::vector<at::Tensor>& ins,
                                                                           const c10d::AllgatherOptions&) {
  TORCH_CHECK(outs.size() == ins.size(), "grex: allgather_into_tensor_coalesced needs as many outputs as inputs");
  for (size_t i = 0; i < ins.size(); ++i) {
    check_tensor(ins[i], "allgather_into_tensor_coalesced");
    check_same(outs[i], ins[i], getSize() * ins[i].numel(), "allgather_into_tensor_coalesced");
  }
  Communicator& c = comm("allgather_into_tensor_coalesced");
  Started s;
  std::vector<at::Tensor> all = ins;
  all.insert(all.end(), outs.begin(), outs.end());
  const bool gpu = !ins.empty() && on_cuda(ins[0], all, "allgather_into_tensor_coalesced");
  for (size_t i = 0; i < ins.size(); ++i)
    s.push_back(allgather_on(c, gpu, ins[i], outs[i], "allgather_into_tensor_coalesced"));
  return submit(OpType::COALESCED, "allgather_into_tensor_coalesced", outs, std::move(s), [ins] {});
}

c10::intrusive_ptr<c10d::Work> GrexBackend::reduce_scatter(std::vector<at::Tensor>& outs,
                                                          std::vector<std::vector<at::Tensor>>& ins,
                                                          const c10d::ReduceScatterOptions& o) {
  const at::Tensor& out = single(outs, "reduce_scatter");
  Reduction red = reduction_of(o.reduceOp, "reduce_scatter");
  check_reduction(red, out, "reduce_scatter");
  TORCH_CHECK(ins.size() == 1 && static_cast<int>(ins[0].size()) == getSize(), "grex: reduce_scatter needs one list of ",
              getSize(), " input tensors");
  for (const auto& in : ins[0]) check_same(in, out, out.numel(), "reduce_scatter");
  Communicator& c = comm("reduce_scatter");
  const int64_t n = out.numel();
  at::Tensor flat = at::empty({getSize() * n}, out.options());
  for (int r = 0; r < getSize(); ++r) flat.narrow(0, r * n, n).copy_(ins[0][r].reshape({-1}));
  red.premultiply(flat);
  Started s;
  s.push_back(reduce_scatter_on(c, on_cuda(out, ins[0], "reduce_scatter"), flat, out, red.op, "reduce_scatter"));
  return submit(OpType::REDUCE_SCATTER, "reduce_scatter", {out}, std::move(s), [flat] {});
}

c10::intrusive_ptr<c10d::Work> GrexBackend::_reduce_scatter_base(at::Tensor& out, at::Tensor& in,
                                                                const c10d::ReduceScatterOptions& o) {
  check_tensor(out, "reduce_scatter_tensor");
  check_same(in, out, getSize() * out.numel(), "reduce_scatter_tensor");
  Reduction red = reduction_of(o.reduceOp, "reduce_scatter_tensor");
  check_reduction(red, out, "reduce_scatter_tensor");
  Communicator& c = comm("reduce_scatter_tensor");
  at::Tensor src = in;
  if (red.premul) {  // scale a copy: the input is the caller's
    src = in.clone();
    red.premultiply(src);
  }
  Started s;
  s.push_back(reduce_scatter_on(c, on_cuda(out, {in}, "reduce_scatter_tensor"), src, out, red.op,
                                "reduce_scatter_tensor"));
  return submit(OpType::_REDUCE_SCATTER_BASE, "reduce_scatter_tensor", {out}, std::move(s), [src] {});
}

c10::intrusive_ptr<c10d::Work> GrexBackend::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outs,
                                                                           std::vector<at::Tensor>& ins,
                                                                           const c10d::ReduceScatterOptions& o) {
  const char* what = "reduce_scatter_tensor_coalesced";
  TORCH_CHECK(outs.size() == ins.size(), "grex: ", what, " needs as many outputs as inputs");
  Reduction red = reduction_of(o.reduceOp, what);
  for (size_t i = 0; i < ins.size(); ++i) {
    check_tensor(outs[i], what);
    check_same(ins[i], outs[i], getSize() * outs[i].numel(), what);
    check_reduction(red, outs[i], what);
  }
  Communicator& c = comm(what);
  std::vector<at::Tensor> srcs;
  Started s;
  std::vector<at::Tensor> all = ins;
  all.insert(all.end(), outs.begin(), outs.end());
  const bool gpu = !outs.empty() && on_cuda(outs[0], all, what);
  for (size_t i = 0; i < ins.size(); ++i) {
    srcs.push_back(red.premul ? ins[i].clone() : ins[i]);
    red.premultiply(srcs.back());
    s.push_back(reduce_scatter_on(c, gpu, srcs[i], outs[i], red.op, what));
  }
  return submit(OpType::COALESCED, what, outs, std::move(s), [srcs] {});
}

c10::intrusive_ptr<c10d::Work> GrexBackend::exchange(OpType type, const char* op, at::Tensor send_flat,
                                                    std::vector<size_t> send_counts, at::Tensor recv_flat,
                                                    std::vector<size_t> recv_counts, std::vector<at::Tensor> outputs,
                                                    std::function<void()> after) {
  const auto sd = displacements(send_counts);
  const auto rd = displacements(recv_counts);
  Started s;
  if (on_cuda(send_flat, {recv_flat}, op)) {
    // On the tensors' current stream; the copies out (`after`) queue behind it.
    s.push_back(comm(op).alltoallv(send_flat.data_ptr(), send_counts, sd, recv_flat.data_ptr(), recv_counts, rd,
                                   dtype_of(send_flat, op), stream_of(send_flat)));
    if (s.back() && after) after();
    return submit(type, op, std::move(outputs), std::move(s), [send_flat, recv_flat] {});
  }
  s.push_back(comm(op).alltoallv_async(send_flat.data_ptr(), send_counts, sd, recv_flat.data_ptr(), recv_counts, rd,
                                       dtype_of(send_flat, op)));
  return submit(type, op, std::move(outputs), std::move(s), [send_flat, recv_flat, after = std::move(after)] {
    if (after) after();
  });
}

c10::intrusive_ptr<c10d::Work> GrexBackend::gather(std::vector<std::vector<at::Tensor>>& outs,
                                                  std::vector<at::Tensor>& ins, const c10d::GatherOptions& o) {
  const at::Tensor& t = single(ins, "gather");
  const int root = static_cast<int>(o.rootRank), n = getSize();
  const size_t count = static_cast<size_t>(t.numel());
  std::vector<size_t> sc(n, 0), rc(n, 0);
  sc[root] = count;
  std::vector<at::Tensor> dst;
  if (getRank() == root) {
    TORCH_CHECK(outs.size() == 1 && static_cast<int>(outs[0].size()) == n, "grex: gather needs one list of ", n,
                " output tensors on the root");
    for (const auto& out : outs[0]) check_same(out, t, t.numel(), "gather");
    dst = outs[0];
    rc.assign(n, count);
  } else {
    TORCH_CHECK(outs.empty() || (outs.size() == 1 && outs[0].empty()), "grex: gather takes outputs on the root only");
  }
  at::Tensor flat = at::empty({static_cast<int64_t>(std::max<size_t>(total(rc), 1))}, t.options());
  return exchange(OpType::GATHER, "gather", t, sc, flat, rc, dst, [flat, dst, count] {
    const auto c = static_cast<int64_t>(count);
    for (size_t r = 0; r < dst.size(); ++r) dst[r].copy_(flat.narrow(0, static_cast<int64_t>(r) * c, c).view_as(dst[r]));
  });
}

c10::intrusive_ptr<c10d::Work> GrexBackend::scatter(std::vector<at::Tensor>& outs,
                                                   std::vector<std::vector<at::Tensor>>& ins,
                                                   const c10d::ScatterOptions& o) {
  const at::Tensor& t = single(outs, "scatter");
  const int root = static_cast<int>(o.rootRank), n = getSize();
  const size_t count = static_cast<size_t>(t.numel());
  std::vector<size_t> sc(n, 0), rc(n, 0);
  rc[root] = count;
  at::Tensor flat;
  if (getRank() == root) {
    TORCH_CHECK(ins.size() == 1 && static_cast<int>(ins[0].size()) == n, "grex: scatter needs one list of ", n,
                " input tensors on the root");
    for (const auto& in : ins[0]) check_same(in, t, t.numel(), "scatter");
    flat = at::cat(ins[0]).reshape({-1});
    sc.assign(n, count);
  } else {
    TORCH_CHECK(ins.empty() || (ins.size() == 1 && ins[0].empty()), "grex: scatter takes inputs on the root only");
    flat = at::empty({1}, t.options());
  }
  return exchange(OpType::SCATTER, "scatter", flat, sc, t, rc, {t}, {});
}

c10::intrusive_ptr<c10d::Work> GrexBackend::alltoall(std::vector<at::Tensor>& outs, std::vector<at::Tensor>& ins,
                                                    const c10d::AllToAllOptions&) {
  const int n = getSize();
  TORCH_CHECK(static_cast<int>(outs.size()) == n && static_cast<int>(ins.size()) == n, "grex: alltoall needs ", n,
              " input and ", n, " output tensors");
  std::vector<size_t> sc(n), rc(n);
  for (int r = 0; r < n; ++r) {
    check_same(ins[r], ins[0], ins[r].numel(), "alltoall");
    check_same(outs[r], ins[0], outs[r].numel(), "alltoall");
    sc[r] = static_cast<size_t>(ins[r].numel());
    rc[r] = static_cast<size_t>(outs[r].numel());
  }
  at::Tensor send_flat = at::cat(ins).reshape({-1});
  at::Tensor recv_flat = at::empty({static_cast<int64_t>(std::max<size_t>(total(rc), 1))}, ins[0].options());
  std::vector<at::Tensor> dst = outs;
  return exchange(OpType::ALLTOALL, "alltoall", send_flat, sc, recv_flat, rc, dst, [recv_flat, dst, rc] {
    int64_t at = 0;
    for (size_t r = 0; r < dst.size(); ++r) {
      const auto c = static_cast<int64_t>(rc[r]);
      dst[r].copy_(recv_flat.narrow(0, at, c).view_as(dst[r]));
      at += c;
    }
  });
}

c10::intrusive_ptr<c10d::Work> GrexBackend::alltoall_base(at::Tensor& out, at::Tensor& in,
                                                         std::vector<int64_t>& out_splits,
                                                         std::vector<int64_t>& in_splits,
                                                         const c10d::AllToAllOptions&) {
  check_tensor(in, "all_to_all_single");
  check_tensor(out, "all_to_all_single");
  TORCH_CHECK(in.scalar_type() == out.scalar_type(), "grex: all_to_all_single: input and output types differ");
  const int n = getSize();
  // Splits count rows along dim 0 (none: equal rows); a row is the product of
  // the other dims, the same for both tensors.
  TORCH_CHECK(in.dim() > 0 && out.dim() > 0, "grex: all_to_all_single needs tensors of at least one dim");
  const int64_t row = in.size(0) > 0 ? in.numel() / in.size(0) : 0;
  const int64_t orow = out.size(0) > 0 ? out.numel() / out.size(0) : 0;
  TORCH_CHECK(row == orow || in.numel() == 0 || out.numel() == 0,
              "grex: all_to_all_single: input and output rows differ in size");
  const auto counts = [&](const std::vector<int64_t>& splits, const at::Tensor& t, const char* what) {
    std::vector<size_t> c(n, 0);
    if (splits.empty()) {
      TORCH_CHECK(t.size(0) % n == 0, "grex: all_to_all_single ", what, ": ", t.size(0), " rows do not split ", n,
                  " ways");
      for (int r = 0; r < n; ++r) c[r] = static_cast<size_t>(t.size(0) / n * row);
      return c;
    }
    TORCH_CHECK(static_cast<int>(splits.size()) == n, "grex: all_to_all_single ", what, " splits need ", n, " entries");
    int64_t rows = 0;
    for (int r = 0; r < n; ++r) {
      TORCH_CHECK(splits[r] >= 0, "grex: all_to_all_single ", what, " split ", r, " is negative");
      c[r] = static_cast<size_t>(splits[r] * row);
      rows += splits[r];
    }
    TORCH_CHECK(rows == t.size(0), "grex: all_to_all_single ", what, " splits sum to ", rows, ", the tensor has ",
                t.size(0), " rows");
    return c;
  };
  auto sc = counts(in_splits, in, "input");
  auto rc = counts(out_splits, out, "output");
  if (in_splits.empty() && out_splits.empty() && in.numel() == out.numel() && in.data_ptr() != out.data_ptr()) {
    Started s;  // equal blocks: the regular alltoall
    const DataType dt = dtype_of(in, "all_to_all_single");
    if (on_cuda(in, {out}, "all_to_all_single")) {
      s.push_back(comm("all_to_all_single").alltoall(in.data_ptr(), out.data_ptr(), in.numel() / n, dt, stream_of(in)));
    } else {
      s.push_back(comm("all_to_all_single").alltoall_async(in.data_ptr(), out.data_ptr(), in.numel() / n, dt));
    }
    return submit(OpType::ALLTOALL_BASE, "all_to_all_single", {out}, std::move(s), [in] {});
  }
  // grex's alltoallv is not in place: an input that is the output goes through a copy.
  at::Tensor src = in.data_ptr() == out.data_ptr() ? in.clone() : in;
  return exchange(OpType::ALLTOALL_BASE, "all_to_all_single", src, sc, out, rc, {out}, {});
}

c10::intrusive_ptr<c10d::Work> GrexBackend::barrier(const c10d::BarrierOptions&) {
  Started s;
  s.push_back(comm("barrier").barrier_async());
  return submit(OpType::BARRIER, "barrier", {}, std::move(s));
}

}  // namespace grex::torch_backend
