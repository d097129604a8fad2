// SPDX-License-Identifier: Apache-2.0
// HKDF, AES-128-GCM tags and the replay window of wire_auth.h (OpenSSL libcrypto).
#include "transport/wire_auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/modes.h>
#include <openssl/rand.h>

#include <cstring>

#include "core/intrinsics.h"

namespace grex::wire {

#if defined(__x86_64__)
namespace {

// AES-128 with AES-NI: the key schedule (FIPS 197's expansion, one
// aeskeygenassist a round) and one block's encryption, for GCM128's block
// function. The round keys are 11 x 16 bytes at `keys`.
__m128i next_round_key(__m128i k, __m128i assist) {
  assist = _mm_shuffle_epi32(assist, 0xff);
  k = _mm_xor_si128(k, _mm_slli_si128(k, 4));
  k = _mm_xor_si128(k, _mm_slli_si128(k, 4));
  k = _mm_xor_si128(k, _mm_slli_si128(k, 4));
  return _mm_xor_si128(k, assist);
}

template <int kRcon>
__attribute__((target("aes,sse4.1"))) __m128i round_key(__m128i k) {
  return next_round_key(k, _mm_aeskeygenassist_si128(k, kRcon));
}

__attribute__((target("aes,sse4.1"))) void aes128_schedule(const uint8_t key[16], uint8_t out[11][16]) {
  __m128i k = _mm_loadu_si128(reinterpret_cast<const __m128i*>(key));
  __m128i r[11];
  r[0] = k;
  r[1] = round_key<0x01>(r[0]);
  r[2] = round_key<0x02>(r[1]);
  r[3] = round_key<0x04>(r[2]);
  r[4] = round_key<0x08>(r[3]);
  r[5] = round_key<0x10>(r[4]);
  r[6] = round_key<0x20>(r[5]);
  r[7] = round_key<0x40>(r[6]);
  r[8] = round_key<0x80>(r[7]);
  r[9] = round_key<0x1b>(r[8]);
  r[10] = round_key<0x36>(r[9]);
  for (int i = 0; i < 11; ++i) _mm_storeu_si128(reinterpret_cast<__m128i*>(out[i]), r[i]);
}

__attribute__((target("aes,sse4.1"))) void aes128_block(const unsigned char in[16], unsigned char out[16],
                                                      const void* keys) {
  const auto* rk = static_cast<const uint8_t(*)[16]>(keys);
  __m128i b = _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in)),
                            _mm_loadu_si128(reinterpret_cast<const __m128i*>(rk[0])));
  for (int i = 1; i < 10; ++i) b = _mm_aesenc_si128(b, _mm_loadu_si128(reinterpret_cast<const __m128i*>(rk[i])));
  b = _mm_aesenclast_si128(b, _mm_loadu_si128(reinterpret_cast<const __m128i*>(rk[10])));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), b);
}

// GHASH (SP 800-38D) with PCLMULQDQ. Blocks are byte-reversed on load, so
// GCM's bit order (x^0 is the first byte's top bit) becomes fully reversed
// polynomials: their carry-less product is the reversed product one bit
// short, hence the shift left by one before reducing modulo
// x^128 + x^7 + x^2 + x + 1 (folding the low half into the high half).
#define GREX_GHASH_TARGET __attribute__((target("aes,pclmul,sse4.1,ssse3")))

struct Wide {
  __m128i lo, hi;
};

