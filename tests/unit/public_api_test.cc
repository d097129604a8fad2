// SPDX-License-Identifier: Apache-2.0
// The public APIs the tools use, through libgrex.so as an installed program
// sees them: build facts, the device probes, the store address and log lines.
#include <gtest/gtest.h>

#include <grex/bootstrap.h>
#include <grex/grex.h>
#include <grex/log.h>
#include <grex/probe.h>
#include <grex/transport.h>

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>

namespace grex {
namespace {

bool has(const std::vector<std::string>& v, const char* s) { return std::find(v.begin(), v.end(), s) != v.end(); }

TEST(PublicApi, BuildInfoNamesTheLibraryAndItsDrivers) {
  BuildInfo b = build_info();
  EXPECT_EQ(b.version, grex_version());
  EXPECT_EQ(b.drivers, Device::available_drivers());
  EXPECT_TRUE(has(b.drivers, "shm"));
  EXPECT_EQ(has(b.drivers, "dpdk"), !b.dpdk_version.empty());
  EXPECT_EQ(has(b.drivers, "verbs"), !b.ibverbs_version.empty());
}

TEST(PublicApi, RdmaProbeDescribesWhatItOpened) {
  RdmaReport r = probe_rdma_devices();
  EXPECT_EQ(r.built, has(build_info().drivers, "verbs"));
  if (!r.built) {
    EXPECT_TRUE(r.devices.empty());
  }
  for (const RdmaDevice& d : r.devices) {
    EXPECT_FALSE(d.name.empty());
    if (!d.error.empty()) continue;
    EXPECT_GT(d.max_qp, 0) << d.name;
    EXPECT_NE(d.gpudirect.summary.find("CUDA driver"), std::string::npos) << d.gpudirect.summary;
    EXPECT_EQ(d.gpudirect.dma_buf == Support::kUnknown, !d.gpudirect.dma_buf_note.empty());
    for (const RdmaPort& p : d.ports) {
      EXPECT_GE(p.port, 1);
      EXPECT_GE(p.max_mtu, p.active_mtu);
      for (const RdmaGid& g : p.gids) EXPECT_TRUE(g.type == "RoCE v2" || g.type == "RoCE v1" || g.type == "IB");
    }
  }
}

TEST(PublicApi, CudaProbeSaysWhyNot) {
  CudaReport r = probe_cuda_devices();
  if (!r.available) {
    EXPECT_FALSE(r.error.empty());
    EXPECT_TRUE(r.devices.empty());
    EXPECT_EQ(r.device_count, 0);
  } else {
    EXPECT_GT(r.driver_version, 0);
    EXPECT_LE(static_cast<int>(r.devices.size()), r.device_count);
  }
}

TEST(PublicApi, StoreAddressBracketsIpv6) {
  EXPECT_EQ(store_address("10.0.0.1", 29500), "10.0.0.1:29500");
  EXPECT_EQ(store_address("::1", 7), "[::1]:7");
}

TEST(PublicApi, LogLinesFollowTheThreshold) {
  // The suite runs with GREX_LOG_LEVEL=warn (tests/meson.build).
  EXPECT_TRUE(log_enabled(LogLevel::kError));
  EXPECT_TRUE(log_enabled(LogLevel::kWarn));
  EXPECT_FALSE(log_enabled(LogLevel::kInfo));
  testing::internal::CaptureStderr();
  log_line(LogLevel::kWarn, "tool", "something happened: 42");
  char host[64] = {};
  gethostname(host, sizeof host - 1);
  if (char* dot = std::strchr(host, '.')) *dot = '\0';
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "[host " + std::string(host) + " tool] WARN something happened: 42\n");
}

}  // namespace
}  // namespace grex
