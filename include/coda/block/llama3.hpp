// The LLaMA-3 block (non-attention part) as a schedule of fused operators (coda-math.md 6).
//
// Forward:  1. x1, h1, P1 = gemm(y0, Wo) + x0 ;  r1 = rms_finish(P1)
//           2. z1, y1     = swiglu(r1 * gemm(h1, Wgu))
//           3. x2, h2, P2 = gemm(y1, Wdown) + x1 ; r2 = rms_finish(P2)
//           4. qkv        = rope(r2 * gemm(h2, Wqkv))
// Saved for backward: y0, x1, x2, r1, r2, z1, qkv (+ weights, positions); never h1, h2; y1 only
// when the caller gives Llama3Activations::y1 (otherwise the backward recomputes it).
// Backward, given dx2 and dqkv: rope_backward -> rmsnorm-backward epilogue of dz2 Wqkv (+= dx2)
// -> swiglu-backward epilogue of dx Wdown -> rmsnorm-backward epilogue of dz1 Wgu (+= dx) ->
// dy0 = dx1 Wo, plus the weight-gradient GEMMs and the norm-weight gradient finishes.
//
// The schedule is written once, over a Backend that provides scratch memory and the operators:
// the CPU emulator (EmuBackend) and the GPU (later) run the same sequence.
#pragma once

#include "coda/ops.hpp"

