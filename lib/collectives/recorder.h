// SPDX-License-Identifier: Apache-2.0
// The flight recorder (issue 30): each communicator keeps its last N calls
// (GREX_TRACE_ENTRIES, default 2000; 0 turns it off) in a ring: sequence
// number, operation, count, type, op, root or peer, start and end times,
// state and bytes posted. GREX_TRACE_DUMP=DIR writes every communicator's
// ring of this process as JSON to DIR/grex-trace.<rank>.<comm>.json when a
// call fails or times out, and on SIGUSR1.
//
// One thread writes (the one running the communicator's jobs: they hold the
// device one at a time); any thread may read. Each entry carries a version
// that is odd while it is written, so a reader copies an entry whole or
// skips it (a seqlock); its fields are relaxed atomics, plain moves on x86.
// Times are TSC ticks, turned into nanoseconds when the ring is written out.
//
// The cost budget is 1 % of an 8-byte allreduce over shared memory, about
// 2.6 ns, less than one TSC read (7.4 ns in a loop here). Two things keep it:
// - A call is written in two steps. start() only notes the call (a few
//   stores, inline); the entry is written by settle(), which the wait loops
//   call before their first look at the peers' data: this rank's part is
//   out by then, so it runs while the peers' data is on its way. (Written
//   in start(), before the data goes out, the entry cost 2.2 %, where the
//   note and settle() cost 1.0 %.) A call that never reaches a wait loop is
//   settled by end().
// - The clock is not read for every call: a reading per call cost 2.5-4 %
//   of the allreduce, one per 16 calls as little as none (bench/
//   recorder_inproc, docs/benchmarks.md). An entry's start is either read
//   for it (exact: its tick count is odd) or the newest reading before it
//   (even): the call began no earlier, and no later than the next reading,
//   which readers find in the entries after it (or at its own end), so the
//   writer stores nothing more. settle() reads the clock for every call
//   while calls are spaced; in a burst (the readings' span over the calls
//   since under half of kWindowNs) for every 2nd, 4th, ... up to every
//   kMaxEvery-th call; once a span exceeds kWindowNs (a long call, the
//   application's time between two) for every call again. So a start is
//   exact, or known to within kWindowNs, except where the application's
//   time falls inside an interval: its calls (at most kMaxEvery - 1) get a
//   wide one, which the JSON shows (started_within_ns). Long waits read the
//   clock anyway (wait_ended()), and a published wait bounds the running
//   call's start (waiting()).
// end() stamps the end time where a long wait read the clock anyway
// (wait_ended()); a call that only waited briefly ends at its start (it
// lasted less than a wait loop's first clock check, tens of µs).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace grex::detail {

class Recorder {
 public:
  enum State : uint8_t { kRunning = 1, kDone = 2, kFailed = 3 };
  /// A ring of `entries` (at least 1).
  Recorder(size_t entries, int rank, std::string comm);
  ~Recorder();
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  /// A call begins: `what` must outlive the recorder (a string literal).
  /// A call still open (not ended) ends first, as done: it returned without
  /// a verdict. Notes the call only; settle() writes its entry.
  /// Nothing while paused (set_paused()).
  void start(const char* what, uint64_t coll, uint64_t count, int dtype, int op, int root, int peer,
             uint64_t posted_bytes) noexcept {
    constexpr auto r = std::memory_order_relaxed;
    if (open_) [[unlikely]]
      end(true, posted_bytes);
    if (paused_.load(r)) [[unlikely]]
      return;
    const uint64_t v = note_version_.load(r) + 1;  // odd: being written
    note_version_.store(v, r);
    std::atomic_thread_fence(std::memory_order_release);
    note_what_.store(what, r);
    note_coll_.store(coll, r);
    note_count_.store(count, r);
    note_args_.store(pack_args(dtype, op, root, peer), r);
    note_seq_.store(next_.load(r), r);
    note_version_.store(v + 1, std::memory_order_release);
    open_ = true;
    noted_ = true;
    start_bytes_ = posted_bytes;
  }
  /// Calls that start while paused are not recorded (from any thread; a
  /// call already started is recorded whole). Communicator::set_recording.
  void set_paused(bool paused) noexcept { paused_.store(paused, std::memory_order_relaxed); }
  /// The noted call gets its entry (the wait loops, as a call begins to
  /// wait; end(); waiting()). Nothing where it has one.
  void settle() noexcept {
    if (noted_) [[unlikely]]
      write_entry();
  }
  /// A long wait of the running call ended (its loop read the clock meanwhile):
  /// the call's end time is now, not its start.
  void wait_ended() noexcept;
  /// Clock readings taken so far (tests: most fast calls take none).
  uint64_t clock_reads() const noexcept { return clock_reads_; }
  /// Where the clock is read for every call (1) or for every n-th call (tests).
  uint32_t read_every() const noexcept { return every_; }
  static constexpr uint32_t kMaxEvery = 16;
  static constexpr uint64_t kWindowNs = 100'000;
  /// The open call ends.
  void end(bool ok, uint64_t posted_bytes) noexcept {
    if (!open_) return;
    settle();
    open_ = false;
    Entry* e = running_;
    constexpr auto r = std::memory_order_relaxed;
    // No new version: state goes last, and readers read it first (take()).
    e->t1.store(end_ticks_, r);  // 0: it ended about when it started
    e->bytes.store(posted_bytes - start_bytes_, r);
    e->state.store(ok ? kDone : kFailed, std::memory_order_release);
    end_ticks_ = 0;
  }
  /// The running call has waited `waited_ns` so far, for these ranks (at
  /// most 8 kept): the wait loops publish it now and then, for snapshot() and
  /// the job status. Its start is then known to within its interval's lo and
  /// the wait's start.
  void waiting(const std::vector<int>& peers, uint64_t waited_ns) noexcept;

