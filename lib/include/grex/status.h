// SPDX-License-Identifier: Apache-2.0
/// @file status.h
/// The live status of a running job: what each rank of each communicator is
/// doing right now, asked through the job's store (grex-status, grex-run
/// --status). Each process answers from a thread of its own, so a rank
/// sleeping in its application, or spinning in a wait, answers as well; a
/// rank that does not answer is stopped, stuck with its threads frozen, or
/// gone.
///
/// The protocol, all under the store's "grex/status/" keys: a request adds
/// one to "grex/status/req" (its number g) and sets "grex/status/go/<g>";
/// every rank sets "grex/status/ans/<g>/<comm>/<rank>" to a line of JSON.
/// Communicators list themselves as "grex/status/comm/<i>" ("<size> <name>",
/// i from 1 to "grex/status/comms") when they are created.
#pragma once

#include <grex/bootstrap.h>
#include <grex/result.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace grex {

/// One rank's answer.
struct RankStatus {
  int rank = -1;
  bool answered = false;
  std::string host;
  int pid = 0;
  /// The newest call, collective or point-to-point ("" where there was none).
  std::string op;            ///< "allreduce", "send", ...
  std::string call;          ///< with its arguments: "allreduce count=2 f32 sum"
  uint64_t coll = 0;         ///< its collective number (0: point-to-point)
  bool running = false;      ///< the call is still going on
  bool failed = false;       ///< the call ended in an error
  int peer = -1;             ///< a point-to-point call's peer
  double ms = 0;             ///< running: how long so far; otherwise since it ended
  std::vector<int> waiting_on;  ///< ranks the running call waits for (where it has waited over 1 ms)
  uint64_t colls_done = 0;   ///< collectives this rank has finished
  std::string last_coll;     ///< the newest collective's operation
  uint64_t last_coll_seq = 0;  ///< and its number
};

/// Every rank of one communicator, and what the answers show.
struct CommStatus {
  std::string comm;
  int size = 0;
  std::vector<RankStatus> ranks;  ///< [rank]
  /// Ranks that answered and are behind the furthest one: they finished
  /// fewer collectives, or are not yet in the collective it is in.
  std::vector<int> stragglers;
  std::vector<int> silent;  ///< ranks that did not answer in time
};

/// Parses one answer (a line of JSON); answered stays false where it is not one.
RankStatus parse_rank_status(std::string_view json, int rank);
/// Fills stragglers and silent from the ranks' answers.
void find_stragglers(CommStatus* c);

/// Asks every rank of every communicator listed on `store` and waits up to
/// timeout_ms for the answers. Errors: the store's; kNotFound when no
/// communicator is listed (the job has not created one, or runs an older grex).
Result<std::vector<CommStatus>> query_job_status(Store& store, int64_t timeout_ms);

/// One line per rank, then the stragglers and the silent ranks, per communicator.
std::string format_job_status(const std::vector<CommStatus>& comms);
/// The same as one JSON document.
std::string job_status_json(const std::vector<CommStatus>& comms);

}  // namespace grex
