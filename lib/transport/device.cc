// SPDX-License-Identifier: Apache-2.0
// Device base: registration cache, default allocate/free, "not supported" defaults.
#include <grex/transport.h>

#include <sys/mman.h>

#include <cerrno>

#include "mem/domain.h"
#include "mem/reg_cache.h"
#include "transport/wire_auth.h"

namespace grex {

std::string_view status_name(Status s) noexcept {
  switch (s) {
    case Status::kSuccess: return "success";
    case Status::kTruncated: return "truncated";
    case Status::kCancelled: return "cancelled";
    case Status::kPeerGone: return "peer-gone";
    case Status::kRemoteAccess: return "remote-access";
    case Status::kLocalError: return "local-error";
    case Status::kNotSupported: return "not-supported";
  }
  return "unknown";
}

PostResult Endpoint::post_send(std::span<const SendRequest>) noexcept { return {0, Errc::kNotSupported}; }
PostResult Endpoint::post_recv(std::span<const RecvRequest>) noexcept { return {0, Errc::kNotSupported}; }
PostResult Endpoint::post_write(std::span<const WriteRequest>) noexcept { return {0, Errc::kNotSupported}; }
PostResult Endpoint::post_read(std::span<const ReadRequest>) noexcept { return {0, Errc::kNotSupported}; }
Result<void*> Endpoint::map(const RemoteRegion&) {
  return Error(Errc::kNotSupported, "this driver gives no load/store access to peer memory");
}
std::string Endpoint::describe_peer() const { return "rank " + std::to_string(peer_); }

struct Device::Cache {
  mem::IntervalCache<std::unique_ptr<MemoryRegion>> regs;
  // Regions from the default allocate(): address -> mapping length.
  std::map<MemoryRegion*, size_t> allocated;
};

Device::Device() : cache_(std::make_unique<Cache>()) {}
Device::~Device() { release_all_registrations(); }

size_t Device::registration_count() const noexcept { return cache_->regs.size(); }

Result<MemoryRegion*> Device::register_memory(void* addr, size_t length, MemoryDomain domain) {
  if (addr == nullptr && length > 0)
    return Error(Errc::kInvalidArgument, "register_memory: null address with length " + std::to_string(length))
        .device(capabilities().driver);
  // Memory passed as host memory may be a GPU's: the detector lib/gpu installs
  // says (cuPointerGetAttribute; immediate where there is no CUDA driver).
  if (domain == MemoryDomain::kHost) domain = mem::detect_domain(addr);
  auto a = reinterpret_cast<uintptr_t>(addr);
  if (auto* e = cache_->regs.lookup(a, length); e != nullptr && e->value->domain() == domain) {
    ++e->refs;
    return e->value.get();
  }
  auto mr = GREX_TRY(do_register(addr, length, domain));
  MemoryRegion* raw = mr.get();
  cache_->regs.insert(a, length, std::move(mr));
  return raw;
}

Result<void> Device::deregister_memory(MemoryRegion* region) {
  if (region == nullptr) return Error(Errc::kInvalidArgument, "deregister_memory: null region");
  bool erased = false;
  if (!cache_->regs.erase_if_last_ref([&](const std::unique_ptr<MemoryRegion>& v) { return v.get() == region; },
                                      &erased))
    return Error(Errc::kNotFound, "deregister_memory: region is not registered with this device")
        .device(capabilities().driver);
  return ok();
}

MemoryRegion* Device::adopt_registration(std::unique_ptr<MemoryRegion> region) {
  MemoryRegion* raw = region.get();
  cache_->regs.insert(reinterpret_cast<uintptr_t>(raw->addr()), raw->length(), std::move(region));
  return raw;
}

void Device::release_all_registrations() noexcept {
  for (auto& [r, len] : cache_->allocated) ::munmap(r->addr(), len);
  cache_->allocated.clear();
  cache_->regs.clear();
}

Result<MemoryRegion*> Device::allocate(size_t length) {
  size_t len = length == 0 ? 1 : length;
  void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return Error::from_errno("allocate: mmap of " + std::to_string(len) + " bytes", errno);
  // Always a registration of its own: the cache may still hold one of user
  // memory that was freed and whose addresses the kernel just handed out
  // again; returning that would give the caller its stale address and length.
  // (Later lookups inside [p, p+len) find this entry: it starts closest below.)
  auto r = do_register(p, len, MemoryDomain::kHost);
  if (!r) {
    ::munmap(p, len);
    return std::move(r).error();
  }
  MemoryRegion* raw = adopt_registration(std::move(*r));
  cache_->allocated[raw] = len;
  return raw;
}

Result<void> Device::free(MemoryRegion* region) {
  auto it = cache_->allocated.find(region);
  if (it == cache_->allocated.end())
    return Error(Errc::kNotFound, "free: region was not returned by allocate()").device(capabilities().driver);
  void* p = region->addr();
  size_t len = it->second;
  cache_->allocated.erase(it);
  GREX_TRY(deregister_memory(region));
  ::munmap(p, len);
  return ok();
}

std::string derive_job_key(std::string_view secret, std::string_view job_id) {
  return wire::derive_job_key(secret, job_id);
}

}  // namespace grex
