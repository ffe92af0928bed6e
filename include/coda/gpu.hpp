// The GPU entry points (sm_90a). Each validates its arguments (the same validate() as the CPU
// emulator), chooses a config and launches on `stream`; nothing is written when validation fails.
#pragma once

#include <cuda_runtime_api.h>

#include "coda/kernel/config.hpp"
#include "coda/ops.hpp"

namespace coda {

// D = A B^T (the empty epilogue program) when args.c is absent, alpha == 1 and no scalar pointers
// are given; otherwise D = alpha A B^T + beta C.
Status gemm(const GemmArgs& args, cudaStream_t stream = nullptr);

// The config gemm() would use for this call (heuristic, or the autotune cache with
// CODA_AUTOTUNE=1), without launching. Fails like gemm() on bad arguments.
Status gemm_config(const GemmArgs& args, GemmConfig* config);

// Run gemm() with an explicit config (benchmarks and tests).
Status gemm_with_config(const GemmArgs& args, const GemmConfig& config, cudaStream_t stream = nullptr);

// ---- forward fused operators (docs/ops.md) ---------------------------------------------------------
// GEMM operands in the forward form: a [M, K] and b [N, K], both row-major (K-major); bf16 or fp16.
// The tile outputs of one operator share a dtype. Partials use CODA_PARTIAL_COLS-column granules.

// x = alpha A W^T (+ residual), h = x * norm_weight, partials[m, t] = sum of x^2 over granule t.
Status gemm_residual_rmsnorm_partial(const ResidualRmsNormPartialArgs& args, cudaStream_t stream = nullptr);
// rstd[m] = 1 / sqrt(sum_t partials[m, t] / dim + eps)
Status rms_finish(const RmsFinishArgs& args, cudaStream_t stream = nullptr);
// z = (rstd *) A Wgu^T (interleaved gate/up), o = silu(z[2i]) z[2i+1]. gemm_swiglu takes rstd as
// optional; gemm_rmsnorm_swiglu requires it.
Status gemm_swiglu(const SwigluArgs& args, cudaStream_t stream = nullptr);
Status gemm_rmsnorm_swiglu(const SwigluArgs& args, cudaStream_t stream = nullptr);
// qkv = RoPE((rstd *) A Wqkv^T) on the q and k heads (interleaved pairs), V unrotated.
Status gemm_rope(const RopeArgs& args, cudaStream_t stream = nullptr);
Status gemm_rmsnorm_rope(const RopeArgs& args, cudaStream_t stream = nullptr);
// qkv = (rstd *) A Wqkv^T stored, per-head sums of squares of q and k; then qknorm_rope.
Status gemm_qkv_sqsum(const QkvSqsumArgs& args, cudaStream_t stream = nullptr);
Status qknorm_rope(const QkNormRopeArgs& args, cudaStream_t stream = nullptr);
// LM head: per-granule LSE partials and the target logit (+ logits when asked); then lse_finish
// and cross_entropy (loss, and dlogits in place of the logits for training).
Status gemm_lse(const LmHeadLseArgs& args, cudaStream_t stream = nullptr);
Status gemm_rmsnorm_lse(const LmHeadLseArgs& args, cudaStream_t stream = nullptr);
Status lse_finish(const LseFinishArgs& args, cudaStream_t stream = nullptr);
Status cross_entropy(const CrossEntropyArgs& args, cudaStream_t stream = nullptr);

// The logits-free LM-head loss forward (LmHeadLossArgs, lm_head_loss_workspace_bytes: coda/ops.hpp):
// gemm_(rmsnorm_)lse without logits, lse_finish and cross_entropy in one call; no M x V tensor.
Status lm_head_loss(const LmHeadLossArgs& args, cudaStream_t stream = nullptr);
// Training without a dlogits pass (LmHeadTrainArgs, coda/ops/cross_entropy.hpp): the anchor GEMM
// and the shift, the fused GEMM writing E = exp(logits - c) (gemm_lse_exp), the per-row finish (lse,
// u, the target's entry; rows out of range recomputed exactly), the loss. Then lm_head_backward:
// da = diag(s) (grad b) in the dgrad GEMM's epilogue (gemm_row_scale), db = grad^T (s a).
Status lm_head_train(const LmHeadTrainArgs& args, cudaStream_t stream = nullptr);
Status lm_head_backward(const LmHeadBackwardArgs& args, cudaStream_t stream = nullptr);
Status gemm_lse_exp(const LmHeadExpArgs& args, cudaStream_t stream = nullptr);
// d = diag(row_scale) (a b^T) in the dgrad form (b the weight [K, N] row-major viewed as [N, K]).
Status gemm_row_scale(const TensorView& a, const TensorView& b, const TensorView& row_scale, const TensorView& d,
                      cudaStream_t stream = nullptr);

// ---- backward fused operators (docs/ops.md) --------------------------------------------------------
// The dgrad form: a [M, K] row-major (the gradient of the consuming GEMM's output), b [N, K] the
// consuming GEMM's weight [K, N] stored row-major and viewed transposed (unit stride along N).
// Column partials use CODA_PARTIAL_ROWS-row granules.

// dx = r (dy w - xh c) (+ dres, in place allowed), y = xh w, dw partials per row granule, with
// dy = a b^T, xh = x r (RmsNormBackwardArgs).
Status gemm_rmsnorm_backward(const RmsNormBackwardArgs& args, cudaStream_t stream = nullptr);
// dz = (dg, du) interleaved [M, 2F] from do = a b^T and the saved z, o = silu(g) u recomputed
// (optional), ZdZ row partials per 128-column granule of do (SwigluBackwardArgs).
Status gemm_swiglu_backward(const SwigluBackwardArgs& args, cudaStream_t stream = nullptr);
// out[m] = scale * sum_t P[m, t] (ZdZ from row partials); out[n] = sum_t Q[t, n] (dw).
Status row_sum_finish(const RowSumFinishArgs& args, cudaStream_t stream = nullptr);
Status col_sum_finish(const ColSumFinishArgs& args, cudaStream_t stream = nullptr);
// Elementwise: dz = R(-theta) dqkv on q and k, v passed through, optional ZdZ.
Status rope_backward(const RopeBackwardArgs& args, cudaStream_t stream = nullptr);
// Elementwise: dqkv, dgamma partials per row granule, optional ZdZ; head_dim <= 6144.
Status qknorm_rope_backward(const QkNormRopeBackwardArgs& args, cudaStream_t stream = nullptr);

// ---- weight-layout helpers (device tensors, docs/ops.md) -------------------------------------------
// out[2i] = gate[i], out[2i + 1] = up[i]: the interleaved gate/up weight gemm_swiglu expects.
Status interleave_gate_up(const TensorView& gate, const TensorView& up, const TensorView& out,
                          cudaStream_t stream = nullptr);
// Hugging Face rotate-half q/k rows (pair (i, i + hd/2) of each head) -> interleaved pairs (2i, 2i + 1),
// for a fused [N3, K] q/k/v weight; v rows are copied unchanged.
Status permute_rotate_half_to_interleaved(const TensorView& w, const HeadDims& heads, const TensorView& out,
                                          cudaStream_t stream = nullptr);

// ---- the unfused path: straightforward elementwise kernels (cross-check and baseline) -------------
namespace unfused {
// out = a + b
Status add(const TensorView& a, const TensorView& b, const TensorView& out, cudaStream_t stream = nullptr);
// out = x * rsqrt(mean(x^2) + eps) * w; rstd_out (optional [M] fp32) receives the rstd.
Status rmsnorm(const TensorView& x, const TensorView& w, float eps, const TensorView& out,
               const TensorView& rstd_out, cudaStream_t stream = nullptr);
// o[:, i] = silu(z[:, 2i]) * z[:, 2i + 1]
Status swiglu(const TensorView& z, const TensorView& o, cudaStream_t stream = nullptr);
// RoPE of the q and k heads of qkv (interleaved pairs), in place.
Status rope(const TensorView& qkv, const TensorView& positions, const TensorView& freqs, const HeadDims& heads,
            cudaStream_t stream = nullptr);
// The backward pair of the unfused block. RMSNorm backward, given dy = the
// dgrad GEMM's output [M, N]: dx = r (dy w - xh c) (+ dres; dres may be dx_out itself), xh = x r,
// with r = rstd [M], c = zdz [M] (fp32); y_out (optional) = xh w; dw_partials [ceil(M / 128), N]
// fp32 = per 128-row granule, sum of dy xh (plain stores, fixed order: deterministic).
Status rmsnorm_backward(const TensorView& dy, const TensorView& x, const TensorView& rstd, const TensorView& zdz,
                        const TensorView& w, const TensorView& dres, const TensorView& dx_out, const TensorView& y_out,
                        const TensorView& dw_partials, cudaStream_t stream = nullptr);
// SwiGLU backward: dz_out [M, 2F] = interleaved (dg, du) from dout [M, F] and the saved interleaved
// z [M, 2F]; o_out (optional) = silu(g) u; zdz_partials (optional) [M, ceil(F / 128)] fp32 = per
// 128-column granule of F, sum of g dg + u du (plain stores, fixed order).
Status swiglu_backward(const TensorView& dout, const TensorView& z, const TensorView& dz_out, const TensorView& o_out,
                       const TensorView& zdz_partials, cudaStream_t stream = nullptr);
}  // namespace unfused

}  // namespace coda
