// SPDX-License-Identifier: Apache-2.0
// The shared area of the flat and staged algorithms: where every member of a
// group is on this host and the device gives load/store access to peers'
// memory (shm), each member owns one area that every other member maps once,
// at setup. The flat slots (flat_allreduce.cc) come first, the staged
// algorithm's flags and slots (staged_allreduce.cc) after them.
#pragma once

#include <grex/bootstrap.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "collectives/algorithm.h"
#include "collectives/context.h"
#include "collectives/group.h"

namespace grex::detail {

struct SharedArea {
  MemoryRegion* region = nullptr;  // this member's area (device-allocated)
  std::vector<int> members;        // the group it serves, as communicator ranks
  std::vector<uint8_t*> bases;     // [member]: each member's area as mapped here
  size_t flat_stride = 0;          // bytes per flat slot (two slots, by call parity)
  size_t flat_max = 0;             // largest flat vector; 0: no flat slots
  uint64_t flat_seq = 0;           // flat calls so far
  bool staged_on = false;
  size_t stage_off = 0;    // where the staging part starts in each area
  uint64_t stage_seq = 0;  // staged blocks so far (every member counts alike)

  bool serves(const Group& g) const noexcept { return std::ranges::equal(members, g.members()); }
};

/// Sets up `g`'s shared area where it can be (every member must call it
/// alike: it exchanges records through `bs` under `key`); leaves *out null
/// where it cannot (members on several hosts, no load/store access, the
/// allocation or a mapping failed on some member). With
/// `every_rank_exchanges`, every rank of the communicator calls it, each for
/// its own group (a host's ranks), and a group that cannot have an area
/// (one member) still takes part in the exchanges.
Result<void> setup_shared_area(Context& c, const Group& g, bool all_local, Bootstrap& bs, const std::string& key,
                               std::unique_ptr<SharedArea>* out, bool every_rank_exchanges = false);

// The staged algorithm's part of the area, for a group of n.
size_t staged_flags_bytes(int n) noexcept;
size_t staged_slot_bytes(int n) noexcept;
size_t staged_area_bytes(int n) noexcept;
/// Same decision on every member: it depends on the size, the options and
/// whether any member runs in place (from the descriptors every member has).
bool staged_fits(const Context& c, const Group& g, size_t bytes, bool any_in_place) noexcept;
/// Direct's division of the work with user memory copied through the slots.
Result<void> staged_allreduce(Context& c, const Group& g, const CollArgs& a);
/// Whether staged_allreduce_segments() serves `g` for a vector of `bytes`
/// (the same answer on every member).
bool staged_segments_fit(const Context& c, const Group& g, size_t bytes) noexcept;
/// ring_allreduce_segments()'s contract through the slots, reduce-scatter,
/// `between`, allgather as three phases; member r reduces segment r.
Result<void> staged_allreduce_segments(Context& c, const Group& g, const CollArgs& a, std::span<const size_t> off,
                                       std::span<const size_t> cnt, int avg_divisor, const RingBetween& between);

/// Spins until the 64-bit sequence at the start of `line` (in member
/// `peer`'s area) equals `want` (or is at least `want`), letting the engine
/// notice a dead peer and yielding when ranks outnumber cores; kTimeout
/// names the peer.
Result<void> wait_line(const Context& c, const Group& g, int peer, uint8_t* line, uint64_t want, bool at_least,
                       const char* what);
/// The packed signature member `peer` published at `line` + 8 (beside the
/// sequence), if it differs from `sig`: kMismatch naming both calls.
std::optional<Error> published_mismatch(const Context& c, const Group& g, int peer, const uint8_t* line,
                                        uint64_t sig);

}  // namespace grex::detail
