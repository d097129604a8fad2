// SPDX-License-Identifier: Apache-2.0
// What an algorithm sees of its communicator besides the group it runs on:
// the buffers, the options, the call being run (for errors that name it),
// and the shared area of the flat and staged algorithms where there is one.
#pragma once

#include <grex/communicator.h>

#include <cstdint>
#include <string>

#include "collectives/buffers.h"
#include "core/clock.h"

namespace grex::detail {

struct SharedArea;  // shared_area.h
struct Hierarchy;   // hierarchy.h

/// CommOptions::stage_sends, read once at creation (the data path compares no strings).
enum class Stage : uint8_t { kAuto, kAlways, kNever };

/// The collective being run, as every rank should see it (what,
/// "count"=N, dtype, op, root; -1 / nullptr for what it lacks). No
/// allocation: the text ("allreduce count=100 f32 sum") is built only when
/// an error needs it.
struct CallSig {
  const char* what = "";
  const char* count_name = nullptr;  // "count", "recvcount", "bytes"
  uint64_t count = 0;
  int dtype = -1;  // DataType, or -1
  int op = -1;     // ReduceOp, or -1
  int root = -1;
};
std::string describe(const CallSig& s);

/// A call's count (low 48 bits), dtype and op in one word, as the
/// shared-slot algorithms (flat, staged) publish it beside their data.
inline uint64_t pack_sig(uint64_t count, DataType type, ReduceOp op) noexcept {
  return (count & ((uint64_t{1} << 48) - 1)) | (uint64_t{static_cast<uint8_t>(type)} << 48) |
         (uint64_t{static_cast<uint8_t>(op)} << 56);
}

/// One call of an algorithm. Buffers are this rank's; `root` is a member
/// index of the group; `tag` is the call's tag base, of which algorithms
/// use bits 0..15 for steps and 16..19 for their phases (a composed
/// collective gives each of its phases a base of its own).
struct CollArgs {
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  uint64_t tag = 0;
};

struct Context {
  Device* device = nullptr;
  /// What the pairs of this context's groups can do: a level of a
  /// communicator across hosts has its part's (hierarchy.h); null: the device's.
  const Capabilities* caps = nullptr;
  /// The levels of a communicator across hosts, on the world's context only; else null.
  Hierarchy* hier = nullptr;
  Buffers* bufs = nullptr;
  const CommOptions* opts = nullptr;
  Stage stage = Stage::kAuto;
  SharedArea* area = nullptr;  // flat and staged slots (all ranks on one host), or nullptr
  int rank = 0;                // this rank in the communicator (errors name it)
  CallSig call;        // the collective being run (Communicator::Impl::begin sets it)
  uint64_t ncoll = 0;  // collectives begun so far (the call's number)

  const Capabilities& capabilities() const noexcept { return caps != nullptr ? *caps : device->capabilities(); }
  Deadline deadline() const noexcept { return Deadline::after_ms(opts->timeout_ms); }
  /// Whether sends from `mr` should be staged through shared memory (the
  /// backend serves allocate()d memory faster than arbitrary user memory).
  bool should_stage(const MemoryRegion* mr, size_t bytes) const noexcept {
    if (!capabilities().allocate_shared || stage == Stage::kNever) return false;
    if (stage == Stage::kAlways) return true;
    if (bytes < opts->stage_min_bytes) return false;
    return !bufs->owned(mr);  // peers read device-allocated memory in place
  }
  /// kMismatch naming both calls: what communicator rank `peer` said it called.
  Error mismatch(int peer, const CallSig& theirs) const;
};

/// kInvalidArgument for a bad call: "what: msg", from `rank`.
inline Error bad_arg(int rank, const char* what, std::string msg) {
  return Error(Errc::kInvalidArgument, std::string(what) + ": " + msg).rank(rank);
}

}  // namespace grex::detail
