// SPDX-License-Identifier: Apache-2.0
// Launcher environment adapters (grex-run, torchrun, Open MPI, Slurm) and BootstrapConfig validation.
#include "core/config.h"

#include <grex/bootstrap.h>

#include <climits>
#include <cstdlib>

namespace grex {
namespace {

/// The variables one launcher sets; local_size may be null (computed apart).
struct LauncherVars {
  const char* launcher;
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;
};

constexpr LauncherVars kLaunchers[] = {
    {"grex-run", "GREX_RANK", "GREX_WORLD_SIZE", "GREX_LOCAL_RANK", "GREX_LOCAL_SIZE"},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr},
};

constexpr uint16_t kDefaultStorePort = 29500;
const char* const kTokenHint = "GREX_JOB_TOKEN must be the same on every rank (grex-run sets it for you)";

bool is_set(const char* name) { return name != nullptr && std::getenv(name) != nullptr; }

// Parses env var `name` (which must be set) as an integer in [min, max].
Result<int64_t> env_in_range(const char* name, int64_t min, int64_t max) {
  int64_t v = 0;
  GREX_TRY(config::env_int(name, &v, min, max));
  return v;
}

// Slurm's tasks on this node: SLURM_NTASKS_PER_NODE, else SLURM_TASKS_PER_NODE when it is a
// plain number (it reads "2(x3),1" on uneven allocations, which says nothing about this node).
Result<int> slurm_local_size() {
  if (is_set("SLURM_NTASKS_PER_NODE"))
    return static_cast<int>(GREX_TRY(env_in_range("SLURM_NTASKS_PER_NODE", 1, INT_MAX)));
  std::string tpn = config::env_or_empty("SLURM_TASKS_PER_NODE");
  auto v = config::parse_int(tpn, "SLURM_TASKS_PER_NODE");
  if (v.ok() && *v >= 1 && *v <= INT_MAX) return static_cast<int>(*v);
  return -1;
}

Result<void> read_ranks(const LauncherVars& l, BootstrapConfig* cfg) {
  const char* missing = !is_set(l.rank) ? l.rank : !is_set(l.size) ? l.size : nullptr;
  if (missing != nullptr) {
    return Error(Errc::kInvalidArgument, std::string(missing) + " is not set, but " +
                                             (missing == l.rank ? l.size : l.rank) + " is (" + l.launcher + ")")
        .hint("set both, or neither");
  }
  cfg->rank = static_cast<int>(GREX_TRY(env_in_range(l.rank, 0, INT_MAX)));
  cfg->world_size = static_cast<int>(GREX_TRY(env_in_range(l.size, 1, INT_MAX)));
  if (is_set(l.local_rank)) cfg->local_rank = static_cast<int>(GREX_TRY(env_in_range(l.local_rank, 0, INT_MAX)));
  if (l.local_size == nullptr) cfg->local_size = GREX_TRY(slurm_local_size());
  else if (is_set(l.local_size)) cfg->local_size = static_cast<int>(GREX_TRY(env_in_range(l.local_size, 1, INT_MAX)));
  cfg->launcher = l.launcher;
  return ok();
}

Result<uint16_t> parse_port(std::string_view text, const char* name) {
  int64_t v = GREX_TRY(config::parse_int(text, name));
  if (v < 1 || v > 65535)
    return Error(Errc::kInvalidArgument, std::string(name) + "='" + std::string(text) + "' is not a port in 1..65535");
  return static_cast<uint16_t>(v);
}

// "host:port" or "[v6]:port".
Result<void> parse_store_addr(const std::string& addr, BootstrapConfig* cfg) {
  const auto bad = [&] {
    return Error(Errc::kInvalidArgument, "GREX_STORE_ADDR='" + addr + "' is not host:port")
        .hint("e.g. GREX_STORE_ADDR=10.0.0.1:29500 or [fe80::1]:29500");
  };
  size_t colon = addr.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == addr.size()) return bad();
  std::string host = addr.substr(0, colon);
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') return bad();
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string::npos) {
    return bad();  // a bare IPv6 literal needs brackets
  }
  cfg->store_port = GREX_TRY(parse_port(std::string_view(addr).substr(colon + 1), "GREX_STORE_ADDR port"));
  cfg->store_host = std::move(host);
  return ok();
}

