// SPDX-License-Identifier: Apache-2.0
// lib/gpu without a GPU: the run-time CUDA loader, pointer classification, the
// GPU registration order, and what the drivers say about GPU memory. Where a
// CUDA driver exists the loader checks pass the other way (it must load).
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <grex/transport.h>

#include <cstring>
#include <string>
#include <vector>

#include "gpu/cuda_api.h"
#include "gpu/gpu_registration.h"
#include "gpu/kernels.h"
#include "mem/domain.h"

namespace grex::gpu {
namespace {

bool libcuda_present() {
  void* h = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (h == nullptr) h = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h != nullptr) ::dlclose(h);
  return h != nullptr;
}

TEST(CudaLoader, ReportsWhatTheHostHas) {
  auto api = cuda();
  if (!libcuda_present()) {
    ASSERT_FALSE(api.ok());
    EXPECT_EQ(api.error().code(), Errc::kNotFound);
    EXPECT_NE(api.error().message().find("no CUDA driver (libcuda.so.1"), std::string::npos) << api.error().message();
    EXPECT_FALSE(cuda().ok()) << "the answer is the same on every call";
  } else if (api.ok()) {
    EXPECT_GT((*api)->driver_version, 0);
    EXPECT_GE((*api)->device_count, 0);
  } else {
    EXPECT_EQ(api.error().code(), Errc::kNotSupported) << api.error().message();  // a driver but no usable GPU
  }
}

TEST(CudaLoader, HostPointersAreHostMemory) {
  std::vector<char> host(4096);
  int on_stack = 0;
  EXPECT_EQ(pointer_domain(host.data()), MemoryDomain::kHost);
  EXPECT_EQ(pointer_domain(&on_stack), MemoryDomain::kHost);
  EXPECT_EQ(pointer_domain(nullptr), MemoryDomain::kHost);
  if (!cuda().ok()) {
    auto buf = export_dmabuf(host.data(), host.size());
    ASSERT_FALSE(buf.ok());
    EXPECT_NE(buf.error().message().find("CUDA"), std::string::npos) << buf.error().message();
  }
}

// lib/gpu installs its pointer classification as the transport's domain
// detector when it is loaded; the transport never calls lib/gpu itself.
TEST(CudaLoader, InstallsTheDomainDetector) {
  mem::DomainDetector installed = mem::set_domain_detector(nullptr);
  mem::set_domain_detector(installed);
  EXPECT_EQ(installed, &pointer_domain);
  std::vector<char> host(64);
  EXPECT_EQ(mem::detect_domain(host.data()), MemoryDomain::kHost);
}

TEST(GpuRegistration, DmaBufFirstThenPeermem) {
  GpuRegFacts all{.cuda = true, .device_dmabuf = true, .driver_dmabuf = true, .peermem = true};
  auto p = plan_gpu_registration(all, "mlx5_0");
  EXPECT_EQ(p.order, (std::vector<GpuRegPath>{GpuRegPath::kDmaBuf, GpuRegPath::kPeermem}));
  EXPECT_EQ(p.summary(), "CUDA driver: loaded; dma-buf: available; peermem: available");

  GpuRegFacts no_peermem = all;
  no_peermem.peermem = false;
  EXPECT_EQ(plan_gpu_registration(no_peermem, "mlx5_0").order, std::vector<GpuRegPath>{GpuRegPath::kDmaBuf});

  GpuRegFacts old_driver = all;  // CUDA before 11.7: no dma-buf export, peermem still works
  old_driver.driver_dmabuf = false;
  auto o = plan_gpu_registration(old_driver, "mlx5_0");
  EXPECT_EQ(o.order, std::vector<GpuRegPath>{GpuRegPath::kPeermem});
  EXPECT_NE(o.summary().find("cannot export dma-bufs"), std::string::npos) << o.summary();
}

TEST(GpuRegistration, NothingAvailableNamesEveryPiece) {
  // Soft-RoCE without CUDA: what the verbs driver reports there.
  GpuRegFacts rxe{.cuda = false, .cuda_error = "no CUDA driver (libcuda.so.1)", .device_dmabuf = false};
  auto p = plan_gpu_registration(rxe, "rxe0");
  EXPECT_TRUE(p.order.empty());
  EXPECT_EQ(p.summary(),
            "CUDA driver: no CUDA driver (libcuda.so.1); dma-buf: not supported by rxe0 (ibv_reg_dmabuf_mr probe: "
            "EOPNOTSUPP); peermem: nvidia_peermem is not loaded");
  GpuRegFacts nic_only{.cuda = false, .cuda_error = "x", .device_dmabuf = true, .peermem = true};
  auto q = plan_gpu_registration(nic_only, "mlx5_0");
  EXPECT_TRUE(q.order.empty()) << "nothing works without the CUDA driver";
  EXPECT_NE(q.summary().find("no CUDA driver to export"), std::string::npos) << q.summary();
  EXPECT_STREQ(path_name(GpuRegPath::kDmaBuf), "dma-buf");
  EXPECT_STREQ(path_name(GpuRegPath::kPeermem), "peermem");
}

TEST(GpuRegistration, HostFactsMatchTheLoader) {
  GpuRegFacts f = host_facts(true);
  EXPECT_EQ(f.cuda, cuda().ok());
  EXPECT_TRUE(f.device_dmabuf);
  EXPECT_EQ(f.peermem, peermem_loaded());
  if (!f.cuda) {
    EXPECT_FALSE(f.driver_dmabuf);
    EXPECT_FALSE(f.cuda_error.empty());
    EXPECT_EQ(f.cuda_error.find("hint"), std::string::npos) << "the cause alone: " << f.cuda_error;
  }
}

TEST(GpuRegistration, ShmRefusesGpuMemoryClearly) {
  DeviceOptions o;
  o.driver = "shm";
  o.job_id = "gpu-test-" + std::to_string(::getpid());
  auto d = Device::open(o);
  ASSERT_TRUE(d.ok()) << d.error().message();
  std::vector<char> buf(4096);
  auto r = (*d)->register_memory(buf.data(), buf.size(), MemoryDomain::kCudaDevice);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), Errc::kNotSupported);
  EXPECT_NE(r.error().message().find("not GPU memory"), std::string::npos) << r.error().message();
  EXPECT_EQ((*d)->registration_count(), 0u);
  auto ok = (*d)->register_memory(buf.data(), buf.size());  // host memory still registers
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ((*ok)->domain(), MemoryDomain::kHost);
  EXPECT_TRUE((*d)->deregister_memory(*ok).ok());
}

}  // namespace

