// SPDX-License-Identifier: Apache-2.0
// Device::open by name, over the driver table (defined in drivers/driver_table.cc).
#include "transport/registry.h"


namespace grex {

std::vector<std::string> Device::available_drivers() {
  std::vector<std::string> out;
  for (const auto& d : detail::drivers())
    if (d.open != nullptr) out.emplace_back(d.name);
  return out;
}

Result<std::unique_ptr<Device>> Device::open(const DeviceOptions& opts) {
  std::string built;
  for (const auto& d : detail::drivers()) {
    if (d.open != nullptr) built += (built.empty() ? "" : ", ") + std::string(d.name);
  }
  for (const auto& d : detail::drivers()) {
    if (opts.driver != d.name) continue;
    if (d.open == nullptr)
      return Error(Errc::kNotFound, "driver '" + opts.driver + "' is not available: " + d.missing_hint)
          .rank(opts.rank)
          .hint("drivers in this build: " + built);
    if (opts.world_size < 1 || opts.rank < 0 || opts.rank >= opts.world_size)
      return Error(Errc::kInvalidArgument, "rank " + std::to_string(opts.rank) + " is outside world size " +
                                               std::to_string(opts.world_size))
          .device(opts.driver);
    return d.open(opts);
  }
  return Error(Errc::kNotFound, "unknown driver '" + opts.driver + "'")
      .rank(opts.rank)
      .hint("drivers in this build: " + built + " (GREX_BACKEND / --backend)");
}

}  // namespace grex
