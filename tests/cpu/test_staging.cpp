// The epilogue's shared-memory staging addresses (coda/kernel/staging.hpp) against TMA's swizzle:
// every lane, warp, pair and row half, for every staged shape the kernel uses.
#include <gtest/gtest.h>

#include <vector>

#include "coda/kernel/staging.hpp"

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

}  // namespace
}  // namespace coda