GREX_GHASH_TARGET inline __m128i bswap128(__m128i x) {
  return _mm_shuffle_epi8(x, _mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
}

GREX_GHASH_TARGET inline Wide clmul_wide(__m128i a, __m128i b) {
  const __m128i mid = _mm_xor_si128(_mm_clmulepi64_si128(a, b, 0x01), _mm_clmulepi64_si128(a, b, 0x10));
  return {_mm_xor_si128(_mm_clmulepi64_si128(a, b, 0x00), _mm_slli_si128(mid, 8)),
          _mm_xor_si128(_mm_clmulepi64_si128(a, b, 0x11), _mm_srli_si128(mid, 8))};
}

GREX_GHASH_TARGET inline __m128i shr128(__m128i v, int n) {
  return _mm_or_si128(_mm_srli_epi64(v, n), _mm_slli_epi64(_mm_srli_si128(v, 8), 64 - n));
}

GREX_GHASH_TARGET inline __m128i reduce(Wide w) {
  const __m128i lc = _mm_srli_epi64(w.lo, 63), hc = _mm_srli_epi64(w.hi, 63);
  __m128i lo = _mm_or_si128(_mm_slli_epi64(w.lo, 1), _mm_slli_si128(lc, 8));
  const __m128i hi =
      _mm_or_si128(_mm_or_si128(_mm_slli_epi64(w.hi, 1), _mm_slli_si128(hc, 8)), _mm_srli_si128(lc, 8));
  const __m128i t = _mm_xor_si128(_mm_xor_si128(_mm_slli_epi64(lo, 63), _mm_slli_epi64(lo, 62)), _mm_slli_epi64(lo, 57));
  lo = _mm_xor_si128(lo, _mm_slli_si128(t, 8));
  return _mm_xor_si128(hi, _mm_xor_si128(lo, _mm_xor_si128(shr128(lo, 1), _mm_xor_si128(shr128(lo, 2), shr128(lo, 7)))));
}

GREX_GHASH_TARGET inline __m128i aes128(__m128i b, const uint8_t (*rk)[16]) {
  b = _mm_xor_si128(b, _mm_loadu_si128(reinterpret_cast<const __m128i*>(rk[0])));
  for (int i = 1; i < 10; ++i) b = _mm_aesenc_si128(b, _mm_loadu_si128(reinterpret_cast<const __m128i*>(rk[i])));
  return _mm_aesenclast_si128(b, _mm_loadu_si128(reinterpret_cast<const __m128i*>(rk[10])));
}

// H, H^2 .. H^n (byte-reversed) for a key's round keys.
GREX_GHASH_TARGET void ghash_powers(const uint8_t (*rk)[16], uint8_t (*out)[16], int n) {
  const __m128i h = bswap128(aes128(_mm_setzero_si128(), rk));
  __m128i p = h;
  for (int i = 0; i < n; ++i) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out[i]), p);
    p = reduce(clmul_wide(p, h));
  }
}

// E_K(J0) for the nonces salt || seq .. salt || seq + kPads - 1 (J0 = nonce
// || 0x00000001), eight AES-NI pipelines at once: a packet's tag then needs
// no AES of its own (counters mostly come in order, both ways).
constexpr int kPads = 8;
GREX_GHASH_TARGET void gcm_pads(const uint8_t (*rk)[16], const uint8_t salt[4], uint64_t seq, uint8_t (*out)[16]) {
  __m128i b[kPads];
  for (int i = 0; i < kPads; ++i) {
    alignas(16) uint8_t j0[16] = {};
    std::memcpy(j0, salt, 4);
    const uint64_t s = seq + static_cast<uint64_t>(i);
    for (int k = 0; k < 8; ++k) j0[4 + k] = static_cast<uint8_t>(s >> (8 * k));
    j0[15] = 1;
    b[i] = _mm_xor_si128(_mm_load_si128(reinterpret_cast<const __m128i*>(j0)),
                         _mm_loadu_si128(reinterpret_cast<const __m128i*>(rk[0])));
  }
  for (int r = 1; r < 10; ++r) {
    const __m128i k = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rk[r]));
    for (auto& x : b) x = _mm_aesenc_si128(x, k);
  }
  const __m128i k = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rk[10]));
  for (int i = 0; i < kPads; ++i) _mm_storeu_si128(reinterpret_cast<__m128i*>(out[i]), _mm_aesenclast_si128(b[i], k));
}

