// The epilogue's shared-memory staging addresses (coda/kernel/staging.hpp) against TMA's swizzle:
// every lane, warp, pair and row half, for every staged shape the kernel uses.
#include <gtest/gtest.h>

#include <vector>

#include "coda/kernel/staging.hpp"

namespace coda {
namespace {

struct Shape {
  int cols, es;
  bool half;
};

TEST(Staging, PairOffsetsMatchTheTmaSwizzle) {
  // same-width 16-bit and fp32 outputs and tiles, half-width 16-bit and fp32 outputs
  for (const Shape& s : {Shape{64, 2, false}, Shape{64, 4, false}, Shape{32, 2, true}, Shape{32, 4, true}})
    for (int warp = 0; warp < 4; ++warp)
      for (int lane = 0; lane < 32; ++lane) {
        const sm90::StageAddr a = sm90::stage_addr(lane, warp, s.cols, s.es, s.half);
        const int q = lane % 4, lr0 = 16 * warp + lane / 4;
        for (int jj = 0; jj < 8; ++jj)
          for (int b = 0; b < 2; ++b) {
            const int r = lr0 + 8 * b;
            const int c = s.half ? q + 4 * jj : 2 * q + 8 * jj;
            const uint32_t off = sm90::stage_off(a, jj, b, s.cols, s.es, s.half);
            ASSERT_EQ(off, static_cast<uint32_t>(sm90::stage_offset_ref(r, c, s.cols, s.es)))
                << "cols " << s.cols << " es " << s.es << " warp " << warp << " lane " << lane << " jj " << jj
                << " b " << b;
            if (!s.half) {  // the pair's second column: the next element of the same 16-byte unit
              ASSERT_EQ(off + static_cast<uint32_t>(s.es),
                        static_cast<uint32_t>(sm90::stage_offset_ref(r, c + 1, s.cols, s.es)));
            }
          }
      }
}

TEST(Staging, EveryThreadWritesDistinctBytes) {
  // The 128 threads' pairs cover each staged chunk exactly once (a wrong swizzle would collide).
  for (const Shape& s : {Shape{64, 2, false}, Shape{64, 4, false}, Shape{32, 2, true}, Shape{32, 4, true}}) {
    std::vector<int> hits(static_cast<size_t>(sm90::kStageRows * s.cols * s.es), 0);
    for (int warp = 0; warp < 4; ++warp)
      for (int lane = 0; lane < 32; ++lane) {
        const sm90::StageAddr a = sm90::stage_addr(lane, warp, s.cols, s.es, s.half);
        for (int jj = 0; jj < 8; ++jj)
          for (int b = 0; b < 2; ++b) {
            const uint32_t off = sm90::stage_off(a, jj, b, s.cols, s.es, s.half);
            for (int x = 0; x < (s.half ? 1 : 2) * s.es; ++x) ++hits[off + static_cast<uint32_t>(x)];
          }
      }
    for (size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i], 1) << "cols " << s.cols << " es " << s.es << " byte " << i;
  }
}

}  // namespace
}  // namespace coda
