// The C ABI of every operator: descriptors -> argument structs -> the backend where the tensors
// live (detail::dispatch): device memory -> the GPU entry points (coda/gpu.hpp) on `stream`, host
// memory -> the CPU emulator (coda/ref/emulator.hpp), a mix -> CODA_ERROR_INVALID_ARGUMENT. Both
// backends validate with the same validate(), so a bad argument gets the same message either way.
#include <cuda_runtime_api.h>

#include <vector>

#include "coda/capi_util.hpp"
#include "coda/coda.h"
#include "coda/gpu.hpp"
#include "coda/ref/emulator.hpp"

namespace {

using coda::TensorView;
using coda::detail::dispatch;
TensorView tv(const coda_tensor_t* t) { return TensorView::from(t); }
cudaStream_t st(coda_stream_t s) { return reinterpret_cast<cudaStream_t>(s); }
coda::HeadDims hd(coda_heads_t h) { return coda::HeadDims{h.heads_q, h.heads_kv, h.head_dim}; }
coda_status_t report(const coda::Status& s) { return coda::detail::report(s); }

bool reduction_ok(coda_reduction_t r) { return r == CODA_REDUCTION_MEAN || r == CODA_REDUCTION_SUM; }
coda::Reduction reduction_of(coda_reduction_t r) {
  return r == CODA_REDUCTION_SUM ? coda::Reduction::kSum : coda::Reduction::kMean;
}

}  // namespace

