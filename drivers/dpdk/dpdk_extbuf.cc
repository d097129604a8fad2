// SPDX-License-Identifier: Apache-2.0
// External memory: reference-counted page chunks registered with EAL, and mbufs attached to them.
#include "drivers/dpdk/dpdk_extbuf.h"

#include "core/log.h"
#include "drivers/dpdk/dpdk_eal.h"

#include <rte_dev.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_memory.h>

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace grex::dpdk {
namespace {

// Shared-info refcount. DPDK decrements shinfo->refcnt on every free of an
// attached mbuf and calls free_cb when it reaches 0; it never increments it
// on attach. Our free_cb does nothing (the user memory outlives the mbufs), so
// the count carries no information; it only has to stay away from 1, where
// rte_mbuf_ext_refcnt_update() takes a non-atomic path that races when mbufs
// are freed on several cores. It starts at kShinfoRefcntArm and attach
// re-arms it when it has sunk below kShinfoRefcntLow; between two attaches at
// most "mbufs in flight" (< 32768) frees happen, so it never reaches 1. A
// race between a re-arm and a concurrent decrement loses one decrement, which
// is harmless for the same reason.
constexpr uint16_t kShinfoRefcntArm = UINT16_MAX;
constexpr uint16_t kShinfoRefcntLow = 0x8000;

void ext_free_noop(void* /*addr*/, void* /*opaque*/) {}

/// One range we registered with rte_extmem_register, shared by every region
/// that overlaps it.
struct Chunk {
  size_t len = 0;
  uint32_t refs = 0;
  std::map<uint16_t, uint32_t> port_refs;  // DMA mapping per port
};

struct Range {
  uintptr_t lo;
  uintptr_t hi;
};

std::mutex g_mu;
std::map<uintptr_t, Chunk> g_chunks;  // by base address; guarded by g_mu

int collect_msl(const rte_memseg_list* msl, void* arg) {
  if (msl->base_va != nullptr && msl->len != 0) {
    const auto lo = reinterpret_cast<uintptr_t>(msl->base_va);
    static_cast<std::vector<Range>*>(arg)->push_back({lo, lo + msl->len});
  }
  return 0;
}

/// Parts of [lo, hi) that no memseg list (DPDK heap or external) covers yet.
std::vector<Range> uncovered(uintptr_t lo, uintptr_t hi) {
  std::vector<Range> known;
  rte_memseg_list_walk(collect_msl, &known);
  std::sort(known.begin(), known.end(), [](const Range& a, const Range& b) { return a.lo < b.lo; });
  std::vector<Range> gaps;
  uintptr_t at = lo;
  for (const Range& k : known) {
    if (k.hi <= at) continue;
    if (k.lo >= hi) break;
    if (k.lo > at) gaps.push_back({at, k.lo});
    at = std::max(at, k.hi);
    if (at >= hi) break;
  }
  if (at < hi) gaps.push_back({at, hi});
  return gaps;
}

rte_device* port_device(uint16_t port_id) {
  rte_eth_dev_info info{};
  if (rte_eth_dev_info_get(port_id, &info) != 0) return nullptr;
  return info.device;
}

/// DMA-maps (or unmaps) one chunk for a port's device. ENOTSUP (vdevs) is success.
bool dma(bool map, uint16_t port_id, uintptr_t base, size_t len) {
  if (rte_eal_iova_mode() != RTE_IOVA_VA) {
    GREX_DEBUG("dpdk", "IOVA as PA: external memory at %#lx not DMA-mapped", static_cast<unsigned long>(base));
    return true;
  }
  rte_device* dev = port_device(port_id);
  if (dev == nullptr) return false;
  void* addr = reinterpret_cast<void*>(base);
  const int rc = map ? rte_dev_dma_map(dev, addr, base, len) : rte_dev_dma_unmap(dev, addr, base, len);
  if (rc == 0 || rte_errno == ENOTSUP) return true;
  GREX_DEBUG("dpdk", "rte_dev_dma_%smap(port %u, %#lx, %zu): %s", map ? "" : "un", port_id,
             static_cast<unsigned long>(base), len, rte_strerror(rte_errno));
  return false;
}

/// Our chunks overlapping [lo, hi), in address order. Caller holds g_mu.
std::vector<std::map<uintptr_t, Chunk>::iterator> overlapping(uintptr_t lo, uintptr_t hi) {
  std::vector<std::map<uintptr_t, Chunk>::iterator> out;
  auto it = g_chunks.upper_bound(lo);
  if (it != g_chunks.begin()) --it;
  for (; it != g_chunks.end() && it->first < hi; ++it) {
    if (it->first + it->second.len > lo) out.push_back(it);
  }
  return out;
}

/// Drops one reference of `port_id` on each chunk; frees chunks that reach 0. Caller holds g_mu.
void release(const std::vector<std::map<uintptr_t, Chunk>::iterator>& chunks, uint16_t port_id) {
  for (auto it : chunks) {
    Chunk& c = it->second;
    auto pr = c.port_refs.find(port_id);
    if (pr != c.port_refs.end() && --pr->second == 0) {
      dma(false, port_id, it->first, c.len);
      c.port_refs.erase(pr);
    }
    if (c.refs > 0 && --c.refs == 0) {
      if (rte_extmem_unregister(reinterpret_cast<void*>(it->first), c.len) != 0)
        GREX_WARN("dpdk", "rte_extmem_unregister(%#lx, %zu): %s", static_cast<unsigned long>(it->first), c.len,
                  rte_strerror(rte_errno));
      g_chunks.erase(it);
    }
  }
}

void page_range(void* addr, size_t len, uintptr_t* lo, uintptr_t* hi) {
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto a = reinterpret_cast<uintptr_t>(addr);
  *lo = a / page * page;
  *hi = (a + len + page - 1) / page * page;
}

/// Registers with EAL every part of [lo, hi) no memseg list covers yet, as
/// new chunks (bases appended to *created). On failure nothing new stays
/// registered. Caller holds g_mu.
Result<void> register_gaps(uintptr_t lo, uintptr_t hi, std::vector<uintptr_t>* created) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  for (const Range& gap : uncovered(lo, hi)) {
    const size_t n = gap.hi - gap.lo;
    if (rte_extmem_register(reinterpret_cast<void*>(gap.lo), n, nullptr, 0, page) != 0) {
      const int err = rte_errno;
      if (err == EEXIST) continue;  // registered meanwhile by someone else: covered
      for (uintptr_t b : *created) {
        rte_extmem_unregister(reinterpret_cast<void*>(b), g_chunks[b].len);
        g_chunks.erase(b);
      }
      created->clear();
      return Error(err == ENOMEM || err == ENOSPC ? Errc::kNoMemory : Errc::kSystem,
                   "rte_extmem_register(" + std::to_string(n) + " bytes) failed: " + rte_strerror(err))
          .device("dpdk")
          .hint("EAL has 128 memseg lists: register few large regions rather than many small ones");
    }
    g_chunks[gap.lo].len = n;
    created->push_back(gap.lo);
  }
  return ok();
}

}  // namespace

