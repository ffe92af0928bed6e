// LM head + cross-entropy (coda-math.md 5.5).
//
// gemm_lse / gemm_rmsnorm_lse: logits = (rstd *) acc; per column granule an online-LSE partial
// (max + log sum exp), the target logit selected where its column lies; logits stored only when
// asked (training) - the logits-free forward writes no M x V tensor. When logits are stored, the
// LSE and the target logit are taken from the stored (rounded) values, so the loss and dlogits
// agree with the logits tensor exactly; without them, from the fp32 accumulator.
// lse_finish: lse[m] = log sum_t exp(P[m, t]).
// cross_entropy: loss[m] = lse[m] - logit[m, t_m]; ignored rows (target == ignore_index) count 0
// and are excluded from the mean. With logits given, dlogits = (softmax - onehot) * dloss (/ count
// for the mean) is written, in place of the logits if asked. With every row ignored the mean
// loss and every gradient are 0 (PyTorch returns NaN there; a fully masked batch should be a
// no-op, not poison the weights).
#pragma once

#include "coda/epilogue/program.hpp"
#include "coda/ops/common.hpp"

namespace coda {

enum class Reduction : int32_t { kMean = 0, kSum = 1 };

struct LmHeadLseArgs {
  TensorView a;                 // [M, K]
  TensorView b;                 // [V, K]
  TensorView rstd;              // optional [M] fp32
  TensorView targets;           // [M] int32 in [0, V) or ignore_index
  int32_t ignore_index = CODA_IGNORE_INDEX;
  TensorView logits_out;        // optional [M, V]
  TensorView lse_partials;      // [M, ceil(V / grain.cols)] fp32
  TensorView target_logit_out;  // [M] fp32 (0 for ignored rows)
};
Status validate(const LmHeadLseArgs& args, const Grain& grain = {});

struct LseFinishArgs {
  TensorView partials;  // [M, T] fp32
  TensorView lse_out;   // [M] fp32
};
Status validate(const LseFinishArgs& args);

struct CrossEntropyArgs {
  TensorView lse;            // [M] fp32
  TensorView target_logit;   // [M] fp32
  TensorView targets;        // [M] int32
  int32_t ignore_index = CODA_IGNORE_INDEX;
  Reduction reduction = Reduction::kMean;
  TensorView loss_out;       // [1] fp32
  TensorView row_loss_out;   // optional [M] fp32 (0 for ignored rows)
  // Gradient (optional): reads logits, writes dlogits (may be the same view: in place).
  TensorView logits;         // optional [M, V]
  TensorView dlogits_out;    // optional [M, V]
  float dloss = 1.0f;        // upstream gradient of the reduced loss
  TensorView zdz_out;        // optional [M] fp32: zdz_scale * sum_v logit * dlogit
  float zdz_scale = 1.0f;
};
Status validate(const CrossEntropyArgs& args);

// The logits-free LM-head loss forward: gemm_(rmsnorm_)lse without logits, lse_finish and
// cross_entropy in one call. No M x V tensor is written; the workspace (memory in the same place
// as the tensors) holds the partials, lse and target logits (lm_head_loss_workspace_bytes).
struct LmHeadLossArgs {
  TensorView a;        // [M, K]
  TensorView b;        // [V, K]
  TensorView rstd;     // optional [M] fp32
  TensorView targets;  // [M] int32
  int32_t ignore_index = CODA_IGNORE_INDEX;
  Reduction reduction = Reduction::kMean;
  TensorView loss_out;      // [1] fp32
  TensorView row_loss_out;  // optional [M] fp32
  TensorView lse_out;       // optional [M] fp32 (saved for a backward pass)
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};
size_t lm_head_loss_workspace_bytes(int64_t m, int64_t v);

// The three steps of lm_head_loss on views into the workspace, every one validated (the workspace
// size first): both backends run exactly these.
struct LmHeadLossPlan {
  LmHeadLseArgs lse;
  LseFinishArgs finish;
  CrossEntropyArgs ce;
};
Status plan_lm_head_loss(const LmHeadLossArgs& args, LmHeadLossPlan* plan);

// ---- Training without a dlogits pass (coda-math.md 5.5, mode (c); docs/ops.md) -----------------
// For any per-row shift c, dlogits = g (softmax - onehot) = g exp(c - lse) (E - exp(lse - c) onehot)
// with E = exp(logits - c) and g = dloss (/ count for the mean). lm_head_train fixes c per row
// before the GEMM (the largest logit over the first kLmAnchorClasses classes, plus kLmShiftMargin),
// so the GEMM's epilogue writes E, the only M x V tensor, and sums it per column granule. A finish
// step makes lse = c + log S (S = sum_v E), subtracts S at the target, and writes u = norm / S
// (norm = 1 / count for the mean, 1 for the sum; 0 for ignored rows), so that exactly
//     dlogits[m, :] = dloss * u[m] * grad[m, :]          (grad = E - S onehot)
// and no pass over the M x V tensor is needed between the forward and the backward GEMMs:
// lm_head_backward computes da = diag(s) (grad b) in the dgrad GEMM's epilogue (a row scale) and
// db = grad^T (s a) with s = dloss u (rstd). The 16-bit grad keeps the same relative precision as
// stored dlogits (entries more than ~47 below the anchor's largest logit, probabilities under e^-47,
// round to 0). A row whose sum exceeds 2^64 (a logit more than ~84 above the anchor's largest) is
// detected and recomputed exactly, one row per thread block on CUDA cores: correct, and slow
// (milliseconds per such row); such rows do not occur in a sane model. bf16 only: fp16's range
// (6e-8 .. 65504) cannot hold the shifted exponentials.
constexpr int64_t kLmAnchorClasses = 128;
constexpr float kLmShiftMargin = 40.0f;

// The per-row arithmetic both backends share. shift = c log2 e from the anchor's largest logit.
CODA_HD float lm_head_shift(float anchor_max) { return (anchor_max + kLmShiftMargin) * epi::kLog2e; }
// A sum of E above 2^64 (or below 1e-30): the row takes the exact path. The bound keeps every E
// and the dgrad GEMM's accumulator, sum_v E[v] b[v, k] <= S max |b|, far inside fp32's range (for
// weights below 1e19 in magnitude). NaN stays NaN.
CODA_HD bool lm_head_sum_out_of_range(float sum) { return sum > 1.8446744e19f || sum < 1.0e-30f; }
CODA_HD float lm_head_lse(float shift, float sum) { return shift / epi::kLog2e + epi::log_f(sum); }
// s = dloss u (rstd): dlogits = s grad, da = diag(s) (grad b), db = grad^T (s a).
CODA_HD float lm_head_row_scale(float dloss, float u, float rstd) { return dloss * u * rstd; }

struct LmHeadTrainArgs {
  TensorView a;        // [M, K] bf16
  TensorView b;        // [V, K] bf16
  TensorView rstd;     // optional [M] fp32: logits = rstd * (a b^T)
  TensorView targets;  // [M] int32 in [0, V) or ignore_index
  int32_t ignore_index = CODA_IGNORE_INDEX;
  Reduction reduction = Reduction::kMean;
  TensorView loss_out;        // [1] fp32
  TensorView row_loss_out;    // optional [M] fp32 (0 for ignored rows)
  TensorView lse_out;         // optional [M] fp32
  TensorView grad_out;        // [M, V] bf16, row-major: E - S onehot
  TensorView grad_scale_out;  // [M] fp32: u, dlogits = dloss * u[m] * grad[m, :]
  void* workspace = nullptr;  // lm_head_train_workspace_bytes(M, V), where the tensors are
  size_t workspace_bytes = 0;
};
size_t lm_head_train_workspace_bytes(int64_t m, int64_t v);

// The fused GEMM of lm_head_train (the epilogue program LmHeadExp): E = exp(logits - c) with
// shift[m] = c log2 e, per-granule sums of E as stored, the fp32 target logit. bf16 only, like
// lm_head_train.
struct LmHeadExpArgs {
  TensorView a, b, rstd, targets;
  int32_t ignore_index = CODA_IGNORE_INDEX;
  TensorView shift;            // [M] fp32
  TensorView exp_out;          // [M, V]
  TensorView sum_partials;     // [M, ceil(V / grain.cols)] fp32
  TensorView target_logit_out; // [M] fp32
};
Status validate(const LmHeadExpArgs& args, const Grain& grain = {});

// lm_head_train's steps on views into its workspace, every one validated before any runs; both
// backends run exactly these.
struct LmHeadTrainPlan {
  TensorView anchor;      // [M, A] a's dtype: the first A = min(V, kLmAnchorClasses) logits / rstd
  TensorView anchor_b;    // b's first A rows
  LmHeadExpArgs exp;      // the fused GEMM
  TensorView lse;         // [M] fp32 (lse_out or the workspace's)
  TensorView norm;        // [1] fp32: 1 / count (mean) or 1 (sum)
  TensorView flagged;     // [M + 1] int32: the count, then the rows recomputed exactly
  CrossEntropyArgs ce;    // the loss from lse and the target logits
};
Status plan_lm_head_train(const LmHeadTrainArgs& args, LmHeadTrainPlan* plan, const Grain& grain = {});

struct LmHeadBackwardArgs {
  TensorView a, b, rstd;  // the forward's operands (rstd optional)
  TensorView grad;        // [M, V] from lm_head_train
  TensorView grad_scale;  // [M] fp32 from lm_head_train
  float dloss = 1.0f;     // the upstream gradient of the loss
  const float* dloss_ptr = nullptr;  // when set, dloss is read from here (where the tensors are)
  TensorView da_out;      // optional [M, K] a's dtype: diag(s) (grad b), s = dloss u (rstd)
  TensorView db_out;      // optional [V, K] b's dtype: grad^T diag(s) a
  void* workspace = nullptr;  // lm_head_backward_workspace_bytes(M, K)
  size_t workspace_bytes = 0;
};
size_t lm_head_backward_workspace_bytes(int64_t m, int64_t k);

struct LmHeadBackwardPlan {
  TensorView row_scale;  // [M] fp32: s
  TensorView scaled_a;   // [M, K] a's dtype: s a (when db_out is given)
};
Status plan_lm_head_backward(const LmHeadBackwardArgs& args, LmHeadBackwardPlan* plan);

namespace programs {

struct LmHeadLse {
  static constexpr int kRowRstd = 0;
  static constexpr int kRowTargets = 0;      // int rows
  static constexpr int kOutLogits = 0;
  static constexpr int kRowOutTarget = 0;    // row outputs
  static constexpr int kRowLse = 0;          // row LSE partials
  // an LSE row partial; logits stored from registers (epi::store_direct_all: no staging, no
  // barrier per chunk). NOTES: H200, bench/NOTES.md 2026-12-02 day: with logits 14.55 -> 14.15-14.18
  // ms, the logits-free loss 13.59-13.69 -> 13.19-13.21 ms.
  // Two chunks per visit-loop iteration (epi::chunk_visits), two visit copies and 64 accumulator
  // moves a tile, where the LSE programs' default takes one copy for a pair of chunks (128 moves).
  // NOTES: H200, three alternating rounds (bench/NOTES.md 2026-12-04, second): with logits 1.117
  // -> 1.072x cuBLAS (four chunks: 1.089), the logits-free loss 1.033 -> 1.040x.
  static constexpr epi::Resources kResources = epi::chunk_visits(epi::store_direct_all({0, 1, 0, 0, 0}), 2);
  static constexpr uint32_t kHasRstd = 1, kHasLogits = 2;  // flags
  static constexpr int kFlagBits = 2;
  uint32_t flags = 0;
  int32_t ignore_index = CODA_IGNORE_INDEX;
  int classes = 0;  // V: a target outside [0, V) that is not ignore_index gets a NaN logit

