// The emulated fused LLaMA-3 block (forward and backward) against the unfused float64 block,
// under design.md's tolerance rule, at the embedded default size and at awkward ones.
#include <gtest/gtest.h>

#include "coda/ref/block_check.hpp"
#include "util.hpp"

namespace coda {
namespace {

void expect_block_ok(const Llama3Dims& d, const emu::EmuConfig& cfg, double eps = 1e-4, bool keep_y1 = false) {
  const uint64_t seed = test::seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (replay with CODA_TEST_SEED)");
  const BlockCheckResult r = check_llama3_block_emulated(d, seed, cfg, eps, keep_y1);
  ASSERT_TRUE(r.error.empty()) << r.error;
  ASSERT_EQ(r.rows.size(), keep_y1 ? 15u : 14u);
  for (const ErrorRow& row : r.rows) {
    EXPECT_TRUE(row.ok) << row.op << " -> " << row.output << ": fused " << row.fused << " > bound " << row.bound
                        << " (unfused " << row.unfused << ")";
    EXPECT_GT(row.unfused, 0.0) << row.output << ": the yardstick must measure something";
  }
  EXPECT_TRUE(r.ok);
}

TEST(Block, DefaultConfigForwardAndBackward) { expect_block_ok(default_check_dims(), {}); }

// The SwiGLU output kept by the forward (Llama3Activations::y1): checked as an output, and the
// backward's dWdown from it instead of the SwiGLU backward's recomputed copy.
TEST(Block, KeptSwigluOutput) {
  Llama3Dims d = default_check_dims();
  d.tokens = 45;
  expect_block_ok(d, emu::EmuConfig{16, 64}, 1e-4, true);
}

TEST(Block, SmallTilesManyGranules) {
  Llama3Dims d = default_check_dims();
  d.tokens = 45;
  expect_block_ok(d, emu::EmuConfig{16, 64});
}

TEST(Block, SingleToken) {
  Llama3Dims d;
  d.tokens = 1;
  d.hidden = 64;
  d.ffn = 96;
  d.heads = HeadDims{2, 1, 32};
  // One token: every output is a handful of independent bf16 rounding draws (r1 and r2 are one
  // value each, dWdown and the norm-weight gradients are outer products or copies of one row), so
  // the fused error can sit well above twice the unfused one by chance; design.md's small epsilon
  // has to cover a draw's noise. Over 40,000 seeds at this shape the worst seed needed an epsilon
  // of 1.7e-3 (r2, the one rstd) and 1.2e-3 (dWdown, dnorm1); the matrices' fused errors sit at
  // 3e-3 to 8e-3. 1e-3 failed 1 seed in 2,000 (CI, 2026-12-06). 4e-3 leaves a wide margin and
  // still fails an rstd 1% off (an error of 1e-2); the bugs the block check is for (a partial row,
  // a missing residual, a swapped gate) are larger.
  expect_block_ok(d, emu::EmuConfig{8, 32}, 4e-3);
}

TEST(Block, EmptyBatchIsANoOp) {
  Llama3Dims d = default_check_dims();
  d.tokens = 0;
  const BlockCheckResult r = check_llama3_block_emulated(d, 1);
  EXPECT_TRUE(r.error.empty()) << r.error;
}

}  // namespace
}  // namespace coda
