// Does one warpgroup keep the tensor cores at their peak with a single 64-row accumulator?
//
// The 64 x 128 tile per consumer warpgroup (three consumers taking turns, bench/NOTES.md
// 2026-12-03) ran its plain GEMM 25-30% slower than the 128 x 128 tile (two 64-row accumulators a
// warpgroup). One suspect is the wgmma chain itself: a 64 x 128 x 64 k-tile is four m64n128k16
// instructions into the same accumulator registers, each depending on the one before, where the
// 128 x 128 k-tile interleaves two independent accumulators. This program times, on one warpgroup
// per SM (operands resident in shared memory, no TMA), cycles per m64n128k16 instruction (peak 64
// on an H100/H200 SM: 64 x 128 x 16 x 2 flops at 4096 dense bf16 flops a cycle):
//   two accumulators, a 128 x 128 x 64 k-tile per commit group (the kernel's pingpong tile)
//   one accumulator, a 64 x 128 x 64 k-tile per commit group
//   one accumulator, two k-tiles per commit group (a longer batch between waits)
// each with one commit group in flight (wait_group 1) as the kernel's mainloop keeps.
#include "wgmma_probe.cuh"

#include <algorithm>
#include <vector>

enum Mode { kTwoAcc = 0, kOneAcc, kOneAccTwoTiles, kModes };
const char* kNames[kModes] = {"two accumulators", "one accumulator", "one acc, 2 k-tiles/group"};
const int kInstrPerGroup[kModes] = {8, 4, 8};

// NOTES: the mode is a template parameter: with the three loops behind a runtime branch, ptxas
// serialized every wgmma (C7515: non-wgmma instructions define the accumulators mid-pipeline).
template <int kMode>
__global__ void __launch_bounds__(128, 1) chain(int groups, unsigned long long* cycles, float* sink) {
  extern __shared__ __align__(1024) uint8_t smem[];
  const int tid = threadIdx.x;
  fill_operands(smem, tid, 128);
  __syncthreads();
  float d0[64], d1[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) d0[i] = d1[i] = 0.0f;
  const auto [a0, a1, b] = ktile_descs(smem);
  long long t0 = clock64();
  if constexpr (kMode == kTwoAcc) {
    for (int g = 0; g < groups; ++g) {
      wgmma_ktile(d0, d1, a0, a1, b);
      wgmma_wait<1>();
    }
  } else if constexpr (kMode == kOneAcc) {
    for (int g = 0; g < groups; ++g) {
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) wgmma_64x128(d0, a0 + 2 * kk, b + 2 * kk);
      wgmma_commit();
      wgmma_wait<1>();
    }
  } else {
    for (int g = 0; g < groups; ++g) {
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 8; ++kk) wgmma_64x128(d0, a0 + 2 * (kk % 4), b + 2 * (kk % 4));
      wgmma_commit();
      wgmma_wait<1>();
    }
  }
  wgmma_wait<0>();
  long long t1 = clock64();
  if (tid == 0) cycles[blockIdx.x] = t1 - t0;
  keep_accumulators(d0, d1, sink + blockIdx.x);
}

int main(int argc, char** argv) {
  const int groups = argc > 1 ? std::atoi(argv[1]) : 4096;
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  unsigned long long* cycles;
  float* sink;
  CK(cudaMalloc(&cycles, sms * sizeof(unsigned long long)));
  CK(cudaMalloc(&sink, sms * sizeof(float)));
  const int smem = 32768 + 1024;
  void (*kernels[kModes])(int, unsigned long long*, float*) = {chain<kTwoAcc>, chain<kOneAcc>, chain<kOneAccTwoTiles>};
  for (auto* k : kernels) CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  std::printf("%-28s %18s %22s\n", "mode", "cycles per group", "cycles per m64n128k16");
  for (int mode = 0; mode < kModes; ++mode) {
    std::vector<unsigned long long> all;
    for (int rep = 0; rep < 3; ++rep) {
      kernels[mode]<<<sms, 128, smem>>>(groups, cycles, sink);
      CK(cudaGetLastError());
      CK(cudaDeviceSynchronize());
      std::vector<unsigned long long> h(sms);
      CK(cudaMemcpy(h.data(), cycles, sms * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
      all.insert(all.end(), h.begin(), h.end());
    }
    std::sort(all.begin(), all.end());
    const double med = double(all[all.size() / 2]) / groups;
    std::printf("%-28s %18.1f %22.1f\n", kNames[mode], med, med / kInstrPerGroup[mode]);
  }
  return 0;
}
