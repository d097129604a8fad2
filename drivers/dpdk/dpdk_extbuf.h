// SPDX-License-Identifier: Apache-2.0
// Zero-copy TX of user memory: external-memory registration and mbufs attached to it.
//
// This header does not include DPDK headers (the rte types are forward-declared).
//
// Model: user memory is registered once per region (not per message) with
// EAL (rte_extmem_register) and mapped for the port's device
// (rte_dev_dma_map). A TX packet is then a header mbuf from a pool chained to
// an mbuf whose buffer is the user memory itself (rte_pktmbuf_attach_extbuf).
// The user memory outlives every mbuf attached to it: the reliability engine
// keeps it until the peer ACKs, which implies the NIC finished reading it, so
// the mbufs' free callback does nothing.
#pragma once

#include <grex/result.h>

#include <cstddef>
#include <cstdint>
#include <memory>

struct rte_mbuf;
struct rte_mempool;
struct rte_mbuf_ext_shared_info;

namespace grex::dpdk {

/// Registers [addr, addr+len) with EAL as external memory and DMA-maps it for
/// port `port_id`'s device. The registered range is page-aligned outward
/// (sysconf page size): the pages around the buffer are registered too.
/// Pages already known to EAL (DPDK's heap, or registered before, by this
/// function or by anyone else) are not registered again: overlapping and
/// repeated registrations are reference-counted per registered chunk, so
/// buffers that share a page work. Every call needs a matching
/// unregister_external() with the same arguments. rte_dev_dma_map is a no-op
/// on vdevs (ENOTSUP is fine); with IOVA as PA the mapping is skipped (user
/// memory is DMA-able only with IOVA as VA). Each new chunk uses one of EAL's
/// 128 memseg lists: register big regions, not single messages.
/// Errors: kInvalidArgument (EAL not up, null or empty range), kNoMemory or
/// kSystem (rte_extmem_register or rte_dev_dma_map failed; nothing is left
/// registered by this call).
Result<void> register_external(void* addr, size_t len, uint16_t port_id);

/// Drops the references register_external(addr, len, port_id) took; chunks
/// no longer referenced are DMA-unmapped and unregistered. No mbuf attached
/// to the range may still be in flight.
void unregister_external(void* addr, size_t len, uint16_t port_id);

/// A shared info block for one registered region, with a free callback that
/// does nothing and a refcount kept far from 0 (see attach_payload()).
/// Allocated with new; release with delete_ext_shinfo().
rte_mbuf_ext_shared_info* new_ext_shinfo();
void delete_ext_shinfo(rte_mbuf_ext_shared_info* shinfo);

/// Allocates an mbuf from `pool` and attaches [data, data+len) of a
/// registered region as its buffer (data_len = pkt_len = len). IOVA: the
/// address itself with IOVA as VA (eal_init's default), RTE_BAD_IOVA as PA
/// (fine for software PMDs, which copy by address). Many mbufs
/// may share `shinfo` at once. Returns nullptr if the pool is empty. Data path:
/// no logging, no locks.
rte_mbuf* attach_payload(rte_mempool* pool, void* data, uint16_t len, rte_mbuf_ext_shared_info* shinfo);

/// Builds one packet: a header mbuf from `pool` holding a copy of the
/// `hdr_len` header bytes, followed by the payload. With `multi_seg` (the
/// port offers RTE_ETH_TX_OFFLOAD_MULTI_SEGS) the payload is a second,
/// zero-copy segment attached to the user memory; without it the payload is
/// copied behind the header in the same mbuf (it must fit the mbuf's room).
/// A zero-length payload gives a header-only packet. Returns nullptr if the
/// pool is empty or the copy does not fit (nothing leaks).
rte_mbuf* build_packet(rte_mempool* pool, const void* hdr, uint16_t hdr_len, void* payload, uint16_t len,
                       rte_mbuf_ext_shared_info* shinfo, bool multi_seg);

/// RAII bundle of one registered region and its shared info.
class ExternalRegion {
 public:
  /// register_external() plus new_ext_shinfo().
  static Result<std::unique_ptr<ExternalRegion>> create(void* addr, size_t len, uint16_t port_id);
  /// unregister_external(); no mbuf attached to the region may be in flight.
  ~ExternalRegion();
  ExternalRegion(const ExternalRegion&) = delete;
  ExternalRegion& operator=(const ExternalRegion&) = delete;

  void* addr() const noexcept { return addr_; }
  size_t len() const noexcept { return len_; }
  rte_mbuf_ext_shared_info* shinfo() const noexcept { return shinfo_; }
  /// True if [p, p+n) lies inside the region.
  bool contains(const void* p, size_t n) const noexcept;

 private:
  ExternalRegion(void* addr, size_t len, uint16_t port, rte_mbuf_ext_shared_info* shinfo)
      : addr_(addr), len_(len), port_(port), shinfo_(shinfo) {}
  void* addr_;
  size_t len_;
  uint16_t port_;
  rte_mbuf_ext_shared_info* shinfo_;
};

}  // namespace grex::dpdk
