/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file grex.h
 * The C API of grex, for trainers written in C (or any language with a C FFI).
 *
 * Handles are opaque. Every function returns a grex_result_t (GREX_OK = 0);
 * on failure grex_last_error_message() gives this thread's last error in full
 * (cause, rank, peer, device, hint). Calls on one communicator are made from
 * one thread at a time, as with the C++ Communicator; collectives run in issue
 * order, the non-blocking ones on the communicator's worker thread. Every
 * call that uses the device (collectives, grex_mem_alloc/free,
 * grex_mem_register/deregister) runs after the non-blocking collectives
 * issued before it, so each may be called while those are in flight (the
 * memory calls then wait for them).
 *
 * Link with -lgrex (pkg-config --cflags --libs grex).
 */
#ifndef GREX_GREX_H
#define GREX_GREX_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Bumped on every incompatible change of this header. */
#define GREX_ABI_VERSION 1

/** Result codes (the C++ grex::Errc values). */
typedef enum grex_result {
  GREX_OK = 0,
  GREX_ERR_INVALID_ARGUMENT = 1, /**< a NULL handle, a bad size, type or operator */
  GREX_ERR_NOT_SUPPORTED = 2,
  GREX_ERR_TIMEOUT = 3,
  GREX_ERR_PEER_FAILED = 4,
  GREX_ERR_CONNECTION_FAILED = 5,
  GREX_ERR_AUTH_FAILED = 6,
  GREX_ERR_ADDRESS_IN_USE = 7,
  GREX_ERR_NO_MEMORY = 8,
  GREX_ERR_SYSTEM = 9,
  GREX_ERR_PROTOCOL = 10,
  GREX_ERR_MISMATCH = 11, /**< ranks disagree (count, type, operator) */
  GREX_ERR_NOT_FOUND = 12,
  GREX_ERR_INTERNAL = 13
} grex_result_t;

/** Element types (the C++ grex::DataType values). */
typedef enum grex_dtype {
  GREX_FLOAT32 = 0,
  GREX_FLOAT64 = 1,
  GREX_INT32 = 2,
  GREX_INT64 = 3,
  GREX_UINT8 = 4,
  GREX_FLOAT16 = 5,
  GREX_BFLOAT16 = 6
} grex_dtype_t;

/** Reduction operators (the C++ grex::ReduceOp values); AVG divides the sum by the ranks. */
typedef enum grex_op { GREX_SUM = 0, GREX_PROD = 1, GREX_MIN = 2, GREX_MAX = 3, GREX_AVG = 4 } grex_op_t;
/** How an allreduce's float32 vector travels (grex::Compression). */
typedef enum grex_compression {
  GREX_COMPRESS_NONE = 0,
  GREX_COMPRESS_BF16 = 1,
  GREX_COMPRESS_FP16 = 2,
  GREX_COMPRESS_INT8 = 3, /* int8 with a float32 scale per block of 256 values */
  GREX_COMPRESS_TOPK = 4  /* each rank's largest 1 % of values, summed sparsely */
} grex_compression_t;

typedef struct grex_comm grex_comm_t; /**< a communicator */
typedef struct grex_work grex_work_t; /**< a non-blocking collective in flight */

/** GREX_ABI_VERSION of the library actually loaded. */
int grex_abi_version(void);
/** The library's version, e.g. "0.1.0". */
const char* grex_version(void);
/** A short constant name for a result code ("timeout"); "unknown" for others. */
const char* grex_strerror(grex_result_t result);
/** This thread's last error in full; "" when none. Valid until the thread's next failing call. */
const char* grex_last_error_message(void);

/**
 * Joins the job described by the environment: grex-run (GREX_RANK ...),
 * torchrun (RANK WORLD_SIZE MASTER_ADDR MASTER_PORT), Open MPI
 * (OMPI_COMM_WORLD_*) or Slurm (SLURM_PROCID ...); GREX_BACKEND and the other
 * GREX_* variables apply. Blocks until every rank joined.
 */
grex_result_t grex_comm_init_env(grex_comm_t** comm);
/**
 * Joins a job given explicitly: this rank of world_size ranks meets the others
 * at the store at store_addr ("host:port"); rank 0 hosts that store. job_token
 * is the job's shared secret (the same on every rank).
 */
