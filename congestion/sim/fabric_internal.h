// SPDX-License-Identifier: Apache-2.0
// ccsim's leaf-spine fabric, its state: events, packets, ports, flows, hosts
// (the engine that moves them is in fabric_engine.h).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "congestion/multipath.h"
#include "congestion/sim/fabric.h"
#include "congestion/sim/sim_internal.h"

namespace grex::ccsim::detail {

constexpr uint32_t kCeBit = 0x80000000u;    // in an ACK's payload word: the packet was ECN-marked
constexpr uint32_t kLateBit = 0x40000000u;  // ... its one-way delay left no room for the RTT target
constexpr uint32_t kOwnPace = 0x80000000u;  // in a feedback event's entropy: the flow's own pace sent the packet

enum class Fv : uint8_t { kWake, kArrive, kPortDone, kAck, kNack, kCnp, kFail, kRequest, kCreditTick, kCredit };

struct FEvent {
  uint64_t t;
  uint64_t seq;
  uint32_t a;
  uint32_t b;
  uint32_t c;
  uint32_t d;
  Fv type;
};
struct FLater {
  bool operator()(const FEvent& x, const FEvent& y) const noexcept {
    return x.t != y.t ? x.t > y.t : x.seq > y.seq;
  }
};

struct FPacket {
  uint64_t enq_ns = 0;
  uint32_t flow = 0;
  uint32_t wire = 0;
  uint32_t payload = 0;
  uint32_t route[3] = {0, 0, 0};  // ports after the sender's NIC
  uint32_t entropy = 0;
  bool unscheduled = false;  // credits on: sent in the first window, without credit
  uint64_t sent_ns = 0;
  uint8_t hops = 0;
  uint8_t hop = 0;
  bool probe = false;
  bool ce = false;
  uint32_t probe_seq = 0;
};

struct Port {
  double ns_per_bit = 0;
  Serializer ser;
  std::deque<uint32_t> fifo;
  uint64_t bytes = 0;
  uint64_t carried_bits = 0;
  int spine = -1;  // a leaf <-> spine link: its spine
  bool busy = false;
};

// What paces packets: a controller and its probes, the bytes it has in
// flight, and when it may send next. A flow has one; with a controller per
// path (FabricConfig::path_cc) each of its paths has its own instead.
struct FPace {
  cc::Flow ctl;
  cc::ProbeScheduler probes;
  double probe_sent[8] = {};
  uint64_t inflight = 0;
  double rate_bps = 0;
  uint64_t window = 0;
  double eligible_exact = 0;
  uint64_t eligible_ns = 0;
};

struct FFlow {
  FPace own;                       // the flow's pace (unused with a controller per path)
  std::unique_ptr<FPace[]> paths;  // path_cc: one per entropy, the entropy its index, once handed over
  cc::CnpPacer cnp;
  cc::EntropyRecycler reps{1, 1};
  uint32_t src = 0, dst = 0;
  uint64_t entropy = 0;   // the flow's base entropy (its source port)
  uint64_t packets = 0;   // the round robin over paths: sent (path_cc: the next path to try)
  uint64_t total = 0;     // bytes to deliver (kUnlimited: long-lived)
  uint64_t to_send = 0;
  uint64_t retx = 0;
  uint64_t delivered = 0;
  uint64_t delivered_at_warmup = 0;
  uint64_t done_ns = kNever;
  uint64_t allowance = kUnlimited;  // credits on: bytes it may still send
  uint64_t demand = 0;              // credits on: bytes its receiver still owes credit for
  uint64_t first_window = 0;        // credits on: the bytes it may send before any credit
  uint64_t unscheduled = 0;         // ... of which still unsent
  bool pulling = false;             // in its receiver's pull queue
  bool own_nacked = false;          // path_cc: a NACK came back for a packet of the flow's own pace
};

struct FHost {
  Serializer nic;
  std::vector<uint32_t> flows;
  uint64_t wake_at = kNever;
  Utilisation util;  // of the NIC
  // As a receiver with credits on: the flows it owes credits, served round robin, one
  // MTU's credit per packet time of its link.
  std::deque<uint32_t> pull;
  bool crediting = false;
  uint64_t debt = 0;  // wire bytes of unscheduled packets that arrived: link time no credit may take
};

inline uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// Fills r's before_fail_gbps, dip_gbps, after_fail_gbps and recovery_ms
/// from the payload bytes delivered per `bin_ns` (bins from time 0), for a
/// spine that failed at fail_ns in a run measured from warmup_ns to end_ns,
/// leaving `capacity_gbps` across leaves.
void measure_recovery(const std::vector<uint64_t>& bins, uint64_t bin_ns, uint64_t warmup_ns, uint64_t fail_ns,
                      uint64_t end_ns, double capacity_gbps, FabricResult* r);

}  // namespace grex::ccsim::detail
