// SPDX-License-Identifier: Apache-2.0
// The checks a receiver applies to what a peer wrote, without a device
// (issue 28): the verbs wire (drivers/verbs/verbs_wire.h) and the shm slot
// reader (drivers/shm/shm_slot.h). The fuzz targets shm_fuzz and verbs_fuzz
// drive the same functions with arbitrary bytes; these are the boundary cases.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "drivers/shm/shm_slot.h"
#include "drivers/verbs/verbs_wire.h"

namespace grex {
namespace {

TEST(VerbsWire, AddressParsesStrictly) {
  auto a = verbs::parse_address("verbs:10.1.2.254:18515:4096");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->ip, 0x0a0102feu);
  EXPECT_EQ(a->port, 18515);
  EXPECT_EQ(a->mtu, 4096u);
  EXPECT_EQ(a->text(), "verbs:10.1.2.254:18515:4096");
  // sscanf's %u took all of these: an octet past 255 wrapped into the next, a
  // sign, trailing bytes, a port past 65535 was cut to 16 bits by htons.
  for (const char* bad : {"verbs:10.1.2.256:1:1", "verbs:10.1.2.3:0:1", "verbs:10.1.2.3:65536:1",
                          "verbs:10.1.2.3:1:1x", "verbs:10.1.2.3:1", "verbs:+10.1.2.3:1:1", "verbs:10.1.2:1:1",
                          "verbs:10.1.2.3:1:99999999999", "verbs:10.1.2.3.4:1:1", "dpdk:10.1.2.3:1:1", "verbs:",
                          "verbs:1000.1.2.3:1:1", "verbs:10.1.2.3:1:1:"})
    EXPECT_FALSE(verbs::parse_address(bad)) << bad;
}

TEST(VerbsWire, HelloOfThisJobOnly) {
  constexpr uint64_t kJob = 42;
  verbs::Hello h;
  h.rank = 3;
  h.mtu = 4096;
  h.job = kJob;
  auto got = verbs::read_hello(&h, sizeof(h), kJob);
  ASSERT_TRUE(got);
  EXPECT_EQ(got->rank, 3u);
  EXPECT_EQ(got->mtu, 4096u);
  EXPECT_FALSE(verbs::read_hello(&h, sizeof(h), kJob + 1));   // another job's
  EXPECT_FALSE(verbs::read_hello(&h, sizeof(h) - 1, kJob));   // short
  EXPECT_FALSE(verbs::read_hello(nullptr, sizeof(h), kJob));  // none
  h.magic = 0;
  EXPECT_FALSE(verbs::read_hello(&h, sizeof(h), kJob));
  h.magic = verbs::kMagic;
  h.mtu = 3000;  // no RoCE MTU: unknown
  EXPECT_EQ(verbs::read_hello(&h, sizeof(h), kJob)->mtu, 0u);
}

TEST(VerbsWire, ArrivalsAndEagerSlots) {
  using verbs::Arrival;
  EXPECT_EQ(verbs::classify_arrival(true, verbs::kEagerBit | 7, 30).kind, Arrival::kEager);
  EXPECT_EQ(verbs::classify_arrival(true, verbs::kEagerBit | 7, 30).value, 7u);
  const Arrival r = verbs::classify_arrival(true, verbs::kTruncBit | 5, 1 << 20);
  EXPECT_EQ(r.kind, Arrival::kRendezvous);
  EXPECT_EQ(r.value, 5u);
  EXPECT_TRUE(r.truncated);
  EXPECT_EQ(verbs::classify_arrival(false, 0, sizeof(verbs::Ctrl)).kind, Arrival::kControl);
  EXPECT_EQ(verbs::classify_arrival(false, 0, sizeof(verbs::Ctrl) + 1).kind, Arrival::kBad);
  EXPECT_TRUE(verbs::eager_slot_next(3, 19, 16));
  EXPECT_FALSE(verbs::eager_slot_next(4, 19, 16));
  EXPECT_FALSE(verbs::eager_slot_next(0, 0, 0));  // no ring offered
  verbs::EagerHeader h;
  h.len = 100;
  EXPECT_TRUE(verbs::eager_fits(h, 128, 124));
  EXPECT_FALSE(verbs::eager_fits(h, 64, 124));   // longer than a slot
  EXPECT_FALSE(verbs::eager_fits(h, 128, 125));  // not what the write carried
  h.len = UINT32_MAX;
  EXPECT_FALSE(verbs::eager_fits(h, 128, UINT32_MAX));  // 24 + len does not wrap
}

TEST(VerbsWire, CreditsNeverPassWhatWasSent) {
  EXPECT_EQ(verbs::freed_after(10, 4, 8), 8u);
  EXPECT_EQ(verbs::freed_after(10, 4, 11), 4u);  // more than we sent: ignored
  EXPECT_EQ(verbs::freed_after(10, 4, 3), 4u);   // backwards: ignored
  EXPECT_EQ(verbs::freed_after(5, UINT32_MAX - 2, 2), 2u);   // across the wrap
  EXPECT_EQ(verbs::freed_after(5, UINT32_MAX - 2, 6), UINT32_MAX - 2);
}

TEST(ShmSlotReader, HeadOfRing) {
  alignas(64) shm::SlotHeader s{};
  EXPECT_EQ(shm::read_head(&s, 0), shm::SlotVerdict::kEmpty);
  s.state.store(1);
  s.seq = 4;
  s.type = shm::SlotType::kEager;
  EXPECT_EQ(shm::read_head(&s, 4), shm::SlotVerdict::kMessage);
  EXPECT_EQ(shm::read_head(&s, 5), shm::SlotVerdict::kOutOfSequence);
  s.type = shm::SlotType::kWriteImm;
  EXPECT_EQ(shm::read_head(&s, 4), shm::SlotVerdict::kWriteImm);
  s.type = static_cast<shm::SlotType>(9);
  EXPECT_EQ(shm::read_head(&s, 4), shm::SlotVerdict::kUnknownType);
}

TEST(ShmSlotReader, EagerBytesStayInTheSlot) {
  alignas(64) uint8_t slot[256] = {};
  auto* s = reinterpret_cast<shm::SlotHeader*>(slot);
  EXPECT_EQ(shm::eager_source(s, shm::kHeaderInlineBytes, 192), reinterpret_cast<const uint8_t*>(&s->addr));
  EXPECT_EQ(shm::eager_source(s, shm::kHeaderInlineBytes + 1, 192), slot + shm::kSlotHeaderBytes);
  EXPECT_EQ(shm::eager_source(s, 192, 192), slot + shm::kSlotHeaderBytes);
  EXPECT_EQ(shm::eager_source(s, 193, 192), nullptr);
  EXPECT_EQ(shm::eager_source(s, UINT64_MAX, 192), nullptr);
}

TEST(ShmSlotReader, PeerRangesInsideMappings) {
  std::vector<uint8_t> heap(4096);
  const shm::PeerMapping m{0x10000, heap.size(), heap.data(), 0, 3};
  EXPECT_EQ(shm::in_mapping(m, 0x10000, 4096), heap.data());
  EXPECT_EQ(shm::in_mapping(m, 0x10ff0, 16), heap.data() + 0xff0);
  EXPECT_EQ(shm::in_mapping(m, 0x10ff0, 17), nullptr);
  EXPECT_EQ(shm::in_mapping(m, 0xfff0, 16), nullptr);               // below
  EXPECT_EQ(shm::in_mapping(m, 0x10010, UINT64_MAX - 8), nullptr);  // a length that wraps
  EXPECT_EQ(shm::in_mapping(shm::PeerMapping{}, 0, 0), nullptr);    // nothing mapped
  EXPECT_TRUE(shm::within(10, 0, 10));
  EXPECT_FALSE(shm::within(11, 0, 10));
  EXPECT_FALSE(shm::within(8, UINT64_MAX, 10));
}

}  // namespace
}  // namespace grex