grex_result_t grex_comm_init_rank(int rank, int world_size, const char* store_addr, const char* job_token,
                                  grex_comm_t** comm);
/** Leaves the job and frees the communicator (NULL is accepted). */
grex_result_t grex_comm_destroy(grex_comm_t* comm);
grex_result_t grex_comm_rank(const grex_comm_t* comm, int* rank);
grex_result_t grex_comm_size(const grex_comm_t* comm, int* size);

/* Collectives. Counts are elements. sendbuf == recvbuf runs in place where
 * the operation allows it (allreduce, reduce); broadcast is always in place. */
grex_result_t grex_allreduce(grex_comm_t* comm, const void* sendbuf, void* recvbuf, size_t count, grex_dtype_t dtype,
                             grex_op_t op);
/** recvcount elements per rank; sendbuf holds size * recvcount. */
grex_result_t grex_reduce_scatter(grex_comm_t* comm, const void* sendbuf, void* recvbuf, size_t recvcount,
                                  grex_dtype_t dtype, grex_op_t op);
/** count elements from each rank; recvbuf holds size * count, in rank order. */
grex_result_t grex_allgather(grex_comm_t* comm, const void* sendbuf, void* recvbuf, size_t count, grex_dtype_t dtype);
grex_result_t grex_broadcast(grex_comm_t* comm, void* buf, size_t count, grex_dtype_t dtype, int root);
/** recvbuf is written on root only (other ranks may pass NULL). */
grex_result_t grex_reduce(grex_comm_t* comm, const void* sendbuf, void* recvbuf, size_t count, grex_dtype_t dtype,
                          grex_op_t op, int root);
/** count elements to and from each peer; both buffers hold size * count. */
grex_result_t grex_alltoall(grex_comm_t* comm, const void* sendbuf, void* recvbuf, size_t count, grex_dtype_t dtype);
/** Uneven alltoall (MPI_Alltoallv): sendcounts[j] elements from sendbuf + sdispls[j] go to rank j;
 *  recvcounts[i] elements from rank i land at recvbuf + rdispls[i]. Elements, one entry per rank;
 *  a pair whose counts disagree fails with GREX_ERR_MISMATCH. sendbuf != recvbuf. */
grex_result_t grex_alltoallv(grex_comm_t* comm, const void* sendbuf, const size_t* sendcounts, const size_t* sdispls,
                             void* recvbuf, const size_t* recvcounts, const size_t* rdispls, grex_dtype_t dtype);
grex_result_t grex_barrier(grex_comm_t* comm);
/** Blocking point-to-point of `bytes` bytes, matched by (peer, tag). */
grex_result_t grex_send(grex_comm_t* comm, const void* buf, size_t bytes, int peer, uint32_t tag);
grex_result_t grex_recv(grex_comm_t* comm, void* buf, size_t bytes, int peer, uint32_t tag);
/** Receives exactly `bytes` bytes with `tag` from whichever rank's message was
 * noticed first (MPI_ANY_SOURCE); *source (required) gets that rank. Needs
 * GREX_P2P_ANY_SOURCE=1 on every rank (each send then carries a 16-byte
 * notice); without it GREX_ERR_INVALID_ARGUMENT. */
grex_result_t grex_recv_any(grex_comm_t* comm, void* buf, size_t bytes, uint32_t tag, int* source);
/** Whether a message with `tag` from `source` (-1: any rank) waits to be
 * received (MPI_Iprobe): *found (required) is 0 or 1; when 1, *msg_source and
 * *msg_bytes (each may be NULL) describe it, and the next grex_recv from that
 * rank with that tag gets it. Polls once, never waits. Needs GREX_P2P_ANY_SOURCE=1. */
grex_result_t grex_iprobe(grex_comm_t* comm, uint32_t tag, int source, int* found, int* msg_source, size_t* msg_bytes);
/** Sends to dst while receiving exactly recvbytes from src (MPI_Sendrecv): a
 * ring of ranks, each sending to the next, never deadlocks. */
