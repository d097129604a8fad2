// SPDX-License-Identifier: Apache-2.0
// The two ends of a perftest style run (send_bw, write_bw, send_lat,
// write_lat): the job's bootstrap, this process's role, and one transport
// device, endpoint and registered buffer per flow (-q). Ranks 0 and 1 take
// part; other ranks of a launched job only wait for the end.
#pragma once

#include <grex/bootstrap.h>
#include <grex/result.h>
#include <grex/transport.h>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "perf_args.h"

namespace grex::perf {

/// One flow: its own device (a QP and CQ on verbs, a port and reliable flow on
/// dpdk, a ring on shm), the endpoint to the other side and a buffer of the
/// sweep's largest size.
struct PairFlow {
  std::unique_ptr<Device> device;
  std::unique_ptr<Endpoint> endpoint;
  MemoryRegion* region = nullptr;  ///< the buffer, registered (or from Device::allocate)
  void* buffer = nullptr;          ///< malloc'ed when !allocated
  bool allocated = false;          ///< region came from Device::allocate (--alloc)
  RemoteRegion peer_region{};      ///< the other side's buffer (targets of write_*)
};

/// A connected pair. Rank 0 is the client: it sends in the bandwidth modes and
/// starts each round trip in the latency modes.
class PairJob {
 public:
  static constexpr int kClient = 0;
  static constexpr int kServer = 1;

  /// Joins the job (launcher environment, or as server / client of
  /// `a.server_host` when a.server_client), then connects a.flows flows of
  /// buffers of `buffer_bytes` between ranks 0 and 1.
  static Result<std::unique_ptr<PairJob>> connect(const PerfArgs& a, size_t buffer_bytes);
  ~PairJob();
  PairJob(const PairJob&) = delete;
  PairJob& operator=(const PairJob&) = delete;

  int rank() const noexcept { return bootstrap_->rank(); }
  int size() const noexcept { return bootstrap_->world_size(); }
  bool client() const noexcept { return rank() == kClient; }
  /// Rank 0 or 1.
  bool active() const noexcept { return rank() <= kServer; }
  /// Prints results: rank 0 under a launcher; both sides of a server/client run.
  bool prints() const noexcept { return rank() == kClient || (server_client_ && rank() == kServer); }
  bool server_client() const noexcept { return server_client_; }
  std::vector<PairFlow>& flows() noexcept { return flows_; }
  /// The driver in use and its device name ("shm", "shm"; "verbs", "rxe0").
  const Capabilities& capabilities() const noexcept { return caps_; }

  /// Publishes `value` under `key` (scoped to this job) for the other side.
  Result<void> put(std::string_view key, std::string_view value);
  /// Waits up to the bootstrap timeout for the other side's `key`.
  Result<std::string> take(std::string_view key);
  /// Every rank of the job meets here (ranks above 1 only wait at the end).
  Result<void> barrier(std::string_view name);
  /// Writes `text` to stdout when this process prints.
  void print(const std::string& text) const;
  /// "rank N flow F (driver device): name=value ..." lines of the counters that are not 0.
  std::string counter_lines() const;

 private:
  PairJob() = default;
  Result<void> open_flows(const PerfArgs& a, size_t buffer_bytes, const std::string& job_id);
  std::unique_ptr<StoreServer> server_;  // the server of a server/client run hosts the store
  std::unique_ptr<Bootstrap> bootstrap_;
  std::vector<PairFlow> flows_;
  Capabilities caps_;
  std::string key_prefix_;
  std::string token_;  // the job's secret: the store's and, through DeviceOptions::job_key, the wire's
  bool server_client_ = false;
};

/// True when the environment names a launcher (grex-run, torchrun, Open MPI, Slurm).
bool launched() noexcept;

}  // namespace grex::perf
