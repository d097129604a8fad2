// SPDX-License-Identifier: Apache-2.0
// What the perftest style modes share (perf_bw.cc: send_bw, write_bw;
// perf_lat.cc: send_lat, write_lat): the in-band protocol's constants, a
// poller over every flow, posting helpers, and the preamble and end of a run.
//
// Each size is one round: the server (rank 1) gets ready and says so through
// the store, the client (rank 0) runs the warmup and the timed phase, then
// ends the round in band (a zero-length message, or a write with immediate
// kImmEnd) so no receive stays posted into the next size.
#pragma once

#include <grex/transport.h>

#include <array>
#include <string>
#include <vector>

#include "perf_clock.h"
#include "perf_common.h"
#include "perf_pair.h"

namespace grex::perf {

constexpr uint64_t kTagData = 1;
constexpr uint32_t kImmEnd = 2;
constexpr int kMaxBatch = 32;  // requests per post call

/// GREX_TIMEOUT_MS, or 60 s: how long a run may see no completion at all.
int64_t stall_ms();

// Polls every flow and hands each completion to fn(flow, completion). Fails on
// an unsuccessful completion and when nothing completed for GREX_TIMEOUT_MS.
class Poller {
 public:
  explicit Poller(PairJob& job) : job_(job), stall_ns_(static_cast<uint64_t>(stall_ms()) * 1'000'000) {}
  template <typename Fn>
  Result<void> poll(Fn&& fn) {
    bool any = false;
    auto& flows = job_.flows();
    for (size_t f = 0; f < flows.size(); ++f) {
      size_t n = flows[f].device->poll(cq_);
      for (size_t i = 0; i < n; ++i) {
        const Completion& c = cq_[i];
        if (c.status != Status::kSuccess)
          return Error(c.status == Status::kPeerGone ? Errc::kPeerFailed : Errc::kConnectionFailed,
                       "grex-perf: flow " + std::to_string(f) + ": a completion failed: " +
                           std::string(status_name(c.status)))
              .rank(job_.rank())
              .peer(c.peer);
        fn(f, c);
      }
      any |= n > 0;
    }
    uint64_t now = now_ns();
    if (any || last_ == 0) last_ = now;
    if (now - last_ > stall_ns_)
      return Error(Errc::kTimeout, "grex-perf: no completion for " + std::to_string(stall_ns_ / 1'000'000) + " ms")
          .rank(job_.rank())
          .hint("is the other side still running with the same options? (GREX_TIMEOUT_MS)");
    return ok();
  }

 private:
  PairJob& job_;
  uint64_t stall_ns_;
  uint64_t last_ = 0;
  std::array<Completion, 64> cq_{};
};

/// The error for a post that flow `flow` refused.
Error post_failed(const PairJob& job, size_t flow, Errc e, const char* what);

/// Posts up to n sends of `bytes` (or writes into the peer's buffer at
/// `remote_offset`) from offset 0 of flow `fl`'s buffer.
PostResult post_out(PairFlow& fl, Mode mode, size_t bytes, int n, bool with_imm = false, uint32_t imm = 0,
                    size_t remote_offset = 0);

/// perftest's preamble: backend, device, flows, buffers, budget, connection.
std::string p2p_preamble(const PairJob& job, const PerfArgs& a, const char* title);
/// Closes a run: the rule, --stats (rank 0's flows first), a barrier, then
/// rank 0 writes --json and --plot. Returns the exit code.
Result<int> p2p_finish(PairJob& job, const PerfArgs& a, const std::vector<Json>& rows, const PlotData& plot);

}  // namespace grex::perf
