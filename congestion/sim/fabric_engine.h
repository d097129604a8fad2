// SPDX-License-Identifier: Apache-2.0
// ccsim's leaf-spine fabric, its engine: the event loop and what each event
// does. fabric_engine.cc holds the hosts and the switches, fabric_feedback.cc the
// receivers (ACKs, NACKs, CNPs, credits) and the results (fabric.h has the
// model, fabric_internal.h the state).
#pragma once

#include <cstdint>
#include <memory>
#include <queue>
#include <random>
#include <vector>

#include "congestion/sim/fabric_internal.h"

namespace grex::ccsim::detail {

class Fabric {
 public:
  Fabric(const FabricConfig& cfg, const cc::Algorithm& algo);
  void run(FabricResult* r);

 private:
  size_t up(uint32_t l, uint32_t s) const { return static_cast<size_t>(l) * S_ + s; }
  size_t down(uint32_t s, uint32_t l) const { return static_cast<size_t>(L_) * S_ + static_cast<size_t>(s) * L_ + l; }
  size_t to_host(uint32_t h) const { return 2 * static_cast<size_t>(L_) * S_ + h; }

  void push(uint64_t t, Fv type, uint32_t a = 0, uint32_t b = 0, uint32_t c = 0, uint32_t d = 0) {
    events_.push(FEvent{t, seq_++, a, b, c, d, type});
  }

  void make_flows();

  uint64_t cnp_interval_ns() const;

  void refresh(FPace& pc);

  // ------------------------------------------------------------ hosts

  // A flow whose paths have their own controllers: across leaves (inside a
  // leaf there is one path), once its own controller met congestion.
  bool per_path(const FFlow& x) const { return x.paths != nullptr; }
  // What paced a packet of entropy `e` (with kOwnPace: the flow's own).
  FPace& pace(FFlow& x, uint32_t e) { return per_path(x) && (e & kOwnPace) == 0 ? x.paths[e] : x.own; }
  // The flow's own pace after its paths' controllers took over: its
  // controller's feedback is dropped, and its eligible time is the flow's
  // pace at the paths' summed rates (send()).
  bool retired(const FFlow& x, const FPace& pc) const { return per_path(x) && &pc == &x.own; }
  // path_cc: the flow's controller met congestion (a sample past its target,
  // a NACK, a CNP): its paths' controllers take over.
  void hand_over(FFlow& x);

  // The payload of a flow's next packet.
  uint32_t next_bytes(const FFlow& x) const {
    return static_cast<uint32_t>(std::min<uint64_t>(mtu_, x.retx > 0 ? x.retx : x.to_send));
  }
  // Whether a pace's window takes `bytes` more (one packet always goes).
  static bool room(const FPace& pc, uint64_t bytes) {
    return pc.window == 0 || pc.inflight + bytes <= pc.window || pc.inflight == 0;
  }
  // Data to send, and credit for it where credits are on (windows: next_send).
  bool sendable(const FFlow& x) const {
    if (x.retx == 0 && x.to_send == 0) return false;
    return x.allowance == kUnlimited || x.allowance >= next_bytes(x);
  }
  // When the flow may send next and on which path (kNever: no window has room).
  uint64_t next_send(const FFlow& x, uint32_t* path) const;

  void schedule_wake(uint32_t h, uint64_t t);
  void on_wake(uint32_t h);

  // The spine ECMP sends entropy `e` of a flow from leaf a to leaf b through.
  uint32_t spine_for(const FFlow& x, uint64_t e) const {
    const uint64_t k = mix((x.entropy + e * 0x9e3779b97f4a7c15ull) ^ (uint64_t{x.src} << 32 | x.dst));
    return alive_[k % alive_.size()];
  }

  void send(uint32_t h, uint32_t f, uint32_t path);

  // ------------------------------------------------------------ switches

  bool mark(uint64_t q) { return cfg_.ecn && red_mark(static_cast<double>(q), kmin_, kmax_, cfg_.pmax, rng_); }

