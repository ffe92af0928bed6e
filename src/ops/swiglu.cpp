// Argument checks of SwiGLU forward and backward.
#include "coda/ops/swiglu.hpp"

#include <string>

namespace coda {

Status validate(const SwigluArgs& args) {
  ArgCheck check(args.rstd.defined() ? "gemm_rmsnorm_swiglu" : "gemm_swiglu");
  const GemmShape s = check_gemm_operands(check, args.a, args.b);
  if (!check.ok()) return check.status();
  check.rule(s.n % 2 == 0, "b",
             "must have an even number of rows (interleaved gate/up pairs), got " + std::to_string(s.n));
  check.optional("rstd", args.rstd, {s.m}, kFP32Only)
      .optional("z_out", args.z_out, {s.m, s.n}, kStoreTypes, Layout::kRowMajor16)
      .tensor("o_out", args.o_out, {s.m, s.n / 2}, kStoreTypes, Layout::kRowMajor16)
      .no_alias({{"z_out", args.z_out}, {"o_out", args.o_out}}, {{"a", args.a}, {"b", args.b}, {"rstd", args.rstd}});
  return check.status();
}

Status validate(const SwigluBackwardArgs& args, const Grain& grain) {
  ArgCheck check("gemm_swiglu_backward");
  const GemmShape s = check_gemm_operands(check, args.a, args.b);
  check.tensor("z", args.z, {s.m, 2 * s.n}, kStoreTypes, Layout::kRowMajor16)
      .tensor("dz_out", args.dz_out, {s.m, 2 * s.n}, kStoreTypes, Layout::kRowMajor16)
      .optional("o_out", args.o_out, {s.m, s.n}, kStoreTypes, Layout::kRowMajor16)
      .optional("zdz_partials", args.zdz_partials, {s.m, ceil_div(s.n, grain.cols)}, kFP32Only)
      .no_alias({{"dz_out", args.dz_out}, {"o_out", args.o_out}, {"zdz_partials", args.zdz_partials}},
                {{"a", args.a}, {"b", args.b}, {"z", args.z}});
  return check.status();
}

Status validate_interleave_gate_up(const TensorView& gate, const TensorView& up, const TensorView& out) {
  ArgCheck check("interleave_gate_up");
  check.tensor("gate", gate, {-1, -1}, kStoreTypes, Layout::kAny);
  if (!check.ok()) return check.status();
  const int64_t f = gate.rows(), k = gate.cols();
  check.tensor("up", up, {f, k}, kStoreTypes, Layout::kAny)
      .tensor("out", out, {2 * f, k}, kStoreTypes, Layout::kAny)
      .same_dtype("gate", gate, "up", up)
      .same_dtype("gate", gate, "out", out)
      .rule(gate.rank() == 2 && gate.stride(1) == 1 && up.stride(1) == 1 && out.stride(1) == 1, "gate",
            "and 'up' and 'out' must be row-major (unit column stride)")
      .no_alias({{"out", out}}, {{"gate", gate}, {"up", up}});
  return check.status();
}

}  // namespace coda
