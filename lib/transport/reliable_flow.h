// SPDX-License-Identifier: Apache-2.0
// The reliability engine for datagram drivers: one Flow per connection turns
// posted sends, receives and writes into packets, and packets back into
// completions, over a network that may drop, duplicate, reorder or corrupt.
//
// Protocol (see wire.h for the header):
//  - Every posted receive is advertised to the peer (a reliable kData with
//    kFlagAdvert; receives posted together share one packet, up to
//    Config::adverts_per_packet). The sender matches its sends to adverts
//    first-in first-out per tag, then sends the bytes straight into that receive: no unexpected
//    messages, no receiver-side buffering, no copy but the one into the
//    posted buffer. Writes name a registered region (rkey) and an offset.
//  - Selective repeat: per-flow PSNs; cumulative ACK + 64-bit SACK + a count
//    of everything received above the ACK (rx_above); NACK for the first hole
//    and a ranged NACK for every new gap as it appears (fast retransmit of all
//    holes, not one per round trip); duplicate-ACK fast retransmit; RTO with
//    exponential backoff.
//  - Two limits on the sender: `window` packets in flight (sent, not known
//    to have arrived: outstanding minus the peer's rx_above), and `span`, how
//    far PSNs may run ahead of the oldest unacknowledged one. span > window
//    lets a hole being repaired not stall the sender (as a SACK "pipe" in TCP
//    does), while the window bounds what sits in queues.
//    The receiver suppresses duplicates by PSN and places each payload at
//    (message, offset), so reassembly needs no ordering.
//  - Each kAck echoes the psn and send time of the newest data packet that
//    arrived since the previous ACK (or of one that arrived late, filling
//    the hole others waited above): an RTT sample per ACK, over whichever
//    path that packet took (the driver keeps per-path RTTs from them; the
//    RTO takes them too, so it covers the slowest sprayed path).
//  - Timing probes (kTimingReq/Resp) measure RTT minus the target's dwell
//    time; they double as keepalives while work is pending, and a peer silent
//    for give_up_ns fails every pending request with kPeerGone.
// Time comes in as arguments: no clock reads, so tests drive it by hand.
// Not thread-safe; no allocation after construction.
#pragma once

#include <grex/transport.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "congestion/cc.h"
#include "core/ring.h"
#include "transport/pacer.h"
#include "transport/tag_fifo.h"
#include "transport/wire.h"