grex_result_t grex_sendrecv(grex_comm_t* comm, const void* sendbuf, size_t sendbytes, int dst, void* recvbuf,
                            size_t recvbytes, int src, uint32_t tag);

/* Non-blocking collectives: *work is set on GREX_OK; the buffers belong to the
 * collective until grex_work_wait returned or grex_work_test set *done. Free
 * every work with grex_work_free. */
grex_result_t grex_allreduce_async(grex_comm_t* comm, const void* sendbuf, void* recvbuf, size_t count,
                                   grex_dtype_t dtype, grex_op_t op, grex_work_t** work);
/* Allreduce with compression (float32, GREX_SUM or GREX_AVG): the vector
 * travels the ring as 16-bit floats, accumulated in float32 at every hop.
 * error_feedback != 0 keeps this rank's rounding error per feedback_key (NULL:
 * recvbuf) and adds it to its next input; grex_clear_feedback drops it. work
 * may be NULL (blocking) or receive a work handle (non-blocking). */
grex_result_t grex_allreduce_compressed(grex_comm_t* comm, const void* sendbuf, void* recvbuf, size_t count,
                                        grex_dtype_t dtype, grex_op_t op, grex_compression_t compression,
                                        int error_feedback, const void* feedback_key, grex_work_t** work);
/* Top-k allreduce (float32, GREX_SUM or GREX_AVG): each rank sends its largest
 * `fraction` of values (0 < fraction <= 1; 1 gives the exact sum) as (index,
 * value) pairs, summed sparsely; otherwise as grex_allreduce_compressed with
 * GREX_COMPRESS_TOPK, whose fraction is 1 %. Use it with error_feedback. */
grex_result_t grex_allreduce_topk(grex_comm_t* comm, const void* sendbuf, void* recvbuf, size_t count,
                                  grex_dtype_t dtype, grex_op_t op, double fraction, int error_feedback,
                                  const void* feedback_key, grex_work_t** work);
/** Drops the error-feedback residual of key (NULL: every residual). */
grex_result_t grex_clear_feedback(grex_comm_t* comm, const void* key);
/* Deadline allreduce (blocking): waits at most deadline_ms (> 0, from this
 * rank's entry) for the other ranks. The result is the reduction over the ranks
 * in time (GREX_AVG divides by their count), the same on every rank; a late
 * rank gets it when it enters. carry != 0 keeps a late rank's vector (per
 * recvbuf; grex_clear_feedback drops it) and adds it to its next deadline call
 * (GREX_SUM or GREX_AVG only); 0 drops it. contributed may be NULL or an array
 * of the communicator's size: 1 for each rank in time, 0 for the others. */
grex_result_t grex_allreduce_deadline(grex_comm_t* comm, const void* sendbuf, void* recvbuf, size_t count,
                                      grex_dtype_t dtype, grex_op_t op, int64_t deadline_ms, int carry,
                                      int* contributed);
grex_result_t grex_reduce_scatter_async(grex_comm_t* comm, const void* sendbuf, void* recvbuf, size_t recvcount,
                                        grex_dtype_t dtype, grex_op_t op, grex_work_t** work);
grex_result_t grex_allgather_async(grex_comm_t* comm, const void* sendbuf, void* recvbuf, size_t count,
                                   grex_dtype_t dtype, grex_work_t** work);
grex_result_t grex_broadcast_async(grex_comm_t* comm, void* buf, size_t count, grex_dtype_t dtype, int root,
                                   grex_work_t** work);
grex_result_t grex_reduce_async(grex_comm_t* comm, const void* sendbuf, void* recvbuf, size_t count,
                                grex_dtype_t dtype, grex_op_t op, int root, grex_work_t** work);
grex_result_t grex_alltoall_async(grex_comm_t* comm, const void* sendbuf, void* recvbuf, size_t count,
                                  grex_dtype_t dtype, grex_work_t** work);
grex_result_t grex_alltoallv_async(grex_comm_t* comm, const void* sendbuf, const size_t* sendcounts,
                                   const size_t* sdispls, void* recvbuf, const size_t* recvcounts,
                                   const size_t* rdispls, grex_dtype_t dtype, grex_work_t** work);
