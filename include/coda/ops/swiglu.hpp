// SwiGLU with interleaved gate/up (coda-math.md 5.3).
//
// The fused gate/up weight has rows interleaved, Wgu[2i] = Wgate[i], Wgu[2i+1] = Wup[i], so the
// GEMM's columns (2i, 2i+1) are (g_i, u_i): o_i = silu(g_i) u_i is a 2->1 pairwise op.
// Backward is the epilogue of do = dY Wdown: 1->2 from do_i and the stored pair (g_i, u_i).
#pragma once

#include "coda/epilogue/program.hpp"
#include "coda/ops/common.hpp"

namespace coda {

// gemm_swiglu (no rstd) and gemm_rmsnorm_swiglu (rows scaled by rstd first).
struct SwigluArgs {
  TensorView a;      // [M, K]
  TensorView b;      // [2F, K] interleaved gate/up weight
  TensorView rstd;   // optional [M] fp32: z = rstd * acc (RMSNorm of the GEMM input, 5.1)
  TensorView z_out;  // optional [M, 2F] pre-activation, interleaved (saved for backward)
  TensorView o_out;  // [M, F] silu(g) * u
};
Status validate(const SwigluArgs& args);

struct SwigluBackwardArgs {
  TensorView a;             // [M, K]  dY (gradient of the down projection's output)
  TensorView b;             // [F, K]  Wdown [K, F] viewed as [F, K]
  TensorView z;             // [M, 2F] saved interleaved pre-activation
  TensorView dz_out;        // [M, 2F] interleaved (dg, du)
  TensorView o_out;         // optional [M, F] silu(g) u recomputed (for dWdown = dY^T o)
  TensorView zdz_partials;  // optional [M, ceil(F / grain.cols)] fp32: sum of g dg + u du
};
Status validate(const SwigluBackwardArgs& args, const Grain& grain = {});

// The weight layout gemm_swiglu expects: out [2F, K] = rows gate[0], up[0], gate[1], up[1], ...
// (interleave_gate_up). gate and up [F, K], one dtype, row-major; out must not overlap them.
Status validate_interleave_gate_up(const TensorView& gate, const TensorView& up, const TensorView& out);

namespace programs {

struct Swiglu {
  static constexpr int kRowRstd = 0;
  static constexpr int kOutO = 0, kOutZ = 1;  // the optional output last: staging is sized to the last used slot
  static constexpr epi::Resources kResources{0, 0, 0, 0, 1 << kOutO};  // o is half-width
  static constexpr uint32_t kHasRstd = 1, kHasZ = 2;  // flags
  static constexpr int kFlagBits = 2;
  uint32_t flags = 0;

  template <class Ctx>
  CODA_HD void operator()(epi::Frag& f, Ctx& ctx) const {
    if (flags & kHasRstd) epi::row_mul(f, ctx, kRowRstd);
    if (flags & kHasZ) epi::store(f, ctx, kOutZ);
    ctx.store(kOutO, f, f.n / 2, epi::swiglu(f.v[0], f.v[1]));  // N is even: ok[1] holds
  }
};

struct SwigluBackward {
  static constexpr int kTileZ = 0;
  static constexpr int kOutDz = 0, kOutO = 1;
  static constexpr int kRowZdZ = 0;
  // ZdZ row partials; z staged by TMA; z and dz twice the accumulator's width; dz and o stored from
  // registers (epi::store_direct_all): no staging, so z's ring gets two slots and the next chunk's
  // z loads while this one is visited
  static constexpr epi::Resources kResources =
      epi::store_direct_all({1, 0, 0, 1, 0, 0, 0, 0, 1 << kTileZ, 1 << kOutDz});
  static constexpr uint32_t kHasO = 1, kHasZdZ = 2;  // flags
  static constexpr int kFlagBits = 2;
  uint32_t flags = 0;

  template <class Ctx>
  CODA_HD void operator()(epi::Frag& f, Ctx& ctx) const {
    float zdz = 0.0f, o[2] = {0.0f, 0.0f};
    CODA_UNROLL
    for (int j = 0; j < 2; ++j) {
      if (!f.ok[j]) continue;
      const int n = f.n + j;
      const epi::Pair z = ctx.tile2(kTileZ, f, 2 * n);  // (g, u) at columns 2n, 2n + 1: one load
      const epi::SwigluGrad d = epi::swiglu_grad(z.v0, z.v1, f.v[j]);
      ctx.store2(kOutDz, f, 2 * n, d.dg, d.du);  // one packed store
      o[j] = d.o;
      zdz += d.zdz;
    }
    if (flags & kHasO) epi::store_pair(f, ctx, kOutO, o[0], o[1]);
    if (flags & kHasZdZ) ctx.row_sum(kRowZdZ, f, zdz);
  }
};

}  // namespace programs
}  // namespace coda
