// SPDX-License-Identifier: Apache-2.0
// Which of a flow's sprayed paths (UDP source port offsets, GREX_DPDK_PATHS)
// each data packet takes (issue 31). Round robin, or REPS
// (GREX_DPDK_SPRAY=reps, cc::EntropyRecycler): a path whose packet the
// cumulative ACK covered is reused; one whose packet had to be resent is
// forgotten until a fresh draw tries it again. The driver reports what it
// sees: each data packet it sends (a psn below the highest sent is a resend,
// so its first copy's path lost it), each cumulative ACK from the peer, and
// the RTT each ACK's echo measures for the path its packet took. A path
// whose RTT floor stays far above the other paths' is slow (a queue stands
// there: the delay-based form of REPS's ECN mark): under REPS
// its packets are not given back for reuse, so it is used less, and
// abandoned while it stays slow; a fresh draw tries it again now and then.
//
// With a controller per path (GREX_DPDK_PATH_CC=path), each path's RTTs
// and losses drive its own rate, token bucket and window, and its losses a
// cap on its packets in flight (counted until the cumulative ACK covers
// them): a packet takes the path chosen above while that path has room, else
// the next healthy path with room (a path marked slow yields to a healthy
// one as ready as itself, and is reprobed as under REPS), and the flow is
// paced at the paths' summed windows and rates (rate();
// reliable::Flow::pace_at). A path behind a queue, or one that drops, is
// then cut alone, where one controller for the flow cut every path for it,
// or none.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "congestion/multipath.h"
#include "transport/pacer.h"

namespace grex::dpdk {

class PathChooser {
 public:
  static constexpr uint32_t kMaxPaths = 64;

  /// `span`: the flow's PSN span (the psns that can be unacknowledged at once).
  void reset(uint32_t paths, bool reps, uint32_t span, uint64_t seed) {
    paths_ = paths == 0 ? 1 : paths;
    srtt_ns_.fill(0);
    floor_.fill(0);
    slow_.fill(false);
    since_reprobe_ = reprobe_next_ = 0;
    reps_ = reps && paths_ > 1;
    if (paths_ <= 1) return;  // one path: nothing to record
    path_of_.assign(span == 0 ? 1 : span, 0);
    // Room for a window's worth of clean paths: one ACK covers many packets,
    // and each comes back to be reused (REPS keeps about a BDP of them).
    if (reps_) recycler_ = cc::EntropyRecycler(seed, static_cast<uint32_t>(path_of_.size()), paths_);
  }

  /// A controller `algo` per path (after reset(), with more than one path;
  /// nullptr: none), each starting at the first packet with `opts` and the
  /// flow's `info`; `min_burst` and `burst_ns` as the flow's pacer.
  void use_path_cc(const cc::Algorithm* algo, const cc::Options& opts, const cc::PathInfo& info, double min_burst,
                   uint64_t burst_ns) {
    cc_ = paths_ > 1 ? algo : nullptr;
    cc_opts_ = opts;
    cc_info_ = info;
    min_burst_ = min_burst;
    burst_ns_ = burst_ns;
    pacers_ = std::vector<Pacer>(cc_ != nullptr ? paths_ : 0);
    in_flight_.fill(0);
    first_copy_.assign(cc_ != nullptr ? path_of_.size() : 1, 0);
    loss_cap_.fill(0);
    last_loss_ns_.fill(0);
    mss_ = info.mtu_bytes;
  }
  bool path_cc() const noexcept { return cc_ != nullptr; }
  /// The flow's pace with a controller per path: the sum of the paths'
  /// windows, and of their rates, each at most what its window delivers in
  /// its smoothed RTT (a path whose packets come back late or not at all,
  /// and so with few samples, adds no more than it delivers). Rate 0 before
  /// the first packet, or without controllers per path.
  cc::Decision rate() noexcept {
    cc::Decision sum{0, 0};
    if (cc_ == nullptr || !pacers_[0].active()) return sum;
    for (uint32_t p = 0; p < paths_; ++p) {
      cc::Decision d = pacers_[p]->decision();
      if (loss_cap_[p] > 0) {
        const auto cap = static_cast<uint64_t>(loss_cap_[p] * mss_);
        d.window_bytes = d.window_bytes > 0 ? std::min(d.window_bytes, cap) : cap;
      }
      double r = d.rate_bps;
      if (d.window_bytes > 0 && srtt_ns_[p] > 0) r = std::min(r, static_cast<double>(d.window_bytes) * 8e9 / srtt_ns_[p]);
      sum.rate_bps += r;
      sum.window_bytes += d.window_bytes;
    }
    return sum;
  }
  /// The rate of one path's controller (0: none).
  double path_rate_bps(uint32_t path) noexcept {
    return cc_ != nullptr && path < pacers_.size() && pacers_[path].active() ? pacers_[path]->decision().rate_bps : 0;
  }