// The GCM tag over associated data `a` (n <= kSmallAad bytes, no ciphertext)
// given E_K(J0) of its nonce: every block (and the length block) times its
// power of H, summed unreduced, one reduction.
constexpr size_t kSmallAad = 7 * 16;
GREX_GHASH_TARGET void gmac_small(const uint8_t (*hp)[16], const uint8_t ek_bytes[16], const uint8_t* a, size_t n,
                                  uint8_t tag[16]) {
  const __m128i ek = _mm_loadu_si128(reinterpret_cast<const __m128i*>(ek_bytes));
  const size_t blocks = (n + 15) / 16 + 1;  // with the length block
  auto power = [&](size_t j) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(hp[blocks - j - 1])); };
  Wide acc{_mm_setzero_si128(), _mm_setzero_si128()};
  size_t j = 0;
  for (; 16 * (j + 1) <= n; ++j) {
    const Wide p = clmul_wide(bswap128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + 16 * j))), power(j));
    acc = {_mm_xor_si128(acc.lo, p.lo), _mm_xor_si128(acc.hi, p.hi)};
  }
  if (16 * j < n) {
    // A header's tail is 8 bytes (88 = 5 x 16 + 8): one 8-byte load. Other
    // tails go through a zeroed block (its store then load stalls forwarding).
    __m128i tail;
    if (n - 16 * j == 8) {
      tail = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(a + 16 * j));
    } else {
      alignas(16) uint8_t last[16] = {};
      std::memcpy(last, a + 16 * j, n - 16 * j);
      tail = _mm_load_si128(reinterpret_cast<const __m128i*>(last));
    }
    const Wide p = clmul_wide(bswap128(tail), power(j));
    acc = {_mm_xor_si128(acc.lo, p.lo), _mm_xor_si128(acc.hi, p.hi)};
    ++j;
  }
  // [bits of A]64 || [bits of C = 0]64, big-endian: byte-reversed, A's bits are the high lane.
  const Wide p = clmul_wide(_mm_set_epi64x(static_cast<long long>(n * 8), 0), power(j));
  acc = {_mm_xor_si128(acc.lo, p.lo), _mm_xor_si128(acc.hi, p.hi)};
  _mm_storeu_si128(reinterpret_cast<__m128i*>(tag), _mm_xor_si128(bswap128(reduce(acc)), ek));
}

bool have_aesni() noexcept {
  static const bool yes = __builtin_cpu_supports("aes") && __builtin_cpu_supports("pclmul");
  return yes;
}

// Long strings (a data packet's header and payload): GHASH with VPCLMULQDQ
// on 512-bit registers, four blocks per instruction. Horner's rule
// aggregated over groups of kWideBlocks: Y' = (Y + X1) H^32 + X2 H^31 + ...
// + X32 H, the products summed unreduced and reduced once per group, so the
// only chain from group to group is one multiplication and one reduction.
// A data packet's tag 2.2x faster than OpenSSL 3.0's here (docs/security.md); every tag is the
// one GCM defines (wire_auth_test checks it against OpenSSL's at many lengths).
#define GREX_GHASH_WIDE_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,vpclmulqdq,aes,pclmul,sse4.1,ssse3")))
constexpr int kWideBlocks = 32;          // blocks per reduction
constexpr size_t kWideMinBytes = 512;    // shorter strings: OpenSSL's GCM128 (one group is 512 B)
constexpr size_t kWideMaxHead = 128;     // header bytes this path takes (a header is 88)

bool have_wide_ghash() noexcept {
  static const bool yes = have_aesni() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("vpclmulqdq");
  return yes;
}

// (Y + B1) H^k + B2 H^(k-1) + ... + Bk H (k <= 32 blocks at p, byte order as
// on the wire), reduced. Inlined into the 512-bit code, so it is encoded as
// that code is: a call to legacy SSE code with the upper halves of the
// registers dirty stalled each time (a third of a 1 KiB packet's tag).
GREX_GHASH_TARGET __attribute__((always_inline)) inline __m128i ghash_run(__m128i y, const uint8_t* p, size_t k,
                                                                           const uint8_t (*hp)[16]) {
  if (k == 0) return y;
  Wide acc{_mm_setzero_si128(), _mm_setzero_si128()};
  for (size_t i = 0; i < k; ++i) {
    __m128i x = bswap128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * i)));
    if (i == 0) x = _mm_xor_si128(x, y);
    const Wide w = clmul_wide(x, _mm_loadu_si128(reinterpret_cast<const __m128i*>(hp[k - i - 1])));
    acc = {_mm_xor_si128(acc.lo, w.lo), _mm_xor_si128(acc.hi, w.hi)};
  }
  return reduce(acc);
}

