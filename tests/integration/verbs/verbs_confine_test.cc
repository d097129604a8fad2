// SPDX-License-Identifier: Apache-2.0
// What an advert opens to the peer (issue 28, GREX_IB_CONFINE), between two
// real processes: rank 1 posts a receive, rank 0 plays a hostile peer that
// takes the advert's key and writes with it straight on its own queue pair.
// Runs where verbs_driver_test runs (tests/scripts/softroce.sh).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "verbs_env.h"
#include "verbs_raw.h"

#ifdef GREX_HAVE_VERBS
#include "drivers/verbs/verbs_device.h"
#endif

namespace grex::test {
namespace {

#ifdef GREX_HAVE_VERBS
// Both ranks' buffers: a 64 KiB region registered with grex, in which the
// receive sits at kOff (kLen bytes, larger than the eager size: advertised),
// and 4 KiB of 0x5a registered raw, for the hostile peer's writes.
struct Scene {
  static constexpr size_t kOff = 16384, kLen = 16384;
  std::vector<uint8_t> buf = std::vector<uint8_t>(65536, 0x11), local = std::vector<uint8_t>(4096, 0x5a);
  MemoryRegion* mr = nullptr;
  ibv_mr* lmr = nullptr;
  std::vector<std::string> region_keys;  // every rank's region rkey
  Scene() = default;
  Scene(const Scene&) = delete;
  Scene& operator=(const Scene&) = delete;
  ~Scene() {
    if (lmr != nullptr) ibv_dereg_mr(lmr);
  }
  // False (saying why on stderr) where a step failed.
  bool set_up(Rank& r, Link& link, verbs::VerbsDevice* vd, const std::string& name) {
    auto m = link.dev->register_memory(buf.data(), buf.size());
    if (!m) return std::fprintf(stderr, "register_memory: %s\n", m.error().message().c_str()), false;
    mr = *m;
    if ((lmr = ibv_reg_mr(vd->pd(), local.data(), local.size(), IBV_ACCESS_LOCAL_WRITE)) == nullptr) return false;
    auto keys = r.bootstrap->all_gather(name + "/rkey", std::to_string(mr->remote().rkey));
    if (!keys) return false;
    region_keys = std::move(*keys);
    return true;
  }
};

// The hostile peer (rank 0): polls until rank 1's advert of tag 7 arrives.
std::optional<RemoteRegion> await_advert(Link& link) {
  std::optional<RemoteRegion> a;
  Deadline dl = Deadline::after_ms(10'000);
  Completion cs[4];
  while (!(a = dynamic_cast<verbs::VerbsEndpoint&>(link.to(1)).advert_of(7)) && !dl.expired()) link.dev->poll(cs);
  return a;
}
#endif

// An advert opens a memory window on the posted receive, for the advertising
// peer's queue pair only, until the receive completes. Inside the receive the
// hostile peer's write lands; once the receive completed, the same write is
// refused (and its queue pair breaks). A stranger queue pair in rank 1's
// protection domain is refused the key outright. The key is not the region's.
TEST(VerbsDriver, AnAdvertOpensTheReceiveOnlyToItsPeerUntilItCompletes) {
  REQUIRE_VERBS();
  if (!testing_verbs()) GTEST_SKIP() << "verbs-only checks; the driver under test is " << verbs_driver();
#ifdef GREX_HAVE_VERBS
  auto res = run_ranks(2, [](Rank& r) -> int {
    auto link = open_link(r, "vwin", verbs_options());
    RANK_OK(link);
    auto* vd = dynamic_cast<verbs::VerbsDevice*>(link->dev.get());
    RANK_CHECK(vd != nullptr);
    if (!vd->windows()) {
      std::fprintf(stderr, "%s has no type 2 memory windows: adverts carry the region's rkey\n", vd->name().c_str());
      return 0;
    }
    constexpr size_t kOff = Scene::kOff, kLen = Scene::kLen;
    Scene sc;
    RANK_CHECK(sc.set_up(r, *link, vd, "vwin"));
    auto& buf = sc.buf;
    std::vector<Completion> done;
    if (r.rank == 1) {  // the victim
      RANK_CHECK(link->to(0).post_recv(std::vector<RecvRequest>{{sc.mr, kOff, kLen, 7, 1}}).count == 1);
      auto keys = r.bootstrap->all_gather("vwin/advert", "");
      RANK_OK(keys);
      const uint32_t key = static_cast<uint32_t>(std::stoul((*keys)[0]));
      RANK_CHECK(std::to_string(key) != sc.region_keys[1]);
      {
        LoopPair lp;  // a stranger in our protection domain: the window is not its
        RANK_CHECK(make_loop_pair(vd->pd(), 1, std::atoi(env_or("GREX_IB_GID_INDEX", "1").c_str()), &lp));
        const int st = one_sided(lp, sc.lmr, false, reinterpret_cast<uint64_t>(buf.data()) + kOff, key, 64);
        std::fprintf(stderr, "a stranger's write with the window's key: %s\n",
                     ibv_wc_status_str(static_cast<ibv_wc_status>(st)));
        RANK_CHECK(st == IBV_WC_REM_ACCESS_ERR && buf[kOff] == 0x11);
      }
      RANK_OK(r.bootstrap->barrier("vwin/stranger"));
      RANK_OK(r.bootstrap->barrier("vwin/inside"));
      RANK_CHECK(buf[kOff] == 0x5a && buf[kOff + 63] == 0x5a && buf[kOff + 64] == 0x11);
      RANK_OK(r.bootstrap->barrier("vwin/checked"));
      RANK_CHECK(drain(*link->dev, 1, &done));
      RANK_CHECK(done[0].status == Status::kSuccess && done[0].bytes == kLen);
      RANK_CHECK(buf[kOff] == 0x33 && buf[kOff + kLen - 1] == 0x33 && buf[kOff + kLen] == 0x11);
      RANK_OK(r.bootstrap->barrier("vwin/completed"));
      RANK_OK(r.bootstrap->barrier("vwin/stale"));
      RANK_CHECK(buf[kOff] == 0x33);  // the stale write did not land
    } else {  // the hostile peer
      const std::optional<RemoteRegion> a = await_advert(*link);
      RANK_CHECK(a.has_value() && a->length == kLen);
      RANK_OK(r.bootstrap->all_gather("vwin/advert", std::to_string(a->rkey)));
      RANK_OK(r.bootstrap->barrier("vwin/stranger"));
      ibv_qp* qp = dynamic_cast<verbs::VerbsEndpoint&>(link->to(1)).qp();
      RANK_CHECK(raw_write(qp, sc.lmr, a->addr, static_cast<uint32_t>(a->rkey), 64));
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      RANK_CHECK(!qp_in_error(qp, 0));
      RANK_OK(r.bootstrap->barrier("vwin/inside"));
      RANK_OK(r.bootstrap->barrier("vwin/checked"));
      std::memset(buf.data(), 0x33, kLen);
      RANK_CHECK(link->to(1).post_send(std::vector<SendRequest>{{sc.mr, 0, kLen, 7, 2}}).count == 1);
      RANK_CHECK(drain(*link->dev, 1, &done) && done[0].status == Status::kSuccess);
      RANK_OK(r.bootstrap->barrier("vwin/completed"));
      RANK_CHECK(raw_write(qp, sc.lmr, a->addr, static_cast<uint32_t>(a->rkey), 64));
      RANK_CHECK(qp_in_error(qp, 10'000));  // refused: the responder's NAK broke our queue pair
      RANK_OK(r.bootstrap->barrier("vwin/stale"));
    }
    return 0;
  }, 120);
  EXPECT_TRUE(res.all_ok()) << res.describe();
#endif
}

// GREX_IB_CONFINE=register: an advert's key is a registration of the
// receive's bytes alone, so the device itself refuses a write that crosses
// the receive's end (Soft-RoCE does not check a window's range; it checks a
// registration's). The peer's raw write inside the receive lands; one that
// starts inside and ends 32 bytes past it is refused and breaks the peer's
// queue pair, and none of its bytes land, inside or out.
TEST(VerbsDriver, ARegisteredReceiveRefusesAWriteOutsideIt) {
  REQUIRE_VERBS();
  if (!testing_verbs()) GTEST_SKIP() << "verbs-only checks; the driver under test is " << verbs_driver();
#ifdef GREX_HAVE_VERBS
  auto res = run_ranks(2, [](Rank& r) -> int {
    DeviceOptions o = verbs_options();
    o.params["confine"] = "register";
    auto link = open_link(r, "vreg", o);
    RANK_OK(link);
    auto* vd = dynamic_cast<verbs::VerbsDevice*>(link->dev.get());
    RANK_CHECK(vd != nullptr && vd->registers() && !vd->windows());
    constexpr size_t kOff = Scene::kOff, kLen = Scene::kLen;
    Scene sc;
    RANK_CHECK(sc.set_up(r, *link, vd, "vreg"));
    if (r.rank == 1) {  // the victim
      RANK_CHECK(link->to(0).post_recv(std::vector<RecvRequest>{{sc.mr, kOff, kLen, 7, 1}}).count == 1);
      auto keys = r.bootstrap->all_gather("vreg/advert", "");
      RANK_OK(keys);
      RANK_CHECK((*keys)[0] != sc.region_keys[1]);
      RANK_OK(r.bootstrap->barrier("vreg/inside"));
      RANK_CHECK(sc.buf[kOff] == 0x5a && sc.buf[kOff + 63] == 0x5a && sc.buf[kOff + 64] == 0x11);
      RANK_OK(r.bootstrap->barrier("vreg/checked"));
      RANK_OK(r.bootstrap->barrier("vreg/across"));
      for (size_t i = kOff + kLen - 32; i < kOff + kLen + 32; ++i) RANK_CHECK(sc.buf[i] == 0x11);
    } else {  // the hostile peer
      const std::optional<RemoteRegion> a = await_advert(*link);
      RANK_CHECK(a.has_value() && a->length == kLen);
      RANK_OK(r.bootstrap->all_gather("vreg/advert", std::to_string(a->rkey)));
      ibv_qp* qp = dynamic_cast<verbs::VerbsEndpoint&>(link->to(1)).qp();
      RANK_CHECK(raw_write(qp, sc.lmr, a->addr, static_cast<uint32_t>(a->rkey), 64));
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      RANK_CHECK(!qp_in_error(qp, 0));
      RANK_OK(r.bootstrap->barrier("vreg/inside"));
      RANK_OK(r.bootstrap->barrier("vreg/checked"));
      RANK_CHECK(raw_write(qp, sc.lmr, a->addr + kLen - 32, static_cast<uint32_t>(a->rkey), 64));
      RANK_CHECK(qp_in_error(qp, 10'000));  // refused: the responder's NAK broke our queue pair
      std::fprintf(stderr, "a write crossing the receive's end by 32 bytes: refused\n");
      RANK_OK(r.bootstrap->barrier("vreg/across"));
    }
    return 0;
  }, 120);
  EXPECT_TRUE(res.all_ok()) << res.describe();
#endif
}

}  // namespace
}  // namespace grex::test
