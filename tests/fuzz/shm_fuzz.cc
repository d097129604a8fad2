// SPDX-License-Identifier: Apache-2.0
// libFuzzer target for what a shm peer controls (issue 28): the segment
// header a peer created, and the slots it writes. The input picks a real
// segment's geometry (Segment::create, in /dev/shm), then rewrites its
// header and shrinks its file as a hostile creator could before
// Segment::open maps it; what the open accepts must fit the mapping. The rest
// of the input becomes the incoming ring's bytes, read by the slot reader
// (drivers/shm/shm_slot.h) exactly as ShmEndpoint reads it: every byte it
// copies must come from the slot or the peer's mapped heap, and land inside
// the posted receive or the written region (ASan-fenced buffers).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "drivers/shm/shm_segment.h"
#include "drivers/shm/shm_slot.h"
#include "tests/fuzz/fuzz_support.h"

namespace grex::fuzz {
namespace {

// The peer's heap as connect() would have mapped it, at the peer's address kHeapAddr.
constexpr uint64_t kHeapAddr = 0x7f0000100000ull;
constexpr size_t kHeapBytes = 4096;

const std::string& segment_name() {
  static const std::string name = "/grex-fuzz-shm-" + std::to_string(::getpid());
  return name;
}

// A hostile creator's edits, between create() and the peer's open().
void corrupt(const std::string& name, shm::SegmentHeader* h, size_t bytes, Reader& in) {
  const uint8_t flags = in.u8();
  if (flags & 1) {
    h->slots = in.u32();
    h->slot_bytes = in.u32();
  }
  if (flags & 2) h->version = in.u8();
  if (flags & 4) h->ready.store(0, std::memory_order_relaxed);
  if (flags & 8) {
    const size_t keep = in.u32() % (bytes + 1);
    if (int fd = ::shm_open(name.c_str(), O_RDWR, 0600); fd >= 0) {
      FUZZ_CHECK(::ftruncate(fd, static_cast<off_t>(keep)) == 0);
      ::close(fd);
    }
  }
}

// Reads the incoming ring (direction 1 as seen from the opener) as
// ShmEndpoint::scan_arrivals and deliver do, into ASan-fenced buffers.
GREX_FUZZ_NO_COVERAGE void copy_bytes(uint8_t* dst, const uint8_t* src, size_t n) { std::memcpy(dst, src, n); }

void read_ring(const shm::Segment& seg, Reader& in) {
  const size_t recv_len = 1 + in.u16() % 2048;
  OwnedRegion recv(recv_len, 1);
  OwnedRegion written(1 + in.u16() % 1024, 2);
  std::vector<uint8_t> heap(kHeapBytes, 0x5a);
  const shm::PeerMapping peer_heap{kHeapAddr, kHeapBytes, heap.data(), 0, 3};
  const uint8_t* lo = reinterpret_cast<const uint8_t*>(seg.header());
  const uint8_t* hi = lo + seg.bytes();
  const size_t slot_bytes = seg.max_inline() + shm::kSlotHeaderBytes;

  // The peer's ring bytes: whatever the input holds, slot after slot.
  uint8_t* ring = reinterpret_cast<uint8_t*>(seg.slot(1, 0));
  size_t got = 0;
  const uint8_t* src = in.take(std::min<size_t>(hi - ring, seg.slots() * slot_bytes), &got);
  copy_bytes(ring, src, got);

  for (uint64_t seq = 0; seq < 2ull * seg.slots(); ++seq) {
    shm::SlotHeader* s = seg.slot(1, static_cast<uint32_t>(seq % seg.slots()));
    const uint8_t* sb = reinterpret_cast<const uint8_t*>(s);
    FUZZ_CHECK(sb >= lo && sb + slot_bytes <= hi);
    const shm::SlotVerdict v = shm::read_head(s, seq);
    if (v != shm::SlotVerdict::kMessage && v != shm::SlotVerdict::kWriteImm) break;
    if (v == shm::SlotVerdict::kWriteImm) {
      const uint64_t offset = shm::read_once(s->tag), len = shm::read_once(s->length);
      if (shm::within(offset, len, written.length())) std::memset(written.data() + offset, 0xee, len);
    } else {
      const uint64_t len = shm::read_once(s->length);
      const uint64_t n = std::min<uint64_t>(len, recv_len);
      if (shm::read_once(s->type) == shm::SlotType::kEager) {
        const uint8_t* from = shm::eager_source(s, len, seg.max_inline());
        if (from == nullptr) break;  // a corrupt ring: the endpoint fails
        FUZZ_CHECK(from >= sb && from + len <= sb + slot_bytes);
        copy_bytes(recv.data(), from, n);
      } else if (const uint8_t* from = shm::in_mapping(peer_heap, shm::read_once(s->addr), n)) {
        FUZZ_CHECK(from >= heap.data() && from + n <= heap.data() + heap.size());
        copy_bytes(recv.data(), from, n);
      }
    }
    s->state.store(0, std::memory_order_release);
  }
}

}  // namespace
}  // namespace grex::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace grex;  // NOLINT
  fuzz::Reader in(data, size);
  const uint32_t slots = 1 + in.u8() % 8;
  const uint32_t slot_bytes = 128 + 64 * (in.u8() % 15);
  const std::string& name = fuzz::segment_name();
  auto created = shm::Segment::create(name, slots, slot_bytes);
  FUZZ_CHECK(created.ok());
  fuzz::corrupt(name, created->header(), created->bytes(), in);
  {
    auto opened = shm::Segment::open(name, 0);
    if (opened.ok()) {
      // What open accepted is this process's geometry and must fit its mapping.
      const shm::Segment& seg = *opened;
      FUZZ_CHECK(shm::Segment::valid_geometry(seg.slots(), static_cast<uint32_t>(seg.max_inline() + 64)));
      FUZZ_CHECK(shm::Segment::bytes_for(seg.slots(), static_cast<uint32_t>(seg.max_inline() + 64)) <= seg.bytes());
      fuzz::read_ring(seg, in);
    }
  }
  ::shm_unlink(name.c_str());
  return 0;
}
