// SPDX-License-Identifier: Apache-2.0
// The grex datagram header: what the reliable protocol puts in front of every
// payload (inside UDP on DPDK). Fixed size, little-endian, versioned; decode()
// checks every field before anything uses it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace grex::wire {

inline constexpr uint8_t kVersion = 4;  // 2: rx_above (was reserved), kNack ranges; 3: packed adverts;
                                        // 4: packet counter and authentication tag
inline constexpr size_t kHeaderBytes = 104;
inline constexpr size_t kSeqOffset = 80;   ///< u64 packet counter of the direction (the GCM nonce's)
inline constexpr size_t kTagOffset = 88;   ///< 16-byte tag (wire_auth.h); zero when not authenticated
inline constexpr size_t kTaggedHeaderBytes = kTagOffset;  ///< what the tag covers of the header

enum class Type : uint8_t {
  kData = 1,        ///< reliable: payload, receive advertisement or write (see flags)
  kAck = 2,         ///< cumulative ACK + SACK bitmap
  kNack = 3,        ///< "psn is missing": ask for a fast retransmit
  kTimingReq = 4,   ///< RTT probe; answered at once
  kTimingResp = 5,  ///< probe echo
  kConnect = 6,     ///< open a flow
  kConnectAck = 7,  ///< flow accepted
  kClose = 8,       ///< the sender is going away (abort carries a culprit)
};
inline constexpr uint8_t kMaxType = 8;

/// Flags on kData.
enum Flags : uint16_t {
  kFlagAdvert = 1u << 0,  ///< a posted receive: msg_id = receive sequence, msg_len = buffer length, tag,
                          ///< offset = advert ordinal (consecutive; the sender matches in this order);
                          ///< the payload packs the receives with the next ordinals (AdvertEntry each)
  kFlagWrite = 1u << 1,   ///< one-sided write: offset = remote offset, tag = rkey << 32 | imm
  kFlagImm = 1u << 2,     ///< write: raise a completion at the target when all bytes landed
  kFlagAbort = 1u << 3,   ///< kClose: the sender aborts; msg_id = culprit rank + 1
  kFlagPayloadCrc = 1u << 4,  ///< kData: `crc` covers the payload too, not only the header
};
inline constexpr uint16_t kKnownFlags = kFlagAdvert | kFlagWrite | kFlagImm | kFlagAbort | kFlagPayloadCrc;

/// The decoded header. Field meaning by type:
///  kData        psn, ack/sack piggybacked, msg_id, offset, msg_len, payload_len, tag, timestamp (tx);
///               writes add `remote`, the target offset of the message's first byte
///  kAck/kNack   ack (next expected psn), sack (bit i: psn ack+1+i received), psn (kNack: first
///               missing psn), msg_id (kNack: how many consecutive psns from psn are missing, 0 = 1)
///  kAck         psn, timestamp: the newest data packet's psn and send time, echoed (timestamp 0:
///               none), and tag: how long it waited at the receiver before this ACK left; msg_id: how many later packets may overtake one before the receiver
///               counts it lost (its measured reordering); offset: with kGrantBit, the receiver's
///               credit: data packets the sender may have sent in all (low 32 bits); msg_len: 1
///               while this end waits for the peer's grants to send; remote: the longest time
///               the receiver had not read its ring before a read that brought data this ACK covers
///  every type that carries `ack` (kData, kAck, kNack, kClose) also carries rx_above: how many
///               distinct psns above `ack` have arrived (the sender's estimate of what has left the
///               network, beyond the 64 psns the sack bitmap can name); 0 on every other type
///  kTimingReq   psn = probe sequence, timestamp = sender's tx time
///  kTimingResp  psn = probe sequence, timestamp = echoed tx time, offset = rx time at target,
///               msg_len = reply tx time at target, tag = bytes the target has received on the flow,
///               remote = how long the target had not read its ring before the read that brought
///               the probe (the probe may have waited there that long)
///  kConnect*    msg_id = sender's flow id, offset = sender's rank
struct Header {
  uint8_t version = kVersion;
  Type type = Type::kData;
  uint16_t flags = 0;
  uint32_t flow = 0;         ///< the receiver's flow id (which endpoint this is for)
  uint32_t psn = 0;          ///< packet sequence number (kData)
  uint32_t ack = 0;          ///< cumulative: every psn below it arrived
  uint64_t sack = 0;         ///< selective ACK bitmap above `ack`
  uint32_t msg_id = 0;       ///< message or receive sequence
  uint32_t payload_len = 0;  ///< bytes after the header in this packet
  uint64_t offset = 0;       ///< byte offset of this payload within its message
  uint64_t msg_len = 0;      ///< total message length
  uint64_t tag = 0;          ///< tag, or rkey << 32 | imm for writes
  uint64_t timestamp = 0;    ///< sender's clock, nanoseconds
  uint64_t remote = 0;       ///< writes: offset in the target region of the message's byte 0
  uint32_t crc = 0;          ///< CRC32C of the header (crc field zero) [+ payload]; set by encode()
  uint32_t rx_above = 0;     ///< psns received above `ack` (see the field table)
  uint64_t seq = 0;          ///< the sender's packet counter on this direction, +1 per packet sent
  // bytes 88..104: the tag, written and checked by the driver (wire_auth.h)
};

