// Host launch of one compiled GEMM variant: mainloop arguments from strided views, the epilogue
// parameters, the persistent grid, the cluster launch. Included by the instantiation TUs (which
// instantiate launch_variant) and by the dispatcher (which only declares them extern).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdio>
#include <mutex>
#include <string>

#include "coda/kernel/config.hpp"
#include "coda/kernel/sm90_gemm.cuh"
#include "coda/tensor.hpp"

namespace coda::sm90 {

// Everything a launch needs besides the program-specific epilogue bindings.
template <class Program>
struct LaunchArgs {
  const void* a = nullptr;
  int64_t lda = 0;  // the non-unit stride of a (K-major: row stride; M-major: column stride)
  const void* b = nullptr;
  int64_t ldb = 0;
  int64_t m = 0, n = 0, k = 0;
  EpiParams epi;
  Program program;
  GemmConfig config;
  int debug = 0;  // diagnostics only (see Sm90Gemm::Params::debug)
};

template <int V>
struct VariantTraits;
template <>
struct VariantTraits<0> {  // KernelVariant::k128x256_c2x1
  using Tile = Shape<_128, _256, _64>;
  using Cluster = Shape<_2, _1, _1>;
  static constexpr int kStages = 4;
  static constexpr bool kPingpong = false;
};
template <>
struct VariantTraits<1> {  // KernelVariant::k256x128_c1x2
  using Tile = Shape<_256, _128, _64>;
  using Cluster = Shape<_1, _2, _1>;
  static constexpr int kStages = 4;
  static constexpr bool kPingpong = false;
};
template <>
struct VariantTraits<2> {  // KernelVariant::k128x128_pp_c2x1
  using Tile = Shape<_128, _128, _64>;
  using Cluster = Shape<_2, _1, _1>;
  static constexpr int kStages = 6;
  static constexpr bool kPingpong = true;
};

template <class Element, bool AK, bool BK, int V, class Program>
using KernelOf = Sm90Gemm<Element, AK, BK, typename VariantTraits<V>::Tile, typename VariantTraits<V>::Cluster,
                          VariantTraits<V>::kStages, VariantTraits<V>::kPingpong, Program>;

inline Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return {};
  return Status::cuda_error(std::string("gemm: ") + what + ": " + cudaGetErrorString(e));
}

// Diagnostics (CODA_DEBUG_EPILOGUE bit 4): launch, wait, and print the cycles per phase that thread
// 0 of each consumer warpgroup counted (Sm90Gemm::Trace), per tile and per epilogue chunk.
template <class Kernel, class KernelFn>
Status launch_traced(cudaLaunchConfig_t& cfg, KernelFn kernel, typename Kernel::Params& p) {
  constexpr int kN = Kernel::kTrCount;
  static unsigned long long* buf = nullptr;
  if (!buf) CODA_TRY(cuda_status(cudaMalloc(&buf, kN * sizeof(unsigned long long)), "trace buffer"));
  CODA_TRY(cuda_status(cudaMemsetAsync(buf, 0, kN * sizeof(unsigned long long), cfg.stream), "trace reset"));
  p.trace = buf;
  CODA_TRY(cuda_status(cudaLaunchKernelEx(&cfg, kernel, p), "launch"));
  unsigned long long c[kN];
  CODA_TRY(cuda_status(cudaMemcpyAsync(c, buf, sizeof(c), cudaMemcpyDeviceToHost, cfg.stream), "trace read"));
  CODA_TRY(cuda_status(cudaStreamSynchronize(cfg.stream), "trace wait"));
  const double tiles = c[Kernel::kTrTiles] ? double(c[Kernel::kTrTiles]) : 1.0;
  const double chunks = c[Kernel::kTrChunks] ? double(c[Kernel::kTrChunks]) : 1.0;
  std::fprintf(stderr,
               "trace %dx%dx%d %s: cycles per tile: turn-mma %.0f mma %.0f convert %.0f epilogue %.0f | per chunk "
               "(%.1f per tile): buffer %.0f tiles %.0f program %.0f publish %.0f flush %.0f\n",
               p.m, p.n, p.k, Kernel::kPingpongV ? "pingpong" : "cooperative", c[Kernel::kTrOrderMma] / tiles,
               c[Kernel::kTrMma] / tiles, c[Kernel::kTrConvert] / tiles,
               (c[Kernel::kTrBufWait] + c[Kernel::kTrTileWait] + c[Kernel::kTrProgram] + c[Kernel::kTrPublish] +
                c[Kernel::kTrFlush]) / tiles,
               chunks / tiles, c[Kernel::kTrBufWait] / chunks, c[Kernel::kTrTileWait] / chunks,
               c[Kernel::kTrProgram] / chunks, c[Kernel::kTrPublish] / chunks, c[Kernel::kTrFlush] / chunks);
  return {};
}

