// SPDX-License-Identifier: Apache-2.0
// Collective jobs (collectives_api.cc) other files of this layer run: the
// argument checks, then a job that runs the collective when called (on the
// worker, or inline).
#pragma once

#include "collectives/comm_impl.h"

namespace grex {

Result<detail::JobFn> barrier_job(Communicator::Impl& c);
Result<detail::JobFn> allreduce_job(Communicator::Impl& c, const void* sendbuf, void* recvbuf, size_t count,
                                    DataType type, ReduceOp op);
Result<detail::JobFn> allgather_job(Communicator::Impl& c, const void* sendbuf, void* recvbuf, size_t count,
                                    DataType type);
/// Point-to-point (communicator.cc): the blocking send and recv, as jobs.
Result<detail::JobFn> send_job(Communicator::Impl& c, const void* buf, size_t bytes, int peer, uint32_t tag);
Result<detail::JobFn> recv_job(Communicator::Impl& c, void* buf, size_t bytes, int peer, uint32_t tag);
/// The background poll of the deadline allreduce's results for late ranks
/// (WorkQueue::set_background): true while some are still on their way.
bool poll_deliveries(Communicator::Impl& c);
Result<detail::JobFn> deadline_allreduce_job(Communicator::Impl& c, const void* sendbuf, void* recvbuf, size_t count,
                                             DataType type, ReduceOp op, const AllreduceOptions& o);
Result<detail::JobFn> recv_any_job(Communicator::Impl& c, void* buf, size_t bytes, uint32_t tag, int* source);
Result<detail::JobFn> iprobe_job(Communicator::Impl& c, uint32_t tag, int source, std::optional<Probe>* out);
Result<detail::JobFn> sendrecv_job(Communicator::Impl& c, const void* sendbuf, size_t sendbytes, int dst,
                                   void* recvbuf, size_t recvbytes, int src, uint32_t tag);

}  // namespace grex
