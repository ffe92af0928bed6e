// QK-norm + RoPE (coda-math.md 5.6).
//
// The QKV GEMM emits per-head sums of squares (segmented row partials) besides qkv; an elementwise
// kernel then applies per-head RMSNorm with weight gamma (gamma_q for q heads, gamma_k for k
// heads) and RoPE. V is copied. Backward is elementwise (plus the two plain GEMMs).
//
// Segments: a head is one segment when head_dim divides grain.cols, and head_dim / grain.cols
// segments when grain.cols divides head_dim; other head dims are rejected.
#pragma once

#include "coda/epilogue/program.hpp"
#include "coda/ops/rope.hpp"

namespace coda {

// Segments per head for a column grain; 0 if head_dim and grain are incompatible.
inline int64_t qk_segments(int64_t head_dim, int64_t grain_cols) {
  if (head_dim <= 0 || grain_cols <= 0) return 0;
  if (grain_cols % head_dim == 0) return 1;
  if (head_dim % grain_cols == 0) return head_dim / grain_cols;
  return 0;
}

struct QkvSqsumArgs {
  TensorView a;           // [M, K]
  TensorView b;           // [N3, K]
  TensorView rstd;        // optional [M] fp32
  HeadDims heads;
  TensorView qkv_out;     // [M, N3] pre-norm q, k, v
  TensorView sumsq_out;   // [M, (hq + hkv) * segments] fp32
};
Status validate(const QkvSqsumArgs& args, const Grain& grain = {});

struct QkNormRopeArgs {
  TensorView qkv;        // [M, N3] pre-norm (from gemm_qkv_sqsum)
  TensorView sumsq;      // [M, (hq + hkv) * segments] fp32
  TensorView gamma_q;    // [head_dim]
  TensorView gamma_k;    // [head_dim]
  TensorView positions;  // [M] int32
  TensorView freqs;      // [head_dim / 2] fp32 turns
  HeadDims heads;
  float eps = 1e-6f;
  TensorView out;        // [M, N3] may be the same view as qkv (in place)
};
Status validate(const QkNormRopeArgs& args, const Grain& grain = {});

struct QkNormRopeBackwardArgs {
  TensorView qkv;        // [M, N3] pre-norm (saved)
  TensorView gamma_q, gamma_k, positions, freqs;
  HeadDims heads;
  float eps = 1e-6f;
  TensorView dout;               // [M, N3] gradient of the qknorm_rope output
  TensorView dqkv_out;           // [M, N3] gradient of the GEMM output
  TensorView dgamma_q_partials;  // [ceil(M / grain.rows), head_dim] fp32
  TensorView dgamma_k_partials;  // [ceil(M / grain.rows), head_dim] fp32
  TensorView zdz_out;            // optional [M] fp32: zdz_scale * sum_k qkv dqkv
  float zdz_scale = 1.0f;
};
Status validate(const QkNormRopeBackwardArgs& args, const Grain& grain = {});

namespace programs {

struct QkvSqsum {
  static constexpr int kRowRstd = 0;
  static constexpr int kOutQkv = 0;
  static constexpr int kSegSumSq = 0;
  // a segment sum. NOTES: two chunks per visit (the default) since 2026-12-04: 1B 1.10 -> 1.07x
  // cuBLAS, 8B 1.06 -> 1.05x (H200, three alternating rounds; no spills). One chunk per visit had
  // been chosen when two spilled 60 bytes (bench/NOTES.md).
  static constexpr epi::Resources kResources{0, 0, 1, 0, 0};
  static constexpr uint32_t kSumNone = 1;  // span flag (program.hpp): no column is q or k (v heads)
  static constexpr int kFlagBits = 1;
  uint32_t flags = 0;
  bool has_rstd = false;  // a runtime switch: it selects a register multiplier (program.hpp)
  int rope_cols = 0;      // q and k columns

  CODA_HD uint32_t span_flags(int n0, int) const { return flags | (n0 >= rope_cols ? kSumNone : 0u); }

  template <class Ctx>
  CODA_HD void operator()(epi::Frag& f, Ctx& ctx) const {
    epi::row_mul_if(f, ctx, kRowRstd, has_rstd);
    epi::store(f, ctx, kOutQkv);
    if (!(flags & kSumNone)) epi::segment_sum_squares(f, ctx, kSegSumSq, rope_cols);
  }
};

}  // namespace programs
}  // namespace coda