  /// The path of data packet `psn`, recorded until the ACK covers it; with
  /// controllers per path, `now_ns` and the packet's bytes feed its path's.
  uint32_t choose(uint32_t psn, uint64_t now_ns = 0, uint32_t wire_bytes = 0, uint32_t payload_bytes = 0) noexcept {
    if (paths_ <= 1) return 0;
    if (cc_ != nullptr && !pacers_[0].active())
      for (Pacer& p : pacers_) p.start(*cc_, cc_opts_, cc_info_, now_ns, min_burst_, burst_ns_);
    uint8_t& slot = path_of_[psn % path_of_.size()];
    if (sent_any_ && static_cast<int32_t>(psn - high_) < 0) {  // a resend: its first copy's path lost it
      if (reps_) recycler_.on_congested(slot);
      if (cc_ != nullptr) {
        pacers_[slot]->on_nack(now_ns);
        // The first copy may still be queued on its path (a slow path's
        // packets are overtaken and declared lost while they wait): it counts
        // there until the ACK covers the psn. A later copy declared lost too
        // stops counting.
        uint8_t& first = first_copy_[psn % first_copy_.size()];
        if (first == 0)
          first = static_cast<uint8_t>(slot + 1);
        else if (in_flight_[slot] > 0)
          --in_flight_[slot];
        lost_on(slot, now_ns);
      }
      ++resent_on_[slot];
    } else {
      high_ = psn + 1;
      sent_any_ = true;
    }
    uint32_t path = reps_ ? recycler_.next() % paths_ : rr_++ % paths_;
    // A path abandoned as slow gets one packet in kReprobeEvery: its echo
    // says whether the queue there has drained.
    bool reprobe = false;
    if ((reps_ || cc_ != nullptr) && ++since_reprobe_ >= kReprobeEvery) {
      for (uint32_t i = 0; i < paths_; ++i) {
        const uint32_t q = (reprobe_next_ + i) % paths_;
        if (!slow_[q]) continue;
        path = q;
        reprobe_next_ = q + 1;
        since_reprobe_ = 0;
        ++reprobes_;
        reprobe = true;
        break;
      }
    }
    if (cc_ != nullptr) {
      // The chosen path while it has room, else the next healthy one with
      // room; where none has, the first whose bucket alone is empty, and
      // only then one whose window or loss cap is full. Chosen and slow (not
      // as a reprobe), it yields to a healthy path as ready as itself: a
      // slow path's controller alone does not hold it back where every RTT
      // carries more host delay than the path's queue adds, and round robin
      // would keep feeding the link most ports hash onto, holding the flow
      // to that link's rate over its share of the ports.
      int best = 2 * readiness(path, now_ns, payload_bytes) + (slow_[path] && !reprobe ? 1 : 0);
      for (uint32_t i = 1; i < paths_ && best > 0; ++i) {
        const uint32_t q = (path + i) % paths_;
        if (slow_[q]) continue;
        const int r = 2 * readiness(q, now_ns, payload_bytes);
        if (r < best) {
          best = r;
          path = q;
        }
      }
      pacers_[path].sent(wire_bytes, payload_bytes, now_ns);
      ++in_flight_[path];
    }
    slot = static_cast<uint8_t>(path);
    ++sent_on_[path];
    return path;
  }

