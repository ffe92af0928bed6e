// Argument checks of the GEMM operand pair and of the plain / linear-combination GEMM.
#include "coda/ops/gemm.hpp"

#include <cstdint>
#include <string>

namespace coda {

GemmShape check_gemm_operands(ArgCheck& check, const TensorView& a, const TensorView& b) {
  check.tensor("a", a, {-1, -1}, kGemmInputTypes, Layout::kGemmOperand)
      .tensor("b", b, {-1, -1}, kGemmInputTypes, Layout::kGemmOperand)
      .same_dtype("a", a, "b", b);
  if (!check.ok()) return {};
  check.rule(b.cols() == a.cols(), "b",
             "must be [N, K] with K = " + std::to_string(a.cols()) + " (the columns of 'a'), got " + b.describe());
  // The epilogue addresses outputs with 32-bit coordinates (epi::Frag).
  check.rule(a.rows() <= INT32_MAX, "a", "must have fewer than 2^31 rows (M), got " + a.describe())
      .rule(b.rows() <= INT32_MAX, "b", "must have fewer than 2^31 rows (N), got " + b.describe());
  if (!check.ok()) return {};
  return {a.rows(), b.rows(), a.cols()};
}

Status validate(const GemmArgs& args) {
  ArgCheck check("gemm");
  const GemmShape s = check_gemm_operands(check, args.a, args.b);
  check.tensor("d", args.d, {s.m, s.n}, kStoreTypes, Layout::kRowMajor16)
      .optional("c", args.c, {s.m, s.n}, kStoreTypes, Layout::kRowMajor16)
      .no_alias({{"d", args.d}}, {{"a", args.a}, {"b", args.b}, {"c", args.c}}, {{"d", "c"}});
  return check.status();
}

Status validate_gemm_row_scale(const TensorView& a, const TensorView& b, const TensorView& row_scale,
                               const TensorView& d) {
  ArgCheck check("gemm_row_scale");
  const GemmShape s = check_gemm_operands(check, a, b);
  check.tensor("row_scale", row_scale, {s.m}, kFP32Only)
      .tensor("d", d, {s.m, s.n}, kStoreTypes, Layout::kRowMajor16)
      .no_alias({{"d", d}}, {{"a", a}, {"b", b}, {"row_scale", row_scale}});
  return check.status();
}

}  // namespace coda
