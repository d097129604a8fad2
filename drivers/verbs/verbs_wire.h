// SPDX-License-Identifier: Apache-2.0
// The verbs driver's wire: what one side sends the other (connection private
// data, control SENDs, eager headers, immediates), and the pure checks the
// receiving side applies before it trusts any of it. A connected peer is
// untrusted: a field it wrote is used only after these checks pass. No
// ibverbs types here, so tests/fuzz/verbs_fuzz.cc drives the same checks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace grex::verbs {

/// The control message every SEND carries (little-endian on the wire;
/// grex's supported hosts are little-endian, checked at build time).
struct Ctrl {
  enum Type : uint8_t { kAdvert = 1, kWriteImm = 2, kAbort = 3, kWant = 4, kCredit = 5 };
  uint8_t type = 0;
  uint8_t pad[3] = {};
  uint32_t seq = 0;     ///< kAdvert: receive sequence; kWriteImm: imm; kAbort: culprit + 1
  uint64_t tag = 0;     ///< kAdvert, kWant
  uint64_t addr = 0;    ///< kAdvert: buffer address at the receiver
  uint64_t len = 0;     ///< kAdvert: buffer length; kWriteImm: bytes written
  uint32_t rkey = 0;    ///< kAdvert
  uint32_t eagers = 0;  ///< kAdvert, kCredit: eager messages the sender of this had taken when it made it
  uint32_t freed = 0;   ///< kAdvert, kCredit: eager slots it has freed, in order (a running count)
  uint32_t pad2 = 0;
};
static_assert(sizeof(Ctrl) == 48, "Ctrl is a wire format");

/// The header in front of an eager message's payload in its slot.
struct EagerHeader {
  uint64_t tag = 0;
  uint32_t len = 0;
  uint32_t eagers = 0;  ///< as Ctrl::eagers, for the other direction (piggybacked credit)
  uint32_t freed = 0;   ///< as Ctrl::freed
  uint32_t pad = 0;
};
static_assert(sizeof(EagerHeader) == 24, "EagerHeader is a wire format");

/// What a receiver offers for eager messages (connection private data).
struct EagerRing {
  uint64_t addr = 0;
  uint32_t rkey = 0;
  uint16_t slots = 0;     ///< 0: no eager messages to this side
  uint16_t pad = 0;
  uint32_t payload = 0;   ///< payload bytes per slot (the header comes in front)
};

// Immediate data of a WRITE WITH IMMEDIATE: an eager message names its slot;
// a rendezvous write names the receive (its sequence) and whether the
// message was longer than the receive.
constexpr uint32_t kEagerBit = 0x80000000u;
constexpr uint32_t kTruncBit = 0x40000000u;
constexpr uint32_t kSeqMask = kTruncBit - 1;

inline constexpr uint32_t kMagic = 0x67726578u;  // "grex"

/// Private data of the connect request and reply.
struct Hello {
  uint32_t magic = kMagic;
  uint32_t rank = 0;
  uint32_t mtu = 0;  // active MTU of the sender's port, in bytes
  uint32_t pad = 0;
  uint64_t job = 0;  // the job's tag (VerbsDevice::hello_tag_, keyed by the job key): others are refused
  EagerRing eager;   // where the peer may write eager messages (slots 0: nowhere)
};
static_assert(sizeof(Hello) <= 56, "RC private data limit of a connect request");

/// The Hello in a connection's private data, if it is one of job `job`'s:
/// long enough, grex's magic, the job's tag. Its MTU is 0 (unknown) unless it
/// is one RoCE knows (256 to 4096, a power of two).
inline std::optional<Hello> read_hello(const void* data, size_t len, uint64_t job) noexcept {
  if (data == nullptr || len < sizeof(Hello)) return std::nullopt;
  Hello h;
  std::memcpy(&h, data, sizeof(h));
  if (h.magic != kMagic || h.job != job) return std::nullopt;
  if (h.mtu < 256 || h.mtu > 4096 || (h.mtu & (h.mtu - 1)) != 0) h.mtu = 0;
  return h;
}

/// A peer's address as its device publishes it: `verbs:<a.b.c.d>:<port>:<mtu>`.
struct Address {
  uint32_t ip = 0;  ///< host order
  uint16_t port = 0;
  uint32_t mtu = 0;
  std::string ip_text() const {
    return std::to_string(ip >> 24) + "." + std::to_string((ip >> 16) & 255) + "." + std::to_string((ip >> 8) & 255) +
           "." + std::to_string(ip & 255);
  }
  std::string text() const { return "verbs:" + ip_text() + ":" + std::to_string(port) + ":" + std::to_string(mtu); }
};