  /// The peer's cumulative ACK: every psn below `ack` arrived, over a path that delivered.
  void acked(uint32_t ack) noexcept {
    if ((!reps_ && cc_ == nullptr) || !sent_any_) {
      acked_ = ack;
      return;
    }
    for (uint32_t n = 0; acked_ != ack && static_cast<int32_t>(ack - acked_) > 0 && n < path_of_.size(); ++n, ++acked_) {
      const uint8_t path = path_of_[acked_ % path_of_.size()];
      if (cc_ != nullptr) {
        if (in_flight_[path] > 0) --in_flight_[path];
        if (loss_cap_[path] > 0) loss_cap_[path] += 1.0 / loss_cap_[path];  // a packet more per window delivered
        uint8_t& first = first_copy_[acked_ % first_copy_.size()];
        if (first != 0 && in_flight_[first - 1] > 0) --in_flight_[first - 1];
        first = 0;
      }
      if (!reps_ || slow_[path]) continue;
      recycler_.on_clean(path);
      ++recycled_;
    }
    acked_ = ack;
  }

  /// The RTT `rtt_ns` of data packet `psn`, which the peer's ACK echoed
  /// (`now_ns`, and up to `host_gap_ns` of it the hosts' not reading their
  /// rings: for a controller per path).
  void rtt_sample(uint32_t psn, uint64_t rtt_ns, uint64_t now_ns = 0, uint64_t host_gap_ns = 0) noexcept {
    // Only a packet still tracked: its slot names the path it took.
    if (paths_ <= 1 || !sent_any_ || static_cast<int32_t>(psn - high_) >= 0 ||
        high_ - psn > static_cast<uint32_t>(path_of_.size()))
      return;
    const uint8_t path = path_of_[psn % path_of_.size()];
    if (cc_ != nullptr && pacers_[path].active()) pacers_[path]->on_rtt_sample({now_ns, rtt_ns, -1, host_gap_ns});
    const auto r = static_cast<double>(rtt_ns);
    double& s = srtt_ns_[path];
    s = s == 0 ? r : 0.875 * s + 0.125 * r;
    // Each path keeps a floor: it falls to a lower sample at once and rises
    // toward higher ones by 1/64 a sample. A queue that comes and goes (the
    // flow's own window through a shared queue, a poll loop's jitter) leaves
    // every path's floor near the empty queue's RTT; a queue that stands on
    // one path lifts that path's floor above the others'.
    double& f = floor_[path];
    f = f == 0 || r < f ? r : f + (r - f) / 64;
    const double bar = kSlowFactor * lowest_floor() + kSlowSlackNs;
    if (slow_[path]) {
      // An abandoned path's sample is a probe: one back fast says its queue
      // drained, and the path is used again at once.
      if (r > bar) {
        ++slow_marks_[path];
        if (reps_) recycler_.on_congested(path);
        return;
      }
      slow_[path] = false;
      f = r;
      if (reps_)
        for (uint32_t i = 0; i < kReadmit; ++i) recycler_.on_clean(path);
      return;
    }
    if (f <= bar) return;
    slow_[path] = true;
    ++slow_marks_[path];
    if (reps_) recycler_.on_congested(path);
  }

  /// With controllers per path: packets of `path` sent and not yet covered
  /// by the cumulative ACK (nor resent).
  uint32_t in_flight(uint32_t path) const noexcept { return path < kMaxPaths ? in_flight_[path] : 0; }


  double lowest_floor() const noexcept {
    double best = 0;
    for (uint32_t i = 0; i < paths_; ++i)
      if (floor_[i] > 0 && (best == 0 || floor_[i] < best)) best = floor_[i];
    return best;
  }

  uint32_t paths() const noexcept { return paths_; }
  /// Smoothed RTT of a path from the ACKs' echoes (0: no sample yet), and
  /// how many of its samples were slow.
  uint64_t srtt_ns(uint32_t path) const noexcept { return path < kMaxPaths ? static_cast<uint64_t>(srtt_ns_[path]) : 0; }
  uint64_t slow_marks(uint32_t path) const noexcept { return path < kMaxPaths ? slow_marks_[path] : 0; }
  /// REPS: fresh draws (exploration), and paths the ACKs gave back for reuse.
  uint64_t explored() const noexcept { return recycler_.explored(); }
  uint64_t recycled() const noexcept { return recycled_; }
  /// Packets sent on a path abandoned as slow, to see whether it recovered.
  uint64_t reprobes() const noexcept { return reprobes_; }
  uint64_t sent_on(uint32_t path) const noexcept { return path < kMaxPaths ? sent_on_[path] : 0; }
  uint64_t resent_on(uint32_t path) const noexcept { return path < kMaxPaths ? resent_on_[path] : 0; }

