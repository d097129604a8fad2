// SPDX-License-Identifier: Apache-2.0
// bootstrap_from_env() for grex-run, torchrun, Open MPI and Slurm, store addresses, and validate().
#include <grex/bootstrap.h>

#include <gtest/gtest.h>

#include <cstdlib>

namespace grex {
namespace {

constexpr const char* kAllVars[] = {
    "GREX_RANK", "GREX_WORLD_SIZE", "GREX_LOCAL_RANK", "GREX_LOCAL_SIZE",
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
    "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE",
    "GREX_STORE_ADDR", "MASTER_ADDR", "MASTER_PORT", "GREX_STORE_EXTERNAL", "GREX_JOB_TOKEN",
    "GREX_BOOTSTRAP_TIMEOUT_MS",
};

class EnvTest : public ::testing::Test {
 protected:
  void SetUp() override { clear(); }
  void TearDown() override { clear(); }
  static void clear() {
    for (const char* v : kAllVars) unsetenv(v);
  }
  static void set(const char* name, const char* value) { setenv(name, value, 1); }

  static BootstrapConfig read_ok() {
    auto cfg = bootstrap_from_env();
    EXPECT_TRUE(cfg.ok()) << (cfg.ok() ? "" : cfg.error().message());
    return cfg.ok() ? *cfg : BootstrapConfig{};
  }
  // Expects kInvalidArgument whose message names `var`.
  static void expect_invalid(const char* var) {
    auto cfg = bootstrap_from_env();
    ASSERT_FALSE(cfg.ok()) << "expected an error naming " << var;
    EXPECT_EQ(cfg.error().code(), Errc::kInvalidArgument);
    EXPECT_NE(cfg.error().message().find(var), std::string::npos) << cfg.error().message();
  }
};

TEST_F(EnvTest, NothingFound) {
  auto cfg = bootstrap_from_env();
  ASSERT_FALSE(cfg.ok());
  EXPECT_EQ(cfg.error().code(), Errc::kNotFound);
  EXPECT_NE(cfg.error().message().find("no launcher environment found (set GREX_RANK/GREX_WORLD_SIZE, or run under "
                                       "grex-run, torchrun, mpirun or srun)"),
            std::string::npos) << cfg.error().message();
}

TEST_F(EnvTest, Torchrun) {
  set("RANK", "3");
  set("WORLD_SIZE", "8");
  set("LOCAL_RANK", "1");
  set("LOCAL_WORLD_SIZE", "2");
  set("MASTER_ADDR", "10.1.2.3");
  set("MASTER_PORT", "29600");
  set("GREX_JOB_TOKEN", "tok");
  BootstrapConfig c = read_ok();
  EXPECT_EQ(c.launcher, "torchrun");
  EXPECT_EQ(c.rank, 3);
  EXPECT_EQ(c.world_size, 8);
  EXPECT_EQ(c.local_rank, 1);
  EXPECT_EQ(c.local_size, 2);
  EXPECT_EQ(c.store_host, "10.1.2.3");
  EXPECT_EQ(c.store_port, 29600);
  EXPECT_TRUE(c.host_store);
  EXPECT_EQ(c.job_token, "tok");
  EXPECT_EQ(c.timeout_ms, 60'000);
}

TEST_F(EnvTest, OpenMpi) {
  set("OMPI_COMM_WORLD_RANK", "5");
  set("OMPI_COMM_WORLD_SIZE", "6");
  set("OMPI_COMM_WORLD_LOCAL_RANK", "2");
  set("OMPI_COMM_WORLD_LOCAL_SIZE", "3");
  BootstrapConfig c = read_ok();
  EXPECT_EQ(c.launcher, "openmpi");
  EXPECT_EQ(c.rank, 5);
  EXPECT_EQ(c.world_size, 6);
  EXPECT_EQ(c.local_rank, 2);
  EXPECT_EQ(c.local_size, 3);
  EXPECT_EQ(c.store_host, "127.0.0.1");  // nothing else given
  EXPECT_EQ(c.store_port, 29500);
}

TEST_F(EnvTest, Slurm) {
  set("SLURM_PROCID", "7");
  set("SLURM_NTASKS", "16");
  set("SLURM_LOCALID", "3");
  set("SLURM_TASKS_PER_NODE", "4");
  BootstrapConfig c = read_ok();
  EXPECT_EQ(c.launcher, "slurm");
  EXPECT_EQ(c.rank, 7);
  EXPECT_EQ(c.world_size, 16);
  EXPECT_EQ(c.local_rank, 3);
  EXPECT_EQ(c.local_size, 4);

  set("SLURM_TASKS_PER_NODE", "4(x3),2");  // uneven: says nothing about this node
  EXPECT_EQ(read_ok().local_size, -1);
  set("SLURM_NTASKS_PER_NODE", "8");  // preferred when present
  EXPECT_EQ(read_ok().local_size, 8);
  set("SLURM_NTASKS_PER_NODE", "eight");
  expect_invalid("SLURM_NTASKS_PER_NODE");
}

TEST_F(EnvTest, GrexRunWinsOverOtherLaunchers) {
  set("GREX_RANK", "1");
  set("GREX_WORLD_SIZE", "2");
  set("GREX_LOCAL_RANK", "1");
  set("GREX_LOCAL_SIZE", "2");
  set("RANK", "9");
  set("WORLD_SIZE", "10");
  set("SLURM_PROCID", "0");
  set("SLURM_NTASKS", "1");
  set("GREX_STORE_EXTERNAL", "1");
  set("GREX_BOOTSTRAP_TIMEOUT_MS", "1500");
  BootstrapConfig c = read_ok();
  EXPECT_EQ(c.launcher, "grex-run");
  EXPECT_EQ(c.rank, 1);
  EXPECT_EQ(c.world_size, 2);
  EXPECT_EQ(c.local_rank, 1);
  EXPECT_EQ(c.local_size, 2);
  EXPECT_FALSE(c.host_store);
  EXPECT_EQ(c.timeout_ms, 1500);

  unsetenv("GREX_RANK");
  unsetenv("GREX_WORLD_SIZE");
  EXPECT_EQ(read_ok().launcher, "torchrun");  // torchrun before Slurm
}

TEST_F(EnvTest, StoreAddress) {
  set("GREX_RANK", "0");
  set("GREX_WORLD_SIZE", "1");
  set("MASTER_ADDR", "master-node");
  EXPECT_EQ(read_ok().store_host, "master-node");
  EXPECT_EQ(read_ok().store_port, 29500);

  set("GREX_STORE_ADDR", "store-host:1234");  // wins over MASTER_ADDR
  BootstrapConfig c = read_ok();
  EXPECT_EQ(c.store_host, "store-host");
  EXPECT_EQ(c.store_port, 1234);

  set("GREX_STORE_ADDR", "[fe80::1]:4321");
  c = read_ok();
  EXPECT_EQ(c.store_host, "fe80::1");
  EXPECT_EQ(c.store_port, 4321);

  for (const char* bad : {"no-port", "host:", ":80", "host:99999", "host:0", "host:12ab", "fe80::1:80", "[]:80"}) {
    set("GREX_STORE_ADDR", bad);
    SCOPED_TRACE(bad);
    expect_invalid("GREX_STORE_ADDR");
  }
  unsetenv("GREX_STORE_ADDR");
  set("MASTER_PORT", "http");
  expect_invalid("MASTER_PORT");
}

TEST_F(EnvTest, MalformedValuesNameTheVariable) {
  set("RANK", "abc");
  set("WORLD_SIZE", "4");
  expect_invalid("RANK");
  set("RANK", "1");
  set("WORLD_SIZE", "0");
  expect_invalid("WORLD_SIZE");
  set("WORLD_SIZE", "4x");
  expect_invalid("WORLD_SIZE");
  set("WORLD_SIZE", "4");
  set("LOCAL_RANK", "");
  expect_invalid("LOCAL_RANK");
  unsetenv("LOCAL_RANK");
  set("GREX_STORE_EXTERNAL", "maybe");
  expect_invalid("GREX_STORE_EXTERNAL");
  unsetenv("GREX_STORE_EXTERNAL");
  set("GREX_BOOTSTRAP_TIMEOUT_MS", "-5");
  expect_invalid("GREX_BOOTSTRAP_TIMEOUT_MS");
  unsetenv("GREX_BOOTSTRAP_TIMEOUT_MS");
  unsetenv("WORLD_SIZE");
  expect_invalid("WORLD_SIZE");  // RANK without WORLD_SIZE
  clear();
  set("GREX_WORLD_SIZE", "2");
  expect_invalid("GREX_RANK");
}

BootstrapConfig good_config() {
  BootstrapConfig c;
  c.rank = 0;
  c.world_size = 4;
  c.job_token = "tok";
  c.launcher = "torchrun";
  return c;
}

TEST(ValidateTest, AcceptsAGoodConfig) { EXPECT_TRUE(validate(good_config()).ok()); }

TEST(ValidateTest, RejectsBadFieldsWithClearMessages) {
  BootstrapConfig c = good_config();
  c.rank = 4;
  auto r = validate(c);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), Errc::kInvalidArgument);
  EXPECT_NE(r.error().message().find("rank 4 is not below world size 4 (from RANK/WORLD_SIZE set by torchrun)"),
            std::string::npos) << r.error().message();

  for (int ws : {0, -1}) {
    c = good_config();
    c.world_size = ws;
    r = validate(c);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code(), Errc::kInvalidArgument);
    EXPECT_NE(r.error().message().find("world size " + std::to_string(ws) + " is not positive"), std::string::npos)
        << r.error().message();
  }

  c = good_config();
  c.rank = -1;
  r = validate(c);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("rank -1 is negative"), std::string::npos) << r.error().message();

  c = good_config();
  c.store_port = 0;
  r = validate(c);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), Errc::kInvalidArgument);
  EXPECT_NE(r.error().message().find("port 0"), std::string::npos) << r.error().message();

  c = good_config();
  c.local_rank = 2;
  c.local_size = 2;
  r = validate(c);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), Errc::kInvalidArgument);

  c = good_config();
  c.job_token.clear();
  r = validate(c);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), Errc::kAuthFailed);
  EXPECT_NE(r.error().message().find("GREX_JOB_TOKEN must be the same on every rank (grex-run sets it for you)"),
            std::string::npos) << r.error().message();
}

}  // namespace
}  // namespace grex
