// SPDX-License-Identifier: Apache-2.0
// The verbs driver's Device, Endpoint and MemoryRegion.
//
// Tagged messages take one of two paths (docs/verbs.md, "Eager and
// rendezvous"). Rendezvous, for receives larger than the eager size: the
// receive is advertised to the peer (a small SEND carrying address, rkey,
// length, tag and the receive's sequence); the sender matches its sends to
// adverts first-in first-out per tag and RDMA-WRITEs the bytes straight into
// the receive buffer, the last piece WITH IMMEDIATE (imm = receive sequence).
// Eager, for messages up to the eager size: the sender RDMA-WRITEs header and
// payload WITH IMMEDIATE into the next slot of a ring the receiver registered
// for it (address and size in the connection's private data), one message one
// way; the receiver matches it to its oldest receive with that tag and copies
// it out (or keeps the slot until that receive is posted). Slots come back as
// credits. Small receives are not advertised, so a ping-pong of small
// messages costs one packet each way, as ib_send_lat's SENDs do.
// Both sides agree which receive each message takes without a round trip:
// per tag, a receiver's pending receives are advertised ones, then silent
// ones; every advert and credit carries how many eager messages the receiver
// had taken when it was made, so the sender knows which adverts its eager
// messages in flight used up. A send that can go neither way asks for an
// advert (kWant), and the oldest silent receive of its tag is advertised.
// One-sided writes are RDMA WRITEs; with an immediate for the target they are
// followed by a small SEND {imm, length} (RC delivers it after the data).
//
// One protection domain and one completion queue per device; one RC queue
// pair per peer, connected through librdmacm; receive buffers for the small
// control SENDs per queue pair (or one shared receive queue).
#pragma once

#include <grex/transport.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "congestion/cc.h"
#include "congestion/nic_rate.h"
#include "core/counters.h"
#include "core/ring.h"
#include "drivers/verbs/verbs_wire.h"
#include "transport/pacer.h"
#include "transport/tag_fifo.h"

namespace grex::verbs {

/// Whether the device of `pd` takes dma-buf registrations (GPUDirect without
/// nvidia_peermem): NCCL's probe, a registration with no valid fd.
bool dmabuf_supported(ibv_pd* pd) noexcept;

class VerbsDevice;

/// Driver options, from DeviceOptions::params and GREX_IB_* (see verbs.h).
struct VerbsOptions {
  std::string dev;
  uint8_t port = 1;
  int gid_index = -1;  // -1: choose
  uint32_t ip = 0;     // host order; 0: from the GID
  uint8_t timeout = 14;
  uint8_t retry_cnt = 7;
  uint32_t max_inline = 64;
  uint32_t eager_bytes = 4096;  // largest message sent eagerly (0: never; both sides' smaller value counts)
  uint32_t eager_slots = 64;    // eager slots per peer (the receiver's ring)
  bool srq = false;
  const cc::Algorithm* cc = nullptr;  // congestion control per QP; nullptr: none (the NIC's own)
  uint64_t cc_target_us = 13;         // RTTCC's target (RTT of a zero-length RDMA WRITE)
  // Where the controller's rate is enforced: the NIC's per-QP rate limit
  // beside the software pacer where the device offers it for RC (kAuto),
  // required (kNic: opening fails where it is not offered), or never.
  enum class RateLimit { kAuto, kNic, kSoftware } rate_limit = RateLimit::kAuto;
  // What an advert's rkey opens to the peer (GREX_IB_CONFINE): a memory
  // window bound to the posted receive for that peer's queue pair only,
  // closed when the receive completes (kWindow; kAuto: where the device has
  // type 2 windows), a registration of the posted receive's bytes alone,
  // deregistered when it completes (kRegister: the device checks the range
  // where it does not check a window's, as Soft-RoCE; any queue pair of the
  // protection domain may use the key), or the whole registered region (kRegion).
  enum class Confine { kAuto, kWindow, kRegister, kRegion } confine = Confine::kAuto;
};

// wr_id: endpoint id (16 bits) | kind (4 bits) | value (44 bits).
enum Kind : uint64_t {
  kOpDone = 1,    ///< the last work request of a send or write; value: its send-queue sequence
  kSqMark = 2,    ///< a signalled control SEND; value: its send-queue sequence
  kRecvSlot = 3,  ///< a receive buffer; value: its slot
};
constexpr uint64_t kValueMask = (uint64_t{1} << 44) - 1;
inline uint64_t wr_id(uint16_t ep, Kind k, uint64_t v) {
  return (uint64_t{ep} << 48) | (uint64_t{k} << 44) | (v & kValueMask);
}
inline uint16_t wr_ep(uint64_t w) { return static_cast<uint16_t>(w >> 48); }
inline Kind wr_kind(uint64_t w) { return static_cast<Kind>((w >> 44) & 0xf); }
inline uint64_t wr_value(uint64_t w) { return w & kValueMask; }

constexpr int kBatch = 32;  // work requests per post list
// In ctrl_out_ only, never sent: invalidate the window whose rkey it carries.
constexpr uint8_t kCloseWindow = 0xf0;

class VerbsRegion final : public MemoryRegion {
 public:
  VerbsRegion(ibv_mr* mr, void* addr, size_t len, MemoryDomain domain);
  ~VerbsRegion() override;
  ibv_mr* mr() const noexcept { return mr_; }

