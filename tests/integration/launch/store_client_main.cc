// SPDX-License-Identifier: Apache-2.0
// A rank for grex-run tests: finds the launcher's store from its environment and all_gathers every rank's value.
#include <grex/bootstrap.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

constexpr int64_t kBootstrapTimeoutMs = 15'000;  // well inside the test's timeout

std::string value_of(int rank) { return "value-of-rank-" + std::to_string(rank); }

int fail(int rank, const std::string& what) {
  std::fprintf(stderr, "store_client: rank %d: %s\n", rank, what.c_str());
  return 1;
}

}  // namespace

int main() {
  grex::Result<grex::BootstrapConfig> cfg = grex::bootstrap_from_env();
  if (!cfg.ok()) return fail(-1, "bootstrap_from_env: " + cfg.error().message());
  int rank = cfg->rank;
  const char* world_env = std::getenv("GREX_WORLD_SIZE");
  if (world_env == nullptr || cfg->world_size != std::atoi(world_env))
    return fail(rank, "world size " + std::to_string(cfg->world_size) + " != GREX_WORLD_SIZE");
  if (cfg->host_store) return fail(rank, "host_store is set although grex-run serves the store");
  if (cfg->job_token.empty()) return fail(rank, "no job token");
  cfg->timeout_ms = kBootstrapTimeoutMs;

  grex::Result<std::unique_ptr<grex::Bootstrap>> boot = grex::Bootstrap::create(*cfg);
  if (!boot.ok()) return fail(rank, "Bootstrap::create: " + boot.error().message());
  grex::Result<std::vector<std::string>> all = (*boot)->all_gather("launch_test", value_of(rank));
  if (!all.ok()) return fail(rank, "all_gather: " + all.error().message());
  if (static_cast<int>(all->size()) != cfg->world_size)
    return fail(rank, "all_gather returned " + std::to_string(all->size()) + " values");
  for (int r = 0; r < cfg->world_size; ++r)
    if ((*all)[static_cast<size_t>(r)] != value_of(r))
      return fail(rank, "value from rank " + std::to_string(r) + " is '" +
                            (*all)[static_cast<size_t>(r)] + "'");
  grex::Result<void> done = (*boot)->barrier("launch_test_done");
  if (!done.ok()) return fail(rank, "barrier: " + done.error().message());
  std::printf("store_client: rank %d saw all %d values\n", rank, cfg->world_size);
  return 0;
}