// The xor of a 512-bit register's four 128-bit lanes.
GREX_GHASH_WIDE_TARGET inline __m128i fold_lanes(__m512i v) {
  const __m256i t = _mm256_xor_si256(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
  return _mm_xor_si128(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
}

// Groups of kWideBlocks at p (n_groups of them); hp[i] = H^(i + 1).
GREX_GHASH_WIDE_TARGET __m128i ghash_wide(__m128i y, const uint8_t* p, size_t n_groups, const uint8_t (*hp)[16]) {
  const __m512i rev = _mm512_broadcast_i32x4(_mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  // Register g multiplies blocks 4g .. 4g + 3 of a group by H^(32 - 4g) .. H^(29 - 4g):
  // hp[28 - 4g .. 31 - 4g] with its four lanes in reverse order.
  __m512i h[kWideBlocks / 4];
  for (int g = 0; g < kWideBlocks / 4; ++g) {
    const __m512i v = _mm512_loadu_si512(hp[kWideBlocks - 4 - 4 * g]);
    h[g] = _mm512_shuffle_i64x2(v, v, 0x1b);
  }
  for (size_t q = 0; q < n_groups; ++q, p += 16 * kWideBlocks) {
    __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512(), mid = _mm512_setzero_si512();
    // The registers that do not wait for y first; the first, which does, last.
    for (int k = 1; k <= kWideBlocks / 4; ++k) {
      const int g = k % (kWideBlocks / 4);
      __m512i x = _mm512_shuffle_epi8(_mm512_loadu_si512(p + 64 * g), rev);
      if (g == 0) x = _mm512_xor_si512(x, _mm512_zextsi128_si512(y));
      lo = _mm512_xor_si512(lo, _mm512_clmulepi64_epi128(x, h[g], 0x00));
      hi = _mm512_xor_si512(hi, _mm512_clmulepi64_epi128(x, h[g], 0x11));
      mid = _mm512_ternarylogic_epi64(mid, _mm512_clmulepi64_epi128(x, h[g], 0x01),
                                      _mm512_clmulepi64_epi128(x, h[g], 0x10), 0x96);  // a ^ b ^ c
    }
    const __m128i m = fold_lanes(mid);
    y = reduce({_mm_xor_si128(fold_lanes(lo), _mm_slli_si128(m, 8)), _mm_xor_si128(fold_lanes(hi), _mm_srli_si128(m, 8))});
  }
  return y;
}

// The GCM tag over associated data aad || payload (no ciphertext), given
// E_K(J0): aad (<= kWideMaxHead bytes) and the payload's first bytes up to a
// block boundary, then the payload's whole groups wide, its last blocks, the
// length block. False where the payload ends inside the first block.
GREX_GHASH_WIDE_TARGET bool gmac_wide(const uint8_t (*hp)[16], const uint8_t ek_bytes[16],
                                      const uint8_t* aad, size_t aad_len, const uint8_t* payload, size_t len,
                                      uint8_t tag[16]) {
  const size_t fill = (16 - aad_len % 16) % 16;
  if (aad_len > kWideMaxHead || len < fill) return false;
  alignas(16) uint8_t head[kWideMaxHead + 16];
  std::memcpy(head, aad, aad_len);
  std::memcpy(head + aad_len, payload, fill);
  __m128i y = ghash_run(_mm_setzero_si128(), head, (aad_len + fill) / 16, hp);
  const uint8_t* p = payload + fill;
  size_t rest = len - fill;
  const size_t groups = rest / (16 * kWideBlocks);
  y = ghash_wide(y, p, groups, hp);
  p += groups * 16 * kWideBlocks;
  rest -= groups * 16 * kWideBlocks;
  // Up to 31 whole blocks, then the last partial block (zero-padded) and the length block.
  const size_t whole = rest / 16;
  y = ghash_run(y, p, whole, hp);
  p += 16 * whole;
  rest -= 16 * whole;
  alignas(16) uint8_t last[32] = {};
  size_t k = 0;
  if (rest > 0) {
    std::memcpy(last, p, rest);
    k = 1;
  }
  // [bits of A]64 || [bits of C = 0]64, big-endian.
  const uint64_t bits = static_cast<uint64_t>(aad_len + len) * 8;
  for (int i = 0; i < 8; ++i) last[16 * k + static_cast<size_t>(i)] = static_cast<uint8_t>(bits >> (56 - 8 * i));
  y = ghash_run(y, last, k + 1, hp);
  const __m128i ek = _mm_loadu_si128(reinterpret_cast<const __m128i*>(ek_bytes));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(tag), _mm_xor_si128(bswap128(y), ek));
  return true;
}

}  // namespace
#endif

const char* auth_mode_name(AuthMode m) noexcept {
  switch (m) {
    case AuthMode::kOff: return "off";
    case AuthMode::kControl: return "control";
    case AuthMode::kHeaders: return "headers";
    case AuthMode::kFull: return "full";
    case AuthMode::kEncrypt: return "aes-gcm";
  }
  return "?";
}

bool parse_auth_mode(std::string_view s, AuthMode* out) noexcept {
  if (s == "off") *out = AuthMode::kOff;
  else if (s == "control") *out = AuthMode::kControl;
  else if (s == "headers") *out = AuthMode::kHeaders;
  else if (s == "full") *out = AuthMode::kFull;
  else if (s == "aes-gcm") *out = AuthMode::kEncrypt;
  else return false;
  return true;
}

bool hkdf_sha256(const void* ikm, size_t ikm_len, const void* salt, size_t salt_len, std::string_view info,
                 uint8_t* out, size_t n) noexcept {
  EVP_PKEY_CTX* c = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, nullptr);
  if (c == nullptr) return false;
  // An empty salt is HKDF's zero salt; OpenSSL wants a non-null pointer.
  static const uint8_t kZero[1] = {0};
  bool ok = EVP_PKEY_derive_init(c) > 0 && EVP_PKEY_CTX_set_hkdf_md(c, EVP_sha256()) > 0 &&
            EVP_PKEY_CTX_set1_hkdf_key(c, static_cast<const unsigned char*>(ikm), static_cast<int>(ikm_len)) > 0 &&
            (salt_len == 0 ? EVP_PKEY_CTX_set1_hkdf_salt(c, kZero, 0)
                           : EVP_PKEY_CTX_set1_hkdf_salt(c, static_cast<const unsigned char*>(salt),
                                                         static_cast<int>(salt_len))) > 0 &&
            EVP_PKEY_CTX_add1_hkdf_info(c, reinterpret_cast<const unsigned char*>(info.data()),
                                        static_cast<int>(info.size())) > 0;
  size_t len = n;
  ok = ok && EVP_PKEY_derive(c, out, &len) > 0 && len == n;
  EVP_PKEY_CTX_free(c);
  return ok;
}

