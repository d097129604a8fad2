// SPDX-License-Identifier: Apache-2.0
// The verbs section: every RDMA device and port (state, MTU, speed, GIDs),
// completion timestamps, and whether GPU memory reaches the device (dma-buf,
// nvidia_peermem), from libgrex's probe (grex/probe.h).
#include <grex/probe.h>

#include <cstdio>
#include <string>

#include "info.h"

namespace grex::info {
namespace {

std::string dma_buf_text(const GpuDirectSupport& g) {
  switch (g.dma_buf) {
    case Support::kYes: return "supported";
    case Support::kNo: return "not supported";
    case Support::kUnknown: break;
  }
  return "unknown (" + g.dma_buf_note + ")";
}

// "dma-buf then peermem", or "" when GPU memory cannot reach the device.
std::string order_text(const GpuDirectSupport& g) {
  std::string order;
  for (const std::string& p : g.order) order += (order.empty() ? "" : " then ") + p;
  return order;
}

Json port_section(const RdmaPort& p, std::vector<std::string>* lines) {
  char line[256];
  std::snprintf(line, sizeof line, "  port %d: %s, %s, MTU %d (max %d), %g Gb/s", p.port, p.state.c_str(),
                p.ethernet ? "RoCE (Ethernet)" : "InfiniBand", p.active_mtu, p.max_mtu, p.speed_gbps);
  lines->push_back(line);
  Json gids = Json::array();
  for (const RdmaGid& g : p.gids) {
    lines->push_back("    GID " + std::to_string(g.index) + ": " + g.gid + " (" + g.type +
                     (g.netdev.empty() ? "" : ", " + g.netdev) + ")");
    gids.push_back(Json{{"index", g.index}, {"gid", g.gid}, {"type", g.type}, {"netdev", g.netdev}});
  }
  return Json{{"port", p.port},
              {"state", p.state},
              {"link_layer", std::string(p.ethernet ? "ethernet" : "infiniband")},
              {"active_mtu", p.active_mtu},
              {"max_mtu", p.max_mtu},
              {"speed_gbps", p.speed_gbps},
              {"gids", gids}};
}

}  // namespace

Section probe_verbs() {
  Section s;
  s.name = "verbs";
  s.networking = true;
  RdmaReport report = probe_rdma_devices();
  if (!report.built) {
    s.summary = "not built into this libgrex (install libibverbs-dev and librdmacm-dev and rebuild)";
    s.json = {{"usable", false}, {"built", false}};
    return s;
  }
  if (report.devices.empty()) {
    s.summary = "no RDMA device";
    s.lines.push_back("(an RDMA NIC needs its driver loaded; for Soft-RoCE: modprobe rdma_rxe;");
    s.lines.push_back(" rdma link add rxe0 type rxe netdev eth0)");
    s.json = {{"usable", false}, {"built", true}, {"devices", Json::array()}};
    return s;
  }
  Json devs = Json::array();
  int active = 0;
  for (const RdmaDevice& d : report.devices) {
    if (!d.error.empty()) {
      s.lines.push_back(d.name + ": cannot open (" + d.error + ")");
      devs.push_back(Json{{"name", d.name}, {"error", d.error}});
      continue;
    }
    const GpuDirectSupport& g = d.gpudirect;
    const std::string order = order_text(g);
    s.lines.push_back(d.name + ": fw " + d.firmware + ", " + std::to_string(d.max_qp) + " QPs of up to " +
                      std::to_string(d.max_qp_wr) + " WRs, completion timestamps " +
                      (d.completion_timestamps ? "yes (" + std::to_string(d.hca_core_clock_khz) + " kHz clock)"
                                               : std::string("no")));
    s.lines.push_back("  GPUDirect: " + (order.empty() ? std::string("none") : order) + " (" + g.summary + ")");
    Json ports = Json::array();
    for (const RdmaPort& p : d.ports) {
      active += p.state == "ACTIVE" ? 1 : 0;
      ports.push_back(port_section(p, &s.lines));
    }
    devs.push_back(Json{{"name", d.name},
                        {"fw", d.firmware},
                        {"max_qp", d.max_qp},
                        {"max_qp_wr", d.max_qp_wr},
                        {"completion_timestamps", d.completion_timestamps},
                        {"hca_core_clock_khz", d.hca_core_clock_khz},
                        {"dma_buf", dma_buf_text(g)},
                        {"nvidia_peermem", std::string(g.nvidia_peermem ? "loaded" : "not loaded")},
                        {"gpu_registration", order.empty() ? std::string("none") : order},
                        {"ports", ports}});
  }
  const int n = static_cast<int>(report.devices.size());
  s.usable = active > 0;
  s.summary = std::to_string(n) + " device(s), " + std::to_string(active) + " active port(s)" +
              (active == 0 ? ": no port is ACTIVE (cable, link, or rxe's netdev down?)" : "");
  s.json = {{"usable", s.usable}, {"built", true}, {"devices", devs}};
  return s;
}

}  // namespace grex::info
