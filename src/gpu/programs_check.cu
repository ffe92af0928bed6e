// Compile-time check that every epilogue program and functor builds for sm_90a.
//
// The programs in coda/ops/*.hpp are shared by the CPU emulator and the GPU epilogue; this TU
// instantiates each one against a minimal device context so that a program using something the
// device cannot run (std:: calls, host-only helpers) fails the build here, on CI, without a GPU.
// The kernel is never launched.
#include <cstdint>

#include "coda/ops.hpp"

namespace coda::gpu {
namespace {

struct CheckCtx {
  float* f;
  int32_t* i;
  __device__ float scalar(int k) const { return f[k]; }
  __device__ float row(int k, const epi::Frag& fr) const { return f[k + fr.m]; }
  __device__ int row_int(int k, const epi::Frag& fr) const { return i[k + fr.m]; }
  __device__ float col(int k, const epi::Frag&, int n) const { return f[k + n]; }
  __device__ float tile(int k, const epi::Frag& fr, int n) const { return f[k + fr.m + n]; }
  __device__ epi::Pair tile2(int k, const epi::Frag& fr, int n) const { return {tile(k, fr, n), tile(k, fr, n + 1)}; }
  __device__ float store(int k, const epi::Frag& fr, int n, float v) const {
    f[k + fr.m * 3 + n] = v;
    return v;
  }
  __device__ epi::Pair store2(int k, const epi::Frag& fr, int n, float v0, float v1) const {
    return {store(k, fr, n, v0), store(k, fr, n + 1, v1)};
  }
  __device__ void row_store(int k, const epi::Frag& fr, float v) const { f[k + fr.m * 5] = v; }
  __device__ void row_sum(int k, const epi::Frag& fr, float v) const { f[k + 7] += v; }
  __device__ void row_lse(int k, const epi::Frag& fr, float v0, float v1) const {
    epi::OnlineLse l;
    l.add(v0);
    if (fr.ok[1]) l.add(v1);
    f[k + 11] = l.value();
  }
  __device__ void seg_sum(int k, const epi::Frag&, int n, float v) const { f[k + n * 13] += v; }
  __device__ void col_sum(int k, const epi::Frag&, int n, float v) const { f[k + n * 17] += v; }
  __device__ void rotation(const epi::Frag& fr, int pos, int freq, float* s, float* c) const {
    epi::rope_sincos_at(row_int(pos, fr), col(freq, fr, fr.n), s, c);
  }
};

template <class Program>
__global__ void check_program(Program p, float* f, int32_t* i) {
  CheckCtx ctx{f, i};
  epi::Frag fr{{f[0], f[1]}, int(threadIdx.x), int(2 * threadIdx.y), {true, threadIdx.z == 0}};
  p(fr, ctx);
}

}  // namespace

// Referenced by nothing; instantiating the kernels is the point.
void instantiate_program_checks() {
  (void)&check_program<programs::Identity>;
  (void)&check_program<programs::LinearCombination>;
  (void)&check_program<programs::ResidualRmsNormPartial>;
  (void)&check_program<programs::ResidualRmsNormPartialDirect>;
  (void)&check_program<programs::ResidualRmsNormPartialLongK>;
  (void)&check_program<programs::RmsNormBackward>;
  (void)&check_program<programs::Swiglu>;
  (void)&check_program<programs::SwigluBackward>;
  (void)&check_program<programs::Rope>;
  (void)&check_program<programs::QkvSqsum>;
  (void)&check_program<programs::LmHeadLse>;
}

}  // namespace coda::gpu
