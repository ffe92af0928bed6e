// Float64 reference implementations: the ground truth for every operator (coda-math.md 5, 6).
//
// Plain, unfused, obviously-correct loops on dense row-major double matrices. Nothing here is
// fast or shared with the kernels; the only shared piece is the convention (interleaved pairs,
// turns for RoPE frequencies, ignore_index).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace coda::ref {

struct Mat {
  int64_t rows = 0, cols = 0;
  std::vector<double> v;

  Mat() = default;
  Mat(int64_t r, int64_t c, double fill = 0.0) : rows(r), cols(c), v(static_cast<size_t>(r * c), fill) {}
  double& operator()(int64_t i, int64_t j) { return v[static_cast<size_t>(i * cols + j)]; }
  double operator()(int64_t i, int64_t j) const { return v[static_cast<size_t>(i * cols + j)]; }
};
using Vec = std::vector<double>;

// ---- linear algebra --------------------------------------------------------------------------
Mat matmul_nt(const Mat& a, const Mat& b);  // a [M, K], b [N, K] -> a b^T   (linear forward)
Mat matmul_nn(const Mat& a, const Mat& b);  // a [M, K], b [K, N] -> a b     (data grad)
Mat matmul_tn(const Mat& a, const Mat& b);  // a [K, M], b [K, N] -> a^T b   (weight grad)
Mat transpose(const Mat& a);
Mat add(const Mat& a, const Mat& b);
Mat scale(const Mat& a, double s);
double dot(const Mat& a, const Mat& b);
double frobenius(const Mat& a);
// ||a - b||_F / ||b||_F (NaN if either has NaN; 0 when both are all-zero).
double rel_error(const Mat& a, const Mat& b);
Mat from_vec(const Vec& v);  // [n, 1]

// ---- RMSNorm (5.1, 5.2) ------------------------------------------------------------------------
Vec rms_rstd(const Mat& x, double eps);
Mat rmsnorm(const Mat& x, const Vec& w, double eps);
struct RmsNormGrad {
  Mat dx;
  Vec dw;
};
RmsNormGrad rmsnorm_backward(const Mat& x, const Vec& w, double eps, const Mat& dy);

// ---- SwiGLU, interleaved (5.3) -----------------------------------------------------------------
Mat swiglu(const Mat& z);                          // [M, 2F] -> [M, F]
Mat swiglu_backward(const Mat& z, const Mat& dout);  // -> dz [M, 2F]

// ---- RoPE, interleaved pairs, V untouched (5.4) ------------------------------------------------
struct Heads {
  int64_t q = 0, kv = 0, dim = 0;
  int64_t cols() const { return (q + 2 * kv) * dim; }
  int64_t rope_cols() const { return (q + kv) * dim; }
};
// freq_turns: head_dim / 2 frequencies in turns per position; sign +1 rotates by +theta.
Mat rope(const Mat& qkv, const std::vector<int32_t>& pos, const Vec& freq_turns, const Heads& h, int sign = +1);
inline Mat rope_backward(const Mat& dqkv, const std::vector<int32_t>& pos, const Vec& f, const Heads& h) {
  return rope(dqkv, pos, f, h, -1);
}
Vec rope_frequencies(int64_t head_dim, double base, double factor = 0.0, double low_freq_factor = 1.0,
                     double high_freq_factor = 4.0, double original_max_position = 8192.0);

// ---- QK-norm + RoPE (5.6) ----------------------------------------------------------------------
Mat qknorm_rope(const Mat& qkv, const Vec& gamma_q, const Vec& gamma_k, const std::vector<int32_t>& pos,
                const Vec& f, const Heads& h, double eps);
struct QkNormGrad {
  Mat dqkv;
  Vec dgamma_q, dgamma_k;
};
QkNormGrad qknorm_rope_backward(const Mat& qkv, const Vec& gamma_q, const Vec& gamma_k,
                                const std::vector<int32_t>& pos, const Vec& f, const Heads& h, double eps,
                                const Mat& dout);

// ---- cross-entropy (5.5) ----------------------------------------------------------------------
struct CrossEntropy {
  double loss = 0.0;
  Vec row_loss;  // 0 for ignored rows
  Vec lse;
  Mat dlogits;   // gradient of loss * dloss
  int64_t count = 0;
};
CrossEntropy cross_entropy(const Mat& logits, const std::vector<int32_t>& targets, int32_t ignore_index,
                           bool mean, double dloss = 1.0);

// ---- the unfused LLaMA-3 block (6) -------------------------------------------------------------
// A rounding hook applied to every tensor an unfused bf16 pipeline would store: identity for the
// float64 ground truth, round-to-bf16 to emulate the unfused bf16 graph (the tolerance yardstick).
using Rounder = std::function<void(Mat&)>;

struct BlockDims {
  int64_t tokens = 0, hidden = 0, ffn = 0;
  Heads heads;
  double eps = 1e-5;
};
struct BlockWeights {
  Mat wo;     // [d, d]
  Mat wgu;    // [2F, d] interleaved gate/up
  Mat wdown;  // [d, F]
  Mat wqkv;   // [N3, d]
  Vec norm0, norm1;  // [d]
  Vec freqs;         // [hd / 2] turns
};
struct BlockForward {
  Mat x1, n1, z1, y1, x2, n2, qkv_pre, qkv;
  Vec r1, r2;
};
BlockForward block_forward(const BlockDims& d, const BlockWeights& w, const Mat& x0, const Mat& y0,
                           const std::vector<int32_t>& pos, const Rounder& round = nullptr);
struct BlockGrad {
  Mat dx0, dy0, dwo, dwgu, dwdown, dwqkv;
  Vec dnorm0, dnorm1;
};
// Gradients given dx2 (residual grad) and dqkv (grad of the rotated qkv).
BlockGrad block_backward(const BlockDims& d, const BlockWeights& w, const Mat& x0, const Mat& y0,
                         const std::vector<int32_t>& pos, const Mat& dx2, const Mat& dqkv,
                         const Rounder& round = nullptr);

// LM head: final norm, logits = RMSNorm(x) W^T, cross-entropy.
struct LmHeadResult {
  CrossEntropy ce;
  Mat logits;
  Mat dx;   // gradient w.r.t. x
  Mat dw;   // gradient w.r.t. W [V, d]
  Vec dnorm;
};
LmHeadResult lm_head(const Mat& x, const Vec& norm, const Mat& w, const std::vector<int32_t>& targets,
                     int32_t ignore_index, bool mean, double eps, const Rounder& round = nullptr);

// Round every element to the nearest bf16 value (ties to even), in place.
void round_bf16(Mat& m);

}  // namespace coda::ref
