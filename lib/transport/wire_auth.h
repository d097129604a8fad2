// SPDX-License-Identifier: Apache-2.0
// Who may speak on a datagram flow: keys derived from the job's secret,
// AES-128-GCM tags (and, by choice, encryption) on every packet, or on the
// control packets alone (GREX_WIRE_AUTH=control), and a replay window. The
// CRC in wire.h catches accidents; this catches strangers.
//
// Keys (RFC 5869 HKDF-SHA256 throughout):
//   job key   = HKDF(ikm = the job's secret, salt = the job id, "grex job key v1")
//               (Communicator::create derives it from the job token; DeviceOptions::job_key)
//   direction = HKDF(ikm = job key, salt = sender's nonce || receiver's nonce,
//                    "grex <driver> v4 <sender rank>><receiver rank> <mode>")
//               -> 16 B AES key, 4 B nonce salt, 4 B flow id
// The nonces are random per device and published in its address, so every
// device instance gets fresh keys and a sender's packet counter never repeats
// a GCM nonce (salt || counter) under one key. The flow id, the receiver's
// name for the flow on the wire, is keyed too: unguessable without the secret.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "transport/wire.h"

typedef struct evp_cipher_ctx_st EVP_CIPHER_CTX;
typedef struct gcm128_context GCM128_CONTEXT;

namespace grex::wire {

/// What a packet's tag covers [GREX_WIRE_AUTH, GREX_WIRE_CRYPT].
enum class AuthMode : uint8_t {
  kOff = 0,      ///< no tag: the CRC only (a stranger who sees one packet can forge)
  kControl = 1,  ///< control packets (CONNECT, ACK/NACK, CLOSE, TIMING) and adverts, with their
                 ///< entries; data packets (sends and writes) by CRC, their ACK fields ignored
  kHeaders = 2,  ///< the header of every packet and an advert's entries; data payloads by CRC
  kFull = 3,     ///< header and payload (the default)
  kEncrypt = 4,  ///< kFull with the payload encrypted (AES-GCM)
};
const char* auth_mode_name(AuthMode m) noexcept;
/// "off", "control", "headers", "full", "aes-gcm"; false for anything else.
bool parse_auth_mode(std::string_view s, AuthMode* out) noexcept;

/// Whether packets like h carry a tag in `mode` (and must have a valid one).
/// kControl leaves data packets untagged, adverts aside: an advert tells the
/// sender where to send, so a stranger must not make one.
inline bool packet_tagged(const Header& h, AuthMode mode) noexcept {
  if (mode == AuthMode::kOff) return false;
  return mode != AuthMode::kControl || h.type != Type::kData || (h.flags & kFlagAdvert) != 0;
}
/// Whether a tag in `mode` covers h's payload: kFull and up always, kControl
/// and kHeaders an advert's entries (control data) only.
inline bool tag_covers_payload(const Header& h, AuthMode mode) noexcept {
  return mode >= AuthMode::kFull || (h.type == Type::kData && (h.flags & kFlagAdvert) != 0);
}
/// Whether h's tag in `mode` vouches for all its CRC would: the header, and
/// the payload where the CRC covers it. Such packets go without a CRC (the
/// field zero) and are checked by their tag alone: a header's CRC, written
/// and checked, cost half what its tag does (issue 28, docs/security.md).
inline bool tag_replaces_crc(const Header& h, AuthMode mode) noexcept {
  return packet_tagged(h, mode) && (!crc_covers_payload(h) || tag_covers_payload(h, mode));
}
/// Whether the payload travels encrypted: kEncrypt, except an advert's entries
/// (authenticated, not secret).
inline bool payload_encrypted(const Header& h, AuthMode mode) noexcept {
  return mode == AuthMode::kEncrypt && h.payload_len > 0 && (h.flags & kFlagAdvert) == 0;
}

inline constexpr size_t kTagBytes = 16;
inline constexpr size_t kKeyBytes = 16;
inline constexpr size_t kJobKeyBytes = 32;
inline constexpr size_t kNonceBytes = 16;  ///< a device's random nonce (address field)

/// HKDF-SHA256 (extract then expand) into out[0..n). False if libcrypto fails.
bool hkdf_sha256(const void* ikm, size_t ikm_len, const void* salt, size_t salt_len, std::string_view info,
                 uint8_t* out, size_t n) noexcept;
/// Cryptographically random bytes (RAND_bytes). False if the generator fails.
bool random_bytes(uint8_t* out, size_t n) noexcept;
/// The job key from a secret and the job id (layout above), as 32 raw bytes.
std::string derive_job_key(std::string_view secret, std::string_view job_id);
std::string to_hex(const uint8_t* p, size_t n);
/// Parses exactly n bytes of hex; false on anything else.
bool from_hex(std::string_view hex, uint8_t* out, size_t n) noexcept;

/// Key material of one direction of a flow.
struct DirectionKeys {
  uint8_t key[kKeyBytes] = {};
  uint8_t salt[4] = {};
  uint32_t flow_id = 0;  ///< never 0
};
DirectionKeys derive_direction(std::string_view job_key, std::string_view driver, const uint8_t* src_nonce,
                               const uint8_t* dst_nonce, int src_rank, int dst_rank, AuthMode mode) noexcept;

/// AES-128-GCM for one direction; the nonce is salt || 64-bit packet counter.
/// Tags without encryption (every packet but an encrypted payload's) take a
/// fast path where the CPU has AES-NI and PCLMULQDQ: a header's (up to 112
/// bytes with an advert's entries) in grex's own GHASH, with E_K(J0) computed
/// eight counters ahead, about 30 ns; longer
/// ones through OpenSSL's GCM128 interface with an AES-NI block function.
/// EVP's per-call overhead (about 140 ns) is most of a short packet's tag.
/// Encryption, and other CPUs, use one EVP context, keyed once; each packet
/// only sets its nonce. Every path gives the same tags (wire_auth_test).
class Sealer {
 public:
  Sealer() = default;
  ~Sealer();
  Sealer(const Sealer&) = delete;
  Sealer& operator=(const Sealer&) = delete;
  /// `sealing`: this end sends (seal()); else it receives (open()).
  bool init(const DirectionKeys& k, bool sealing) noexcept;
  bool ready() const noexcept { return ctx_ != nullptr; }
  /// Tag over aad[0..aad_len) then the payload. With `out` the payload is
  /// encrypted into out (may equal payload); without, authenticated as is.
  bool seal(uint64_t seq, const uint8_t* aad, size_t aad_len, const uint8_t* payload, size_t len, uint8_t* out,
            uint8_t tag[kTagBytes]) noexcept;
  /// Checks a tag made by seal(); with `out` decrypts the payload into it.
  /// False: forged, corrupted or under another key (out is then garbage).
  bool open(uint64_t seq, const uint8_t* aad, size_t aad_len, const uint8_t* payload, size_t len, uint8_t* out,
            const uint8_t tag[kTagBytes]) noexcept;

