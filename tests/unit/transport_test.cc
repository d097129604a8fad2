// SPDX-License-Identifier: Apache-2.0
// The transport contract's base classes: "not supported" defaults, the default
// allocate()/free(), the registration cache and status names. A minimal
// driver defined here fills only the pure virtual hooks.
#include <grex/transport.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include <string>
#include <vector>

#include "mem/domain.h"
#include "transport/hybrid.h"
#include "transport/params.h"

namespace grex {
namespace {

class PlainRegion final : public MemoryRegion {
 public:
  PlainRegion(void* a, size_t n, MemoryDomain d, int* live) : MemoryRegion(a, n, d), live_(live) { ++*live_; }
  ~PlainRegion() override { --*live_; }

 private:
  int* live_;
};

class BareEndpoint final : public Endpoint {
 public:
  explicit BareEndpoint(int peer) : Endpoint(peer) {}
};

class BareDevice final : public Device {
 public:
  BareDevice() { caps_.driver = "bare"; }
  ~BareDevice() override { release_all_registrations(); }
  const Capabilities& capabilities() const noexcept override { return caps_; }
  Result<std::string> local_address() override { return std::string("bare"); }
  Result<std::unique_ptr<Endpoint>> connect(int peer, std::string_view) override {
    return std::unique_ptr<Endpoint>(new BareEndpoint(peer));
  }
  size_t poll(std::span<Completion>) noexcept override { return 0; }
  int live = 0;
  int registrations = 0;

 protected:
  Result<std::unique_ptr<MemoryRegion>> do_register(void* a, size_t n, MemoryDomain d) override {
    if (d != MemoryDomain::kHost) return Error(Errc::kNotSupported, "host memory only");
    ++registrations;
    return std::unique_ptr<MemoryRegion>(new PlainRegion(a, n, d, &live));
  }

