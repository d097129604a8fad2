// SPDX-License-Identifier: Apache-2.0
// libFuzzer target for what a connected verbs peer controls (issue 28), through
// the checks in drivers/verbs/verbs_wire.h that VerbsEndpoint applies:
// - the peer address string (strict parse, and its text parses back the same);
// - the connection's private data (a Hello is this job's or nothing);
// - a stream of receive completions and the bytes the peer wrote: eager
//   messages in our ring, rendezvous immediates, control SENDs with credits.
// An eager message that passes is copied out of an ASan-fenced ring of the
// real geometry, so a check that let a length or slot through would read out
// of bounds; credits never let the sender run more than a ring ahead.
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "drivers/verbs/verbs_wire.h"
#include "tests/fuzz/fuzz_support.h"

namespace grex::fuzz {
namespace {

using namespace verbs;  // NOLINT
constexpr uint64_t kJob = 0x6a6f622d74616721ull;

void address(Reader& in) {
  size_t n = 0;
  const uint8_t* p = in.take(in.u8() % 48, &n);
  const std::string_view text(reinterpret_cast<const char*>(p), n);
  const auto a = parse_address(text);
  if (!a) return;
  FUZZ_CHECK(a->port != 0);
  const auto again = parse_address(a->text());
  FUZZ_CHECK(again && again->ip == a->ip && again->port == a->port && again->mtu == a->mtu);
}

void hello(Reader& in) {
  size_t n = 0;
  const uint8_t* p = in.take(in.u8() % 64, &n);
  const auto h = read_hello(p, n, kJob);
  if (!h) return;
  FUZZ_CHECK(n >= sizeof(Hello) && h->magic == kMagic && h->job == kJob);
  FUZZ_CHECK(h->mtu == 0 || (h->mtu >= 256 && h->mtu <= 4096 && (h->mtu & (h->mtu - 1)) == 0));
}

GREX_FUZZ_NO_COVERAGE void copy_bytes(uint8_t* dst, const uint8_t* src, size_t n) { std::memcpy(dst, src, n); }

// One side's receive path and its eager credit as the sender of the other direction.
void stream(Reader& in) {
  const uint32_t slots = in.u8() % 17;  // 0: we offered no ring
  const uint32_t payload = 64 * (in.u8() % 9);
  const uint64_t stride = eager_stride(payload);
  OwnedRegion ring(slots == 0 ? 1 : slots * stride, 1);
  const size_t recv_len = 1 + in.u16() % 1024;
  OwnedRegion recv(recv_len, 2);
  const uint32_t peer_slots = 1 + in.u8() % 16;  // the peer's ring, which our sends fill
  uint32_t received = 0, sent = in.u32(), freed = sent;  // running counts start anywhere: they wrap
  for (int op = 0; op < 256 && !in.empty(); ++op) {
    const uint8_t what = in.u8();
    if ((what & 3) == 0) {  // we send an eager message where credit allows
      if (sent - freed < peer_slots) ++sent;
      continue;
    }
    const bool with_imm = (what & 4) != 0;
    const uint32_t imm = in.u32();
    const uint32_t byte_len = (what & 8) != 0 ? in.u32() : in.u16();
    const Arrival a = classify_arrival(with_imm, imm, byte_len);
    if (a.kind == Arrival::kEager) {
      FUZZ_CHECK(with_imm && (imm & kEagerBit) != 0);
      if (!eager_slot_next(a.value, received, slots)) continue;  // the endpoint fails here
      FUZZ_CHECK(a.value < slots);
      // The peer's write into its slot, then the header read once.
      uint8_t* at = ring.data() + a.value * stride;
      size_t got = 0;
      const uint8_t* bytes = in.take(sizeof(EagerHeader), &got);
      copy_bytes(at, bytes, got);
      EagerHeader h;
      std::memcpy(&h, at, sizeof(h));
      if (!eager_fits(h, payload, byte_len)) continue;
      copy_bytes(recv.data(), at + sizeof(EagerHeader), h.len < recv_len ? h.len : recv_len);
      freed = freed_after(sent, freed, h.freed);
      ++received;
    } else if (a.kind == Arrival::kRendezvous) {
      FUZZ_CHECK(with_imm && a.value <= kSeqMask && a.truncated == ((imm & kTruncBit) != 0));
    } else if (a.kind == Arrival::kControl) {
      FUZZ_CHECK(!with_imm && byte_len == sizeof(Ctrl));
      Ctrl c;
      size_t got = 0;
      const uint8_t* bytes = in.take(sizeof(c), &got);
      std::memcpy(&c, bytes, got);
      if (c.type == Ctrl::kCredit || c.type == Ctrl::kAdvert) freed = freed_after(sent, freed, c.freed);
    } else {
      FUZZ_CHECK(!with_imm && byte_len != sizeof(Ctrl));
    }
    // A credit never frees more than we sent: we never run more than a ring ahead.
    FUZZ_CHECK(!before(sent, freed) && sent - freed <= peer_slots);
  }
}

}  // namespace
}  // namespace grex::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  grex::fuzz::Reader in(data, size);
  grex::fuzz::address(in);
  grex::fuzz::hello(in);
  grex::fuzz::stream(in);
  return 0;
}
