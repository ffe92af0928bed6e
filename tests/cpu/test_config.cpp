// The GEMM heuristic's variant choice (choose_config), pinned to what was measured on an H200
// (`coda bench --variants gemm.`, bench/NOTES.md 2026-12-02): the pingpong tile for K <= 4096 and
// wherever it has at least two tiles per warpgroup (up to K = 32768); the cooperative 128x256 tile
// for long-K problems with fewer tiles or K > 32768, unless the pingpong's tiles fill the last wave
// clearly better. On devices with less memory bandwidth (kLeanDramGbps: an H100) the cooperative tile
// unless the pingpong's tiles fill the last wave clearly better (H100, 2026-12-05).
#include <gtest/gtest.h>

#include <array>

#include "coda/kernel/config.hpp"

namespace coda {
namespace {

KernelVariant variant_for(int64_t m, int64_t n, int64_t k, GemmForm form = GemmForm::kTN, int sms = 132,
                          double dram_gbps = 0.0) {
  GemmProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.form = form;
  p.sm_count = sms;
  p.dram_gbps = dram_gbps;
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

// An H100's memory (3350 GB/s, under kLeanDramGbps): the cooperative tile unless the pingpong's
// tiles fill the last wave clearly better (H100, `coda bench --variants gemm.` at 4ca1a55).
KernelVariant h100_variant(int64_t m, int64_t n, int64_t k, GemmForm form = GemmForm::kTN) {
  return variant_for(m, n, k, form, 132, 3350.0);
}

TEST(ChooseConfig, LeanMemoryDevicesTakeTheCooperativeTile) {
  EXPECT_EQ(h100_variant(8192, 4096, 28672, GemmForm::kTT), kCoop);    // 8B gate/up dgrad: 1.003 against 1.549
  EXPECT_EQ(h100_variant(16384, 128256, 2048), kCoop);                 // LM head: 1.127 against 1.607
  EXPECT_EQ(h100_variant(128256, 2048, 16384, GemmForm::kNT), kCoop);  // LM head wgrad: 0.998 against 1.917
  EXPECT_EQ(h100_variant(16384, 2048, 2048), kCoop);                   // 1B o-proj: 1.034 against 1.118
  // ... unless the pingpong's tiles fill the last wave clearly better: 1B QKV wgrad 1.023 against 1.323.
  EXPECT_EQ(h100_variant(3072, 2048, 16384, GemmForm::kNT), kPingpong);
  // Beyond K = 32768 the long-K rule, as on any device.
  EXPECT_EQ(h100_variant(16384, 2048, 128256, GemmForm::kTT), kCoop);
}

TEST(ChooseConfig, TheH200RuleWhereTheBandwidthIsUnknownOrHigh) {
  for (double gbps : {0.0, 4800.0, 4500.0}) {
    EXPECT_EQ(variant_for(8192, 4096, 28672, GemmForm::kTT, 132, gbps), kPingpong) << gbps;
    EXPECT_EQ(variant_for(16384, 128256, 2048, GemmForm::kTN, 132, gbps), kPingpong) << gbps;
    EXPECT_EQ(variant_for(2048, 2048, 16384, GemmForm::kNT, 132, gbps), kCoop) << gbps;
  }
}

TEST(ChooseConfig, TheLeanMemoryRuleKeepsTheTileOrder) {
  // Only the variant changes: the swizzle and raster are those of the H200 rule (what was measured).
  for (const auto& s : {std::array<int64_t, 3>{16384, 128256, 2048}, std::array<int64_t, 3>{8192, 28672, 4096},
                        std::array<int64_t, 3>{16384, 2048, 2048}}) {
    GemmProblem a, b;
    a.m = b.m = s[0];
    a.n = b.n = s[1];
    a.k = b.k = s[2];
    b.dram_gbps = 3350.0;
    const GemmConfig ca = choose_config(a), cb = choose_config(b);
    EXPECT_EQ(ca.swizzle, cb.swizzle);
    EXPECT_EQ(ca.raster_n, cb.raster_n);
  }
}

// Fused programs (choose_fused_config): the pingpong kernel up to kPingpongMaxK on an H200-class
// device; on an H100-class one the cooperative kernel where the weight is large (H100, `coda bench
// --variants op. lmhead. block.` at 4ca1a55).
GemmConfig fused_config(int64_t m, int64_t n, int64_t k, double dram_gbps = 0.0,
                        const KernelVariant* forced = nullptr, double epi_bytes = 0.0) {
  GemmProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.dram_gbps = dram_gbps;
  p.epi_bytes = epi_bytes;
  return choose_fused_config(p, forced);
}

TEST(ChooseFusedConfig, PingpongUpToTheLongKRuleOnAnH200) {
  for (double gbps : {0.0, 4800.0}) {
    EXPECT_EQ(fused_config(16384, 2048, 2048, gbps).variant, kPingpong) << gbps;     // 1B o-proj
    EXPECT_EQ(fused_config(16384, 128256, 2048, gbps).variant, kPingpong) << gbps;   // LM head
    EXPECT_EQ(fused_config(8192, 4096, 28672, gbps).variant, kPingpong) << gbps;     // 8B gate/up dgrad
    EXPECT_EQ(fused_config(16384, 2048, 128256, gbps).variant, kCoop) << gbps;       // beyond kPingpongMaxK
  }
}

TEST(ChooseFusedConfig, LargeWeightsTakeTheCooperativeKernelOnAnH100) {
  const double h100 = 3350.0;
  EXPECT_EQ(fused_config(16384, 128256, 2048, h100).variant, kCoop);   // LM head: 1.368 against 1.961
  EXPECT_EQ(fused_config(8192, 28672, 4096, h100).variant, kCoop);     // 8B gate/up: 1.129 against 1.255
  EXPECT_EQ(fused_config(8192, 4096, 14336, h100).variant, kCoop);     // 8B down: 1.058 against 1.088
  EXPECT_EQ(fused_config(8192, 4096, 28672, h100).variant, kCoop);     // RMSNorm backward 8B gate/up
  EXPECT_EQ(fused_config(16384, 2048, 2048, h100).variant, kPingpong);   // 1B o-proj: 1.198 against 1.352
  EXPECT_EQ(fused_config(16384, 16384, 2048, h100).variant, kPingpong);  // 1B gate/up, N x K = 2^25
  EXPECT_EQ(fused_config(8192, 6144, 4096, h100).variant, kPingpong);    // 8B QKV
  EXPECT_EQ(fused_config(8192, 4096, 4096, h100).variant, kPingpong);    // 8B o-proj
}

// The epilogue's bytes per accumulator element against K (kLeanHeavyEpilogueK): where they are many,
// the pingpong kernel stays on an H100 too, in row bands of two cluster rows (H100, three
// alternating rounds at 31564f3).
TEST(ChooseFusedConfig, HeavyEpiloguesKeepThePingpongInRowBandsOnAnH100) {
  const double h100 = 3350.0;
  for (const auto& s : {std::array<int64_t, 3>{16384, 128256, 2048},    // LM head, logits: 2 bytes
                        std::array<int64_t, 3>{8192, 14336, 4096}}) {   // SwiGLU backward 8B: 10 bytes
    const GemmConfig c = fused_config(s[0], s[1], s[2], h100, nullptr, s[2] == 2048 ? 2.0 : 10.0);
    EXPECT_EQ(c.variant, kPingpong) << s[1];
    EXPECT_FALSE(c.raster_n) << s[1];
    EXPECT_EQ(c.swizzle, 2) << s[1];
  }
  EXPECT_EQ(fused_config(16384, 128256, 2048, h100, nullptr, 0.0).variant, kCoop);   // logits-free LM head
  EXPECT_EQ(fused_config(8192, 28672, 4096, h100, nullptr, 3.0).variant, kCoop);    // 8B gate/up: o and z
  EXPECT_EQ(fused_config(8192, 4096, 14336, h100, nullptr, 6.0).variant, kCoop);    // 8B down
  EXPECT_EQ(fused_config(8192, 4096, 28672, h100, nullptr, 8.0).variant, kCoop);     // RMSNorm backward 8B
  // An H200 keeps its rule (pingpong, its own tile order) whatever the epilogue.
  const GemmConfig h200 = fused_config(16384, 128256, 2048, 0.0, nullptr, 2.0);
  EXPECT_EQ(h200.variant, kPingpong);
  EXPECT_EQ(h200.swizzle, fused_config(16384, 128256, 2048, 0.0).swizzle);
  EXPECT_EQ(h200.raster_n, fused_config(16384, 128256, 2048, 0.0).raster_n);
}

TEST(ChooseFusedConfig, TheCooperativeTileOrderAndForcedVariants) {
  const GemmConfig lm = fused_config(16384, 128256, 2048, 3350.0);
  EXPECT_EQ(lm.swizzle, 8);
  EXPECT_TRUE(lm.raster_n);  // 501 column tiles of 256 against 128 row tiles
  const KernelVariant coop = kCoop, pp = kPingpong;
  const GemmConfig forced_coop = fused_config(16384, 2048, 2048, 0.0, &coop);
  EXPECT_EQ(forced_coop.variant, kCoop);
  EXPECT_EQ(forced_coop.swizzle, 8);
  EXPECT_FALSE(forced_coop.raster_n);
  const GemmConfig forced_pp = fused_config(16384, 128256, 2048, 3350.0, &pp);
  EXPECT_EQ(forced_pp.variant, kPingpong);
  EXPECT_FALSE(forced_pp.raster_n);  // the lean-memory pingpong order for a large weight
  EXPECT_EQ(forced_pp.swizzle, 2);
}

}  // namespace
}  // namespace coda