// The kernels libgrex launches: embedded as a fatbin where nvcc was found at
// build time (its magic and both data-centre targets' code inside), an empty
// image otherwise; without a CUDA driver, asking for them says so.
TEST(GpuKernels, FatbinEmbeddedWhereNvccWas) {
#ifdef GREX_TEST_NVCC
  ASSERT_GT(grex::gpu::kKernelsFatbinSize, 4096u);
  uint32_t magic = 0;
  std::memcpy(&magic, grex::gpu::kKernelsFatbin, sizeof magic);
  EXPECT_EQ(magic, 0xBA55ED50u) << "not a fatbin";
  const std::string image(reinterpret_cast<const char*>(grex::gpu::kKernelsFatbin), grex::gpu::kKernelsFatbinSize);
  for (const char* name : {"grex_reduce_f32_sum_v", "grex_reduce_bf16_max_s", "grex_reduce_u8_prod_v", "grex_scale_f16",
                           "grex_scale_i64"})
    EXPECT_NE(image.find(name), std::string::npos) << name;
#else
  EXPECT_EQ(grex::gpu::kKernelsFatbinSize, 0u);
#endif
  auto k = grex::gpu::Kernels::for_current_context();
  if (!grex::gpu::cuda()) {
    ASSERT_FALSE(k.ok());
    EXPECT_EQ(k.error().code(), grex::Errc::kNotFound) << k.error().message();
  }
}

}  // namespace
