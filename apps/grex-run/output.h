// SPDX-License-Identifier: Apache-2.0
// TaggedStream: copies one child's stdout or stderr pipe to grex-run's own fd, "[R] " before each line.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace grex::run {

/// Writes all of `bytes` to fd, retrying on EINTR and partial writes and
/// waiting with poll(2) if fd is non-blocking. Returns false if fd is gone
/// (EPIPE, EBADF, ...); the caller then drops further output for it.
bool write_all(int fd, std::string_view bytes) noexcept;

/// One read end of a child's output pipe. Complete lines are written to
/// dst_fd with the prefix in front, one write(2) per read batch, so lines of
/// different ranks never interleave mid-line. A line longer than
/// kMaxLineBytes is passed on in pieces (prefixed once). Single-threaded.
class TaggedStream {
 public:
  /// Longest partial line kept before it is written out unfinished.
  static constexpr size_t kMaxLineBytes = 64 * 1024;

  /// Takes ownership of src_fd (made non-blocking here); dst_fd is borrowed.
  TaggedStream(int src_fd, int dst_fd, std::string prefix) noexcept;
  ~TaggedStream();
  TaggedStream(TaggedStream&& other) noexcept;
  TaggedStream& operator=(TaggedStream&&) = delete;
  TaggedStream(const TaggedStream&) = delete;
  TaggedStream& operator=(const TaggedStream&) = delete;

  /// The pipe's read end, or -1 once it reached end of file.
  int fd() const noexcept { return src_fd_; }

  /// Reads everything available now without blocking and forwards the
  /// complete lines. At end of file it calls finish().
  void drain() noexcept;

  /// Writes a pending partial line (ending it with a newline) and closes the
  /// pipe. Idempotent.
  void finish() noexcept;

 private:
  void forward(std::string_view bytes) noexcept;

  int src_fd_;
  int dst_fd_;
  std::string prefix_;
  std::string partial_;        ///< bytes after the last newline, not yet written
  bool mid_line_ = false;      ///< an over-long line was written in part already
};

}  // namespace grex::run
