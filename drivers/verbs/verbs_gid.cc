// SPDX-License-Identifier: Apache-2.0
#include "drivers/verbs/verbs_gid.h"

#include <arpa/inet.h>

#include <cstring>

namespace grex::verbs {

bool ipv4_mapped(const uint8_t raw[16], uint32_t* ip) noexcept {
  static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::memcmp(raw, prefix, 12) != 0) return false;
  uint32_t be;
  std::memcpy(&be, raw + 12, 4);
  *ip = ntohl(be);
  return true;
}

Result<GidChoice> choose_gid(std::span<const GidEntry> table, uint32_t port, int wanted, const std::string& device) {
  for (const GidEntry& e : table) {
    if (e.port != port) continue;
    if (wanted >= 0 && e.index != static_cast<uint32_t>(wanted)) continue;
    if (wanted < 0 && !e.roce_v2) continue;
    uint32_t ip = 0;
    if (!ipv4_mapped(e.raw, &ip)) {
      if (wanted >= 0)
        return Error(Errc::kInvalidArgument, "GID index " + std::to_string(wanted) + " of " + device + " port " +
                                                 std::to_string(port) +
                                                 " is not an IPv4-mapped GID; rdma_cm needs an IPv4 address")
            .device(device)
            .hint("pick another GREX_IB_GID_INDEX (see `show_gids` or /sys/class/infiniband/" + device +
                  "/ports/" + std::to_string(port) + "/gids), or set GREX_IB_IP");
      continue;
    }
    return GidChoice{e.index, ip};
  }
  if (wanted >= 0)
    return Error(Errc::kNotFound, device + " port " + std::to_string(port) + " has no GID index " +
                                      std::to_string(wanted))
        .device(device)
        .hint("GREX_IB_GID_INDEX must name a populated entry of the port's GID table");
  return Error(Errc::kNotFound, device + " port " + std::to_string(port) + " has no RoCE v2 GID with an IPv4 address")
      .device(device)
      .hint("give its network device an IPv4 address, or set GREX_IB_IP (InfiniBand: the IPoIB address)");
}

}  // namespace grex::verbs
