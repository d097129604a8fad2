// SPDX-License-Identifier: Apache-2.0
// Where the ranks are, and the barrier after connecting (placement.h); the
// public host_identity() and default_network_backend() (grex/probe.h).
#include "collectives/placement.h"

#include <grex/probe.h>

#include <algorithm>
#include <thread>

#include "core/clock.h"
#include "core/host.h"

namespace grex {
namespace detail {

Placement place(const std::vector<std::string>& machine, const std::vector<std::string>& host, int rank) {
  Placement p;
  const size_t n = host.size();
  p.host_of.assign(n, -1);
  p.local_of.assign(n, 0);
  for (size_t r = 0; r < n; ++r) {
    if (p.host_of[r] >= 0) continue;
    const int h = static_cast<int>(p.hosts.size());
    p.hosts.emplace_back();
    for (size_t q = r; q < n; ++q)
      if (host[q] == host[r]) {
        p.host_of[q] = h;
        p.local_of[q] = static_cast<int>(p.hosts.back().size());
        p.hosts.back().push_back(static_cast<int>(q));
      }
  }
  for (size_t r = 0; r < n; ++r)
    if (machine[r] == machine[static_cast<size_t>(rank)]) {
      p.machine_index += static_cast<int>(r) < rank ? 1 : 0;
      ++p.machine_local;
    }
  return p;
}

// "0-1 | 2-3": each host's ranks, runs of consecutive ranks shortened.
std::string describe_hosts(const std::vector<std::vector<int>>& hosts) {
  std::string out;
  for (const auto& h : hosts) {
    if (!out.empty()) out += " | ";
    std::string one;
    for (size_t i = 0; i < h.size();) {
      size_t j = i;
      while (j + 1 < h.size() && h[j + 1] == h[j] + 1) ++j;
      if (!one.empty()) one += ',';
      one += std::to_string(h[i]);
      if (j > i) one.append(1, '-').append(std::to_string(h[j]));
      i = j + 1;
    }
    out += one;
  }
  return out;
}

// The barrier after connect(), polling the device while it waits: a peer may
// still be in its own connect() to this rank, and a datagram driver (dpdk)
// answers its handshake only from poll(). (The store's blocking barrier left
// such a peer waiting for an answer while this rank waited for it.)
Result<void> connected_barrier(Bootstrap& bs, Device& dev, const std::string& key, int rank, int size,
                               int64_t timeout_ms) {
  Store& st = bs.store();
  // One counter (a check costs the store one key, whatever the job's size);
  // each rank's own key too, for the error's list of the missing.
  GREX_TRY(st.set(key + "/" + std::to_string(rank), "1"));
  GREX_TRY(st.add(key + "/count", 1));
  const Deadline deadline = Deadline::after_ms(timeout_ms);
  Completion sink[16];
  uint64_t gap_ns = 100'000;  // between store checks, answering meanwhile: 0.1 ms growing to 5 ms
  for (;;) {
    if (GREX_TRY(st.add(key + "/count", 0)) >= size) return ok();
    if (deadline.expired()) {
      std::vector<std::string> keys(static_cast<size_t>(size));
      for (int r = 0; r < size; ++r) keys[static_cast<size_t>(r)] = key + "/" + std::to_string(r);
      auto present = GREX_TRY(st.check(keys));
      std::string list;
      size_t missing = 0;
      for (int r = 0; r < size; ++r)
        if (!present[static_cast<size_t>(r)]) {
          list += (list.empty() ? "" : ", ") + std::to_string(r);
          ++missing;
        }
      return Error(Errc::kTimeout, (missing == 1 ? "rank " : "ranks ") + list + " never finished connecting within " +
                                       std::to_string(timeout_ms) + " ms")
          .rank(rank)
          .hint("those ranks crashed, hang, or cannot reach this one; look at their logs");
    }
    const uint64_t until = now_ns() + gap_ns;
    while (now_ns() < until) {
      (void)dev.poll(sink);
      std::this_thread::yield();
    }
    gap_ns = std::min<uint64_t>(gap_ns * 2, 5'000'000);
  }
}

}  // namespace detail

std::string host_identity() { return host_id(); }

std::string default_network_backend() {
  for (const auto& d : probe_rdma_devices().devices)
    for (const auto& port : d.ports)
      if (port.state == "ACTIVE") return "verbs";
  return "dpdk";
}


}  // namespace grex
