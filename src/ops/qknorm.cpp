// Argument checks of QK-norm + RoPE.
#include "coda/ops/qknorm.hpp"

#include <string>

namespace coda {

void check_heads(ArgCheck& check, const HeadDims& h);  // rope.cpp

namespace {
int64_t check_segments(ArgCheck& check, const HeadDims& h, const Grain& grain) {
  const int64_t segs = qk_segments(h.head_dim, grain.cols);
  check.rule(segs > 0, "heads.head_dim",
             "must divide " + std::to_string(grain.cols) + " or be a multiple of it (per-head partial sums), got " +
                 std::to_string(h.head_dim));
  return segs;
}
}  // namespace

Status validate(const QkvSqsumArgs& args, const Grain& grain) {
  ArgCheck check("gemm_qkv_sqsum");
  const GemmShape s = check_gemm_operands(check, args.a, args.b);
  check_heads(check, args.heads);
  const int64_t segs = check_segments(check, args.heads, grain);
  if (!check.ok()) return check.status();
  check.rule(s.n == args.heads.qkv_cols(), "b",
             "must have (heads_q + 2 heads_kv) head_dim = " + std::to_string(args.heads.qkv_cols()) +
                 " rows, got " + std::to_string(s.n));
  check.optional("rstd", args.rstd, {s.m}, kFP32Only)
      .tensor("qkv_out", args.qkv_out, {s.m, s.n}, kStoreTypes, Layout::kRowMajor16)
      .tensor("sumsq_out", args.sumsq_out, {s.m, (args.heads.heads_q + args.heads.heads_kv) * segs}, kFP32Only)
      .no_alias({{"qkv_out", args.qkv_out}, {"sumsq_out", args.sumsq_out}},
                {{"a", args.a}, {"b", args.b}, {"rstd", args.rstd}});
  return check.status();
}

Status validate(const QkNormRopeArgs& args, const Grain& grain) {
  ArgCheck check("qknorm_rope");
  check_heads(check, args.heads);
  const int64_t segs = check_segments(check, args.heads, grain);
  if (!check.ok()) return check.status();
  const int64_t n = args.heads.qkv_cols();
  check.tensor("qkv", args.qkv, {-1, n}, kStoreTypes, Layout::kRowMajor16);
  if (!check.ok()) return check.status();
  const int64_t m = args.qkv.rows();
  const int64_t hd = args.heads.head_dim;
  check.tensor("sumsq", args.sumsq, {m, (args.heads.heads_q + args.heads.heads_kv) * segs}, kFP32Only)
      .tensor("gamma_q", args.gamma_q, {hd}, kFloatTypes)
      .tensor("gamma_k", args.gamma_k, {hd}, kFloatTypes)
      .tensor("positions", args.positions, {m}, kInt32Only)
      .tensor("freqs", args.freqs, {hd / 2}, kFP32Only)
      .rule(args.eps >= 0.0f, "eps", "must be >= 0")
      .tensor("out", args.out, {m, n}, kStoreTypes, Layout::kRowMajor16)
      .no_alias({{"out", args.out}},
                {{"qkv", args.qkv}, {"sumsq", args.sumsq}, {"gamma_q", args.gamma_q}, {"gamma_k", args.gamma_k},
                 {"positions", args.positions}, {"freqs", args.freqs}},
                {{"out", "qkv"}});
  return check.status();
}

Status validate(const QkNormRopeBackwardArgs& args, const Grain& grain) {
  ArgCheck check("qknorm_rope_backward");
  check_heads(check, args.heads);
  if (!check.ok()) return check.status();
  const int64_t n = args.heads.qkv_cols();
  check.tensor("qkv", args.qkv, {-1, n}, kStoreTypes, Layout::kRowMajor16);
  if (!check.ok()) return check.status();
  const int64_t m = args.qkv.rows();
  const int64_t hd = args.heads.head_dim;
  check.tensor("gamma_q", args.gamma_q, {hd}, kFloatTypes)
      .tensor("gamma_k", args.gamma_k, {hd}, kFloatTypes)
      .tensor("positions", args.positions, {m}, kInt32Only)
      .tensor("freqs", args.freqs, {hd / 2}, kFP32Only)
      .rule(args.eps >= 0.0f, "eps", "must be >= 0")
      .tensor("dout", args.dout, {m, n}, kStoreTypes, Layout::kRowMajor16)
      .tensor("dqkv_out", args.dqkv_out, {m, n}, kStoreTypes, Layout::kRowMajor16)
      .tensor("dgamma_q_partials", args.dgamma_q_partials, {ceil_div(m, grain.rows), hd}, kFP32Only)
      .tensor("dgamma_k_partials", args.dgamma_k_partials, {ceil_div(m, grain.rows), hd}, kFP32Only)
      .optional("zdz_out", args.zdz_out, {m}, kFP32Only)
      .no_alias({{"dqkv_out", args.dqkv_out}, {"dgamma_q_partials", args.dgamma_q_partials},
                 {"dgamma_k_partials", args.dgamma_k_partials}, {"zdz_out", args.zdz_out}},
                {{"qkv", args.qkv}, {"gamma_q", args.gamma_q}, {"gamma_k", args.gamma_k},
                 {"positions", args.positions}, {"freqs", args.freqs}, {"dout", args.dout}},
                {{"dqkv_out", "dout"}});
  return check.status();
}

}  // namespace coda
