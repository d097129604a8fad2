// SPDX-License-Identifier: Apache-2.0
// The status service (issue 30): one thread per process and store answers
// the job's status requests (grex/status.h) for every communicator of the
// process on that store, from their flight recorders, and asks the other
// ranks what they do when a wait lasts long (the warning) or times out (the
// error names the ranks behind and whether they are alive, absent from the
// collective or in another call).
//
// On grex's own store the thread keeps a connection of its own and blocks
// on the next request's key, so it costs nothing while nobody asks and
// answers at once; on a store it cannot reconnect to (torch's) it polls the
// request counter every GREX_STATUS_POLL_MS (250). GREX_STATUS=0 turns it off.
#pragma once

#include <grex/bootstrap.h>
#include <grex/status.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collectives/recorder.h"

namespace grex::detail {

/// A communicator's answer: one line of JSON from its recorder's snapshot.
std::string status_answer(const Recorder& rec, const std::string& comm, int rank, int size);

/// What `s` is doing, as a timeout or warning words it for a rank waiting
/// in collective `coll` ("alive, not in the collective: ...").
std::string describe_peer(const RankStatus& s, uint64_t coll);

class StatusService {
 public:
  /// The process's service for `bs`'s store, started where GREX_STATUS is
  /// not 0; null where it is. The communicator then answers as `rank` of `size`.
  static std::shared_ptr<StatusService> join(const std::shared_ptr<Bootstrap>& bs, const std::string& comm, int rank,
                                             int size, const Recorder* rec);
  ~StatusService();
  StatusService(const StatusService&) = delete;
  StatusService& operator=(const StatusService&) = delete;

  /// The communicator stops answering (before its recorder goes).
  void leave(const Recorder* rec);

  /// Asks `peers` (ranks of `comm`) and waits up to budget_ms (connecting
  /// included): [i] is peers[i]'s answer.
  std::vector<RankStatus> ask(const std::string& comm, const std::vector<int>& peers, int64_t budget_ms);
  /// The same without waiting: `done` runs on the service's thread once
  /// every answer is in or budget_ms passed. False where the request could
  /// not be made (then `done` never runs).
  bool ask_later(const std::string& comm, std::vector<int> peers, int64_t budget_ms,
                 std::function<void(std::vector<RankStatus>)> done);

  explicit StatusService(std::shared_ptr<Bootstrap> bs);  // join() makes them

  /// A communicator's place in its service: leaves on destruction (or
  /// reset()), so a communicator whose creation fails later leaves too.
  class Membership {
   public:
    Membership() = default;
    Membership(std::shared_ptr<StatusService> svc, const Recorder* rec) : svc_(std::move(svc)), rec_(rec) {}
    Membership(Membership&& o) noexcept : svc_(std::move(o.svc_)), rec_(o.rec_) {}
    Membership& operator=(Membership&& o) noexcept {
      reset();
      svc_ = std::move(o.svc_);
      rec_ = o.rec_;
      return *this;
    }
    ~Membership() { reset(); }
    void reset() {
      if (svc_) svc_->leave(rec_);
      svc_.reset();
    }
    StatusService* operator->() const noexcept { return svc_.get(); }
    explicit operator bool() const noexcept { return svc_ != nullptr; }

   private:
    std::shared_ptr<StatusService> svc_;
    const Recorder* rec_ = nullptr;
  };

 private:
  struct Member {
    std::string comm;
    int rank, size;
    const Recorder* rec;
    int64_t listed = 0;  // its number in grex/status/comm/ (rank 0 lists it)
  };
  struct Pending {
    std::string comm;
    std::vector<int> peers;
    uint64_t gen;
    uint64_t deadline_ns;
    std::function<void(std::vector<RankStatus>)> done;
  };
  void run();
  void answer(Store& st, uint64_t gen);
  /// Issues a request on the asking connection: its number. `before_go`
  /// gets the number before the request is announced.
  Result<uint64_t> request(int64_t connect_ms, const std::function<void(uint64_t)>& before_go = {});
  /// The answers of request `gen` that are in (check, then get), into out.
  void collect(Store& st, const std::string& comm, const std::vector<int>& peers, uint64_t gen,
               std::vector<RankStatus>* out);
  void settle(Store& st, bool all_due);
  /// Erases the answers to request `gen` from `peers` and from this process.
  void forget(Store& st, const std::string& comm, const std::vector<int>& peers, uint64_t gen);
  Store& asker(int64_t connect_ms);  // the asking connection (or the shared store), under ask_mu_

  std::shared_ptr<Bootstrap> bs_;  // kept while a communicator of it lives (they hold it too)
  std::mutex mu_;                  // members_, pending_, stop_
  std::condition_variable cv_;
  std::vector<Member> members_;
  std::deque<Pending> pending_;
  bool stop_ = false;
  std::mutex listen_mu_;                   // listen_ (interrupt() from leave())
  std::unique_ptr<TcpStore> listen_;       // the thread's own connection (blocking mode)
  std::mutex ask_mu_;
  std::unique_ptr<TcpStore> ask_conn_;     // ask()'s own connection, where one can be made
  bool ask_tried_ = false;
  int64_t poll_ms_ = 250;
  std::thread thread_;
};

}  // namespace grex::detail
