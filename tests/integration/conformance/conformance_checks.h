// SPDX-License-Identifier: Apache-2.0
// What the conformance checks share (conformance_*_test.cc): the fixture
// that skips a driver which cannot run here, and helpers that post batches,
// trade regions and end a check in a barrier during which both ranks poll.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "conformance_driver.h"

namespace grex::test {

class Conformance : public ::testing::Test {
 protected:
  void SetUp() override {
    const Probe& p = Driver::get().probe();
    if (p.kind == Probe::kSkip) GTEST_SKIP() << p.why;
    if (p.kind == Probe::kFail) FAIL() << p.why;
  }
  Driver& driver = Driver::get();
};

#define EXPECT_RANKS_OK(res) EXPECT_TRUE((res).all_ok()) << (res).describe() << " (driver " << driver.name() << ")"

/// The driver's link for `r`, with `extra` params and, when nonzero, a queue depth.
inline Result<Link> open(Rank& r, const char* name, const std::map<std::string, std::string>& extra = {},
                  uint32_t queue_depth = 0) {
  DeviceOptions o = Driver::get().options(r.rank, extra);
  if (queue_depth > 0) o.queue_depth = queue_depth;
  return open_link(r, name, o);
}

inline bool send_all(Device& dev, Endpoint& ep, const std::vector<SendRequest>& v, std::vector<Completion>* done) {
  return post_all(dev, v, [&](auto s) { return ep.post_send(s); }, done);
}
inline bool recv_all(Device& dev, Endpoint& ep, const std::vector<RecvRequest>& v, std::vector<Completion>* done) {
  return post_all(dev, v, [&](auto s) { return ep.post_recv(s); }, done);
}
inline bool write_all(Device& dev, Endpoint& ep, const std::vector<WriteRequest>& v, std::vector<Completion>* done) {
  return post_all(dev, v, [&](auto s) { return ep.post_write(s); }, done);
}

/// Every rank's RemoteRegion of `mr`, by rank.
inline Result<std::vector<RemoteRegion>> exchange_regions(Rank& r, const std::string& name, const MemoryRegion* mr) {
  RemoteRegion mine = mr->remote();
  auto all = GREX_TRY(r.bootstrap->all_gather(name, std::string(reinterpret_cast<char*>(&mine), sizeof(mine))));
  std::vector<RemoteRegion> out(all.size());
  for (size_t i = 0; i < all.size(); ++i) std::memcpy(&out[i], all[i].data(), sizeof(RemoteRegion));
  return out;
}

/// Polls (a target must, for drivers whose one-sided operations progress in
/// the target's poll) until the peer sets `key` in the store; completions go to `seen`.
inline bool serve_until(Rank& r, Device& dev, const std::string& key, std::vector<Completion>* seen,
                 int64_t timeout_ms = 60'000) {
  Deadline dl = Deadline::after_ms(timeout_ms);
  const std::string keys[] = {key};
  Completion cs[16];
  for (uint32_t i = 0;; ++i) {
    size_t n = dev.poll(cs);
    seen->insert(seen->end(), cs, cs + n);
    if (i % 256 == 0) {
      auto there = r.bootstrap->store().check(keys);
      if (there.ok() && (*there)[0]) return true;
      if (dl.expired()) return false;
    }
  }
}

inline void signal(Rank& r, const std::string& key) { (void)r.bootstrap->store().set(key, "1"); }

/// The end of a check: a barrier during which both ranks keep polling. A
/// driver that makes progress only in poll() (dpdk) must still acknowledge
/// the peer's last packets, or resend its own, after its own work is done.
inline bool finish(Rank& r, Device& dev, const std::string& name) {
  signal(r, name + "/" + std::to_string(r.rank));
  std::vector<Completion> late;
  return serve_until(r, dev, name + "/" + std::to_string(1 - r.rank), &late);
}

}  // namespace grex::test