grex_result_t grex_barrier_async(grex_comm_t* comm, grex_work_t** work);
/* Stream-ordered collectives on GPU buffers (CUDA device memory; host memory
 * works too), as NCCL's: `stream` is a CUstream or cudaStream_t (NULL: the
 * legacy default stream). Each returns once its work is enqueued: the
 * collective starts after the work already on the stream, and work enqueued
 * after it sees the result. *work (if work is not NULL) completes once the
 * result is in place; free it with grex_work_free. Calls run in issue order
 * with every other collective. Without CUDA: GREX_ERR_NOT_FOUND. */
grex_result_t grex_allreduce_stream(grex_comm_t* comm, const void* sendbuf, void* recvbuf, size_t count,
                                    grex_dtype_t dtype, grex_op_t op, void* stream, grex_work_t** work);
grex_result_t grex_reduce_scatter_stream(grex_comm_t* comm, const void* sendbuf, void* recvbuf, size_t recvcount,
                                         grex_dtype_t dtype, grex_op_t op, void* stream, grex_work_t** work);
grex_result_t grex_allgather_stream(grex_comm_t* comm, const void* sendbuf, void* recvbuf, size_t count,
                                    grex_dtype_t dtype, void* stream, grex_work_t** work);
grex_result_t grex_broadcast_stream(grex_comm_t* comm, void* buf, size_t count, grex_dtype_t dtype, int root,
                                    void* stream, grex_work_t** work);
grex_result_t grex_reduce_stream(grex_comm_t* comm, const void* sendbuf, void* recvbuf, size_t count,
                                 grex_dtype_t dtype, grex_op_t op, int root, void* stream, grex_work_t** work);
grex_result_t grex_alltoall_stream(grex_comm_t* comm, const void* sendbuf, void* recvbuf, size_t count,
                                   grex_dtype_t dtype, void* stream, grex_work_t** work);
grex_result_t grex_alltoallv_stream(grex_comm_t* comm, const void* sendbuf, const size_t* sendcounts,
                                    const size_t* sdispls, void* recvbuf, const size_t* recvcounts,
                                    const size_t* rdispls, grex_dtype_t dtype, void* stream, grex_work_t** work);
/* Point-to-point on a stream (staged through pinned host memory); each runs
 * in issue order with the collectives, so pair them as blocking calls. */
grex_result_t grex_send_stream(grex_comm_t* comm, const void* buf, size_t bytes, int peer, uint32_t tag,
                               void* stream, grex_work_t** work);
grex_result_t grex_recv_stream(grex_comm_t* comm, void* buf, size_t bytes, int peer, uint32_t tag, void* stream,
                               grex_work_t** work);
grex_result_t grex_sendrecv_stream(grex_comm_t* comm, const void* sendbuf, size_t sendbytes, int dst,
                                   void* recvbuf, size_t recvbytes, int src, uint32_t tag, void* stream,
                                   grex_work_t** work);

/** Blocks until the collective finished; its result. */
grex_result_t grex_work_wait(grex_work_t* work);
/** Blocks up to timeout_ms; GREX_ERR_TIMEOUT when it has not finished (it goes on). */
grex_result_t grex_work_wait_timeout(grex_work_t* work, int64_t timeout_ms);
/** *done = 1 once finished (then returns its result), else 0 and GREX_OK. */
grex_result_t grex_work_test(grex_work_t* work, int* done);
/** Frees the handle (NULL is accepted); a collective still running goes on. */
void grex_work_free(grex_work_t* work);

/* Memory. */
/** Memory the backend serves best (shm: shared with peers, so no extra copy); free with grex_mem_free. */
grex_result_t grex_mem_alloc(grex_comm_t* comm, size_t bytes, void** ptr);
grex_result_t grex_mem_free(grex_comm_t* comm, void* ptr);
/** Registers [ptr, ptr+bytes) once (GPU pointers too), so collectives on it skip registration. */
grex_result_t grex_mem_register(grex_comm_t* comm, void* ptr, size_t bytes);
/** Drops a registration made by grex_mem_register at this ptr. */
grex_result_t grex_mem_deregister(grex_comm_t* comm, void* ptr);

#ifdef __cplusplus
}
#endif

#endif /* GREX_GREX_H */