 private:
  Capabilities caps_;
};

TEST(Transport, EndpointDefaultsAnswerNotSupported) {
  BareDevice dev;
  auto ep = dev.connect(3, "x");
  ASSERT_TRUE(ep.ok());
  SendRequest s{};
  RecvRequest r{};
  WriteRequest w{};
  EXPECT_EQ((*ep)->post_send({&s, 1}).error, Errc::kNotSupported);
  EXPECT_EQ((*ep)->post_recv({&r, 1}).count, 0u);
  EXPECT_EQ((*ep)->post_write({&w, 1}).error, Errc::kNotSupported);
  EXPECT_FALSE((*ep)->peer_failed());
  EXPECT_EQ((*ep)->peer_abort_culprit(), -1);
  (*ep)->announce_abort(1);  // a no-op by default, must not crash
  EXPECT_EQ((*ep)->describe_peer(), "rank 3");
  EXPECT_EQ((*ep)->peer(), 3);
}

TEST(Transport, RegistrationCacheCountsAndReleases) {
  BareDevice dev;
  std::vector<char> buf(4096);
  auto a = dev.register_memory(buf.data(), buf.size());
  auto b = dev.register_memory(buf.data() + 10, 100);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(dev.registrations, 1);  // the driver saw one registration
  EXPECT_TRUE(dev.deregister_memory(*a).ok());
  EXPECT_EQ(dev.live, 1);
  EXPECT_TRUE(dev.deregister_memory(*b).ok());
  EXPECT_EQ(dev.live, 0);
  auto gpu = dev.register_memory(buf.data(), 16, MemoryDomain::kCudaDevice);
  ASSERT_FALSE(gpu.ok());
  EXPECT_EQ(gpu.error().code(), Errc::kNotSupported);
  auto null = dev.register_memory(nullptr, 16);
  ASSERT_FALSE(null.ok());
  EXPECT_EQ(null.error().code(), Errc::kInvalidArgument);
}

// register_memory asks the installed detector (lib/gpu's, where it is linked)
// about memory passed as host memory, and registers it in the domain it names.
std::vector<char>* g_gpu_like = nullptr;
MemoryDomain gpu_like_domain(const void* p) noexcept {
  return g_gpu_like != nullptr && p == g_gpu_like->data() ? MemoryDomain::kCudaDevice : MemoryDomain::kHost;
}

TEST(Transport, RegisterMemoryConsultsTheDomainDetector) {
  BareDevice dev;
  std::vector<char> gpu(4096), host(4096);
  g_gpu_like = &gpu;
  mem::DomainDetector before = mem::set_domain_detector(&gpu_like_domain);
  auto g = dev.register_memory(gpu.data(), gpu.size());
  auto h = dev.register_memory(host.data(), host.size());
  mem::set_domain_detector(before);
  g_gpu_like = nullptr;
  ASSERT_FALSE(g.ok());  // BareDevice registers host memory only
  EXPECT_EQ(g.error().code(), Errc::kNotSupported);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ((*h)->domain(), MemoryDomain::kHost);
  EXPECT_TRUE(dev.deregister_memory(*h).ok());
  mem::set_domain_detector(nullptr);
  EXPECT_EQ(mem::detect_domain(gpu.data()), MemoryDomain::kHost);
  mem::set_domain_detector(before);
}

// A driver setting's GREX_* variable beats DeviceOptions::params unless the
// options say they win; a key the options lack still takes its variable.
TEST(Transport, PrecedenceDecidesBetweenParamsAndVariables) {
  DeviceOptions o;
  o.params["slots"] = "64";
  ::setenv("GREX_TEST_SLOTS", "128", 1);
  EXPECT_EQ(detail::param(o, "slots", "GREX_TEST_SLOTS"), "128");
  o.precedence = Precedence::kOptions;
  EXPECT_EQ(detail::param(o, "slots", "GREX_TEST_SLOTS"), "64");
  EXPECT_EQ(detail::param(o, "depth", "GREX_TEST_SLOTS"), "128");
  ::unsetenv("GREX_TEST_SLOTS");
  EXPECT_EQ(detail::param(o, "depth", "GREX_TEST_SLOTS"), "");
  o.precedence = Precedence::kEnvironment;
  EXPECT_EQ(detail::param(o, "slots", "GREX_TEST_SLOTS"), "64");
}

// One NIC per local rank: a ';' list gives local rank i entry i (modulo the
// list's length); a single value, commas and all (DPDK devargs), is everyone's.
TEST(Transport, PerLocalRankListsPickTheRanksEntry) {
  DeviceOptions o;
  o.params["port"] = "net_af_packet0,iface=veth0; net_af_packet1,iface=veth1 ;net_af_xdp2,iface=eth2";
  std::vector<std::string> got;
  for (int local = -1; local < 5; ++local) {
    o.local_rank = local;
    auto v = detail::param_for_local_rank(o, "port", "GREX_TEST_PORT");
    ASSERT_TRUE(v.ok()) << v.error().message();
    got.push_back(*v);
  }
  EXPECT_EQ(got, (std::vector<std::string>{"net_af_packet0,iface=veth0", "net_af_packet0,iface=veth0",
                                           "net_af_packet1,iface=veth1", "net_af_xdp2,iface=eth2",
                                           "net_af_packet0,iface=veth0", "net_af_packet1,iface=veth1"}));
  o.params["port"] = "net_af_packet0,iface=veth0";
  o.local_rank = 3;
  EXPECT_EQ(*detail::param_for_local_rank(o, "port", "GREX_TEST_PORT"), "net_af_packet0,iface=veth0");
  ::setenv("GREX_TEST_PORT", "mlx5_0;;mlx5_2", 1);  // the variable wins, and its empty entry is an error
  auto bad = detail::param_for_local_rank(o, "port", "GREX_TEST_PORT");
  ::unsetenv("GREX_TEST_PORT");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code(), Errc::kInvalidArgument);
  EXPECT_NE(bad.error().message().find("GREX_TEST_PORT='mlx5_0;;mlx5_2' has an empty entry 1"), std::string::npos)
      << bad.error().message();
}

TEST(Transport, DefaultAllocateGivesRegisteredZeroedMemory) {
  BareDevice dev;
  auto m = dev.allocate(1 << 20);
  ASSERT_TRUE(m.ok());
  auto* p = static_cast<unsigned char*>((*m)->addr());
  EXPECT_EQ(p[0], 0);
  EXPECT_EQ(p[(1 << 20) - 1], 0);
  EXPECT_TRUE((*m)->contains(p + 100, 200));
  EXPECT_FALSE((*m)->contains(p + (1 << 20) - 1, 2));
  EXPECT_EQ(dev.registration_count(), 1u);
  EXPECT_TRUE(dev.free(*m).ok());
  EXPECT_EQ(dev.registration_count(), 0u);
  std::vector<char> other(64);
  auto reg = dev.register_memory(other.data(), other.size());
  ASSERT_TRUE(reg.ok());
  EXPECT_EQ(dev.free(*reg).error().code(), Errc::kNotFound);  // not from allocate()
  // Registrations left behind are released with the device (the PlainRegion
  // destructor runs: `live` would otherwise leak past the device).
}

// A registration of user memory outlives the memory (the collectives cache
// them across calls); when the kernel hands those addresses out again,
// allocate() must give its own fresh mapping, not the stale registration
// that covers it (whose address and length point at unmapped memory).
TEST(Transport, AllocateNeverReturnsAStaleRegistration) {
  BareDevice dev;
  // Where will the next 16 KiB mapping go? Ask the kernel, then give it back.
  constexpr size_t kLen = 16u << 10;
  void* probe = ::mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(probe, MAP_FAILED);
  ASSERT_EQ(::munmap(probe, kLen), 0);
  // A user buffer once lived around there (as malloc places a large block, 16
  // bytes into its mapping); it was freed, its registration stays cached.
  constexpr size_t kOld = 4u << 20;
  char* user = static_cast<char*>(probe) - (kOld / 2) + 16;
  auto stale = dev.register_memory(user, kOld - 16);
  ASSERT_TRUE(stale.ok());
  std::vector<MemoryRegion*> got;
  bool inside = false;
  for (int i = 0; i < 8 && !inside; ++i) {
    auto m = dev.allocate(kLen);
    ASSERT_TRUE(m.ok());
    got.push_back(*m);
    auto a = reinterpret_cast<uintptr_t>((*m)->addr());
    inside = a >= reinterpret_cast<uintptr_t>(user) && a + kLen <= reinterpret_cast<uintptr_t>(user) + kOld - 16;
    EXPECT_NE(*m, *stale);
    EXPECT_EQ(a % 4096, 0u);         // its own page-aligned mapping...
    EXPECT_EQ((*m)->length(), kLen);  // ... of the size asked for
    std::memset((*m)->addr(), 0x5a, kLen);  // and it is mapped
  }
  if (!inside) GTEST_SKIP() << "the kernel did not reuse the freed range; nothing to check";
  // Lookups inside the new mapping find the new region.
  auto again = dev.register_memory(static_cast<char*>(got.back()->addr()) + 100, 100);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, got.back());
  EXPECT_TRUE(dev.deregister_memory(*again).ok());
  for (MemoryRegion* m : got) EXPECT_TRUE(dev.free(m).ok());
  EXPECT_TRUE(dev.deregister_memory(*stale).ok());
}

