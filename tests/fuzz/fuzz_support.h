// SPDX-License-Identifier: Apache-2.0
// Helpers shared by grex's libFuzzer targets: invariant checks that abort
// with a message, a byte reader over the fuzz input, and owned test memory
// that ASan fences exactly (and poisons once the transport must not touch it).
#pragma once

#include <grex/memory.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>

#if defined(__has_include)
#if __has_include(<sanitizer/asan_interface.h>)
#include <sanitizer/asan_interface.h>
#endif
#endif
#ifndef ASAN_POISON_MEMORY_REGION
#define ASAN_POISON_MEMORY_REGION(addr, size) ((void)(addr), (void)(size))
#define ASAN_UNPOISON_MEMORY_REGION(addr, size) ((void)(addr), (void)(size))
#endif

/// Aborts (a crash libFuzzer records) when an invariant does not hold.
#define FUZZ_CHECK(cond)                                                                      \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      std::fprintf(stderr, "fuzz invariant failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
      std::abort();                                                                           \
    }                                                                                         \
  } while (0)

/// Keeps libFuzzer's comparison tracing out of the harness's byte loops
/// (filling and checking buffers), where it costs time and teaches nothing.
#if defined(__clang__)
#define GREX_FUZZ_NO_COVERAGE __attribute__((no_sanitize("coverage")))
#else
#define GREX_FUZZ_NO_COVERAGE
#endif

namespace grex::fuzz {

/// Consumes the fuzz input front to back; reads past the end yield zeros.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : p_(data), n_(size) {}
  bool empty() const noexcept { return n_ == 0; }
  size_t left() const noexcept { return n_; }
  uint8_t u8() noexcept {
    if (n_ == 0) return 0;
    --n_;
    return *p_++;
  }
  uint16_t u16() noexcept { return static_cast<uint16_t>(u8() | (u8() << 8)); }
  uint32_t u32() noexcept { return u16() | (static_cast<uint32_t>(u16()) << 16); }
  /// Up to `n` bytes (fewer at the end); sets *got.
  const uint8_t* take(size_t n, size_t* got) noexcept {
    const uint8_t* p = p_;
    *got = n < n_ ? n : n_;
    p_ += *got;
    n_ -= *got;
    return p;
  }

 private:
  const uint8_t* p_;
  size_t n_;
};

/// A heap buffer of exactly `length` bytes registered as one MemoryRegion, so
/// ASan flags any access outside it. poison() makes every later access fail.
class OwnedRegion final : public MemoryRegion {
 public:
  OwnedRegion(size_t length, uint32_t key)
      : MemoryRegion(nullptr, length, MemoryDomain::kHost), bytes_(new uint8_t[length]()) {
    addr_ = bytes_.get();
    lkey_ = key;
    remote_ = RemoteRegion{reinterpret_cast<uint64_t>(addr_), length, key, 0};
  }
  ~OwnedRegion() override { ASAN_UNPOISON_MEMORY_REGION(bytes_.get(), length_); }
  uint8_t* data() noexcept { return bytes_.get(); }
  void poison() noexcept { ASAN_POISON_MEMORY_REGION(bytes_.get(), length_); }

 private:
  std::unique_ptr<uint8_t[]> bytes_;
};

}  // namespace grex::fuzz
