// The GEMM heuristic's variant choice (choose_config), pinned to what was measured on an H200
// (`coda bench --variants gemm.`, bench/NOTES.md 2026-12-02): the pingpong tile for K <= 4096 and
// wherever it has at least two tiles per warpgroup (up to K = 32768); the cooperative 128x256 tile
// for long-K problems with fewer tiles or K > 32768, unless the pingpong's tiles fill the last wave
// clearly better.
#include <gtest/gtest.h>

#include "coda/kernel/config.hpp"

namespace coda {
namespace {

KernelVariant variant_for(int64_t m, int64_t n, int64_t k, GemmForm form = GemmForm::kTN, int sms = 132) {
  GemmProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.form = form;
  p.sm_count = sms;
  return choose_config(p).variant;
}

constexpr KernelVariant kCoop = KernelVariant::k128x256_c2x1, kPingpong = KernelVariant::k128x128_pp_c2x1;

TEST(ChooseConfig, PingpongUpToK4096) {
  EXPECT_EQ(variant_for(16384, 2048, 2048), kPingpong);     // 1B o-proj
  EXPECT_EQ(variant_for(8192, 28672, 4096), kPingpong);     // 8B gate/up
  EXPECT_EQ(variant_for(2048, 2048, 4096), kPingpong);      // few tiles, short K
  EXPECT_EQ(variant_for(16384, 128256, 2048), kPingpong);   // LM head
}

TEST(ChooseConfig, PingpongAtLongKWithTwoTilesPerWarpgroup) {
  // 8B gate/up weight gradient: 1.004x cuBLAS pingpong, 1.049x cooperative (H200, b387dca).
  EXPECT_EQ(variant_for(28672, 4096, 8192, GemmForm::kNT), kPingpong);
  EXPECT_EQ(variant_for(4096, 14336, 8192, GemmForm::kNT), kPingpong);  // 8B down wgrad
  EXPECT_EQ(variant_for(8192, 4096, 6144, GemmForm::kTT), kPingpong);   // 8B QKV dgrad
  EXPECT_EQ(variant_for(8192, 8192, 8192), kPingpong);                  // square8192
  EXPECT_EQ(variant_for(8192, 4096, 14336), kPingpong);                 // 8B down: 2048 tiles
  // Exactly 4 pingpong tiles per SM is enough; one tile fewer is not (the wave rule decides).
  EXPECT_EQ(variant_for(128 * 33, 128 * 16, 8192, GemmForm::kTN, 132), kPingpong);
  EXPECT_EQ(variant_for(128 * 32, 128 * 16, 8192, GemmForm::kTN, 132), kCoop);
}

TEST(ChooseConfig, CooperativeForFewLongKTiles) {
  // 1B o-proj weight gradient (2048 x 2048, K 16384): 1.023x cooperative, 1.075x pingpong.
  EXPECT_EQ(variant_for(2048, 2048, 16384, GemmForm::kNT), kCoop);
  // ... unless the pingpong's tiles fill the last wave clearly better (1B QKV wgrad: 384 pingpong
  // tiles fill 97% of three waves, 192 cooperative ones 73% of two).
  EXPECT_EQ(variant_for(3072, 2048, 16384, GemmForm::kNT), kPingpong);
}

TEST(ChooseConfig, CooperativeBeyondK32768) {
  // The LM head's dgrad (K = V = 128256): pingpong 1.04-1.23x cuBLAS over four processes,
  // cooperative 0.995-1.006x (H200, 2026-12-02 afternoon), though it has 2048 pingpong tiles.
  EXPECT_EQ(variant_for(16384, 2048, 128256, GemmForm::kTT), kCoop);
  EXPECT_EQ(variant_for(8192, 4096, 32768, GemmForm::kTT), kPingpong);  // up to 32768: tile count
  EXPECT_EQ(variant_for(8192, 4096, 32832, GemmForm::kTT), kCoop);
  // Its weight gradient (K = 16384) stays pingpong: 0.996-1.008x against 1.010-1.014x.
  EXPECT_EQ(variant_for(128256, 2048, 16384, GemmForm::kNT), kPingpong);
}

}  // namespace
}  // namespace coda
