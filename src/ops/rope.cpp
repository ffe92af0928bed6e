// Argument checks of RoPE forward/backward, and the frequency helper.
#include "coda/ops/rope.hpp"

#include <string>

#include "coda/ref/reference.hpp"

namespace coda {

void check_heads(ArgCheck& check, const HeadDims& h) {
  check.rule(h.heads_q > 0, "heads.heads_q", "must be > 0, got " + std::to_string(h.heads_q))
      .rule(h.heads_kv > 0, "heads.heads_kv", "must be > 0, got " + std::to_string(h.heads_kv))
      .rule(h.head_dim > 0 && h.head_dim % 2 == 0, "heads.head_dim",
            "must be even and > 0 (RoPE rotates adjacent pairs), got " + std::to_string(h.head_dim));
}

Status validate(const RopeArgs& args) {
  ArgCheck check(args.rstd.defined() ? "gemm_rmsnorm_rope" : "gemm_rope");
  const GemmShape s = check_gemm_operands(check, args.a, args.b);
  check_heads(check, args.heads);
  if (!check.ok()) return check.status();
  check.rule(s.n == args.heads.qkv_cols(), "b",
             "must have (heads_q + 2 heads_kv) head_dim = " + std::to_string(args.heads.qkv_cols()) +
                 " rows, got " + std::to_string(s.n));
  check.optional("rstd", args.rstd, {s.m}, kFP32Only)
      .tensor("positions", args.positions, {s.m}, kInt32Only)
      .tensor("freqs", args.freqs, {args.heads.head_dim / 2}, kFP32Only)
      .tensor("out", args.out, {s.m, s.n}, kStoreTypes, Layout::kRowMajor16)
      .no_alias({{"out", args.out}}, {{"a", args.a}, {"b", args.b}, {"rstd", args.rstd},
                                      {"positions", args.positions}, {"freqs", args.freqs}});
  return check.status();
}

Status validate(const RopeBackwardArgs& args) {
  ArgCheck check("rope_backward");
  check_heads(check, args.heads);
  if (!check.ok()) return check.status();
  const int64_t n = args.heads.qkv_cols();
  check.tensor("qkv", args.qkv, {-1, n}, kStoreTypes, Layout::kRowMajor16);
  if (!check.ok()) return check.status();
  const int64_t m = args.qkv.rows();
  check.tensor("dqkv", args.dqkv, {m, n}, kStoreTypes, Layout::kRowMajor16)
      .tensor("positions", args.positions, {m}, kInt32Only)
      .tensor("freqs", args.freqs, {args.heads.head_dim / 2}, kFP32Only)
      .tensor("dz_out", args.dz_out, {m, n}, kStoreTypes, Layout::kRowMajor16)
      .optional("zdz_out", args.zdz_out, {m}, kFP32Only)
      .no_alias({{"dz_out", args.dz_out}, {"zdz_out", args.zdz_out}},
                {{"qkv", args.qkv}, {"dqkv", args.dqkv}, {"positions", args.positions}, {"freqs", args.freqs}},
                {{"dz_out", "dqkv"}});
  return check.status();
}

std::vector<float> rope_frequencies(int64_t head_dim, double base, const RopeScaling& s) {
  const ref::Vec f = ref::rope_frequencies(head_dim, base, s.factor, s.low_freq_factor, s.high_freq_factor,
                                           s.original_max_position);
  return std::vector<float>(f.begin(), f.end());
}

Status validate_permute_rotate_half_to_interleaved(const TensorView& w, const HeadDims& heads, const TensorView& out) {
  ArgCheck check("permute_rotate_half_to_interleaved");
  check.rule(heads.heads_q >= 1 && heads.heads_kv >= 1 && heads.head_dim >= 2 && heads.head_dim % 2 == 0, "heads",
             "must have heads_q >= 1, heads_kv >= 1 and an even head_dim >= 2");
  if (!check.ok()) return check.status();
  const int64_t n3 = heads.qkv_cols();
  check.tensor("w", w, {n3, -1}, kStoreTypes, Layout::kAny);
  if (!check.ok()) return check.status();
  const int64_t k = w.cols();
  check.tensor("out", out, {n3, k}, kStoreTypes, Layout::kAny)
      .same_dtype("w", w, "out", out)
      .rule(w.rank() == 2 && w.stride(1) == 1 && out.stride(1) == 1, "w", "and 'out' must be row-major (unit column stride)")
      .no_alias({{"out", out}}, {{"w", w}});
  return check.status();
}

}  // namespace coda