  /// What this rank is doing, for the job status (status.h), from any thread.
  struct Snapshot {
    bool any = false;  // a call was recorded at all
    // The newest call, collective or point-to-point.
    const char* what = nullptr;
    uint64_t coll = 0;  // its collective number (0: point-to-point)
    uint64_t count = 0;
    int dtype = -1, op = -1, root = -1, peer = -1;
    uint8_t state = 0;
    double ms = 0;  // running: since it began; otherwise since it ended
    // The newest collective (coll > 0), which may be older than the newest call.
    const char* coll_what = nullptr;
    uint64_t coll_seq = 0;
    uint64_t colls_done = 0;  // collectives ended (coll_seq, less one while it runs)
    std::vector<int> waiting_on;  // the running call's, where it published them
  };
  Snapshot snapshot() const;

  /// TSC ticks to nanoseconds, measured over the recorder's life so far.
  double ns_per_tick() const noexcept;
  /// The ring as JSON, oldest first.
  std::string json() const;
  /// Writes json() to DIR/grex-trace.<rank>.<comm>.json; the path, or "" (with
  /// errno) where it could not.
  std::string dump(const std::string& dir) const;

  /// GREX_TRACE_DUMP, or "" where unset.
  static const std::string& dump_dir();
  /// Every live recorder of this process dumps (SIGUSR1's thread).
  static void dump_all();

 private:
  struct Entry {
    std::atomic<uint64_t> version{0};
    // t0: the start (odd: read for this call; even: the newest reading before it); t1: the end, if a long wait read it.
    std::atomic<uint64_t> seq{0}, coll{0}, count{0}, t0{0}, t1{0}, bytes{0};
    std::atomic<const char*> what{nullptr};
    std::atomic<uint64_t> args{~uint64_t{0}};  // pack_args(): unpacked by readers, not by the writer
    std::atomic<uint8_t> state{0};
  };
  /// An entry's fields, read whole (take()).
  struct Copy {
    uint64_t seq, coll, count, t0, t1, bytes;
    const char* what;
    int root, peer, dtype, op;
    uint8_t state;
  };
  /// Copies entry `i` (the i-th call) under its version: false while it is
  /// being written, or once it holds another call (a newer lap).
  bool take(uint64_t i, Copy* out) const noexcept;
  /// The noted call, where it is not in the ring yet (next_ was `upto`).
  bool take_note(uint64_t upto, Copy* out) const noexcept;
  std::unique_ptr<Entry[]> ring_;
  size_t n_;     // the calls kept (GREX_TRACE_ENTRIES)
  size_t mask_;  // the ring holds n_ rounded up to a power of two: call i is ring_[i & mask_]
  std::atomic<uint64_t> next_{0};  // entries written so far
  Entry* running_ = nullptr;  // the open call's entry, once settled
  uint64_t running_seq_ = 0;
  // The noted call, before its entry (start()): under its own version, for readers.
  std::atomic<uint64_t> note_version_{0};
  std::atomic<const char*> note_what_{nullptr};
  std::atomic<uint64_t> note_coll_{0}, note_count_{0}, note_args_{0};
  std::atomic<uint64_t> note_seq_{UINT64_MAX};  // the index its entry will get (next_ at start())
  std::atomic<bool> paused_{false};
  bool open_ = false;    // a call started and not ended
  bool noted_ = false;   // ... and its entry is not written yet
  uint64_t end_ticks_ = 0;  // wait_ended()'s stamp, for the open call
  /// dtype, op (8 bits each), root, peer (24 bits each; -1 as all ones).
  static uint64_t pack_args(int dtype, int op, int root, int peer) noexcept {
    return (uint64_t{static_cast<uint8_t>(dtype)}) | (uint64_t{static_cast<uint8_t>(op)} << 8) |
           ((static_cast<uint64_t>(static_cast<uint32_t>(root)) & 0xffffff) << 16) |
           ((static_cast<uint64_t>(static_cast<uint32_t>(peer)) & 0xffffff) << 40);
  }
  static void unpack_args(uint64_t a, int* dtype, int* op, int* root, int* peer) noexcept;
  /// settle()'s work: the noted call's entry, its start's interval opened
  /// at the newest reading (and read now, where one is due).
  void write_entry() noexcept;
  /// A clock reading for the calls since the last: adapts every_ to how far
  /// apart they were; t (odd) becomes stamp_.
  void read(uint64_t t) noexcept;
  uint64_t stamp_;             // the newest clock reading (odd): no later call starts before it
  uint32_t every_ = 1;         // read the clock for every every_-th call (1 .. kMaxEvery)
  uint32_t since_ = 0;         // calls since stamp_
  uint64_t window_ticks_ = 0;  // kWindowNs in ticks (0: not calibrated yet)
  uint64_t clock_reads_ = 0;
  static constexpr size_t kWaitPeers = 8;
  std::atomic<uint64_t> wait_seq_{UINT64_MAX};  // the entry waiting_ belongs to (UINT64_MAX: being written)
  std::atomic<uint32_t> wait_n_{0};
  std::atomic<uint64_t> wait_since_{0};  // when that entry's wait began (ticks)
  std::atomic<int32_t> wait_peers_[kWaitPeers] = {};
  uint64_t start_bytes_ = 0;
  int rank_;
  std::string comm_;
  uint64_t tsc0_, ns0_;  // for ticks -> ns at dump time
};

}  // namespace grex::detail