 private:
  ibv_mr* mr_;
};

class VerbsEndpoint final : public Endpoint {
 public:
  VerbsEndpoint(VerbsDevice* dev, int peer, uint16_t id);
  ~VerbsEndpoint() override;

  PostResult post_send(std::span<const SendRequest> reqs) noexcept override;
  PostResult post_recv(std::span<const RecvRequest> reqs) noexcept override;
  PostResult post_write(std::span<const WriteRequest> reqs) noexcept override;
  bool peer_failed() const noexcept override { return failed_; }
  void announce_abort(int culprit) noexcept override;
  int peer_abort_culprit() const noexcept override { return abort_culprit_; }
  std::string describe_peer() const override;
  /// For tests and diagnostics: the oldest advert of `tag` from the peer that
  /// no send has taken yet (what the peer opened to us for it), and our queue pair.
  std::optional<RemoteRegion> advert_of(uint64_t tag) noexcept {
    const Advert* a = adverts_.front(tag);
    if (a == nullptr) return std::nullopt;
    return RemoteRegion{a->addr, a->len, a->rkey, 0};
  }
  ibv_qp* qp() const noexcept { return qp_; }
  struct CcStats {
    uint64_t probes_sent = 0, rtt_samples = 0, last_rtt_ns = 0, paced_waits = 0;
    double rate_bps = 0;
  };
  const CcStats& cc_stats() const noexcept { return cc_stats_; }
  const cc::NicRateLimit& nic_rate() const noexcept { return nic_rate_; }  // the NIC's limit on this QP

 private:
  friend class VerbsDevice;
  struct Advert {
    uint32_t seq = 0;
    uint64_t tag = 0, addr = 0, len = 0;
    uint32_t rkey = 0;
  };
  struct Recv {
    RecvRequest req;
    uint32_t seq = 0;
    bool used = false, done = false;
    bool advertised = false;  // the peer was told of it (and may write into it)
    uint32_t window = 0;      // the rkey of the window opened on it for the peer (0: none)
  };
  struct Ready {  // what goes to the peer for the send path, in order
    enum Kind : uint8_t { kWrite, kEager, kWant } kind = kWrite;
    SendRequest send;       // kWrite, kEager (kWant: its tag only)
    Advert advert;          // kWrite
    uint32_t slot = 0;      // kEager: the peer's slot
  };
  struct InFlightEager {  // an eager message that may yet use up one of the peer's adverts
    uint64_t tag = 0;
    uint32_t eseq = 0;    // its place among our eager messages
    bool resolved = false;
  };
  struct Unexpected {  // an eager message with no receive yet: its slot is kept
    uint32_t slot = 0;
    uint32_t len = 0;  // its length as checked when it arrived (the peer may rewrite the slot's header)
  };
  struct Op {  // a send or write posted to the NIC, awaiting its signalled completion
    uint64_t context = 0, bytes = 0, tag = 0;
    grex::Op op = grex::Op::kSend;
    Status status = Status::kSuccess;
    uint64_t sq_seq = 0;  // send-queue position of its last work request
  };

