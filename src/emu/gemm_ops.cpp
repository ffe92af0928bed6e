// Emulated GEMM-epilogue operators: bind operands to the host context, run the kernel's program.
#include <string>

#include "driver.hpp"

namespace coda::emu {

using detail::GemmInputs;
using detail::HostCtx;
using detail::run_gemm;

namespace {

Status check_config(const char* op, const EmuConfig& cfg) {
  if (cfg.tile_m < 1 || cfg.tile_n < 2 || cfg.tile_n % 2 != 0)
    return Status::invalid_argument(std::string(op) + ": argument 'cfg' must have tile_m >= 1 and an even tile_n >= 2");
  return {};
}

}  // namespace

// Host-data check of class targets: each in [0, classes) or equal to ignore_index.
Status check_targets(const char* op, const TensorView& targets, int64_t classes, int32_t ignore_index) {
  for (int64_t i = 0; i < targets.rows(); ++i) {
    const int32_t t = load_i32(targets, i);
    if (t != ignore_index && (t < 0 || (classes >= 0 && t >= classes)))
      return Status::invalid_argument(std::string(op) + ": argument 'targets' holds " + std::to_string(t) +
                                      " at row " + std::to_string(i) + ", outside [0, " + std::to_string(classes) +
                                      ") and not ignore_index (" + std::to_string(ignore_index) + ")");
  }
  return {};
}

Status check_positions(const char* op, const TensorView& positions) {
  for (int64_t i = 0; i < positions.rows(); ++i)
    if (load_i32(positions, i) < 0)
      return Status::invalid_argument(std::string(op) + ": argument 'positions' holds a negative value (" +
                                      std::to_string(load_i32(positions, i)) + ") at row " + std::to_string(i));
  return {};
}

Status gemm(const GemmArgs& args, const EmuConfig& cfg) {
  CODA_TRY(check_config("gemm", cfg));
  CODA_TRY(validate(args));
  if (args.a.rows() == 0 || args.b.rows() == 0) return {};
  using P = programs::LinearCombination;
  HostCtx ctx;
  ctx.scalars[P::kAlpha] = args.alpha_ptr ? *args.alpha_ptr : args.alpha;
  ctx.scalars[P::kBeta] = args.beta_ptr ? *args.beta_ptr : args.beta;
  ctx.tiles[P::kTileC] = args.c;
  ctx.outs[P::kOutD] = args.d;
  run_gemm(GemmInputs(args.a, args.b), P{args.c.defined() ? P::kHasC : 0u}, ctx, cfg);
  return {};
}

Status gemm_residual_rmsnorm_partial(const ResidualRmsNormPartialArgs& args, const EmuConfig& cfg) {
  CODA_TRY(check_config("gemm_residual_rmsnorm_partial", cfg));
  CODA_TRY(validate(args, cfg.grain()));
  if (args.a.rows() == 0) return {};
  using P = programs::ResidualRmsNormPartial;
  HostCtx ctx;
  ctx.scalars[P::kAlpha] = args.alpha;
  ctx.tiles[P::kTileResidual] = args.residual;
  ctx.cols[P::kColNormWeight] = args.norm_weight;
  ctx.outs[P::kOutX] = args.x_out;
  ctx.outs[P::kOutH] = args.h_out;
  ctx.row_partials[P::kRowSumSq] = args.partials;
  run_gemm(GemmInputs(args.a, args.b), P{args.residual.defined() ? P::kHasResidual : 0u}, ctx, cfg);
  return {};
}

Status gemm_rmsnorm_backward(const RmsNormBackwardArgs& args, const EmuConfig& cfg) {
  CODA_TRY(check_config("gemm_rmsnorm_backward", cfg));
  CODA_TRY(validate(args, cfg.grain()));
  if (args.a.rows() == 0) return {};
  using P = programs::RmsNormBackward;
  HostCtx ctx;
  ctx.rows[P::kRowRstd] = args.rstd;
  ctx.rows[P::kRowZdZ] = args.zdz;
  ctx.cols[P::kColNormWeight] = args.norm_weight;
  ctx.tiles[P::kTileX] = args.x;
  ctx.tiles[P::kTileDres] = args.dres;
  ctx.outs[P::kOutDx] = args.dx_out;
  ctx.outs[P::kOutY] = args.y_out;
  ctx.col_partials[P::kColDw] = args.dw_partials;
  P program;
  program.flags |= args.dres.defined() ? P::kHasDres : 0u;
  program.flags |= args.y_out.defined() ? P::kHasY : 0u;
  run_gemm(GemmInputs(args.a, args.b), program, ctx, cfg);
  return {};
}

Status gemm_swiglu(const SwigluArgs& args, const EmuConfig& cfg) {
  CODA_TRY(check_config("gemm_swiglu", cfg));
  CODA_TRY(validate(args));
  if (args.a.rows() == 0) return {};
  using P = programs::Swiglu;
  HostCtx ctx;
  ctx.rows[P::kRowRstd] = args.rstd;
  ctx.outs[P::kOutZ] = args.z_out;
  ctx.outs[P::kOutO] = args.o_out;
  P program;
  program.flags |= args.rstd.defined() ? P::kHasRstd : 0u;
  program.flags |= args.z_out.defined() ? P::kHasZ : 0u;
  run_gemm(GemmInputs(args.a, args.b), program, ctx, cfg);
  return {};
}

Status gemm_rmsnorm_swiglu(const SwigluArgs& args, const EmuConfig& cfg) {
  CODA_TRY(check_rmsnorm_rstd("gemm_rmsnorm_swiglu", args.rstd));
  return gemm_swiglu(args, cfg);
}

Status gemm_swiglu_backward(const SwigluBackwardArgs& args, const EmuConfig& cfg) {
  CODA_TRY(check_config("gemm_swiglu_backward", cfg));
  CODA_TRY(validate(args, cfg.grain()));
  if (args.a.rows() == 0) return {};
  using P = programs::SwigluBackward;
  HostCtx ctx;
  ctx.tiles[P::kTileZ] = args.z;
  ctx.outs[P::kOutDz] = args.dz_out;
  ctx.outs[P::kOutO] = args.o_out;
  ctx.row_partials[P::kRowZdZ] = args.zdz_partials;
  P program;
  program.flags |= args.o_out.defined() ? P::kHasO : 0u;
  program.flags |= args.zdz_partials.defined() ? P::kHasZdZ : 0u;
  run_gemm(GemmInputs(args.a, args.b), program, ctx, cfg);
  return {};
}

Status gemm_rope(const RopeArgs& args, const EmuConfig& cfg) {
  CODA_TRY(check_config("gemm_rope", cfg));
  CODA_TRY(validate(args));
  CODA_TRY(check_positions(args.rstd.defined() ? "gemm_rmsnorm_rope" : "gemm_rope", args.positions));
  if (args.a.rows() == 0) return {};
  using P = programs::Rope;
  HostCtx ctx;
  ctx.rows[P::kRowRstd] = args.rstd;
  ctx.row_ints[P::kRowPos] = args.positions;
  ctx.cols[P::kColFreq] = args.freqs;
  ctx.col_period[P::kColFreq] = static_cast<int>(args.heads.head_dim);  // one frequency per pair of a head
  ctx.col_step[P::kColFreq] = 2;
  ctx.outs[P::kOut] = args.out;
  P program;
  program.has_rstd = args.rstd.defined();
  program.rope_cols = static_cast<int>(args.heads.rope_cols());
  run_gemm(GemmInputs(args.a, args.b), program, ctx, cfg);
  return {};
}

Status gemm_rmsnorm_rope(const RopeArgs& args, const EmuConfig& cfg) {
  CODA_TRY(check_rmsnorm_rstd("gemm_rmsnorm_rope", args.rstd));
  return gemm_rope(args, cfg);
}

Status gemm_qkv_sqsum(const QkvSqsumArgs& args, const EmuConfig& cfg) {
  CODA_TRY(check_config("gemm_qkv_sqsum", cfg));
  CODA_TRY(validate(args, cfg.grain()));
  if (args.a.rows() == 0) return {};
  using P = programs::QkvSqsum;
  HostCtx ctx;
  ctx.rows[P::kRowRstd] = args.rstd;
  ctx.outs[P::kOutQkv] = args.qkv_out;
  ctx.seg_partials[P::kSegSumSq] = args.sumsq_out;
  ctx.seg_head_dim = args.heads.head_dim;
  ctx.seg_per_head = qk_segments(args.heads.head_dim, cfg.tile_n);
  P program;
  program.has_rstd = args.rstd.defined();
  program.rope_cols = static_cast<int>(args.heads.rope_cols());
  run_gemm(GemmInputs(args.a, args.b), program, ctx, cfg);
  return {};
}

Status gemm_lse(const LmHeadLseArgs& args, const EmuConfig& cfg) {
  const char* op = args.rstd.defined() ? "gemm_rmsnorm_lse" : "gemm_lse";
  CODA_TRY(check_config(op, cfg));
  CODA_TRY(validate(args, cfg.grain()));
  CODA_TRY(check_targets(op, args.targets, args.b.rows(), args.ignore_index));
  if (args.a.rows() == 0) return {};
  using P = programs::LmHeadLse;
  HostCtx ctx;
  ctx.rows[P::kRowRstd] = args.rstd;
  ctx.row_ints[P::kRowTargets] = args.targets;
  ctx.outs[P::kOutLogits] = args.logits_out;
  ctx.row_outs[P::kRowOutTarget] = args.target_logit_out;
  ctx.lse_partials[P::kRowLse] = args.lse_partials;
  P program;
  program.flags |= args.rstd.defined() ? P::kHasRstd : 0u;
  program.flags |= args.logits_out.defined() ? P::kHasLogits : 0u;
  program.ignore_index = args.ignore_index;
  program.classes = static_cast<int>(args.b.rows());
  run_gemm(GemmInputs(args.a, args.b), program, ctx, cfg);
  return {};
}

Status gemm_rmsnorm_lse(const LmHeadLseArgs& args, const EmuConfig& cfg) {
  CODA_TRY(check_rmsnorm_rstd("gemm_rmsnorm_lse", args.rstd));
  return gemm_lse(args, cfg);
}

Status gemm_lse_exp(const LmHeadExpArgs& args, const EmuConfig& cfg) {
  const char* op = args.rstd.defined() ? "gemm_rmsnorm_lse_exp" : "gemm_lse_exp";
  CODA_TRY(check_config(op, cfg));
  CODA_TRY(validate(args, cfg.grain()));
  CODA_TRY(check_targets(op, args.targets, args.b.rows(), args.ignore_index));
  if (args.a.rows() == 0) return {};
  using P = programs::LmHeadExp;
  HostCtx ctx;
  ctx.rows[P::kRowRstd] = args.rstd;
  ctx.rows[P::kRowShift] = args.shift;
  ctx.row_ints[P::kRowTargets] = args.targets;
  ctx.outs[P::kOutExp] = args.exp_out;
  ctx.row_outs[P::kRowOutTarget] = args.target_logit_out;
  ctx.row_partials[P::kRowSum] = args.sum_partials;
  P program;
  program.flags |= args.rstd.defined() ? P::kHasRstd : 0u;
  program.ignore_index = args.ignore_index;
  program.classes = static_cast<int>(args.b.rows());
  run_gemm(GemmInputs(args.a, args.b), program, ctx, cfg);
  return {};
}

Status gemm_row_scale(const TensorView& a, const TensorView& b, const TensorView& row_scale, const TensorView& d,
                      const EmuConfig& cfg) {
  const char* op = "gemm_row_scale";
  CODA_TRY(check_config(op, cfg));
  CODA_TRY(validate_gemm_row_scale(a, b, row_scale, d));
  if (a.rows() == 0 || b.rows() == 0) return {};
  using P = programs::RowScale;
  HostCtx ctx;
  ctx.rows[P::kRowScale] = row_scale;
  ctx.outs[P::kOutD] = d;
  run_gemm(GemmInputs(a, b), P{}, ctx, cfg);
  return {};
}

Status check_ce_targets(const CrossEntropyArgs& args) {
  return check_targets("cross_entropy", args.targets, args.logits.defined() ? args.logits.cols() : -1,
                       args.ignore_index);
}

}  // namespace coda::emu
