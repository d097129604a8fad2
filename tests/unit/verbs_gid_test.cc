// SPDX-License-Identifier: Apache-2.0
// GID choice of the verbs driver, without a device: the default is the first
// RoCE v2 IPv4-mapped GID of the port; an explicit index must exist and be
// IPv4-mapped; every refusal names the device and what to set instead.
#include <gtest/gtest.h>

#include <vector>

#include "drivers/verbs/verbs_gid.h"

namespace grex::verbs {
namespace {

GidEntry link_local(uint32_t index, uint32_t port, bool v2) {
  GidEntry e;
  e.index = index;
  e.port = port;
  e.raw[0] = 0xfe;
  e.raw[1] = 0x80;
  e.raw[15] = 1;
  e.roce_v2 = v2;
  return e;
}

GidEntry mapped(uint32_t index, uint32_t port, bool v2, uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  GidEntry e;
  e.index = index;
  e.port = port;
  e.raw[10] = e.raw[11] = 0xff;
  e.raw[12] = a;
  e.raw[13] = b;
  e.raw[14] = c;
  e.raw[15] = d;
  e.roce_v2 = v2;
  return e;
}

// A table as a dual-mode RoCE NIC shows it for one IPv4 address: fe80:: as
// RoCE v1 and v2, then the IPv4-mapped address as v1 and v2.
std::vector<GidEntry> roce_table() {
  return {link_local(0, 1, false), link_local(1, 1, true), mapped(2, 1, false, 10, 77, 0, 1),
          mapped(3, 1, true, 10, 77, 0, 1)};
}

TEST(VerbsGid, DefaultIsTheFirstRoceV2Ipv4MappedGidOfThePort) {
  auto t = roce_table();
  auto c = choose_gid(t, 1, -1, "rxe0");
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_EQ(c->index, 3u);
  EXPECT_EQ(c->ip, (10u << 24) | (77u << 16) | 1u);
}

TEST(VerbsGid, OtherPortsAndRoceV1AreNotChosen) {
  std::vector<GidEntry> t = {mapped(0, 2, true, 10, 0, 0, 9), mapped(1, 1, false, 10, 0, 0, 8),
                             mapped(2, 1, true, 192, 168, 1, 5)};
  auto c = choose_gid(t, 1, -1, "mlx5_0");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->index, 2u);
  EXPECT_EQ(c->ip, (192u << 24) | (168u << 16) | (1u << 8) | 5u);
}

TEST(VerbsGid, ExplicitIndexIsHonouredEvenForRoceV1) {
  auto t = roce_table();
  auto c = choose_gid(t, 1, 2, "rxe0");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->index, 2u);
}

TEST(VerbsGid, ExplicitLinkLocalIndexIsAClearError) {
  auto t = roce_table();
  auto c = choose_gid(t, 1, 0, "rxe0");
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code(), Errc::kInvalidArgument);
  EXPECT_NE(c.error().message().find("not an IPv4-mapped GID"), std::string::npos) << c.error().message();
  EXPECT_NE(c.error().message().find("rxe0"), std::string::npos);
  EXPECT_NE(c.error().message().find("GREX_IB_GID_INDEX"), std::string::npos);
}

TEST(VerbsGid, MissingIndexIsNotFound) {
  auto t = roce_table();
  auto c = choose_gid(t, 1, 1000, "rxe0");
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code(), Errc::kNotFound);
  EXPECT_NE(c.error().message().find("no GID index 1000"), std::string::npos) << c.error().message();
}

TEST(VerbsGid, NoIpv4AddressSaysHowToFixIt) {
  std::vector<GidEntry> t = {link_local(0, 1, false), link_local(1, 1, true)};
  auto c = choose_gid(t, 1, -1, "rxe0");
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code(), Errc::kNotFound);
  EXPECT_NE(c.error().message().find("GREX_IB_IP"), std::string::npos) << c.error().message();
}

}  // namespace
}  // namespace grex::verbs
