// SPDX-License-Identifier: Apache-2.0
#include "gpu/ipc_flags.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <utility>

namespace grex::gpu {

size_t IpcFlags::page_bytes(int ranks) noexcept {
  const size_t b = static_cast<size_t>(ranks + 1) * kSlotBytes;  // the slots, then the broken word
  return (b + 4095) & ~size_t{4095};
}

namespace {

Result<void*> map_fd(int fd, size_t bytes, const std::string& name) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return Error::from_errno("mmap(" + name + ")", errno);
  return p;
}

}  // namespace

Result<IpcFlags> IpcFlags::create(int ranks) {
  if (ranks < 1) return Error(Errc::kInvalidArgument, "IpcFlags: no ranks");
  unsigned char r[16];
  size_t got = 0;
  while (got < sizeof r) {
    ssize_t n = ::getrandom(r + got, sizeof r - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Error::from_errno("getrandom (the GPU barrier page's name)", errno);
    got += static_cast<size_t>(n);
  }
  static const char hex[] = "0123456789abcdef";
  std::string name = "/grex-gpu-";
  for (unsigned char c : r) name += hex[c >> 4], name += hex[c & 15];
  const size_t bytes = page_bytes(ranks);
  int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return Error::from_errno("shm_open(" + name + ")", errno);
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    int e = errno;
    ::close(fd);
    ::shm_unlink(name.c_str());
    return Error::from_errno("ftruncate(" + name + ")", e);
  }
  auto p = map_fd(fd, bytes, name);
  ::close(fd);
  if (!p) {
    ::shm_unlink(name.c_str());
    return std::move(p).error();
  }
  return IpcFlags(std::move(name), *p, bytes, ranks, true);  // zeroed by ftruncate
}

Result<IpcFlags> IpcFlags::open(const std::string& name, int ranks) {
  if (ranks < 1 || name.rfind("/grex-gpu-", 0) != 0 || name.size() != 42 ||
      name.find('/', 1) != std::string::npos)
    return Error(Errc::kProtocol, "IpcFlags: malformed page name '" + name + "'");
  const size_t bytes = page_bytes(ranks);
  int fd = ::shm_open(name.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0);
  if (fd < 0) return Error::from_errno("shm_open(" + name + ")", errno);
  struct stat st{};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return Error::from_errno("fstat(" + name + ")", e);
  }
  // Made by a rank of this job: this user's, nobody else's to read or write,
  // of the size every rank computes alike.
  if (st.st_uid != ::geteuid() || (st.st_mode & 077) != 0 || static_cast<size_t>(st.st_size) != bytes) {
    ::close(fd);
    return Error(Errc::kAuthFailed, "IpcFlags: " + name + " is not this job's barrier page (owner " +
                                        std::to_string(st.st_uid) + ", mode " + std::to_string(st.st_mode & 0777) +
                                        ", " + std::to_string(st.st_size) + " bytes)");
  }
  auto p = map_fd(fd, bytes, name);
  ::close(fd);
  if (!p) return std::move(p).error();
  return IpcFlags(name, *p, bytes, ranks, false);
}

IpcFlags::IpcFlags(IpcFlags&& o) noexcept
    : name_(std::move(o.name_)), base_(std::exchange(o.base_, nullptr)), bytes_(std::exchange(o.bytes_, 0)),
      ranks_(std::exchange(o.ranks_, 0)), owner_(std::exchange(o.owner_, false)) {}

IpcFlags& IpcFlags::operator=(IpcFlags&& o) noexcept {
  if (this != &o) {
    this->~IpcFlags();
    new (this) IpcFlags(std::move(o));
  }
  return *this;
}

IpcFlags::~IpcFlags() {
  unlink();
  if (base_ != nullptr) ::munmap(base_, bytes_);
  base_ = nullptr;
}

void IpcFlags::unlink() noexcept {
  if (owner_ && !name_.empty()) ::shm_unlink(name_.c_str());
  owner_ = false;
}

uint32_t IpcFlags::load(int rank) const noexcept {
  auto* w = reinterpret_cast<uint32_t*>(static_cast<char*>(base_) + offset(rank));
  return std::atomic_ref<uint32_t>(*w).load(std::memory_order_acquire);
}

void IpcFlags::store(int rank, uint32_t value) noexcept {
  auto* w = reinterpret_cast<uint32_t*>(static_cast<char*>(base_) + offset(rank));
  std::atomic_ref<uint32_t>(*w).store(value, std::memory_order_release);
}

void IpcFlags::store_all(uint32_t value) noexcept {
  for (int r = 0; r < ranks_; ++r) store(r, value);
}

void IpcFlags::mark_broken(int by) noexcept {
  auto* w = reinterpret_cast<uint32_t*>(static_cast<char*>(base_) + offset(ranks_));
  uint32_t none = 0;
  std::atomic_ref<uint32_t>(*w).compare_exchange_strong(none, static_cast<uint32_t>(by) + 1, std::memory_order_acq_rel);
}

int IpcFlags::broken_by() const noexcept {
  return static_cast<int>(load(ranks_)) - 1;
}

std::vector<int> IpcFlags::behind(uint32_t epoch) const {
  std::vector<int> out;
  for (int r = 0; r < ranks_; ++r)
    if (!reached(load(r), epoch)) out.push_back(r);
  return out;
}

std::vector<uint32_t> IpcFlags::snapshot() const {
  std::vector<uint32_t> out(static_cast<size_t>(ranks_));
  for (int r = 0; r < ranks_; ++r) out[static_cast<size_t>(r)] = load(r);
  return out;
}

}  // namespace grex::gpu