bool random_bytes(uint8_t* out, size_t n) noexcept { return RAND_bytes(out, static_cast<int>(n)) == 1; }

std::string derive_job_key(std::string_view secret, std::string_view job_id) {
  std::string k(kJobKeyBytes, '\0');
  if (!hkdf_sha256(secret.data(), secret.size(), job_id.data(), job_id.size(), "grex job key v1",
                   reinterpret_cast<uint8_t*>(k.data()), k.size()))
    return {};
  return k;
}

std::string to_hex(const uint8_t* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = d[p[i] >> 4];
    s[2 * i + 1] = d[p[i] & 15];
  }
  return s;
}

bool from_hex(std::string_view hex, uint8_t* out, size_t n) noexcept {
  if (hex.size() != 2 * n) return false;
  auto nib = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < n; ++i) {
    int hi = nib(hex[2 * i]), lo = nib(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return true;
}

DirectionKeys derive_direction(std::string_view job_key, std::string_view driver, const uint8_t* src_nonce,
                               const uint8_t* dst_nonce, int src_rank, int dst_rank, AuthMode mode) noexcept {
  uint8_t salt[2 * kNonceBytes];
  std::memcpy(salt, src_nonce, kNonceBytes);
  std::memcpy(salt + kNonceBytes, dst_nonce, kNonceBytes);
  char info[96];
  int n = std::snprintf(info, sizeof(info), "grex %.*s v4 %d>%d %s", static_cast<int>(driver.size()), driver.data(),
                        src_rank, dst_rank, auth_mode_name(mode));
  uint8_t okm[kKeyBytes + 8];
  DirectionKeys k;
  if (!hkdf_sha256(job_key.data(), job_key.size(), salt, sizeof(salt),
                   std::string_view(info, static_cast<size_t>(std::max(n, 0))), okm, sizeof(okm)))
    return k;  // flow_id 0: the caller reports the failure
  std::memcpy(k.key, okm, kKeyBytes);
  std::memcpy(k.salt, okm + kKeyBytes, 4);
  uint32_t id;
  std::memcpy(&id, okm + kKeyBytes + 4, 4);
  k.flow_id = id != 0 ? id : 1;
  return k;
}

Sealer::~Sealer() {
  if (ctx_ != nullptr) EVP_CIPHER_CTX_free(ctx_);
  if (gcm_ != nullptr) CRYPTO_gcm128_release(gcm_);
}

bool Sealer::init(const DirectionKeys& k, bool sealing) noexcept {
  if (ctx_ == nullptr && (ctx_ = EVP_CIPHER_CTX_new()) == nullptr) return false;
  sealing_ = sealing;
  std::memcpy(salt_, k.salt, sizeof(salt_));
  pads_valid_ = false;
  // Keyed once here (the AES key schedule and GHASH key); start() sets only the nonce.
  const int r = sealing ? EVP_EncryptInit_ex(ctx_, EVP_aes_128_gcm(), nullptr, k.key, nullptr)
                        : EVP_DecryptInit_ex(ctx_, EVP_aes_128_gcm(), nullptr, k.key, nullptr);
  if (r != 1) {
    EVP_CIPHER_CTX_free(ctx_);
    ctx_ = nullptr;
    return false;
  }
#if defined(__x86_64__)
  if (gcm_ != nullptr) CRYPTO_gcm128_release(gcm_);
  gcm_ = nullptr;
  if (have_aesni()) {
    aes128_schedule(k.key, keys_.rk);
    ghash_powers(keys_.rk, keys_.hpow, kPowers);
    gcm_ = CRYPTO_gcm128_new(keys_.rk, reinterpret_cast<block128_f>(aes128_block));  // nullptr: EVP only
  }
#endif
  return true;
}

bool Sealer::small_tag(uint64_t seq, const uint8_t* aad, size_t aad_len, const uint8_t* payload, size_t len,
                       uint8_t tag[kTagBytes]) noexcept {
#if defined(__x86_64__)
  if (gcm_ == nullptr || aad_len + len > kSmallAad) return false;
  const uint8_t* ek = pad(seq);
  if (len == 0) {
    gmac_small(keys_.hpow, ek, aad, aad_len, tag);
  } else {  // an advert's header and entries: one string, as GCM hashes it
    uint8_t joined[kSmallAad];
    std::memcpy(joined, aad, aad_len);
    std::memcpy(joined + aad_len, payload, len);
    gmac_small(keys_.hpow, ek, joined, aad_len + len, tag);
  }
  return true;
#else
  (void)seq, (void)aad, (void)aad_len, (void)payload, (void)len, (void)tag;
  return false;
#endif
}

const uint8_t* Sealer::pad(uint64_t seq) noexcept {
#if defined(__x86_64__)
  if (!pads_valid_ || seq - pads_first_ >= static_cast<uint64_t>(kPads)) {
    gcm_pads(keys_.rk, salt_, seq, pads_);
    pads_first_ = seq;
    pads_valid_ = true;
  }
  return pads_[seq - pads_first_];
#else
  (void)seq;
  return nullptr;
#endif
}

bool Sealer::wide_tag(uint64_t seq, const uint8_t* aad, size_t aad_len, const uint8_t* payload, size_t len,
                      uint8_t tag[kTagBytes]) noexcept {
#if defined(__x86_64__)
  if (gcm_ == nullptr || len < kWideMinBytes || !have_wide_ghash()) return false;
  return gmac_wide(keys_.hpow, pad(seq), aad, aad_len, payload, len, tag);
#else
  (void)seq, (void)aad, (void)aad_len, (void)payload, (void)len, (void)tag;
  return false;
#endif
}

bool Sealer::hash_fast(uint64_t seq, const uint8_t* aad, size_t aad_len, const uint8_t* payload, size_t len) noexcept {
  uint8_t n12[12];
  iv(seq, n12);
  CRYPTO_gcm128_setiv(gcm_, n12, sizeof(n12));
  return CRYPTO_gcm128_aad(gcm_, aad, aad_len) == 0 && (len == 0 || CRYPTO_gcm128_aad(gcm_, payload, len) == 0);
}

void Sealer::iv(uint64_t seq, uint8_t out[12]) const noexcept {
  std::memcpy(out, salt_, 4);
  for (int i = 0; i < 8; ++i) out[4 + i] = static_cast<uint8_t>(seq >> (8 * i));
}

bool Sealer::start(uint64_t seq) noexcept {
  uint8_t n[12];
  iv(seq, n);
  return (sealing_ ? EVP_EncryptInit_ex(ctx_, nullptr, nullptr, nullptr, n)
                   : EVP_DecryptInit_ex(ctx_, nullptr, nullptr, nullptr, n)) == 1;
}

bool Sealer::seal(uint64_t seq, const uint8_t* aad, size_t aad_len, const uint8_t* payload, size_t len, uint8_t* out,
                  uint8_t tag[kTagBytes]) noexcept {
  if (ctx_ == nullptr || !sealing_) return false;
  if (out == nullptr && small_tag(seq, aad, aad_len, payload, len, tag)) return true;
  if (out == nullptr && wide_tag(seq, aad, aad_len, payload, len, tag)) return true;
  if (gcm_ != nullptr && out == nullptr) {  // a tag only: the fast path
    if (!hash_fast(seq, aad, aad_len, payload, len)) return false;
    CRYPTO_gcm128_tag(gcm_, tag, kTagBytes);
    return true;
  }
  if (!start(seq)) return false;
  int n = 0;
  if (EVP_EncryptUpdate(ctx_, nullptr, &n, aad, static_cast<int>(aad_len)) != 1) return false;
  // Without `out` the payload is hashed as associated data; with it, encrypted into out.
  if (len > 0 && EVP_EncryptUpdate(ctx_, out, &n, payload, static_cast<int>(len)) != 1) return false;
  uint8_t fin[16];
  if (EVP_EncryptFinal_ex(ctx_, fin, &n) != 1) return false;
  return EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_GCM_GET_TAG, kTagBytes, tag) == 1;
}