  Result<void> setup_qp(rdma_cm_id* id);
  void fail(Status why, const std::string& reason) noexcept;
  void progress() noexcept;  // posts what waits for send-queue room
  bool post_adverts() noexcept;
  bool match_sends() noexcept;
  struct PostList;
  // The eager path and the matching core (verbs_eager.cc).
  Result<EagerRing> offer_eager();
  Result<void> setup_eager(const EagerRing& peer);
  void take_send(const SendRequest& s) noexcept;
  void take_advert(const Ctrl& c) noexcept;
  void on_peer_credit(uint32_t eagers, uint32_t freed) noexcept;
  bool used_by_eager(uint64_t tag) noexcept;
  void queue_advert(uint32_t seq) noexcept;
  void queue_ctrl(const Ctrl& c) noexcept;
  bool post_pending_ctrls() noexcept;
  void on_eager(uint32_t slot, uint32_t byte_len) noexcept;
  void deliver_eager(uint32_t slot, uint32_t len, Recv& r) noexcept;
  void free_slot(uint32_t slot) noexcept;
  void credit_piggyback(EagerHeader& h) noexcept;
  bool append_eager(PostList& pl, const Ready& r) noexcept;
  bool eager_inline(uint64_t len) const noexcept { return sizeof(EagerHeader) + len <= max_inline_; }
  bool append_ctrl(PostList& pl, const Ctrl& c) noexcept;
  void want_advert(uint64_t tag) noexcept;
  bool eager_room() const noexcept {
    return tx_eagers_ - peer_freed_ < peer_ring_.slots && !eagers_out_.full() && ready_.size() + 2 < ready_.capacity();
  }
  void go_eager(const SendRequest& s) noexcept;
  void resume_eager() noexcept;
  bool post_writes() noexcept;
  uint32_t post_ctrls(const Ctrl* cs, uint32_t n) noexcept;
  // Memory windows (GREX_IB_CONFINE): one per receive slot, bound when its
  // receive is advertised, invalidated when it completes (verbs_datapath.cc).
  uint32_t open_window(Recv& r) noexcept;
  void close_window(Recv& r) noexcept;

  bool has_work() const noexcept {
    return !failed_ && (!ready_.empty() || !writes_.empty() || !ctrl_out_.empty() || credit_due());
  }
  bool credit_due() const noexcept { return rx_freed_ - freed_reported_ >= credit_batch_; }
  // Congestion control (GREX_CC): a token bucket at the controller's rate
  // gates posted bytes; RTT samples come from signalled zero-length RDMA
  // WRITEs (the responder's ACK is the echo), minus the time the bytes
  // posted ahead of the probe take at line rate.
  bool pace_allows(uint64_t now_ns) noexcept;
  double line_rate_bps() const noexcept;  // the port's, else 100 Gbit/s
  void paced(uint64_t bytes, uint64_t now_ns) noexcept;
  void set_nic_rate(double rate_bps, uint64_t now_ns) noexcept;
  bool append_probe(PostList& pl) noexcept;
  void on_probe_done(uint64_t now_ns) noexcept;
  bool algo_wants_probes() const noexcept { return pacer_.active() && pacer_.flow().algorithm().wants_rtt_probes; }
  Pacer pacer_;
  cc::ProbeScheduler probes_;
  CcStats cc_stats_;
  cc::NicRateLimit nic_rate_;
  uint64_t probe_sq_ = 0;        // send-queue position of the outstanding probe (0: none)
  uint64_t probe_post_ns_ = 0;
  uint64_t probe_ahead_bytes_ = 0;
  uint32_t probe_seq_ = 0;
  bool probe_due_ = false;
  uint64_t sq_bytes_ = 0;        // bytes posted whose completion has not been seen
  bool append(PostList& pl, const MemoryRegion* mr, uint64_t off, uint64_t len, uint64_t raddr, uint32_t rkey,
              bool with_imm, uint32_t imm, const Ctrl* then) noexcept;
  bool flush(PostList& pl) noexcept;
  uint32_t sq_room() const noexcept { return sq_depth_ - static_cast<uint32_t>(sq_posted_ - sq_done_); }
  void on_send_wc(const ibv_wc& wc) noexcept;
  void on_recv_wc(const ibv_wc& wc, const Ctrl* c) noexcept;
  void complete(const Completion& c) noexcept;
  void repost_recv(uint32_t slot) noexcept;

