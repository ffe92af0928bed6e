// RMSNorm split across two GEMMs (coda-math.md 5.1) and its backward (5.2).
//
// Producer:  x = alpha * A W^T (+ residual)   stored, h = x * w stored, P[m, t] = sum x^2 (fp32)
// Finish:    r[m] = rsqrt(sum_t P[m, t] / d + eps)
// Consumer:  any GEMM whose program multiplies rows by r (gemm_rmsnorm_swiglu, gemm_rmsnorm_rope,
//            gemm_rmsnorm_lse), i.e. RMSNorm(x) W^T = diag(r) ((x * w) W^T).
// Backward:  epilogue of dy = dz W: dx = r (dy w - xh c) (+ dres), y = xh w, dw partials of dy xh,
//            with xh = x r and c = ZdZ (from the kernel that produced dz).
#pragma once

#include "coda/epilogue/program.hpp"
#include "coda/ops/common.hpp"

namespace coda {

struct ResidualRmsNormPartialArgs {
  TensorView a;            // [M, K]
  TensorView b;            // [N, K]
  TensorView residual;     // optional [M, N] (any float dtype)
  TensorView norm_weight;  // [N] bf16 | fp16 | fp32
  TensorView x_out;        // [M, N] x = alpha * acc + residual
  TensorView h_out;        // [M, N] h = x * norm_weight
  TensorView partials;     // [M, ceil(N / grain.cols)] fp32, sum of x^2 per column granule
  float alpha = 1.0f;
};
Status validate(const ResidualRmsNormPartialArgs& args, const Grain& grain = {});

struct RmsFinishArgs {
  TensorView partials;  // [M, T] fp32
  TensorView rstd_out;  // [M] fp32
  int64_t dim = 0;      // d, the number of columns the partials cover
  float eps = 1e-5f;
};
Status validate(const RmsFinishArgs& args);

struct RmsNormBackwardArgs {
  TensorView a;            // [M, K]  dz (gradient of the consuming GEMM's output)
  TensorView b;            // [N, K]  the consuming GEMM's weight viewed as [d, K] (W^T)
  TensorView x;            // [M, N]  the normalized tensor's input (saved x)
  TensorView rstd;         // [M] fp32
  TensorView zdz;          // [M] fp32, c = (1/d) sum_k z dz
  TensorView norm_weight;  // [N]
  TensorView dres;         // optional [M, N] gradient arriving through the residual (added to dx)
  TensorView dx_out;       // [M, N]  may be the same view as dres (in-place accumulate)
  TensorView y_out;        // optional [M, N] y = x r w recomputed (for the weight gradient)
  TensorView dw_partials;  // [ceil(M / grain.rows), N] fp32, per row granule sum of dy * x r
};
Status validate(const RmsNormBackwardArgs& args, const Grain& grain = {});

// out[m] = scale * sum_t P[m, t]   (ZdZ from per-row partials)
struct RowSumFinishArgs {
  TensorView partials;  // [M, T] fp32
  TensorView out;       // [M] fp32
  float scale = 1.0f;
};
Status validate(const RowSumFinishArgs& args);

// out[n] = sum_t Q[t, n]   (norm-weight gradient from per-column partials)
struct ColSumFinishArgs {
  TensorView partials;  // [T, N] fp32
  TensorView out;       // [N] bf16 | fp16 | fp32
};
Status validate(const ColSumFinishArgs& args);

namespace programs {

struct ResidualRmsNormPartial {
  static constexpr int kAlpha = 0;            // scalars
  static constexpr int kTileResidual = 0;     // tiles
  static constexpr int kColNormWeight = 0;    // column vectors
  static constexpr int kOutX = 0, kOutH = 1;  // outputs
  static constexpr int kRowSumSq = 0;         // row partials
  // a row sum; the residual via TMA; w; x and h staged and stored by TMA. The host picks this
  // instance for K < 4096 with 16-bit outputs, ResidualRmsNormPartialLongK for K >= 4096 and
  // ResidualRmsNormPartialDirect for fp32 outputs (which do not fit the staging arena).
  // NOTES: staged and direct traded places twice: stores from registers won (217-222 us against
  // 233-240 us, 1B o-proj, 2026-12-02 day) while each chunk's publish step ran a runtime loop;
  // with the publish unrolled (3f03a3f) staging won back (bench/NOTES.md 2026-12-03 evening).
  static constexpr epi::Resources kResources{1, 0, 0, 1, 0, 1};
  static constexpr uint32_t kHasResidual = 1;  // flags
  static constexpr int kFlagBits = 1;
  uint32_t flags = 0;