template <class Element, bool AK, bool BK, int V, class Program>
Status launch_variant(const LaunchArgs<Program>& L, cudaStream_t stream) {
  using Kernel = KernelOf<Element, AK, BK, V, Program>;
  using Mainloop = typename Kernel::Mainloop;
  static_assert(Kernel::kSmemBytes + 2 * Kernel::kArenaDecl <= 232448,
                "shared memory exceeds the sm90 per-block opt-in limit (227 KiB)");
  auto* kernel = &sm90_gemm_kernel<Kernel>;

  // One-time per process (per variant): the smem opt-in and the number of co-resident clusters.
  static std::once_flag once;
  static cudaError_t setup_error = cudaSuccess;
  static int max_clusters = 0;
  std::call_once(once, [&] {
    setup_error = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Kernel::kSmemBytes);
    if (setup_error != cudaSuccess) return;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(Kernel::kClusterM * 64, Kernel::kClusterN, 1);
    cfg.blockDim = dim3(Kernel::kThreads, 1, 1);
    cfg.dynamicSmemBytes = Kernel::kSmemBytes;
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = Kernel::kClusterM;
    attr.val.clusterDim.y = Kernel::kClusterN;
    attr.val.clusterDim.z = 1;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    setup_error = cudaOccupancyMaxActiveClusters(&max_clusters, kernel, &cfg);
  });
  CODA_TRY(cuda_status(setup_error, "kernel setup"));
  if (max_clusters <= 0) return Status::cuda_error("gemm: no cluster of this kernel fits on the device");

  typename Kernel::Params p{};
  {
    typename Mainloop::Arguments args{};
    args.ptr_A = static_cast<const Element*>(L.a);
    args.ptr_B = static_cast<const Element*>(L.b);
    if constexpr (AK) cute::get<0>(args.dA) = L.lda; else cute::get<1>(args.dA) = L.lda;
    if constexpr (BK) cute::get<0>(args.dB) = L.ldb; else cute::get<1>(args.dB) = L.ldb;
    const int k_desc = int(L.k > 0 ? L.k : 1);  // K = 0: valid descriptors, no loads issued
    p.mainloop = Mainloop::to_underlying_arguments(make_shape(int(L.m), int(L.n), k_desc, 1), args, nullptr);
  }
  p.epi = L.epi;
  p.program = L.program;
  p.m = int(L.m);
  p.n = int(L.n);
  p.k = int(L.k);
  p.tiles_m = int((L.m + Kernel::kTileM - 1) / Kernel::kTileM);
  p.tiles_n = int((L.n + Kernel::kTileN - 1) / Kernel::kTileN);
  p.k_tiles = int((L.k + 63) / 64);
  p.epi_buffers = Kernel::buffers_for(L.epi);
  p.out_dtype = kDtBF16;  // the dtype of the first defined output
  for (int o = L.epi.num_outs - 1; o >= 0; --o)
    if (L.epi.outs[o].defined) p.out_dtype = L.epi.outs[o].dtype;
  p.tile_dtype = -1;  // the dtype of the TMA-staged tile operands (one per launch)
  for (int i = 0; i < Kernel::kTmaTiles && i < kEpiSlots; ++i) {
    if (!L.epi.tiles[i].ptr) continue;
    if (p.tile_dtype >= 0 && L.epi.tiles[i].dtype != p.tile_dtype)
      return Status::not_supported("gemm: the TMA-staged tile operands of one fused operator must share a dtype");
    p.tile_dtype = L.epi.tiles[i].dtype;
  }
  p.debug = L.debug;
  for (int o = 0; o < L.epi.num_outs; ++o)
    if (L.epi.outs[o].defined && L.epi.outs[o].dtype != p.out_dtype)
      return Status::not_supported("gemm: the tile outputs of one fused operator must share a dtype");
  if (p.epi_buffers == 0) return Status::internal("gemm: the epilogue outputs do not fit the staging arena");
  p.sched.ctiles_m = (p.tiles_m + Kernel::kClusterM - 1) / Kernel::kClusterM;
  p.sched.ctiles_n = (p.tiles_n + Kernel::kClusterN - 1) / Kernel::kClusterN;
  p.sched.swizzle = L.config.swizzle < 1 ? 1 : L.config.swizzle;
  p.sched.raster_n = L.config.raster_n ? 1 : 0;

  const int clusters = p.sched.total() < max_clusters ? p.sched.total() : max_clusters;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(Kernel::kClusterM * clusters, Kernel::kClusterN, 1);
  cfg.blockDim = dim3(Kernel::kThreads, 1, 1);
  cfg.dynamicSmemBytes = Kernel::kSmemBytes;
  cfg.stream = stream;
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = Kernel::kClusterM;
  attr.val.clusterDim.y = Kernel::kClusterN;
  attr.val.clusterDim.z = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  if (!(Kernel::kTrace && (p.debug & 4))) return cuda_status(cudaLaunchKernelEx(&cfg, kernel, p), "launch");
  return launch_traced<Kernel>(cfg, kernel, p);
}

}  // namespace coda::sm90
