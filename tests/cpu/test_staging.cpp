// The epilogue's shared-memory staging addresses (coda/kernel/staging.hpp) against TMA's swizzle:
// every lane, warp, pair and row half, for every staged shape the kernel uses.
#include <gtest/gtest.h>

#include <vector>

#include "coda/epilogue/program.hpp"
#include "coda/kernel/staging.hpp"
#include "coda/ops/cross_entropy.hpp"
#include "coda/ops/rmsnorm.hpp"
#include "coda/ops/swiglu.hpp"

namespace coda {
namespace {

struct Shape {
  int per, es;  // columns per accumulator pair (1 half, 2 same, 4 double width), element bytes
};
// Every staged shape: same-width 16-bit and fp32 outputs and tiles, half-width and double-width ones.
const Shape kShapes[] = {{2, 2}, {2, 4}, {1, 2}, {1, 4}, {4, 2}, {4, 4}};

TEST(Staging, PairOffsetsMatchTheTmaSwizzle) {
  for (const Shape& s : kShapes)
    for (int warp = 0; warp < 4; ++warp)
      for (int lane = 0; lane < 32; ++lane) {
        const sm90::StageAddr a = sm90::stage_addr(lane, warp, s.per, s.es);
        const int q = lane % 4, lr0 = 16 * warp + lane / 4, cols = 32 * s.per;
        for (int jj = 0; jj < 8; ++jj)
          for (int b = 0; b < 2; ++b) {
            const int r = lr0 + 8 * b;
            const int c = s.per * q + 4 * s.per * jj;
            const uint32_t off = sm90::stage_off(a, jj, b, s.per, s.es);
            // the pair's columns: the next elements of the same 16-byte unit
            for (int x = 0; x < s.per; ++x)
              ASSERT_EQ(off + static_cast<uint32_t>(x * s.es),
                        static_cast<uint32_t>(sm90::stage_offset_ref(r, c + x, cols, s.es)))
                  << "per " << s.per << " es " << s.es << " warp " << warp << " lane " << lane << " jj " << jj
                  << " b " << b << " column " << x;
          }
      }
}

// stmatrix.x4 (sm90::stsm_off): row i of matrix m is written at the address lane 8 m + i gives, its
// 4-byte word t from register m of lane 4 i + t. Each thread's register m must land where its pair
// slot (jj0 + m / 2, m % 2) does in the 4-byte stores' layout.
TEST(Staging, MatrixStoresPutEveryPairWhereItsOwnStoreWould) {
  for (int warp = 0; warp < 4; ++warp)
    for (int jj0 = 0; jj0 < 8; jj0 += 2)
      for (int m = 0; m < 4; ++m)
        for (int i = 0; i < 8; ++i) {
          const uint32_t row_addr = sm90::stsm_off(sm90::stsm_lane_off(8 * m + i, warp), jj0);
          for (int t = 0; t < 4; ++t) {
            const int lane = 4 * i + t;
            const sm90::StageAddr a = sm90::stage_addr(lane, warp, 2, 2);
            ASSERT_EQ(row_addr + static_cast<uint32_t>(4 * t), sm90::stage_off(a, jj0 + m / 2, m % 2, 2, 2))
                << "warp " << warp << " jj0 " << jj0 << " matrix " << m << " row " << i << " word " << t;
          }
        }
}

TEST(Staging, EveryThreadWritesDistinctBytes) {
  // The 128 threads' pairs cover each staged chunk exactly once (a wrong swizzle would collide).
  for (const Shape& s : kShapes) {
    std::vector<int> hits(static_cast<size_t>(sm90::kStageRows * 32 * s.per * s.es), 0);
    for (int warp = 0; warp < 4; ++warp)
      for (int lane = 0; lane < 32; ++lane) {
        const sm90::StageAddr a = sm90::stage_addr(lane, warp, s.per, s.es);
        for (int jj = 0; jj < 8; ++jj)
          for (int b = 0; b < 2; ++b) {
            const uint32_t off = sm90::stage_off(a, jj, b, s.per, s.es);
            for (int x = 0; x < s.per * s.es; ++x) ++hits[off + static_cast<uint32_t>(x)];
          }
      }
    for (size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i], 1) << "per " << s.per << " es " << s.es << " byte " << i;
  }
}

// The GPU staging arena per warpgroup (epi::arena_bytes): two same-width 16-bit outputs, 8 KiB more
// per double-width output, less every output staged over a tile operand (epi::stage_in_tile); none
// when every output is stored from registers (epi::store_direct_all).
TEST(Staging, OutputsStagedOverTilesOrStoredDirectlyTakeNoArenaBytes) {
  using SB = programs::SwigluBackward;
  using RB = programs::RmsNormBackward;
  constexpr epi::Resources sb = SB::kResources, rb = RB::kResources;
  EXPECT_TRUE(epi::out_direct(sb, SB::kOutDz));  // dz and o from registers
  EXPECT_TRUE(epi::out_direct(sb, SB::kOutO));
  EXPECT_TRUE(epi::staging_free(sb));
  EXPECT_EQ(epi::out_tile(sb, SB::kOutDz), -1);
  EXPECT_EQ(epi::out_per(sb, SB::kOutDz), 4);
  EXPECT_EQ(epi::out_per(sb, SB::kOutO), 2);  // the kernel's static_assert: a direct output is not half width
  EXPECT_EQ(epi::out_tile(rb, RB::kOutDx), RB::kTileDres);
  EXPECT_EQ(epi::out_tile(rb, RB::kOutY), -1);
  EXPECT_FALSE(epi::out_direct(rb, RB::kOutDx));
  EXPECT_EQ(epi::out_per(rb, RB::kOutDx), epi::tile_per(rb, RB::kTileDres));
  EXPECT_EQ(epi::arena_bytes(sb), 0);     // nothing staged
  EXPECT_FALSE(epi::staging_free(rb));
  EXPECT_EQ(epi::arena_bytes(rb), 8192);   // y only (dx over dres)
  EXPECT_EQ(epi::arena_bytes(programs::ResidualRmsNormPartial::kResources), 16384);  // x and h staged
  EXPECT_EQ(epi::arena_bytes(programs::ResidualRmsNormPartialDirect::kResources), 0);  // x and h from registers
  EXPECT_EQ(epi::arena_bytes(programs::ResidualRmsNormPartialLongK::kResources), 8192);  // h (x over the residual)
  EXPECT_FALSE(epi::out_direct(programs::ResidualRmsNormPartialLongK::kResources, 0));
  EXPECT_TRUE(epi::staging_free(programs::LmHeadLse::kResources));
  EXPECT_EQ(epi::arena_bytes(programs::Swiglu::kResources), 16384);
  // One direct output: the others still staged.
  EXPECT_EQ(epi::arena_bytes(epi::store_direct(epi::Resources{0, 0, 0, 1, 0, 0, 0, 0, 1, 1}, 0)), 16384);
  // The same double-width output staged: 8 KiB more.
  EXPECT_EQ(epi::arena_bytes(epi::Resources{0, 0, 0, 1, 0, 0, 0, 0, 1, 1}), 24576);
  // Both outputs over tiles: the arena keeps its 1 KiB minimum.
  const epi::Resources both = epi::stage_in_tile(epi::stage_in_tile(epi::Resources{0, 0, 0, 2}, 0, 0), 1, 1);
  EXPECT_EQ(epi::out_tile(both, 0), 0);
  EXPECT_EQ(epi::out_tile(both, 1), 1);
  EXPECT_EQ(epi::arena_bytes(both), 1024);
}

}  // namespace
}  // namespace coda