TEST(Transport, StatusNamesAreStable) {
  EXPECT_EQ(status_name(Status::kSuccess), "success");
  EXPECT_EQ(status_name(Status::kPeerGone), "peer-gone");
  EXPECT_EQ(status_name(Status::kTruncated), "truncated");
}

TEST(Transport, OpenByNameListsWhatIsBuilt) {
  auto drivers = Device::available_drivers();
  ASSERT_FALSE(drivers.empty());
  EXPECT_EQ(drivers[0], "shm");
  DeviceOptions o;
  o.driver = "carrier-pigeon";  // no such driver: the error lists those built
  auto d = Device::open(o);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().code(), Errc::kNotFound);
  EXPECT_NE(d.error().message().find("drivers in this build: shm"), std::string::npos) << d.error().message();
  EXPECT_NE(d.error().message().find("carrier-pigeon"), std::string::npos);
  o.driver = "shm";
  o.rank = 2;
  o.world_size = 2;
  auto bad = Device::open(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code(), Errc::kInvalidArgument);
}

// The hybrid device (issue 27): its regions are one registration per part,
// allocate() is part 0's memory registered in the others, counters name the
// part, and a malformed peer address or route is refused.
TEST(Transport, HybridDeviceRegistersInEveryPartAndChecksAddresses) {
  auto part = [](const char* driver) {
    DeviceOptions o;
    o.driver = driver;
    o.rank = 0;
    o.world_size = 3;
    o.job_id = std::string("hybrid-unit-") + driver + "-" + std::to_string(::getpid());
    auto d = Device::open(o);
    EXPECT_TRUE(d.ok()) << (d.ok() ? "" : d.error().message());
    return d.ok() ? std::move(*d) : nullptr;
  };
  {
    std::vector<std::unique_ptr<Device>> parts;
    parts.push_back(part("shm"));
    parts.push_back(part("loop"));
    auto bad = detail::HybridDevice::create(std::move(parts), {0, 0, 2}, 0);  // rank 2 to a part that is not there
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.error().code(), Errc::kInvalidArgument);
  }
  std::vector<std::unique_ptr<Device>> parts;
  parts.push_back(part("shm"));
  parts.push_back(part("loop"));
  Device* shm = parts[0].get();
  Device* loop = parts[1].get();
  auto h = detail::HybridDevice::create(std::move(parts), {0, 0, 1}, 0);
  ASSERT_TRUE(h.ok()) << h.error().message();
  detail::HybridDevice& dev = **h;
  EXPECT_EQ(dev.capabilities().driver, "shm+loop");
  EXPECT_FALSE(dev.capabilities().read);  // one-sided only between part 0's pairs
  std::vector<uint8_t> buf(1 << 16);
  auto mr = dev.register_memory(buf.data(), buf.size());
  ASSERT_TRUE(mr.ok()) << mr.error().message();
  EXPECT_EQ(shm->registration_count(), 1u);
  EXPECT_EQ(loop->registration_count(), 1u);
  ASSERT_TRUE(dev.deregister_memory(*mr).ok());
  EXPECT_EQ(shm->registration_count(), 0u);
  EXPECT_EQ(loop->registration_count(), 0u);
  auto a = dev.allocate(1 << 20);
  ASSERT_TRUE(a.ok()) << a.error().message();
  EXPECT_EQ(loop->registration_count(), 1u);
  ASSERT_TRUE(dev.free(*a).ok());
  EXPECT_EQ(loop->registration_count(), 0u);
  EXPECT_FALSE(dev.free(*a).ok());  // only once
  auto addr = dev.local_address();
  ASSERT_TRUE(addr.ok());
  EXPECT_EQ(addr->rfind("hybrid:", 0), 0u);
  for (const char* bad : {"shm:1:x", "hybrid:", "hybrid:5:ab", "hybrid:x:y", "hybrid:999999:"}) {
    auto ep = dev.connect(1, bad);
    ASSERT_FALSE(ep.ok()) << bad;
    EXPECT_EQ(ep.error().code(), Errc::kProtocol) << bad;
  }
  bool named = false;
  for (const auto& [k, v] : dev.counters()) named = named || k.rfind("shm.", 0) == 0;
  EXPECT_TRUE(named);
}

}  // namespace
}  // namespace grex
