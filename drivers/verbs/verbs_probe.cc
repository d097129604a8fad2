// SPDX-License-Identifier: Apache-2.0
// probe_rdma_devices (grex/probe.h): every RDMA device and port (state, MTU,
// speed, GIDs), completion timestamps, and how GPU memory would reach it
// (the dma-buf probe and the registration order register_gpu follows).
#include <grex/probe.h>

#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "drivers/verbs/verbs_device.h"
#include "gpu/cuda_api.h"
#include "gpu/gpu_registration.h"

namespace grex {
namespace {

// Gb/s per lane of ibv_port_attr::active_speed.
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

// Lanes of ibv_port_attr::active_width.
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

// A small sysfs file, trailing newlines and blanks removed; "" when missing.
std::string read_sysfs(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "";
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::vector<RdmaGid> gids_of(ibv_context* ctx, const std::string& device, uint8_t port, int table_len) {
  std::vector<RdmaGid> out;
  const std::string ndevs = "/sys/class/infiniband/" + device + "/ports/" + std::to_string(port) + "/gid_attrs/ndevs/";
  for (int i = 0; i < table_len; ++i) {
    ibv_gid_entry e{};
    if (ibv_query_gid_ex(ctx, port, static_cast<uint32_t>(i), &e, 0) != 0) continue;
    const uint8_t* raw = e.gid.raw;
    bool zero = true;
    for (int k = 0; k < 16; ++k) zero &= raw[k] == 0;
    if (zero) continue;
    const char* type = e.gid_type == IBV_GID_TYPE_ROCE_V2   ? "RoCE v2"
                       : e.gid_type == IBV_GID_TYPE_ROCE_V1 ? "RoCE v1"
                                                            : "IB";
    out.push_back(RdmaGid{.index = i, .gid = gid_text(raw), .type = type, .netdev = read_sysfs(ndevs + std::to_string(i))});
  }
  return out;
}

GpuDirectSupport gpudirect_of(ibv_context* ctx, const std::string& device, bool peermem) {
  GpuDirectSupport g;
  g.nvidia_peermem = peermem;
  if (ibv_pd* pd = ibv_alloc_pd(ctx); pd != nullptr) {
    g.dma_buf = verbs::dmabuf_supported(pd) ? Support::kYes : Support::kNo;
    ibv_dealloc_pd(pd);
  } else {
    g.dma_buf_note = "ibv_alloc_pd failed";
  }
  gpu::GpuRegPlan plan = gpu::plan_gpu_registration(gpu::host_facts(g.dma_buf == Support::kYes), device);
  for (gpu::GpuRegPath p : plan.order) g.order.emplace_back(gpu::path_name(p));
  g.summary = plan.summary();
  return g;
}

}  // namespace

RdmaReport probe_rdma_devices() {
  RdmaReport r;
  r.built = true;
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) return r;
  const bool peermem = gpu::peermem_loaded();
  for (int d = 0; d < n; ++d) {
    RdmaDevice dev;
    dev.name = ibv_get_device_name(list[d]);
    ibv_context* ctx = ibv_open_device(list[d]);
    if (ctx == nullptr) {
      dev.error = std::strerror(errno);
      r.devices.push_back(std::move(dev));
      continue;
    }
    ibv_device_attr_ex ax{};
    const bool have_ex = ibv_query_device_ex(ctx, nullptr, &ax) == 0;
    const ibv_device_attr& at = ax.orig_attr;
    dev.firmware = at.fw_ver;
    dev.max_qp = at.max_qp;
    dev.max_qp_wr = at.max_qp_wr;
    dev.completion_timestamps = have_ex && ax.completion_timestamp_mask != 0;
    dev.hca_core_clock_khz = have_ex ? static_cast<uint64_t>(ax.hca_core_clock) : 0;
    dev.gpudirect = gpudirect_of(ctx, dev.name, peermem);
    for (uint8_t p = 1; p <= at.phys_port_cnt; ++p) {
      ibv_port_attr pa{};
      if (ibv_query_port(ctx, p, &pa) != 0) continue;
      dev.ports.push_back(RdmaPort{.port = p,
                                   .state = state_name(pa.state),
                                   .ethernet = pa.link_layer == IBV_LINK_LAYER_ETHERNET,
                                   .active_mtu = 128 << pa.active_mtu,
                                   .max_mtu = 128 << pa.max_mtu,
                                   .speed_gbps = lane_gbps(pa.active_speed) * lanes(pa.active_width),
                                   .gids = gids_of(ctx, dev.name, p, pa.gid_tbl_len)});
    }
    ibv_close_device(ctx);
    r.devices.push_back(std::move(dev));
  }
  ibv_free_device_list(list);
  return r;
}

}  // namespace grex
