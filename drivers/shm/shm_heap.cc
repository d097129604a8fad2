// SPDX-License-Identifier: Apache-2.0
// The shared heap's reservation and first-fit pieces; mapping a peer's memfd.
#include "drivers/shm/shm_heap.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <iterator>

namespace grex::shm {

SharedHeap::~SharedHeap() {
  if (base_ != nullptr) ::munmap(base_, bytes_);
  if (fd_ >= 0) ::close(fd_);
}

bool SharedHeap::reserve(uint64_t bytes) noexcept {
  const long pg = ::sysconf(_SC_PAGESIZE);
  page_ = pg > 0 ? static_cast<uint64_t>(pg) : 4096;
  fd_ = ::memfd_create("grex-shm-heap", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd_ < 0) return false;
  // A sparse file of the whole size: a peer's access anywhere inside it
  // finds a page (never SIGBUS), and only written pages hold memory.
  for (uint64_t len = rounded(bytes); len >= kMinHeapBytes; len /= 2) {
    if (::ftruncate(fd_, static_cast<off_t>(len)) != 0) continue;
    void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd_, 0);
    if (p == MAP_FAILED) continue;
    // Core files take only the pieces handed out (take() marks them).
    ::madvise(p, len, MADV_DONTDUMP);
    // Sealed at this size: no process (a peer holding it through
    // /proc/<pid>/fd, or this one) can shrink it under a mapping, which
    // would turn the peer's next access into SIGBUS. map_peer_fd checks it.
    if (!seal_size(fd_)) {
      ::munmap(p, len);
      break;
    }
    base_ = static_cast<uint8_t*>(p);
    bytes_ = len;
    free_.emplace(0, len);
    return true;
  }
  const int e = errno;
  ::close(fd_);
  fd_ = -1;
  errno = e;
  return false;
}

int64_t SharedHeap::take(uint64_t len) {
  len = rounded(len == 0 ? 1 : len);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < len) continue;
    const uint64_t off = it->first;
    const uint64_t rest = it->second - len;
    free_.erase(it);
    if (rest > 0) free_.emplace(off + len, rest);
    in_use_ += len;
    ::madvise(base_ + off, len, MADV_DODUMP);
    return static_cast<int64_t>(off);
  }
  return -1;
}

void SharedHeap::give_back(uint64_t offset, uint64_t len) noexcept {
  len = rounded(len == 0 ? 1 : len);
  // Out of the file: the memory returns to the system now, although peers
  // keep the heap mapped (a later read there sees zeros).
  ::fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset), static_cast<off_t>(len));
  ::madvise(base_ + offset, len, MADV_DONTDUMP);
  in_use_ -= len;
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && offset + len == next->first) {  // merge with the piece after
    len += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {  // and with the one before
      prev->second += len;
      return;
    }
  }
  free_.emplace_hint(next, offset, len);
}

bool seal_size(int fd) noexcept {
  return ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0;
}

uint8_t* map_peer_fd(pid_t pid, int fd, uint64_t offset, uint64_t* len, bool shrink) noexcept {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/fd/%d", static_cast<int>(pid), fd);
  const int lfd = ::open(path, O_RDWR | O_CLOEXEC);
  if (lfd < 0) return nullptr;
  // The file must hold what we map: a page past its end would SIGBUS on access.
  struct stat st {};
  void* p = MAP_FAILED;
  const int seals = ::fcntl(lfd, F_GET_SEALS);
  if (::fstat(lfd, &st) != 0) {
    // errno from fstat
  } else if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    // The peer could shrink it under our mapping (SIGBUS here): not mapped;
    // its memory is copied with CMA instead.
    errno = EPERM;
  } else if (*len == 0 || offset > static_cast<uint64_t>(st.st_size) ||
             *len > static_cast<uint64_t>(st.st_size) - offset) {
    errno = EINVAL;
  } else {
    for (;;) {
      p = ::mmap(nullptr, *len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, lfd, static_cast<off_t>(offset));
      if (p != MAP_FAILED || !shrink || *len / 2 < SharedHeap::kMinHeapBytes) break;
      *len /= 2;
    }
    // Another process's memory stays out of our core files.
    if (p != MAP_FAILED) ::madvise(p, *len, MADV_DONTDUMP);
  }
  const int e = errno;
  ::close(lfd);
  errno = e;
  return p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
}

}  // namespace grex::shm
