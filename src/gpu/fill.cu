// Device-side random fill for tests and benchmarks: a counter-based hash, uniform in [-1, 1),
// rounded to the tensor's dtype. Fresh values for every seed; never zeros-by-construction.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "coda/device_util.hpp"

namespace coda::dev {
namespace {

__device__ __forceinline__ float uniform(uint64_t seed, uint64_t i) {
  uint64_t x = seed ^ (i * 0x9E3779B97F4A7C15ull);
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 33;
  return static_cast<float>(x >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

__global__ void fill_kernel(void* p, int64_t rows, int64_t cols, int64_t ld, int dtype, uint64_t seed, float scale) {
  const int64_t total = rows * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    const float v = scale * uniform(seed, uint64_t(i));
    const int64_t off = r * ld + c;
    if (dtype == 0) static_cast<__nv_bfloat16*>(p)[off] = __float2bfloat16_rn(v);
    else if (dtype == 1) static_cast<__half*>(p)[off] = __float2half_rn(v);
    else static_cast<float*>(p)[off] = v;
  }
}

}  // namespace

void fill_uniform(const TensorView& t, uint64_t seed, float scale, cudaStream_t stream) {
  const int64_t rows = t.rows(), cols = t.rank() >= 2 ? t.cols() : 1;
  if (rows == 0 || cols == 0) return;
  const int64_t ld = t.rank() >= 2 ? t.stride(0) : 1;
  fill_kernel<<<1024, 256, 0, stream>>>(t.data(), rows, cols, ld, int(t.dtype()), seed, scale);
  check(cudaGetLastError(), "fill_uniform");
}

}  // namespace coda::dev