 private:
  bool start(uint64_t seq) noexcept;
  void iv(uint64_t seq, uint8_t out[12]) const noexcept;
  /// The fast path's nonce and GHASH over aad then payload (gcm_ set).
  bool hash_fast(uint64_t seq, const uint8_t* aad, size_t aad_len, const uint8_t* payload, size_t len) noexcept;
  EVP_CIPHER_CTX* ctx_ = nullptr;
  GCM128_CONTEXT* gcm_ = nullptr;  // the tag-only path (nullptr: no AES-NI)
  /// A header's tag (aad and payload <= 112 bytes together) with AES-NI and
  /// PCLMULQDQ, one GHASH reduction: false where that path does not apply.
  bool small_tag(uint64_t seq, const uint8_t* aad, size_t aad_len, const uint8_t* payload, size_t len,
                 uint8_t tag[kTagBytes]) noexcept;
  // E_K(J0) of the counters pads_first_ .. pads_first_ + 7, computed together (small_tag).
  uint64_t pads_first_ = 0;
  bool pads_valid_ = false;
  alignas(16) uint8_t pads_[8][16] = {};
  /// A data packet's tag (a header and a long payload) with VPCLMULQDQ on
  /// 512-bit registers: false where that path does not apply.
  bool wide_tag(uint64_t seq, const uint8_t* aad, size_t aad_len, const uint8_t* payload, size_t len,
                uint8_t tag[kTagBytes]) noexcept;
  /// E_K(J0) of packet `seq` (from eight computed together).
  const uint8_t* pad(uint64_t seq) noexcept;
  static constexpr int kPowers = 32;
  struct alignas(16) RoundKeys {
    uint8_t rk[11][16];
    uint8_t hpow[kPowers][16];  // H^1 .. H^32, byte-reversed (small_tag, wide_tag)
  } keys_{};
  bool sealing_ = true;
  uint8_t salt_[4] = {};
};

/// Anti-replay: each packet counter is accepted once, and none older than
/// kBits below the highest seen (RFC 4303's window, wider for reordering).
class ReplayWindow {
 public:
  static constexpr uint64_t kBits = 1024;
  /// True (and remembered) the first time `seq` is seen inside the window.
  bool accept(uint64_t seq) noexcept;

 private:
  uint64_t top_ = 0;  // one past the highest accepted
  uint64_t bits_[kBits / 64] = {};
};

}  // namespace grex::wire