namespace grex::reliable {

struct Config {
  uint32_t max_payload = 8192;           ///< payload bytes per kData packet
  uint32_t window = 1024;                ///< packets in flight: sent, not known to have arrived
  uint32_t span = 0;                     ///< PSN range ahead of the oldest unacked (power of two >= window;
                                         ///< 0: 4 x window). Both ends must agree.
  uint32_t queue_depth = 1024;           ///< posted sends, receives and writes, each
  uint64_t rto_initial_ns = 2'000'000;   ///< first retransmission timeout
  uint64_t rto_min_ns = 200'000;
  uint64_t rto_max_ns = 200'000'000;
  uint32_t dupack_threshold = 3;         ///< duplicate ACKs before a fast retransmit
  /// Reordering the flow tolerates (issue 31: packets sprayed over several
  /// paths arrive out of order): how many later packets may overtake one
  /// before it counts as lost. The receiver NACKs a hole only once the
  /// highest packet seen is more than this above it, the sender resends on
  /// SACK only packets that far below the highest SACKed one, and takes this
  /// many more duplicate ACKs before a fast retransmit. 0: an in-order link,
  /// where every gap is a loss at once (memif, one queue). Above 0 it is a
  /// floor: the receiver measures how far late packets were overtaken (by
  /// the driver's per-packet counter, `seq`, so a resend is not mistaken for
  /// a late original), tolerates that much more, and tells the sender in
  /// its ACKs, so paths of unequal delay cost no spurious resends.
  uint32_t reorder_packets = 0;
  /// The RTO also takes the RTTs the peer's ACKs echo (each path's, where
  /// data is sprayed and the probes see one), not only the timing probes'.
  /// Off on one path: behind a bottleneck queue the echoes raised the RTO,
  /// and slower repairs cost a memif incast 4-14 % of its goodput.
  bool rto_from_acks = false;
  uint32_t ack_every = 32;               ///< data packets between ACKs within one batch
  uint64_t keepalive_ns = 20'000'000;    ///< probe a silent peer while work is pending
  uint64_t give_up_ns = 10'000'000'000;  ///< declare a silent peer dead
  bool payload_crc = false;              ///< protect payloads with CRC32C too (headers and advert entries always are)
  /// Receives advertised in one packet at most (1: a packet each). Receives
  /// posted between two polls leave together: a receiver that reposts a
  /// burst of completed receives sends one packet back, not one per message.
  uint32_t adverts_per_packet = 32;
  /// Receiver-driven credits (issue 31, as EQDS and UEC's RCCC): this end
  /// grants its peer data packets, and its driver paces the grants of all
  /// its flows at its line rate (Flow::wants_credit, Flow::grant), so an
  /// incast arrives at the rate the receiver can take. A sender whose peer
  /// grants sends new data (not adverts, not resends) only within them.
  bool credits = false;
  uint32_t credit_initial = 16;  ///< data packets granted at the start, before any paced grant
  uint32_t credit_window = 64;   ///< data packets granted and not yet arrived, at most
  /// Congestion control: nullptr (or "none") sends as fast as the window
  /// allows; otherwise the controller's decision paces every data packet
  /// (a token bucket at its rate, plus its window when it sets one), and it
  /// hears of every data send, RTT sample, NACK and retransmission timeout.
  const cc::Algorithm* cc = nullptr;
  cc::Options cc_options;
  double line_rate_bps = 100e9;  ///< the port's rate: the controller's ceiling
  uint64_t pace_burst_ns = 10'000;  ///< tokens saved while idle, as time at the current rate
  /// What a pacer of this flow's starts from (the flow's, or a path's): the
  /// controller's path, and the burst the bucket always lets out (two packets).
  cc::PathInfo cc_path() const noexcept { return cc::PathInfo{line_rate_bps, max_payload}; }
  double pace_min_burst() const noexcept { return 2.0 * (max_payload + wire::kHeaderBytes); }
};

/// poll_tx() emits at most this many packets per call.
inline constexpr size_t kMaxTxPerPoll = 64;

/// A packet the flow wants on the wire: header plus a payload pointer into
/// registered memory `region` (zero-copy TX attaches it as an external
/// buffer), or, with region nullptr, into the flow's own memory (an advert's
/// packed receives), valid until the next poll_tx(): copy it before then.
struct TxPacket {
  wire::Header hdr;
  const uint8_t* payload = nullptr;
  const MemoryRegion* region = nullptr;
};

/// Where incoming writes land: the device's table of registered regions.
class RegionTable {
 public:
  virtual ~RegionTable() = default;
  /// Address of [offset, offset+len) in the region with `rkey`, or nullptr.
  virtual uint8_t* resolve(uint32_t rkey, uint64_t offset, uint64_t len) noexcept = 0;
};

struct FlowStats {
  uint64_t data_sent = 0, retransmits = 0, fast_retransmits = 0, timeouts = 0;
  /// Timeouts the hosts made: the lateness is explained by the two ends' gaps
  /// in reading their rings (the congestion controller forgets them).
  uint64_t spurious_timeouts = 0;
  uint64_t acks_sent = 0, acks_received = 0, nacks_sent = 0, nacks_received = 0;
  uint64_t duplicates = 0, out_of_window = 0, bad_placement = 0, rx_backpressure = 0;
  uint64_t bytes_sent = 0, bytes_received = 0;
  uint64_t rtt_samples = 0, last_rtt_ns = 0, min_rtt_ns = 0, probe_timeouts = 0, tail_probes = 0;
  /// The latest probe reply's queueing on the way back: its one-way delay
  /// above the smallest of the last one to two seconds. The controller is
  /// given the RTT less this.
  uint64_t rev_queue_ns = 0;
  uint64_t probes_sent = 0;
  uint64_t ack_rtt_samples = 0;  ///< RTTs from the send times the peer's ACKs echo
  /// Probe RTTs of which the hosts' gaps in reading their rings (computing,
  /// preempted) could account for half or more.
  uint64_t rtt_samples_stalled = 0;
  uint32_t reorder_tolerance = 0;  ///< packets a late one may be overtaken by now (receiver, measured)
  uint64_t paced_waits = 0;   ///< poll_tx calls where the pacer held data back
  double cc_rate_bps = 0;     ///< the controller's current rate (0: no congestion control)
  uint64_t credits_granted = 0;  ///< data packets this end granted its peer (Config::credits)
  uint64_t credit_waits = 0;     ///< poll_tx calls where new data waited for the peer's grants
};

class Flow {
 public:
  Flow(const Config& cfg, uint32_t local_flow, uint32_t remote_flow, int peer, RegionTable* regions);

