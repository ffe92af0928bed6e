// RoPE on interleaved pairs in the QKV GEMM's epilogue (coda-math.md 5.4).
//
// Columns [0, (hq + hkv) hd) hold the q and k heads; each head's pairs (2i, 2i+1) rotate by
// +theta = pos[m] * freq[i]; V columns are stored unrotated. Frequencies are given in turns per
// position (theta / 2pi), fp32, one per pair: rope_frequencies() builds them.
// Backward (elementwise): dz = R(-theta) dqkv and ZdZ = scale * sum(qkv * dqkv) (rotation keeps
// dot products).
#pragma once

#include <vector>

#include "coda/epilogue/program.hpp"
#include "coda/ops/common.hpp"

namespace coda {

struct HeadDims {
  int64_t heads_q = 0;
  int64_t heads_kv = 0;
  int64_t head_dim = 0;
  int64_t qkv_cols() const { return (heads_q + 2 * heads_kv) * head_dim; }
  int64_t rope_cols() const { return (heads_q + heads_kv) * head_dim; }
};

// gemm_rope (no rstd) and gemm_rmsnorm_rope.
struct RopeArgs {
  TensorView a;          // [M, K]
  TensorView b;          // [N3, K] fused q/k/v weight, q/k rows in interleaved-pair order
  TensorView rstd;       // optional [M] fp32
  TensorView positions;  // [M] int32, >= 0
  TensorView freqs;      // [head_dim / 2] fp32, turns per position
  HeadDims heads;
  TensorView out;        // [M, N3]
};
Status validate(const RopeArgs& args);

struct RopeBackwardArgs {
  TensorView qkv;        // [M, N3] the forward output (rotated)
  TensorView dqkv;       // [M, N3] its gradient
  TensorView positions;  // [M] int32
  TensorView freqs;      // [head_dim / 2] fp32 turns
  HeadDims heads;
  TensorView dz_out;     // [M, N3] gradient of the pre-rotation GEMM output
  TensorView zdz_out;    // optional [M] fp32: zdz_scale * sum_k qkv dqkv
  float zdz_scale = 1.0f;
};
Status validate(const RopeBackwardArgs& args);

// Llama-3.1-style frequency scaling; factor <= 0 disables it (plain RoPE).
struct RopeScaling {
  double factor = 0.0;            // e.g. 8
  double low_freq_factor = 1.0;   // e.g. 1
  double high_freq_factor = 4.0;  // e.g. 4
  double original_max_position = 8192.0;
};

// Per-pair frequencies in turns per position: freq_i = base^(-2i / head_dim) / (2 pi), with the
// optional Llama-3.1 scaling applied to the angular frequency first. head_dim / 2 values.
std::vector<float> rope_frequencies(int64_t head_dim, double base, const RopeScaling& scaling = {});

// Hugging Face stores each q and k head's rotation pairs as rows (i, i + head_dim/2) of the fused
// [N3, K] weight; coda rotates adjacent rows (2i, 2i + 1). Checks of
// permute_rotate_half_to_interleaved(w, heads, out): w and out [N3, K], one dtype, row-major, no
// overlap.
Status validate_permute_rotate_half_to_interleaved(const TensorView& w, const HeadDims& heads, const TensorView& out);

namespace programs {

struct Rope {
  static constexpr int kRowRstd = 0;
  static constexpr int kRowPos = 0;   // int rows
  static constexpr int kColFreq = 0;  // bound periodic: column n reads freqs[(n mod head_dim) / 2]
  static constexpr int kOut = 0;
  // the frequencies; a sin/cos table; two chunks per visit-loop iteration (half the accumulator
  // moves; 1B QKV ~1% faster on an H200, within the rounds' spread on an H100). NOTES: it spilled
  // (12-56 bytes) until the pipeline's masks left the consumer loop and the staging stores went out
  // as stmatrix (bench/NOTES.md 2026-12-04 third, 2026-12-06 second).
  static constexpr epi::Resources kResources = epi::chunk_visits({0, 0, 0, 0, 0, 1, 1}, 2);
  static constexpr uint32_t kRotNone = 1;  // span flag (program.hpp): no column rotates (v heads)
  static constexpr uint32_t kNoRotation = kRotNone;
  static constexpr int kFlagBits = 1;
  uint32_t flags = 0;
  bool has_rstd = false;  // a runtime switch: it selects a register multiplier (program.hpp)
  int rope_cols = 0;

  // NOTES: v is a sixth of the QKV columns (LLaMA-3 1B and 8B); its chunks skip the table fill, the
  // two SFU operations and the rotation. A second pinned bit ("every column rotates", no per-pair
  // column test) made four visit copies, and ptxas spilled 44 bytes (CUDA 13.0, sm_90a).
  CODA_HD uint32_t span_flags(int n0, int) const { return flags | (n0 >= rope_cols ? kRotNone : 0u); }

  template <class Ctx>
  CODA_HD void operator()(epi::Frag& f, Ctx& ctx) const {
    epi::row_mul_if(f, ctx, kRowRstd, has_rstd);
    if (!(flags & kRotNone)) {
      float s, c, x = f.v[0], y = f.v[1];
      ctx.rotation(f, kRowPos, kColFreq, &s, &c);  // theta = pos[m] * freq of the pair
      epi::rotate(&x, &y, s, c);
      if (f.n < rope_cols) {  // q and k heads rotate, v is stored as it is (a select, no branch)
        f.v[0] = x;
        f.v[1] = y;
      }
    }
    epi::store(f, ctx, kOut);
  }
};

}  // namespace programs
}  // namespace coda