 private:
  // Slow: a path's floor above twice the lowest floor plus 50 us. (Against
  // each path's smoothed RTT, identical paths through one shared queue,
  // sampled at different moments, differed by up to 17x on memif and were
  // marked as often as a lossy path was resent; against the flow's average
  // or its last few samples, the link most ports hashed onto set the
  // reference and was never marked.)
  static constexpr double kSlowFactor = 2.0;
  static constexpr double kSlowSlackNs = 50'000;
  static constexpr uint32_t kReprobeEvery = 256;
  static constexpr uint32_t kReadmit = 4;  // packets' worth of a recovered path put back for reuse

  uint32_t paths_ = 1;
  bool reps_ = false;
  bool sent_any_ = false;
  uint32_t high_ = 0, acked_ = 0, rr_ = 0;
  uint64_t recycled_ = 0, reprobes_ = 0;
  uint32_t since_reprobe_ = 0, reprobe_next_ = 0;
  std::vector<uint8_t> path_of_ = std::vector<uint8_t>(1, 0);
  cc::EntropyRecycler recycler_{1, 1, 1};
  std::array<uint64_t, kMaxPaths> sent_on_{}, resent_on_{}, slow_marks_{};
  std::array<double, kMaxPaths> srtt_ns_{};
  std::array<double, kMaxPaths> floor_{};  // per path (0: no sample yet)
  std::array<bool, kMaxPaths> slow_{};
  const cc::Algorithm* cc_ = nullptr;  // a controller per path (nullptr: the flow's alone)
  cc::Options cc_opts_;
  cc::PathInfo cc_info_;
  double min_burst_ = 0;
  uint64_t burst_ns_ = 0;
  std::vector<Pacer> pacers_;
  std::array<uint32_t, kMaxPaths> in_flight_{};
  std::vector<uint8_t> first_copy_ = std::vector<uint8_t>(1, 0);  // per psn: path + 1 of a resent packet's first copy
  // Losses, per path: RTTCC cuts for delay, and for a loss only where the
  // RTT is also high, so a path that drops what it is sent (a policer, a
  // short buffer: 99 % of a 40 Mbit/s link's packets lost on the routed
  // test fabric) would be sent to at its controller's rate for ever. A loss
  // halves the path's packets in flight (once per smoothed RTT) as a cap,
  // which grows by a packet per cap's worth delivered, as TCP's window does.
  std::array<double, kMaxPaths> loss_cap_{};  // packets in flight at most (0: no loss yet)
  std::array<uint64_t, kMaxPaths> last_loss_ns_{};
  uint32_t mss_ = 1;

  void lost_on(uint32_t path, uint64_t now_ns) noexcept {
    const auto rtt = static_cast<uint64_t>(srtt_ns_[path]);
    if (loss_cap_[path] > 0 && now_ns - last_loss_ns_[path] < rtt) return;  // one cut per RTT
    loss_cap_[path] = std::max(1.0, static_cast<double>(in_flight_[path]) / 2);
    last_loss_ns_[path] = now_ns;
  }

  // How ready a path is for a packet: 0, room; 1, its bucket is empty; 2,
  // its controller's window or its loss cap is full.
  int readiness(uint32_t path, uint64_t now_ns, uint32_t payload_bytes) noexcept {
    if (loss_cap_[path] > 0 && in_flight_[path] >= loss_cap_[path]) return 2;
    const uint64_t window = pacers_[path]->decision().window_bytes;
    if (window > 0 && static_cast<uint64_t>(in_flight_[path]) * payload_bytes >= window) return 2;
    return pacers_[path].allows(now_ns, 0) ? 0 : 1;  // the bucket (the window is checked above)
  }
};

}  // namespace grex::dpdk