  bool post_send(const SendRequest& r) noexcept;    ///< false: queue full
  bool post_recv(const RecvRequest& r) noexcept;    ///< false: queue full
  bool post_write(const WriteRequest& r) noexcept;  ///< false: queue full

  /// A decoded, validated packet whose header names this flow.
  /// `rx_gap_ns`: how long the caller had not read its receive ring before
  /// the read that brought this packet (a compute phase, a preemption). The
  /// packet may have waited that long here; the ACKs and probe replies tell
  /// the peer, whose congestion control must not read it as a queue.
  /// `ack_trusted` false: h's ACK fields are ignored (a data packet no tag
  /// vouched for, GREX_WIRE_AUTH=control); its data is placed as any other's.
  void on_packet(const wire::Header& h, const uint8_t* payload, uint64_t now_ns, uint64_t rx_gap_ns = 0,
                 bool ack_trusted = true) noexcept;
  /// Packets to transmit now (control first, then retransmissions, then new data).
  /// `timers` false skips what fires on time alone (the RTO, the tail probe,
  /// keepalives, the peer-gone deadline): a caller that has not yet read what
  /// arrived while it was away (a compute phase, a preemption) must not call
  /// a packet lost whose ACK waits in its own receive ring.
  size_t poll_tx(std::span<TxPacket> out, uint64_t now_ns, bool timers = true) noexcept;
  /// Finished requests.
  size_t poll_completions(std::span<Completion> out) noexcept;

  /// Credits (Config::credits): whether the peer may have data for us that a
  /// grant would release: it asked (its ACKs say it waits for grants),
  /// receives are posted and not complete, or data arrived in the last
  /// millisecond; and fewer than credit_window packets granted have not arrived.
  bool wants_credit(uint64_t now_ns) const noexcept;
  /// Grants the peer `packets` more data packets (an ACK carries the grant).
  void grant(uint32_t packets) noexcept;
  /// Data packets granted that have not arrived (in flight, or queued on the
  /// way), while the peer is sending (data arrived in the last millisecond);
  /// 0 otherwise: grants a peer left unused do not hold back other flows'.
  uint32_t credit_outstanding(uint64_t now_ns) const noexcept {
    return now_ns - data_rx_ns_ < 1'000'000 ? grant_limit_ - data_rcvd_ : 0;
  }

  /// Fails every pending request with `why` (peer gone, endpoint closed).
  void fail_all(Status why) noexcept;
  bool failed() const noexcept { return failed_; }
  /// Culprit rank the peer named in an abort (kClose with kFlagAbort), or -1.
  int peer_abort_culprit() const noexcept { return abort_culprit_; }
  /// Queues a kClose (with kFlagAbort and culprit when culprit >= 0).
  void close(int culprit) noexcept;
  const FlowStats& stats() const noexcept { return stats_; }
  /// Paces this flow at `d` instead of its controller's decision (rate 0:
  /// the controller's again): the dpdk driver's controllers per path
  /// (GREX_DPDK_PATH_CC) set their sum. Only where a controller runs.
  /// Its window then counts every packet the cumulative ACK has not
  /// covered, as the paths' windows do, not only those the peer lacks.
  void pace_at(const cc::Decision& d) noexcept { pacer_.set_decision(d); }
  uint32_t local_flow() const noexcept { return local_flow_; }

