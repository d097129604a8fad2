// SPDX-License-Identifier: Apache-2.0
// Allreduce with options (issue 29): the compressed ring and its error
// feedback residuals, kept per buffer on the communicator's worker; the
// deadline allreduce (deadline_allreduce.cc).
#include "collectives/algorithm.h"
#include "collectives/comm_impl.h"
#include "collectives/hierarchy.h"
#include "collectives/jobs.h"

namespace grex {
namespace detail {
Result<void> topk_allreduce(Communicator::Impl& c, const float* in, float* out, size_t count, ReduceOp op,
                            double fraction, float* residual);  // topk_allreduce.cc
}  // namespace detail

using detail::bad_arg;

namespace {

Result<detail::JobFn> options_job(Communicator::Impl& c, const void* sendbuf, void* recvbuf, size_t count,
                                  DataType type, ReduceOp op, const AllreduceOptions& o) {
  if (o.deadline_ms > 0) return deadline_allreduce_job(c, sendbuf, recvbuf, count, type, op, o);
  if (o.deadline_ms < 0)
    return bad_arg(c.rank, "allreduce", "deadline_ms " + std::to_string(o.deadline_ms) + " is negative");
  if (o.compression == Compression::kNone) return allreduce_job(c, sendbuf, recvbuf, count, type, op);
  if (compression_name(o.compression) == "?")
    return bad_arg(c.rank, "allreduce", "unknown compression " + std::to_string(static_cast<int>(o.compression)));
  if (type != DataType::kFloat32)
    return bad_arg(c.rank, "allreduce", "compression takes float32 vectors, not " + std::string(dtype_name(type)));
  if (op != ReduceOp::kSum && op != ReduceOp::kAvg)
    return bad_arg(c.rank, "allreduce", "compression sums (sum or avg), not " + std::string(reduce_op_name(op)));
  if (count > 0 && (sendbuf == nullptr || recvbuf == nullptr)) return bad_arg(c.rank, "allreduce", "null buffer");
  if (o.compression == Compression::kTopK && !(o.topk_fraction > 0.0 && o.topk_fraction <= 1.0))
    return bad_arg(c.rank, "allreduce", "topk_fraction " + std::to_string(o.topk_fraction) + " is not in (0, 1]");
  if (o.compression == Compression::kTopK && count > UINT32_MAX)
    return bad_arg(c.rank, "allreduce", "top-k takes at most 2^32 - 1 values (indices are 32 bits)");
  // Named apart from a plain allreduce (and from each other) in the call
  // signature, so ranks that disagree on compression are told so.
  static constexpr const char* kWhat[] = {"allreduce", "bf16 allreduce", "fp16 allreduce", "int8 allreduce",
                                          "top-k allreduce"};
  const char* what = kWhat[static_cast<size_t>(o.compression)];
  const double fraction = o.topk_fraction;
  const Compression kind = o.compression;
  const bool feedback = o.error_feedback;
  const void* key = o.feedback_key != nullptr ? o.feedback_key : recvbuf;
  return detail::JobFn([&c, sendbuf, recvbuf, count, type, op, what, kind, feedback, key, fraction]() -> Result<void> {
    GREX_TRY(c.check_usable(what));
    c.begin({what, "count", count, static_cast<int>(type), static_cast<int>(op), -1});
    if (count == 0) return ok();
    float* residual = nullptr;
    if (feedback) {
      std::vector<float>& v = c.feedback[key];
      if (v.size() != count) v.assign(count, 0.0f);
      residual = v.data();
    }
    const detail::CollArgs a{sendbuf, recvbuf, count, type, op, 0, c.next_tag_base()};
    // Across hosts, where the model takes the hierarchical allreduce for this
    // size: exact float32 sums inside each host, the shards compressed between
    // hosts only (each rank's residual kept for its own shard's elements). Top-k
    // there selects from its shard of the host's sum, where GREX_TOPK or the
    // two-level model says so: the exact sum inside a host costs a dense
    // allreduce there, which the flat top-k's few pairs may not.
    const size_t bytes = count * dtype_size(type);
    auto wins = [&]() {
      if (kind != Compression::kTopK)
        return c.select.allreduce_memo(c.ctx, *c.world, bytes) == detail::Algo::kHierarchical;
      return c.opts.topk == "hierarchical" ||
             (c.opts.topk == "auto" && detail::hierarchical_topk_wins(c.ctx, static_cast<double>(bytes), fraction));
    };
    const bool hier = c.ctx.hier != nullptr && detail::hierarchical_usable(c.ctx, *c.world, a) && wins();
    if (hier)
      return c.finish(detail::hierarchical_allreduce_via(
                          c.ctx, a,
                          [&](detail::Level& rail, const detail::CollArgs& ra, size_t first) {
                            float* res = residual != nullptr ? residual + first : nullptr;
                            if (kind == Compression::kTopK)
                              return detail::topk_rail_allreduce(rail.ctx, *rail.group, ra, fraction, res);
                            return detail::compressed_ring_allreduce(rail.ctx, *rail.group, ra, kind, res,
                                                                     &c.compress_wire);
                          }),
                      what);
    if (kind == Compression::kTopK)
      return c.finish(detail::topk_allreduce(c, static_cast<const float*>(sendbuf), static_cast<float*>(recvbuf), count,
                                             op, fraction, residual),
                      what);
    return c.finish(detail::compressed_ring_allreduce(c.ctx, *c.world, a, kind, residual, &c.compress_wire), what);
  });
}

}  // namespace

Result<void> Communicator::allreduce(const void* sendbuf, void* recvbuf, size_t count, DataType type, ReduceOp op,
                                     const AllreduceOptions& options) {
  return impl_->run(GREX_TRY(options_job(*impl_, sendbuf, recvbuf, count, type, op, options)));
}

Result<WorkPtr> Communicator::allreduce_async(const void* sendbuf, void* recvbuf, size_t count, DataType type,
                                              ReduceOp op, const AllreduceOptions& options) {
  return impl_->submit(GREX_TRY(options_job(*impl_, sendbuf, recvbuf, count, type, op, options)));
}

Result<void> Communicator::clear_feedback(const void* key) {
  Impl& c = *impl_;
  return c.run([&c, key]() -> Result<void> {
    if (key == nullptr) {
      c.feedback.clear();
      c.carried.clear();
    } else {
      c.feedback.erase(key);
      c.carried.erase(key);
    }
    return ok();
  });
}

}  // namespace grex
