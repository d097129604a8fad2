// SPDX-License-Identifier: Apache-2.0
// <immintrin.h> for code with x86 intrinsics (x86-64 only). GCC 12's AVX-512
// intrinsics start from _mm512_undefined_*(), which -W(maybe-)uninitialized
// flags once inlined (GCC bug 105593, fixed in 13). Diagnostic pragmas go by
// source location: this silences the header only.
#pragma once

#if defined(__x86_64__)
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#else
#include <immintrin.h>
#endif
#endif
