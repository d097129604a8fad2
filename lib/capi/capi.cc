// SPDX-License-Identifier: Apache-2.0
// The C API (grex.h) over the C++ Communicator: argument checks that C
// callers cannot get from the type system, Result -> grex_result_t, and the
// thread's last error message.
#include <grex/bootstrap.h>
#include <grex/communicator.h>
#include <grex/grex.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "grex_version.h"

struct grex_comm {
  std::unique_ptr<grex::Communicator> comm;
  std::map<void*, grex::MemoryRegion*> registrations;  // grex_mem_register
};

struct grex_work {
  grex::WorkPtr work;
};

namespace {

using grex::Errc;
using grex::Error;

static_assert(GREX_ERR_INTERNAL == static_cast<int>(Errc::kInternal) &&
                  GREX_ERR_MISMATCH == static_cast<int>(Errc::kMismatch) &&
                  GREX_ERR_INVALID_ARGUMENT == static_cast<int>(Errc::kInvalidArgument),
              "grex_result_t mirrors grex::Errc");
static_assert(GREX_BFLOAT16 == static_cast<int>(grex::DataType::kBFloat16) &&
                  GREX_UINT8 == static_cast<int>(grex::DataType::kUint8),
              "grex_dtype_t mirrors grex::DataType");
static_assert(GREX_AVG == static_cast<int>(grex::ReduceOp::kAvg), "grex_op_t mirrors grex::ReduceOp");

#define GREX_C_TRY(expr)                      \
  do {                                        \
    grex_result_t grex_c_rc_ = (expr);        \
    if (grex_c_rc_ != GREX_OK) return grex_c_rc_; \
  } while (0)

thread_local std::string t_last_error;

grex_result_t fail(const Error& e) {
  t_last_error = e.message();
  return static_cast<grex_result_t>(e.code());
}

grex_result_t invalid(const char* fn, const std::string& what) {
  return fail(Error(Errc::kInvalidArgument, std::string(fn) + ": " + what));
}

grex_result_t done(const grex::Result<void>& r) { return r ? GREX_OK : fail(r.error()); }

// Checks shared by the collectives; returns GREX_OK or the error already recorded.
grex_result_t need_comm(const char* fn, const grex_comm_t* c) {
  return c == nullptr || !c->comm ? invalid(fn, "comm is NULL") : GREX_OK;
}

grex_result_t check(const char* fn, const grex_comm_t* c, int dtype, int op = GREX_SUM) {
  GREX_C_TRY(need_comm(fn, c));
  if (dtype < GREX_FLOAT32 || dtype > GREX_BFLOAT16) return invalid(fn, "unknown dtype " + std::to_string(dtype));
  if (op < GREX_SUM || op > GREX_AVG) return invalid(fn, "unknown op " + std::to_string(op));
  return GREX_OK;
}

grex_result_t need(const char* fn, const void* p, size_t count, const char* name) {
  return p == nullptr && count > 0 ? invalid(fn, std::string(name) + " is NULL with count " + std::to_string(count))
                                   : GREX_OK;
}

grex_result_t need_root(const char* fn, const grex_comm_t* c, int root) {
  return root < 0 || root >= c->comm->size()
             ? invalid(fn, "root " + std::to_string(root) + " is not a rank of 0.." + std::to_string(c->comm->size() - 1))
             : GREX_OK;
}

grex::DataType dt(grex_dtype_t t) { return static_cast<grex::DataType>(t); }
grex::ReduceOp rop(grex_op_t o) { return static_cast<grex::ReduceOp>(o); }

grex_result_t started(grex::Result<grex::WorkPtr> r, grex_work_t** work) {
  if (!r) return fail(r.error());
  *work = new grex_work{std::move(*r)};
  return GREX_OK;
}


// Argument checks of each collective, shared by its blocking and async forms.
grex_result_t check_allreduce(const char* fn, grex_comm_t* c, const void* s, void* r, size_t n, grex_dtype_t t,
                              grex_op_t o) {
  GREX_C_TRY(check(fn, c, t, o));
  GREX_C_TRY(need(fn, s, n, "sendbuf"));
  return need(fn, r, n, "recvbuf");
}
grex_result_t check_reduce(const char* fn, grex_comm_t* c, const void* s, void* r, size_t n, grex_dtype_t t,
                           grex_op_t o, int root) {
  GREX_C_TRY(check(fn, c, t, o));
  GREX_C_TRY(need_root(fn, c, root));
  GREX_C_TRY(need(fn, s, n, "sendbuf"));
  return c->comm->rank() == root ? need(fn, r, n, "recvbuf") : GREX_OK;
}
grex_result_t check_blocks(const char* fn, grex_comm_t* c, const void* s, void* r, size_t n, grex_dtype_t t) {
  GREX_C_TRY(check(fn, c, t));
  GREX_C_TRY(need(fn, s, n, "sendbuf"));
  return need(fn, r, n, "recvbuf");
}
// alltoallv: four arrays of one entry per rank (NULL is an error); the
// buffers are checked by the library against the counts.
grex_result_t check_v(const char* fn, grex_comm_t* c, const size_t* sc, const size_t* sd, const size_t* rc,
                      const size_t* rd, grex_dtype_t t) {
  GREX_C_TRY(check(fn, c, t));
  GREX_C_TRY(need(fn, sc, 1, "sendcounts"));
  GREX_C_TRY(need(fn, sd, 1, "sdispls"));
  GREX_C_TRY(need(fn, rc, 1, "recvcounts"));
  return need(fn, rd, 1, "rdispls");
}
grex_result_t check_broadcast(const char* fn, grex_comm_t* c, void* b, size_t n, grex_dtype_t t, int root) {
  GREX_C_TRY(check(fn, c, t));
  GREX_C_TRY(need_root(fn, c, root));
  return need(fn, b, n, "buf");
}
grex_result_t check_work(const char* fn, grex_work_t** work) {
  return work == nullptr ? invalid(fn, "work is NULL") : GREX_OK;
}

// The stream forms: *work is optional.
grex_result_t enqueued(grex::Result<grex::WorkPtr> r, grex_work_t** work) {
  if (!r) return fail(r.error());
  if (work != nullptr) *work = new grex_work{std::move(*r)};
  return GREX_OK;
}

}  // namespace

