// SPDX-License-Identifier: Apache-2.0
#include "core/copy.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define GREX_COPY_X86 1
#include <immintrin.h>
#else
#define GREX_COPY_X86 0
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace grex::detail {

void copy_streaming(void* dst, const void* src, size_t n) noexcept {
  copy_streaming_unfenced(dst, src, n);
  streaming_fence();
}

void streaming_fence() noexcept {
#if defined(__SSE2__)
  _mm_sfence();  // streaming stores are weakly ordered: publish them before any flag
#endif
}

void copy_streaming_unfenced(void* dst, const void* src, size_t n) noexcept {
#if !defined(__SSE2__)
  std::memcpy(dst, src, n);
#else
  auto* d = static_cast<uint8_t*>(dst);
  auto* s = static_cast<const uint8_t*>(src);
  // Head: up to the first 16-byte boundary of dst.
  size_t head = (16 - (reinterpret_cast<uintptr_t>(d) & 15)) & 15;
  if (head > n) head = n;
  std::memcpy(d, s, head);
  d += head;
  s += head;
  n -= head;
  // Middle: 64 bytes (one line) per round, SSE2 streaming stores (baseline x86-64;
  // wider stores do not move memory faster).
  size_t lines = n / 64;
  for (size_t i = 0; i < lines; ++i) {
    __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
    __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16));
    __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32));
    __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 48), e);
    s += 64;
    d += 64;
  }
  n -= lines * 64;
  std::memcpy(d, s, n);
#endif
}

namespace {

// The line-by-line pass over N jobs, a line of each per round. dst of a
// streaming job is 64-byte aligned here.
#if GREX_COPY_X86
template <size_t N>
__attribute__((target("avx512f"))) void lines_avx512(uint8_t* const* d, const uint8_t* const* s, const bool* nt,
                                                     size_t lines) noexcept {
  for (size_t off = 0; off < lines * 64; off += 64) {
    __m512i v[N];
    for (size_t j = 0; j < N; ++j) v[j] = _mm512_loadu_si512(s[j] + off);
    for (size_t j = 0; j < N; ++j) {
      if (nt[j])
        _mm512_stream_si512(reinterpret_cast<__m512i*>(d[j] + off), v[j]);
      else
        _mm512_storeu_si512(d[j] + off, v[j]);
    }
  }
}
template <size_t N>
__attribute__((target("avx2"))) void lines_avx2(uint8_t* const* d, const uint8_t* const* s, const bool* nt,
                                                size_t lines) noexcept {
  for (size_t off = 0; off < lines * 64; off += 64) {
    __m256i v[N][2];
    for (size_t j = 0; j < N; ++j) {
      v[j][0] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s[j] + off));
      v[j][1] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s[j] + off + 32));
    }
    for (size_t j = 0; j < N; ++j) {
      auto* p = reinterpret_cast<__m256i*>(d[j] + off);
      if (nt[j]) {
        _mm256_stream_si256(p, v[j][0]);
        _mm256_stream_si256(p + 1, v[j][1]);
      } else {
        _mm256_storeu_si256(p, v[j][0]);
        _mm256_storeu_si256(p + 1, v[j][1]);
      }
    }
  }
}
#endif
#if defined(__SSE2__)
template <size_t N>
void lines_sse2(uint8_t* const* d, const uint8_t* const* s, const bool* nt, size_t lines) noexcept {
  for (size_t off = 0; off < lines * 64; off += 64) {
    __m128i v[N][4];
    for (size_t j = 0; j < N; ++j)
      for (size_t k = 0; k < 4; ++k) v[j][k] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s[j] + off) + k);
    for (size_t j = 0; j < N; ++j) {
      auto* p = reinterpret_cast<__m128i*>(d[j] + off);
      for (size_t k = 0; k < 4; ++k) {
        if (nt[j])
          _mm_stream_si128(p + k, v[j][k]);
        else
          _mm_storeu_si128(p + k, v[j][k]);
      }
    }
  }
}
#endif

template <size_t N>
void lines_best(uint8_t* const* d, const uint8_t* const* s, const bool* nt, size_t lines) noexcept {
#if GREX_COPY_X86
  // At 2 ranks and 256 MiB (docs/benchmarks.md): 64-byte accesses 1-2 %
  // faster than 32-byte ones, and those 1-2 % faster than 16-byte ones.
  static const int level = __builtin_cpu_supports("avx512f") ? 2 : __builtin_cpu_supports("avx2") ? 1 : 0;
  if (level == 2) return lines_avx512<N>(d, s, nt, lines);
  if (level == 1) return lines_avx2<N>(d, s, nt, lines);
#endif
#if defined(__SSE2__)
  lines_sse2<N>(d, s, nt, lines);
#else
  for (size_t j = 0; j < N; ++j) std::memcpy(d[j], s[j], lines * 64);
  (void)nt;
#endif
}

}  // namespace

void copy_together(const CopyJob* jobs, size_t count) noexcept {
  uint8_t* d[kMaxCopyJobs];
  const uint8_t* s[kMaxCopyJobs];
  size_t left[kMaxCopyJobs];
  bool nt[kMaxCopyJobs];
  size_t n = 0;
  for (size_t i = 0; i < count; ++i) {
    if (jobs[i].bytes == 0) continue;
    if (n == kMaxCopyJobs) {  // beyond the interleaved ones: on its own
      if (jobs[i].streaming)
        copy_streaming(jobs[i].dst, jobs[i].src, jobs[i].bytes);
      else
        std::memcpy(jobs[i].dst, jobs[i].src, jobs[i].bytes);
      continue;
    }
    d[n] = static_cast<uint8_t*>(jobs[i].dst);
    s[n] = static_cast<const uint8_t*>(jobs[i].src);
    left[n] = jobs[i].bytes;
    nt[n] = jobs[i].streaming;
    if (nt[n]) {  // ordinary stores up to the destination's next line
      size_t head = (64 - (reinterpret_cast<uintptr_t>(d[n]) & 63)) & 63;
      if (head > left[n]) head = left[n];
      std::memcpy(d[n], s[n], head);
      d[n] += head;
      s[n] += head;
      left[n] -= head;
    }
    ++n;
  }
  // One job alone needs no interleaving: the tails below copy it.
  size_t lines = n >= 2 ? left[0] / 64 : 0;
  for (size_t j = 1; j < n; ++j) lines = std::min(lines, left[j] / 64);
  if (lines > 0) {
    if (n == 2)
      lines_best<2>(d, s, nt, lines);
    else
      lines_best<3>(d, s, nt, lines);
  }
  // The rest of each; copy_streaming ends with the fence streaming stores need.
  for (size_t j = 0; j < n; ++j) {
    const size_t done = lines * 64;
    if (nt[j])
      copy_streaming(d[j] + done, s[j] + done, left[j] - done);
    else
      std::memcpy(d[j] + done, s[j] + done, left[j] - done);
  }
}

}  // namespace grex::detail
