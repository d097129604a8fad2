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

}  // namespace grex
