// SPDX-License-Identifier: Apache-2.0
// The physical limit of GREX_WIRE_CRYPT=aes-gcm on one core: OpenSSL's
// AES-128-GCM sealing packets of the dpdk driver's payload size in a loop
// (nonce set, 88-byte header as AAD, payload encrypted, tag taken), and the
// same for a tag only (GREX_WIRE_AUTH=full) and a header only (control).
// Then grex's own header tag (wire::Sealer, what control packets take), each
// tag over the previous one's header, so one waits for the other: a seal,
// and a seal plus its open; a header encoded and decoded with and without
// its CRC (what a tag replaces); and grex's tag over a header and a payload
// (full).
// Prints one line per case: "<case> <bytes> <ns per packet> <Gbit/s of payload>".
// Usage: aes_gcm_loop [PAYLOAD_BYTES=8832] [SECONDS=1]
#include <openssl/evp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "transport/wire_auth.h"

int main(int argc, char** argv) {
  const size_t len = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 8832;
  const double secs = argc > 2 ? std::atof(argv[2]) : 1.0;
  unsigned char key[16] = {7}, iv[12] = {1}, tag[16], aad[88] = {3};
  std::vector<unsigned char> in(len, 0x5a), out(len);
  EVP_CIPHER_CTX* c = EVP_CIPHER_CTX_new();
  if (c == nullptr || EVP_EncryptInit_ex(c, EVP_aes_128_gcm(), nullptr, key, nullptr) != 1) return 1;
  struct Case {
    const char* name;
    size_t payload;
    bool encrypt;
  };
  for (const Case k : {Case{"header-tag", 0, false}, Case{"gmac", len, false}, Case{"aes-gcm", len, true}}) {
    uint64_t n = 0;
    const auto t0 = std::chrono::steady_clock::now();
    auto now = t0;
    while (std::chrono::duration<double>(now - t0).count() < secs) {
      for (int i = 0; i < 256; ++i, ++n) {
        int m = 0;
        iv[4] = static_cast<unsigned char>(n);
        iv[5] = static_cast<unsigned char>(n >> 8);
        EVP_EncryptInit_ex(c, nullptr, nullptr, nullptr, iv);
        EVP_EncryptUpdate(c, nullptr, &m, aad, sizeof aad);
        if (k.payload > 0) EVP_EncryptUpdate(c, k.encrypt ? out.data() : nullptr, &m, in.data(), static_cast<int>(k.payload));
        EVP_EncryptFinal_ex(c, tag, &m);
        EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, 16, tag);
      }
      now = std::chrono::steady_clock::now();
    }
    const double ns = std::chrono::duration<double, std::nano>(now - t0).count() / static_cast<double>(n);
    std::printf("%s %zu %.1f %.2f\n", k.name, k.payload, ns, k.payload * 8.0 / ns);
  }
  EVP_CIPHER_CTX_free(c);
  const uint8_t na[16] = {1}, nb[16] = {2};
  const grex::wire::DirectionKeys dk = grex::wire::derive_direction(
      grex::wire::derive_job_key("bench", "job"), "dpdk", na, nb, 0, 1, grex::wire::AuthMode::kControl);
  grex::wire::Sealer sealer, opener;
  if (!sealer.init(dk, true) || !opener.init(dk, false)) return 1;
  for (const bool open : {false, true}) {
    uint8_t hdr[grex::wire::kHeaderBytes] = {9};
    uint64_t n = 0, bad = 0;
    const auto t0 = std::chrono::steady_clock::now();
    auto now = t0;
    while (std::chrono::duration<double>(now - t0).count() < secs) {
      for (int i = 0; i < 256; ++i, ++n) {
        sealer.seal(n, hdr, grex::wire::kTaggedHeaderBytes, nullptr, 0, nullptr, hdr + grex::wire::kTagOffset);
        if (open && !opener.open(n, hdr, grex::wire::kTaggedHeaderBytes, nullptr, 0, nullptr, hdr + grex::wire::kTagOffset))
          ++bad;
        hdr[3] ^= hdr[grex::wire::kTagOffset];  // the next header depends on this tag
      }
      now = std::chrono::steady_clock::now();
    }
    if (bad != 0) return 1;
    const double ns = std::chrono::duration<double, std::nano>(now - t0).count() / static_cast<double>(n);
    std::printf("%s 0 %.1f 0.00\n", open ? "grex-header-seal-open" : "grex-header-seal", ns);
  }
  // What a tag now replaces: a header's CRC written by wire::encode and
  // checked as a receiver does (wire::crc_matches), against the same encode
  // and decode without it; each header depends on the one before.
  for (const bool crc : {false, true}) {
    grex::wire::Header h;
    h.type = grex::wire::Type::kAck;
    uint8_t buf[grex::wire::kHeaderBytes];
    uint64_t k = 0, bad = 0;
    const auto c0 = std::chrono::steady_clock::now();
    auto c1 = c0;
    while (std::chrono::duration<double>(c1 - c0).count() < secs) {
      for (int i = 0; i < 256; ++i, ++k) {
        grex::wire::encode(h, buf, nullptr, crc);
        grex::wire::Header got;
        if (grex::wire::decode_fields(buf, sizeof buf, 0, &got) != grex::wire::Reject::kNone ||
            (crc && !grex::wire::crc_matches(buf, got)))
          ++bad;
        h.psn = got.crc + got.ack + 1;  // the next header depends on this one
        h.ack = got.psn;
      }
      c1 = std::chrono::steady_clock::now();
    }
    if (bad != 0) return 1;
    std::printf("%s 0 %.1f 0.00\n", crc ? "grex-header-codec-crc" : "grex-header-codec",
                std::chrono::duration<double, std::nano>(c1 - c0).count() / static_cast<double>(k));
  }
  // A data packet under GREX_WIRE_AUTH=full: header and payload tagged by
  // wire::Sealer (its 512-bit GHASH where the CPU has it, else OpenSSL's GCM128).
  uint8_t hdr[grex::wire::kHeaderBytes] = {9};
  uint64_t n = 0;
  const auto t0 = std::chrono::steady_clock::now();
  auto now = t0;
  while (std::chrono::duration<double>(now - t0).count() < secs) {
    for (int i = 0; i < 256; ++i, ++n) {
      sealer.seal(n, hdr, grex::wire::kTaggedHeaderBytes, in.data(), len, nullptr, hdr + grex::wire::kTagOffset);
      hdr[3] ^= hdr[grex::wire::kTagOffset];
    }
    now = std::chrono::steady_clock::now();
  }
  const double ns = std::chrono::duration<double, std::nano>(now - t0).count() / static_cast<double>(n);
  std::printf("grex-full-seal %zu %.1f %.2f\n", len, ns, len * 8.0 / ns);
  return 0;
}
