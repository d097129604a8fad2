// SPDX-License-Identifier: Apache-2.0
// Wire format of the TCP store: length-prefixed frames, opcodes, limits and a bounds-checked codec.
//
// Every message is one frame: u32 body length (little-endian), then the body:
// u8 opcode followed by fields. Integers are little-endian; a string is a u32
// length and its bytes. The handshake (kChallenge, kAuthResponse, kAuthOk,
// kAuthRejected) must finish before any command is served.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>
#include <utility>

namespace grex::detail::store {

inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kMacBytes = 32;             // HMAC-SHA256
inline constexpr size_t kFrameHeaderBytes = 4;
inline constexpr size_t kMaxKeyBytes = 4 << 10;      // 4 KiB
inline constexpr size_t kMaxValueBytes = 64 << 20;   // 64 MiB
inline constexpr size_t kMaxKeysPerRequest = 1 << 20;
/// Largest body a peer may send: one key, one value and some slack.
inline constexpr size_t kMaxFrameBytes = kMaxValueBytes + kMaxKeyBytes + 64;
/// Largest body before authentication (the auth response is the biggest).
inline constexpr size_t kMaxAuthFrameBytes = 1 + kNonceBytes + kMacBytes;
static_assert(kMaxFrameBytes < UINT32_MAX, "frame length must fit the u32 header");
/// GET/WAIT timeouts above this (about 35 years) or below 0 mean "wait forever".
inline constexpr int64_t kForeverMs = int64_t{1} << 40;

enum class Op : uint8_t {
  // Handshake.
  kChallenge = 1,      // server -> client: nonce[32]
  kAuthResponse = 2,   // client -> server: nonce[32] mac[32]
  kAuthOk = 3,         // server -> client: mac[32]
  kAuthRejected = 4,   // server -> client: (empty), then close
  // Requests (client -> server).
  kSet = 16,           // str key, str value
  kGet = 17,           // str key, i64 timeout_ms (< 0: forever)
  kAdd = 18,           // str key, i64 delta
  kCheck = 19,         // u32 n, n x str key
  kWait = 20,          // i64 timeout_ms, u32 n, n x str key
  kErase = 21,         // u32 n, n x str key -> kReplyInt (how many existed)
  // Replies (server -> client).
  kReplyOk = 32,       // (empty)
  kReplyValue = 33,    // str value
  kReplyInt = 34,      // i64 value
  kReplyBits = 35,     // u32 n, n x u8 (0 or 1)
  kReplyTimeout = 36,  // (empty)
  kReplyError = 37,    // i32 errc, str message
};

/// Builds one frame: call the put_* methods, then take().
class FrameWriter {
 public:
  explicit FrameWriter(Op op) : buf_(kFrameHeaderBytes, '\0') { put_u8(static_cast<uint8_t>(op)); }
  void put_u8(uint8_t v) { buf_.push_back(static_cast<char>(v)); }
  void put_u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) buf_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  void put_i64(int64_t v) {
    auto u = static_cast<uint64_t>(v);
    for (int i = 0; i < 8; ++i) buf_.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
  }
  void put_raw(std::string_view b) { buf_.append(b); }
  void put_str(std::string_view s) {
    put_u32(static_cast<uint32_t>(s.size()));
    buf_.append(s);
  }
  /// The finished frame, header filled in.
  std::string take() {
    auto n = static_cast<uint32_t>(buf_.size() - kFrameHeaderBytes);
    for (int i = 0; i < 4; ++i) buf_[i] = static_cast<char>((n >> (8 * i)) & 0xff);
    return std::move(buf_);
  }

 private:
  std::string buf_;
};

/// Reads a frame's length header (4 bytes at p).
inline uint32_t decode_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}

/// Parses a frame body; every get_* fails (returns false) instead of reading past the end.
class FrameReader {
 public:
  explicit FrameReader(std::string_view body) : rest_(body) {}
  bool get_u8(uint8_t* v) {
    if (rest_.empty()) return false;
    *v = static_cast<uint8_t>(rest_[0]);
    rest_.remove_prefix(1);
    return true;
  }
  bool get_u32(uint32_t* v) {
    if (rest_.size() < 4) return false;
    *v = decode_u32(rest_.data());
    rest_.remove_prefix(4);
    return true;
  }
  bool get_i64(int64_t* v) {
    if (rest_.size() < 8) return false;
    uint64_t u = 0;
    for (int i = 0; i < 8; ++i) u |= static_cast<uint64_t>(static_cast<uint8_t>(rest_[i])) << (8 * i);
    rest_.remove_prefix(8);
    *v = static_cast<int64_t>(u);
    return true;
  }
  bool get_raw(size_t n, std::string_view* out) {
    if (rest_.size() < n) return false;
    *out = rest_.substr(0, n);
    rest_.remove_prefix(n);
    return true;
  }
  /// Reads a string of at most max bytes.
  bool get_str(size_t max, std::string_view* out) {
    uint32_t n = 0;
    return get_u32(&n) && n <= max && get_raw(n, out);
  }
  bool at_end() const { return rest_.empty(); }

 private:
  std::string_view rest_;
};

/// A decoded request; the views point into the frame body.
struct Request {
  Op op = Op::kSet;
  std::string_view key, value;         ///< kSet, kGet, kAdd
  int64_t timeout_ms = 0;              ///< kGet, kWait (negative: refused by the server)
  int64_t delta = 0;                   ///< kAdd
  std::vector<std::string_view> keys;  ///< kCheck, kWait, kErase
};

/// Decodes a request body (the server's only parser, and a fuzz target):
/// false for an unknown op, a length past the end, a key or value over its
/// limit, too many keys, or trailing bytes. Memory it takes is bounded by the
/// body's size, whatever counts the body claims.
inline bool parse_request(std::string_view body, Request* out) {
  FrameReader r(body);
  uint8_t op = 0;
  if (!r.get_u8(&op)) return false;
  out->op = static_cast<Op>(op);
  out->keys.clear();
  auto keys = [&]() {
    uint32_t n = 0;
    if (!r.get_u32(&n) || n > kMaxKeysPerRequest || n > body.size() / 4) return false;  // 4 bytes a key at least
    out->keys.reserve(n);
    for (uint32_t i = 0; i < n; ++i) {
      std::string_view k;
      if (!r.get_str(kMaxKeyBytes, &k)) return false;
      out->keys.push_back(k);
    }
    return true;
  };
  switch (out->op) {
    case Op::kSet:
      return r.get_str(kMaxKeyBytes, &out->key) && r.get_str(kMaxValueBytes, &out->value) && r.at_end();
    case Op::kGet:
      return r.get_str(kMaxKeyBytes, &out->key) && r.get_i64(&out->timeout_ms) && r.at_end();
    case Op::kAdd:
      return r.get_str(kMaxKeyBytes, &out->key) && r.get_i64(&out->delta) && r.at_end();
    case Op::kCheck:
    case Op::kErase:
      return keys() && r.at_end();
    case Op::kWait:
      return r.get_i64(&out->timeout_ms) && keys() && r.at_end();
    default:
      return false;
  }
}

}  // namespace grex::detail::store