 private:
  enum class Kind : uint8_t { kSend, kWrite, kAdvert };
  struct TxMsg {  // an outbound message being segmented / awaiting ACKs
    Kind kind = Kind::kSend;
    bool done = false;
    uint16_t flags = 0;
    uint32_t msg_id = 0;
    const uint8_t* src = nullptr;
    const MemoryRegion* region = nullptr;
    uint64_t wire_len = 0;   // msg_len on the wire
    uint64_t send_len = 0;   // bytes actually sent (<= advertised buffer)
    uint64_t next = 0;       // next offset to segment
    uint64_t base_offset = 0;  // writes: remote offset of byte 0; adverts: ordinal
    uint64_t tag = 0;
    uint64_t context = 0;
    uint32_t pkts = 0, pkts_acked = 0;
    bool segmented = false;
    bool reported = false;  // its completion went out (messages may finish out of order)
    Status status = Status::kSuccess;
  };
  struct Slot {  // one packet in the send window
    bool used = false, acked = false;
    uint32_t msg = 0;      // index into txmsgs_
    uint64_t offset = 0;   // within the message
    uint32_t len = 0;
    uint64_t sent_ns = 0;
    uint32_t sends = 0;
    uint32_t msgs = 1;     // adverts: how many (consecutive in txmsgs_ from msg) the packet carries
  };
  struct RxRecv {  // a posted receive, indexed by its advert sequence
    RecvRequest req;
    bool used = false, done = false, reported = false;
    uint64_t expect = 0, got = 0, msg_len = 0;
    uint32_t base_psn = 0;  // the psn of the message's byte 0 (placement checks every packet against it)
    uint64_t tag = 0;
    Status status = Status::kSuccess;
  };
  struct RxWrite {  // an incoming write being reassembled
    uint32_t msg_id = 0;
    bool used = false;
    uint64_t got = 0, len = 0, offset = 0;
    uint32_t base_psn = 0;
    uint64_t tag = 0;
    uint16_t flags = 0;
    Status status = Status::kSuccess;  // the first placement error, reported once at the end
  };
  struct Advert {
    uint32_t seq = 0;
    uint64_t len = 0;
    uint64_t tag = 0;
    bool held = false;  // in the reorder buffer: arrived before an earlier advert
  };
  struct Ctrl {
    wire::Header hdr;
  };

  // tx side (reliable_tx.cc)
  void match_sends() noexcept;
  void take_send(const SendRequest& s) noexcept;
  void take_advert(const Advert& a) noexcept;
  bool next_data(TxPacket* p, uint64_t now_ns) noexcept;
  void fill_data(TxPacket* p, uint32_t psn, uint64_t now_ns) noexcept;
  void on_ack(const wire::Header& h, bool is_dup_candidate, uint64_t now_ns) noexcept;
  void on_nack(const wire::Header& h, uint64_t now_ns) noexcept;
  void ack_psn(uint32_t psn) noexcept;
  void retire_msgs() noexcept;
  void queue_retransmit(uint32_t psn) noexcept;
  uint64_t rto_ns() const noexcept;
  // rx side (reliable_rx.cc)
  void on_data(const wire::Header& h, const uint8_t* payload, uint64_t now_ns) noexcept;
  void on_advert(const wire::Header& h, const uint8_t* payload) noexcept;
  void place(const wire::Header& h, const uint8_t* payload) noexcept;
  void place_write(const wire::Header& h, const uint8_t* payload) noexcept;
  /// Whether a packet's (offset, length) is the one its psn must carry for a
  /// message of `len` bytes whose byte 0 went under `base` (set on the first).
  bool segment_fits(const wire::Header& h, uint64_t len, bool first, uint32_t* base) const noexcept;
  void on_timing(const wire::Header& h, uint64_t now_ns) noexcept;
  bool rx_seen(uint32_t psn) const noexcept;
  void rx_mark(uint32_t psn) noexcept;
  void push_ctrl(const wire::Header& h) noexcept;
  wire::Header make(wire::Type t) const noexcept;
  /// A header of type `t` carrying our ACK state (cumulative ACK, SACK, rx_above).
  wire::Header make_acking(wire::Type t) const noexcept;
  void push_ack() noexcept;  ///< queues an ACK and clears what made it due
  uint64_t sack_bits() const noexcept;
  bool pending_work() const noexcept;

