// SPDX-License-Identifier: Apache-2.0
// loop driver setup: the process-wide registry of devices, connect, registrations, poll.
#include "drivers/loop/loop_device.h"

#include <sys/mman.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>

#include "core/config.h"
#include "core/log.h"
#include "drivers/loop/loop.h"

namespace grex::loop {
namespace {

constexpr const char* kSubsys = "loop";

// Every loop device of the process, by address, and the pairs whose first
// side called connect while the second has not yet. Setup calls only.
struct Registry {
  std::mutex mu;
  std::condition_variable joined;  // a pair's second side arrived
  uint64_t next_serial = 1;
  std::map<std::string, LoopDevice*, std::less<>> devices;
  std::map<std::pair<std::string, std::string>, std::shared_ptr<Pair>> pending;
  // allocate()d memory by start address. Its owner and every endpoint that
  // mapped it hold a reference: it is unmapped when the last one goes, so a
  // peer still reading it through map() never touches unmapped memory (as a
  // process keeps its own mapping of a peer's shm memory).
  struct Shared {
    uint64_t length = 0;
    uint64_t owner = 0;  // device serial
    uint32_t refs = 0;
  };
  std::map<uint64_t, Shared> shared;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: devices may close during static destruction
  return *r;
}

}  // namespace

/// Drops one reference to allocate()d memory at `addr`; the last unmaps it. Under the registry's lock.
void unref_shared(uint64_t addr) noexcept;

LoopRegion::LoopRegion(LoopDevice* dev, void* addr, size_t length, MemoryDomain domain, uint32_t id,
                       uint64_t serial)
    : MemoryRegion(addr, length, domain), dev_(dev), id_(id) {
  lkey_ = id;
  remote_.addr = reinterpret_cast<uint64_t>(addr);
  remote_.length = length;
  remote_.rkey = id;
  remote_.owner = serial;
}

LoopRegion::~LoopRegion() { dev_->forget_region(id_); }

LoopDevice::LoopDevice(const DeviceOptions& opts) : opts_(opts) {}

LoopDevice::~LoopDevice() {
  release_all_registrations();
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  reg.devices.erase(address_);
  for (auto& [region, addr] : allocated_) unref_shared(addr);
}

void unref_shared(uint64_t addr) noexcept {
  Registry& reg = registry();  // the caller holds reg.mu
  auto it = reg.shared.find(addr);
  if (it == reg.shared.end() || --it->second.refs > 0) return;
  ::munmap(reinterpret_cast<void*>(addr), it->second.length);
  reg.shared.erase(it);
}

Result<void> LoopDevice::init() {
  uint64_t slots = slots_;
  if (auto it = opts_.params.find("slots"); it != opts_.params.end())
    slots = GREX_TRY(config::parse_size(it->second, "loop param slots"));
  GREX_TRY(config::env_size("GREX_LOOP_SLOTS", &slots, 1, 1u << 20));
  if (slots < 1 || slots > (1u << 20))
    return Error(Errc::kInvalidArgument, "loop param slots=" + std::to_string(slots) + " is outside [1, 1048576]")
        .device("loop");
  slots_ = static_cast<uint32_t>(slots);
  if (opts_.job_id.empty())
    return Error(Errc::kInvalidArgument, "loop needs a job id to name its devices").rank(opts_.rank).device("loop");
  caps_.driver = "loop";
  caps_.device_name = "loop";
  caps_.send_recv = true;
  caps_.write_imm = true;
  caps_.read = true;
  caps_.zero_copy_send = true;
  caps_.allocate_shared = true;
  caps_.load_store = true;
  caps_.max_message_bytes = UINT64_MAX / 2;
  caps_.max_post_batch = opts_.queue_depth;
  caps_.queue_depth = opts_.queue_depth;
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  serial_ = reg.next_serial++;
  address_ = "loop:" + opts_.job_id + ":" + std::to_string(opts_.rank) + ":" + std::to_string(serial_);
  reg.devices[address_] = this;
  return ok();
}

Result<std::unique_ptr<Device>> open_device(const DeviceOptions& opts) {
  auto dev = std::make_unique<LoopDevice>(opts);
  GREX_TRY(dev->init());
  return std::unique_ptr<Device>(std::move(dev));
}

Result<std::unique_ptr<Endpoint>> LoopDevice::connect(int peer, std::string_view peer_address) {
  auto err = [&](Errc c, std::string msg) {
    return Error(c, std::move(msg)).rank(opts_.rank).peer(peer).device("loop");
  };
  if (peer < 0 || peer >= opts_.world_size || peer == opts_.rank)
    return err(Errc::kInvalidArgument, "cannot connect to rank " + std::to_string(peer));
  for (LoopEndpoint* ep : endpoints_)
    if (ep->peer() == peer) return err(Errc::kInvalidArgument, "already connected to rank " + std::to_string(peer));
  Registry& reg = registry();
  std::unique_lock<std::mutex> lock(reg.mu);
  auto it = reg.devices.find(peer_address);
  if (it == reg.devices.end())
    return err(Errc::kNotFound, "no loop device at '" + std::string(peer_address) + "' in this process")
        .hint("loop joins devices of one process only; use shm, dpdk or verbs between processes");
  if (it->second->rank() != peer)
    return err(Errc::kProtocol, "the loop device at '" + std::string(peer_address) + "' is rank " +
                                    std::to_string(it->second->rank()) + ", not " + std::to_string(peer));
  const uint64_t peer_serial = it->second->serial();
  const int side = address_ < peer_address ? 0 : 1;
  auto key = side == 0 ? std::make_pair(address_, std::string(peer_address))
                       : std::make_pair(std::string(peer_address), address_);
  std::shared_ptr<Pair> pair;
  if (auto p = reg.pending.find(key); p != reg.pending.end()) {
    pair = p->second;
    reg.pending.erase(p);
    pair->joined = 2;
    reg.joined.notify_all();
  } else {
    pair = std::make_shared<Pair>(slots_);
    pair->joined = 1;
    reg.pending[key] = pair;
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(opts_.connect_timeout_ms);
    if (!reg.joined.wait_until(lock, until, [&] { return pair->joined == 2; })) {
      reg.pending.erase(key);
      return err(Errc::kTimeout, "rank " + std::to_string(peer) + " did not connect back within " +
                                     std::to_string(opts_.connect_timeout_ms) + " ms")
          .hint("both ranks call connect() for each other");
    }
  }
  lock.unlock();
  auto ep = std::make_unique<LoopEndpoint>(this, peer, std::move(pair), side, peer_serial, opts_.queue_depth);
  endpoints_.push_back(ep.get());
  // Room for every completion the endpoints can owe at once.
  const size_t need = endpoints_.size() * (3ull * opts_.queue_depth + 2ull * slots_);
  if (cq_.capacity() < need) {
    Ring<Completion> bigger(need);
    for (size_t i = 0; i < cq_.size(); ++i) bigger.push(cq_[i]);
    cq_ = std::move(bigger);
  }
  GREX_DEBUG(kSubsys, "rank %d connected to rank %d (%s)", opts_.rank, peer, std::string(peer_address).c_str());
  return std::unique_ptr<Endpoint>(std::move(ep));
}

void LoopDevice::remove_endpoint(LoopEndpoint* ep) noexcept {
  for (size_t i = 0; i < endpoints_.size(); ++i)
    if (endpoints_[i] == ep) {
      endpoints_.erase(endpoints_.begin() + static_cast<long>(i));
      return;
    }
}

Result<std::unique_ptr<MemoryRegion>> LoopDevice::do_register(void* addr, size_t length, MemoryDomain domain) {
  if (domain != MemoryDomain::kHost)
    return Error(Errc::kNotSupported, "loop registers host memory only, not GPU memory").device("loop");
  const uint32_t id = next_region_id_++;
  auto r = std::make_unique<LoopRegion>(this, addr, length, domain, id, serial_);
  regions_[id] = r.get();
  return std::unique_ptr<MemoryRegion>(std::move(r));
}

const LoopRegion* LoopDevice::region_for(const RemoteRegion& r, uint64_t off, uint64_t n) const noexcept {
  if (r.owner != serial_ || r.rkey > UINT32_MAX) return nullptr;
  auto it = regions_.find(static_cast<uint32_t>(r.rkey));
  if (it == regions_.end()) return nullptr;
  const LoopRegion* region = it->second;
  const RemoteRegion mine = region->remote();
  if (mine.addr != r.addr || mine.length != r.length || !region->holds(off, n)) return nullptr;
  return region;
}

Result<MemoryRegion*> LoopDevice::allocate(size_t length) {
  const size_t len = length == 0 ? 1 : length;
  void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return Error::from_errno("allocate: mmap of " + std::to_string(len) + " bytes", errno).device("loop");
  auto r = do_register(p, len, MemoryDomain::kHost);
  if (!r) {
    ::munmap(p, len);
    return std::move(r).error();
  }
  MemoryRegion* mr = adopt_registration(std::move(*r));
  const auto addr = reinterpret_cast<uint64_t>(p);
  allocated_[mr] = addr;
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  reg.shared[addr] = Registry::Shared{len, serial_, 1};
  return mr;
}

Result<void> LoopDevice::free(MemoryRegion* region) {
  auto it = allocated_.find(region);
  if (it == allocated_.end())
    return Error(Errc::kNotFound, "free: region was not returned by allocate()").device("loop");
  const uint64_t addr = it->second;
  allocated_.erase(it);
  GREX_TRY(deregister_memory(region));
  std::lock_guard<std::mutex> lock(registry().mu);
  unref_shared(addr);
  return ok();
}

Result<void*> LoopEndpoint::map(const RemoteRegion& remote) {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  auto it = reg.shared.find(remote.addr);
  if (it == reg.shared.end() || it->second.owner != peer_serial_ || remote.owner != peer_serial_ ||
      remote.length == 0 || remote.length > it->second.length)
    return Error(Errc::kInvalidArgument, "map: not a region " + describe_peer() + " got from allocate()")
        .device("loop");
  ++it->second.refs;  // mapped until this endpoint closes, as shm's mappings are
  mapped_.push_back(remote.addr);
  return reinterpret_cast<void*>(remote.addr);
}

void LoopEndpoint::unmap_all() noexcept {
  std::lock_guard<std::mutex> lock(registry().mu);
  for (uint64_t addr : mapped_) unref_shared(addr);
  mapped_.clear();
}

size_t LoopDevice::poll(std::span<Completion> out) noexcept {
  if (cq_.size() < out.size())
    for (LoopEndpoint* ep : endpoints_) ep->progress();
  size_t n = 0;
  while (n < out.size() && !cq_.empty()) {
    out[n++] = cq_.front();
    cq_.pop();
  }
  return n;
}

std::vector<std::pair<std::string, uint64_t>> LoopDevice::counters() const {
  return {{"bytes_sent", stats.bytes_sent.get()}, {"bytes_received", stats.bytes_received.get()},
          {"sends", stats.sends.get()},           {"writes", stats.writes.get()},
          {"remote_writes", stats.remote_writes.get()}, {"reads", stats.reads.get()},
          {"peer_failures", stats.peer_failures.get()}};
}

}  // namespace grex::loop
