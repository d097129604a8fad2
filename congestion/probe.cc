// SPDX-License-Identifier: Apache-2.0
// ProbeScheduler: when a flow sends its timing probe (see cc.h).
#include "congestion/cc.h"

namespace grex::cc {

bool ProbeScheduler::on_send(uint64_t now_ns) noexcept {
  if (outstanding_) {
    ++sends_since_;
    // Unanswered past the timeout (lost, or its reply was): give it up, back
    // off, and send the next one once a couple of sends went out without.
    if (now_ns - sent_at_ns_ < timeout_ns() || sends_since_ < kSendsBeforeResend) return false;
    ++lost_;
    if (backoff_ < kMaxBackoffShift) ++backoff_;
  }
  outstanding_ = true;
  sent_at_ns_ = now_ns;
  sends_since_ = 0;
  ++seq_;
  ++sent_;
  return true;
}

bool ProbeScheduler::on_reply(uint32_t seq) noexcept {
  // Only replies newer than the last one taken, and not from the future.
  if (static_cast<int32_t>(seq - answered_) <= 0 || static_cast<int32_t>(seq - seq_) > 0) return false;
  answered_ = seq;
  backoff_ = 0;  // the path answers
  if (seq == seq_) outstanding_ = false;
  return true;
}

}  // namespace grex::cc
