// GEMM configurations: the compile-time kernel variants coda ships and the runtime choices made on
// top of them (raster order, swizzle), as one printable struct.
#pragma once

#include <cstdint>
#include <string>

#include "coda/tensor.hpp"

namespace coda {

// Operand forms by memory layout (see ops/gemm.hpp):
//   kTN: a K-major, b K-major   forward   Y = X W^T
//   kTT: a K-major, b N-major   dgrad     dX = dY W
//   kNT: a M-major, b N-major   wgrad     dW = dY^T X
enum class GemmForm : int { kTN = 0, kTT = 1, kNT = 2 };
const char* form_name(GemmForm f);

// The compiled kernel variants (tile M x N x K, cluster, stages, consumer schedule; one producer
// warp issues TMA). Cooperative: two consumer warpgroups share each tile. Pingpong: each owns
// whole tiles and its epilogue overlaps the other's mainloop.
enum class KernelVariant : int {
  k128x256_c2x1 = 0,  // 128x256x64, cluster 2x1 (B multicast), 4 stages
  k256x128_c1x2 = 1,  // 256x128x64, cluster 1x2 (A multicast), 4 stages
  k128x128_pp_c2x1 = 2,  // 128x128x64 pingpong (each consumer warpgroup owns a tile), cluster 2x1, 6 stages
  kCount = 3,
};
const char* variant_name(KernelVariant v);
int variant_tile_m(KernelVariant v);
int variant_tile_n(KernelVariant v);

struct GemmConfig {
  KernelVariant variant = KernelVariant::k128x256_c2x1;
  int swizzle = 8;        // cluster tiles per raster band
  bool raster_n = false;  // false: bands of M rows (M fastest inside a band); true: bands of N columns
  std::string describe() const;
};

// The problem a config is chosen for.
struct GemmProblem {
  int64_t m = 0, n = 0, k = 0;
  GemmForm form = GemmForm::kTN;
  DType in = DType::kBF16;
  DType out = DType::kBF16;
  std::string op = "gemm";  // operator name (configs are cached per operator)
  int sm_count = 132;       // multiprocessors of the device (the heuristic balances waves)
  double dram_gbps = 0.0;   // the device memory's peak bandwidth, GB/s (0: unknown, an H200's rule)
  double epi_bytes = 0.0;   // fused programs: bytes the epilogue reads (tile operands) and writes
                            // (tile outputs) per accumulator element; 0 for a plain GEMM's rule
  std::string describe() const;
};

// The heuristic: a config from the shape alone.
GemmConfig choose_config(const GemmProblem& p);
// Beyond this K the cooperative 128x256 tile runs whatever the tile count (choose_config), fused
// programs included.
constexpr int64_t kPingpongMaxK = 32768;
// Devices with less memory bandwidth than this (GB/s: an H100's 3350 against an H200's 4800) take
// the cooperative tile for plain GEMMs unless the pingpong's tiles fill the last wave clearly better
// (choose_config; bench/NOTES.md 2026-12-05).
constexpr double kLeanDramGbps = 4500.0;
// Fused programs: the 128x128 pingpong kernel (its epilogue overlaps the other warpgroup's
// mainloop), the cooperative 128x256 one beyond kPingpongMaxK, and on devices under kLeanDramGbps
// also where the weight has more than kLeanFusedPingpongMaxWeight elements (N x K), unless the
// epilogue is heavy there (epi_bytes x kLeanHeavyEpilogueK >= K): that keeps the pingpong kernel,
// walking bands of two cluster rows. `forced` replaces the variant (the tile order follows it).
GemmConfig choose_fused_config(const GemmProblem& p, const KernelVariant* forced = nullptr);
constexpr int64_t kLeanFusedPingpongMaxWeight = int64_t{1} << 25;
constexpr double kLeanHeavyEpilogueK = 1200.0;

}  // namespace coda
