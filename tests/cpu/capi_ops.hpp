// The C ABI (coda.h) behind the emulator's signatures, for the shared operator tests: every
// argument struct is passed through as descriptors of the same host memory, so the C ABI's own
// choice of backend (host memory -> the CPU emulator) is what runs. The *_rmsnorm_* entry points
// are taken when rstd is given. The grain argument must be the library's (the C ABI has no other).
#pragma once

#include "coda/coda.h"
#include "coda/ref/emulator.hpp"

namespace coda::capi_ops {

inline Status grain_check(const emu::EmuConfig& cfg) {
  if (cfg.tile_n != CODA_PARTIAL_COLS || cfg.tile_m != CODA_PARTIAL_ROWS)
    return Status::invalid_argument("capi_ops: the C ABI runs the library's partial grain only");
  return {};
}
// The C status and coda_last_error() as a Status.
inline Status result(coda_status_t s) { return s == CODA_SUCCESS ? Status() : Status(s, coda_last_error()); }
// The descriptor of a view, null when the view is absent.
inline const coda_tensor_t* d(const TensorView& t) { return t.defined() ? &t.desc : nullptr; }
inline coda_heads_t heads(const HeadDims& h) { return coda_heads_t{h.heads_q, h.heads_kv, h.head_dim}; }
inline coda_reduction_t reduction(Reduction r) {
  return r == Reduction::kSum ? CODA_REDUCTION_SUM : CODA_REDUCTION_MEAN;
}

inline Status gemm(const GemmArgs& a, const emu::EmuConfig& = {}) {
  if (!a.c.defined() && a.alpha == 1.0f && !a.alpha_ptr && !a.beta_ptr)
    return result(coda_gemm(d(a.a), d(a.b), d(a.d), nullptr));
  return result(coda_gemm_ex(d(a.a), d(a.b), d(a.c), d(a.d), a.alpha, a.beta, a.alpha_ptr, a.beta_ptr, nullptr));
}
inline Status gemm_residual_rmsnorm_partial(const ResidualRmsNormPartialArgs& a, const emu::EmuConfig& cfg = {}) {
  CODA_TRY(grain_check(cfg));
  return result(coda_gemm_residual_rmsnorm_partial(d(a.a), d(a.b), d(a.residual), d(a.norm_weight), d(a.x_out),
                                                   d(a.h_out), d(a.partials), a.alpha, nullptr));
}
inline Status gemm_rmsnorm_backward(const RmsNormBackwardArgs& a, const emu::EmuConfig& cfg = {}) {
  CODA_TRY(grain_check(cfg));
  return result(coda_gemm_rmsnorm_backward(d(a.a), d(a.b), d(a.x), d(a.rstd), d(a.zdz), d(a.norm_weight), d(a.dres),
                                           d(a.dx_out), d(a.y_out), d(a.dw_partials), nullptr));
}
inline Status rope_backward(const RopeBackwardArgs& a) {
  return result(coda_rope_backward(d(a.qkv), d(a.dqkv), d(a.positions), d(a.freqs), heads(a.heads), d(a.dz_out),
                                   d(a.zdz_out), a.zdz_scale, nullptr));
}
inline Status qknorm_rope_backward(const QkNormRopeBackwardArgs& a, const emu::EmuConfig& cfg = {}) {
  CODA_TRY(grain_check(cfg));
  return result(coda_qknorm_rope_backward(d(a.qkv), d(a.gamma_q), d(a.gamma_k), d(a.positions), d(a.freqs),
                                          heads(a.heads), a.eps, d(a.dout), d(a.dqkv_out), d(a.dgamma_q_partials),
                                          d(a.dgamma_k_partials), d(a.zdz_out), a.zdz_scale, nullptr));
}
inline Status gemm_swiglu_backward(const SwigluBackwardArgs& a, const emu::EmuConfig& cfg = {}) {
  CODA_TRY(grain_check(cfg));
  return result(
      coda_gemm_swiglu_backward(d(a.a), d(a.b), d(a.z), d(a.dz_out), d(a.o_out), d(a.zdz_partials), nullptr));
}
inline Status row_sum_finish(const RowSumFinishArgs& a) {
  return result(coda_row_sum_finish(d(a.partials), d(a.out), a.scale, nullptr));
}
inline Status col_sum_finish(const ColSumFinishArgs& a) {
  return result(coda_col_sum_finish(d(a.partials), d(a.out), nullptr));
}
inline Status rms_finish(const RmsFinishArgs& a) {
  return result(coda_rms_finish(d(a.partials), d(a.rstd_out), a.dim, a.eps, nullptr));
}
inline Status gemm_swiglu(const SwigluArgs& a, const emu::EmuConfig& = {}) {
  auto fn = a.rstd.defined() ? coda_gemm_rmsnorm_swiglu : coda_gemm_swiglu;
  return result(fn(d(a.a), d(a.b), d(a.rstd), d(a.z_out), d(a.o_out), nullptr));
}
inline Status gemm_rope(const RopeArgs& a, const emu::EmuConfig& = {}) {
  auto fn = a.rstd.defined() ? coda_gemm_rmsnorm_rope : coda_gemm_rope;
  return result(fn(d(a.a), d(a.b), d(a.rstd), d(a.positions), d(a.freqs), heads(a.heads), d(a.out), nullptr));
}
inline Status gemm_qkv_sqsum(const QkvSqsumArgs& a, const emu::EmuConfig& cfg = {}) {
  CODA_TRY(grain_check(cfg));
  return result(coda_gemm_qkv_sqsum(d(a.a), d(a.b), d(a.rstd), heads(a.heads), d(a.qkv_out), d(a.sumsq_out), nullptr));
}
inline Status qknorm_rope(const QkNormRopeArgs& a, const emu::EmuConfig& cfg = {}) {
  CODA_TRY(grain_check(cfg));
  return result(coda_qknorm_rope(d(a.qkv), d(a.sumsq), d(a.gamma_q), d(a.gamma_k), d(a.positions), d(a.freqs),
                                 heads(a.heads), a.eps, d(a.out), nullptr));
}
inline Status gemm_lse(const LmHeadLseArgs& a, const emu::EmuConfig& cfg = {}) {
  CODA_TRY(grain_check(cfg));
  auto fn = a.rstd.defined() ? coda_gemm_rmsnorm_lse : coda_gemm_lse;
  return result(fn(d(a.a), d(a.b), d(a.rstd), d(a.targets), a.ignore_index, d(a.logits_out), d(a.lse_partials),
                   d(a.target_logit_out), nullptr));
}
inline Status lse_finish(const LseFinishArgs& a) { return result(coda_lse_finish(d(a.partials), d(a.lse_out), nullptr)); }
inline Status cross_entropy(const CrossEntropyArgs& a) {
  if (a.zdz_out.defined()) return Status::not_supported("capi_ops: coda_cross_entropy has no ZdZ output");
  return result(coda_cross_entropy(d(a.lse), d(a.target_logit), d(a.targets), a.ignore_index, reduction(a.reduction),
                                   d(a.loss_out), d(a.row_loss_out), d(a.logits), d(a.dlogits_out), a.dloss, nullptr));
}
inline Status lm_head_train(const LmHeadTrainArgs& a) {
  return result(coda_lm_head_train(d(a.a), d(a.b), d(a.rstd), d(a.targets), a.ignore_index, reduction(a.reduction),
                                   d(a.loss_out), d(a.row_loss_out), d(a.lse_out), d(a.grad_out), d(a.grad_scale_out),
                                   a.workspace, a.workspace_bytes, nullptr));
}
inline Status lm_head_backward(const LmHeadBackwardArgs& a) {
  return result(coda_lm_head_backward(d(a.a), d(a.b), d(a.rstd), d(a.grad), d(a.grad_scale), a.dloss, a.dloss_ptr,
                                      d(a.da_out), d(a.db_out), a.workspace, a.workspace_bytes, nullptr));
}

}  // namespace coda::capi_ops
