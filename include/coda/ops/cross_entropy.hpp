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
  static constexpr epi::Resources kResources = epi::store_direct_all({0, 1, 0, 0, 0});
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

}  // namespace programs
}  // namespace coda
