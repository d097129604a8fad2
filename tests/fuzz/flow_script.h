// SPDX-License-Identifier: Apache-2.0
// The reliable-flow half of the packet fuzzer: a fuzz input read as a script
// over two connected reliable::Flows, plus checks shared with packet_fuzz.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tests/fuzz/fuzz_support.h"
#include "transport/reliable_flow.h"

namespace grex::fuzz {

/// A RegionTable holding one region; its rkey is the region's lkey.
class TableOfOne final : public reliable::RegionTable {
 public:
  explicit TableOfOne(MemoryRegion* r) : r_(r) {}
  uint8_t* resolve(uint32_t rkey, uint64_t offset, uint64_t len) noexcept override {
    if (r_ == nullptr || rkey != r_->lkey() || offset > r_->length() || len > r_->length() - offset) return nullptr;
    return static_cast<uint8_t*>(r_->addr()) + offset;
  }

 private:
  MemoryRegion* r_;
};

/// Checks a packet a flow wants to send (payload inside its region, within
/// max_payload) and returns it encoded; decode() must accept what a flow sends.
std::vector<uint8_t> check_tx_packet(const reliable::TxPacket& p, const reliable::Config& cfg);

/// Reads the input as a script (post, pump, deliver, drop, duplicate, reorder,
/// corrupt, forge, advance time, close) over two flows joined by a simulated
/// wire of Ethernet/IPv4/UDP frames. Checks every completion: reported once,
/// bytes within the posted length, nothing written outside the posted buffer
/// and, unless a forged or payload-corrupted packet got through, the bytes
/// the matching send carried. Posted buffers are poisoned once complete, so
/// ASan catches a transport that still reads or writes them.
///
/// In checked mode (config byte bit 7 clear), with no forged packets,
/// failures or closes, it finally checks liveness: on a lossless wire every
/// matched send/receive pair and every write completes, every sent write
/// with an immediate raises exactly one kRemoteWrite at the target (success,
/// or one kRemoteAccess for a key the target does not know), and none
/// without. Scripts post without limit and poll only at some steps, so the
/// five reliable::Flow bugs this fuzzer once found (fixed in 41c5e67:
/// completions dropped beyond the ring, a send and an advert both waiting
/// for a message entry never matched, one kRemoteAccess per packet, write
/// reassembly slots shared by writes in flight, a failed send consuming the
/// peer's advert) stay covered.
void run_flow_script(const uint8_t* data, size_t size);

}  // namespace grex::fuzz
