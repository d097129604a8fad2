// SPDX-License-Identifier: Apache-2.0
#include "core/copy.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <cstdint>
#include <cstring>

namespace grex::detail {

void copy_streaming(void* dst, const void* src, size_t n) noexcept {
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
  _mm_sfence();  // streaming stores are weakly ordered: publish them before any flag
#endif
}

}  // namespace grex::detail
