// SPDX-License-Identifier: Apache-2.0
// Communicator setup, before any collective: where the ranks are (hosts,
// machines) and the barrier after connecting that keeps answering the device.
#pragma once

#include <grex/bootstrap.h>
#include <grex/transport.h>

#include <string>
#include <vector>

namespace grex::detail {

// Where the ranks are: hosts (ranks that share memory and a network
// namespace, core/host.h) in order of their lowest rank, and machines (ranks
// that share cores).
struct Placement {
  std::vector<int> host_of, local_of;
  std::vector<std::vector<int>> hosts;
  int machine_local = 0, machine_index = 0;  // ranks on this machine; this rank's index among them
};

Placement place(const std::vector<std::string>& machine, const std::vector<std::string>& host, int rank);
/// "0-1 | 2-3": each host's ranks, runs of consecutive ranks shortened.
std::string describe_hosts(const std::vector<std::vector<int>>& hosts);
/// The barrier after connect(), polling `dev` while it waits (a datagram
/// driver answers a peer's handshake only from poll()).
Result<void> connected_barrier(Bootstrap& bs, Device& dev, const std::string& key, int rank, int size,
                               int64_t timeout_ms);

}  // namespace grex::detail
