// SPDX-License-Identifier: Apache-2.0
/// @file bootstrap.h
/// Rendezvous: a key-value store every rank reaches over TCP, authenticated by
/// a job token, and the launcher environment adapters that find it.
///
/// Every wait has a timeout; an error after a timeout names what never
/// arrived ("ranks 2, 5 never arrived within 30000 ms at store 10.0.0.1:29500").
#pragma once

#include <grex/result.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace grex {

/// Where a rank finds the store and who it is. Filled by bootstrap_from_env()
/// or by hand.
struct BootstrapConfig {
  int rank = -1;
  int world_size = -1;
  int local_rank = -1;   ///< rank among the processes of this host (-1: unknown)
  int local_size = -1;   ///< processes on this host (-1: unknown)
  std::string store_host = "127.0.0.1";
  uint16_t store_port = 29500;
  /// Rank 0 hosts the store when true; false when a grex-store or the
  /// launcher (grex-run) already serves it (GREX_STORE_EXTERNAL=1).
  bool host_store = true;
  std::string job_token;      ///< shared secret (GREX_JOB_TOKEN); required
  int64_t timeout_ms = 60'000;  ///< every wait (GREX_BOOTSTRAP_TIMEOUT_MS)
  std::string launcher;       ///< "grex-run", "torchrun", "openmpi", "slurm", "explicit"
};

/// Reads the launcher's environment, in this order: GREX_RANK/GREX_WORLD_SIZE
/// (grex-run), torchrun (RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT),
/// Open MPI (OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE), Slurm
/// (SLURM_PROCID SLURM_NTASKS SLURM_LOCALID). The store address comes from
/// GREX_STORE_ADDR=host:port, else MASTER_ADDR/MASTER_PORT, else 127.0.0.1:29500.
/// Errors name the variable that is missing or malformed.
Result<BootstrapConfig> bootstrap_from_env();

/// Checks rank/world/port/token; errors say which field is wrong.
Result<void> validate(const BootstrapConfig& cfg);

/// A key-value store shared by the ranks of a job. Implementations: TcpStore
/// and LocalStore (below); the PyTorch backend adapts torch's c10d::Store. Thread-safe.
class Store {
 public:
  virtual ~Store() = default;
  /// Sets key to value (overwrites).
  virtual Result<void> set(std::string_view key, std::string_view value) = 0;
  /// Waits until key exists, up to timeout_ms, and returns its value.
  virtual Result<std::string> get(std::string_view key, int64_t timeout_ms) = 0;
  /// Atomically adds delta to the integer at key (missing = 0); returns the new value.
  virtual Result<int64_t> add(std::string_view key, int64_t delta) = 0;
  /// Returns, for each key, whether it exists now. Never waits.
  virtual Result<std::vector<bool>> check(std::span<const std::string> keys) = 0;
  /// Waits until all keys exist, up to timeout_ms. On timeout the error
  /// (kTimeout) lists the keys still missing.
  virtual Result<void> wait(std::span<const std::string> keys, int64_t timeout_ms);
  /// Removes the keys that exist; returns how many did. A wait that already
  /// saw a key keeps counting it. kNotSupported where the store cannot.
  virtual Result<int64_t> erase(std::span<const std::string> keys);
};

/// "host:port" as GREX_STORE_ADDR takes it ("[::1]:29500" for an IPv6 address).
std::string store_address(std::string_view host, uint16_t port);

/// The TCP store server. Runs one thread with poll(2); every connection must
/// answer an HMAC-SHA256 challenge keyed by the job token before any command.
class StoreServer {
 public:
  /// Listens on host:port (port 0 picks a free one; see port()).
  /// Errors: kAddressInUse naming the port, kInvalidArgument for an empty token.
  static Result<std::unique_ptr<StoreServer>> start(const std::string& host, uint16_t port,
                                                    std::string job_token);
  virtual ~StoreServer() = default;
  /// The port actually bound.
  virtual uint16_t port() const noexcept = 0;
  /// Stops serving and joins the thread (also done by the destructor).
  virtual void stop() noexcept = 0;
};