  template <class Ctx>
  CODA_HD void operator()(epi::Frag& f, Ctx& ctx) const {
    epi::scale(f, ctx.scalar(kAlpha));
    if (flags & kHasResidual) epi::add_tile(f, ctx, kTileResidual);
    epi::store(f, ctx, kOutX);
    epi::row_sum_squares(f, ctx, kRowSumSq);  // from fp32 x, before rounding
    epi::col_mul(f, ctx, kColNormWeight);
    epi::store(f, ctx, kOutH);
  }
};

// The same program with x and h stored from registers (epi::store_direct_all): fp32 outputs, whose
// chunks do not fit the staging arena.
struct ResidualRmsNormPartialDirect : ResidualRmsNormPartial {
  static constexpr epi::Resources kResources = epi::store_direct_all(ResidualRmsNormPartial::kResources);
};

// The same program for long K (the host picks it for K >= kMinK with 16-bit outputs): x staged over
// the residual's ring slot (each pair reads its residual before it writes its x), which leaves the
// residual one slot and the mainloop a sixth stage. NOTES: 8B o-proj (K = 4096) 1.063 -> 1.046x,
// 1B o-proj (K = 2048) 1.19 -> 1.21-1.25x (H200, 94bd9af): the next chunk's residual load then
// waits for the stores to read the slot, a wait hidden only where the mainloop is long.
struct ResidualRmsNormPartialLongK : ResidualRmsNormPartial {
  static constexpr int64_t kMinK = 4096;
  static constexpr epi::Resources kResources =
      epi::stage_in_tile(ResidualRmsNormPartial::kResources, kOutX, kTileResidual);
};

struct RmsNormBackward {
  static constexpr int kRowRstd = 0, kRowZdZ = 1;  // row vectors
  static constexpr int kColNormWeight = 0;         // column vectors
  static constexpr int kTileX = 0, kTileDres = 1;  // tiles
  static constexpr int kOutDx = 0, kOutY = 1;      // outputs
  static constexpr int kColDw = 0;                 // column partials
  // x and dres staged by TMA; the norm weight; the dw column partials; dx staged over dres (each
  // pair reads its dres before it writes its dx)
  static constexpr epi::Resources kResources =
      epi::one_chunk_visits(epi::stage_in_tile({0, 0, 0, 2, 0, 1, 0, 1}, kOutDx, kTileDres));
  static constexpr uint32_t kHasDres = 1, kHasY = 2;  // flags
  static constexpr int kFlagBits = 2;
  uint32_t flags = 0;

  template <class Ctx>
  CODA_HD void operator()(epi::Frag& f, Ctx& ctx) const {
    const float r = ctx.row(kRowRstd, f);
    const float c = ctx.row(kRowZdZ, f);
    const epi::Pair x = epi::tile_pair(f, ctx, kTileX);  // both columns in one load each
    const epi::Pair dres = flags & kHasDres ? epi::tile_pair(f, ctx, kTileDres) : epi::Pair{0.0f, 0.0f};
    float dx[2] = {0.0f, 0.0f}, y[2] = {0.0f, 0.0f};
    CODA_UNROLL
    for (int j = 0; j < 2; ++j) {
      if (!f.ok[j]) continue;
      const int n = f.n + j;
      const float dy = f.v[j];
      const float xh = (j == 0 ? x.v0 : x.v1) * r;
      const float w = ctx.col(kColNormWeight, f, n);
      dx[j] = epi::rmsnorm_dx(dy, xh, r, w, c);
      if (flags & kHasDres) dx[j] += j == 0 ? dres.v0 : dres.v1;
      y[j] = xh * w;
      ctx.col_sum(kColDw, f, n, dy * xh);
    }
    epi::store_pair(f, ctx, kOutDx, dx[0], dx[1]);  // one packed store per output
    if (flags & kHasY) epi::store_pair(f, ctx, kOutY, y[0], y[1]);
  }
};

}  // namespace programs
}  // namespace coda
