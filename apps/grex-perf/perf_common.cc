// SPDX-License-Identifier: Apache-2.0
// Benchmark buffers, rank-0 output and the --json writer shared by the modes.
#include "perf_common.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace grex::perf {
namespace {

constexpr size_t kPageBytes = 4096;

}  // namespace

Result<PerfBuffer> PerfBuffer::create(Communicator& comm, size_t bytes, bool shared) {
  size_t rounded = (std::max(bytes, size_t{1}) + kPageBytes - 1) / kPageBytes * kPageBytes;
  PerfBuffer b;
  if (shared) {
    b.ptr_ = GREX_TRY_CTX(comm.alloc(rounded), "grex-perf: --alloc buffer");
    b.comm_ = &comm;
  } else {
    b.ptr_ = std::aligned_alloc(kPageBytes, rounded);
    if (b.ptr_ == nullptr)
      return Error(Errc::kNoMemory, "grex-perf: cannot allocate " + std::to_string(rounded) + " bytes")
          .rank(comm.rank())
          .hint("use a smaller -e / -s");
  }
  b.bytes_ = rounded;
  std::memset(b.ptr_, 0, rounded);  // fault every page in before timing
  return b;
}

PerfBuffer::PerfBuffer(PerfBuffer&& o) noexcept
    : comm_(std::exchange(o.comm_, nullptr)), ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

PerfBuffer& PerfBuffer::operator=(PerfBuffer&& o) noexcept {
  if (this != &o) {
    release();
    comm_ = std::exchange(o.comm_, nullptr);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

PerfBuffer::~PerfBuffer() { release(); }

void PerfBuffer::release() noexcept {
  if (ptr_ == nullptr) return;
  if (comm_ != nullptr) {
    auto r = comm_->free(ptr_);
    if (!r) std::fprintf(stderr, "grex-perf: %s\n", r.error().message().c_str());
  } else {
    std::free(ptr_);
  }
  ptr_ = nullptr;
}

void print_rank0(const Communicator& comm, const std::string& text) {
  if (comm.rank() != 0) return;
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

std::string buffer_kind(Communicator& comm, bool shared) {
  if (!shared) return "malloc";
  return "alloc (" + comm.device().capabilities().driver + ")";
}

Result<void> write_json_rows(Communicator& comm, const PerfArgs& args, const Json& meta,
                             const std::vector<Json>& rows) {
  if (args.json_path.empty() || comm.rank() != 0) return ok();
  Json head = {{"mode", mode_name(args.mode)}};
  head.update(meta);
  Json env = common_environment(args, comm.device().capabilities(), comm.size());
  env["buffers_detail"] = buffer_kind(comm, args.shared_buffers);
  return write_text_file(args.json_path, render_json(head, env, rows));
}

}  // namespace grex::perf
