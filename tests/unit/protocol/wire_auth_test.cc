// SPDX-License-Identifier: Apache-2.0
// Wire authentication: HKDF against RFC 5869's vectors, AES-GCM against a
// NIST vector, every flipped bit of a tagged packet refused, keys that differ
// per direction, rank, nonce and mode, the replay window.
#include <gtest/gtest.h>

#include <openssl/evp.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "transport/wire.h"
#include "transport/wire_auth.h"

namespace grex::wire {
namespace {

std::vector<uint8_t> unhex(std::string_view h) {
  std::vector<uint8_t> v(h.size() / 2);
  EXPECT_TRUE(from_hex(h, v.data(), v.size()));
  return v;
}

TEST(WireAuth, HkdfMatchesRfc5869Case1) {
  const auto ikm = unhex("0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b");
  const auto salt = unhex("000102030405060708090a0b0c");
  const auto info = unhex("f0f1f2f3f4f5f6f7f8f9");
  uint8_t okm[42];
  ASSERT_TRUE(hkdf_sha256(ikm.data(), ikm.size(), salt.data(), salt.size(),
                          std::string_view(reinterpret_cast<const char*>(info.data()), info.size()), okm, sizeof(okm)));
  EXPECT_EQ(to_hex(okm, sizeof(okm)),
            "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865");
}

TEST(WireAuth, GcmMatchesNistTestCase3) {
  // The GCM specification's test case 3 (AES-128, 96-bit IV, no AAD).
  DirectionKeys k;
  std::memcpy(k.key, unhex("feffe9928665731c6d6a8f9467308308").data(), 16);
  std::memcpy(k.salt, unhex("cafebabe").data(), 4);
  k.flow_id = 1;
  Sealer s;
  ASSERT_TRUE(s.init(k, true));
  const auto iv_tail = unhex("facedbaddecaf888");  // the counter, big-endian in the IV
  uint64_t seq = 0;
  for (int i = 0; i < 8; ++i) seq |= static_cast<uint64_t>(iv_tail[static_cast<size_t>(i)]) << (8 * i);
  const auto pt = unhex(
      "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de6"
      "57ba637b391aafd255");
  std::vector<uint8_t> ct(pt.size());
  uint8_t tag[kTagBytes];
  ASSERT_TRUE(s.seal(seq, nullptr, 0, pt.data(), pt.size(), ct.data(), tag));
  EXPECT_EQ(to_hex(ct.data(), ct.size()),
            "42831ec2217774244b7221b784d0d49ce3aa212f2c02a4e035c17e2329aca12e21d514b25466931c7d8f6a5aac84aa051ba30b396a0a"
            "ac973d58e091473f5985");
  EXPECT_EQ(to_hex(tag, sizeof(tag)), "4d5c2af327cd64a62cf35abd2ba6fab4");
  Sealer o;
  ASSERT_TRUE(o.init(k, false));
  std::vector<uint8_t> back(ct.size());
  ASSERT_TRUE(o.open(seq, nullptr, 0, ct.data(), ct.size(), back.data(), tag));
  EXPECT_EQ(back, pt);
}

struct Pair {
  DirectionKeys keys;
  Sealer tx, rx;
  Pair(AuthMode mode = AuthMode::kFull) {
    const std::string job = derive_job_key("token", "job-1");
    uint8_t a[kNonceBytes] = {1}, b[kNonceBytes] = {2};
    keys = derive_direction(job, "dpdk", a, b, 0, 1, mode);
    EXPECT_TRUE(tx.init(keys, true));
    EXPECT_TRUE(rx.init(keys, false));
  }
};

// The reference: OpenSSL's EVP AES-128-GCM tag over aad then payload (both
// as associated data), under a Pair's keys and nonce salt || seq.
class EvpTag {
 public:
  explicit EvpTag(const DirectionKeys& k) : c_(EVP_CIPHER_CTX_new()) {
    std::memcpy(iv_, k.salt, 4);
    ok_ = c_ != nullptr && EVP_EncryptInit_ex(c_, EVP_aes_128_gcm(), nullptr, k.key, nullptr) == 1;
  }
  ~EvpTag() { EVP_CIPHER_CTX_free(c_); }
  EvpTag(const EvpTag&) = delete;
  EvpTag& operator=(const EvpTag&) = delete;
  bool tag(uint64_t seq, const uint8_t* aad, size_t alen, const uint8_t* payload, size_t plen, uint8_t out[16]) {
    for (int i = 0; i < 8; ++i) iv_[4 + i] = static_cast<uint8_t>(seq >> (8 * i));
    int n = 0;
    return ok_ && EVP_EncryptInit_ex(c_, nullptr, nullptr, nullptr, iv_) == 1 &&
           (alen == 0 || EVP_EncryptUpdate(c_, nullptr, &n, aad, static_cast<int>(alen)) == 1) &&
           (plen == 0 || EVP_EncryptUpdate(c_, nullptr, &n, payload, static_cast<int>(plen)) == 1) &&
           EVP_EncryptFinal_ex(c_, out, &n) == 1 && EVP_CIPHER_CTX_ctrl(c_, EVP_CTRL_GCM_GET_TAG, 16, out) == 1;
  }

