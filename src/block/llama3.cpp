// Whole-block argument checks: every tensor of the block against the dimensions, up front, so a
// bad call fails before the first operator runs.
#include "coda/block/llama3.hpp"

#include <string>

namespace coda {

void check_heads(ArgCheck& check, const HeadDims& h);  // ops/rope.cpp

namespace {
void check_dims(ArgCheck& c, const Llama3Dims& d) {
  c.rule(d.tokens >= 0, "dims.tokens", "must be >= 0, got " + std::to_string(d.tokens))
      .rule(d.hidden >= 8 && d.hidden % 8 == 0, "dims.hidden",
            "must be a positive multiple of 8 (16-byte rows), got " + std::to_string(d.hidden))
      .rule(d.ffn >= 8 && d.ffn % 8 == 0, "dims.ffn",
            "must be a positive multiple of 8 (16-byte rows), got " + std::to_string(d.ffn))
      .rule(d.eps >= 0.0f, "dims.eps", "must be >= 0");
  check_heads(c, d.heads);
}

void check_weights(ArgCheck& c, const Llama3Dims& d, const Llama3Weights& w) {
  const int64_t n3 = d.heads.qkv_cols();
  c.tensor("weights.wo", w.wo, {d.hidden, d.hidden}, kGemmInputTypes, Layout::kRowMajor16)
      .tensor("weights.wgu", w.wgu, {2 * d.ffn, d.hidden}, kGemmInputTypes, Layout::kRowMajor16)
      .tensor("weights.wdown", w.wdown, {d.hidden, d.ffn}, kGemmInputTypes, Layout::kRowMajor16)
      .tensor("weights.wqkv", w.wqkv, {n3, d.hidden}, kGemmInputTypes, Layout::kRowMajor16)
      .tensor("weights.norm0", w.norm0, {d.hidden}, kFloatTypes)
      .tensor("weights.norm1", w.norm1, {d.hidden}, kFloatTypes)
      .tensor("weights.freqs", w.freqs, {d.heads.head_dim / 2}, kFP32Only);
}

void check_activations(ArgCheck& c, const Llama3Dims& d, const Llama3Activations& a) {
  const int64_t m = d.tokens;
  c.tensor("act.x0", a.x0, {m, d.hidden}, kGemmInputTypes, Layout::kRowMajor16)
      .tensor("act.y0", a.y0, {m, d.hidden}, kGemmInputTypes, Layout::kRowMajor16)
      .tensor("act.positions", a.positions, {m}, kInt32Only)
      .tensor("act.x1", a.x1, {m, d.hidden}, kGemmInputTypes, Layout::kRowMajor16)
      .tensor("act.x2", a.x2, {m, d.hidden}, kGemmInputTypes, Layout::kRowMajor16)
      .tensor("act.z1", a.z1, {m, 2 * d.ffn}, kGemmInputTypes, Layout::kRowMajor16)
      .tensor("act.qkv", a.qkv, {m, d.heads.qkv_cols()}, kGemmInputTypes, Layout::kRowMajor16)
      .tensor("act.r1", a.r1, {m}, kFP32Only)
      .tensor("act.r2", a.r2, {m}, kFP32Only)
      .optional("act.y1", a.y1, {m, d.ffn}, kGemmInputTypes, Layout::kRowMajor16)
      .same_dtype("act.x0", a.x0, "act.y0", a.y0)
      .same_dtype("act.x0", a.x0, "act.x1", a.x1)
      .same_dtype("act.x0", a.x0, "act.x2", a.x2)
      .same_dtype("act.x0", a.x0, "act.z1", a.z1)
      .same_dtype("act.x0", a.x0, "act.qkv", a.qkv);
  if (a.y1.defined()) c.same_dtype("act.x0", a.x0, "act.y1", a.y1);
}
}  // namespace

Status validate(const Llama3Dims& d, const Llama3Weights& w, const Llama3Activations& act) {
  ArgCheck c("llama3_forward");
  check_dims(c, d);
  if (!c.ok()) return c.status();
  check_weights(c, d, w);
  check_activations(c, d, act);
  c.same_dtype("weights.wo", w.wo, "act.x0", act.x0);
  return c.status();
}

Status validate(const Llama3Dims& d, const Llama3Weights& w, const Llama3Activations& act, const Llama3Grads& g) {
  ArgCheck c("llama3_backward");
  check_dims(c, d);
  if (!c.ok()) return c.status();
  check_weights(c, d, w);
  check_activations(c, d, act);
  const int64_t m = d.tokens;
  c.same_dtype("weights.wo", w.wo, "act.x0", act.x0)
      .tensor("grads.dx2", g.dx2, {m, d.hidden}, kGemmInputTypes, Layout::kRowMajor16)
      .tensor("grads.dqkv", g.dqkv, {m, d.heads.qkv_cols()}, kGemmInputTypes, Layout::kRowMajor16)
      .tensor("grads.dx0", g.dx0, {m, d.hidden}, kGemmInputTypes, Layout::kRowMajor16)
      .tensor("grads.dy0", g.dy0, {m, d.hidden}, kStoreTypes, Layout::kRowMajor16)
      .tensor("grads.dwo", g.dwo, {d.hidden, d.hidden}, kStoreTypes, Layout::kRowMajor16)
      .tensor("grads.dwgu", g.dwgu, {2 * d.ffn, d.hidden}, kStoreTypes, Layout::kRowMajor16)
      .tensor("grads.dwdown", g.dwdown, {d.hidden, d.ffn}, kStoreTypes, Layout::kRowMajor16)
      .tensor("grads.dwqkv", g.dwqkv, {d.heads.qkv_cols(), d.hidden}, kStoreTypes, Layout::kRowMajor16)
      .tensor("grads.dnorm0", g.dnorm0, {d.hidden}, kStoreTypes)
      .tensor("grads.dnorm1", g.dnorm1, {d.hidden}, kStoreTypes)
      .same_dtype("act.x0", act.x0, "grads.dx0", g.dx0);
  return c.status();
}

}  // namespace coda