  template <class Ctx>
  CODA_HD void operator()(epi::Frag& f, Ctx& ctx) const {
    if (flags & kHasRstd) epi::row_mul(f, ctx, kRowRstd);
    // With stored logits, the statistics use the stored values: dlogits = softmax(stored) - onehot
    // is then exactly consistent with lse (a peaked row would otherwise lose its small gradient).
    if (flags & kHasLogits) epi::store_rounded(f, ctx, kOutLogits);
    epi::row_lse(f, ctx, kRowLse);
    epi::select_target(f, ctx, kRowTargets, kRowOutTarget);
    // Rows whose target no column holds: 0 when ignored, NaN when out of range. One condition and
    // a select, so the GPU predicates it instead of branching in every pair.
    const int t = ctx.row_int(kRowTargets, f);
    const bool ignored = t == ignore_index;
    if (f.n == 0 && (ignored || t < 0 || t >= classes)) ctx.row_store(kRowOutTarget, f, ignored ? 0.0f : NAN);
  }
};

// E = exp(logits - c) stored (lm_head_train), its per-granule sum as stored, the fp32 target logit.
struct LmHeadExp {
  static constexpr int kRowRstd = 0, kRowShift = 1;  // rows: rstd, c log2 e
  static constexpr int kRowTargets = 0;              // int rows
  static constexpr int kOutExp = 0;
  static constexpr int kRowOutTarget = 0;            // row outputs
  static constexpr int kRowSum = 0;                  // row partials
  static constexpr epi::Resources kResources = epi::store_direct_all({1, 0, 0, 0, 0});
  static constexpr bool kBf16Only = true;  // E needs bf16's range (validate refuses fp16)
  static constexpr uint32_t kHasRstd = 1;  // flags
  static constexpr int kFlagBits = 1;
  uint32_t flags = 0;
  int32_t ignore_index = CODA_IGNORE_INDEX;
  int classes = 0;

  template <class Ctx>
  CODA_HD void operator()(epi::Frag& f, Ctx& ctx) const {
    if (flags & kHasRstd) epi::row_mul(f, ctx, kRowRstd);
    epi::select_target(f, ctx, kRowTargets, kRowOutTarget);
    const int t = ctx.row_int(kRowTargets, f);
    const bool ignored = t == ignore_index;
    if (f.n == 0 && (ignored || t < 0 || t >= classes)) ctx.row_store(kRowOutTarget, f, ignored ? 0.0f : NAN);
    const float c = ctx.row(kRowShift, f);
    f.v[0] = epi::exp2_ftz(fmaf(f.v[0], epi::kLog2e, -c));
    f.v[1] = epi::exp2_ftz(fmaf(f.v[1], epi::kLog2e, -c));
    epi::store_rounded(f, ctx, kOutExp);  // the sum is of the stored values: grad's rows sum exactly
    ctx.row_sum(kRowSum, f, f.v[0] + (f.ok[1] ? f.v[1] : 0.0f));
  }
};

}  // namespace programs
}  // namespace coda