Result<void> read_store(BootstrapConfig* cfg) {
  if (is_set("GREX_STORE_ADDR")) {
    GREX_TRY(parse_store_addr(config::env_or_empty("GREX_STORE_ADDR"), cfg));
  } else {
    cfg->store_host = "127.0.0.1";
    cfg->store_port = kDefaultStorePort;
    if (is_set("MASTER_ADDR")) {
      cfg->store_host = config::env_or_empty("MASTER_ADDR");
      if (cfg->store_host.empty()) return Error(Errc::kInvalidArgument, "MASTER_ADDR is set but empty");
    }
    if (is_set("MASTER_PORT")) cfg->store_port = GREX_TRY(parse_port(config::env_or_empty("MASTER_PORT"), "MASTER_PORT"));
  }
  bool external = false;
  GREX_TRY(config::env_bool("GREX_STORE_EXTERNAL", &external));
  cfg->host_store = !external;
  GREX_TRY(config::env_string("GREX_JOB_TOKEN", &cfg->job_token));
  GREX_TRY(config::env_int("GREX_BOOTSTRAP_TIMEOUT_MS", &cfg->timeout_ms, 1, INT64_MAX / 1'000'000));
  return ok();
}

// "(from RANK/WORLD_SIZE set by torchrun)" for validation errors.
std::string source_of(const BootstrapConfig& cfg) {
  for (const auto& l : kLaunchers)
    if (cfg.launcher == l.launcher)
      return std::string(" (from ") + l.rank + "/" + l.size + " set by " + l.launcher + ")";
  return " (from the BootstrapConfig)";
}

}  // namespace

Result<BootstrapConfig> bootstrap_from_env() {
  BootstrapConfig cfg;
  const LauncherVars* found = nullptr;
  for (const auto& l : kLaunchers) {
    if (is_set(l.rank) || is_set(l.size)) {
      found = &l;
      break;
    }
  }
  if (found == nullptr) {
    return Error(Errc::kNotFound,
                 "bootstrap: no launcher environment found (set GREX_RANK/GREX_WORLD_SIZE, or run under grex-run, "
                 "torchrun, mpirun or srun)");
  }
  GREX_TRY_CTX(read_ranks(*found, &cfg), "bootstrap");
  GREX_TRY_CTX(read_store(&cfg), "bootstrap");
  return cfg;
}

Result<void> validate(const BootstrapConfig& cfg) {
  const auto invalid = [&](const std::string& what) {
    return Error(Errc::kInvalidArgument, "bootstrap: " + what + source_of(cfg));
  };
  if (cfg.world_size < 1) return invalid("world size " + std::to_string(cfg.world_size) + " is not positive");
  if (cfg.rank < 0) return invalid("rank " + std::to_string(cfg.rank) + " is negative");
  if (cfg.rank >= cfg.world_size) {
    return invalid("rank " + std::to_string(cfg.rank) + " is not below world size " +
                   std::to_string(cfg.world_size));
  }
  if (cfg.local_size == 0 || cfg.local_size < -1 || cfg.local_rank < -1 ||
      (cfg.local_size > 0 && cfg.local_rank >= cfg.local_size)) {
    return invalid("local rank " + std::to_string(cfg.local_rank) + " / local size " +
                   std::to_string(cfg.local_size) + " is not a valid pair (-1 means unknown)");
  }
  if (cfg.store_host.empty())
    return Error(Errc::kInvalidArgument, "bootstrap: the store host is empty").hint("set GREX_STORE_ADDR=host:port");
  if (cfg.store_port == 0) {
    return Error(Errc::kInvalidArgument, "bootstrap: store port 0 is not in 1..65535")
        .hint("set GREX_STORE_ADDR=host:port or MASTER_PORT");
  }
  if (cfg.timeout_ms == 0)
    return Error(Errc::kInvalidArgument, "bootstrap: timeout_ms is 0 (use > 0, or < 0 for no timeout)");
  if (cfg.job_token.empty())
    return Error(Errc::kAuthFailed, "bootstrap: GREX_JOB_TOKEN is not set; the store needs a job token").hint(kTokenHint);
  return ok();
}

}  // namespace grex