Result<void> register_external(void* addr, size_t len, uint16_t port_id) {
  if (!eal_initialized())
    return Error(Errc::kInvalidArgument, "registering external memory before EAL is up")
        .device("dpdk")
        .hint("open a Port (or call eal_init) first");
  if (addr == nullptr || len == 0)
    return Error(Errc::kInvalidArgument, "registering an empty range").device("dpdk");
  uintptr_t lo = 0, hi = 0;
  page_range(addr, len, &lo, &hi);

  std::lock_guard<std::mutex> lock(g_mu);
  std::vector<uintptr_t> created;
  GREX_TRY(register_gaps(lo, hi, &created));

  const auto chunks = overlapping(lo, hi);
  std::vector<std::map<uintptr_t, Chunk>::iterator> done;
  for (auto it : chunks) {
    Chunk& c = it->second;
    if (c.port_refs[port_id] == 0 && !dma(true, port_id, it->first, c.len)) {
      const int err = rte_errno;
      const size_t failed_len = c.len;
      c.port_refs.erase(port_id);
      release(done, port_id);
      for (uintptr_t b : created) {  // new chunks that got no reference yet
        auto left = g_chunks.find(b);
        if (left == g_chunks.end() || left->second.refs != 0) continue;
        rte_extmem_unregister(reinterpret_cast<void*>(b), left->second.len);
        g_chunks.erase(left);
      }
      return Error(Errc::kSystem, "rte_dev_dma_map(port " + std::to_string(port_id) + ", " +
                                      std::to_string(failed_len) + " bytes) failed: " + rte_strerror(err))
          .device("dpdk")
          .hint("the device needs IOVA as VA (vfio) to DMA from user memory");
    }
    ++c.port_refs[port_id];
    ++c.refs;
    done.push_back(it);
  }
  GREX_DEBUG("dpdk", "registered %zu bytes at %p for port %u (%zu new chunks, %zu referenced)", len, addr, port_id,
             created.size(), chunks.size());
  return ok();
}