extern "C" {

int grex_abi_version(void) { return GREX_ABI_VERSION; }
const char* grex_version(void) { return GREX_VERSION; }

const char* grex_strerror(grex_result_t result) {
  if (result < GREX_OK || result > GREX_ERR_INTERNAL) return "unknown";
  return grex::errc_name(static_cast<Errc>(result)).data();  // string literals: NUL-terminated
}

const char* grex_last_error_message(void) { return t_last_error.c_str(); }

grex_result_t grex_comm_init_env(grex_comm_t** comm) {
  if (comm == nullptr) return invalid("grex_comm_init_env", "comm is NULL");
  *comm = nullptr;
  auto c = grex::Communicator::from_env();
  if (!c) return fail(c.error());
  *comm = new grex_comm{std::move(*c), {}};
  return GREX_OK;
}

grex_result_t grex_comm_init_rank(int rank, int world_size, const char* store_addr, const char* job_token,
                                  grex_comm_t** comm) {
  const char* fn = "grex_comm_init_rank";
  if (comm == nullptr) return invalid(fn, "comm is NULL");
  *comm = nullptr;
  if (store_addr == nullptr || job_token == nullptr) return invalid(fn, "store_addr and job_token must be set");
  std::string addr(store_addr);
  size_t colon = addr.rfind(':');
  char* end = nullptr;
  long port = colon == std::string::npos ? 0 : std::strtol(addr.c_str() + colon + 1, &end, 10);
  if (colon == std::string::npos || colon == 0 || end == nullptr || *end != '\0' || port <= 0 || port > 65535)
    return invalid(fn, "store_addr '" + addr + "' is not host:port");
  grex::BootstrapConfig cfg;
  cfg.rank = rank;
  cfg.world_size = world_size;
  cfg.store_host = addr.substr(0, colon);
  cfg.store_port = static_cast<uint16_t>(port);
  cfg.host_store = true;  // rank 0 hosts it
  cfg.job_token = job_token;
  cfg.launcher = "explicit";
  if (auto v = grex::validate(cfg); !v) return fail(v.error());
  auto bs = grex::Bootstrap::create(cfg);
  if (!bs) return fail(bs.error());
  auto c = grex::Communicator::create(std::shared_ptr<grex::Bootstrap>(std::move(*bs)));
  if (!c) return fail(c.error());
  *comm = new grex_comm{std::move(*c), {}};
  return GREX_OK;
}

grex_result_t grex_comm_destroy(grex_comm_t* comm) {
  if (comm == nullptr) return GREX_OK;
  // Through the communicator: after the async collectives still in flight.
  for (auto& [ptr, mr] : comm->registrations) (void)comm->comm->deregister_memory(mr);
  delete comm;
  return GREX_OK;
}

grex_result_t grex_comm_rank(const grex_comm_t* comm, int* rank) {
  if (comm == nullptr || rank == nullptr) return invalid("grex_comm_rank", "comm or rank is NULL");
  *rank = comm->comm->rank();
  return GREX_OK;
}

grex_result_t grex_comm_size(const grex_comm_t* comm, int* size) {
  if (comm == nullptr || size == nullptr) return invalid("grex_comm_size", "comm or size is NULL");
  *size = comm->comm->size();
  return GREX_OK;
}

grex_result_t grex_allreduce(grex_comm_t* c, const void* s, void* r, size_t n, grex_dtype_t t, grex_op_t o) {
  GREX_C_TRY(check_allreduce("grex_allreduce", c, s, r, n, t, o));
  return done(c->comm->allreduce(s, r, n, dt(t), rop(o)));
}

grex_result_t grex_allreduce_compressed(grex_comm_t* c, const void* s, void* r, size_t n, grex_dtype_t t,
                                        grex_op_t o, grex_compression_t k, int feedback, const void* key,
                                        grex_work_t** w) {
  const char* fn = "grex_allreduce_compressed";
  GREX_C_TRY(check_allreduce(fn, c, s, r, n, t, o));
  if (k != GREX_COMPRESS_NONE && k != GREX_COMPRESS_BF16 && k != GREX_COMPRESS_FP16 && k != GREX_COMPRESS_INT8 &&
      k != GREX_COMPRESS_TOPK)
    return invalid(fn, "compression is not GREX_COMPRESS_NONE, _BF16, _FP16, _INT8 or _TOPK");
  grex::AllreduceOptions opts;
  opts.compression = static_cast<grex::Compression>(k);
  opts.error_feedback = feedback != 0;
  opts.feedback_key = key;
  if (w != nullptr) return started(c->comm->allreduce_async(s, r, n, dt(t), rop(o), opts), w);
  return done(c->comm->allreduce(s, r, n, dt(t), rop(o), opts));
}

grex_result_t grex_allreduce_topk(grex_comm_t* c, const void* s, void* r, size_t n, grex_dtype_t t, grex_op_t o,
                                  double fraction, int feedback, const void* key, grex_work_t** w) {
  const char* fn = "grex_allreduce_topk";
  GREX_C_TRY(check_allreduce(fn, c, s, r, n, t, o));
  if (!(fraction > 0.0 && fraction <= 1.0))
    return invalid(fn, "fraction " + std::to_string(fraction) + " is not in (0, 1]");
  grex::AllreduceOptions opts;
  opts.compression = grex::Compression::kTopK;
  opts.topk_fraction = fraction;
  opts.error_feedback = feedback != 0;
  opts.feedback_key = key;
  if (w != nullptr) return started(c->comm->allreduce_async(s, r, n, dt(t), rop(o), opts), w);
  return done(c->comm->allreduce(s, r, n, dt(t), rop(o), opts));
}

grex_result_t grex_allreduce_deadline(grex_comm_t* c, const void* s, void* r, size_t n, grex_dtype_t t, grex_op_t o,
                                      int64_t deadline_ms, int carry, int* contributed) {
  const char* fn = "grex_allreduce_deadline";
  GREX_C_TRY(check_allreduce(fn, c, s, r, n, t, o));
  if (deadline_ms <= 0) return invalid(fn, "deadline_ms " + std::to_string(deadline_ms) + " is not positive");
  std::vector<int> in;
  grex::AllreduceOptions opts;
  opts.deadline_ms = deadline_ms;
  opts.late = carry != 0 ? grex::LateInput::kCarry : grex::LateInput::kDrop;
  opts.contributors = &in;
  const grex_result_t rc = done(c->comm->allreduce(s, r, n, dt(t), rop(o), opts));
  if (rc == GREX_OK && contributed != nullptr) {
    std::fill(contributed, contributed + c->comm->size(), 0);
    for (int x : in) contributed[x] = 1;
  }
  return rc;
}

grex_result_t grex_clear_feedback(grex_comm_t* c, const void* key) {
  GREX_C_TRY(need_comm("grex_clear_feedback", c));
  return done(c->comm->clear_feedback(key));
}

grex_result_t grex_reduce_scatter(grex_comm_t* c, const void* s, void* r, size_t n, grex_dtype_t t, grex_op_t o) {
  GREX_C_TRY(check_allreduce("grex_reduce_scatter", c, s, r, n, t, o));
  return done(c->comm->reduce_scatter(s, r, n, dt(t), rop(o)));
}

grex_result_t grex_allgather(grex_comm_t* c, const void* s, void* r, size_t n, grex_dtype_t t) {
  GREX_C_TRY(check_blocks("grex_allgather", c, s, r, n, t));
  return done(c->comm->allgather(s, r, n, dt(t)));
}

grex_result_t grex_broadcast(grex_comm_t* c, void* b, size_t n, grex_dtype_t t, int root) {
  GREX_C_TRY(check_broadcast("grex_broadcast", c, b, n, t, root));
  return done(c->comm->broadcast(b, n, dt(t), root));
}

grex_result_t grex_reduce(grex_comm_t* c, const void* s, void* r, size_t n, grex_dtype_t t, grex_op_t o, int root) {
  GREX_C_TRY(check_reduce("grex_reduce", c, s, r, n, t, o, root));
  return done(c->comm->reduce(s, r, n, dt(t), rop(o), root));
}

grex_result_t grex_alltoall(grex_comm_t* c, const void* s, void* r, size_t n, grex_dtype_t t) {
  GREX_C_TRY(check_blocks("grex_alltoall", c, s, r, n, t));
  return done(c->comm->alltoall(s, r, n, dt(t)));
}

grex_result_t grex_alltoallv(grex_comm_t* c, const void* s, const size_t* sc, const size_t* sd, void* r,
                             const size_t* rc, const size_t* rd, grex_dtype_t t) {
  GREX_C_TRY(check_v("grex_alltoallv", c, sc, sd, rc, rd, t));
  const auto n = static_cast<size_t>(c->comm->size());
  return done(c->comm->alltoallv(s, {sc, n}, {sd, n}, r, {rc, n}, {rd, n}, dt(t)));
}

grex_result_t grex_barrier(grex_comm_t* c) {
  GREX_C_TRY(need_comm("grex_barrier", c));
  return done(c->comm->barrier());
}

grex_result_t grex_send(grex_comm_t* c, const void* b, size_t bytes, int peer, uint32_t tag) {
  GREX_C_TRY(need_comm("grex_send", c));
  GREX_C_TRY(need("grex_send", b, bytes, "buf"));
  return done(c->comm->send(b, bytes, peer, tag));
}

grex_result_t grex_recv(grex_comm_t* c, void* b, size_t bytes, int peer, uint32_t tag) {
  GREX_C_TRY(need_comm("grex_recv", c));
  GREX_C_TRY(need("grex_recv", b, bytes, "buf"));
  return done(c->comm->recv(b, bytes, peer, tag));
}

grex_result_t grex_recv_any(grex_comm_t* c, void* b, size_t bytes, uint32_t tag, int* source) {
  GREX_C_TRY(need_comm("grex_recv_any", c));
  GREX_C_TRY(need("grex_recv_any", b, bytes, "buf"));
  if (source == nullptr) return invalid("grex_recv_any", "source is NULL");
  auto r = c->comm->recv_any(b, bytes, tag);
  if (!r) return fail(r.error());
  *source = *r;
  return GREX_OK;
}

grex_result_t grex_iprobe(grex_comm_t* c, uint32_t tag, int source, int* found, int* msg_source, size_t* msg_bytes) {
  GREX_C_TRY(need_comm("grex_iprobe", c));
  if (found == nullptr) return invalid("grex_iprobe", "found is NULL");
  auto r = c->comm->iprobe(tag, source);
  if (!r) return fail(r.error());
  *found = r->has_value() ? 1 : 0;
  if (r->has_value()) {
    if (msg_source != nullptr) *msg_source = (*r)->source;
    if (msg_bytes != nullptr) *msg_bytes = (*r)->bytes;
  }
  return GREX_OK;
}

grex_result_t grex_sendrecv(grex_comm_t* c, const void* sb, size_t sbytes, int dst, void* rb, size_t rbytes, int src,
                            uint32_t tag) {
  GREX_C_TRY(need_comm("grex_sendrecv", c));
  GREX_C_TRY(need("grex_sendrecv", sb, sbytes, "sendbuf"));
  GREX_C_TRY(need("grex_sendrecv", rb, rbytes, "recvbuf"));
  return done(c->comm->sendrecv(sb, sbytes, dst, rb, rbytes, src, tag));
}

grex_result_t grex_allreduce_async(grex_comm_t* c, const void* s, void* r, size_t n, grex_dtype_t t, grex_op_t o,
                                   grex_work_t** w) {
  const char* fn = "grex_allreduce_async";
  GREX_C_TRY(check_work(fn, w));
  GREX_C_TRY(check_allreduce(fn, c, s, r, n, t, o));
  return started(c->comm->allreduce_async(s, r, n, dt(t), rop(o)), w);
}

grex_result_t grex_reduce_scatter_async(grex_comm_t* c, const void* s, void* r, size_t n, grex_dtype_t t,
                                        grex_op_t o, grex_work_t** w) {
  const char* fn = "grex_reduce_scatter_async";
  GREX_C_TRY(check_work(fn, w));
  GREX_C_TRY(check_allreduce(fn, c, s, r, n, t, o));
  return started(c->comm->reduce_scatter_async(s, r, n, dt(t), rop(o)), w);
}

grex_result_t grex_allgather_async(grex_comm_t* c, const void* s, void* r, size_t n, grex_dtype_t t, grex_work_t** w) {
  const char* fn = "grex_allgather_async";
  GREX_C_TRY(check_work(fn, w));
  GREX_C_TRY(check_blocks(fn, c, s, r, n, t));
  return started(c->comm->allgather_async(s, r, n, dt(t)), w);
}

grex_result_t grex_broadcast_async(grex_comm_t* c, void* b, size_t n, grex_dtype_t t, int root, grex_work_t** w) {
  const char* fn = "grex_broadcast_async";
  GREX_C_TRY(check_work(fn, w));
  GREX_C_TRY(check_broadcast(fn, c, b, n, t, root));
  return started(c->comm->broadcast_async(b, n, dt(t), root), w);
}

grex_result_t grex_reduce_async(grex_comm_t* c, const void* s, void* r, size_t n, grex_dtype_t t, grex_op_t o,
                                int root, grex_work_t** w) {
  const char* fn = "grex_reduce_async";
  GREX_C_TRY(check_work(fn, w));
  GREX_C_TRY(check_reduce(fn, c, s, r, n, t, o, root));
  return started(c->comm->reduce_async(s, r, n, dt(t), rop(o), root), w);
}

grex_result_t grex_alltoall_async(grex_comm_t* c, const void* s, void* r, size_t n, grex_dtype_t t, grex_work_t** w) {
  const char* fn = "grex_alltoall_async";
  GREX_C_TRY(check_work(fn, w));
  GREX_C_TRY(check_blocks(fn, c, s, r, n, t));
  return started(c->comm->alltoall_async(s, r, n, dt(t)), w);
}

grex_result_t grex_alltoallv_async(grex_comm_t* c, const void* s, const size_t* sc, const size_t* sd, void* r,
                                   const size_t* rc, const size_t* rd, grex_dtype_t t, grex_work_t** w) {
  const char* fn = "grex_alltoallv_async";
  GREX_C_TRY(check_work(fn, w));
  GREX_C_TRY(check_v(fn, c, sc, sd, rc, rd, t));
  const auto n = static_cast<size_t>(c->comm->size());
  return started(c->comm->alltoallv_async(s, {sc, n}, {sd, n}, r, {rc, n}, {rd, n}, dt(t)), w);
}

grex_result_t grex_barrier_async(grex_comm_t* c, grex_work_t** w) {
  const char* fn = "grex_barrier_async";
  GREX_C_TRY(check_work(fn, w));
  GREX_C_TRY(need_comm(fn, c));
  return started(c->comm->barrier_async(), w);
}

grex_result_t grex_allreduce_stream(grex_comm_t* c, const void* s, void* r, size_t n, grex_dtype_t t, grex_op_t o,
                                    void* stream, grex_work_t** w) {
  GREX_C_TRY(check_allreduce("grex_allreduce_stream", c, s, r, n, t, o));
  return enqueued(c->comm->allreduce(s, r, n, dt(t), rop(o), grex::GpuStream{stream}), w);
}

grex_result_t grex_reduce_scatter_stream(grex_comm_t* c, const void* s, void* r, size_t n, grex_dtype_t t,
                                         grex_op_t o, void* stream, grex_work_t** w) {
  GREX_C_TRY(check_allreduce("grex_reduce_scatter_stream", c, s, r, n, t, o));
  return enqueued(c->comm->reduce_scatter(s, r, n, dt(t), rop(o), grex::GpuStream{stream}), w);
}

grex_result_t grex_allgather_stream(grex_comm_t* c, const void* s, void* r, size_t n, grex_dtype_t t, void* stream,
                                    grex_work_t** w) {
  GREX_C_TRY(check_blocks("grex_allgather_stream", c, s, r, n, t));
  return enqueued(c->comm->allgather(s, r, n, dt(t), grex::GpuStream{stream}), w);
}

grex_result_t grex_broadcast_stream(grex_comm_t* c, void* b, size_t n, grex_dtype_t t, int root, void* stream,
                                    grex_work_t** w) {
  GREX_C_TRY(check_broadcast("grex_broadcast_stream", c, b, n, t, root));
  return enqueued(c->comm->broadcast(b, n, dt(t), root, grex::GpuStream{stream}), w);
}

grex_result_t grex_reduce_stream(grex_comm_t* c, const void* s, void* r, size_t n, grex_dtype_t t, grex_op_t o,
                                 int root, void* stream, grex_work_t** w) {
  GREX_C_TRY(check_reduce("grex_reduce_stream", c, s, r, n, t, o, root));
  return enqueued(c->comm->reduce(s, r, n, dt(t), rop(o), root, grex::GpuStream{stream}), w);
}

grex_result_t grex_alltoall_stream(grex_comm_t* c, const void* s, void* r, size_t n, grex_dtype_t t, void* stream,
                                   grex_work_t** w) {
  GREX_C_TRY(check_blocks("grex_alltoall_stream", c, s, r, n, t));
  return enqueued(c->comm->alltoall(s, r, n, dt(t), grex::GpuStream{stream}), w);
}

grex_result_t grex_alltoallv_stream(grex_comm_t* c, const void* s, const size_t* sc, const size_t* sd, void* r,
                                    const size_t* rc, const size_t* rd, grex_dtype_t t, void* stream,
                                    grex_work_t** w) {
  const char* fn = "grex_alltoallv_stream";
  GREX_C_TRY(check_v(fn, c, sc, sd, rc, rd, t));
  const auto n = static_cast<size_t>(c->comm->size());
  return enqueued(c->comm->alltoallv(s, {sc, n}, {sd, n}, r, {rc, n}, {rd, n}, dt(t), grex::GpuStream{stream}), w);
}

grex_result_t grex_send_stream(grex_comm_t* c, const void* b, size_t bytes, int peer, uint32_t tag, void* stream,
                               grex_work_t** w) {
  GREX_C_TRY(need_comm("grex_send_stream", c));
  GREX_C_TRY(need("grex_send_stream", b, bytes, "buf"));
  return enqueued(c->comm->send(b, bytes, peer, tag, grex::GpuStream{stream}), w);
}

grex_result_t grex_recv_stream(grex_comm_t* c, void* b, size_t bytes, int peer, uint32_t tag, void* stream,
                               grex_work_t** w) {
  GREX_C_TRY(need_comm("grex_recv_stream", c));
  GREX_C_TRY(need("grex_recv_stream", b, bytes, "buf"));
  return enqueued(c->comm->recv(b, bytes, peer, tag, grex::GpuStream{stream}), w);
}

grex_result_t grex_sendrecv_stream(grex_comm_t* c, const void* sb, size_t sbytes, int dst, void* rb, size_t rbytes,
                                   int src, uint32_t tag, void* stream, grex_work_t** w) {
  GREX_C_TRY(need_comm("grex_sendrecv_stream", c));
  GREX_C_TRY(need("grex_sendrecv_stream", sb, sbytes, "sendbuf"));
  GREX_C_TRY(need("grex_sendrecv_stream", rb, rbytes, "recvbuf"));
  return enqueued(c->comm->sendrecv(sb, sbytes, dst, rb, rbytes, src, tag, grex::GpuStream{stream}), w);
}

grex_result_t grex_work_wait(grex_work_t* w) {
  if (w == nullptr || !w->work) return invalid("grex_work_wait", "work is NULL");
  return done(w->work->wait());
}

grex_result_t grex_work_wait_timeout(grex_work_t* w, int64_t timeout_ms) {
  if (w == nullptr || !w->work) return invalid("grex_work_wait_timeout", "work is NULL");
  if (timeout_ms < 0) return invalid("grex_work_wait_timeout", "timeout_ms is negative");
  return done(w->work->wait(timeout_ms));
}

grex_result_t grex_work_test(grex_work_t* w, int* is_done) {
  if (w == nullptr || !w->work || is_done == nullptr) return invalid("grex_work_test", "work or done is NULL");
  *is_done = w->work->test() ? 1 : 0;
  return *is_done ? done(w->work->wait()) : GREX_OK;
}

void grex_work_free(grex_work_t* w) { delete w; }

grex_result_t grex_mem_alloc(grex_comm_t* c, size_t bytes, void** ptr) {
  if (c == nullptr || ptr == nullptr) return invalid("grex_mem_alloc", "comm or ptr is NULL");
  if (bytes == 0) return invalid("grex_mem_alloc", "bytes is 0");
  auto p = c->comm->alloc(bytes);
  if (!p) return fail(p.error());
  *ptr = *p;
  return GREX_OK;
}

grex_result_t grex_mem_free(grex_comm_t* c, void* ptr) {
  if (c == nullptr) return invalid("grex_mem_free", "comm is NULL");
  if (ptr == nullptr) return GREX_OK;
  return done(c->comm->free(ptr));
}

grex_result_t grex_mem_register(grex_comm_t* c, void* ptr, size_t bytes) {
  const char* fn = "grex_mem_register";
  if (c == nullptr || ptr == nullptr) return invalid(fn, "comm or ptr is NULL");
  if (bytes == 0) return invalid(fn, "bytes is 0");
  if (c->registrations.count(ptr) != 0) return invalid(fn, "this ptr is registered already");
  auto mr = c->comm->register_memory(ptr, bytes);
  if (!mr) return fail(mr.error());
  c->registrations[ptr] = *mr;
  return GREX_OK;
}

grex_result_t grex_mem_deregister(grex_comm_t* c, void* ptr) {
  const char* fn = "grex_mem_deregister";
  if (c == nullptr || ptr == nullptr) return invalid(fn, "comm or ptr is NULL");
  auto it = c->registrations.find(ptr);
  if (it == c->registrations.end())
    return fail(Error(Errc::kNotFound, std::string(fn) + ": ptr was not registered with grex_mem_register"));
  grex::MemoryRegion* mr = it->second;
  c->registrations.erase(it);
  return done(c->comm->deregister_memory(mr));
}

}  // extern "C"
