// Argument checks of the RMSNorm family.
#include "coda/ops/rmsnorm.hpp"

#include <string>

namespace coda {

Status check_rmsnorm_rstd(const char* op, const TensorView& rstd) {
  if (!rstd.defined())
    return Status::invalid_argument(std::string(op) + ": argument 'rstd' is required (the RMSNorm of the GEMM input); "
                                    "use the operator without 'rmsnorm' in its name to run without it");
  return {};
}

Status validate(const ResidualRmsNormPartialArgs& args, const Grain& grain) {
  ArgCheck check("gemm_residual_rmsnorm_partial");
  const GemmShape s = check_gemm_operands(check, args.a, args.b);
  check.optional("residual", args.residual, {s.m, s.n}, kStoreTypes, Layout::kRowMajor16)
      .tensor("norm_weight", args.norm_weight, {s.n}, kFloatTypes)
      .tensor("x_out", args.x_out, {s.m, s.n}, kStoreTypes, Layout::kRowMajor16)
      .tensor("h_out", args.h_out, {s.m, s.n}, kStoreTypes, Layout::kRowMajor16)
      .tensor("partials", args.partials, {s.m, ceil_div(s.n, grain.cols)}, kFP32Only)
      .no_alias({{"x_out", args.x_out}, {"h_out", args.h_out}, {"partials", args.partials}},
                {{"a", args.a}, {"b", args.b}, {"residual", args.residual}, {"norm_weight", args.norm_weight}},
                {{"x_out", "residual"}});
  return check.status();
}

Status validate(const RmsFinishArgs& args) {
  ArgCheck check("rms_finish");
  check.tensor("partials", args.partials, {-1, -1}, kFP32Only);
  if (!check.ok()) return check.status();
  const int64_t m = args.partials.rows();
  check.tensor("rstd_out", args.rstd_out, {m}, kFP32Only)
      .rule(args.dim > 0, "dim", "must be > 0 (the normalized width d), got " + std::to_string(args.dim))
      .rule(args.eps >= 0.0f, "eps", "must be >= 0")
      .no_alias({{"rstd_out", args.rstd_out}}, {{"partials", args.partials}});
  return check.status();
}

Status validate(const RmsNormBackwardArgs& args, const Grain& grain) {
  ArgCheck check("gemm_rmsnorm_backward");
  const GemmShape s = check_gemm_operands(check, args.a, args.b);
  check.tensor("x", args.x, {s.m, s.n}, kStoreTypes, Layout::kRowMajor16)
      .tensor("rstd", args.rstd, {s.m}, kFP32Only)
      .tensor("zdz", args.zdz, {s.m}, kFP32Only)
      .tensor("norm_weight", args.norm_weight, {s.n}, kFloatTypes)
      .optional("dres", args.dres, {s.m, s.n}, kStoreTypes, Layout::kRowMajor16)
      .tensor("dx_out", args.dx_out, {s.m, s.n}, kStoreTypes, Layout::kRowMajor16)
      .optional("y_out", args.y_out, {s.m, s.n}, kStoreTypes, Layout::kRowMajor16)
      .tensor("dw_partials", args.dw_partials, {ceil_div(s.m, grain.rows), s.n}, kFP32Only)
      .no_alias({{"dx_out", args.dx_out}, {"y_out", args.y_out}, {"dw_partials", args.dw_partials}},
                {{"a", args.a}, {"b", args.b}, {"x", args.x}, {"rstd", args.rstd}, {"zdz", args.zdz},
                 {"norm_weight", args.norm_weight}, {"dres", args.dres}},
                {{"dx_out", "dres"}});
  return check.status();
}

Status validate(const RowSumFinishArgs& args) {
  ArgCheck check("row_sum_finish");
  check.tensor("partials", args.partials, {-1, -1}, kFP32Only);
  if (!check.ok()) return check.status();
  check.tensor("out", args.out, {args.partials.rows()}, kFP32Only)
      .no_alias({{"out", args.out}}, {{"partials", args.partials}});
  return check.status();
}

Status validate(const ColSumFinishArgs& args) {
  ArgCheck check("col_sum_finish");
  check.tensor("partials", args.partials, {-1, -1}, kFP32Only);
  if (!check.ok()) return check.status();
  check.tensor("out", args.out, {args.partials.cols()}, kStoreTypes)
      .no_alias({{"out", args.out}}, {{"partials", args.partials}});
  return check.status();
}

}  // namespace coda