  Config cfg_;
  uint32_t local_flow_, remote_flow_;
  int peer_;
  RegionTable* regions_;
  FlowStats stats_;
  bool failed_ = false;
  int abort_culprit_ = -1;

  // tx
  struct Matched {  // a send and the advert it takes, waiting for a message entry
    SendRequest send;
    Advert advert;
  };
  TagFifo<SendRequest> sends_;  // posted, unmatched, per tag
  TagFifo<Advert> adverts_;     // from the peer, unmatched, per tag in ordinal order
  Ring<Matched> matched_;       // matched in order, not yet in txmsgs_
  std::vector<Advert> early_;    // adverts that overtook an earlier one, by ordinal
  uint64_t advert_expected_ = 0; // next ordinal to admit
  uint64_t next_advert_ordinal_ = 0;
  std::vector<TxMsg> txmsgs_;  // ring
  uint32_t advert_pack_;       // cfg_.adverts_per_packet, within what a payload holds
  std::vector<uint8_t> advert_wire_;  // packed advert payloads of one poll_tx: kMaxTxPerPoll slices
  const TxPacket* tx_out_ = nullptr;  // poll_tx's output (a packet's index picks its slice)
  size_t tx_head_ = 0, tx_n_ = 0, tx_seg_ = 0;  // tx_seg_: first message not fully segmented (offset from head)
  size_t unreported_done_ = 0;                     // messages done, not yet moved to done_
  std::vector<Slot> win_;
  uint32_t span_;                   // cfg_.span, resolved
  uint32_t snd_una_ = 0, snd_nxt_ = 0;
  uint32_t peer_above_ = 0;         // the peer's rx_above for ack == snd_una_
  Ring<uint32_t> retx_;  // psns to retransmit
  uint32_t last_ack_ = 0, dupacks_ = 0;
  uint64_t rto_backoff_ = 1;
  double srtt_ns_ = 0, rttvar_ns_ = 0;  // RFC 6298 estimator, for the RTO
  bool rto_sampled_ = false;            // it has a sample (a probe's or an ACK's echo)
  void rto_sample(double rtt_ns) noexcept;
  uint64_t last_data_ns_ = 0;  // when new data last went out
  bool tlp_armed_ = false;     // a tail-loss probe is out; re-armed by ACK progress
  // The latest RTO, until an ACK covering its packet judges it (spurious
  // when the hosts' gaps in reading their rings account for the lateness).
  bool rto_open_ = false;
  uint32_t rto_psn_ = 0;
  uint64_t rto_sent_ns_ = 0, rto_was_ns_ = 0;
  void judge_timeout(const wire::Header& h, uint64_t now_ns) noexcept;
  uint32_t next_advert_seq_ = 0, next_write_id_ = 0;
  Ring<Completion> done_;  // completions not yet polled

