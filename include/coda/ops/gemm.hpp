// Plain GEMM and the linear-combination epilogue: D = alpha * (A B^T) + beta * C.
//
// Operand forms (all through strides, no copies):
//   forward  Y  = X W^T : a = X [M, K] row-major,        b = W [N, K] row-major
//   dgrad    dX = dY W  : a = dY [M, K] row-major,       b = W^T, i.e. W [K, N] viewed as [N, K]
//   wgrad    dW = dY^T X: a = dY^T ([K, M] viewed),      b = X^T ([K, N] viewed)
#pragma once

#include "coda/epilogue/program.hpp"
#include "coda/ops/common.hpp"

namespace coda {

struct GemmArgs {
  TensorView a;  // [M, K] bf16 | fp16, one unit stride, 16-byte aligned leading stride
  TensorView b;  // [N, K] same dtype as a
  TensorView c;  // optional [M, N] bf16 | fp16 | fp32, row-major, 16-byte aligned rows
  TensorView d;  // [M, N] bf16 | fp16 | fp32, row-major, 16-byte aligned rows
  float alpha = 1.0f;
  float beta = 0.0f;
  // When set, the scalars are read from these (device) pointers at run time instead.
  const float* alpha_ptr = nullptr;
  const float* beta_ptr = nullptr;
};

Status validate(const GemmArgs& args);
// gemm_row_scale: d [M, N] = diag(row_scale [M] fp32) (a b^T).
Status validate_gemm_row_scale(const TensorView& a, const TensorView& b, const TensorView& row_scale,
                               const TensorView& d);

namespace programs {

// The empty program: D = acc.
struct Identity {
  static constexpr int kOutD = 0;
  template <class Ctx>
  CODA_HD void operator()(epi::Frag& f, Ctx& ctx) const {
    epi::store(f, ctx, kOutD);
  }
};

// D = alpha * acc + beta * C.
struct LinearCombination {
  static constexpr int kAlpha = 0, kBeta = 1;  // scalars
  static constexpr int kTileC = 0;             // tiles
  static constexpr int kOutD = 0;              // outputs
  static constexpr uint32_t kHasC = 1;         // flags
  static constexpr int kFlagBits = 1;
  // C read from global memory in the visit; one chunk per visit (two spilled 40 bytes)
  static constexpr epi::Resources kResources = epi::one_chunk_visits({});
  uint32_t flags = 0;

  template <class Ctx>
  CODA_HD void operator()(epi::Frag& f, Ctx& ctx) const {
    epi::scale(f, ctx.scalar(kAlpha));
    if (flags & kHasC) epi::add_tile(f, ctx, kTileC, ctx.scalar(kBeta));
    epi::store(f, ctx, kOutD);
  }
};

// D = v[m] * acc: a per-row scale (lm_head_backward's dgrad, da = diag(s) (grad b)).
struct RowScale {
  static constexpr int kRowScale = 0;  // rows
  static constexpr int kOutD = 0;
  template <class Ctx>
  CODA_HD void operator()(epi::Frag& f, Ctx& ctx) const {
    epi::row_mul(f, ctx, kRowScale);
    epi::store(f, ctx, kOutD);
  }
};

}  // namespace programs
}  // namespace coda
