// The GPU operators behind the emulator's signatures, for the shared operator tests: every
// TensorView argument (host memory) is mirrored to a device allocation with the same strides
// (outputs keep their poison), the GPU operator runs, and everything is copied back. Views that
// share host memory (in-place arguments) share the device copy. The grain argument must be the
// library's (the GPU kernels have no other).
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <vector>

#include "coda/device_util.hpp"
#include "coda/gpu.hpp"
#include "coda/ref/emulator.hpp"

namespace coda::gpu_ops {

inline Status grain_check(const emu::EmuConfig& cfg) {
  if (cfg.tile_n != CODA_PARTIAL_COLS || cfg.tile_m != CODA_PARTIAL_ROWS)
    return Status::invalid_argument("gpu_ops: the GPU runs the library's partial grain only");
  return {};
}

// Map every view of `args` (listed by the caller), run, copy back.
template <class Args, class Fn, class... Views>
Status run(Args args, Fn fn, Views Args::*... views) {
  dev::Mirror m;
  ((args.*views = m.map(args.*views)), ...);
  const Status s = fn(args);
  if (s.ok()) m.copy_back();
  return s;
}

inline Status gemm(const GemmArgs& a, const emu::EmuConfig& = {}) {
  return run(a, [](const GemmArgs& x) { return coda::gemm(x); }, &GemmArgs::a, &GemmArgs::b, &GemmArgs::c,
             &GemmArgs::d);
}
inline Status gemm_residual_rmsnorm_partial(const ResidualRmsNormPartialArgs& a, const emu::EmuConfig& cfg = {}) {
  CODA_TRY(grain_check(cfg));
  using A = ResidualRmsNormPartialArgs;
  return run(a, [](const A& x) { return coda::gemm_residual_rmsnorm_partial(x); }, &A::a, &A::b, &A::residual,
             &A::norm_weight, &A::x_out, &A::h_out, &A::partials);
}
inline Status rms_finish(const RmsFinishArgs& a) {
  using A = RmsFinishArgs;
  return run(a, [](const A& x) { return coda::rms_finish(x); }, &A::partials, &A::rstd_out);
}
inline Status gemm_swiglu(const SwigluArgs& a, const emu::EmuConfig& = {}) {
  using A = SwigluArgs;
  return run(a, [](const A& x) { return coda::gemm_swiglu(x); }, &A::a, &A::b, &A::rstd, &A::z_out, &A::o_out);
}
inline Status gemm_rope(const RopeArgs& a, const emu::EmuConfig& = {}) {
  using A = RopeArgs;
  return run(a, [](const A& x) { return coda::gemm_rope(x); }, &A::a, &A::b, &A::rstd, &A::positions, &A::freqs,
             &A::out);
}
inline Status gemm_qkv_sqsum(const QkvSqsumArgs& a, const emu::EmuConfig& cfg = {}) {
  CODA_TRY(grain_check(cfg));
  using A = QkvSqsumArgs;
  return run(a, [](const A& x) { return coda::gemm_qkv_sqsum(x); }, &A::a, &A::b, &A::rstd, &A::qkv_out,
             &A::sumsq_out);
}
inline Status qknorm_rope(const QkNormRopeArgs& a, const emu::EmuConfig& cfg = {}) {
  CODA_TRY(grain_check(cfg));
  using A = QkNormRopeArgs;
  return run(a, [](const A& x) { return coda::qknorm_rope(x); }, &A::qkv, &A::sumsq, &A::gamma_q, &A::gamma_k,
             &A::positions, &A::freqs, &A::out);
}
inline Status gemm_lse(const LmHeadLseArgs& a, const emu::EmuConfig& cfg = {}) {
  CODA_TRY(grain_check(cfg));
  using A = LmHeadLseArgs;
  return run(a, [](const A& x) { return coda::gemm_lse(x); }, &A::a, &A::b, &A::rstd, &A::targets, &A::logits_out,
             &A::lse_partials, &A::target_logit_out);
}
inline Status gemm_rmsnorm_backward(const RmsNormBackwardArgs& a, const emu::EmuConfig& cfg = {}) {
  CODA_TRY(grain_check(cfg));
  using A = RmsNormBackwardArgs;
  return run(a, [](const A& x) { return coda::gemm_rmsnorm_backward(x); }, &A::a, &A::b, &A::x, &A::rstd, &A::zdz,
             &A::norm_weight, &A::dres, &A::dx_out, &A::y_out, &A::dw_partials);
}
inline Status rope_backward(const RopeBackwardArgs& a) {
  using A = RopeBackwardArgs;
  return run(a, [](const A& x) { return coda::rope_backward(x); }, &A::qkv, &A::dqkv, &A::positions, &A::freqs,
             &A::dz_out, &A::zdz_out);
}
inline Status qknorm_rope_backward(const QkNormRopeBackwardArgs& a, const emu::EmuConfig& cfg = {}) {
  CODA_TRY(grain_check(cfg));
  using A = QkNormRopeBackwardArgs;
  return run(a, [](const A& x) { return coda::qknorm_rope_backward(x); }, &A::qkv, &A::gamma_q, &A::gamma_k,
             &A::positions, &A::freqs, &A::dout, &A::dqkv_out, &A::dgamma_q_partials, &A::dgamma_k_partials,
             &A::zdz_out);
}
inline Status gemm_swiglu_backward(const SwigluBackwardArgs& a, const emu::EmuConfig& cfg = {}) {
  CODA_TRY(grain_check(cfg));
  using A = SwigluBackwardArgs;
  return run(a, [](const A& x) { return coda::gemm_swiglu_backward(x); }, &A::a, &A::b, &A::z, &A::dz_out, &A::o_out,
             &A::zdz_partials);
}
inline Status col_sum_finish(const ColSumFinishArgs& a) {
  using A = ColSumFinishArgs;
  return run(a, [](const A& x) { return coda::col_sum_finish(x); }, &A::partials, &A::out);
}
inline Status row_sum_finish(const RowSumFinishArgs& a) {
  using A = RowSumFinishArgs;
  return run(a, [](const A& x) { return coda::row_sum_finish(x); }, &A::partials, &A::out);
}
inline Status lse_finish(const LseFinishArgs& a) {
  using A = LseFinishArgs;
  return run(a, [](const A& x) { return coda::lse_finish(x); }, &A::partials, &A::lse_out);
}
inline Status cross_entropy(const CrossEntropyArgs& a) {
  using A = CrossEntropyArgs;
  return run(a, [](const A& x) { return coda::cross_entropy(x); }, &A::lse, &A::target_logit, &A::targets,
             &A::loss_out, &A::row_loss_out, &A::logits, &A::dlogits_out, &A::zdz_out);
}

// The two-step LM-head training API: its host workspace stands for a device one of the same size.
template <class Args, class Fn, class... Views>
Status run_with_workspace(Args args, Fn fn, Views Args::*... views) {
  dev::Buffer ws(args.workspace_bytes);
  args.workspace = args.workspace_bytes ? ws.get() : nullptr;
  return run(args, fn, views...);
}
inline Status lm_head_train(const LmHeadTrainArgs& a) {
  using A = LmHeadTrainArgs;
  return run_with_workspace(a, [](const A& x) { return coda::lm_head_train(x); }, &A::a, &A::b, &A::rstd, &A::targets,
                            &A::loss_out, &A::row_loss_out, &A::lse_out, &A::grad_out, &A::grad_scale_out);
}
inline Status lm_head_backward(const LmHeadBackwardArgs& a) {
  using A = LmHeadBackwardArgs;
  return run_with_workspace(a, [](const A& x) { return coda::lm_head_backward(x); }, &A::a, &A::b, &A::rstd,
                            &A::grad, &A::grad_scale, &A::da_out, &A::db_out);
}

}  // namespace coda::gpu_ops
