// SPDX-License-Identifier: Apache-2.0
// The C API without a job: every function given NULL handles or bad
// arguments returns a code (never crashes) and leaves a message.
#include <gtest/gtest.h>
#include <grex/grex.h>

#include <unistd.h>

#include <string>

namespace {

std::string last() { return grex_last_error_message(); }

TEST(CApi, VersionsAndNames) {
  EXPECT_EQ(grex_abi_version(), GREX_ABI_VERSION);
  EXPECT_STRNE(grex_version(), "");
  EXPECT_STREQ(grex_strerror(GREX_OK), "ok");
  EXPECT_STREQ(grex_strerror(GREX_ERR_TIMEOUT), "timeout");
  EXPECT_STREQ(grex_strerror(GREX_ERR_MISMATCH), "mismatch");
  EXPECT_STREQ(grex_strerror(static_cast<grex_result_t>(99)), "unknown");
  EXPECT_STREQ(grex_strerror(static_cast<grex_result_t>(-1)), "unknown");
}

TEST(CApi, NullHandlesReturnInvalidArgument) {
  int v = 0;
  float f[4] = {};
  grex_work_t* w = nullptr;
  void* p = nullptr;
  const grex_result_t kInvalid = GREX_ERR_INVALID_ARGUMENT;
  EXPECT_EQ(grex_comm_init_env(nullptr), kInvalid);
  EXPECT_EQ(grex_comm_rank(nullptr, &v), kInvalid);
  EXPECT_EQ(grex_comm_size(nullptr, &v), kInvalid);
  EXPECT_EQ(grex_allreduce(nullptr, f, f, 4, GREX_FLOAT32, GREX_SUM), kInvalid);
  EXPECT_NE(last().find("grex_allreduce: comm is NULL"), std::string::npos) << last();
  EXPECT_EQ(grex_reduce_scatter(nullptr, f, f, 1, GREX_FLOAT32, GREX_SUM), kInvalid);
  EXPECT_EQ(grex_allgather(nullptr, f, f, 1, GREX_FLOAT32), kInvalid);
  EXPECT_EQ(grex_broadcast(nullptr, f, 4, GREX_FLOAT32, 0), kInvalid);
  EXPECT_EQ(grex_reduce(nullptr, f, f, 4, GREX_FLOAT32, GREX_SUM, 0), kInvalid);
  EXPECT_EQ(grex_alltoall(nullptr, f, f, 1, GREX_FLOAT32), kInvalid);
  const size_t one[1] = {1};
  EXPECT_EQ(grex_alltoallv(nullptr, f, one, one, f, one, one, GREX_FLOAT32), kInvalid);
  EXPECT_EQ(grex_barrier(nullptr), kInvalid);
  EXPECT_EQ(grex_send(nullptr, f, 4, 1, 0), kInvalid);
  EXPECT_EQ(grex_recv(nullptr, f, 4, 1, 0), kInvalid);
  EXPECT_EQ(grex_allreduce_async(nullptr, f, f, 4, GREX_FLOAT32, GREX_SUM, &w), kInvalid);
  EXPECT_EQ(grex_reduce_scatter_async(nullptr, f, f, 1, GREX_FLOAT32, GREX_SUM, &w), kInvalid);
  EXPECT_EQ(grex_allgather_async(nullptr, f, f, 1, GREX_FLOAT32, &w), kInvalid);
  EXPECT_EQ(grex_broadcast_async(nullptr, f, 4, GREX_FLOAT32, 0, &w), kInvalid);
  EXPECT_EQ(grex_reduce_async(nullptr, f, f, 4, GREX_FLOAT32, GREX_SUM, 0, &w), kInvalid);
  EXPECT_EQ(grex_alltoall_async(nullptr, f, f, 1, GREX_FLOAT32, &w), kInvalid);
  EXPECT_EQ(grex_alltoallv_async(nullptr, f, one, one, f, one, one, GREX_FLOAT32, &w), kInvalid);
  EXPECT_EQ(grex_barrier_async(nullptr, &w), kInvalid);
  EXPECT_EQ(grex_allreduce_stream(nullptr, f, f, 4, GREX_FLOAT32, GREX_SUM, nullptr, &w), kInvalid);
  EXPECT_NE(last().find("grex_allreduce_stream: comm is NULL"), std::string::npos) << last();
  EXPECT_EQ(grex_reduce_scatter_stream(nullptr, f, f, 1, GREX_FLOAT32, GREX_SUM, nullptr, &w), kInvalid);
  EXPECT_EQ(grex_allgather_stream(nullptr, f, f, 1, GREX_FLOAT32, nullptr, &w), kInvalid);
  EXPECT_EQ(grex_broadcast_stream(nullptr, f, 4, GREX_FLOAT32, 0, nullptr, &w), kInvalid);
  EXPECT_EQ(grex_reduce_stream(nullptr, f, f, 4, GREX_FLOAT32, GREX_SUM, 0, nullptr, &w), kInvalid);
  EXPECT_EQ(grex_alltoall_stream(nullptr, f, f, 1, GREX_FLOAT32, nullptr, &w), kInvalid);
  EXPECT_EQ(grex_alltoallv_stream(nullptr, f, one, one, f, one, one, GREX_FLOAT32, nullptr, &w), kInvalid);
  EXPECT_EQ(grex_send_stream(nullptr, f, 4, 1, 0, nullptr, &w), kInvalid);
  EXPECT_NE(last().find("grex_send_stream: comm is NULL"), std::string::npos) << last();
  EXPECT_EQ(grex_recv_stream(nullptr, f, 4, 1, 0, nullptr, &w), kInvalid);
  EXPECT_EQ(grex_sendrecv_stream(nullptr, f, 4, 1, f, 4, 1, 0, nullptr, &w), kInvalid);
  int from = 0, found = 0;
  EXPECT_EQ(grex_recv_any(nullptr, f, 4, 0, &from), kInvalid);
  EXPECT_NE(last().find("grex_recv_any: comm is NULL"), std::string::npos) << last();
  EXPECT_EQ(grex_iprobe(nullptr, 0, -1, &found, nullptr, nullptr), kInvalid);
  EXPECT_EQ(grex_sendrecv(nullptr, f, 4, 1, f, 4, 1, 0), kInvalid);
  EXPECT_NE(last().find("grex_sendrecv: comm is NULL"), std::string::npos) << last();
  EXPECT_EQ(w, nullptr) << "no work handle on failure";
  EXPECT_EQ(grex_work_wait(nullptr), kInvalid);
  EXPECT_EQ(grex_work_wait_timeout(nullptr, 10), kInvalid);
  EXPECT_EQ(grex_work_test(nullptr, &v), kInvalid);
  grex_work_free(nullptr);
  EXPECT_EQ(grex_mem_alloc(nullptr, 64, &p), kInvalid);
  EXPECT_EQ(grex_mem_free(nullptr, p), kInvalid);
  EXPECT_EQ(grex_mem_register(nullptr, f, sizeof f), kInvalid);
  EXPECT_EQ(grex_mem_deregister(nullptr, f), kInvalid);
  EXPECT_EQ(grex_comm_destroy(nullptr), GREX_OK);
}

TEST(CApi, InitRankChecksItsArguments) {
  grex_comm_t* c = reinterpret_cast<grex_comm_t*>(0x1);
  EXPECT_EQ(grex_comm_init_rank(0, 1, nullptr, "t", &c), GREX_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(c, nullptr) << "*comm is cleared on failure";
  EXPECT_EQ(grex_comm_init_rank(0, 1, "localhost", "t", &c), GREX_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("is not host:port"), std::string::npos) << last();
  EXPECT_EQ(grex_comm_init_rank(0, 1, "localhost:99999", "t", &c), GREX_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(grex_comm_init_rank(0, 1, ":29500", "t", &c), GREX_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(grex_comm_init_rank(2, 2, "127.0.0.1:29500", "t", &c), GREX_ERR_INVALID_ARGUMENT);  // rank >= world
  EXPECT_FALSE(last().empty());
  EXPECT_EQ(grex_comm_init_rank(0, 1, "127.0.0.1:29500", "tok", nullptr), GREX_ERR_INVALID_ARGUMENT);
}

TEST(CApi, OneRankJobEndToEnd) {
  // A job of one: rank 0 hosts its own store on a free port... which it must
  // name, so pick one from the ephemeral range and retry on a clash.
  grex_comm_t* c = nullptr;
  grex_result_t rc = GREX_ERR_ADDRESS_IN_USE;
  for (int port = 41000 + ::getpid() % 1000, tries = 0; rc == GREX_ERR_ADDRESS_IN_USE && tries < 20; ++port, ++tries)
    rc = grex_comm_init_rank(0, 1, ("127.0.0.1:" + std::to_string(port)).c_str(), "capi-one", &c);
  ASSERT_EQ(rc, GREX_OK) << last();
  int rank = -1, size = -1;
  EXPECT_EQ(grex_comm_rank(c, &rank), GREX_OK);
  EXPECT_EQ(grex_comm_size(c, &size), GREX_OK);
  EXPECT_EQ(rank, 0);
  EXPECT_EQ(size, 1);
  double d[3] = {1, 2, 3};
  EXPECT_EQ(grex_allreduce(c, d, d, 3, GREX_FLOAT64, GREX_SUM), GREX_OK) << last();
  EXPECT_EQ(d[2], 3.0);
  grex_work_t* w = nullptr;
  EXPECT_EQ(grex_allreduce_async(c, d, d, 3, GREX_FLOAT64, GREX_AVG, &w), GREX_OK);
  EXPECT_EQ(grex_work_wait_timeout(w, -1), GREX_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(grex_work_wait(w), GREX_OK);
  grex_work_free(w);
  size_t cnt[1] = {2}, at[1] = {1};
  double v_out[3] = {0, 0, 0};
  EXPECT_EQ(grex_alltoallv(c, d, cnt, at, v_out, cnt, at, GREX_FLOAT64), GREX_OK) << last();
  EXPECT_EQ(v_out[0], 0.0);
  EXPECT_EQ(v_out[1], d[1]);
  EXPECT_EQ(grex_alltoallv(c, d, nullptr, at, v_out, cnt, at, GREX_FLOAT64), GREX_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("sendcounts"), std::string::npos) << last();
  EXPECT_EQ(grex_send(c, d, sizeof d, 0, 1), GREX_ERR_INVALID_ARGUMENT) << "no send to self: " << last();
  // The stream forms: without a CUDA driver, GREX_ERR_NOT_FOUND and nothing
  // enqueued (tests/gpu/collectives_gpu_check covers them on a GPU).
  if (::access("/dev/nvidiactl", F_OK) != 0) {
    grex_work_t* sw = nullptr;
    EXPECT_EQ(grex_allreduce_stream(c, d, d, 3, GREX_FLOAT64, GREX_SUM, nullptr, &sw), GREX_ERR_NOT_FOUND) << last();
    EXPECT_NE(last().find("no CUDA driver"), std::string::npos) << last();
    EXPECT_EQ(sw, nullptr);
    EXPECT_EQ(grex_broadcast_stream(c, d, 3, GREX_FLOAT64, 0, nullptr, nullptr), GREX_ERR_NOT_FOUND) << last();
  }
  EXPECT_EQ(grex_allreduce(c, d, d, 3, GREX_FLOAT64, GREX_SUM), GREX_OK) << last();
  EXPECT_EQ(grex_comm_destroy(c), GREX_OK);
}

}  // namespace
