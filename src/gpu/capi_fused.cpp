// The C ABI of the forward fused operators: descriptors -> the C++ entry points (coda/gpu.hpp).
#include <cuda_runtime_api.h>

#include <vector>

#include "coda/capi_util.hpp"
#include "coda/coda.h"
#include "coda/gpu.hpp"

namespace {

using coda::TensorView;
TensorView tv(const coda_tensor_t* t) { return TensorView::from(t); }
cudaStream_t st(coda_stream_t s) { return reinterpret_cast<cudaStream_t>(s); }
coda::HeadDims hd(coda_heads_t h) { return coda::HeadDims{h.heads_q, h.heads_kv, h.head_dim}; }
coda_status_t report(const coda::Status& s) { return coda::detail::report(s); }

}  // namespace

extern "C" {

coda_status_t coda_gemm_residual_rmsnorm_partial(const coda_tensor_t* a, const coda_tensor_t* b,
                                                 const coda_tensor_t* residual, const coda_tensor_t* norm_weight,
                                                 const coda_tensor_t* x_out, const coda_tensor_t* h_out,
                                                 const coda_tensor_t* partials, float alpha, coda_stream_t stream) {
  return report(coda::gemm_residual_rmsnorm_partial(
      {tv(a), tv(b), tv(residual), tv(norm_weight), tv(x_out), tv(h_out), tv(partials), alpha}, st(stream)));
}

coda_status_t coda_rms_finish(const coda_tensor_t* partials, const coda_tensor_t* rstd_out, int64_t dim, float eps,
                              coda_stream_t stream) {
  return report(coda::rms_finish({tv(partials), tv(rstd_out), dim, eps}, st(stream)));
}

coda_status_t coda_gemm_swiglu(const coda_tensor_t* a, const coda_tensor_t* b, const coda_tensor_t* rstd,
                               const coda_tensor_t* z_out, const coda_tensor_t* o_out, coda_stream_t stream) {
  return report(coda::gemm_swiglu({tv(a), tv(b), tv(rstd), tv(z_out), tv(o_out)}, st(stream)));
}
coda_status_t coda_gemm_rmsnorm_swiglu(const coda_tensor_t* a, const coda_tensor_t* b, const coda_tensor_t* rstd,
                                       const coda_tensor_t* z_out, const coda_tensor_t* o_out, coda_stream_t stream) {
  return report(coda::gemm_rmsnorm_swiglu({tv(a), tv(b), tv(rstd), tv(z_out), tv(o_out)}, st(stream)));
}

coda_status_t coda_gemm_rope(const coda_tensor_t* a, const coda_tensor_t* b, const coda_tensor_t* rstd,
                             const coda_tensor_t* positions, const coda_tensor_t* freqs, coda_heads_t heads,
                             const coda_tensor_t* out, coda_stream_t stream) {
  return report(
      coda::gemm_rope({tv(a), tv(b), tv(rstd), tv(positions), tv(freqs), hd(heads), tv(out)}, st(stream)));
}
coda_status_t coda_gemm_rmsnorm_rope(const coda_tensor_t* a, const coda_tensor_t* b, const coda_tensor_t* rstd,
                                     const coda_tensor_t* positions, const coda_tensor_t* freqs, coda_heads_t heads,
                                     const coda_tensor_t* out, coda_stream_t stream) {
  return report(
      coda::gemm_rmsnorm_rope({tv(a), tv(b), tv(rstd), tv(positions), tv(freqs), hd(heads), tv(out)}, st(stream)));
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
  return report(coda::gemm_qkv_sqsum({tv(a), tv(b), tv(rstd), hd(heads), tv(qkv_out), tv(sumsq_out)}, st(stream)));
}

coda_status_t coda_qknorm_rope(const coda_tensor_t* qkv, const coda_tensor_t* sumsq, const coda_tensor_t* gamma_q,
                               const coda_tensor_t* gamma_k, const coda_tensor_t* positions,
                               const coda_tensor_t* freqs, coda_heads_t heads, float eps, const coda_tensor_t* out,
                               coda_stream_t stream) {
  return report(coda::qknorm_rope(
      {tv(qkv), tv(sumsq), tv(gamma_q), tv(gamma_k), tv(positions), tv(freqs), hd(heads), eps, tv(out)}, st(stream)));
}

coda_status_t coda_gemm_lse(const coda_tensor_t* a, const coda_tensor_t* b, const coda_tensor_t* rstd,
                            const coda_tensor_t* targets, int32_t ignore_index, const coda_tensor_t* logits_out,
                            const coda_tensor_t* lse_partials, const coda_tensor_t* target_logit_out,
                            coda_stream_t stream) {
  return report(coda::gemm_lse(
      {tv(a), tv(b), tv(rstd), tv(targets), ignore_index, tv(logits_out), tv(lse_partials), tv(target_logit_out)},
      st(stream)));
}
coda_status_t coda_gemm_rmsnorm_lse(const coda_tensor_t* a, const coda_tensor_t* b, const coda_tensor_t* rstd,
                                    const coda_tensor_t* targets, int32_t ignore_index,
                                    const coda_tensor_t* logits_out, const coda_tensor_t* lse_partials,
                                    const coda_tensor_t* target_logit_out, coda_stream_t stream) {
  return report(coda::gemm_rmsnorm_lse(
      {tv(a), tv(b), tv(rstd), tv(targets), ignore_index, tv(logits_out), tv(lse_partials), tv(target_logit_out)},
      st(stream)));
}

coda_status_t coda_lse_finish(const coda_tensor_t* partials, const coda_tensor_t* lse_out, coda_stream_t stream) {
  return report(coda::lse_finish({tv(partials), tv(lse_out)}, st(stream)));
}

coda_status_t coda_cross_entropy(const coda_tensor_t* lse, const coda_tensor_t* target_logit,
                                 const coda_tensor_t* targets, int32_t ignore_index, coda_reduction_t reduction,
                                 const coda_tensor_t* loss_out, const coda_tensor_t* row_loss_out,
                                 const coda_tensor_t* logits, const coda_tensor_t* dlogits_out, float dloss,
                                 coda_stream_t stream) {
  coda::CrossEntropyArgs ce;
  ce.lse = tv(lse);
  ce.target_logit = tv(target_logit);
  ce.targets = tv(targets);
  ce.ignore_index = ignore_index;
  ce.reduction = reduction == CODA_REDUCTION_SUM ? coda::Reduction::kSum : coda::Reduction::kMean;
  if (reduction != CODA_REDUCTION_SUM && reduction != CODA_REDUCTION_MEAN)
    return report(coda::Status::invalid_argument("coda_cross_entropy: argument 'reduction' must be MEAN or SUM"));
  ce.loss_out = tv(loss_out);
  ce.row_loss_out = tv(row_loss_out);
  ce.logits = tv(logits);
  ce.dlogits_out = tv(dlogits_out);
  ce.dloss = dloss;
  return report(coda::cross_entropy(ce, st(stream)));
}

size_t coda_lm_head_loss_workspace_bytes(int64_t m, int64_t v) { return coda::lm_head_loss_workspace_bytes(m, v); }

coda_status_t coda_lm_head_loss(const coda_tensor_t* a, const coda_tensor_t* b, const coda_tensor_t* rstd,
                                const coda_tensor_t* targets, int32_t ignore_index, coda_reduction_t reduction,
                                const coda_tensor_t* loss_out, const coda_tensor_t* row_loss_out,
                                const coda_tensor_t* lse_out, void* workspace, size_t workspace_bytes,
                                coda_stream_t stream) {
  if (reduction != CODA_REDUCTION_SUM && reduction != CODA_REDUCTION_MEAN)
    return report(coda::Status::invalid_argument("coda_lm_head_loss: argument 'reduction' must be MEAN or SUM"));
  coda::LmHeadLossArgs args;
  args.a = tv(a);
  args.b = tv(b);
  args.rstd = tv(rstd);
  args.targets = tv(targets);
  args.ignore_index = ignore_index;
  args.reduction = reduction == CODA_REDUCTION_SUM ? coda::Reduction::kSum : coda::Reduction::kMean;
  args.loss_out = tv(loss_out);
  args.row_loss_out = tv(row_loss_out);
  args.lse_out = tv(lse_out);
  args.workspace = workspace;
  args.workspace_bytes = workspace_bytes;
  return report(coda::lm_head_loss(args, st(stream)));
}

coda_status_t coda_interleave_gate_up(const coda_tensor_t* gate, const coda_tensor_t* up, const coda_tensor_t* out,
                                      coda_stream_t stream) {
  return report(coda::interleave_gate_up(tv(gate), tv(up), tv(out), st(stream)));
}

coda_status_t coda_permute_rotate_half_to_interleaved(const coda_tensor_t* w, coda_heads_t heads,
                                                      const coda_tensor_t* out, coda_stream_t stream) {
  return report(coda::permute_rotate_half_to_interleaved(tv(w), hd(heads), tv(out), st(stream)));
}

}  // extern "C"
