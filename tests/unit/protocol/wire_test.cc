// SPDX-License-Identifier: Apache-2.0
// The datagram header: round trip, every rejection, CRC catches bit flips,
// random bytes never decode into something trusted.
#include <gtest/gtest.h>

#include <cstring>

#include <random>
#include <vector>

#include "transport/wire.h"

namespace grex::wire {
namespace {

Header data_header(uint32_t payload) {
  Header h;
  h.type = Type::kData;
  h.flow = 7;
  h.psn = 0xfffffff0u;
  h.ack = 12;
  h.sack = 0x8000000000000001ull;
  h.msg_id = 99;
  h.payload_len = payload;
  h.offset = 4096;
  h.msg_len = 4096 + payload + 10;
  h.tag = 0x1122334455667788ull;
  h.timestamp = 123456789;
  h.rx_above = 37;
  return h;
}

std::vector<uint8_t> packet(const Header& h, const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> out(kHeaderBytes + payload.size());
  std::copy(payload.begin(), payload.end(), out.begin() + kHeaderBytes);
  encode(h, out.data(), payload.data());
  return out;
}

TEST(Wire, RoundTripsEveryField) {
  std::vector<uint8_t> payload(100, 0xab);
  Header h = data_header(100);
  h.flags = kFlagPayloadCrc;
  auto p = packet(h, payload);
  Header d;
  ASSERT_EQ(decode(p.data(), p.size(), 9000, &d), Reject::kNone);
  EXPECT_EQ(d.type, Type::kData);
  EXPECT_EQ(d.flow, 7u);
  EXPECT_EQ(d.psn, 0xfffffff0u);
  EXPECT_EQ(d.ack, 12u);
  EXPECT_EQ(d.sack, 0x8000000000000001ull);
  EXPECT_EQ(d.msg_id, 99u);
  EXPECT_EQ(d.payload_len, 100u);
  EXPECT_EQ(d.offset, 4096u);
  EXPECT_EQ(d.msg_len, 4206u);
  EXPECT_EQ(d.tag, 0x1122334455667788ull);
  EXPECT_EQ(d.timestamp, 123456789u);
  EXPECT_EQ(d.flags, kFlagPayloadCrc);
  EXPECT_EQ(d.rx_above, 37u);
}

// Without its CRC (a tag vouches for the packet instead, wire_auth.h) the
// field stays zero: decode() refuses the packet, decode_fields() takes every
// field as decode() does, and crc_matches() tells the two apart.
TEST(Wire, FieldsDecodeWithoutTheCrc) {
  std::vector<uint8_t> payload(100, 0xab);
  Header h = data_header(100);
  auto with = packet(h, payload);
  std::vector<uint8_t> without(with.size());
  std::copy(payload.begin(), payload.end(), without.begin() + kHeaderBytes);
  encode(h, without.data(), payload.data(), false);
  Header a, b, c;
  ASSERT_EQ(decode(with.data(), with.size(), 9000, &a), Reject::kNone);
  EXPECT_NE(a.crc, 0u);
  EXPECT_EQ(decode(without.data(), without.size(), 9000, &b), Reject::kBadCrc);
  ASSERT_EQ(decode_fields(without.data(), without.size(), 9000, &c), Reject::kNone);
  EXPECT_EQ(c.crc, 0u);
  EXPECT_EQ(std::memcmp(with.data(), without.data(), kHeaderBytes - 32), 0);  // all but the CRC and after
  EXPECT_EQ(c.psn, a.psn);
  EXPECT_EQ(c.offset, a.offset);
  EXPECT_EQ(c.rx_above, a.rx_above);
  EXPECT_TRUE(crc_matches(with.data(), a));
  EXPECT_FALSE(crc_matches(without.data(), c));
  // decode_fields still refuses what is malformed.
  without[1] = 0;  // type 0
  EXPECT_EQ(decode_fields(without.data(), without.size(), 9000, &c), Reject::kBadType);
}

// An advert's payload carries more receives, 24 bytes each; a payload that
// is not whole entries, or an entry whose zero field is set, is refused.
TEST(Wire, AdvertPayloadPacksMoreReceives) {
  Header h;
  h.type = Type::kData;
  h.flags = kFlagAdvert;
  h.msg_id = 5;
  h.msg_len = 4096;
  h.offset = 10;  // ordinal of the first; the entries name 11 and 12
  h.payload_len = 2 * kAdvertEntryBytes;
  std::vector<uint8_t> payload(h.payload_len);
  encode_advert({6, 8192, 0xabcdef0123ull}, payload.data());
  encode_advert({0xffffffffu, UINT64_MAX, 7}, payload.data() + kAdvertEntryBytes);
  auto p = packet(h, payload);
  Header d;
  ASSERT_EQ(decode(p.data(), p.size(), 9000, &d), Reject::kNone);
  EXPECT_EQ(d.payload_len, 48u);
  AdvertEntry e0 = decode_advert(p.data() + kHeaderBytes, 0), e1 = decode_advert(p.data() + kHeaderBytes, 1);
  EXPECT_EQ(e0.seq, 6u);
  EXPECT_EQ(e0.len, 8192u);
  EXPECT_EQ(e0.tag, 0xabcdef0123ull);
  EXPECT_EQ(e1.seq, 0xffffffffu);
  EXPECT_EQ(e1.len, UINT64_MAX);
  EXPECT_EQ(e1.tag, 7u);
  {
    Header odd = h;
    odd.payload_len = 30;
    auto q = packet(odd, std::vector<uint8_t>(30, 0));
    EXPECT_EQ(decode(q.data(), q.size(), 9000, &d), Reject::kBadLength);
  }
  {
    std::vector<uint8_t> bad = payload;
    bad[kAdvertEntryBytes + 5] = 1;  // the second entry's zero field
    auto q = packet(h, bad);
    EXPECT_EQ(decode(q.data(), q.size(), 9000, &d), Reject::kBadLength);
  }
  // The entries are control data: the CRC covers them without
  // kFlagPayloadCrc, so a flipped bit anywhere in them is caught.
  for (size_t bit = 0; bit < payload.size() * 8; bit += 7) {
    auto q = p;
    q[kHeaderBytes + bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    const Reject why = decode(q.data(), q.size(), 9000, &d);
    EXPECT_TRUE(why == Reject::kBadCrc || why == Reject::kBadLength) << bit;  // zero field: refused first
  }
}

TEST(Wire, RejectsEachMalformation) {
  std::vector<uint8_t> payload(16, 1);
  Header d;
  auto expect = [&](Header h, Reject want, size_t trim = 0, size_t extra = 0) {
    auto p = packet(h, payload);
    p.resize(p.size() - trim + extra);
    EXPECT_EQ(decode(p.data(), p.size(), 9000, &d), want) << reject_name(want);
  };
  Header ok = data_header(16);
  expect(ok, Reject::kNone);
  expect(ok, Reject::kTruncated, 1);
  expect(ok, Reject::kTrailing, 0, 1);
  EXPECT_EQ(decode(nullptr, 0, 9000, &d), Reject::kTruncated);
  { Header h = ok; h.version = kVersion + 1; expect(h, Reject::kBadVersion); }
  { Header h = ok; h.version = 1; expect(h, Reject::kBadVersion); }  // before rx_above
  { Header h = ok; h.type = static_cast<Type>(0); expect(h, Reject::kBadType); }
  { Header h = ok; h.type = static_cast<Type>(9); expect(h, Reject::kBadType); }
  { Header h = ok; h.flags = 1u << 9; expect(h, Reject::kBadFlags); }
  { Header h = ok; h.flags = kFlagImm; expect(h, Reject::kBadFlags); }             // imm without write
  { Header h = ok; h.flags = kFlagAdvert | kFlagWrite; expect(h, Reject::kBadFlags); }
  { Header h = ok; h.msg_len = 10; expect(h, Reject::kBadLength); }               // payload past the message
  { Header h = ok; h.remote = 5; expect(h, Reject::kBadLength); }                 // remote on a non-write
  { Header h = ok; h.type = Type::kTimingReq; h.payload_len = 0; h.flags = 0; h.rx_above = 1;
    auto p = packet(h, {}); EXPECT_EQ(decode(p.data(), p.size(), 9000, &d), Reject::kBadLength); }  // rx_above without an ack
  {
    Header h = ok;
    h.payload_len = 16;
    auto p = packet(h, payload);
    EXPECT_EQ(decode(p.data(), p.size(), 8, &d), Reject::kBadLength);  // above the path MTU
  }
  {
    Header h;
    h.type = Type::kAck;
    h.flags = kFlagAbort;
    auto p = packet(h, {});
    EXPECT_EQ(decode(p.data(), p.size(), 9000, &d), Reject::kBadFlags);
    h.type = Type::kClose;
    p = packet(h, {});
    EXPECT_EQ(decode(p.data(), p.size(), 9000, &d), Reject::kNone);
  }
  // `remote` on a control packet: the receiver's gap in reading its ring, on
  // ACKs and probe replies only.
  for (Type t : {Type::kAck, Type::kTimingResp, Type::kNack, Type::kTimingReq, Type::kClose}) {
    Header h;
    h.type = t;
    h.remote = 250'000;
    auto p = packet(h, {});
    const bool carries_gap = t == Type::kAck || t == Type::kTimingResp;
    EXPECT_EQ(decode(p.data(), p.size(), 9000, &d), carries_gap ? Reject::kNone : Reject::kBadLength)
        << static_cast<int>(t);
    if (carries_gap) {
      EXPECT_EQ(d.remote, 250'000u);
    }
  }
}

TEST(Wire, CrcCatchesEverySingleBitFlip) {
  std::vector<uint8_t> payload(64);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 7);
  Header h = data_header(64);
  h.flags = kFlagPayloadCrc;
  auto good = packet(h, payload);
  Header d;
  for (size_t bit = 0; bit < 8 * good.size(); ++bit) {
    if (bit / 8 >= kTagOffset && bit / 8 < kHeaderBytes) continue;  // the tag checks itself (wire_auth_test)
    auto p = good;
    p[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    EXPECT_NE(decode(p.data(), p.size(), 9000, &d), Reject::kNone) << "bit " << bit;
  }
  // Without the payload flag a payload flip goes unnoticed by design (the
  // UDP checksum or the link covers it); the header is still protected.
  h.flags = 0;
  auto plain = packet(h, payload);
  plain[kHeaderBytes + 3] ^= 1;
  EXPECT_EQ(decode(plain.data(), plain.size(), 9000, &d), Reject::kNone);
  plain[5] ^= 1;
  EXPECT_NE(decode(plain.data(), plain.size(), 9000, &d), Reject::kNone);
}

TEST(Wire, Crc32cMatchesTheStandardCheckValue) {
  const char* s = "123456789";
  EXPECT_EQ(crc32c(reinterpret_cast<const uint8_t*>(s), 9), 0xe3069283u);
}

TEST(Wire, RandomBytesAreRejected) {
  std::mt19937_64 g(42);
  Header d;
  int accepted = 0;
  for (int i = 0; i < 200000; ++i) {
    std::vector<uint8_t> p(g() % 200);
    for (auto& b : p) b = static_cast<uint8_t>(g());
    if (decode(p.data(), p.size(), 9000, &d) == Reject::kNone) ++accepted;
  }
  EXPECT_EQ(accepted, 0);
}

}  // namespace
}  // namespace grex::wire