namespace coda {

struct Llama3Dims {
  int64_t tokens = 0;  // M
  int64_t hidden = 0;  // d
  int64_t ffn = 0;     // F
  HeadDims heads;      // hq, hkv, hd: N3 = (hq + 2 hkv) hd
  float eps = 1e-5f;
};

struct Llama3Weights {
  TensorView wo;      // [d, d]
  TensorView wgu;     // [2F, d] interleaved gate/up rows
  TensorView wdown;   // [d, F]
  TensorView wqkv;    // [N3, d] q/k rows in interleaved-pair order
  TensorView norm0;   // [d] norm after the attention residual
  TensorView norm1;   // [d] norm after the MLP residual
  TensorView freqs;   // [hd / 2] fp32 RoPE frequencies in turns per position
};

// Forward inputs (x0, y0, positions), outputs (x2, qkv) and saved tensors (x1, z1, r1, r2).
struct Llama3Activations {
  TensorView x0;         // [M, d] residual stream entering the block
  TensorView y0;         // [M, d] attention output (input of the out-projection)
  TensorView positions;  // [M] int32
  TensorView x1;         // [M, d]
  TensorView x2;         // [M, d] residual stream leaving the block
  TensorView z1;         // [M, 2F] SwiGLU pre-activation
  TensorView qkv;        // [M, N3] next layer's rotated q, k and v
  TensorView r1, r2;     // [M] fp32 rstd of x1, x2
  // Optional [M, F]: the SwiGLU output kept for the backward. Given, the forward writes y1 here and
  // the backward reads it for dWdown instead of recomputing it in the SwiGLU backward's epilogue,
  // whose stores shrink by a third (M x F more saved memory per layer; bench/NOTES.md: the 1B
  // SwiGLU backward ~7% faster). Absent, y1 is scratch in both passes.
  TensorView y1;
};

struct Llama3Grads {
  TensorView dx2;     // [M, d] gradient arriving through the residual stream (input)
  TensorView dqkv;    // [M, N3] gradient of qkv (input)
  TensorView dx0;     // [M, d]
  TensorView dy0;     // [M, d]
  TensorView dwo, dwgu, dwdown, dwqkv;  // shaped like the weights; bf16, fp16 or fp32
  TensorView dnorm0, dnorm1;            // [d]
};

Status validate(const Llama3Dims& d, const Llama3Weights& w, const Llama3Activations& act);
Status validate(const Llama3Dims& d, const Llama3Weights& w, const Llama3Activations& act, const Llama3Grads& g);

template <class Backend>
Status llama3_forward(Backend& be, const Llama3Dims& d, const Llama3Weights& w, const Llama3Activations& act) {
  CODA_TRY(validate(d, w, act));
  const int64_t m = d.tokens;
  if (m == 0) return {};
  const Grain grain = be.grain();
  const DType t = act.x1.dtype();
  const TensorView h1 = be.scratch(t, m, d.hidden);
  const TensorView p1 = be.scratch(DType::kFP32, m, ceil_div(d.hidden, grain.cols));
  const TensorView y1 = act.y1.defined() ? act.y1 : be.scratch(t, m, d.ffn);
  const TensorView h2 = be.scratch(t, m, d.hidden);
  const TensorView p2 = be.scratch(DType::kFP32, m, ceil_div(d.hidden, grain.cols));

  CODA_TRY(be.gemm_residual_rmsnorm_partial({act.y0, w.wo, act.x0, w.norm0, act.x1, h1, p1}));
  CODA_TRY(be.rms_finish({p1, act.r1, d.hidden, d.eps}));
  CODA_TRY(be.gemm_swiglu({h1, w.wgu, act.r1, act.z1, y1}));
  CODA_TRY(be.gemm_residual_rmsnorm_partial({y1, w.wdown, act.x1, w.norm1, act.x2, h2, p2}));
  CODA_TRY(be.rms_finish({p2, act.r2, d.hidden, d.eps}));
  CODA_TRY(be.gemm_rope({h2, w.wqkv, act.r2, act.positions, w.freqs, d.heads, act.qkv}));
  return {};
}

template <class Backend>
Status llama3_backward(Backend& be, const Llama3Dims& d, const Llama3Weights& w, const Llama3Activations& act,
                       const Llama3Grads& g) {
  CODA_TRY(validate(d, w, act, g));
  const int64_t m = d.tokens;  // m == 0 still runs: the weight and norm gradients become zeros
  const Grain grain = be.grain();
  const DType t = act.x1.dtype();
  const float inv_d = 1.0f / static_cast<float>(d.hidden);
  const int64_t n3 = d.heads.qkv_cols();
  const TensorView dz2 = be.scratch(t, m, n3);
  const TensorView c2 = be.scratch(DType::kFP32, m, 0);
  const TensorView dx = be.scratch(t, m, d.hidden);
  const TensorView n2 = be.scratch(t, m, d.hidden);
  const TensorView q2 = be.scratch(DType::kFP32, ceil_div(m, grain.rows), d.hidden);
  const TensorView dz1 = be.scratch(t, m, 2 * d.ffn);
  const bool keep_y1 = act.y1.defined();
  const TensorView y1 = keep_y1 ? act.y1 : be.scratch(t, m, d.ffn);
  const TensorView pz = be.scratch(DType::kFP32, m, ceil_div(d.ffn, grain.cols));
  const TensorView c1 = be.scratch(DType::kFP32, m, 0);
  const TensorView n1 = be.scratch(t, m, d.hidden);
  const TensorView q1 = be.scratch(DType::kFP32, ceil_div(m, grain.rows), d.hidden);

  // qkv = rope(r2 * h2 Wqkv^T): un-rotate, ZdZ2 = (1/d) sum qkv dqkv
  CODA_TRY(be.rope_backward({act.qkv, g.dqkv, act.positions, w.freqs, d.heads, dz2, c2, inv_d}));
  // dx = RMSNorm-backward(dz2 Wqkv) + dx2; n2 = RMSNorm(x2) recomputed; dnorm1 partials
  CODA_TRY(be.gemm_rmsnorm_backward(
      {dz2, w.wqkv.transposed(), act.x2, act.r2, c2, w.norm1, g.dx2, dx, n2, q2}));
  CODA_TRY(be.col_sum_finish({q2, g.dnorm1}));
  CODA_TRY(be.gemm({dz2.transposed(), n2.transposed(), {}, g.dwqkv}));
  // dz1 = SwiGLU-backward(dx Wdown), ZdZ1 partials, y1 recomputed unless the forward kept it
  CODA_TRY(be.gemm_swiglu_backward({dx, w.wdown.transposed(), act.z1, dz1, keep_y1 ? TensorView() : y1, pz}));
  CODA_TRY(be.row_sum_finish({pz, c1, inv_d}));
  CODA_TRY(be.gemm({dx.transposed(), y1.transposed(), {}, g.dwdown}));
  // dx0 = RMSNorm-backward(dz1 Wgu) + dx; n1 recomputed; dnorm0 partials
  CODA_TRY(be.gemm_rmsnorm_backward(
      {dz1, w.wgu.transposed(), act.x1, act.r1, c1, w.norm0, dx, g.dx0, n1, q1}));
  CODA_TRY(be.col_sum_finish({q1, g.dnorm0}));
  CODA_TRY(be.gemm({dz1.transposed(), n1.transposed(), {}, g.dwgu}));
  // x1 = y0 Wo^T + x0
  CODA_TRY(be.gemm({g.dx0, w.wo.transposed(), {}, g.dy0}));
  CODA_TRY(be.gemm({g.dx0.transposed(), act.y0.transposed(), {}, g.dwo}));
  return {};
}

}  // namespace coda
