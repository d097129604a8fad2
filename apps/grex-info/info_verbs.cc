// SPDX-License-Identifier: Apache-2.0
// The verbs probe: every RDMA device and port (state, MTU, speed, GIDs),
// completion timestamps, and whether the device takes dma-buf registrations
// (GPUDirect without nvidia_peermem).
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "gpu/cuda_api.h"
#include "gpu/gpu_registration.h"
#include "info.h"

#ifdef GREX_HAVE_VERBS
#include <infiniband/verbs.h>

#include "drivers/verbs/verbs_device.h"
#endif

namespace grex::info {

#ifndef GREX_HAVE_VERBS
Section probe_verbs() {
  Section s;
  s.name = "verbs";
  s.networking = true;
  s.summary = "not built into this libgrex (install libibverbs-dev and librdmacm-dev and rebuild)";
  s.json = {{"usable", false}, {"built", false}};
  return s;
}
#else
namespace {

// Gb/s per lane of ibv_port_attr::active_speed, and lanes of active_width.
double lane_gbps(uint8_t speed) {
  switch (speed) {
    case 1: return 2.5;
    case 2: return 5.0;
    case 4: return 10.0;
    case 8: return 10.3125;
    case 16: return 14.0625;
    case 32: return 25.78125;
    case 64: return 53.125;
    case 128: return 106.25;
    default: return 0.0;
  }
}

int lanes(uint8_t width) {
  switch (width) {
    case 1: return 1;
    case 2: return 4;
    case 4: return 8;
    case 8: return 12;
    case 16: return 2;
    default: return 0;
  }
}

const char* state_name(ibv_port_state s) {
  switch (s) {
    case IBV_PORT_ACTIVE: return "ACTIVE";
    case IBV_PORT_DOWN: return "DOWN";
    case IBV_PORT_INIT: return "INIT";
    case IBV_PORT_ARMED: return "ARMED";
    default: return "other";
  }
}

std::string gid_text(const uint8_t raw[16]) {
  static const uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  char buf[64];
  if (std::memcmp(raw, kMapped, sizeof kMapped) == 0) {
    std::snprintf(buf, sizeof buf, "::ffff:%u.%u.%u.%u", raw[12], raw[13], raw[14], raw[15]);
  } else {
    std::snprintf(buf, sizeof buf, "%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x", raw[0],
                  raw[1], raw[2], raw[3], raw[4], raw[5], raw[6], raw[7], raw[8], raw[9], raw[10], raw[11], raw[12],
                  raw[13], raw[14], raw[15]);
  }
  return buf;
}

}  // namespace

Section probe_verbs() {
  Section s;
  s.name = "verbs";
  s.networking = true;
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr || n == 0) {
    if (list != nullptr) ibv_free_device_list(list);
    s.summary = "no RDMA device";
    s.lines.push_back("(an RDMA NIC needs its driver loaded; for Soft-RoCE: modprobe rdma_rxe;");
    s.lines.push_back(" rdma link add rxe0 type rxe netdev eth0)");
    s.json = {{"usable", false}, {"built", true}, {"devices", Json::array()}};
    return s;
  }
  std::string peermem = gpu::peermem_loaded() ? "loaded" : "not loaded";
  Json devs = Json::array();
  int active = 0;
  for (int d = 0; d < n; ++d) {
    const std::string name = ibv_get_device_name(list[d]);
    ibv_context* ctx = ibv_open_device(list[d]);
    if (ctx == nullptr) {
      s.lines.push_back(name + ": cannot open (" + std::strerror(errno) + ")");
      devs.push_back(Json{{"name", name}, {"error", std::string(std::strerror(errno))}});
      continue;
    }
    ibv_device_attr_ex ax{};
    bool have_ex = ibv_query_device_ex(ctx, nullptr, &ax) == 0;
    const ibv_device_attr& at = ax.orig_attr;
    bool ts = have_ex && ax.completion_timestamp_mask != 0;
    ibv_pd* pd = ibv_alloc_pd(ctx);
    std::string dmabuf = pd == nullptr ? "unknown (ibv_alloc_pd failed)"
                                       : verbs::dmabuf_supported(pd) ? "supported" : "not supported";
    if (pd != nullptr) ibv_dealloc_pd(pd);
    s.lines.push_back(name + ": fw " + at.fw_ver + ", " + std::to_string(at.max_qp) + " QPs of up to " +
                      std::to_string(at.max_qp_wr) + " WRs, completion timestamps " +
                      (ts ? "yes (" + std::to_string(ax.hca_core_clock) + " kHz clock)" : std::string("no")));
    gpu::GpuRegPlan plan = gpu::plan_gpu_registration(gpu::host_facts(dmabuf == "supported"), name);
    std::string order;
    for (gpu::GpuRegPath p : plan.order) order += std::string(order.empty() ? "" : " then ") + gpu::path_name(p);
    s.lines.push_back("  GPUDirect: " + (order.empty() ? std::string("none") : order) + " (" + plan.summary() + ")");
    Json ports = Json::array();
    for (uint8_t p = 1; p <= at.phys_port_cnt; ++p) {
      ibv_port_attr pa{};
      if (ibv_query_port(ctx, p, &pa) != 0) continue;
      double gbps = lane_gbps(pa.active_speed) * lanes(pa.active_width);
      bool eth = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
      active += pa.state == IBV_PORT_ACTIVE ? 1 : 0;
      const std::string pbase = "/sys/class/infiniband/" + name + "/ports/" + std::to_string(p);
      char line[256];
      std::snprintf(line, sizeof line, "  port %u: %s, %s, MTU %d (max %d), %g Gb/s", p, state_name(pa.state),
                    eth ? "RoCE (Ethernet)" : "InfiniBand", 128 << pa.active_mtu, 128 << pa.max_mtu, gbps);
      s.lines.push_back(line);
      Json gids = Json::array();
      for (int i = 0; i < pa.gid_tbl_len; ++i) {
        ibv_gid_entry e{};
        if (ibv_query_gid_ex(ctx, p, static_cast<uint32_t>(i), &e, 0) != 0) continue;
        const uint8_t* raw = e.gid.raw;
        bool zero = true;
        for (int k = 0; k < 16; ++k) zero &= raw[k] == 0;
        if (zero) continue;
        const char* type = e.gid_type == IBV_GID_TYPE_ROCE_V2 ? "RoCE v2" : e.gid_type == IBV_GID_TYPE_ROCE_V1 ? "RoCE v1" : "IB";
        std::string ndev = read_text(pbase + "/gid_attrs/ndevs/" + std::to_string(i));
        s.lines.push_back("    GID " + std::to_string(i) + ": " + gid_text(raw) + " (" + type +
                          (ndev.empty() ? "" : ", " + ndev) + ")");
        gids.push_back(Json{{"index", i}, {"gid", gid_text(raw)}, {"type", std::string(type)},
                                    {"netdev", ndev}});
      }
      ports.push_back(Json{{"port", static_cast<int>(p)}, {"state", std::string(state_name(pa.state))},
                                   {"link_layer", std::string(eth ? "ethernet" : "infiniband")},
                                   {"active_mtu", 128 << pa.active_mtu}, {"max_mtu", 128 << pa.max_mtu},
                                   {"speed_gbps", gbps}, {"gids", gids}});
    }
    devs.push_back(Json{{"name", name}, {"fw", std::string(at.fw_ver)}, {"max_qp", at.max_qp},
                                {"max_qp_wr", at.max_qp_wr}, {"completion_timestamps", ts},
                                {"hca_core_clock_khz", have_ex ? static_cast<uint64_t>(ax.hca_core_clock) : 0},
                                {"dma_buf", dmabuf}, {"nvidia_peermem", peermem},
                                {"gpu_registration", order.empty() ? std::string("none") : order}, {"ports", ports}});
    ibv_close_device(ctx);
  }
  ibv_free_device_list(list);
  s.usable = active > 0;
  s.summary = std::to_string(n) + " device(s), " + std::to_string(active) + " active port(s)" +
              (active == 0 ? ": no port is ACTIVE (cable, link, or rxe's netdev down?)" : "");
  s.json = {{"usable", s.usable}, {"built", true}, {"devices", devs}};
  return s;
}
#endif

}  // namespace grex::info
