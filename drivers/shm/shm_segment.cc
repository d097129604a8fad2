// SPDX-License-Identifier: Apache-2.0
// Creating, opening and unmapping pair segments in /dev/shm.
#include "drivers/shm/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <thread>

#include "core/clock.h"

namespace grex::shm {

Segment::~Segment() {
  if (base_ != nullptr) ::munmap(base_, bytes_);
}

Segment& Segment::operator=(Segment&& o) noexcept {
  if (this != &o) {
    if (base_ != nullptr) ::munmap(base_, bytes_);
    base_ = o.base_;
    bytes_ = o.bytes_;
    slots_ = o.slots_;
    slot_bytes_ = o.slot_bytes_;
    name_ = std::move(o.name_);
    o.base_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

size_t Segment::bytes_for(uint32_t slots, uint32_t slot_bytes) noexcept {
  return sizeof(SegmentHeader) + 2 * sizeof(PinTable) + 2ull * slots * slot_bytes;
}

namespace {

// A segment must be this user's and no one else's: another local user who
// made it first (the name is not secret to processes that see the job's
// environment) could read or rewrite everything that passes through it.
Result<void> check_owner(int fd, const std::string& name) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Error::from_errno("fstat(" + name + ")", errno);
  if (st.st_uid != ::geteuid())
    return Error(Errc::kAuthFailed, "shared memory segment " + name + " belongs to uid " + std::to_string(st.st_uid) +
                                        ", not to this process's uid " + std::to_string(::geteuid()) + ": refused")
        .device("shm")
        .hint("another user created it first; remove /dev/shm" + name + " and check who else runs on this host");
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%03o", static_cast<unsigned>(st.st_mode & 0777));
    return Error(Errc::kAuthFailed, "shared memory segment " + name + " has mode " + mode +
                                        " (others may open it), grex makes them 0600: refused")
        .device("shm");
  }
  return ok();
}

}  // namespace

Result<Segment> Segment::create(const std::string& name, uint32_t slots, uint32_t slot_bytes) {
  if (!valid_geometry(slots, slot_bytes))
    return Error(Errc::kInvalidArgument, "shm segment of " + std::to_string(slots) + " slots of " +
                                             std::to_string(slot_bytes) + " bytes")
        .device("shm");
  size_t bytes = bytes_for(slots, slot_bytes);
  int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0 && errno == EEXIST) {
    // A leftover from a crashed job of this user with the same id: replace
    // it. One of another user's is refused, never replaced or used.
    if (int old = ::shm_open(name.c_str(), O_RDONLY, 0); old >= 0) {
      auto mine = check_owner(old, name);
      ::close(old);
      if (!mine) return std::move(mine).error();
    }
    ::shm_unlink(name.c_str());
    fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  }
  if (fd < 0) return Error::from_errno("shm_open(" + name + ")", errno).hint("is /dev/shm mounted and writable?");
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    int e = errno;
    ::close(fd);
    ::shm_unlink(name.c_str());
    return Error::from_errno("ftruncate(" + name + ", " + std::to_string(bytes) + ")", e)
        .hint("/dev/shm may be full; lower GREX_SHM_SLOTS");
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int e = errno;
  ::close(fd);
  if (p == MAP_FAILED) {
    ::shm_unlink(name.c_str());
    return Error::from_errno("mmap(" + name + ")", e);
  }
  Segment s;
  s.base_ = static_cast<uint8_t*>(p);
  s.bytes_ = bytes;
  s.slots_ = slots;
  s.slot_bytes_ = slot_bytes;
  s.name_ = name;
  auto* h = new (p) SegmentHeader();
  h->magic = kSegmentMagic;
  h->version = kSegmentVersion;
  h->slots = slots;
  h->slot_bytes = slot_bytes;
  h->attached.store(0, std::memory_order_relaxed);
  h->abort_culprit[0].store(0, std::memory_order_relaxed);
  h->abort_culprit[1].store(0, std::memory_order_relaxed);
  h->closed[0].store(0, std::memory_order_relaxed);
  h->closed[1].store(0, std::memory_order_relaxed);
  h->heap_fd[0] = h->heap_fd[1] = -1;
  for (int side = 0; side < 2; ++side)
    for (auto& pin : s.pins(side)->region) pin.store(0, std::memory_order_relaxed);
  for (int dir = 0; dir < 2; ++dir)
    for (uint32_t i = 0; i < slots; ++i) {
      auto* sl = new (s.slot(dir, i)) SlotHeader();
      sl->state.store(0, std::memory_order_relaxed);
    }
  h->ready.store(1, std::memory_order_release);
  return s;
}

Result<Segment> Segment::open(const std::string& name, int64_t timeout_ms) {
  Deadline deadline = Deadline::after_ms(timeout_ms);
  for (;;) {
    int fd = ::shm_open(name.c_str(), O_RDWR, 0600);
    if (fd >= 0) {
      if (auto mine = check_owner(fd, name); !mine) {
        ::close(fd);
        return std::move(mine).error();
      }
      struct stat st;
      if (::fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) >= sizeof(SegmentHeader)) {
        size_t bytes = static_cast<size_t>(st.st_size);
        void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        ::close(fd);
        if (p == MAP_FAILED) return Error::from_errno("mmap(" + name + ")", errno);
        Segment s;
        s.base_ = static_cast<uint8_t*>(p);
        s.bytes_ = bytes;
        s.name_ = name;
        auto* h = s.header();
        while (h->ready.load(std::memory_order_acquire) == 0) {
          if (deadline.expired()) return Error(Errc::kTimeout, "segment " + name + " never became ready");
          std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
        // Read the geometry once, check it against the mapping, keep it here.
        const uint32_t slots = h->slots, slot_bytes = h->slot_bytes;
        if (h->magic != kSegmentMagic || h->version != kSegmentVersion)
          return Error(Errc::kProtocol, "segment " + name + " has a foreign layout")
              .hint("both ranks must run the same libgrex version");
        if (!valid_geometry(slots, slot_bytes) || bytes < bytes_for(slots, slot_bytes))
          return Error(Errc::kProtocol, "segment " + name + " claims " + std::to_string(slots) + " slots of " +
                                            std::to_string(slot_bytes) + " bytes in a " + std::to_string(bytes) +
                                            "-byte mapping")
              .device("shm");
        s.slots_ = slots;
        s.slot_bytes_ = slot_bytes;
        return s;
      }
      ::close(fd);
    } else if (errno != ENOENT) {
      return Error::from_errno("shm_open(" + name + ")", errno);
    }
    if (deadline.expired())
      return Error(Errc::kTimeout, "segment " + name + " was not created within " + std::to_string(timeout_ms) +
                                       " ms");
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
}

}  // namespace grex::shm