  VerbsDevice* dev_;
  uint16_t id_;
  rdma_cm_id* cm_ = nullptr;
  ibv_qp* qp_ = nullptr;
  bool failed_ = false;
  bool connected_ = false;
  bool disconnected_ = false;  // the CM reported a disconnect; failed after the CQ is drained
  int abort_culprit_ = -1;
  std::string peer_ip_;
  uint32_t path_mtu_ = 0;
  uint32_t sq_depth_ = 0, rq_depth_ = 0, max_inline_ = 0;
  Ctrl post_ctrls_[32];         // inline control messages of the post list being built
  std::vector<Ctrl> tx_slots_;  // control messages when the QP cannot send them inline
  ibv_mr* tx_mr_ = nullptr;
  uint64_t sq_posted_ = 0, sq_done_ = 0, unsignalled_ = 0, ops_unsignalled_ = 0;
  // receive side
  std::vector<Recv> recvs_;  // ring by sequence (power-of-two size)
  uint32_t recv_head_ = 0, recv_next_ = 0;
  TagFifo<uint32_t> pending_;       // receives not yet matched, per tag: advertised ones, then silent ones
  TagFifo<Unexpected> unexpected_;  // eager messages that arrived before their receive
  TagFifo<uint8_t> wants_;          // the peer asked for an advert of a receive not yet posted
  Ring<Ctrl> ctrl_out_;             // adverts and other control messages, in order, waiting for send-queue room
  // Memory windows (GREX_IB_CONFINE), per receive slot; empty: adverts carry the region's rkey.
  // With GREX_IB_CONFINE=register the slot holds a registration of the
  // receive's bytes instead (reg), made as the advert is queued and
  // deregistered as the receive completes.
  struct Window {
    ibv_mw* mw = nullptr;
    ibv_mr* reg = nullptr;
    ibv_mr* mr = nullptr;  // what its next bind binds into
    uint32_t key = 0;      // the rkey it was last given
    enum State : uint8_t { kIdle, kQueued, kBound } state = kIdle;  // kQueued: its advert waits in ctrl_out_
  };
  std::vector<Window> windows_;
  std::vector<Ctrl> rx_slots_;      // control-message receive buffers (per-QP receive queue)
  ibv_mr* rx_mr_ = nullptr;
  std::vector<uint8_t> rx_eager_;   // the eager ring the peer writes into
  ibv_mr* rx_eager_mr_ = nullptr;
  std::vector<uint8_t> rx_slot_free_;  // per slot: freed, not yet counted in rx_freed_
  uint32_t eager_payload_ = 0;         // this connection's eager size (both sides' smaller; 0: off)
  uint32_t rx_slots_n_ = 0, rx_eagers_ = 0, rx_next_slot_ = 0, rx_freed_ = 0, freed_reported_ = 0;
  uint32_t credit_batch_ = UINT32_MAX;
  // send side
  TagFifo<SendRequest> sends_;   // posted, unmatched, per tag
  TagFifo<Advert> adverts_;      // from the peer, unmatched, per tag
  Ring<Ready> ready_;            // matched or eager, in order, waiting for the send queue
  Ring<InFlightEager> eagers_out_;  // eager messages whose use of an advert is not known yet
  Ring<uint64_t> credit_waiters_;   // tags whose first waiting send is small and waits for a free slot
  Ring<WriteRequest> writes_;    // posted, not yet on the send queue
  Ring<Op> ops_;                 // on the send queue, in order
  std::vector<EagerHeader> tx_eager_hdr_;  // per peer slot, for headers not sent inline
  ibv_mr* tx_eager_mr_ = nullptr;
  EagerRing my_ring_, peer_ring_;
  uint32_t tx_eagers_ = 0, peer_freed_ = 0;
};

// Work requests gathered for one ibv_post_send. Control messages sent inline
// live here until the post (the NIC copies them then).
struct VerbsEndpoint::PostList {
  ibv_send_wr wrs[kBatch];  // filled as appended: nothing to zero up front
  ibv_sge sges[2 * kBatch];  // two for each work request (an eager message's header and payload)
  Ctrl* ctrls;              // the endpoint's inline control storage
  uint32_t n = 0;
  // Sends whose bytes the post itself copies (inline eager messages): their
  // buffers are free once the post succeeds, so they complete then, without
  // waiting a round trip for the NIC's acknowledgement.
  struct Early {  // no initializers: nothing to clear per post list
    uint64_t context, bytes, tag;
  };
  Early early[kBatch];
  uint32_t n_early = 0;
};

class VerbsDevice final : public Device {
 public:
  explicit VerbsDevice(const DeviceOptions& opts);
  ~VerbsDevice() override;
  Result<void> init();

  const Capabilities& capabilities() const noexcept override { return caps_; }
  Result<std::string> local_address() override;
  Result<std::unique_ptr<Endpoint>> connect(int peer, std::string_view peer_address) override;
  size_t poll(std::span<Completion> out) noexcept override;
  bool wait(uint64_t timeout_ns) noexcept override;
  std::vector<std::pair<std::string, uint64_t>> counters() const override;