/// Client of StoreServer. Connecting retries until timeout_ms (the server may
/// start after the client). Errors: kAuthFailed when the server rejects the
/// token (or the server fails to prove it knows it), kTimeout when nothing
/// listens, naming host:port.
class TcpStore final : public Store {
 public:
  static Result<std::unique_ptr<TcpStore>> connect(const std::string& host, uint16_t port,
                                                   const std::string& job_token,
                                                   int64_t timeout_ms);
  ~TcpStore() override;
  Result<void> set(std::string_view key, std::string_view value) override;
  Result<std::string> get(std::string_view key, int64_t timeout_ms) override;
  Result<int64_t> add(std::string_view key, int64_t delta) override;
  Result<std::vector<bool>> check(std::span<const std::string> keys) override;
  Result<void> wait(std::span<const std::string> keys, int64_t timeout_ms) override;
  Result<int64_t> erase(std::span<const std::string> keys) override;
  /// Wakes a call blocked in another thread (a long get or wait): it, and
  /// every later call, fails with kConnectionFailed. Thread-safe.
  void interrupt() noexcept;

  struct Impl;

 private:
  explicit TcpStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// A store inside this process, for ranks that are threads of one process
/// (the `loop` driver: collectives tested without processes). Thread-safe;
/// get() and wait() block on a condition variable, up to their timeout, and
/// a timeout names the keys still missing. Share one between the ranks'
/// Bootstrap::with_store() calls.
class LocalStore final : public Store {
 public:
  LocalStore();
  ~LocalStore() override;
  Result<void> set(std::string_view key, std::string_view value) override;
  Result<std::string> get(std::string_view key, int64_t timeout_ms) override;
  Result<int64_t> add(std::string_view key, int64_t delta) override;
  Result<std::vector<bool>> check(std::span<const std::string> keys) override;
  Result<void> wait(std::span<const std::string> keys, int64_t timeout_ms) override;
  Result<int64_t> erase(std::span<const std::string> keys) override;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

/// A rank's view of the job: its rank, the store, and collective helpers on
/// top of the store. Hosts the StoreServer when configured to (rank 0).
class Bootstrap {
 public:
  /// Validates cfg, starts the store server if this rank hosts it, connects.
  static Result<std::unique_ptr<Bootstrap>> create(const BootstrapConfig& cfg);
  /// Uses an existing store (e.g. torch's), no server.
  static std::unique_ptr<Bootstrap> with_store(std::shared_ptr<Store> store, int rank,
                                               int world_size, int64_t timeout_ms);
  /// The rank hosting the store first waits (up to min(timeout_ms, 5 s)) for the
  /// other ranks to disconnect, so their last request is answered, then stops it.
  ~Bootstrap();

  int rank() const noexcept { return rank_; }
  int world_size() const noexcept { return world_size_; }
  int64_t timeout_ms() const noexcept { return timeout_ms_; }
  Store& store() noexcept { return *store_; }
  /// The job token this rank joined with (BootstrapConfig::job_token); empty
  /// for with_store(), whose store authenticates nothing of its own.
  const std::string& job_token() const noexcept { return job_token_; }
  std::shared_ptr<Store> store_ptr() const noexcept { return store_; }
  /// A connection of its own to the same store, for a thread that blocks
  /// in long waits without holding up store() (the status responder).
  /// kNotSupported for with_store(), whose store is someone else's.
  Result<std::unique_ptr<TcpStore>> connect_again(int64_t timeout_ms) const;

  /// Every rank contributes `value`; returns all values indexed by rank.
  /// Collective: every rank makes the same sequence of calls per `name`; a
  /// name may be reused (each call gets its own keys). Blocks up to
  /// timeout_ms(). On timeout: kTimeout naming the ranks that never arrived.
  Result<std::vector<std::string>> all_gather(std::string_view name, std::string_view value);
  /// Waits until every rank reached the barrier `name` (reusable like all_gather's names).
  Result<void> barrier(std::string_view name);

 private:
  Bootstrap() = default;
  /// Connects to the store and counts this rank in (a rank-0-hosted store: retries while the
  /// store reached already counts this rank, being an earlier job's).
  static Result<std::shared_ptr<Store>> join(const std::string& host, const BootstrapConfig& cfg);
  /// all_gather and barrier: set this rank's key, wait for all, fetch values if asked.
  Result<std::vector<std::string>> exchange(std::string_view kind, std::string_view name,
                                            std::string_view value, bool fetch);
  std::unique_ptr<StoreServer> server_;
  std::shared_ptr<Store> store_;
  int rank_ = 0;
  int world_size_ = 1;
  int64_t timeout_ms_ = 60'000;
  std::string store_where_;  ///< "store host:port" for errors; empty for with_store
  std::string job_token_;
  std::string store_host_;  ///< where connect_again() connects; empty for with_store
  uint16_t store_port_ = 0;
  std::mutex seq_mu_;
  /// Calls so far per name: successive calls with one name get distinct keys.
  std::unordered_map<std::string, uint64_t> seq_;
};

}  // namespace grex