namespace wire_detail {
// A decimal number of 1..digits digits at s[*i], at most `max`; advances *i.
inline bool number(std::string_view s, size_t* i, size_t digits, uint32_t max, uint32_t* out) noexcept {
  uint32_t v = 0;
  size_t n = 0;
  while (*i < s.size() && s[*i] >= '0' && s[*i] <= '9' && n < digits) {
    v = v * 10 + static_cast<uint32_t>(s[*i] - '0');
    ++*i;
    ++n;
  }
  if (n == 0 || v > max || (*i < s.size() && s[*i] >= '0' && s[*i] <= '9')) return false;
  *out = v;
  return true;
}
inline bool expect(std::string_view s, size_t* i, char c) noexcept {
  if (*i >= s.size() || s[*i] != c) return false;
  ++*i;
  return true;
}
}  // namespace wire_detail

/// Parses a peer address strictly: four octets of at most 255, a port from 1
/// to 65535, an MTU of at most 65535, nothing else. nullopt otherwise.
inline std::optional<Address> parse_address(std::string_view s) noexcept {
  constexpr std::string_view kPrefix = "verbs:";
  if (s.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  size_t i = kPrefix.size();
  Address a;
  for (int k = 0; k < 4; ++k) {
    uint32_t octet = 0;
    if ((k > 0 && !wire_detail::expect(s, &i, '.')) || !wire_detail::number(s, &i, 3, 255, &octet)) return std::nullopt;
    a.ip = (a.ip << 8) | octet;
  }
  uint32_t port = 0;
  if (!wire_detail::expect(s, &i, ':') || !wire_detail::number(s, &i, 5, 65535, &port) || port == 0)
    return std::nullopt;
  a.port = static_cast<uint16_t>(port);
  if (!wire_detail::expect(s, &i, ':') || !wire_detail::number(s, &i, 5, 65535, &a.mtu) || i != s.size())
    return std::nullopt;
  return a;
}

/// What a receive completion brought, from its opcode, immediate (host
/// order) and length, before anything it names is looked at.
struct Arrival {
  enum Kind : uint8_t {
    kEager,       ///< an eager message in slot `value` of our ring
    kRendezvous,  ///< a rendezvous write into our receive of sequence `value`
    kControl,     ///< a control SEND of exactly sizeof(Ctrl) bytes
    kBad,         ///< a SEND of any other length: the peer breaks the protocol
  } kind;
  uint32_t value = 0;
  bool truncated = false;  ///< kRendezvous: the sender's message was longer than the receive
};
inline Arrival classify_arrival(bool with_imm, uint32_t imm, uint32_t byte_len) noexcept {
  if (with_imm) {
    if ((imm & kEagerBit) != 0) return {Arrival::kEager, imm & ~kEagerBit, false};
    return {Arrival::kRendezvous, imm & kSeqMask, (imm & kTruncBit) != 0};
  }
  return {byte_len == sizeof(Ctrl) ? Arrival::kControl : Arrival::kBad, 0, false};
}

/// Bytes from one eager slot to the next: header and payload, in whole cache lines.
inline uint64_t eager_stride(uint32_t payload) noexcept {
  return (sizeof(EagerHeader) + uint64_t{payload} + 63) & ~uint64_t{63};
}

/// Whether an eager write names the slot the next message must use: the
/// one after the `received` messages so far, in a ring of `slots` (0: we
/// offered no ring).
inline bool eager_slot_next(uint32_t slot, uint32_t received, uint32_t slots) noexcept {
  return slots != 0 && slot == received % slots;
}

/// Whether an eager message may be read out of its slot: its header (a copy,
/// taken once) gives a length that fits a slot of `payload` bytes and is what
/// the write carried (`byte_len`).
inline bool eager_fits(const EagerHeader& h, uint32_t payload, uint32_t byte_len) noexcept {
  return h.len <= payload && uint64_t{byte_len} == sizeof(EagerHeader) + uint64_t{h.len};
}

/// Running counts wrap: whether count a comes before b.
inline bool before(uint32_t a, uint32_t b) noexcept { return static_cast<int32_t>(a - b) < 0; }

/// The peer's running count of our eager messages it freed, after it claims
/// `claim`: taken only when it moves forward and stays within the `sent`
/// we sent (a claim beyond would let us overwrite slots it still holds).
inline uint32_t freed_after(uint32_t sent, uint32_t freed, uint32_t claim) noexcept {
  return before(freed, claim) && !before(sent, claim) ? claim : freed;
}

}  // namespace grex::verbs