  // rx
  std::vector<RxRecv> recvs_;
  uint32_t recv_head_ = 0, recv_next_ = 0;  // advert sequences: oldest unreported, next to post
  uint32_t recv_ready_ = 0;  // receives finished but not yet reported (skips the scan when 0)
  std::vector<RxWrite> rxwrites_;
  uint32_t rcv_nxt_ = 0;
  std::vector<uint64_t> rcv_bits_;  // received psns in [rcv_nxt_, rcv_nxt_ + span)
  uint32_t rcv_high_ = 0;           // one past the highest psn received (gap detection)
  uint32_t rx_above_ = 0;           // how many of them lie above rcv_nxt_ (out of order)
  uint32_t unacked_rx_ = 0;
  // Measured reordering (Config::reorder_packets): the highest packet
  // counter seen, the farthest a late packet was overtaken this period
  // (span_ data packets) and the tolerance it sets, which ACKs carry.
  uint64_t rx_seq_high_ = 0;
  uint32_t reorder_period_max_ = 0, reorder_period_n_ = 0, reorder_tolerance_ = 0;
  uint32_t peer_reorder_ = 0;  // the peer's tolerance, from its ACKs: ours as a sender
  // Credits, counted in data packets (adverts and resends aside): as a
  // receiver, what we granted, told the peer, and received; as a sender,
  // whether the peer grants, up to where, and what we sent.
  uint32_t grant_limit_ = 0, grant_told_ = 0, data_rcvd_ = 0;
  uint64_t data_rx_ns_ = 0;
  bool peer_grants_ = false, credit_blocked_ = false;
  bool credit_wanted_ = false, peer_wants_credit_ = false;  // asked for grants; the peer asked us
  uint64_t credit_asked_ns_ = 0;
  uint32_t credit_limit_ = 0, data_sent_n_ = 0;
  void on_grant(uint64_t field) noexcept;
  void measure_reordering(uint64_t seq) noexcept;
  uint32_t tx_reorder() const noexcept { return cfg_.reorder_packets == 0 ? 0 : std::max(cfg_.reorder_packets, peer_reorder_); }
  uint32_t echo_psn_ = 0;       // the newest data packet since the last ACK: its psn and
  uint64_t echo_ts_ = 0;        // the sender's send time (0: none to echo)
  uint64_t echo_rx_ns_ = 0;     // when it arrived (the ACK reports its wait since)
  uint64_t echo_gap_ns_ = 0;    // the longest receive gap over the data since the last ACK
  bool echo_late_ = false;      // the echo is a packet that filled the cumulative hole
  // Probe replies' one-way delays (our clock less the peer's: a constant
  // offset, and drift): the smallest of the current window and of the one before.
  int64_t owd_min_ = 0, owd_min_prev_ = 0;
  uint64_t owd_window_ns_ = 0;  // when the current window began (0: no sample yet)
  uint64_t reverse_queue(int64_t owd, uint64_t now_ns) noexcept;
  // A gap the peer reports, within what a live peer can have been away
  // (sums of gaps then cannot wrap).
  uint64_t peer_gap(uint64_t reported) const noexcept { return std::min(reported, cfg_.give_up_ns); }
  uint64_t rx_gap_ns_ = 0;      // the receive gap on_packet was given
  bool ack_due_ = false;
  uint32_t nacked_psn_ = UINT32_MAX;
  uint64_t nack_ns_ = 0;
  uint64_t last_rx_ns_ = 0;  // the peer's last packet, or when we began to wait on it
  bool waiting_ = false;     // pending work at the previous poll_tx
  Ring<Ctrl> ctrl_;  // control packets to send

  // Timing probes: cc::ProbeScheduler decides, per data send, when the next
  // one goes out (one outstanding, the next with the first send after a
  // reply, resent after its timeout); keepalives (psn 0) probe a quiet peer.
  cc::ProbeScheduler probes_;
  bool probe_due_ = false;
  uint64_t keepalive_sent_ns_ = 0;

  // congestion control and pacing
  bool pace_allows(uint64_t now_ns, bool resend = false) noexcept;
  void paced(uint32_t payload_len, uint64_t now_ns) noexcept;
  Pacer pacer_;
};

}  // namespace grex::reliable
