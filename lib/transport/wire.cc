// SPDX-License-Identifier: Apache-2.0
// Encoding and validation of the grex datagram header.
#include "transport/wire.h"

#include <bit>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace grex::wire {
namespace {

// Little-endian fields: one load or store on a little-endian host, bytes
// assembled by shifts elsewhere.
template <class T>
void put(uint8_t*& p, T v) noexcept {
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(p, &v, sizeof(T));
    p += sizeof(T);
  } else {
    for (size_t i = 0; i < sizeof(T); ++i) *p++ = static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i));
  }
}

template <class T>
T get(const uint8_t*& p) noexcept {
  if constexpr (std::endian::native == std::endian::little) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    p += sizeof(T);
    return v;
  } else {
    uint64_t v = 0;
    for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<uint64_t>(*p++) << (8 * i);
    return static_cast<T>(v);
  }
}

uint32_t crc32c_soft(const uint8_t* d, size_t n, uint32_t crc) noexcept {
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) {
    crc ^= d[i];
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82f63b78u & (0u - (crc & 1u)));
  }
  return ~crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t crc32c_hw(const uint8_t* d, size_t n, uint32_t crc) noexcept {
  uint64_t c = ~crc;
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, d, 8);
    c = _mm_crc32_u64(c, v);
    d += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n-- > 0) c32 = _mm_crc32_u8(c32, *d++);
  return ~c32;
}

// A received header's CRC, its crc field (bytes 72-75) and tag (88-103)
// taken as zero, read in place: 13 steps, where copying the header to zero
// those fields cost as much again.
static_assert(kHeaderBytes == 104 && kTagOffset == 88, "header_crc_hw knows the header's layout");
__attribute__((target("sse4.2"))) uint32_t header_crc_hw(const uint8_t* d) noexcept {
  uint64_t c = ~uint32_t{0};
  for (size_t i = 0; i < 72; i += 8) {
    uint64_t v;
    std::memcpy(&v, d + i, 8);
    c = _mm_crc32_u64(c, v);
  }
  uint32_t rx_above;
  std::memcpy(&rx_above, d + 76, 4);
  c = _mm_crc32_u64(c, static_cast<uint64_t>(rx_above) << 32);  // the zero crc, then rx_above
  uint64_t seq;
  std::memcpy(&seq, d + 80, 8);
  c = _mm_crc32_u64(c, seq);
  c = _mm_crc32_u64(c, 0);
  c = _mm_crc32_u64(c, 0);
  return ~static_cast<uint32_t>(c);
}
#endif

}  // namespace

uint32_t crc32c(const uint8_t* data, size_t len, uint32_t crc) noexcept {
#if defined(__x86_64__)
  static const bool hw = __builtin_cpu_supports("sse4.2");
  if (hw) return crc32c_hw(data, len, crc);
#endif
  return crc32c_soft(data, len, crc);
}

const char* reject_name(Reject r) noexcept {
  switch (r) {
    case Reject::kNone: return "none";
    case Reject::kTruncated: return "truncated";
    case Reject::kBadVersion: return "bad-version";
    case Reject::kBadType: return "bad-type";
    case Reject::kBadFlags: return "bad-flags";
    case Reject::kBadLength: return "bad-length";
    case Reject::kTrailing: return "trailing-bytes";
    case Reject::kBadCrc: return "bad-crc";
  }
  return "?";
}

void encode(const Header& h, uint8_t* out, const uint8_t* payload, bool with_crc) noexcept {
  uint8_t* p = out;
  put<uint8_t>(p, h.version);
  put<uint8_t>(p, static_cast<uint8_t>(h.type));
  put<uint16_t>(p, h.flags);
  put<uint32_t>(p, h.flow);
  put<uint32_t>(p, h.psn);
  put<uint32_t>(p, h.ack);
  put<uint64_t>(p, h.sack);
  put<uint32_t>(p, h.msg_id);
  put<uint32_t>(p, h.payload_len);
  put<uint64_t>(p, h.offset);
  put<uint64_t>(p, h.msg_len);
  put<uint64_t>(p, h.tag);
  put<uint64_t>(p, h.timestamp);
  put<uint64_t>(p, h.remote);
  put<uint32_t>(p, 0);  // crc, filled below
  put<uint32_t>(p, h.rx_above);
  put<uint64_t>(p, h.seq);
  std::memset(p, 0, kHeaderBytes - kTagOffset);  // the tag: the driver's, after the CRC
  if (!with_crc) return;
  uint32_t crc = crc32c(out, kHeaderBytes);
  if (crc_covers_payload(h) && payload != nullptr) crc = crc32c(payload, h.payload_len, crc);
  uint8_t* c = out + kHeaderBytes - 32;
  put<uint32_t>(c, crc);
}

void encode_advert(const AdvertEntry& e, uint8_t* out) noexcept {
  put<uint32_t>(out, e.seq);
  put<uint32_t>(out, 0);
  put<uint64_t>(out, e.len);
  put<uint64_t>(out, e.tag);
}

