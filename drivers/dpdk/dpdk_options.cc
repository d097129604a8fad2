// SPDX-License-Identifier: Apache-2.0
// The DPDK driver's options: DeviceOptions::params and GREX_DPDK_* (dpdk.h),
// the wire's authentication mode, the fault injector's spec.
#include <arpa/inet.h>

#include <algorithm>
#include <string>

#include "core/config.h"
#include "drivers/dpdk/dpdk_device.h"
#include "transport/params.h"

namespace grex::dpdk {
namespace {

// key=value,key=value -> FaultConfig.
Result<FaultConfig> parse_faults(std::string_view spec) {
  FaultConfig f;
  while (!spec.empty()) {
    size_t comma = spec.find(',');
    std::string_view kv = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view{} : spec.substr(comma + 1);
    size_t eq = kv.find('=');
    if (eq == std::string_view::npos)
      return Error(Errc::kInvalidArgument, "fault spec item '" + std::string(kv) + "' is not key=value")
          .hint("GREX_DPDK_FAULTS=drop=0.01,dup=0.001,reorder=0.01,window=8,corrupt=0.001,garbage=0.001,seed=1");
    std::string key(kv.substr(0, eq)), val(kv.substr(eq + 1));
    char* end = nullptr;
    double d = std::strtod(val.c_str(), &end);
    if (end == val.c_str() || *end != '\0' || d < 0)
      return Error(Errc::kInvalidArgument, "fault '" + key + "=" + val + "' needs a non-negative number");
    if (key == "drop") f.drop = d;
    else if (key == "dup") f.duplicate = d;
    else if (key == "reorder") f.reorder = d;
    else if (key == "window") f.reorder_window = static_cast<uint32_t>(d);
    else if (key == "corrupt") f.corrupt = d;
    else if (key == "seed") f.seed = static_cast<uint64_t>(d);
    else if (key == "garbage") f.garbage = d;
    else if (key == "path") f.lossy_path = static_cast<uint32_t>(d);
    else if (key == "pathdrop") f.path_drop = d;
    else return Error(Errc::kInvalidArgument, "unknown fault '" + key +
                                                  "' (drop, dup, reorder, window, corrupt, garbage, seed, path, pathdrop)");
    if (key != "window" && key != "seed" && key != "path" && d > 1)
      return Error(Errc::kInvalidArgument, "fault probability " + key + "=" + val + " is above 1");
  }
  return f;
}

}  // namespace

Result<void> DpdkDevice::parse_options() {
  DpdkOptions& d = dopts_;
  if (auto v = detail::param(opts_, "mode", "GREX_DPDK_MODE"); !v.empty()) d.mode = v;
  if (d.mode != "memif" && d.mode != "port")
    return Error(Errc::kInvalidArgument, "dpdk mode '" + d.mode + "' is not memif or port").hint("GREX_DPDK_MODE");
  d.devargs = GREX_TRY(detail::param_for_local_rank(opts_, "port", "GREX_DPDK_PORT"));
  if (d.mode == "port" && d.devargs.empty())
    return Error(Errc::kInvalidArgument, "dpdk port mode needs a device")
        .hint("set GREX_DPDK_PORT, e.g. net_af_packet0,iface=veth0 or net_af_xdp0,iface=veth0");
  if (auto v = detail::param(opts_, "memif_dir", "GREX_DPDK_MEMIF_DIR"); !v.empty()) d.memif_dir = v;
  if (auto v = detail::param(opts_, "memif_zero_copy", "GREX_DPDK_MEMIF_ZERO_COPY"); !v.empty()) d.memif_zero_copy = v;
  if (d.memif_zero_copy != "auto" && d.memif_zero_copy != "0" && d.memif_zero_copy != "1")
    return Error(Errc::kInvalidArgument, "GREX_DPDK_MEMIF_ZERO_COPY='" + d.memif_zero_copy + "' is not auto, 0 or 1");
  // af_packet shares its interface with the kernel, whose IP stack would
  // take every frame sent to the interface's MAC too: "auto" answers to
  // another there (docs/dpdk.md).
  std::string mac = detail::param(opts_, "mac", "GREX_DPDK_MAC");
  if (mac.empty() || mac == "auto")
    d.mac = d.devargs.rfind("net_af_packet", 0) == 0 ? PortOptions::Mac::kPrivate : PortOptions::Mac::kPort;
  else if (mac == "port")
    d.mac = PortOptions::Mac::kPort;
  else if (mac == "private")
    d.mac = PortOptions::Mac::kPrivate;
  else if (frame::parse_mac(mac.c_str(), &d.given_mac) && (d.given_mac[0] & 1) == 0)
    d.mac = PortOptions::Mac::kGiven;
  else
    return Error(Errc::kInvalidArgument, "GREX_DPDK_MAC='" + mac + "' is not auto, port, private or a unicast MAC")
        .hint("e.g. GREX_DPDK_MAC=02:00:00:00:00:01");
  if (auto v = GREX_TRY(detail::param_for_local_rank(opts_, "ip", "GREX_DPDK_IP")); !v.empty()) {
    in_addr a;
    if (inet_pton(AF_INET, v.c_str(), &a) != 1)
      return Error(Errc::kInvalidArgument, "GREX_DPDK_IP='" + v + "' is not an IPv4 address");
    d.ip = ntohl(a.s_addr);
  }
  if (auto v = GREX_TRY(detail::param_for_local_rank(opts_, "gateway", "GREX_DPDK_GATEWAY")); !v.empty()) {
    if (d.mode != "port")
      return Error(Errc::kInvalidArgument, "GREX_DPDK_GATEWAY needs GREX_DPDK_MODE=port (memif links are point to point)");
    if (!frame::parse_mac(v.c_str(), &d.gateway_mac) || (d.gateway_mac[0] & 1) != 0)
      return Error(Errc::kInvalidArgument, "GREX_DPDK_GATEWAY='" + v + "' is not a unicast MAC")
          .hint("the MAC of the router in front of this rank's port, e.g. GREX_DPDK_GATEWAY=02:00:00:00:00:fe");
    d.via_gateway = true;
  }
  d.mtu = static_cast<uint16_t>(
      GREX_TRY(detail::param_int(opts_, "mtu", "GREX_DPDK_MTU", 576, kMaxMtu, d.mode == "memif" ? 9000 : 1500)));
  d.udp_port =
      static_cast<uint16_t>(GREX_TRY(detail::param_int(opts_, "udp_port", "GREX_DPDK_UDP_PORT", 1, 65535, 47000)));
  // memif opens a port (and a pool) per peer inside EAL's 512 MB heap: keep
  // each pool small there (4095 x 9 KiB = 37 MB); one shared port gets more
  // (16383 x 9 KiB = 150 MB). Above MTU 9000 the count shrinks to stay in
  // those budgets (MTU 65000, one port: 4095 x 64 KiB), at least 1023.
  const uint64_t mbuf_budget = d.mode == "memif" ? (48u << 20) : (288u << 20);
  uint64_t fit = mbuf_budget / (uint64_t{d.mtu} + 512u);
  while ((fit & (fit - 1)) != 0) fit &= fit - 1;  // a power of two, then minus one: mempools like 2^k - 1
  const int64_t mbufs_default =
      static_cast<int64_t>(std::clamp<uint64_t>(fit - 1, 1023, d.mode == "memif" ? 4095 : 16383));
  d.mbufs = static_cast<uint32_t>(
      GREX_TRY(detail::param_int(opts_, "mbufs", "GREX_DPDK_MBUFS", 1023, 1 << 20, mbufs_default)));
  d.window = static_cast<uint32_t>(GREX_TRY(detail::param_int(opts_, "window", "GREX_DPDK_WINDOW", 16, 1 << 16, 1024)));
  if ((d.window & (d.window - 1)) != 0)
    return Error(Errc::kInvalidArgument, "GREX_DPDK_WINDOW=" + std::to_string(d.window) + " is not a power of two");
  d.paths = static_cast<uint32_t>(GREX_TRY(detail::param_int(opts_, "paths", "GREX_DPDK_PATHS", 1, 64, 1)));
  // Sprayed packets arrive out of order: tolerate some by default (and
  // measure the rest, reliable_flow.h); one path stays in order.
  d.reorder = static_cast<uint32_t>(
      GREX_TRY(detail::param_int(opts_, "reorder", "GREX_DPDK_REORDER", 0, 63, d.paths > 1 ? 8 : 0)));
  if (auto v = detail::param(opts_, "spray", "GREX_DPDK_SPRAY"); !v.empty()) {
    if (v != "rr" && v != "reps") return Error(Errc::kInvalidArgument, "GREX_DPDK_SPRAY='" + v + "' is not rr or reps");
    d.reps = v == "reps";
  }
  d.adverts_per_packet =
      static_cast<uint32_t>(GREX_TRY(detail::param_int(opts_, "adverts", "GREX_DPDK_ADVERTS", 1, 256, 32)));
  d.tx_backlog = static_cast<uint32_t>(GREX_TRY(detail::param_int(opts_, "tx_backlog", "GREX_DPDK_TX_BACKLOG", 0, 4096, 0)));
  d.give_up_ms = GREX_TRY(detail::param_int(opts_, "give_up_ms", "GREX_DPDK_GIVE_UP_MS", 10, 3'600'000, 10'000));
  if (auto v = detail::param(opts_, "faults", "GREX_DPDK_FAULTS"); !v.empty()) d.faults = GREX_TRY(parse_faults(v));
  std::string crc = detail::param(opts_, "crc", "GREX_DPDK_CRC");
  if (!crc.empty() && crc != "header" && crc != "payload")
    return Error(Errc::kInvalidArgument, "GREX_DPDK_CRC='" + crc + "' is not header or payload");
  d.payload_crc = crc == "payload" || d.faults.corrupt > 0;  // injected corruption must be caught
  // "auto": full on a shared port (a network others reach); off on memif,
  // a private link between two processes of one host whose socket only the
  // job's ranks can open (the memif secret, below): docs/security.md.
  d.auth = d.mode == "port" ? wire::AuthMode::kFull : wire::AuthMode::kOff;
  if (auto v = detail::param(opts_, "wire_auth", "GREX_WIRE_AUTH");
      !v.empty() && v != "auto" && (v == "aes-gcm" || !wire::parse_auth_mode(v, &d.auth)))
    return Error(Errc::kInvalidArgument, "GREX_WIRE_AUTH='" + v + "' is not auto, full, control or off")
        .hint("full tags every packet; control only headers; off trusts the network; auto: full on ports, off on memif");
  if (auto v = detail::param(opts_, "wire_crypt", "GREX_WIRE_CRYPT"); !v.empty() && v != "none") {
    if (v != "aes-gcm")
      return Error(Errc::kInvalidArgument, "GREX_WIRE_CRYPT='" + v + "' is not aes-gcm or none");
    if (auto a = detail::param(opts_, "wire_auth", "GREX_WIRE_AUTH"); !a.empty() && a != "auto" && a != "full")
      return Error(Errc::kInvalidArgument, "GREX_WIRE_CRYPT=aes-gcm needs GREX_WIRE_AUTH=full (or auto)");
    d.auth = wire::AuthMode::kEncrypt;
  }
  d.flow_id_bits = static_cast<int>(GREX_TRY(detail::param_int(opts_, "flow_id_bits", "GREX_DPDK_FLOW_ID_BITS", 1, 32, 32)));
  // The CRC is checked before decryption, so it cannot cover a ciphertext's plaintext.
  if (d.auth == wire::AuthMode::kEncrypt) d.payload_crc = false;
  d.cc = GREX_TRY(detail::param_cc(opts_));
  // The communicator's default between hosts, when no controller was named.
  if (auto def = detail::param(opts_, "cc_default", "");
      detail::param(opts_, "cc", "GREX_CC").empty() && !def.empty() && def != "none") {
    d.cc = cc::find(def);
    if (d.cc == nullptr) return Error(Errc::kInvalidArgument, "cc_default '" + def + "' is not a congestion controller");
  }
  if (auto v = detail::param(opts_, "path_cc", "GREX_DPDK_PATH_CC"); !v.empty()) {
    if (v != "flow" && v != "path")
      return Error(Errc::kInvalidArgument, "GREX_DPDK_PATH_CC='" + v + "' is not flow or path");
    d.path_cc = v == "path" && d.paths > 1;
    if (d.path_cc && d.cc == nullptr)
      return Error(Errc::kInvalidArgument, "GREX_DPDK_PATH_CC=path needs a congestion controller")
          .hint("name one with GREX_CC (rttcc, swift, ...)");
  }
  d.line_gbps = static_cast<double>(GREX_TRY(detail::param_int(opts_, "line_gbps", "GREX_DPDK_LINE_GBPS", 0, 3200, 0)));
  // A port the kernel carries (af_packet, af_xdp) adds its per-packet work,
  // on cores the ranks share, to every RTT: at 50 us RTTCC read that as a
  // queue and held a 2-rank 64 MiB allreduce between namespaces to 140-150
  // ms (57 ms uncontrolled); at 200 us, 74 ms (docs/congestion.md).
  const bool kernel_port = d.devargs.rfind("net_af_packet", 0) == 0 || d.devargs.rfind("net_af_xdp", 0) == 0;
  d.cc_target_us = static_cast<uint64_t>(
      GREX_TRY(detail::param_int(opts_, "cc_target_us", "GREX_CC_TARGET_US", 1, 100'000, kernel_port ? 200 : 50)));
  d.credits = GREX_TRY(detail::param_int(opts_, "credits", "GREX_DPDK_CREDITS", 0, 1, 0)) == 1;
  d.credit_gbps = static_cast<double>(
      GREX_TRY(detail::param_int(opts_, "credit_mbps", "GREX_DPDK_CREDIT_MBPS", 0, 3'200'000, 0))) / 1000.0;
  d.credit_window = static_cast<uint32_t>(
      GREX_TRY(detail::param_int(opts_, "credit_window", "GREX_DPDK_CREDIT_WINDOW", 4, 1 << 16, 32)));
  // An emulated bottleneck in front of this rank's receive path, in Mbit/s
  // (tests of congestion control on one host).
  d.bottleneck_gbps = static_cast<double>(
      GREX_TRY(detail::param_int(opts_, "bottleneck_mbps", "GREX_DPDK_BOTTLENECK_MBPS", 0, 3'200'000, 0))) / 1000.0;
  d.bottleneck_kb = static_cast<uint64_t>(
      GREX_TRY(detail::param_int(opts_, "bottleneck_kb", "GREX_DPDK_BOTTLENECK_KB", 16, 1 << 20, 4096)));
  return ok();
}

}  // namespace grex::dpdk