  bool dead(const Port& port) const { return port.spine >= 0 && port.spine == failed_; }

  void arrive(uint32_t p);
  void start_port(uint32_t id);
  void port_done(uint32_t id);

  // Switch hops a flow's packets cross: the leaf's, or leaf, spine and leaf.
  uint32_t hops(const FFlow& x) const { return x.src / H_ == x.dst / H_ ? 1 : 3; }
  // RTTCC's target over `switch_hops` (the REPS lateness bar too).
  uint64_t target_ns(uint32_t switch_hops) const {
    return target_ns_ + (switch_hops > 0 ? switch_hops - 1 : 0) * opts_.rttcc.hop_target_ns;
  }

  // What is left of the path (forward hops not yet taken and the way back).
  uint64_t back_ns(const FPacket& pk) const {
    return static_cast<uint64_t>(pk.hops + 1 - pk.hop) * hop_ns_ + static_cast<uint64_t>(pk.hops + 1) * hop_ns_;
  }

  void trim(uint32_t p);
  void fail_spine(uint32_t s);

  // ------------------------------------------------------------ receivers and feedback

  void deliver(uint32_t p);
  void on_ack(uint32_t f, uint32_t probe_seq, uint32_t payload_ce, uint32_t entropy);
  void on_nack(uint32_t f, uint32_t payload, uint32_t entropy);
  void dispatch(const FEvent& e);

  // ------------------------------------------------------------ receiver credits

  void on_request(uint32_t f, uint32_t bytes, bool all);

  // One credit of at most an MTU to the next flow in the receiver's queue, then
  // the next one a packet time of the receiver's link later.
  void credit_tick(uint32_t h);

  void mark_warmup() {
    warmed_ = true;
    delivered_at_warmup_ = delivered_;
    for (uint32_t f = 0; f < nflows_; ++f) flows_[f].delivered_at_warmup = flows_[f].delivered;
  }

  void finish(FabricResult* r);

  const FabricConfig& cfg_;
  const cc::Algorithm& algo_;
  cc::Options opts_;
  cc::PathInfo path_;
  std::mt19937_64 rng_;
  uint32_t L_ = 0, S_ = 0, H_ = 0, N_ = 0, nflows_ = 0;
  uint64_t hop_ns_ = 0;
  double host_npb_ = 0;
  uint32_t mtu_ = 0, hdr_ = 0;
  uint64_t buffer_ = 0;
  double kmin_ = 0, kmax_ = 0;
  uint64_t end_ns_ = 0, warmup_ns_ = 0;
  double idle_rtt_ns_ = 0;
  uint64_t target_ns_ = 0;
  bool finite_ = false;
  bool warmed_ = false;
  int failed_ = -1;
  std::vector<uint32_t> alive_;
  std::vector<Port> ports_;
  std::vector<FHost> hosts_;
  std::unique_ptr<FFlow[]> flows_;
  Pool<FPacket> pool_;
  std::priority_queue<FEvent, std::vector<FEvent>, FLater> events_;
  uint64_t seq_ = 0, now_ = 0, processed_ = 0;
  uint64_t delivered_ = 0, delivered_at_warmup_ = 0;
  static constexpr uint64_t kBinNs = 10'000;  // payload delivered per 10 us, for a failure's recovery
  std::vector<uint64_t> bins_;
  uint64_t sample_ns_ = 0;  // FabricConfig::sample_us (0: no series)
  std::vector<uint64_t> sample_bytes_, sample_queue_;
  uint32_t done_ = 0;
  uint64_t credits_ = 0;
  uint64_t data_packets_ = 0, trimmed_ = 0, retransmits_ = 0, marks_ = 0, cnps_ = 0, probes_ = 0, invalid_ = 0;
  Histogram queue_delay_;
  Histogram rtt_;
};

}  // namespace grex::ccsim::detail
