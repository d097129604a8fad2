// SPDX-License-Identifier: Apache-2.0
// Engine: posts transport requests for the collectives and waits for them with
// deadlines, turning failed completions and dead peers into Errors.
#pragma once

#include <grex/result.h>
#include <grex/transport.h>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "core/clock.h"
#include "core/counters.h"

namespace grex::detail {

class Recorder;

/// Handle of one posted request.
using OpId = uint64_t;

class Engine {
 public:
  Engine(Device* dev, std::vector<std::unique_ptr<Endpoint>>* endpoints, int rank);

  /// Posts a send / receive; kOk unless the endpoint refuses (peer failed, bad args).
  Result<OpId> send(int peer, const MemoryRegion* mr, uint64_t offset, uint64_t length, uint64_t tag);
  Result<OpId> recv(int peer, const MemoryRegion* mr, uint64_t offset, uint64_t length, uint64_t tag);
  /// A receive that may stay posted across calls (point-to-point notices):
  /// it holds no timeout or dead-peer verdict (no wait names its peer), and
  /// a failed one just ends (its buffer is left as it was) instead of
  /// failing whatever polls. Its tracking slot is skipped while it is posted.
  Result<OpId> recv_background(int peer, const MemoryRegion* mr, uint64_t offset, uint64_t length, uint64_t tag);
  /// The same for a send (a deadline allreduce's result for a late rank,
  /// which may arrive calls later): check done() later; a failed one ends.
  Result<OpId> send_background(int peer, const MemoryRegion* mr, uint64_t offset, uint64_t length, uint64_t tag);
  /// Posts a one-sided read of the peer's `remote` (at remote_offset) into mr.
  Result<OpId> read(int peer, const MemoryRegion* mr, uint64_t offset, uint64_t length, const RemoteRegion& remote,
                    uint64_t remote_offset);
  /// Posts a one-sided write of mr's bytes into the peer's `remote`, without
  /// immediate (`cold`: WriteRequest::cold_destination).
  Result<OpId> write(int peer, const MemoryRegion* mr, uint64_t offset, uint64_t length, const RemoteRegion& remote,
                     uint64_t remote_offset, bool cold = false);

  /// Posts several sends (or receives) to one peer in one post call where
  /// the endpoint takes them all (a full queue takes a prefix; the rest
  /// follow after a poll). Each request's context is set here; ids[i] is
  /// reqs[i]'s handle.
  Result<void> send_batch(int peer, std::span<SendRequest> reqs, OpId* ids);
  Result<void> recv_batch(int peer, std::span<RecvRequest> reqs, OpId* ids);

  /// True once the request finished (successfully: errors surface from progress()).
  bool done(OpId id) const noexcept;
  /// Polls once. Returns an error for any failed request or dead peer.
  Result<void> progress();
  /// Polls once between calls (WorkQueue's background poll): no yields or
  /// naps, no peer checks; a failed request's error waits for the next progress().
  void poll_quietly();
  /// An error naming `peer` if it is gone or gave up, for waits outside the
  /// engine's requests (a peer's store into shared memory).
  Result<void> check_peer(int peer) const;
  /// Polls until `id` is done or the deadline passes.
  Result<void> wait(OpId id, const Deadline& deadline, const char* what);
  /// Polls until every id is done.
  Result<void> wait_all(std::span<const OpId> ids, const Deadline& deadline, const char* what);
  /// For wait loops of their own (begun at t0), called now and then:
  /// publishes the peers still awaited to the recorder (set_recorder) and,
  /// past GREX_WARN_AFTER_MS, warns once (per *warned) naming them. `peer`
  /// (a rank) where the loop waits on one peer outside the engine's
  /// requests (a line in shared memory); -1: the requests' peers.
  void warn_if_long(uint64_t t0, bool* warned, const char* what, int peer = -1);
  /// Where waits publish whom they wait for (null: nowhere).
  void set_recorder(Recorder* r) noexcept { recorder_ = r; }
  /// For wait loops of their own, before their first look: this rank's
  /// part is out, so the recorder writes the call's entry now, while the
  /// peers' data is on its way (recorder.h: off the critical path).
  void wait_begins() noexcept;
  /// A wait that ran long enough to read the clock has ended: the recorder
  /// takes it as the call's end time.
  void long_wait_ended() noexcept;
  /// Takes the long-wait warning instead of the engine's own line (the
  /// status service, which adds what the awaited ranks are doing): gets
  /// the wait's name, its length so far and the awaited ranks; returns
  /// false to have the engine log it after all.
  using LongWait = std::function<bool(const char* what, int64_t waited_ms, const std::vector<int>& peers)>;
  void set_long_wait(LongWait f) { long_wait_ = std::move(f); }
  /// Error for a wait that ran past its deadline: names the peers still awaited.
  Error timeout_error(const char* what) const;
  /// Oversubscribed hosts (more ranks than cores): after spinning a while, a
  /// waiting rank sleeps in short naps so the rank it waits for can run.
  void set_adaptive(bool on) noexcept { adaptive_ = on; }
  bool adaptive() const noexcept { return adaptive_; }
  /// Progress made outside the device (a peer's store seen in shared
  /// memory): resets the idle count that leads to yields and naps, as a
  /// completion does.
  void note_progress() noexcept { idle_polls_ = 0; }
  /// The timeout quoted in timeout errors.
  void set_timeout_ms(int64_t ms) noexcept { timeout_ms_ = ms; }
  /// A wait that lasts this long logs once whom it still waits for (0: never).
  void set_warn_after_ms(int64_t ms) noexcept { warn_after_ms_ = ms; }
  /// Bytes received by a finished receive.
  uint64_t bytes(OpId id) const noexcept;
  /// The endpoint to `peer` (null for this rank), for setup-time calls such as map().
  Endpoint* endpoint(int peer) const noexcept { return (*eps_)[static_cast<size_t>(peer)].get(); }
  /// Counters, read by any thread (Communicator::stats() while a collective runs).
  uint64_t posted_bytes() const noexcept { return posted_bytes_.get(); }
  /// The part of posted_bytes() sent to ranks of other hosts (set_remote()).
  uint64_t remote_bytes() const noexcept { return remote_bytes_.get(); }
  /// remote[p] != 0: rank p is on another host (setup only).
  void set_remote(std::vector<uint8_t> remote) { remote_ = std::move(remote); }
  bool is_remote(int peer) const noexcept {
    return peer >= 0 && static_cast<size_t>(peer) < remote_.size() && remote_[static_cast<size_t>(peer)] != 0;
  }
  uint64_t wait_ns() const noexcept { return wait_ns_.get(); }

