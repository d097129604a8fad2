// SPDX-License-Identifier: Apache-2.0
// Verbs driver set-up: device, port and GID choice, the rdma_cm listener,
// memory registration (and the dma-buf probe); rdma_cm events: verbs_cm.cc.
#include "drivers/verbs/verbs_device.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "gpu/cuda_api.h"
#include "gpu/gpu_registration.h"
#include "transport/params.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/log.h"
#include "drivers/verbs/verbs.h"
#include "drivers/verbs/verbs_gid.h"
#include "transport/wire_auth.h"

namespace grex::verbs {

// Registered user memory: written by peers (RDMA WRITE into posted receives
// and by one-sided writes), never read by them: grex issues no RDMA READ, so
// no region grants it (issue 28).
constexpr int kRegionAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
namespace {

constexpr const char* kSubsys = "verbs";

uint32_t mtu_bytes(ibv_mtu m) { return m >= IBV_MTU_256 && m <= IBV_MTU_4096 ? 128u << m : 0; }

// Per-lane signalling rate in Mbit/s and lane count (ibv_port_attr encodings).
uint64_t link_mbps(const ibv_port_attr& a) {
  uint64_t lane = 0;
  switch (a.active_speed) {
    case 1: lane = 2500; break;     // SDR
    case 2: lane = 5000; break;     // DDR
    case 4: lane = 10000; break;    // QDR
    case 8: lane = 10312; break;    // FDR10
    case 16: lane = 14062; break;   // FDR
    case 32: lane = 25781; break;   // EDR
    case 64: lane = 53125; break;   // HDR
    case 128: lane = 106250; break; // NDR
    default: lane = 0;
  }
  uint64_t width = 0;
  switch (a.active_width) {
    case 1: width = 1; break;
    case 2: width = 4; break;
    case 4: width = 8; break;
    case 8: width = 12; break;
    case 16: width = 2; break;
    default: width = 0;
  }
  return lane * width;
}

const char* port_state_name(ibv_port_state s) { return ibv_port_state_str(s); }

std::string ip_str(uint32_t ip) {
  in_addr a{htonl(ip)};
  char b[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &a, b, sizeof(b));
  return b;
}

}  // namespace

// ---------------------------------------------------------------- regions

VerbsRegion::VerbsRegion(ibv_mr* mr, void* addr, size_t len, MemoryDomain domain)
    : MemoryRegion(addr, len, domain), mr_(mr) {
  lkey_ = mr != nullptr ? mr->lkey : 0;
  remote_ = RemoteRegion{reinterpret_cast<uint64_t>(addr), len, mr != nullptr ? mr->rkey : 0,
                         static_cast<uint64_t>(::getpid())};
}

VerbsRegion::~VerbsRegion() {
  if (mr_ != nullptr) ibv_dereg_mr(mr_);
}

Result<std::unique_ptr<MemoryRegion>> VerbsDevice::do_register(void* addr, size_t length, MemoryDomain domain) {
  if (domain == MemoryDomain::kCudaDevice) return register_gpu(addr, length);
  // Zero bytes need no memory registration (ibv_reg_mr refuses them): zero-
  // length sends and writes carry no scatter entry and no key is checked.
  if (length == 0) return std::unique_ptr<MemoryRegion>(new VerbsRegion(nullptr, addr, 0, domain));
  ibv_mr* mr = ibv_reg_mr(pd_, addr, length, region_access());
  if (mr == nullptr) {
    int err = errno;
    return Error::from_errno("ibv_reg_mr of " + std::to_string(length) + " bytes", err)
        .device(name())
        .hint(err == ENOMEM || err == EPERM ? "raise the locked-memory limit (ulimit -l unlimited)" : "");
  }
  return std::unique_ptr<MemoryRegion>(new VerbsRegion(mr, addr, length, domain));
}

Result<std::unique_ptr<MemoryRegion>> VerbsDevice::register_dmabuf(int fd, uint64_t offset, size_t len, void* va,
                                                                    MemoryDomain domain) {
  if (!dmabuf_)
    return Error(Errc::kNotSupported, name() + " cannot register dma-buf memory (ibv_reg_dmabuf_mr: EOPNOTSUPP)")
        .device(name())
        .hint("a NIC and kernel with dma-buf support (mlx5, kernel >= 5.12), or nvidia_peermem");
  ibv_mr* mr = ibv_reg_dmabuf_mr(pd_, offset, len, reinterpret_cast<uint64_t>(va), fd, region_access());
  if (mr == nullptr)
    return Error::from_errno("ibv_reg_dmabuf_mr of " + std::to_string(len) + " bytes", errno).device(name());
  return std::unique_ptr<MemoryRegion>(new VerbsRegion(mr, va, len, domain));
}

// GPU memory, in NCCL's order: dma-buf, then nvidia_peermem. The error names
// every mechanism and why it was not there (or how it failed).
Result<std::unique_ptr<MemoryRegion>> VerbsDevice::register_gpu(void* addr, size_t length) {
  gpu::GpuRegPlan plan = gpu::plan_gpu_registration(gpu::host_facts(dmabuf_), name());
  std::string failures;
  const int access = kRegionAccess;
  for (gpu::GpuRegPath path : plan.order) {
    if (path == gpu::GpuRegPath::kDmaBuf) {
      auto buf = gpu::export_dmabuf(addr, length);
      if (!buf) {
        failures += "; dma-buf failed: " + buf.error().message();
        continue;
      }
      ibv_mr* mr = ibv_reg_dmabuf_mr(pd_, buf->offset, length, reinterpret_cast<uint64_t>(addr), buf->fd, access);
      int err = errno;
      ::close(buf->fd);  // the registration holds its own reference
      if (mr != nullptr) {
        stats.gpu_dmabuf_regs.add();
        return std::unique_ptr<MemoryRegion>(new VerbsRegion(mr, addr, length, MemoryDomain::kCudaDevice));
      }
      failures += "; dma-buf failed: ibv_reg_dmabuf_mr: " + std::string(std::strerror(err));
    } else {
      ibv_mr* mr = ibv_reg_mr(pd_, addr, length, access);
      if (mr != nullptr) {
        stats.gpu_peermem_regs.add();
        return std::unique_ptr<MemoryRegion>(new VerbsRegion(mr, addr, length, MemoryDomain::kCudaDevice));
      }
      failures += "; peermem failed: ibv_reg_mr: " + std::string(std::strerror(errno));
    }
  }
  return Error(Errc::kNotSupported, "cannot register " + std::to_string(length) + " bytes of GPU memory on " + name() +
                                        ": " + plan.summary() + failures)
      .device(name())
      .hint("GPUDirect needs a NIC with dma-buf (mlx5, Linux 5.12+) or nvidia_peermem loaded; host buffers need "
            "neither (docs/gpudirect.md)");
}

// The probe NCCL uses: register an invalid dma-buf fd. EOPNOTSUPP or
// EPROTONOSUPPORT means the stack cannot do dma-buf at all; anything else
// (EBADF) means it could with a real fd.
bool dmabuf_supported(ibv_pd* pd) noexcept {
  errno = 0;
  ibv_mr* mr = ibv_reg_dmabuf_mr(pd, 0, 4096, 0, -1, IBV_ACCESS_LOCAL_WRITE);
  if (mr != nullptr) {
    ibv_dereg_mr(mr);
    return true;
  }
  return errno != EOPNOTSUPP && errno != EPROTONOSUPPORT;
}

// ---------------------------------------------------------------- set-up

VerbsDevice::VerbsDevice(const DeviceOptions& opts) : opts_(opts) {}

Result<void> VerbsDevice::parse_options() {
  vo_.dev = GREX_TRY(detail::param_for_local_rank(opts_, "dev", "GREX_IB_DEV"));
  vo_.port = static_cast<uint8_t>(GREX_TRY(detail::param_int(opts_, "port", "GREX_IB_PORT", 1, 255, 1)));
  vo_.gid_index = static_cast<int>(GREX_TRY(detail::param_int(opts_, "gid_index", "GREX_IB_GID_INDEX", -1, 65535, -1)));
  vo_.timeout = static_cast<uint8_t>(GREX_TRY(detail::param_int(opts_, "timeout", "GREX_IB_TIMEOUT", 1, 31, 14)));
  vo_.retry_cnt = static_cast<uint8_t>(GREX_TRY(detail::param_int(opts_, "retry_cnt", "GREX_IB_RETRY_CNT", 0, 7, 7)));
  vo_.max_inline = static_cast<uint32_t>(GREX_TRY(detail::param_int(opts_, "inline", "GREX_IB_INLINE", 0, 1024, 64)));
  vo_.eager_bytes =
      static_cast<uint32_t>(GREX_TRY(detail::param_int(opts_, "eager", "GREX_IB_EAGER", 0, 1 << 20, 4096)));
  vo_.eager_slots =
      static_cast<uint32_t>(GREX_TRY(detail::param_int(opts_, "eager_slots", "GREX_IB_EAGER_SLOTS", 1, 4096, 64)));
  vo_.srq = GREX_TRY(detail::param_int(opts_, "srq", "GREX_IB_SRQ", 0, 1, 0)) == 1;
  vo_.cc = GREX_TRY(detail::param_cc(opts_));
  vo_.cc_target_us =
      static_cast<uint64_t>(GREX_TRY(detail::param_int(opts_, "cc_target_us", "GREX_CC_TARGET_US", 1, 100'000, 13)));
  if (auto v = detail::param(opts_, "rate_limit", "GREX_IB_RATE_LIMIT"); !v.empty()) {
    if (v == "auto") vo_.rate_limit = VerbsOptions::RateLimit::kAuto;
    else if (v == "nic") vo_.rate_limit = VerbsOptions::RateLimit::kNic;
    else if (v == "software") vo_.rate_limit = VerbsOptions::RateLimit::kSoftware;
    else
      return Error(Errc::kInvalidArgument, "GREX_IB_RATE_LIMIT='" + v + "' is not one of auto, nic, software");
  }
  if (auto v = detail::param(opts_, "confine", "GREX_IB_CONFINE"); !v.empty()) {
    if (v == "auto") vo_.confine = VerbsOptions::Confine::kAuto;
    else if (v == "window") vo_.confine = VerbsOptions::Confine::kWindow;
    else if (v == "region") vo_.confine = VerbsOptions::Confine::kRegion;
    else if (v == "register") vo_.confine = VerbsOptions::Confine::kRegister;
    else
      return Error(Errc::kInvalidArgument, "GREX_IB_CONFINE='" + v + "' is not one of auto, window, register, region");
  }
  if (auto v = detail::param(opts_, "ip", "GREX_IB_IP"); !v.empty()) {
    in_addr a;
    if (inet_pton(AF_INET, v.c_str(), &a) != 1)
      return Error(Errc::kInvalidArgument, "GREX_IB_IP='" + v + "' is not an IPv4 address");
    vo_.ip = ntohl(a.s_addr);
  }
  return ok();
}

// rdma_cm owns one verbs context per device; QPs it connects must live on
// that context, so the PD and CQ are made on it too.
Result<void> VerbsDevice::pick_device() {
  int n = 0;
  devices_ = rdma_get_devices(&n);
  if (devices_ == nullptr || n == 0)
    return Error(Errc::kNotFound, "no RDMA device found (rdma_get_devices returned none)")
        .device("verbs")
        .hint("load a NIC driver or Soft-RoCE (rdma link add rxe0 type rxe netdev IFACE); tests: "
              "tests/scripts/softroce.sh");
  std::string seen;
  for (int i = 0; i < n; ++i) {
    ibv_context* c = devices_[i];
    std::string nm = ibv_get_device_name(c->device);
    seen += (seen.empty() ? "" : ", ") + nm;
    if (!vo_.dev.empty() && nm != vo_.dev) continue;
    ibv_port_attr pa;
    if (ibv_query_port(c, vo_.port, &pa) != 0) continue;
    if (vo_.dev.empty() && pa.state != IBV_PORT_ACTIVE) continue;
    ctx_ = c;
    port_attr_ = pa;
    break;
  }
  if (ctx_ == nullptr) {
    if (!vo_.dev.empty())
      return Error(Errc::kNotFound, "no RDMA device named '" + vo_.dev + "' with a port " + std::to_string(vo_.port) +
                                        " (devices: " + seen + ")")
          .device("verbs")
          .hint("GREX_IB_DEV / GREX_IB_PORT");
    return Error(Errc::kNotFound, "no RDMA device with an active port " + std::to_string(vo_.port) + " (devices: " +
                                      seen + ")")
        .device("verbs")
        .hint("check `ibv_devinfo` (port state) and the link of its network device");
  }
  caps_.device_name = ibv_get_device_name(ctx_->device);
  if (port_attr_.state != IBV_PORT_ACTIVE)
    return Error(Errc::kConnectionFailed, "port " + std::to_string(vo_.port) + " of " + caps_.device_name + " is " +
                                              port_state_name(port_attr_.state))
        .device(caps_.device_name)
        .hint("bring its network device up (ip link set DEV up)");
  if (ibv_query_device(ctx_, &dev_attr_) != 0)
    return Error::from_errno("ibv_query_device", errno).device(caps_.device_name);
  ibv_device_attr_ex ex{};  // packet pacing; providers without the extended query leave it zero
  if (ibv_query_device_ex(ctx_, nullptr, &ex) == 0) pacing_caps_ = ex.packet_pacing_caps;
  // The communicator's default between hosts ("cc_default", when no
  // controller was named). Not on Soft-RoCE: its RTTs are the kernel's (in a
  // TCG guest, the emulator's) scheduling, milliseconds that RTTCC reads as
  // a queue it must drain, down to its floor (a 2-guest calibration timed out).
  if (auto d = detail::param(opts_, "cc_default", "");
      detail::param(opts_, "cc", "GREX_CC").empty() && !d.empty() && d != "none") {
    if (caps_.device_name.rfind("rxe", 0) == 0) {
      GREX_INFO(kSubsys, "%s is Soft-RoCE: no default congestion control (GREX_CC names one)", caps_.device_name.c_str());
    } else {
      vo_.cc = cc::find(d);
      if (vo_.cc == nullptr) return Error(Errc::kInvalidArgument, "cc_default '" + d + "' is not a congestion controller");
    }
  }
  return ok();
}

int VerbsDevice::region_access() const noexcept { return kRegionAccess | (windows_ ? IBV_ACCESS_MW_BIND : 0); }

// Windows where the device binds type 2 windows (bound to one queue pair,
// by a work request) and one can be allocated; GREX_IB_CONFINE=window
// insists, =region goes without.
Result<void> VerbsDevice::choose_windows() {
  registers_ = vo_.confine == VerbsOptions::Confine::kRegister;
  if (vo_.confine == VerbsOptions::Confine::kRegion || registers_) return ok();
  const bool type2 = (dev_attr_.device_cap_flags & (IBV_DEVICE_MEM_WINDOW_TYPE_2A | IBV_DEVICE_MEM_WINDOW_TYPE_2B)) != 0;
  ibv_mw* probe = type2 && dev_attr_.max_mw > 0 ? ibv_alloc_mw(pd_, IBV_MW_TYPE_2) : nullptr;
  if (probe != nullptr) ibv_dealloc_mw(probe);
  windows_ = probe != nullptr;
  if (!windows_ && vo_.confine == VerbsOptions::Confine::kWindow)
    return Error(Errc::kNotSupported, name() + " offers no type 2 memory windows (GREX_IB_CONFINE=window)")
        .device(name())
        .hint("GREX_IB_CONFINE=region lets adverts carry the region's rkey");
  return ok();
}

cc::NicRateLimit::Range VerbsDevice::rc_rate_limits() const noexcept {
  if ((pacing_caps_.supported_qpts & (1u << IBV_QPT_RC)) == 0) return {};
  return {pacing_caps_.qp_rate_limit_min, pacing_caps_.qp_rate_limit_max};
}

// The IPv4 address rdma_cm binds to selects the GID: take it from the chosen
// (or first) RoCE v2 IPv4-mapped GID of the port, unless given.
Result<void> VerbsDevice::pick_address() {
  if (vo_.ip != 0) return ok();
  std::vector<ibv_gid_entry> gids(std::max<int>(port_attr_.gid_tbl_len, 1));
  ssize_t n = ibv_query_gid_table(ctx_, gids.data(), gids.size(), 0);
  if (n < 0) return Error::from_errno("ibv_query_gid_table", static_cast<int>(-n)).device(name());
  std::vector<GidEntry> table(static_cast<size_t>(n));
  for (size_t i = 0; i < table.size(); ++i) {
    table[i].index = gids[i].gid_index;
    table[i].port = gids[i].port_num;
    std::memcpy(table[i].raw, gids[i].gid.raw, 16);
    table[i].roce_v2 = gids[i].gid_type == IBV_GID_TYPE_ROCE_V2;
  }
  GidChoice c = GREX_TRY(choose_gid(table, vo_.port, vo_.gid_index, name()));
  vo_.ip = c.ip;
  vo_.gid_index = static_cast<int>(c.index);
  return ok();
}

Result<void> VerbsDevice::init() {
  GREX_TRY(parse_options());
  // The tag a connect request must carry: keyed by the job key, so neither
  // another job nor a stranger who read the job id can make one (issue 28).
  {
    const std::string key = opts_.job_key.size() == wire::kJobKeyBytes ? opts_.job_key
                                                                       : wire::derive_job_key(opts_.job_id, opts_.job_id);
    uint8_t tag[8];
    if (key.empty() || !wire::hkdf_sha256(key.data(), key.size(), nullptr, 0, "grex verbs hello v1", tag, sizeof(tag)))
      return Error(Errc::kInternal, "cannot derive the connection tag (libcrypto)").device("verbs");
    std::memcpy(&hello_tag_, tag, sizeof(tag));
  }
  GREX_TRY(pick_device());
  if (vo_.rate_limit == VerbsOptions::RateLimit::kNic && rc_rate_limits().max_kbps == 0)
    return Error(Errc::kNotSupported,
                 name() + " offers no per-QP rate limit for RC queue pairs (packet pacing: up to " +
                     std::to_string(pacing_caps_.qp_rate_limit_max) + " kbit/s, queue pair type mask " +
                     std::to_string(pacing_caps_.supported_qpts) + ")")
        .device(name())
        .hint("GREX_IB_RATE_LIMIT=auto paces in software where the NIC cannot");
  GREX_TRY(pick_address());
  pd_ = ibv_alloc_pd(ctx_);
  if (pd_ == nullptr) return Error::from_errno("ibv_alloc_pd", errno).device(name());
  // One CQ for every queue pair: each peer needs at most its send and
  // receive depth of entries outstanding.
  uint32_t per_peer = 2 * opts_.queue_depth + 2 * opts_.queue_depth + 256;
  int cqe = static_cast<int>(std::min<uint64_t>(static_cast<uint64_t>(dev_attr_.max_cqe),
                                                uint64_t{per_peer} * static_cast<uint64_t>(std::max(1, opts_.world_size))));
  channel_ = ibv_create_comp_channel(ctx_);
  if (channel_ == nullptr) return Error::from_errno("ibv_create_comp_channel", errno).device(name());
  int cfl = fcntl(channel_->fd, F_GETFL);
  fcntl(channel_->fd, F_SETFL, cfl | O_NONBLOCK);
  cq_ = ibv_create_cq(ctx_, cqe, nullptr, channel_, 0);
  if (cq_ == nullptr) return Error::from_errno("ibv_create_cq(" + std::to_string(cqe) + ")", errno).device(name());
  if (vo_.srq) {
    ibv_srq_init_attr sa{};
    sa.attr.max_wr = std::min<uint32_t>(static_cast<uint32_t>(dev_attr_.max_srq_wr), 4 * opts_.queue_depth + 256);
    sa.attr.max_sge = 1;
    srq_ = ibv_create_srq(pd_, &sa);
    if (srq_ == nullptr) return Error::from_errno("ibv_create_srq", errno).device(name()).hint("GREX_IB_SRQ=0");
    srq_slots_.resize(sa.attr.max_wr);
    srq_mr_ = ibv_reg_mr(pd_, srq_slots_.data(), srq_slots_.size() * sizeof(Ctrl), IBV_ACCESS_LOCAL_WRITE);
    if (srq_mr_ == nullptr) return Error::from_errno("ibv_reg_mr (receive slots)", errno).device(name());
    for (uint32_t i = 0; i < srq_slots_.size(); ++i) {
      ibv_sge sge{reinterpret_cast<uint64_t>(&srq_slots_[i]), sizeof(Ctrl), srq_mr_->lkey};
      ibv_recv_wr wr{};
      wr.wr_id = wr_id(0, kRecvSlot, i);
      wr.sg_list = &sge;
      wr.num_sge = 1;
      ibv_recv_wr* bad = nullptr;
      if (int e = ibv_post_srq_recv(srq_, &wr, &bad); e != 0) return Error::from_errno("ibv_post_srq_recv", e);
    }
  }
  // Async events (port down, QP fatal) and CM events (disconnects) are
  // polled from poll(): make both channels non-blocking.
  int fl = fcntl(ctx_->async_fd, F_GETFL);
  fcntl(ctx_->async_fd, F_SETFL, fl | O_NONBLOCK);
  ec_ = rdma_create_event_channel();
  if (ec_ == nullptr) return Error::from_errno("rdma_create_event_channel", errno).hint("is rdma_ucm loaded?");
  fl = fcntl(ec_->fd, F_GETFL);
  fcntl(ec_->fd, F_SETFL, fl | O_NONBLOCK);
  if (rdma_create_id(ec_, &listener_, nullptr, RDMA_PS_TCP) != 0)
    return Error::from_errno("rdma_create_id", errno).device(name());
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(vo_.ip);
  sa.sin_port = 0;
  if (rdma_bind_addr(listener_, reinterpret_cast<sockaddr*>(&sa)) != 0)
    return Error::from_errno("rdma_bind_addr(" + ip_str(vo_.ip) + ")", errno)
        .device(name())
        .hint("the address must belong to the RDMA device's network interface");
  if (listener_->verbs != ctx_)
    return Error(Errc::kInvalidArgument, ip_str(vo_.ip) + " belongs to another RDMA device than " + name())
        .device(name())
        .hint("set GREX_IB_IP / GREX_IB_GID_INDEX to an address of this device");
  if (rdma_listen(listener_, 64) != 0) return Error::from_errno("rdma_listen", errno).device(name());
  listen_port_ = ntohs(rdma_get_src_port(listener_));
  dmabuf_ = verbs::dmabuf_supported(pd_);
  GREX_TRY(choose_windows());
  done_.reset(4 * opts_.queue_depth + 64);

  caps_.driver = "verbs";
  caps_.send_recv = true;
  caps_.write_imm = true;
  caps_.zero_copy_send = true;
  caps_.gpu_memory = false;
  caps_.registration_pins_pages = true;
  caps_.max_message_bytes = UINT32_MAX;  // larger messages are split into several writes
  caps_.max_post_batch = opts_.queue_depth;
  caps_.queue_depth = opts_.queue_depth;
  caps_.link_speed_mbps = link_mbps(port_attr_);
  caps_.mtu_bytes = mtu_bytes(port_attr_.active_mtu);
  GREX_INFO(kSubsys, "%s port %u: %s, active MTU %u, %llu Mbit/s, GID index %d (%s), listening on %s:%u, dma-buf %s, "
            "adverts open %s",
            name().c_str(), vo_.port, port_state_name(port_attr_.state), caps_.mtu_bytes,
            static_cast<unsigned long long>(caps_.link_speed_mbps), vo_.gid_index, ip_str(vo_.ip).c_str(),
            ip_str(vo_.ip).c_str(), listen_port_, dmabuf_ ? "yes" : "no",
            windows_ ? "a window on the receive" : registers_ ? "a registration of the receive" : "the whole region");
  return ok();
}

Result<std::unique_ptr<Device>> open_device(const DeviceOptions& opts) {
  auto dev = std::make_unique<VerbsDevice>(opts);
  if (auto r = dev->init(); !r) return std::move(r).error().rank(opts.rank);
  return std::unique_ptr<Device>(std::move(dev));
}

VerbsDevice::~VerbsDevice() {
  release_all_registrations();
  for (auto& [rank, ev] : requests_) {
    rdma_reject(ev->id, nullptr, 0);
    rdma_cm_id* id = ev->id;
    rdma_ack_cm_event(ev);
    rdma_destroy_id(id);
  }
  if (listener_ != nullptr) rdma_destroy_id(listener_);
  if (ec_ != nullptr) rdma_destroy_event_channel(ec_);
  if (srq_mr_ != nullptr) ibv_dereg_mr(srq_mr_);
  if (srq_ != nullptr) ibv_destroy_srq(srq_);
  if (cq_ != nullptr) ibv_destroy_cq(cq_);
  if (channel_ != nullptr) ibv_destroy_comp_channel(channel_);
  if (pd_ != nullptr) ibv_dealloc_pd(pd_);
  if (devices_ != nullptr) rdma_free_devices(devices_);
}

Result<std::string> VerbsDevice::local_address() {
  // verbs:<ip>:<port>:<active mtu>
  return "verbs:" + ip_str(vo_.ip) + ":" + std::to_string(listen_port_) + ":" + std::to_string(caps_.mtu_bytes);
}

std::vector<std::pair<std::string, uint64_t>> VerbsDevice::counters() const {
  std::vector<std::pair<std::string, uint64_t>> c = {{"wr_posted", stats.wr_posted.get()},     {"wc_polled", stats.wc_polled.get()},
          {"sends", stats.sends.get()},             {"recvs", stats.recvs.get()},
          {"writes", stats.writes.get()},           {"remote_writes", stats.remote_writes.get()},
          {"bytes_sent", stats.bytes_sent.get()},   {"bytes_received", stats.bytes_received.get()},
          {"adverts", stats.adverts.get()},         {"inline_sends", stats.inline_sends.get()},
          {"wc_errors", stats.wc_errors.get()},     {"async_events", stats.async_events.get()},
          {"cm_events", stats.cm_events.get()}, {"rejected_requests", stats.rejected_requests.get()},     {"cq_events", stats.cq_events.get()},
          {"dmabuf_supported", dmabuf_ ? 1u : 0u},
          {"gpu_dmabuf_regs", stats.gpu_dmabuf_regs.get()}, {"gpu_peermem_regs", stats.gpu_peermem_regs.get()},
          {"eager_sends", stats.eager_sends.get()}, {"eager_recvs", stats.eager_recvs.get()},
          {"unexpected", stats.unexpected.get()}, {"advert_requests", stats.wants.get()},
          {"credit_messages", stats.credits.get()},
          {"gid_index", static_cast<uint64_t>(vo_.gid_index)},
          {"nic_rate_limit_max_kbps", rc_rate_limits().max_kbps}};
  if (vo_.cc != nullptr) {  // congestion control, summed over the QPs (the rate: the lowest)
    uint64_t probes = 0, samples = 0, waits = 0, last_rtt = 0, nic_updates = 0;
    double rate = 0;
    for (const VerbsEndpoint* ep : eps_) {
      if (ep == nullptr) continue;
      const auto& s = ep->cc_stats();
      probes += s.probes_sent;
      samples += s.rtt_samples;
      waits += s.paced_waits;
      nic_updates += ep->nic_rate().updates();
      if (s.rtt_samples > 0) last_rtt = s.last_rtt_ns;
      if (s.rate_bps > 0 && (rate == 0 || s.rate_bps < rate)) rate = s.rate_bps;
    }
    c.insert(c.end(), {{"probes_sent", probes}, {"rtt_samples", samples}, {"last_rtt_ns", last_rtt},
                       {"paced_waits", waits}, {"cc_min_rate_kbps", static_cast<uint64_t>(rate / 1e3)},
                       {"nic_rate_updates", nic_updates}});
    for (const VerbsEndpoint* ep : eps_) {  // per QP: "peer.<rank>.<name>"
      if (ep == nullptr) continue;
      const auto& s = ep->cc_stats();
      const std::string p = "peer." + std::to_string(ep->peer()) + ".";
      c.insert(c.end(), {{p + "probes_sent", s.probes_sent}, {p + "rtt_samples", s.rtt_samples},
                         {p + "last_rtt_ns", s.last_rtt_ns}, {p + "paced_waits", s.paced_waits},
                         {p + "cc_rate_kbps", static_cast<uint64_t>(s.rate_bps / 1e3)},
                         {p + "nic_rate_kbps", ep->nic_rate().kbps()}});
    }
  }
  return c;
}

void VerbsDevice::push_completion(const Completion& c) noexcept {
  done_.push(c);  // sized for every request that can be outstanding
}

void VerbsDevice::forget(VerbsEndpoint* ep) noexcept {
  if (ep->id_ < eps_.size()) eps_[ep->id_] = nullptr;
  if (ep->qp_ != nullptr) qps_.erase(ep->qp_->qp_num);
}

VerbsEndpoint* VerbsDevice::by_qp(uint32_t qp_num) const noexcept {
  auto it = qps_.find(qp_num);
  return it == qps_.end() ? nullptr : it->second;
}

// The adaptive progress mode's nap: the first call arms the CQ and returns
// (the caller polls once more, catching what arrived before arming); the
// next blocks on the completion channel, the CM channel and the async fd.
bool VerbsDevice::wait(uint64_t timeout_ns) noexcept {
  if (!armed_) {
    if (ibv_req_notify_cq(cq_, 0) != 0) return false;
    armed_ = true;
    return true;
  }
  pollfd fds[3] = {{channel_->fd, POLLIN, 0}, {ec_->fd, POLLIN, 0}, {ctx_->async_fd, POLLIN, 0}};
  int ms = static_cast<int>(std::max<uint64_t>(1, timeout_ns / 1'000'000));
  if (::poll(fds, 3, ms) > 0) {
    if ((fds[0].revents & POLLIN) != 0) {
      ibv_cq* cq = nullptr;
      void* ctx = nullptr;
      if (ibv_get_cq_event(channel_, &cq, &ctx) == 0) {
        ibv_ack_cq_events(cq, 1);
        armed_ = false;
        stats.cq_events.add();
      }
    }
    if ((fds[1].revents | fds[2].revents) & POLLIN) {
      poll_events();
      events_ns_ = now_ns();
    }
  }
  return true;
}

}  // namespace grex::verbs
