// SPDX-License-Identifier: Apache-2.0
// The dpdk driver's address string, which peers exchange through the store:
//   "dpdk:<mode>:<mac, 12 hex>:<ipv4 as u32>:<udp port>:<pid>:<shares memory 0|1>:
//    <nonce, 32 hex>:<max payload>:<auth mode>:<host id>"
// The host id comes last and may hold ':'. Parsing checks every field and
// never throws: a malformed address (or one a store writer forged) is an
// error, not a crash. Header-only, no DPDK: the fuzzer builds it alone.
#pragma once

#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>

#include "drivers/dpdk/dpdk_frame.h"
#include "transport/wire_auth.h"

namespace grex::dpdk {

struct PeerAddress {
  std::string mode;  ///< "memif" or "port"
  frame::Mac mac{};
  uint32_t ip = 0;
  uint16_t udp_port = 0;
  uint32_t pid = 0;
  bool shares_memory = false;
  uint8_t nonce[wire::kNonceBytes] = {};
  uint32_t max_payload = 0;  ///< 64 .. 65535
  wire::AuthMode auth = wire::AuthMode::kOff;
  std::string host_id;
};

namespace address_detail {
template <class T>
bool number(std::string_view s, T* out) {
  if (s.empty() || s.size() > 10) return false;
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v > static_cast<uint64_t>(T(~T(0)))) return false;
  *out = static_cast<T>(v);
  return true;
}
}  // namespace address_detail

inline std::string format_address(const PeerAddress& a) {
  char mac[13];
  std::snprintf(mac, sizeof(mac), "%02x%02x%02x%02x%02x%02x", a.mac[0], a.mac[1], a.mac[2], a.mac[3], a.mac[4], a.mac[5]);
  return "dpdk:" + a.mode + ":" + mac + ":" + std::to_string(a.ip) + ":" + std::to_string(a.udp_port) + ":" +
         std::to_string(a.pid) + ":" + (a.shares_memory ? "1" : "0") + ":" + wire::to_hex(a.nonce, sizeof(a.nonce)) +
         ":" + std::to_string(a.max_payload) + ":" + wire::auth_mode_name(a.auth) + ":" + a.host_id;
}

/// False for anything that is not exactly the format above.
inline bool parse_address(std::string_view s, PeerAddress* out) {
  using address_detail::number;
  std::string_view f[11];
  for (int i = 0; i < 10; ++i) {
    const size_t c = s.find(':');
    if (c == std::string_view::npos) return false;
    f[i] = s.substr(0, c);
    s.remove_prefix(c + 1);
  }
  f[10] = s;
  PeerAddress a;
  if (f[0] != "dpdk" || (f[1] != "memif" && f[1] != "port") || f[2].size() != 12) return false;
  a.mode = std::string(f[1]);
  if (!wire::from_hex(f[2], a.mac.data(), a.mac.size())) return false;
  if (!number(f[3], &a.ip) || !number(f[4], &a.udp_port) || a.udp_port == 0 || !number(f[5], &a.pid)) return false;
  if (f[6] != "0" && f[6] != "1") return false;
  a.shares_memory = f[6] == "1";
  uint16_t payload = 0;
  if (!wire::from_hex(f[7], a.nonce, sizeof(a.nonce)) || !number(f[8], &payload) || payload < 64) return false;
  a.max_payload = payload;
  if (!wire::parse_auth_mode(f[9], &a.auth) || f[10].empty()) return false;
  a.host_id = std::string(f[10]);
  *out = std::move(a);
  return true;
}

}  // namespace grex::dpdk
