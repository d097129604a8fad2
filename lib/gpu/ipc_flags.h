// SPDX-License-Identifier: Apache-2.0
// The barrier words of the GPU-to-GPU collectives (collectives/gpu_ipc.cc):
// one page of POSIX shared memory that every rank of a host maps, one 32-bit
// slot per rank, 64 bytes apart, then the word that says a rank failed. Each rank's stream writes its own slot
// (cuStreamWriteValue32: the epoch of the barrier it reached, after every
// earlier copy and kernel of the call) and waits until every other slot
// reached that epoch (cuStreamWaitValue32, GEQ), so the phases of a call meet
// on the GPUs with no host thread in between. The host reads the slots to say
// which rank is behind, and writes them to let the streams drain after a
// failure. Epochs are compared cyclically, as the GEQ wait does.
//
// This file is plain host code (no CUDA): the creator draws a random name
// (128 bits) and creates the page with O_EXCL and mode 0600; the others open
// it by that name and refuse a page of another owner, mode or size.
#pragma once

#include <grex/result.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace grex::gpu {

class IpcFlags {
 public:
  static constexpr size_t kSlotBytes = 64;

  /// Creates the page for `ranks` slots under a fresh random name.
  static Result<IpcFlags> create(int ranks);
  /// Maps the page another rank created (name() of that rank's IpcFlags).
  static Result<IpcFlags> open(const std::string& name, int ranks);

  IpcFlags() = default;
  IpcFlags(IpcFlags&& o) noexcept;
  IpcFlags& operator=(IpcFlags&& o) noexcept;
  IpcFlags(const IpcFlags&) = delete;
  IpcFlags& operator=(const IpcFlags&) = delete;
  ~IpcFlags();

  /// Removes the name (the mappings stay): once every rank has opened it.
  void unlink() noexcept;
  bool mapped() const noexcept { return base_ != nullptr; }
  const std::string& name() const noexcept { return name_; }
  void* base() const noexcept { return base_; }
  size_t bytes() const noexcept { return bytes_; }
  int ranks() const noexcept { return ranks_; }
  static size_t offset(int rank) noexcept { return static_cast<size_t>(rank) * kSlotBytes; }

  uint32_t load(int rank) const noexcept;
  void store(int rank, uint32_t value) noexcept;
  /// Stores `value` into every slot: releases every stream waiting for an
  /// epoch cyclically at or below it (after a failure).
  void store_all(uint32_t value) noexcept;
  /// The word after the slots: the first rank that failed a call, so that
  /// every other rank fails that call too rather than complete it on data
  /// the released streams never exchanged. -1 while none did.
  void mark_broken(int by) noexcept;
  int broken_by() const noexcept;

  /// Whether a slot holding `slot` passes a wait for `epoch` (cyclic GEQ).
  static bool reached(uint32_t slot, uint32_t epoch) noexcept {
    return static_cast<int32_t>(slot - epoch) >= 0;
  }
  /// The ranks whose slot has not reached `epoch`.
  std::vector<int> behind(uint32_t epoch) const;
  /// Every slot, for a snapshot ("rank 0 at 12, rank 1 at 11").
  std::vector<uint32_t> snapshot() const;

 private:
  IpcFlags(std::string name, void* base, size_t bytes, int ranks, bool owner)
      : name_(std::move(name)), base_(base), bytes_(bytes), ranks_(ranks), owner_(owner) {}
  static size_t page_bytes(int ranks) noexcept;

  std::string name_;
  void* base_ = nullptr;
  size_t bytes_ = 0;
  int ranks_ = 0;
  bool owner_ = false;  // created it: unlinks the name if still there
};

}  // namespace grex::gpu
