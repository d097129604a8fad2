// SPDX-License-Identifier: Apache-2.0
// shm driver setup: options, addresses, pair segments, registration, memfd allocation.
#include "drivers/shm/shm_device.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <thread>

#include "core/clock.h"
#include "core/config.h"
#include "core/host.h"
#include "core/log.h"
#include "drivers/shm/shm.h"

namespace grex::shm {
namespace {

constexpr const char* kSubsys = "shm";
// Shared heap reservation: address space and a sparse file, memory only
// where written. Peers map all of it, so this is per rank and per peer.
constexpr uint64_t kDefaultHeapBytes = 64ull << 30;

Result<uint64_t> param_u64(const DeviceOptions& o, const char* key, const char* env, uint64_t def, uint64_t lo,
                           uint64_t hi) {
  uint64_t v = def;
  if (auto it = o.params.find(key); it != o.params.end())
    v = GREX_TRY(config::parse_size(it->second, std::string("shm param ") + key));
  GREX_TRY(config::env_size(env, &v, lo, hi));
  if (v < lo || v > hi)
    return Error(Errc::kInvalidArgument, std::string("shm param ") + key + "=" + std::to_string(v) +
                                             " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return v;
}

}  // namespace

ShmRegion::ShmRegion(ShmDevice* dev, void* addr, size_t length, MemoryDomain domain, uint32_t id, int memfd,
                     pid_t pid)
    : MemoryRegion(addr, length, domain), dev_(dev), id_(id), memfd_(memfd) {
  dev_->regions_[id] = this;
  lkey_ = id;
  remote_.addr = reinterpret_cast<uint64_t>(addr);
  remote_.length = length;
  remote_.rkey = make_rkey(id, memfd);
  remote_.owner = static_cast<uint64_t>(pid);
}

ShmRegion::~ShmRegion() {
  dev_->regions_.erase(id_);
  if (heap_offset_ >= 0) {
    dev_->release_heap_piece(id_, static_cast<uint64_t>(heap_offset_), length_);
    return;
  }
  if (owned_bytes_ > 0) ::munmap(addr_, owned_bytes_);
  if (memfd_ >= 0) ::close(memfd_);
}

ShmDevice::ShmDevice(const DeviceOptions& opts) : opts_(opts) {}

ShmDevice::~ShmDevice() {
  // The heap goes whole below; peers that still map it keep its pages until
  // their endpoints close (what map() promises them).
  closing_ = true;
  release_all_registrations();
}

Result<void> ShmDevice::init() {
  slots_ = static_cast<uint32_t>(GREX_TRY(param_u64(opts_, "slots", "GREX_SHM_SLOTS", 128, 4, 65536)));
  slot_bytes_ =
      static_cast<uint32_t>(GREX_TRY(param_u64(opts_, "slot_bytes", "GREX_SHM_SLOT_BYTES", 8192, 256, 1 << 20)));
  if (slot_bytes_ % 64 != 0)
    return Error(Errc::kInvalidArgument, "shm slot_bytes=" + std::to_string(slot_bytes_) + " is not a multiple of 64");
  cma_ = GREX_TRY(param_u64(opts_, "cma", "GREX_SHM_CMA", 1, 0, 1)) != 0;
  heap_bytes_ = GREX_TRY(param_u64(opts_, "heap_bytes", "GREX_SHM_HEAP_BYTES", kDefaultHeapBytes, 0, 1ull << 46));
  if (opts_.job_id.empty())
    return Error(Errc::kInvalidArgument, "shm needs a job id to name its segments").rank(opts_.rank).device("shm");
  host_id_ = machine_id();
  caps_.driver = "shm";
  caps_.device_name = "shm";
  caps_.send_recv = true;
  caps_.write_imm = true;
  caps_.zero_copy_send = true;
  caps_.read = true;
  caps_.allocate_shared = true;
  caps_.load_store = true;
  caps_.max_message_bytes = UINT64_MAX / 2;
  caps_.max_post_batch = opts_.queue_depth;
  caps_.queue_depth = opts_.queue_depth;
  probe_word_ = 0x5eed'0000'0000'0000ull | static_cast<uint64_t>(::getpid());
  if (heap_bytes_ > 0 && !heap_.reserve(heap_bytes_))
    GREX_WARN(kSubsys, "rank %d: no shared heap (%s): each allocate() gets a memfd of its own, which peers reach "
              "through CMA or Endpoint::map only", opts_.rank, strerror(errno));
  else if (heap_.enabled() && heap_.bytes() < heap_bytes_)
    GREX_DEBUG(kSubsys, "shared heap: %llu of %llu bytes reserved (address space limit)",
               static_cast<unsigned long long>(heap_.bytes()), static_cast<unsigned long long>(heap_bytes_));
  GREX_DEBUG(kSubsys, "opened: %u slots x %u bytes per direction, cma=%d, heap=%llu bytes", slots_, slot_bytes_,
             cma_ ? 1 : 0, static_cast<unsigned long long>(heap_.bytes()));
  return ok();
}

Result<std::unique_ptr<Device>> open_device(const DeviceOptions& opts) {
  auto dev = std::make_unique<ShmDevice>(opts);
  GREX_TRY(dev->init());
  return std::unique_ptr<Device>(std::move(dev));
}

Result<std::string> ShmDevice::local_address() {
  return "shm:" + std::to_string(::getpid()) + ":" + host_id_;
}

Result<std::unique_ptr<Endpoint>> ShmDevice::connect(int peer, std::string_view peer_address) {
  auto err = [&](Errc c, std::string msg) { return Error(c, std::move(msg)).rank(opts_.rank).peer(peer).device("shm"); };
  if (peer < 0 || peer >= opts_.world_size || peer == opts_.rank)
    return err(Errc::kInvalidArgument, "cannot connect to rank " + std::to_string(peer));
  // "shm:<pid>:<host id>"
  std::string_view a = peer_address;
  if (a.substr(0, 4) != "shm:") return err(Errc::kProtocol, "address '" + std::string(a) + "' is not an shm address");
  a.remove_prefix(4);
  size_t colon = a.find(':');
  if (colon == std::string_view::npos) return err(Errc::kProtocol, "malformed shm address");
  auto pid_r = config::parse_int(a.substr(0, colon), "peer pid");
  if (!pid_r) return err(Errc::kProtocol, "malformed pid in shm address");
  std::string_view host = a.substr(colon + 1);
  if (host != host_id_)
    return err(Errc::kNotSupported, "peer is on another host (" + std::string(host.substr(0, host.find('/'))) + ")")
        .hint("shm connects ranks of one host only; use --backend dpdk or verbs across hosts");
  pid_t peer_pid = static_cast<pid_t>(*pid_r);

  int lo = std::min(opts_.rank, peer), hi = std::max(opts_.rank, peer);
  std::string name = "/grex-" + opts_.job_id + "-" + std::to_string(lo) + "-" + std::to_string(hi);
  int side = opts_.rank == lo ? 0 : 1;
  Segment seg;
  Deadline deadline = Deadline::after_ms(opts_.connect_timeout_ms);
  if (side == 0) {
    auto s = Segment::create(name, slots_, slot_bytes_);
    if (!s) return std::move(s).error().rank(opts_.rank).peer(peer).device("shm");
    seg = std::move(*s);
    // The probe address and heap first, then the pid with release: the opener
    // waits for the pid and may then read them (it used to race the create).
    seg.header()->probe_addr[0] = reinterpret_cast<uint64_t>(&probe_word_);
    publish_heap(seg.header(), 0);
    __atomic_store_n(&seg.header()->pid[0], ::getpid(), __ATOMIC_RELEASE);
    while (seg.header()->attached.load(std::memory_order_acquire) == 0) {
      if (deadline.expired()) {
        ::shm_unlink(name.c_str());
        return err(Errc::kTimeout, "peer never attached to " + name + " within " +
                                       std::to_string(opts_.connect_timeout_ms) + " ms")
            .hint("did rank " + std::to_string(peer) + " start and open the shm backend?");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  } else {
    auto s = Segment::open(name, opts_.connect_timeout_ms);
    if (!s) return std::move(s).error().rank(opts_.rank).peer(peer).device("shm");
    seg = std::move(*s);
    while (__atomic_load_n(&seg.header()->pid[0], __ATOMIC_ACQUIRE) == 0) {
      if (deadline.expired())
        return err(Errc::kTimeout, "rank " + std::to_string(peer) + " created " + name + " but never published it");
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    seg.header()->pid[1] = ::getpid();
    seg.header()->probe_addr[1] = reinterpret_cast<uint64_t>(&probe_word_);
    publish_heap(seg.header(), 1);
    seg.header()->attached.store(1, std::memory_order_release);
    ::shm_unlink(name.c_str());  // both sides hold it mapped; nothing is left in /dev/shm
  }
  SegmentHeader* h = seg.header();
  if (h->pid[1 - side] != 0 && h->pid[1 - side] != peer_pid)
    return err(Errc::kProtocol, "segment " + name + " belongs to pid " + std::to_string(h->pid[1 - side]) +
                                    ", expected " + std::to_string(peer_pid));

  int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, peer_pid, 0));
  if (pidfd < 0) GREX_DEBUG(kSubsys, "pidfd_open(%d) failed (%s); peer death found by kill(0)", peer_pid, strerror(errno));

  // CMA probe: read the peer's probe word from its address space.
  bool cma_ok = false;
  if (cma_) {
    uint64_t word = 0;
    iovec l{&word, sizeof(word)};
    iovec r{reinterpret_cast<void*>(h->probe_addr[1 - side]), sizeof(word)};
    ssize_t n = ::process_vm_readv(peer_pid, &l, 1, &r, 1, 0);
    cma_ok = n == sizeof(word) && (word & 0xffff'ffffull) == static_cast<uint64_t>(peer_pid);
    if (!cma_ok)
      GREX_WARN(kSubsys, "CMA to rank %d unavailable (%s): large messages from user memory need memory from "
                "Device::allocate()", peer, n < 0 ? strerror(errno) : "probe mismatch");
  }
  // The peer's heap, mapped once here: every region it allocates, now or
  // later, lies inside, so the data path never maps anything.
  PeerMapping heap = map_peer_heap(peer, peer_pid, h, 1 - side);
  auto ep = std::make_unique<ShmEndpoint>(this, peer, std::move(seg), side == 0 ? 0 : 1, peer_pid, pidfd, cma_ok,
                                          opts_.queue_depth, heap);
  add_endpoint(ep.get());
  GREX_DEBUG(kSubsys, "connected to rank %d (pid %d) via %s, cma=%d", peer, peer_pid, name.c_str(), cma_ok ? 1 : 0);
  return std::unique_ptr<Endpoint>(std::move(ep));
}

void ShmDevice::publish_heap(SegmentHeader* h, int side) const noexcept {
  h->heap_fd[side] = heap_.enabled() ? heap_.fd() : -1;
  h->heap_addr[side] = reinterpret_cast<uint64_t>(heap_.base());
  h->heap_bytes[side] = heap_.bytes();
}

PeerMapping ShmDevice::map_peer_heap(int peer, pid_t peer_pid, const SegmentHeader* h, int peer_side) {
  PeerMapping m;
  if (h->heap_fd[peer_side] < 0 || h->heap_bytes[peer_side] == 0) return m;
  m.addr = h->heap_addr[peer_side];
  m.fd = h->heap_fd[peer_side];
  uint64_t len = h->heap_bytes[peer_side];
  m.base = map_peer_fd(peer_pid, m.fd, 0, &len, true);
  if (m.base == nullptr) {
    GREX_WARN(kSubsys, "rank %d: cannot map rank %d's shared heap (/proc/%d/fd/%d: %s); its allocate()d memory "
              "is copied with CMA instead", opts_.rank, peer, static_cast<int>(peer_pid), h->heap_fd[peer_side],
              strerror(errno));
    return m;
  }
  stats.peer_mmaps.add();
  if (len < h->heap_bytes[peer_side])
    GREX_DEBUG(kSubsys, "rank %d's shared heap: first %llu of %llu bytes mapped (address space limit)", peer,
               static_cast<unsigned long long>(len), static_cast<unsigned long long>(h->heap_bytes[peer_side]));
  m.bytes = len;
  return m;
}

void ShmDevice::add_endpoint(ShmEndpoint* ep) {
  endpoints_.push_back(ep);
  size_t need = endpoints_.size() * (2ull * opts_.queue_depth + 2ull * slots_);
  need = std::bit_ceil(need);  // a power of two: ring indices by mask, not division
  if (cq_.size() < need) {
    std::vector<Completion> n(need);
    for (size_t i = 0; i < cq_count_; ++i) n[i] = cq_[(cq_head_ + i) % cq_.size()];
    cq_ = std::move(n);
    cq_cap_ = cq_.size();
    cq_head_ = 0;
  }
}

void ShmDevice::remove_endpoint(ShmEndpoint* ep) noexcept {
  // Once this endpoint is gone we no longer see its peer's pins: what the
  // peer holds now stays out of reuse until the device closes.
  ep->peer_pins(&held_after_close_);
  for (size_t i = 0; i < endpoints_.size(); ++i)
    if (endpoints_[i] == ep) {
      endpoints_.erase(endpoints_.begin() + static_cast<long>(i));
      return;
    }
}

Result<std::unique_ptr<MemoryRegion>> ShmDevice::do_register(void* addr, size_t length, MemoryDomain domain) {
  if (domain != MemoryDomain::kHost)
    return Error(Errc::kNotSupported, "shm registers host memory only, not GPU memory").device("shm").hint(
        "copy GPU buffers to host memory first (docs/gpudirect.md says what exists)");
  auto r = std::make_unique<ShmRegion>(this, addr, length, domain, next_region_id_++, -1, ::getpid());
  return std::unique_ptr<MemoryRegion>(std::move(r));
}

Result<MemoryRegion*> ShmDevice::allocate(size_t length) {
  size_t len = length == 0 ? 1 : length;
  std::unique_ptr<ShmRegion> r;
  reclaim_retired();
  if (int64_t off = heap_.enabled() ? heap_.take(len) : -1; off >= 0) {
    r = std::make_unique<ShmRegion>(this, heap_.base() + off, len, MemoryDomain::kHost, next_region_id_++, heap_.fd(),
                                    ::getpid());
    r->set_heap_piece(static_cast<uint64_t>(off));
  } else {
    if (heap_.enabled())
      GREX_WARN(kSubsys, "rank %d: allocate(%zu) does not fit the shared heap (%llu of %llu bytes in use; "
                "GREX_SHM_HEAP_BYTES): peers reach it through CMA or Endpoint::map only", opts_.rank, length,
                static_cast<unsigned long long>(heap_.in_use()), static_cast<unsigned long long>(heap_.bytes()));
    r = GREX_TRY(allocate_memfd(len));
  }
  ShmRegion* raw = r.get();
  // Enter it in the base cache so register_memory() on a sub-range finds it.
  adopt_registration(std::move(r));
  allocated_[raw] = len;
  return static_cast<MemoryRegion*>(raw);
}

Result<std::unique_ptr<ShmRegion>> ShmDevice::allocate_memfd(size_t len) {
  int fd = ::memfd_create("grex-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return Error::from_errno("memfd_create", errno).device("shm");
  if (::ftruncate(fd, static_cast<off_t>(len)) != 0 || !seal_size(fd)) {  // sealed: see SharedHeap::reserve
    int e = errno;
    ::close(fd);
    return Error::from_errno("ftruncate(memfd, " + std::to_string(len) + ")", e).device("shm");
  }
  void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    ::close(fd);
    return Error::from_errno("mmap(memfd)", e).device("shm");
  }
  auto r = std::make_unique<ShmRegion>(this, p, len, MemoryDomain::kHost, next_region_id_++, fd, ::getpid());
  r->set_owned_mapping(len);
  return r;
}

Result<void> ShmDevice::free(MemoryRegion* region) {
  auto it = allocated_.find(region);
  if (it == allocated_.end())
    return Error(Errc::kNotFound, "free: region was not returned by allocate()").device("shm");
  allocated_.erase(it);
  return deregister_memory(region);
}

bool ShmDevice::heap_piece_held(uint32_t id) const noexcept {
  if (std::find(held_after_close_.begin(), held_after_close_.end(), id) != held_after_close_.end()) return true;
  for (const ShmEndpoint* ep : endpoints_)
    if (ep->peer_holds(id)) return true;
  return false;
}

void ShmDevice::release_heap_piece(uint32_t id, uint64_t offset, uint64_t len) {
  if (closing_) return;
  if (heap_piece_held(id))
    retired_.push_back({id, offset, len});
  else
    heap_.give_back(offset, len);
  reclaim_retired();
}

void ShmDevice::reclaim_retired() noexcept {
  for (size_t i = 0; i < retired_.size();) {
    if (heap_piece_held(retired_[i].id)) {
      ++i;
      continue;
    }
    heap_.give_back(retired_[i].offset, retired_[i].len);
    retired_[i] = retired_.back();
    retired_.pop_back();
  }
}

const ShmRegion* ShmDevice::region_by_id(uint32_t id) const noexcept {
  auto it = regions_.find(id);
  return it == regions_.end() ? nullptr : it->second;
}

std::vector<std::pair<std::string, uint64_t>> ShmDevice::counters() const {
  return {{"bytes_sent", stats.bytes_sent.get()},       {"bytes_received", stats.bytes_received.get()},
          {"eager_msgs", stats.eager_msgs.get()},       {"rndv_msgs", stats.rndv_msgs.get()},
          {"cma_bytes", stats.cma_bytes.get()},         {"mapped_bytes", stats.mapped_bytes.get()},
          {"writes", stats.writes.get()},               {"remote_writes", stats.remote_writes.get()},
          {"peer_failures", stats.peer_failures.get()}, {"cq_overflows", stats.cq_overflows.get()},
          {"peer_mmaps", stats.peer_mmaps.get()},       {"heap_bytes_in_use", heap_.in_use()}};
}

}  // namespace grex::shm
