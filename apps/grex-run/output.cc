// SPDX-License-Identifier: Apache-2.0
// TaggedStream: line splitting and prefixing of a child's output pipe.
#include "output.h"

#include <cerrno>
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

namespace grex::run {
namespace {

constexpr size_t kReadChunkBytes = 64 * 1024;
// Bounds one drain() so a chatty rank cannot starve the others; 16 chunks
// also cover a whole default pipe buffer left behind by an exited child.
constexpr int kMaxReadsPerDrain = 16;

}  // namespace

bool write_all(int fd, std::string_view bytes) noexcept {
  while (!bytes.empty()) {
    ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n > 0) {
      bytes.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, -1);
      continue;
    }
    return false;
  }
  return true;
}

TaggedStream::TaggedStream(int src_fd, int dst_fd, std::string prefix) noexcept
    : src_fd_(src_fd), dst_fd_(dst_fd), prefix_(std::move(prefix)) {
  int flags = ::fcntl(src_fd_, F_GETFL);
  if (flags >= 0) ::fcntl(src_fd_, F_SETFL, flags | O_NONBLOCK);
}

TaggedStream::TaggedStream(TaggedStream&& other) noexcept
    : src_fd_(other.src_fd_),
      dst_fd_(other.dst_fd_),
      prefix_(std::move(other.prefix_)),
      partial_(std::move(other.partial_)),
      mid_line_(other.mid_line_) {
  other.src_fd_ = -1;
  other.partial_.clear();
  other.mid_line_ = false;
}

TaggedStream::~TaggedStream() { finish(); }

void TaggedStream::drain() noexcept {
  char buf[kReadChunkBytes];
  for (int i = 0; i < kMaxReadsPerDrain && src_fd_ >= 0; ++i) {
    ssize_t n = ::read(src_fd_, buf, sizeof(buf));
    if (n > 0) {
      forward(std::string_view(buf, static_cast<size_t>(n)));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    finish();  // end of file, or the pipe broke
  }
}

void TaggedStream::forward(std::string_view bytes) noexcept {
  std::string out;
  size_t start = 0;
  for (size_t nl = bytes.find('\n'); nl != std::string_view::npos;
       nl = bytes.find('\n', start)) {
    if (!mid_line_) out += prefix_;
    out += partial_;
    out += bytes.substr(start, nl + 1 - start);
    partial_.clear();
    mid_line_ = false;
    start = nl + 1;
  }
  partial_ += bytes.substr(start);
  if (partial_.size() > kMaxLineBytes) {
    if (!mid_line_) out += prefix_;
    out += partial_;
    partial_.clear();
    mid_line_ = true;
  }
  // A failed write means our own stdout/stderr is gone; keep draining the
  // pipe anyway so the child never blocks on a full pipe.
  if (!out.empty()) (void)write_all(dst_fd_, out);
}

void TaggedStream::finish() noexcept {
  if (!partial_.empty() || mid_line_) {
    std::string out = mid_line_ ? std::string() : prefix_;
    out += partial_;
    out += '\n';
    (void)write_all(dst_fd_, out);
    partial_.clear();
    mid_line_ = false;
  }
  if (src_fd_ >= 0) {
    ::close(src_fd_);
    src_fd_ = -1;
  }
}

}  // namespace grex::run