 private:
  static constexpr size_t kTrack = 1u << 12;  // requests tracked at once (a ring this small stays in cache)
  struct Record {
    OpId id = 0;
    int32_t peer = -1;
    bool pending = false;
    bool is_recv = false;
    bool background = false;
    uint64_t bytes = 0;
  };
  Result<OpId> track(int peer, bool is_recv);
  template <class Req, class Post>
  Result<OpId> post(int peer, bool is_recv, Req req, Post post_fn);
  template <class Req, class Post>
  Result<void> post_batch(int peer, bool is_recv, std::span<Req> reqs, OpId* ids, Post post_fn);
  void untrack(OpId id) noexcept;
  /// Polls the device and settles the requests it completed; the first
  /// failure of a request someone waits for goes to *failed.
  size_t take_completions(std::optional<Error>* failed);
  void make_background(OpId id) noexcept;
  Error failure(const Completion& c) const;
  /// "rank 3" / "ranks 1, 3": the peers of requests still pending; *blame
  /// (if given): the one to name (a receive's peer first).
  std::string awaited(int* blame) const;
  /// The same peers as a list (`peer` alone where it is >= 0).
  std::vector<int> awaited_list(int peer) const;
  Error peer_error(int peer, const Endpoint* ep) const;
  Result<void> check_peers() const;

  Device* dev_;
  std::vector<std::unique_ptr<Endpoint>>* eps_;
  int rank_;
  OpId next_ = 1;
  std::vector<Record> recs_;
  std::array<Completion, 64> cq_buf_{};
  std::vector<uint32_t> pending_per_peer_;
  size_t pending_ = 0;
  void count_sent(int peer, uint64_t bytes) noexcept {
    posted_bytes_.add(bytes);
    if (!remote_.empty() && remote_[static_cast<size_t>(peer)] != 0) remote_bytes_.add(bytes);
  }
  Counter posted_bytes_;  // relaxed atomics: plain stores on x86
  Counter remote_bytes_;
  std::vector<uint8_t> remote_;
  Counter wait_ns_;
  int64_t timeout_ms_ = 0;
  int64_t warn_after_ms_ = 0;
  Recorder* recorder_ = nullptr;
  LongWait long_wait_;
  uint64_t published_ns_ = 0;  // when a wait last published its peers to the recorder
  std::optional<Error> deferred_;  // poll_quietly()'s failure, for the next progress()
  uint32_t idle_polls_ = 0;
  bool adaptive_ = false;
  static constexpr uint32_t kSpinPolls = 256;     // empty polls before yielding the CPU
  static constexpr uint32_t kAdaptiveSpinPolls = 8;  // the same with more ranks than cores: the
                                                     // rank we wait for is likely not running
  static constexpr uint32_t kYieldPolls = 2048;   // adaptive: empty polls before napping
  static constexpr long kMaxNapNs = 50'000;       // adaptive: longest nap
};

}  // namespace grex::detail