/// kAck `offset`: the bit that says it carries a credit grant.
inline constexpr uint64_t kGrantBit = uint64_t{1} << 63;

/// One more receive in an advert's payload, for the ordinal after the
/// previous one: {u32 receive sequence, u32 zero, u64 buffer length, u64 tag},
/// little-endian like the header.
struct AdvertEntry {
  uint32_t seq = 0;
  uint64_t len = 0;
  uint64_t tag = 0;
};
inline constexpr size_t kAdvertEntryBytes = 24;
void encode_advert(const AdvertEntry& e, uint8_t* out) noexcept;
/// Entry i of a decoded advert's payload (decode() has checked its length
/// and zero fields).
AdvertEntry decode_advert(const uint8_t* payload, size_t i) noexcept;

/// Why decode() refused a packet.
enum class Reject : uint8_t {
  kNone = 0,
  kTruncated,    ///< fewer bytes than a header, or than header + payload_len
  kBadVersion,
  kBadType,
  kBadFlags,     ///< unknown bits, or bits that do not belong to the type
  kBadLength,    ///< payload_len/offset/msg_len inconsistent
  kTrailing,     ///< more bytes than header + payload_len (on a datagram: malformed)
  kBadCrc,       ///< the checksum does not match: corrupted on the way
};
const char* reject_name(Reject r) noexcept;

/// CRC32C (Castagnoli), continuing from `crc` (start with 0).
uint32_t crc32c(const uint8_t* data, size_t len, uint32_t crc = 0) noexcept;

/// Whether the CRC covers the payload too: with kFlagPayloadCrc, and always
/// for an advert, whose payload entries are control data (a flipped bit
/// there would send a message into the wrong receive).
inline bool crc_covers_payload(const Header& h) noexcept {
  return (h.flags & kFlagPayloadCrc) != 0 || (h.type == Type::kData && (h.flags & kFlagAdvert) != 0);
}

/// Writes h into out[0..kHeaderBytes) with a zero tag, with the CRC over the
/// header (crc and tag fields zero) and, when
/// crc_covers_payload(h), over `payload` (h.payload_len bytes) too. Without
/// `crc` the field stays zero: a tag vouches for the packet instead
/// (wire_auth.h, tag_replaces_crc).
void encode(const Header& h, uint8_t* out, const uint8_t* payload = nullptr, bool crc = true) noexcept;

/// Decodes and validates a datagram of `len` bytes. On success *h holds the
/// header and the payload is data[kHeaderBytes .. kHeaderBytes + h->payload_len).
/// `max_payload` bounds payload_len (the path MTU minus headers).
Reject decode(const uint8_t* data, size_t len, uint32_t max_payload, Header* h) noexcept;
/// decode() without the CRC: every other check, for a packet whose tag is
/// checked instead (then crc_matches() where no tag replaces the CRC).
Reject decode_fields(const uint8_t* data, size_t len, uint32_t max_payload, Header* h) noexcept;
/// Whether the CRC of the packet at `data`, whose fields decode_fields()
/// gave as h, matches.
bool crc_matches(const uint8_t* data, const Header& h) noexcept;

}  // namespace grex::wire