  // Used by endpoints.
  int rank() const noexcept { return opts_.rank; }
  const VerbsOptions& vopts() const noexcept { return vo_; }
  const DeviceOptions& opts() const noexcept { return opts_; }
  ibv_pd* pd() const noexcept { return pd_; }
  ibv_cq* cq() const noexcept { return cq_; }
  ibv_srq* srq() const noexcept { return srq_; }
  void push_completion(const Completion& c) noexcept;
  void forget(VerbsEndpoint* ep) noexcept;
  std::string name() const { return caps_.device_name; }
  /// Registers `len` bytes of a dma-buf (e.g. GPU memory CUDA exported with
  /// cuMemGetHandleForAddressRange) that the process sees at `va`, through
  /// ibv_reg_dmabuf_mr. kNotSupported when the probe found no dma-buf support.
  /// GPU memory: dma-buf, else nvidia_peermem (lib/gpu/gpu_registration.h).
  Result<std::unique_ptr<MemoryRegion>> register_gpu(void* addr, size_t length);
  Result<std::unique_ptr<MemoryRegion>> register_dmabuf(int fd, uint64_t offset, size_t len, void* va,
                                                        MemoryDomain domain);
  bool dmabuf_supported() const noexcept { return dmabuf_; }
  /// Whether adverts open memory windows on the posted receives (GREX_IB_CONFINE).
  bool windows() const noexcept { return windows_; }
  /// Whether adverts carry a registration of the posted receive alone (GREX_IB_CONFINE=register).
  bool registers() const noexcept { return registers_; }
  /// What registered memory grants: remote writes, and window binds where windows are on.
  int region_access() const noexcept;
  /// The NIC's per-QP rate limits for RC queue pairs (max_kbps 0: not offered).
  cc::NicRateLimit::Range rc_rate_limits() const noexcept;

  struct Stats {
    Counter wr_posted, wc_polled, sends, recvs, writes, remote_writes, bytes_sent, bytes_received, adverts,
        inline_sends, wc_errors, async_events, cm_events, cq_events, gpu_dmabuf_regs, gpu_peermem_regs, eager_sends,
        eager_recvs, unexpected, wants, credits, rejected_requests;
  };
  Stats stats;

 protected:
  Result<std::unique_ptr<MemoryRegion>> do_register(void* addr, size_t length, MemoryDomain domain) override;

 private:
  friend class VerbsEndpoint;
  Result<void> parse_options();
  Result<void> choose_windows();
  Result<void> pick_device();
  Result<void> pick_address();
  Result<rdma_cm_event*> wait_event(rdma_cm_id* id, int64_t deadline_ms, bool want_request, int peer);
  void handle_stray(rdma_cm_event* ev) noexcept;
  void poll_events() noexcept;
  VerbsEndpoint* by_qp(uint32_t qp_num) const noexcept;

  DeviceOptions opts_;
  VerbsOptions vo_;
  Capabilities caps_;
  ibv_context** devices_ = nullptr;  // rdma_get_devices()
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_comp_channel* channel_ = nullptr;  // completion events for wait()
  bool armed_ = false;                  // ibv_req_notify_cq is pending on cq_
  ibv_cq* cq_ = nullptr;
  ibv_srq* srq_ = nullptr;
  rdma_event_channel* ec_ = nullptr;
  rdma_cm_id* listener_ = nullptr;
  uint16_t listen_port_ = 0;
  ibv_port_attr port_attr_{};
  ibv_device_attr dev_attr_{};
  ibv_packet_pacing_caps pacing_caps_{};  // from ibv_query_device_ex (zero where not offered)
  bool dmabuf_ = false;
  bool windows_ = false;
  bool registers_ = false;
  std::vector<VerbsEndpoint*> eps_;                   // by endpoint id (never reused)
  std::unordered_map<uint32_t, VerbsEndpoint*> qps_;  // qp_num -> endpoint
  std::vector<std::pair<int, rdma_cm_event*>> requests_;  // connect requests not yet claimed, by rank
  uint64_t hello_tag_ = 0;  // what this job's connect requests carry (init)
  /// The rank a connect request claims, if it carries this job's tag; else -1.
  int claimed_rank(const rdma_cm_event* ev) const noexcept;
  std::vector<Ctrl> srq_slots_;   // shared receive queue buffers (srq=1)
  ibv_mr* srq_mr_ = nullptr;
  Ring<Completion> done_;  // completions made outside a CQ entry
  uint64_t polls_ = 0, events_ns_ = 0;
};

}  // namespace grex::verbs
