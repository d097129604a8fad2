// SPDX-License-Identifier: Apache-2.0
// Bootstrap: start or reach the store for this rank, and all_gather/barrier on top of it.
#include "bootstrap/store_protocol.h"
#include "bootstrap/store_server.h"
#include "bootstrap/store_socket.h"
#include "bootstrap/store_util.h"
#include "core/clock.h"
#include "core/log.h"

#include <grex/bootstrap.h>

#include <algorithm>
#include <chrono>
#include <thread>

namespace grex {
namespace {

constexpr int64_t kShutdownGraceMs = 5'000;
constexpr int64_t kJoinRetryMs = 50;  // between tries at a store that is not this job's

// Timeouts beyond kForeverMs (35 years) are kForeverMs, "never", so deadlines
// cannot overflow; a negative one (the store refuses those) is never too.
int64_t no_overflow(int64_t timeout_ms) {
  return timeout_ms < 0 || timeout_ms > detail::store::kForeverMs ? detail::store::kForeverMs : timeout_ms;
}

// A wildcard listen address is not something to connect to; use loopback.
std::string connectable(const std::string& host) {
  if (host.empty() || host == "0.0.0.0") return "127.0.0.1";
  if (host == "::" || host == "[::]") return "::1";
  return host;
}

}  // namespace

Bootstrap::~Bootstrap() {
  if (!server_) return;
  // Drop our own client, then give the other ranks a moment to finish their last request
  // (say, the wait of a final barrier) and disconnect before the store goes away.
  store_.reset();
  int64_t grace_ms = timeout_ms_ < 0 ? kShutdownGraceMs : std::min(timeout_ms_, kShutdownGraceMs);
  auto* server = static_cast<detail::store::StoreServerImpl*>(server_.get());
  if (!server->wait_idle(grace_ms)) {
    GREX_INFO("bootstrap", "stopping the store with %d rank(s) still connected", server->clients());
  }
  server_->stop();
}

// A store that rank 0 hosts serves one job. Ranks that run a next job with the
// same address and token can reach it while rank 0 is still tearing the last
// one down (its store waits for the others to leave): there they would read that
// job's keys as this one's, and lose the store when it stops. So each rank counts
// itself in; a rank that finds its number already counted has reached a store
// that is not its job's, leaves, and tries again until the new store answers.
// Rank 0 created its store, so it never waits. The same check names two
// processes that claim one rank.
Result<std::shared_ptr<Store>> Bootstrap::join(const std::string& host, const BootstrapConfig& cfg) {
  const bool forever = cfg.timeout_ms > detail::store::kForeverMs;
  Deadline deadline = forever ? Deadline::never() : Deadline::after_ms(cfg.timeout_ms);
  const std::string key = "grex/joined/" + std::to_string(cfg.rank);
  for (int tries = 1;; ++tries) {
    int64_t left = forever ? cfg.timeout_ms : std::max<int64_t>(deadline.remaining_ms(), 1);
    auto store = TcpStore::connect(host, cfg.store_port, cfg.job_token, left);
    if (!store.ok()) return std::move(store).error().context("bootstrap").rank(cfg.rank);
    if (!cfg.host_store) return std::shared_ptr<Store>(std::move(*store));
    auto counted = (*store)->add(key, 1);
    if (!counted.ok() && counted.error().code() != Errc::kConnectionFailed)
      return std::move(counted).error().context("bootstrap").rank(cfg.rank);
    if (counted.ok() && *counted == 1) {
      if (tries > 1)
        GREX_INFO("bootstrap", "rank %d joined on try %d (an earlier job's store was closing)", cfg.rank, tries);
      return std::shared_ptr<Store>(std::move(*store));
    }
    if (deadline.expired()) {
      if (!counted.ok()) return std::move(counted).error().context("bootstrap").rank(cfg.rank);
      return Error(Errc::kMismatch, "bootstrap: for " + std::to_string(cfg.timeout_ms) + " ms the store at " +
                                        detail::store::host_port(host, cfg.store_port) + " had already seen rank " +
                                        std::to_string(cfg.rank) + " join")
          .rank(cfg.rank)
          .hint("two processes claim this rank, or an earlier job with the same GREX_JOB_TOKEN still holds this "
                "store address; give each job its own token or port");
    }
    store->reset();  // not this job's store (or it stopped as we counted): leave it, wait for the next
    int64_t nap = forever ? kJoinRetryMs : std::min<int64_t>(kJoinRetryMs, deadline.remaining_ms());
    std::this_thread::sleep_for(std::chrono::milliseconds(nap));
  }
}

Result<std::unique_ptr<Bootstrap>> Bootstrap::create(const BootstrapConfig& cfg) {
  GREX_TRY(validate(cfg));
  log::set_rank(cfg.rank);
  std::unique_ptr<Bootstrap> b(new Bootstrap());
  b->rank_ = cfg.rank;
  b->world_size_ = cfg.world_size;
  b->timeout_ms_ = no_overflow(cfg.timeout_ms);
  b->store_where_ = "store " + detail::store::host_port(cfg.store_host, cfg.store_port);
  b->job_token_ = cfg.job_token;
  std::string host = cfg.store_host;
  if (cfg.host_store && cfg.rank == 0) {
    b->server_ = GREX_TRY_CTX(StoreServer::start(cfg.store_host, cfg.store_port, cfg.job_token), "bootstrap");
    host = connectable(cfg.store_host);
  }
  b->store_ = GREX_TRY(join(host, cfg));
  b->store_host_ = host;
  b->store_port_ = cfg.store_port;
  GREX_INFO("bootstrap", "rank %d of %d (launcher %s) joined %s", cfg.rank, cfg.world_size,
            cfg.launcher.empty() ? "explicit" : cfg.launcher.c_str(), b->store_where_.c_str());
  return b;
}

std::unique_ptr<Bootstrap> Bootstrap::with_store(std::shared_ptr<Store> store, int rank, int world_size,
                                                 int64_t timeout_ms) {
  std::unique_ptr<Bootstrap> b(new Bootstrap());
  b->store_ = std::move(store);
  b->rank_ = rank;
  b->world_size_ = world_size;
  b->timeout_ms_ = no_overflow(timeout_ms);
  return b;
}

Result<std::unique_ptr<TcpStore>> Bootstrap::connect_again(int64_t timeout_ms) const {
  if (store_host_.empty())
    return Error(Errc::kNotSupported, "bootstrap: this store is not grex's own (with_store): no second connection");
  return TcpStore::connect(store_host_, store_port_, job_token_, timeout_ms);
}

Result<std::vector<std::string>> Bootstrap::all_gather(std::string_view name, std::string_view value) {
  return exchange("ag", name, value, /*fetch=*/true);
}

Result<void> Bootstrap::barrier(std::string_view name) {
  GREX_TRY(exchange("barrier", name, {}, /*fetch=*/false));
  return ok();
}

Result<std::vector<std::string>> Bootstrap::exchange(std::string_view kind, std::string_view name,
                                                     std::string_view value, bool fetch) {
  uint64_t seq = 0;
  {
    std::lock_guard<std::mutex> lock(seq_mu_);
    seq = seq_[std::string(kind) + ":" + std::string(name)]++;
  }
  // Rank and sequence number are the last two path parts, so no two (name, seq, rank) share a key.
  std::string prefix = "grex/" + std::string(kind) + "/" + std::string(name) + "/" + std::to_string(seq) + "/";
  std::vector<std::string> keys(static_cast<size_t>(world_size_));
  for (int r = 0; r < world_size_; ++r) keys[static_cast<size_t>(r)] = prefix + std::to_string(r);
  const std::string what = "bootstrap: '" + std::string(name) + "'";
  Deadline deadline = Deadline::after_ms(timeout_ms_);

  GREX_TRY_CTX(store_->set(keys[static_cast<size_t>(rank_)], value), what);
  auto waited = store_->wait(keys, timeout_ms_);
  if (!waited.ok()) {
    if (waited.error().code() != Errc::kTimeout) return std::move(waited).error().context(what);
    auto present = store_->check(keys);
    if (!present.ok()) return std::move(waited).error().context(what);
    std::vector<int> missing;
    for (int r = 0; r < world_size_; ++r)
      if (!(*present)[static_cast<size_t>(r)]) missing.push_back(r);
    if (!missing.empty()) {
      std::string cause = (missing.size() == 1 ? "rank " : "ranks ") + detail::store::compact_ranks(missing) +
                          " never arrived at '" + std::string(name) + "' within " + std::to_string(timeout_ms_) +
                          " ms";
      if (!store_where_.empty()) cause += " (" + store_where_ + ")";
      return Error(Errc::kTimeout, "bootstrap: " + cause)
          .rank(rank_)
          .hint("those ranks crashed, hang, or never started; look at their logs");
    }
  }
  std::vector<std::string> values;
  if (!fetch) return values;
  values.resize(static_cast<size_t>(world_size_));
  for (int r = 0; r < world_size_; ++r) {
    if (r == rank_) {
      values[static_cast<size_t>(r)] = std::string(value);
      continue;
    }
    int64_t left = timeout_ms_ < 0 ? -1 : deadline.remaining_ms();
    values[static_cast<size_t>(r)] = GREX_TRY_CTX(store_->get(keys[static_cast<size_t>(r)], left), what);
  }
  return values;
}

}  // namespace grex