void unregister_external(void* addr, size_t len, uint16_t port_id) {
  if (addr == nullptr || len == 0) return;
  uintptr_t lo = 0, hi = 0;
  page_range(addr, len, &lo, &hi);
  std::lock_guard<std::mutex> lock(g_mu);
  release(overlapping(lo, hi), port_id);
}

rte_mbuf_ext_shared_info* new_ext_shinfo() {
  auto* s = new rte_mbuf_ext_shared_info{};
  s->free_cb = ext_free_noop;
  s->fcb_opaque = nullptr;
  rte_mbuf_ext_refcnt_set(s, kShinfoRefcntArm);
  return s;
}

void delete_ext_shinfo(rte_mbuf_ext_shared_info* shinfo) { delete shinfo; }

rte_mbuf* attach_payload(rte_mempool* pool, void* data, uint16_t len, rte_mbuf_ext_shared_info* shinfo) {
  rte_mbuf* m = rte_pktmbuf_alloc(pool);
  if (m == nullptr) return nullptr;
  if (rte_mbuf_ext_refcnt_read(shinfo) < kShinfoRefcntLow) rte_mbuf_ext_refcnt_set(shinfo, kShinfoRefcntArm);
  // IOVA as VA: the address is the IOVA. As PA, user memory has no
  // contiguous physical range a device could use (and looking one page up
  // costs a pagemap read per packet): mark it bad; software PMDs ignore it.
  const rte_iova_t iova =
      rte_eal_iova_mode() == RTE_IOVA_VA ? static_cast<rte_iova_t>(reinterpret_cast<uintptr_t>(data)) : RTE_BAD_IOVA;
  rte_pktmbuf_attach_extbuf(m, data, iova, len, shinfo);
  m->data_len = len;
  m->pkt_len = len;
  return m;
}

rte_mbuf* build_packet(rte_mempool* pool, const void* hdr, uint16_t hdr_len, void* payload, uint16_t len,
                       rte_mbuf_ext_shared_info* shinfo, bool multi_seg) {
  rte_mbuf* h = rte_pktmbuf_alloc(pool);
  if (h == nullptr) return nullptr;
  char* dst = rte_pktmbuf_append(h, hdr_len);
  if (dst == nullptr) {
    rte_pktmbuf_free(h);
    return nullptr;
  }
  std::memcpy(dst, hdr, hdr_len);
  if (len == 0) return h;
  if (!multi_seg) {
    char* body = rte_pktmbuf_append(h, len);
    if (body == nullptr) {
      rte_pktmbuf_free(h);
      return nullptr;
    }
    std::memcpy(body, payload, len);
    return h;
  }
  rte_mbuf* p = attach_payload(pool, payload, len, shinfo);
  if (p == nullptr || rte_pktmbuf_chain(h, p) != 0) {
    rte_pktmbuf_free(h);
    if (p != nullptr) rte_pktmbuf_free(p);
    return nullptr;
  }
  return h;
}

Result<std::unique_ptr<ExternalRegion>> ExternalRegion::create(void* addr, size_t len, uint16_t port_id) {
  GREX_TRY(register_external(addr, len, port_id));
  return std::unique_ptr<ExternalRegion>(new ExternalRegion(addr, len, port_id, new_ext_shinfo()));
}

ExternalRegion::~ExternalRegion() {
  unregister_external(addr_, len_, port_);
  delete_ext_shinfo(shinfo_);
}

bool ExternalRegion::contains(const void* p, size_t n) const noexcept {
  const auto a = reinterpret_cast<uintptr_t>(p);
  const auto base = reinterpret_cast<uintptr_t>(addr_);
  return a >= base && n <= len_ && a - base <= len_ - n;
}

}  // namespace grex::dpdk
