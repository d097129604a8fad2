// SPDX-License-Identifier: Apache-2.0
// What the verbs driver does beyond the transport contract (that is checked
// by tests/integration/conformance): a shared receive queue without inline
// data, writes with immediate arriving in posting order (RC), GID choice
// errors, capabilities and counters, the NIC's per-QP rate limit only where
// offered, a CUDA registration on a host without CUDA, registered memory
// writable by peers but never readable (verbs_raw.h's queue pairs; what an
// advert opens is in verbs_confine_test.cc). Between two real processes.
// Payloads are checked by checksum. Runs on any RDMA device; in CI under
// tests/scripts/softroce.sh (Soft-RoCE in a qemu VM under TCG, ~100 MB/s, so
// the volumes stay small). Skips, saying why, without rdma-core or a device.
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include "verbs_env.h"
#include "verbs_raw.h"

#ifdef GREX_HAVE_VERBS
#include <infiniband/verbs.h>

#include "drivers/verbs/verbs_device.h"
#endif

namespace grex::test {
namespace {

// Rank 0 sends message i (sizes[i] bytes, tag i % 4) from one registered
// buffer; rank 1 receives into its own and compares checksums.
int exchange(Rank& r, const char* name, const std::vector<size_t>& sizes, int64_t timeout_ms,
             const std::map<std::string, std::string>& extra = {}) {
  auto link = open_link(r, name, verbs_options(extra));
  RANK_OK(link);
  Device& dev = *link->dev;
  size_t total = 0;
  for (size_t s : sizes) total += s;
  std::vector<uint8_t> buf(total + 1, 0xee);
  auto mr = dev.register_memory(buf.data(), buf.size());
  RANK_OK(mr);
  std::vector<Completion> done;
  if (r.rank == 0) {
    std::vector<SendRequest> reqs;
    for (size_t i = 0, off = 0; i < sizes.size(); off += sizes[i], ++i) {
      fill(buf.data() + off, sizes[i], i);
      RANK_CHECK(checksum(buf.data() + off, sizes[i]) == fill_checksum(sizes[i], i));
      reqs.push_back({*mr, off, sizes[i], i % 4, i});
    }
    RANK_CHECK(post_all(dev, reqs, [&](auto s) { return link->to(1).post_send(s); }, &done));
    RANK_CHECK(drain(dev, reqs.size(), &done, timeout_ms));
    for (auto& c : done) {
      if (c.status != Status::kSuccess || c.op != Op::kSend || c.peer != 1) print_completion("sender", c);
      RANK_CHECK(c.status == Status::kSuccess && c.op == Op::kSend && c.peer == 1);
    }
  } else {
    std::vector<RecvRequest> reqs;
    for (size_t i = 0, off = 0; i < sizes.size(); off += sizes[i], ++i) reqs.push_back({*mr, off, sizes[i], i % 4, i});
    RANK_CHECK(post_all(dev, reqs, [&](auto q) { return link->to(0).post_recv(q); }, &done));
    RANK_CHECK(drain(dev, reqs.size(), &done, timeout_ms));
    for (auto& c : done) {
      size_t i = c.context;
      if (c.status != Status::kSuccess || c.op != Op::kRecv || i >= sizes.size() || c.bytes != sizes[i])
        print_completion("receiver", c);
      RANK_CHECK(c.status == Status::kSuccess && c.op == Op::kRecv && c.peer == 0);
      RANK_CHECK(i < sizes.size() && c.bytes == sizes[i] && c.tag == i % 4);
      RANK_CHECK(checksum(buf.data() + reqs[i].offset, sizes[i]) == fill_checksum(sizes[i], i));
    }
    RANK_CHECK(buf[total] == 0xee);  // nothing past the last message
  }
  RANK_OK(r.bootstrap->barrier(std::string(name) + "/done"));
  RANK_OK(dev.deregister_memory(*mr));
  return 0;
}

// The same exchange with one shared receive queue for all peers and no
// inline data (control messages then go from registered send slots).
TEST(VerbsDriver, SharedReceiveQueueWithoutInline) {
  REQUIRE_VERBS();
  if (!testing_verbs()) GTEST_SKIP() << "verbs options";
  auto res = run_ranks(2, [](Rank& r) {
    std::vector<size_t> sizes = {0, 1, 7, 4097, (1u << 20) + 3};
    for (size_t i = 0; i < 300; ++i) sizes.push_back((i * 7919) % 20'000);
    return exchange(r, "vsrq", sizes, 120'000, {{"srq", "1"}, {"inline", "0"}});
  }, 180);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// 200 writes with immediates into distinct ranges: the target's kRemoteWrite
// completions come in posting order, and when each arrives its bytes are
// already in place.
TEST(VerbsDriver, WritesWithImmediateCompleteInOrder) {
  REQUIRE_VERBS();
  auto res = run_ranks(2, [](Rank& r) -> int {
    auto link = open_link(r, "vword", verbs_options());
    RANK_OK(link);
    Device& dev = *link->dev;
    constexpr size_t kWrites = 200;
    auto size_of = [](size_t i) -> size_t { return (i * 131) % 5000 + 1; };
    std::vector<size_t> off(kWrites + 1, 0);
    for (size_t i = 0; i < kWrites; ++i) off[i + 1] = off[i] + size_of(i);
    std::vector<uint8_t> buf(off[kWrites], 0);
    auto mr = dev.register_memory(buf.data(), buf.size());
    RANK_OK(mr);
    RemoteRegion mine = (*mr)->remote();
    auto all = r.bootstrap->all_gather("vword/region", std::string(reinterpret_cast<char*>(&mine), sizeof(mine)));
    RANK_OK(all);
    std::vector<Completion> done;
    if (r.rank == 0) {
      RemoteRegion theirs;
      std::memcpy(&theirs, (*all)[1].data(), sizeof(theirs));
      std::vector<WriteRequest> w;
      for (size_t i = 0; i < kWrites; ++i) {
        fill(buf.data() + off[i], size_of(i), i);
        w.push_back({*mr, off[i], size_of(i), theirs, off[i], static_cast<uint32_t>(1000 + i), true, i});
      }
      RANK_CHECK(post_all(dev, w, [&](auto x) { return link->to(1).post_write(x); }, &done));
      RANK_CHECK(drain(dev, kWrites, &done, 60'000));
      for (auto& c : done) RANK_CHECK(c.op == Op::kWrite && c.status == Status::kSuccess);
    } else {
      Completion cs[16];
      size_t next = 0;
      uint64_t deadline = now_ns() + 60'000'000'000ull;
      while (next < kWrites && now_ns() < deadline) {
        size_t n = dev.poll(cs);
        for (size_t k = 0; k < n; ++k) {
          RANK_CHECK(cs[k].op == Op::kRemoteWrite && cs[k].status == Status::kSuccess);
          RANK_CHECK(cs[k].imm == 1000 + next && cs[k].bytes == size_of(next));
          RANK_CHECK(checksum(buf.data() + off[next], size_of(next)) == fill_checksum(size_of(next), next));
          ++next;
        }
      }
      RANK_CHECK(next == kWrites);
    }
    RANK_OK(r.bootstrap->barrier("vword/done"));
    return 0;
  }, 120);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// A GID index that does not exist, or one without an IPv4 address (index 0,
// the fe80:: GID), fails Device::open at once with an error that says so.
TEST(VerbsDriver, WrongGidIndexIsAClearError) {
  REQUIRE_VERBS();
  if (!testing_verbs()) GTEST_SKIP() << "verbs GID choice";
  // In a child: librdmacm keeps the devices it opened for the life of the
  // process, and ranks forked later by this test binary must not inherit them
  // (a forked child's verbs calls on its parent's device fail with EACCES).
  auto res = run_ranks(1, [](Rank&) -> int {
    ::unsetenv("GREX_IB_GID_INDEX");  // the environment overrides the parameter: take it away for this case
    auto o = verbs_options({{"gid_index", "1000"}});
    uint64_t t0 = now_ns();
    auto d = Device::open(o);
    RANK_CHECK(!d.ok());
    std::fprintf(stderr, "gid 1000: %s\n", d.error().message().c_str());
    RANK_CHECK(d.error().code() == Errc::kNotFound);
    RANK_CHECK(d.error().message().find("no GID index 1000") != std::string::npos);
    o.params["gid_index"] = "0";
    auto z = Device::open(o);
    RANK_CHECK(!z.ok());
    std::fprintf(stderr, "gid 0: %s\n", z.error().message().c_str());
    RANK_CHECK(z.error().message().find("not an IPv4-mapped GID") != std::string::npos);
    RANK_CHECK(now_ns() - t0 < 5'000'000'000ull);  // an error, not a hang
    return 0;
  }, 60);
  ASSERT_EQ(res.codes.size(), 1u);
  EXPECT_EQ(res.codes[0], 0);
}

// What the device reports, in one process: verbs capabilities, the active MTU
// (4096 on softroce.sh's rxe over a 9000-byte-MTU dummy), and the dma-buf
// probe counter (0 on rxe: ibv_reg_dmabuf_mr returns EOPNOTSUPP there).
TEST(VerbsDriver, CapabilitiesAndCounters) {
  REQUIRE_VERBS();
  if (!testing_verbs()) GTEST_SKIP() << "verbs-only checks; the driver under test is " << verbs_driver();
  auto res = run_ranks(1, [](Rank& r) -> int {
    DeviceOptions o = verbs_options();
    o.job_id = "vcaps-" + std::to_string(::getpid());
    o.rank = r.rank;
    auto d = Device::open(o);
    RANK_OK(d);
    const Capabilities& c = (*d)->capabilities();
    std::fprintf(stderr, "caps: driver %s device %s mtu %u speed %llu Mb/s max_message %llu queue_depth %u batch %u\n",
                 c.driver.c_str(), c.device_name.c_str(), c.mtu_bytes,
                 static_cast<unsigned long long>(c.link_speed_mbps),
                 static_cast<unsigned long long>(c.max_message_bytes), c.queue_depth, c.max_post_batch);
    RANK_CHECK(c.driver == "verbs");
    RANK_CHECK(!c.device_name.empty());
    if (auto want = env_or("GREX_RXE_DEV"); !want.empty()) RANK_CHECK(c.device_name == want);
    RANK_CHECK(c.mtu_bytes >= 1024 && c.mtu_bytes <= 4096 && (c.mtu_bytes & (c.mtu_bytes - 1)) == 0);
    if (under_softroce()) RANK_CHECK(c.mtu_bytes == 4096);
    RANK_CHECK(c.link_speed_mbps > 0);
    RANK_CHECK(c.write_imm && c.send_recv && c.zero_copy_send);
    RANK_CHECK(c.max_message_bytes >= (64u << 20));  // SizesUpTo64MiB sends that in one message
    RANK_CHECK(c.queue_depth > 0 && c.max_post_batch > 0);
    int dmabuf = -1;
    for (auto& [k, v] : (*d)->counters()) {
      std::fprintf(stderr, "counter %s = %llu\n", k.c_str(), static_cast<unsigned long long>(v));
      if (k == "dmabuf_supported") dmabuf = static_cast<int>(v);
    }
    RANK_CHECK(dmabuf == 0 || dmabuf == 1);
    if (under_softroce()) RANK_CHECK(dmabuf == 0);
    return 0;
  }, 60);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

#ifdef GREX_HAVE_VERBS
// The device's packet pacing for RC queue pairs, asked of rdma-core directly:
// the per-QP rate limit's maximum in kbit/s, 0 where it is not offered.
uint32_t rc_pacing_max_kbps(const std::string& device) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  uint32_t max = 0;
  for (int i = 0; i < n; ++i) {
    if (device != ibv_get_device_name(list[i])) continue;
    if (ibv_context* ctx = ibv_open_device(list[i])) {
      ibv_device_attr_ex ex{};
      if (ibv_query_device_ex(ctx, nullptr, &ex) == 0 &&
          (ex.packet_pacing_caps.supported_qpts & (1u << IBV_QPT_RC)) != 0)
        max = ex.packet_pacing_caps.qp_rate_limit_max;
      ibv_close_device(ctx);
    }
  }
  ibv_free_device_list(list);
  return max;
}
#endif


// Issue 28, least privilege: a region grex registered may be written by a
// connected peer (posted receives and one-sided writes land that way), within
// its bounds, but never read: grex issues no RDMA READ, so no region grants
// REMOTE_READ. The "peer" is a queue pair in the device's protection domain.
TEST(VerbsDriver, PeersMayWriteButNeverReadRegisteredMemory) {
  REQUIRE_VERBS();
  if (!testing_verbs()) GTEST_SKIP() << "verbs-only checks; the driver under test is " << verbs_driver();
#ifdef GREX_HAVE_VERBS
  auto res = run_ranks(1, [](Rank& r) -> int {
    DeviceOptions o = verbs_options();
    o.job_id = "vpriv-" + std::to_string(::getpid());
    o.rank = r.rank;
    auto d = Device::open(o);
    RANK_OK(d);
    auto* vd = dynamic_cast<verbs::VerbsDevice*>(d->get());
    RANK_CHECK(vd != nullptr);
    std::vector<uint8_t> target(4096, 0x11), local(4096, 0x22);
    auto mr = (*d)->register_memory(target.data(), target.size());
    RANK_OK(mr);
    const RemoteRegion rr = (*mr)->remote();
    ibv_mr* lmr = ibv_reg_mr(vd->pd(), local.data(), local.size(), IBV_ACCESS_LOCAL_WRITE);
    RANK_CHECK(lmr != nullptr);
    const int gid = std::atoi(env_or("GREX_IB_GID_INDEX", "1").c_str());
    const uint8_t port = 1;
    {
      LoopPair lp;
      RANK_CHECK(make_loop_pair(vd->pd(), port, gid, &lp));
      const int st = one_sided(lp, lmr, /*read=*/true, rr.addr, static_cast<uint32_t>(rr.rkey), 64);
      std::fprintf(stderr, "RDMA READ of a registered region: %s\n", ibv_wc_status_str(static_cast<ibv_wc_status>(st)));
      RANK_CHECK(st == IBV_WC_REM_ACCESS_ERR);
      RANK_CHECK(local[0] == 0x22);  // nothing came back
    }
    {
      LoopPair lp;  // a fresh pair: the refused READ left the last one in error
      RANK_CHECK(make_loop_pair(vd->pd(), port, gid, &lp));
      RANK_CHECK(one_sided(lp, lmr, /*read=*/false, rr.addr, static_cast<uint32_t>(rr.rkey), 64) == IBV_WC_SUCCESS);
      RANK_CHECK(target[0] == 0x22 && target[63] == 0x22 && target[64] == 0x11);
    }
    {
      LoopPair lp;  // past the region's end
      RANK_CHECK(make_loop_pair(vd->pd(), port, gid, &lp));
      RANK_CHECK(one_sided(lp, lmr, false, rr.addr + rr.length - 32, static_cast<uint32_t>(rr.rkey), 64) ==
                 IBV_WC_REM_ACCESS_ERR);
    }
    ibv_dereg_mr(lmr);
    return 0;
  }, 120);
  EXPECT_TRUE(res.all_ok()) << res.describe();
#endif
}

// Issue 28: a connect request must carry the tag keyed by this job's key
// before the rank it claims counts. A rank of "another job" (the same job id,
// another key: a stranger who read the id) is refused, and counted; the
// refused side (rank 0, which connects actively) hears so at once.
TEST(VerbsDriver, ConnectRequestsOfAnotherKeyAreRefused) {
  REQUIRE_VERBS();
  if (!testing_verbs()) GTEST_SKIP() << "verbs-only checks; the driver under test is " << verbs_driver();
  auto res = run_ranks(2, [](Rank& r) -> int {
    auto ids = r.bootstrap->all_gather("vkey/id", std::to_string(::getpid()));
    RANK_OK(ids);
    DeviceOptions o = verbs_options();
    o.rank = r.rank;
    o.world_size = 2;
    o.job_id = "vkey-" + (*ids)[0];
    o.job_key = derive_job_key(r.rank == 0 ? "the job's token" : "a stranger's guess", o.job_id);
    o.connect_timeout_ms = 3000;
    auto d = Device::open(o);
    RANK_OK(d);
    auto addrs = r.bootstrap->all_gather("vkey/addr", (*d)->local_address().value());
    RANK_OK(addrs);
    auto ep = (*d)->connect(1 - r.rank, (*addrs)[static_cast<size_t>(1 - r.rank)]);
    RANK_CHECK(!ep.ok());
    std::fprintf(stderr, "rank %d: %s\n", r.rank, ep.error().message().c_str());
    if (r.rank == 1) {  // the passive side (the higher rank) saw the request and refused it
      uint64_t rejected = 0;
      for (auto& [k, v] : (*d)->counters())
        if (k == "rejected_requests") rejected = v;
      RANK_CHECK(rejected >= 1);
    }
    RANK_OK(r.bootstrap->barrier("vkey/done"));
    return 0;
  }, 60);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}


// GREX_IB_RATE_LIMIT: "nic" opens only where the device offers a per-QP rate
// limit for RC (Soft-RoCE offers none; neither does upstream mlx5, which
// offers it for raw packet QPs), and otherwise fails at once saying so; the
// counter nic_rate_limit_max_kbps reports what is offered; a word that is not
// a mode is an error.
TEST(VerbsDriver, NicRateLimitOnlyWhereOffered) {
  REQUIRE_VERBS();
  if (!testing_verbs()) GTEST_SKIP() << "verbs rate limits";
#ifdef GREX_HAVE_VERBS
  auto res = run_ranks(1, [](Rank& r) -> int {
    DeviceOptions o = verbs_options();
    o.job_id = "vrate-" + std::to_string(::getpid());
    o.rank = r.rank;
    auto d = Device::open(o);
    RANK_OK(d);
    const uint32_t offered = rc_pacing_max_kbps((*d)->capabilities().device_name);
    uint64_t reported = ~0ull;
    for (auto& [k, v] : (*d)->counters())
      if (k == "nic_rate_limit_max_kbps") reported = v;
    std::fprintf(stderr, "%s: RC packet pacing up to %u kbit/s\n", (*d)->capabilities().device_name.c_str(), offered);
    RANK_CHECK(reported == offered);
    if (under_softroce()) RANK_CHECK(offered == 0);
    d->reset();
    o.params["rate_limit"] = "nic";
    auto nic = Device::open(o);
    if (offered > 0) {
      RANK_OK(nic);
    } else {
      RANK_CHECK(!nic.ok());
      RANK_CHECK(nic.error().code() == Errc::kNotSupported);
      RANK_CHECK(nic.error().message().find("no per-QP rate limit for RC") != std::string::npos);
    }
    o.params["rate_limit"] = "hardware";
    auto bad = Device::open(o);
    RANK_CHECK(!bad.ok() && bad.error().code() == Errc::kInvalidArgument);
    return 0;
  }, 60);
  EXPECT_TRUE(res.all_ok()) << res.describe();
#endif
}

// A host pointer registered as MemoryDomain::kCudaDevice (on a host without
// CUDA, or anywhere: it is not device memory) fails with a message, leaves no
// registration behind, and the device still registers host memory after it.
TEST(VerbsDriver, CudaRegistrationFailsCleanly) {
  REQUIRE_VERBS();
  auto res = run_ranks(1, [](Rank& r) -> int {
    DeviceOptions o = verbs_options();
    o.job_id = "vcuda-" + std::to_string(::getpid());
    o.rank = r.rank;
    auto d = Device::open(o);
    RANK_OK(d);
    std::vector<uint8_t> buf(1 << 20);
    auto bad = (*d)->register_memory(buf.data(), buf.size(), MemoryDomain::kCudaDevice);
    RANK_CHECK(!bad.ok());
    std::fprintf(stderr, "kCudaDevice registration: %s (%s)\n", bad.error().message().c_str(),
                 std::string(errc_name(bad.error().code())).c_str());
    RANK_CHECK(!bad.error().message().empty());
    // NCCL's order, every mechanism named with why it was not used: the CUDA
    // driver, then dma-buf (rxe: EOPNOTSUPP from the probe), then peermem.
    const std::string m = bad.error().message();
    size_t cuda = m.find("CUDA driver: "), dmabuf = m.find("dma-buf: "), peermem = m.find("peermem: ");
    RANK_CHECK(bad.error().code() == Errc::kNotSupported);
    RANK_CHECK(cuda != std::string::npos && dmabuf != std::string::npos && peermem != std::string::npos);
    RANK_CHECK(cuda < dmabuf && dmabuf < peermem);
    if (under_softroce()) RANK_CHECK(m.find("dma-buf: not supported by " + (*d)->capabilities().device_name) != std::string::npos);
    RANK_CHECK((*d)->registration_count() == 0);
    auto good = (*d)->register_memory(buf.data(), buf.size());
    RANK_OK(good);
    RANK_OK((*d)->deregister_memory(*good));
    return 0;
  }, 60);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

}  // namespace
}  // namespace grex::test