 private:
  EVP_CIPHER_CTX* c_;
  uint8_t iv_[12] = {};
  bool ok_ = false;
};

// A header of `type` on the pair's flow, under packet counter `seq`.
Header header_on(const Pair& p, Type type, uint64_t seq) {
  Header h;
  h.type = type;
  h.flow = p.keys.flow_id;
  h.seq = seq;
  return h;
}

TEST(WireAuth, EveryFlippedBitOfATaggedPacketIsRefused) {
  Pair p;
  Header h = header_on(p, Type::kData, 77);
  h.psn = 5;
  h.msg_len = 256;
  h.payload_len = 256;
  std::vector<uint8_t> pkt(kHeaderBytes + 256);
  for (size_t i = 0; i < 256; ++i) pkt[kHeaderBytes + i] = static_cast<uint8_t>(i);
  encode(h, pkt.data(), pkt.data() + kHeaderBytes);
  ASSERT_TRUE(p.tx.seal(h.seq, pkt.data(), kTaggedHeaderBytes, pkt.data() + kHeaderBytes, 256, nullptr,
                        pkt.data() + kTagOffset));
  ASSERT_TRUE(p.rx.open(h.seq, pkt.data(), kTaggedHeaderBytes, pkt.data() + kHeaderBytes, 256, nullptr,
                        pkt.data() + kTagOffset));
  for (size_t bit = 0; bit < 8 * pkt.size(); ++bit) {
    auto q = pkt;
    q[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    EXPECT_FALSE(p.rx.open(h.seq, q.data(), kTaggedHeaderBytes, q.data() + kHeaderBytes, 256, nullptr,
                           q.data() + kTagOffset))
        << "bit " << bit;
  }
  // The same bytes under another counter (a replayed tag on a new seq) fail too.
  EXPECT_FALSE(p.rx.open(h.seq + 1, pkt.data(), kTaggedHeaderBytes, pkt.data() + kHeaderBytes, 256, nullptr,
                         pkt.data() + kTagOffset));
}

// Tags without encryption take Sealer's fast path (GCM128 with AES-NI where
// the CPU has it): they must equal OpenSSL's EVP AES-128-GCM, for any split
// of header and payload lengths (GHASH carries partial blocks across them).
TEST(WireAuth, TagOnlyPathMatchesEvpGcm) {
  Pair p;
  EvpTag ref(p.keys);
  std::vector<uint8_t> bytes(9000);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 131 + 7);
  uint64_t seq = 1;
  std::vector<std::pair<size_t, size_t>> splits;
  for (size_t alen : {0, 1, 15, 16, 17, 88})
    for (size_t plen : {0, 1, 8, 24, 100, 4096, 8832}) splits.emplace_back(alen, plen);
  for (size_t total = 0; total <= 130; ++total)  // around the 112-byte edge of the header path
    splits.emplace_back(total * 7 % (total + 1), total - total * 7 % (total + 1));
  size_t k = 0;
  for (auto [alen, plen] : splits) {
    {
      // Counters in order, then jumping about (a receiver sees reordering):
      // the precomputed E_K(J0) of the header path must follow either way.
      seq = k < splits.size() / 2 ? seq + 1 : 5000 + (k * 37) % 101;
      ++k;
      uint8_t want[16], got[16];
      ASSERT_TRUE(ref.tag(seq, bytes.data(), alen, bytes.data() + 100, plen, want));
      ASSERT_TRUE(p.tx.seal(seq, bytes.data(), alen, bytes.data() + 100, plen, nullptr, got));
      EXPECT_EQ(to_hex(got, 16), to_hex(want, 16)) << "aad " << alen << " payload " << plen;
      EXPECT_TRUE(p.rx.open(seq, bytes.data(), alen, bytes.data() + 100, plen, nullptr, want));
    }
  }
}

// Long payloads take the 512-bit GHASH where the CPU has VPCLMULQDQ and
// AVX-512 (whole groups of 32 blocks, then the rest): every header length up
// to the path's 128 bytes (and past it, the fallback), payloads around the
// group edges, at payload addresses of every alignment mod 16, in random
// bytes; a flipped bit anywhere in the payload is refused.
TEST(WireAuth, WideTagPathMatchesEvpGcm) {
#if defined(__x86_64__)
  const bool wide = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                    __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("vpclmulqdq");
  std::printf("512-bit GHASH path: %s on this CPU\n", wide ? "taken" : "not available (OpenSSL's GCM128 instead)");
#endif
  Pair p;
  EvpTag ref(p.keys);
  std::vector<uint8_t> bytes(20000);
  uint32_t x = 12345;
  for (auto& b : bytes) b = static_cast<uint8_t>((x = x * 1664525u + 1013904223u) >> 24);
  uint64_t seq = 40;
  size_t cases = 0;
  for (size_t alen : {0, 8, 15, 16, 17, 88, 120, 128, 129})
    for (size_t plen : {500, 511, 512, 513, 527, 528, 1023, 1024, 1031, 4096, 8191, 8192, 8832, 9000, 16384})
      for (size_t at : {200, 201, 207, 215}) {
        seq = cases % 5 == 4 ? seq + 1000 : seq + 1;  // mostly in order, now and then a jump
        ++cases;
        uint8_t want[16], got[16];
        ASSERT_TRUE(ref.tag(seq, bytes.data(), alen, bytes.data() + at, plen, want));
        ASSERT_TRUE(p.tx.seal(seq, bytes.data(), alen, bytes.data() + at, plen, nullptr, got));
        ASSERT_EQ(to_hex(got, 16), to_hex(want, 16)) << "aad " << alen << " payload " << plen << " at " << at;
        EXPECT_TRUE(p.rx.open(seq, bytes.data(), alen, bytes.data() + at, plen, nullptr, want));
        // A flipped bit at either end of the payload, or inside a group.
        for (size_t flip : {size_t{0}, plen / 2, plen - 1}) {
          bytes[at + flip] ^= 0x10;
          EXPECT_FALSE(p.rx.open(seq, bytes.data(), alen, bytes.data() + at, plen, nullptr, want))
              << "aad " << alen << " payload " << plen << " bit flipped at " << flip;
          bytes[at + flip] ^= 0x10;
        }
      }
}

TEST(WireAuth, EncryptionHidesAndRestoresThePayload) {
  Pair p(AuthMode::kEncrypt);
  uint8_t hdr[kTaggedHeaderBytes] = {9, 8, 7};
  std::vector<uint8_t> plain(8832), buf;
  for (size_t i = 0; i < plain.size(); ++i) plain[i] = static_cast<uint8_t>(i * 31);
  buf = plain;
  uint8_t tag[kTagBytes];
  ASSERT_TRUE(p.tx.seal(3, hdr, sizeof(hdr), buf.data(), buf.size(), buf.data(), tag));  // in place
  EXPECT_NE(buf, plain);
  ASSERT_TRUE(p.rx.open(3, hdr, sizeof(hdr), buf.data(), buf.size(), buf.data(), tag));
  EXPECT_EQ(buf, plain);
}

TEST(WireAuth, KeysDifferPerDirectionRankNonceModeAndSecret) {
  uint8_t a[kNonceBytes] = {1}, b[kNonceBytes] = {2}, c[kNonceBytes] = {3};
  const std::string job = derive_job_key("token", "job-1");
  ASSERT_EQ(job.size(), kJobKeyBytes);
  auto id = [&](const std::string& j, const uint8_t* s, const uint8_t* d, int sr, int dr, AuthMode m) {
    DirectionKeys k = derive_direction(j, "dpdk", s, d, sr, dr, m);
    EXPECT_NE(k.flow_id, 0u);
    return to_hex(k.key, kKeyBytes) + to_hex(k.salt, 4) + std::to_string(k.flow_id);
  };
  const std::string base = id(job, a, b, 0, 1, AuthMode::kFull);
  EXPECT_EQ(base, id(job, a, b, 0, 1, AuthMode::kFull));  // both ends derive the same
  EXPECT_NE(base, id(job, b, a, 1, 0, AuthMode::kFull));  // the other direction
  EXPECT_NE(base, id(job, a, b, 0, 2, AuthMode::kFull));
  EXPECT_NE(base, id(job, a, c, 0, 1, AuthMode::kFull));  // a new device instance
  EXPECT_NE(base, id(job, a, b, 0, 1, AuthMode::kControl));
  EXPECT_NE(base, id(derive_job_key("other token", "job-1"), a, b, 0, 1, AuthMode::kFull));
  EXPECT_NE(base, id(derive_job_key("token", "job-2"), a, b, 0, 1, AuthMode::kFull));
}

TEST(WireAuth, ReplayWindowAcceptsEachCounterOnce) {
  ReplayWindow w;
  EXPECT_TRUE(w.accept(0));
  EXPECT_FALSE(w.accept(0));
  EXPECT_TRUE(w.accept(5));
  EXPECT_TRUE(w.accept(3));  // reordered: still new
  EXPECT_FALSE(w.accept(3));
  EXPECT_FALSE(w.accept(5));
  EXPECT_TRUE(w.accept(5000));
  EXPECT_FALSE(w.accept(5000 - ReplayWindow::kBits));  // too old to tell
  EXPECT_TRUE(w.accept(5000 - ReplayWindow::kBits + 1));
  EXPECT_FALSE(w.accept(4));  // never seen, but older than the window: refused
}

TEST(WireAuth, ModesParse) {
  AuthMode m;
  for (auto s : {"off", "control", "headers", "full", "aes-gcm"}) {
    ASSERT_TRUE(parse_auth_mode(s, &m)) << s;
    EXPECT_STREQ(auth_mode_name(m), s);
  }
  EXPECT_FALSE(parse_auth_mode("on", &m));
}

// What each mode tags: control the control packets and adverts, not data
// (sends and writes); headers and up every packet; off none.
TEST(WireAuth, WhichPacketsCarryATag) {
  Header ack, data, advert, write, close;
  ack.type = Type::kAck;
  close.type = Type::kClose;
  data.type = advert.type = write.type = Type::kData;
  advert.flags = kFlagAdvert;
  write.flags = kFlagWrite;
  for (const Header* h : {&ack, &close, &advert}) {
    EXPECT_TRUE(packet_tagged(*h, AuthMode::kControl));
    EXPECT_TRUE(packet_tagged(*h, AuthMode::kHeaders));
    EXPECT_FALSE(packet_tagged(*h, AuthMode::kOff));
  }
  for (const Header* h : {&data, &write}) {
    EXPECT_FALSE(packet_tagged(*h, AuthMode::kControl));
    EXPECT_TRUE(packet_tagged(*h, AuthMode::kHeaders));
    EXPECT_TRUE(packet_tagged(*h, AuthMode::kFull));
    EXPECT_FALSE(tag_covers_payload(*h, AuthMode::kHeaders));
    EXPECT_TRUE(tag_covers_payload(*h, AuthMode::kFull));
  }
  EXPECT_TRUE(tag_covers_payload(advert, AuthMode::kControl));
}

// A tag stands in for the CRC where it covers all the CRC would: every
// tagged header, and the payload where the CRC covers it (headers mode
// leaves a data payload to its CRC). Such a packet goes without a CRC, and
// every flipped bit of it is still refused, by the tag.
TEST(WireAuth, ATagStandsInForTheCrcWhereItCoversAllTheCrcWould) {
  Header ack, data, crc_data, advert;
  ack.type = Type::kAck;
  data.type = crc_data.type = advert.type = Type::kData;
  crc_data.flags = kFlagPayloadCrc;
  advert.flags = kFlagAdvert;
  for (const Header* h : {&ack, &data, &crc_data, &advert}) EXPECT_FALSE(tag_replaces_crc(*h, AuthMode::kOff));
  EXPECT_TRUE(tag_replaces_crc(ack, AuthMode::kControl));
  EXPECT_TRUE(tag_replaces_crc(advert, AuthMode::kControl));
  EXPECT_FALSE(tag_replaces_crc(data, AuthMode::kControl));
  EXPECT_FALSE(tag_replaces_crc(crc_data, AuthMode::kControl));
  EXPECT_TRUE(tag_replaces_crc(data, AuthMode::kHeaders));
  EXPECT_FALSE(tag_replaces_crc(crc_data, AuthMode::kHeaders));
  EXPECT_TRUE(tag_replaces_crc(advert, AuthMode::kHeaders));
  for (const Header* h : {&ack, &data, &crc_data, &advert}) {
    EXPECT_TRUE(tag_replaces_crc(*h, AuthMode::kFull));
    EXPECT_TRUE(tag_replaces_crc(*h, AuthMode::kEncrypt));
  }
  Pair p;
  Header h = header_on(p, Type::kAck, 9);
  h.ack = 41;
  std::vector<uint8_t> pkt(kHeaderBytes);
  encode(h, pkt.data(), nullptr, false);
  ASSERT_TRUE(p.tx.seal(h.seq, pkt.data(), kTaggedHeaderBytes, nullptr, 0, nullptr, pkt.data() + kTagOffset));
  Header got;
  ASSERT_EQ(decode_fields(pkt.data(), pkt.size(), 0, &got), Reject::kNone);
  EXPECT_FALSE(crc_matches(pkt.data(), got));
  ASSERT_TRUE(p.rx.open(h.seq, pkt.data(), kTaggedHeaderBytes, nullptr, 0, nullptr, pkt.data() + kTagOffset));
  for (size_t bit = 0; bit < 8 * kTagOffset; ++bit) {
    auto q = pkt;
    q[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    EXPECT_FALSE(p.rx.open(h.seq, q.data(), kTaggedHeaderBytes, nullptr, 0, nullptr, q.data() + kTagOffset))
        << "bit " << bit;
  }
}

}  // namespace
}  // namespace grex::wire