extern "C" {

// ---- GEMM ---------------------------------------------------------------------------------------------

coda_status_t coda_gemm(const coda_tensor_t* a, const coda_tensor_t* b, const coda_tensor_t* d,
                        coda_stream_t stream) {
  coda::GemmArgs args;
  args.a = tv(a);
  args.b = tv(b);
  args.d = tv(d);
  return dispatch(
      "gemm", {{"a", a}, {"b", b}, {"d", d}}, [&] { return coda::gemm(args, st(stream)); },
      [&] { return coda::emu::gemm(args); });
}

coda_status_t coda_gemm_ex(const coda_tensor_t* a, const coda_tensor_t* b, const coda_tensor_t* c,
                           const coda_tensor_t* d, float alpha, float beta, const float* alpha_ptr,
                           const float* beta_ptr, coda_stream_t stream) {
  coda::GemmArgs args;
  args.a = tv(a);
  args.b = tv(b);
  args.c = tv(c);
  args.d = tv(d);
  args.alpha = alpha;
  args.beta = beta;
  args.alpha_ptr = alpha_ptr;
  args.beta_ptr = beta_ptr;
  return dispatch(
      "gemm_ex",
      {{"a", a}, {"b", b}, {"c", c}, {"d", d}, {"alpha_ptr", alpha_ptr}, {"beta_ptr", beta_ptr}},
      [&] { return coda::gemm(args, st(stream)); }, [&] { return coda::emu::gemm(args); });
}

// ---- forward fused operators ----------------------------------------------------------------------------

coda_status_t coda_gemm_residual_rmsnorm_partial(const coda_tensor_t* a, const coda_tensor_t* b,
                                                 const coda_tensor_t* residual, const coda_tensor_t* norm_weight,
                                                 const coda_tensor_t* x_out, const coda_tensor_t* h_out,
                                                 const coda_tensor_t* partials, float alpha, coda_stream_t stream) {
  const coda::ResidualRmsNormPartialArgs args{tv(a),     tv(b),     tv(residual), tv(norm_weight),
                                              tv(x_out), tv(h_out), tv(partials), alpha};
  return dispatch(
      "gemm_residual_rmsnorm_partial",
      {{"a", a}, {"b", b}, {"residual", residual}, {"norm_weight", norm_weight}, {"x_out", x_out}, {"h_out", h_out},
       {"partials", partials}},
      [&] { return coda::gemm_residual_rmsnorm_partial(args, st(stream)); },
      [&] { return coda::emu::gemm_residual_rmsnorm_partial(args); });
}

coda_status_t coda_rms_finish(const coda_tensor_t* partials, const coda_tensor_t* rstd_out, int64_t dim, float eps,
                              coda_stream_t stream) {
  const coda::RmsFinishArgs args{tv(partials), tv(rstd_out), dim, eps};
  return dispatch(
      "rms_finish", {{"partials", partials}, {"rstd_out", rstd_out}},
      [&] { return coda::rms_finish(args, st(stream)); }, [&] { return coda::emu::rms_finish(args); });
}

coda_status_t coda_gemm_swiglu(const coda_tensor_t* a, const coda_tensor_t* b, const coda_tensor_t* rstd,
                               const coda_tensor_t* z_out, const coda_tensor_t* o_out, coda_stream_t stream) {
  const coda::SwigluArgs args{tv(a), tv(b), tv(rstd), tv(z_out), tv(o_out)};
  return dispatch(
      "gemm_swiglu", {{"a", a}, {"b", b}, {"rstd", rstd}, {"z_out", z_out}, {"o_out", o_out}},
      [&] { return coda::gemm_swiglu(args, st(stream)); }, [&] { return coda::emu::gemm_swiglu(args); });
}
coda_status_t coda_gemm_rmsnorm_swiglu(const coda_tensor_t* a, const coda_tensor_t* b, const coda_tensor_t* rstd,
                                       const coda_tensor_t* z_out, const coda_tensor_t* o_out, coda_stream_t stream) {
  const coda::SwigluArgs args{tv(a), tv(b), tv(rstd), tv(z_out), tv(o_out)};
  return dispatch(
      "gemm_rmsnorm_swiglu", {{"a", a}, {"b", b}, {"rstd", rstd}, {"z_out", z_out}, {"o_out", o_out}},
      [&] { return coda::gemm_rmsnorm_swiglu(args, st(stream)); },
      [&] { return coda::emu::gemm_rmsnorm_swiglu(args); });
}

coda_status_t coda_gemm_rope(const coda_tensor_t* a, const coda_tensor_t* b, const coda_tensor_t* rstd,
                             const coda_tensor_t* positions, const coda_tensor_t* freqs, coda_heads_t heads,
                             const coda_tensor_t* out, coda_stream_t stream) {
  const coda::RopeArgs args{tv(a), tv(b), tv(rstd), tv(positions), tv(freqs), hd(heads), tv(out)};
  return dispatch(
      "gemm_rope",
      {{"a", a}, {"b", b}, {"rstd", rstd}, {"positions", positions}, {"freqs", freqs}, {"out", out}},
      [&] { return coda::gemm_rope(args, st(stream)); }, [&] { return coda::emu::gemm_rope(args); });
}
coda_status_t coda_gemm_rmsnorm_rope(const coda_tensor_t* a, const coda_tensor_t* b, const coda_tensor_t* rstd,
                                     const coda_tensor_t* positions, const coda_tensor_t* freqs, coda_heads_t heads,
                                     const coda_tensor_t* out, coda_stream_t stream) {
  const coda::RopeArgs args{tv(a), tv(b), tv(rstd), tv(positions), tv(freqs), hd(heads), tv(out)};
  return dispatch(
      "gemm_rmsnorm_rope",
      {{"a", a}, {"b", b}, {"rstd", rstd}, {"positions", positions}, {"freqs", freqs}, {"out", out}},
      [&] { return coda::gemm_rmsnorm_rope(args, st(stream)); }, [&] { return coda::emu::gemm_rmsnorm_rope(args); });
}

coda_status_t coda_rope_frequencies(float* out, int64_t head_dim, double base, double scaling_factor,
                                    double low_freq_factor, double high_freq_factor, double original_max_position) {
  if (!out) return report(coda::Status::invalid_argument("coda_rope_frequencies: argument 'out' is null"));
  if (head_dim < 2 || head_dim % 2 != 0)
    return report(coda::Status::invalid_argument("coda_rope_frequencies: argument 'head_dim' must be even and >= 2"));
  if (!(base > 1.0))
    return report(coda::Status::invalid_argument("coda_rope_frequencies: argument 'base' must be > 1"));
  const std::vector<float> f = coda::rope_frequencies(
      head_dim, base, coda::RopeScaling{scaling_factor, low_freq_factor, high_freq_factor, original_max_position});
  for (size_t i = 0; i < f.size(); ++i) out[i] = f[i];
  return report({});
}

coda_status_t coda_gemm_qkv_sqsum(const coda_tensor_t* a, const coda_tensor_t* b, const coda_tensor_t* rstd,
                                  coda_heads_t heads, const coda_tensor_t* qkv_out, const coda_tensor_t* sumsq_out,
                                  coda_stream_t stream) {
  const coda::QkvSqsumArgs args{tv(a), tv(b), tv(rstd), hd(heads), tv(qkv_out), tv(sumsq_out)};
  return dispatch(
      "gemm_qkv_sqsum", {{"a", a}, {"b", b}, {"rstd", rstd}, {"qkv_out", qkv_out}, {"sumsq_out", sumsq_out}},
      [&] { return coda::gemm_qkv_sqsum(args, st(stream)); }, [&] { return coda::emu::gemm_qkv_sqsum(args); });
}

coda_status_t coda_qknorm_rope(const coda_tensor_t* qkv, const coda_tensor_t* sumsq, const coda_tensor_t* gamma_q,
                               const coda_tensor_t* gamma_k, const coda_tensor_t* positions,
                               const coda_tensor_t* freqs, coda_heads_t heads, float eps, const coda_tensor_t* out,
                               coda_stream_t stream) {
  const coda::QkNormRopeArgs args{tv(qkv),       tv(sumsq), tv(gamma_q), tv(gamma_k), tv(positions),
                                  tv(freqs),     hd(heads), eps,         tv(out)};
  return dispatch(
      "qknorm_rope",
      {{"qkv", qkv}, {"sumsq", sumsq}, {"gamma_q", gamma_q}, {"gamma_k", gamma_k}, {"positions", positions},
       {"freqs", freqs}, {"out", out}},
      [&] { return coda::qknorm_rope(args, st(stream)); }, [&] { return coda::emu::qknorm_rope(args); });
}

// ---- LM head and cross-entropy --------------------------------------------------------------------------

coda_status_t coda_gemm_lse(const coda_tensor_t* a, const coda_tensor_t* b, const coda_tensor_t* rstd,
                            const coda_tensor_t* targets, int32_t ignore_index, const coda_tensor_t* logits_out,
                            const coda_tensor_t* lse_partials, const coda_tensor_t* target_logit_out,
                            coda_stream_t stream) {
  const coda::LmHeadLseArgs args{tv(a),          tv(b),          tv(rstd),          tv(targets),
                                 ignore_index,   tv(logits_out), tv(lse_partials), tv(target_logit_out)};
  return dispatch(
      "gemm_lse",
      {{"a", a}, {"b", b}, {"rstd", rstd}, {"targets", targets}, {"logits_out", logits_out},
       {"lse_partials", lse_partials}, {"target_logit_out", target_logit_out}},
      [&] { return coda::gemm_lse(args, st(stream)); }, [&] { return coda::emu::gemm_lse(args); });
}
coda_status_t coda_gemm_rmsnorm_lse(const coda_tensor_t* a, const coda_tensor_t* b, const coda_tensor_t* rstd,
                                    const coda_tensor_t* targets, int32_t ignore_index,
                                    const coda_tensor_t* logits_out, const coda_tensor_t* lse_partials,
                                    const coda_tensor_t* target_logit_out, coda_stream_t stream) {
  const coda::LmHeadLseArgs args{tv(a),          tv(b),          tv(rstd),          tv(targets),
                                 ignore_index,   tv(logits_out), tv(lse_partials), tv(target_logit_out)};
  return dispatch(
      "gemm_rmsnorm_lse",
      {{"a", a}, {"b", b}, {"rstd", rstd}, {"targets", targets}, {"logits_out", logits_out},
       {"lse_partials", lse_partials}, {"target_logit_out", target_logit_out}},
      [&] { return coda::gemm_rmsnorm_lse(args, st(stream)); }, [&] { return coda::emu::gemm_rmsnorm_lse(args); });
}

coda_status_t coda_lse_finish(const coda_tensor_t* partials, const coda_tensor_t* lse_out, coda_stream_t stream) {
  const coda::LseFinishArgs args{tv(partials), tv(lse_out)};
  return dispatch(
      "lse_finish", {{"partials", partials}, {"lse_out", lse_out}},
      [&] { return coda::lse_finish(args, st(stream)); }, [&] { return coda::emu::lse_finish(args); });
}

coda_status_t coda_cross_entropy(const coda_tensor_t* lse, const coda_tensor_t* target_logit,
                                 const coda_tensor_t* targets, int32_t ignore_index, coda_reduction_t reduction,
                                 const coda_tensor_t* loss_out, const coda_tensor_t* row_loss_out,
                                 const coda_tensor_t* logits, const coda_tensor_t* dlogits_out, float dloss,
                                 coda_stream_t stream) {
  if (!reduction_ok(reduction))
    return report(coda::Status::invalid_argument("coda_cross_entropy: argument 'reduction' must be MEAN or SUM"));
  coda::CrossEntropyArgs args;
  args.lse = tv(lse);
  args.target_logit = tv(target_logit);
  args.targets = tv(targets);
  args.ignore_index = ignore_index;
  args.reduction = reduction_of(reduction);
  args.loss_out = tv(loss_out);
  args.row_loss_out = tv(row_loss_out);
  args.logits = tv(logits);
  args.dlogits_out = tv(dlogits_out);
  args.dloss = dloss;
  return dispatch(
      "cross_entropy",
      {{"lse", lse}, {"target_logit", target_logit}, {"targets", targets}, {"loss_out", loss_out},
       {"row_loss_out", row_loss_out}, {"logits", logits}, {"dlogits_out", dlogits_out}},
      [&] { return coda::cross_entropy(args, st(stream)); }, [&] { return coda::emu::cross_entropy(args); });
}

size_t coda_lm_head_loss_workspace_bytes(int64_t m, int64_t v) { return coda::lm_head_loss_workspace_bytes(m, v); }

coda_status_t coda_lm_head_loss(const coda_tensor_t* a, const coda_tensor_t* b, const coda_tensor_t* rstd,
                                const coda_tensor_t* targets, int32_t ignore_index, coda_reduction_t reduction,
                                const coda_tensor_t* loss_out, const coda_tensor_t* row_loss_out,
                                const coda_tensor_t* lse_out, void* workspace, size_t workspace_bytes,
                                coda_stream_t stream) {
  if (!reduction_ok(reduction))
    return report(coda::Status::invalid_argument("coda_lm_head_loss: argument 'reduction' must be MEAN or SUM"));
  coda::LmHeadLossArgs args;
  args.a = tv(a);
  args.b = tv(b);
  args.rstd = tv(rstd);
  args.targets = tv(targets);
  args.ignore_index = ignore_index;
  args.reduction = reduction_of(reduction);
  args.loss_out = tv(loss_out);
  args.row_loss_out = tv(row_loss_out);
  args.lse_out = tv(lse_out);
  args.workspace = workspace;
  args.workspace_bytes = workspace_bytes;
  return dispatch(
      "lm_head_loss",
      {{"a", a}, {"b", b}, {"rstd", rstd}, {"targets", targets}, {"loss_out", loss_out},
       {"row_loss_out", row_loss_out}, {"lse_out", lse_out}, {"workspace", workspace}},
      [&] { return coda::lm_head_loss(args, st(stream)); }, [&] { return coda::emu::lm_head_loss(args); });
}

size_t coda_lm_head_train_workspace_bytes(int64_t m, int64_t v) { return coda::lm_head_train_workspace_bytes(m, v); }

coda_status_t coda_lm_head_train(const coda_tensor_t* a, const coda_tensor_t* b, const coda_tensor_t* rstd,
                                 const coda_tensor_t* targets, int32_t ignore_index, coda_reduction_t reduction,
                                 const coda_tensor_t* loss_out, const coda_tensor_t* row_loss_out,
                                 const coda_tensor_t* lse_out, const coda_tensor_t* grad_out,
                                 const coda_tensor_t* grad_scale_out, void* workspace, size_t workspace_bytes,
                                 coda_stream_t stream) {
  if (!reduction_ok(reduction))
    return report(coda::Status::invalid_argument("coda_lm_head_train: argument 'reduction' must be MEAN or SUM"));
  coda::LmHeadTrainArgs args;
  args.a = tv(a);
  args.b = tv(b);
  args.rstd = tv(rstd);
  args.targets = tv(targets);
  args.ignore_index = ignore_index;
  args.reduction = reduction_of(reduction);
  args.loss_out = tv(loss_out);
  args.row_loss_out = tv(row_loss_out);
  args.lse_out = tv(lse_out);
  args.grad_out = tv(grad_out);
  args.grad_scale_out = tv(grad_scale_out);
  args.workspace = workspace;
  args.workspace_bytes = workspace_bytes;
  return dispatch(
      "lm_head_train",
      {{"a", a}, {"b", b}, {"rstd", rstd}, {"targets", targets}, {"loss_out", loss_out},
       {"row_loss_out", row_loss_out}, {"lse_out", lse_out}, {"grad_out", grad_out},
       {"grad_scale_out", grad_scale_out}, {"workspace", workspace}},
      [&] { return coda::lm_head_train(args, st(stream)); }, [&] { return coda::emu::lm_head_train(args); });
}

size_t coda_lm_head_backward_workspace_bytes(int64_t m, int64_t k) {
  return coda::lm_head_backward_workspace_bytes(m, k);
}

coda_status_t coda_lm_head_backward(const coda_tensor_t* a, const coda_tensor_t* b, const coda_tensor_t* rstd,
                                    const coda_tensor_t* grad, const coda_tensor_t* grad_scale, float dloss,
                                    const float* dloss_ptr, const coda_tensor_t* da_out, const coda_tensor_t* db_out,
                                    void* workspace, size_t workspace_bytes, coda_stream_t stream) {
  coda::LmHeadBackwardArgs args;
  args.a = tv(a);
  args.b = tv(b);
  args.rstd = tv(rstd);
  args.grad = tv(grad);
  args.grad_scale = tv(grad_scale);
  args.dloss = dloss;
  args.dloss_ptr = dloss_ptr;
  args.da_out = tv(da_out);
  args.db_out = tv(db_out);
  args.workspace = workspace;
  args.workspace_bytes = workspace_bytes;
  return dispatch(
      "lm_head_backward",
      {{"a", a}, {"b", b}, {"rstd", rstd}, {"grad", grad}, {"grad_scale", grad_scale}, {"dloss_ptr", dloss_ptr},
       {"da_out", da_out}, {"db_out", db_out}, {"workspace", workspace}},
      [&] { return coda::lm_head_backward(args, st(stream)); }, [&] { return coda::emu::lm_head_backward(args); });
}

// ---- backward fused operators ----------------------------------------------------------------------------

coda_status_t coda_gemm_rmsnorm_backward(const coda_tensor_t* a, const coda_tensor_t* b, const coda_tensor_t* x,
                                         const coda_tensor_t* rstd, const coda_tensor_t* zdz,
                                         const coda_tensor_t* norm_weight, const coda_tensor_t* dres,
                                         const coda_tensor_t* dx_out, const coda_tensor_t* y_out,
                                         const coda_tensor_t* dw_partials, coda_stream_t stream) {
  const coda::RmsNormBackwardArgs args{tv(a),    tv(b),      tv(x),      tv(rstd),  tv(zdz), tv(norm_weight),
                                       tv(dres), tv(dx_out), tv(y_out), tv(dw_partials)};
  return dispatch(
      "gemm_rmsnorm_backward",
      {{"a", a}, {"b", b}, {"x", x}, {"rstd", rstd}, {"zdz", zdz}, {"norm_weight", norm_weight}, {"dres", dres},
       {"dx_out", dx_out}, {"y_out", y_out}, {"dw_partials", dw_partials}},
      [&] { return coda::gemm_rmsnorm_backward(args, st(stream)); },
      [&] { return coda::emu::gemm_rmsnorm_backward(args); });
}

coda_status_t coda_gemm_swiglu_backward(const coda_tensor_t* a, const coda_tensor_t* b, const coda_tensor_t* z,
                                        const coda_tensor_t* dz_out, const coda_tensor_t* o_out,
                                        const coda_tensor_t* zdz_partials, coda_stream_t stream) {
  const coda::SwigluBackwardArgs args{tv(a), tv(b), tv(z), tv(dz_out), tv(o_out), tv(zdz_partials)};
  return dispatch(
      "gemm_swiglu_backward",
      {{"a", a}, {"b", b}, {"z", z}, {"dz_out", dz_out}, {"o_out", o_out}, {"zdz_partials", zdz_partials}},
      [&] { return coda::gemm_swiglu_backward(args, st(stream)); },
      [&] { return coda::emu::gemm_swiglu_backward(args); });
}

coda_status_t coda_row_sum_finish(const coda_tensor_t* partials, const coda_tensor_t* out, float scale,
                                  coda_stream_t stream) {
  const coda::RowSumFinishArgs args{tv(partials), tv(out), scale};
  return dispatch(
      "row_sum_finish", {{"partials", partials}, {"out", out}},
      [&] { return coda::row_sum_finish(args, st(stream)); }, [&] { return coda::emu::row_sum_finish(args); });
}

coda_status_t coda_col_sum_finish(const coda_tensor_t* partials, const coda_tensor_t* out, coda_stream_t stream) {
  const coda::ColSumFinishArgs args{tv(partials), tv(out)};
  return dispatch(
      "col_sum_finish", {{"partials", partials}, {"out", out}},
      [&] { return coda::col_sum_finish(args, st(stream)); }, [&] { return coda::emu::col_sum_finish(args); });
}

coda_status_t coda_rope_backward(const coda_tensor_t* qkv, const coda_tensor_t* dqkv, const coda_tensor_t* positions,
                                 const coda_tensor_t* freqs, coda_heads_t heads, const coda_tensor_t* dz_out,
                                 const coda_tensor_t* zdz_out, float zdz_scale, coda_stream_t stream) {
  const coda::RopeBackwardArgs args{tv(qkv),   tv(dqkv),   tv(positions), tv(freqs),
                                    hd(heads), tv(dz_out), tv(zdz_out),   zdz_scale};
  return dispatch(
      "rope_backward",
      {{"qkv", qkv}, {"dqkv", dqkv}, {"positions", positions}, {"freqs", freqs}, {"dz_out", dz_out},
       {"zdz_out", zdz_out}},
      [&] { return coda::rope_backward(args, st(stream)); }, [&] { return coda::emu::rope_backward(args); });
}

coda_status_t coda_qknorm_rope_backward(const coda_tensor_t* qkv, const coda_tensor_t* gamma_q,
                                        const coda_tensor_t* gamma_k, const coda_tensor_t* positions,
                                        const coda_tensor_t* freqs, coda_heads_t heads, float eps,
                                        const coda_tensor_t* dout, const coda_tensor_t* dqkv_out,
                                        const coda_tensor_t* dgamma_q_partials,
                                        const coda_tensor_t* dgamma_k_partials, const coda_tensor_t* zdz_out,
                                        float zdz_scale, coda_stream_t stream) {
  const coda::QkNormRopeBackwardArgs args{tv(qkv),       tv(gamma_q),           tv(gamma_k),
                                          tv(positions), tv(freqs),             hd(heads),
                                          eps,           tv(dout),              tv(dqkv_out),
                                          tv(dgamma_q_partials), tv(dgamma_k_partials), tv(zdz_out),
                                          zdz_scale};
  return dispatch(
      "qknorm_rope_backward",
      {{"qkv", qkv}, {"gamma_q", gamma_q}, {"gamma_k", gamma_k}, {"positions", positions}, {"freqs", freqs},
       {"dout", dout}, {"dqkv_out", dqkv_out}, {"dgamma_q_partials", dgamma_q_partials},
       {"dgamma_k_partials", dgamma_k_partials}, {"zdz_out", zdz_out}},
      [&] { return coda::qknorm_rope_backward(args, st(stream)); },
      [&] { return coda::emu::qknorm_rope_backward(args); });
}

// ---- weight-layout helpers ------------------------------------------------------------------------------

coda_status_t coda_interleave_gate_up(const coda_tensor_t* gate, const coda_tensor_t* up, const coda_tensor_t* out,
                                      coda_stream_t stream) {
  const TensorView g = tv(gate), u = tv(up), o = tv(out);
  return dispatch(
      "interleave_gate_up", {{"gate", gate}, {"up", up}, {"out", out}},
      [&] { return coda::interleave_gate_up(g, u, o, st(stream)); },
      [&] { return coda::emu::interleave_gate_up(g, u, o); });
}

coda_status_t coda_permute_rotate_half_to_interleaved(const coda_tensor_t* w, coda_heads_t heads,
                                                      const coda_tensor_t* out, coda_stream_t stream) {
  const TensorView wv = tv(w), o = tv(out);
  return dispatch(
      "permute_rotate_half_to_interleaved", {{"w", w}, {"out", out}},
      [&] { return coda::permute_rotate_half_to_interleaved(wv, hd(heads), o, st(stream)); },
      [&] { return coda::emu::permute_rotate_half_to_interleaved(wv, hd(heads), o); });
}

}  // extern "C"
