// SPDX-License-Identifier: Apache-2.0
// On a GPU: grex's reduction kernels (gpu/reduce_kernels.cuh) against the
// element arithmetic the CPU kernels are held to (gpu/reduce_elem.h), bit for
// bit, for every element kind and op, at odd sizes and unaligned starts; then
// their throughput against a device-to-device copy of the same bytes.
//   reduce_gpu_check [--quick]      exit 0: all equal; 1: a difference; 2: no GPU
// Built by Meson wherever nvcc is found (no GPU needed to build); run by
// tests/gpu/device-check.sh.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "gpu/reduce_kernels.cuh"

namespace {

using grex::elem::Op;

#define CHECK_CUDA(call)                                                                        \
  do {                                                                                          \
    cudaError_t e_ = (call);                                                                    \
    if (e_ != cudaSuccess) {                                                                    \
      std::fprintf(stderr, "reduce_gpu_check: %s: %s\n", #call, cudaGetErrorString(e_));        \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)

template <class T>
void fill(std::vector<T>& v, std::mt19937_64& rng) {
  for (auto& x : v) {
    uint64_t r = rng();
    std::memcpy(&x, &r, sizeof(T));  // every bit pattern: NaNs, infinities, subnormals
  }
}

// One kind and op: n elements starting `skew` elements into the buffers.
template <class K>
bool check_one(const char* name, int op, size_t n, size_t skew, bool vec, std::mt19937_64& rng) {
  using T = typename K::Storage;
  std::vector<T> a(n + skew), b(n + skew), got(n + skew);
  fill(a, rng);
  fill(b, rng);
  T *da, *db, *dd;
  CHECK_CUDA(cudaMalloc(&da, (n + skew) * sizeof(T)));
  CHECK_CUDA(cudaMalloc(&db, (n + skew) * sizeof(T)));
  CHECK_CUDA(cudaMalloc(&dd, (n + skew) * sizeof(T)));
  CHECK_CUDA(cudaMemcpy(da, a.data(), a.size() * sizeof(T), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(db, b.data(), b.size() * sizeof(T), cudaMemcpyHostToDevice));
  if (vec)
    grex::gpu::reduce_kernel<K, true><<<256, 256>>>(dd + skew, da + skew, db + skew, n);
  else
    grex::gpu::reduce_kernel<K, false><<<256, 256>>>(dd + skew, da + skew, db + skew, n);
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaMemcpy(got.data(), dd, got.size() * sizeof(T), cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaFree(da));
  CHECK_CUDA(cudaFree(db));
  CHECK_CUDA(cudaFree(dd));
  for (size_t i = skew; i < n + skew; ++i) {
    T want = K::host(a[i], b[i]);
    if (std::memcmp(&want, &got[i], sizeof(T)) != 0) {
      uint64_t x = 0, y = 0, g = 0, w = 0;
      std::memcpy(&x, &a[i], sizeof(T));
      std::memcpy(&y, &b[i], sizeof(T));
      std::memcpy(&g, &got[i], sizeof(T));
      std::memcpy(&w, &want, sizeof(T));
      std::printf("FAIL %s op %d n %zu skew %zu %s: element %zu: 0x%llx . 0x%llx gave 0x%llx, the CPU 0x%llx\n",
                  name, op, n, skew, vec ? "vector" : "scalar", i - skew, (unsigned long long)x,
                  (unsigned long long)y, (unsigned long long)g, (unsigned long long)w);
      return false;
    }
  }
  return true;
}

// The kinds, with a host-side twin of each element op.
template <class T, Op op>
struct NativeK : grex::gpu::Native<T, op> {
  static T host(T x, T y) { return grex::elem::reduce_one<op>(x, y); }
};
template <Op op>
struct F16K : grex::gpu::F16<op> {
  static uint16_t host(uint16_t x, uint16_t y) { return grex::elem::reduce_f16<op>(x, y); }
};
template <Op op>
struct Bf16K : grex::gpu::Bf16<op> {
  static uint16_t host(uint16_t x, uint16_t y) { return grex::elem::reduce_bf16<op>(x, y); }
};

template <Op op>
bool check_op(size_t n, std::mt19937_64& rng) {
  bool ok = true;
  const int o = static_cast<int>(op);
  for (bool vec : {true, false}) {
    // skew 0: aligned, the vector body; an odd n leaves a tail.
    ok &= check_one<NativeK<float, op>>("f32", o, n, 0, vec, rng);
    ok &= check_one<NativeK<double, op>>("f64", o, n, 0, vec, rng);
    ok &= check_one<NativeK<int32_t, op>>("i32", o, n, 0, vec, rng);
    ok &= check_one<NativeK<int64_t, op>>("i64", o, n, 0, vec, rng);
    ok &= check_one<NativeK<uint8_t, op>>("u8", o, n, 0, vec, rng);
    ok &= check_one<F16K<op>>("f16", o, n, 0, vec, rng);
    ok &= check_one<Bf16K<op>>("bf16", o, n, 0, vec, rng);
  }
  // An unaligned start takes the element-wise path, as the launcher will choose.
  ok &= check_one<NativeK<float, op>>("f32", o, n, 1, false, rng);
  ok &= check_one<F16K<op>>("f16", o, n, 3, false, rng);
  return ok;
}

// Throughput of the f32 sum (2 reads and 1 write per element) against
// cudaMemcpy device to device (1 read, 1 write), both as bytes moved per second.
void bench(size_t bytes) {
  const size_t n = bytes / sizeof(float);
  float *a, *b, *d;
  CHECK_CUDA(cudaMalloc(&a, bytes));
  CHECK_CUDA(cudaMalloc(&b, bytes));
  CHECK_CUDA(cudaMalloc(&d, bytes));
  CHECK_CUDA(cudaMemset(a, 0, bytes));
  CHECK_CUDA(cudaMemset(b, 0, bytes));
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  const int blocks = prop.multiProcessorCount * 8;
  cudaEvent_t t0, t1;
  CHECK_CUDA(cudaEventCreate(&t0));
  CHECK_CUDA(cudaEventCreate(&t1));
  auto time_ms = [&](auto&& fn) {
    for (int i = 0; i < 3; ++i) fn();
    CHECK_CUDA(cudaEventRecord(t0));
    for (int i = 0; i < 20; ++i) fn();
    CHECK_CUDA(cudaEventRecord(t1));
    CHECK_CUDA(cudaEventSynchronize(t1));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, t0, t1));
    return ms / 20;
  };
  const float copy_ms = time_ms([&] { CHECK_CUDA(cudaMemcpyAsync(d, a, bytes, cudaMemcpyDeviceToDevice)); });
  const float red_ms = time_ms([&] {
    grex::gpu::reduce_kernel<grex::gpu::Native<float, Op::kSum>, true><<<blocks, 256>>>(d, a, b, n);
  });
  CHECK_CUDA(cudaGetLastError());
  const double copy_gbs = 2.0 * bytes / (copy_ms * 1e6), red_gbs = 3.0 * bytes / (red_ms * 1e6);
  std::printf("bench f32 sum %zu MiB: reduce %.1f GB/s (%.3f ms), d2d copy %.1f GB/s (%.3f ms), ratio %.2f (goal >= 0.85)\n",
              bytes >> 20, red_gbs, red_ms, copy_gbs, copy_ms, red_gbs / copy_gbs);
  CHECK_CUDA(cudaFree(a));
  CHECK_CUDA(cudaFree(b));
  CHECK_CUDA(cudaFree(d));
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("reduce_gpu_check: no GPU\n");
    return 2;
  }
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device %s, sm_%d%d, %d SMs\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);
  std::mt19937_64 rng(2026);
  bool ok = true;
  for (size_t n : {size_t{1}, size_t{15}, size_t{1000003}}) {
    ok &= check_op<Op::kSum>(n, rng);
    ok &= check_op<Op::kProd>(n, rng);
    ok &= check_op<Op::kMin>(n, rng);
    ok &= check_op<Op::kMax>(n, rng);
  }
  std::printf("%s kernels vs the CPU arithmetic: 7 kinds x 4 ops x sizes 1, 15, 1000003, vector and scalar paths\n",
              ok ? "PASS" : "FAIL");
  if (!quick)
    for (size_t mib : {size_t{64}, size_t{256}, size_t{1024}}) bench(mib << 20);
  return ok ? 0 : 1;
}