AdvertEntry decode_advert(const uint8_t* payload, size_t i) noexcept {
  const uint8_t* p = payload + i * kAdvertEntryBytes;
  AdvertEntry e;
  e.seq = get<uint32_t>(p);
  p += 4;
  e.len = get<uint64_t>(p);
  e.tag = get<uint64_t>(p);
  return e;
}

Reject decode(const uint8_t* data, size_t len, uint32_t max_payload, Header* h) noexcept {
  Header x;
  if (Reject r = decode_fields(data, len, max_payload, &x); r != Reject::kNone) return r;
  if (!crc_matches(data, x)) return Reject::kBadCrc;
  *h = x;
  return Reject::kNone;
}

bool crc_matches(const uint8_t* data, const Header& x) noexcept {
#if defined(__x86_64__)
  static const bool hw = __builtin_cpu_supports("sse4.2");
  if (hw && std::endian::native == std::endian::little) {
    uint32_t crc = header_crc_hw(data);
    if (crc_covers_payload(x)) crc = crc32c(data + kHeaderBytes, x.payload_len, crc);
    return crc == x.crc;
  }
#endif
  uint8_t copy[kHeaderBytes];
  std::memcpy(copy, data, kHeaderBytes);
  std::memset(copy + kHeaderBytes - 32, 0, 4);  // crc
  std::memset(copy + kTagOffset, 0, kHeaderBytes - kTagOffset);
  uint32_t crc = crc32c(copy, kHeaderBytes);
  if (crc_covers_payload(x)) crc = crc32c(data + kHeaderBytes, x.payload_len, crc);
  return crc == x.crc;
}

Reject decode_fields(const uint8_t* data, size_t len, uint32_t max_payload, Header* h) noexcept {
  if (data == nullptr || len < kHeaderBytes) return Reject::kTruncated;
  const uint8_t* p = data;
  Header x;
  x.version = get<uint8_t>(p);
  uint8_t type = get<uint8_t>(p);
  x.flags = get<uint16_t>(p);
  x.flow = get<uint32_t>(p);
  x.psn = get<uint32_t>(p);
  x.ack = get<uint32_t>(p);
  x.sack = get<uint64_t>(p);
  x.msg_id = get<uint32_t>(p);
  x.payload_len = get<uint32_t>(p);
  x.offset = get<uint64_t>(p);
  x.msg_len = get<uint64_t>(p);
  x.tag = get<uint64_t>(p);
  x.timestamp = get<uint64_t>(p);
  x.remote = get<uint64_t>(p);
  x.crc = get<uint32_t>(p);
  x.rx_above = get<uint32_t>(p);
  x.seq = get<uint64_t>(p);
  if (x.version != kVersion) return Reject::kBadVersion;
  if (type == 0 || type > kMaxType) return Reject::kBadType;
  x.type = static_cast<Type>(type);
  if ((x.flags & ~kKnownFlags) != 0) return Reject::kBadFlags;
  if (x.type != Type::kData && (x.flags & kFlagPayloadCrc) != 0) return Reject::kBadFlags;
  if (x.type == Type::kData) {
    if ((x.flags & kFlagAbort) != 0) return Reject::kBadFlags;
    if ((x.flags & kFlagAdvert) != 0 && (x.flags & (kFlagWrite | kFlagImm)) != 0) return Reject::kBadFlags;
    if ((x.flags & kFlagImm) != 0 && (x.flags & kFlagWrite) == 0) return Reject::kBadFlags;
    if (x.payload_len > max_payload) return Reject::kBadLength;
    if ((x.flags & kFlagAdvert) != 0) {
      if (x.payload_len % kAdvertEntryBytes != 0 || x.remote != 0) return Reject::kBadLength;
    } else if (x.offset > x.msg_len || x.payload_len > x.msg_len - x.offset) {
      return Reject::kBadLength;
    } else if ((x.flags & kFlagWrite) == 0 ? x.remote != 0 : x.remote > UINT64_MAX - x.msg_len) {
      return Reject::kBadLength;
    }
  } else {
    if (x.type == Type::kClose ? (x.flags & ~kFlagAbort) != 0 : x.flags != 0) return Reject::kBadFlags;
    // `remote` on an ACK or a probe reply: the receiver's gap in reading its ring.
    const bool gap = x.type == Type::kAck || x.type == Type::kTimingResp;
    if (x.payload_len != 0 || (!gap && x.remote != 0)) return Reject::kBadLength;
  }
  if (len < kHeaderBytes + x.payload_len) return Reject::kTruncated;
  if (len > kHeaderBytes + x.payload_len) return Reject::kTrailing;
  if (x.type == Type::kData && (x.flags & kFlagAdvert) != 0) {
    for (size_t i = 0; i < x.payload_len / kAdvertEntryBytes; ++i) {
      const uint8_t* z = data + kHeaderBytes + i * kAdvertEntryBytes + 4;
      if (get<uint32_t>(z) != 0) return Reject::kBadLength;  // the entry's zero field
    }
  }
  bool carries_ack = x.type == Type::kData || x.type == Type::kAck || x.type == Type::kNack || x.type == Type::kClose;
  if (!carries_ack && x.rx_above != 0) return Reject::kBadLength;
  *h = x;
  return Reject::kNone;
}

}  // namespace grex::wire
