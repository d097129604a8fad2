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
/// matched send/receive pair and every write completes, and every valid write
/// with an immediate raises exactly one kRemoteWrite. Checked mode stays
/// clear of five reliable::Flow bugs this fuzzer found (reproducers in the
/// report that came with it); lift each limit when its bug is fixed:
///  1. completions beyond the ring of 3 * queue_depth are dropped silently
///     (retire_msgs, place_write, fail_all push only while there is room):
///     the script polls after every step;
///  2. a send whose advert arrives while the message ring is full is never
///     matched afterwards (match_sends runs only on post_send / on_advert);
///     since messages are reported out of order, ring entries stay taken
///     behind an unfinished head even after their completions went out:
///     checked mode posts fewer than 3 * queue_depth - 1 requests per side;
///  3. a write with a bad key or range raises one kRemoteAccess completion
///     per packet at the target: not asserted;
///  4. writes whose msg_id are equal modulo queue_depth share one RxWrite
///     slot: a retransmitted packet of the older one resets the newer one's
///     count and an immediate is lost: checked mode posts write n only
///     after write n - queue_depth completed;
///  5. a send that fails locally (bad region) still consumes the peer's
///     advert: the matching receive never completes: not expected to.
void run_flow_script(const uint8_t* data, size_t size);

}  // namespace grex::fuzz