bool Sealer::open(uint64_t seq, const uint8_t* aad, size_t aad_len, const uint8_t* payload, size_t len, uint8_t* out,
                  const uint8_t tag[kTagBytes]) noexcept {
  if (ctx_ == nullptr || sealing_) return false;
  if (uint8_t want[kTagBytes]; out == nullptr && (small_tag(seq, aad, aad_len, payload, len, want) ||
                                                   wide_tag(seq, aad, aad_len, payload, len, want)))
    return CRYPTO_memcmp(want, tag, kTagBytes) == 0;
  if (gcm_ != nullptr && out == nullptr)  // a tag only: the fast path (constant-time compare in finish)
    return hash_fast(seq, aad, aad_len, payload, len) && CRYPTO_gcm128_finish(gcm_, tag, kTagBytes) == 0;
  if (!start(seq)) return false;
  int n = 0;
  if (EVP_DecryptUpdate(ctx_, nullptr, &n, aad, static_cast<int>(aad_len)) != 1) return false;
  // Without `out` the payload is hashed as associated data; with it, decrypted into out.
  if (len > 0 && EVP_DecryptUpdate(ctx_, out, &n, payload, static_cast<int>(len)) != 1) return false;
  if (EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_GCM_SET_TAG, kTagBytes, const_cast<uint8_t*>(tag)) != 1) return false;
  uint8_t fin[16];
  return EVP_DecryptFinal_ex(ctx_, fin, &n) == 1;
}

bool ReplayWindow::accept(uint64_t seq) noexcept {
  if (seq >= top_) {
    // Slide: everything from the old top up to seq becomes unseen.
    if (seq - top_ >= kBits) {
      std::memset(bits_, 0, sizeof(bits_));
    } else {
      for (uint64_t s = top_; s < seq; ++s) bits_[(s % kBits) / 64] &= ~(1ull << (s % 64));
    }
    top_ = seq + 1;
    bits_[(seq % kBits) / 64] |= 1ull << (seq % 64);
    return true;
  }
  if (top_ - seq > kBits) return false;  // too old to tell: refused
  uint64_t& w = bits_[(seq % kBits) / 64];
  const uint64_t bit = 1ull << (seq % 64);
  if ((w & bit) != 0) return false;
  w |= bit;
  return true;
}

}  // namespace grex::wire
