// SPDX-License-Identifier: Apache-2.0
// GID choice for the verbs driver, apart from any device so unit tests can
// drive it: rdma_cm binds an IPv4 address, and that address selects the GID.
#pragma once

#include <grex/result.h>

#include <cstdint>
#include <span>
#include <string>

namespace grex::verbs {

/// One entry of a port's GID table (what ibv_query_gid_table reports).
struct GidEntry {
  uint32_t index = 0;
  uint32_t port = 0;
  uint8_t raw[16] = {};
  bool roce_v2 = false;  ///< IBV_GID_TYPE_ROCE_V2 (RoCE v1 and IB GIDs are false)
};

struct GidChoice {
  uint32_t index = 0;
  uint32_t ip = 0;  ///< host order
};

/// True when `raw` is an IPv4-mapped IPv6 address (::ffff:a.b.c.d); sets *ip.
bool ipv4_mapped(const uint8_t raw[16], uint32_t* ip) noexcept;

/// Picks the GID for `port`: the entry `wanted` when >= 0 (it must be
/// IPv4-mapped), else the first RoCE v2 IPv4-mapped one. Errors name the
/// device and say what to set instead.
Result<GidChoice> choose_gid(std::span<const GidEntry> table, uint32_t port, int wanted, const std::string& device);

}  // namespace grex::verbs
