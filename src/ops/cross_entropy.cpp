// Argument checks of the LM-head loss pieces.
#include "coda/ops/cross_entropy.hpp"

#include <algorithm>
#include <cmath>
#include <string>

namespace coda {

namespace {

// The LM head's inputs: the GEMM operands a [M, K] and b [V, K], rstd (optional [M] fp32), targets
// [M] int32 and an ignore_index that is no class.
GemmShape check_lm_head_inputs(ArgCheck& check, const TensorView& a, const TensorView& b, const TensorView& rstd,
                               const TensorView& targets, int32_t ignore_index) {
  const GemmShape s = check_gemm_operands(check, a, b);
  check.optional("rstd", rstd, {s.m}, kFP32Only)
      .tensor("targets", targets, {s.m}, kInt32Only)
      .rule(ignore_index < 0 || ignore_index >= s.n, "ignore_index",
            "must not be a valid class in [0, V), got " + std::to_string(ignore_index));
  return s;
}

// The shifted exponentials E = exp(logits - c) (gemm_lse_exp, lm_head_train) need bf16's range.
void check_exp_dtype(ArgCheck& check, const TensorView& a) {
  check.rule(a.dtype() == DType::kBF16 || !check.ok(), "a",
             "must be bf16 (fp16's range, 6e-8 .. 65504, cannot hold the shifted exponentials)");
}

}  // namespace

Status validate(const LmHeadLseArgs& args, const Grain& grain) {
  ArgCheck check(args.rstd.defined() ? "gemm_rmsnorm_lse" : "gemm_lse");
  const GemmShape s = check_lm_head_inputs(check, args.a, args.b, args.rstd, args.targets, args.ignore_index);
  check.optional("logits_out", args.logits_out, {s.m, s.n}, kStoreTypes, Layout::kRowMajor16)
      .tensor("lse_partials", args.lse_partials, {s.m, ceil_div(s.n, grain.cols)}, kFP32Only)
      .tensor("target_logit_out", args.target_logit_out, {s.m}, kFP32Only)
      .no_alias({{"logits_out", args.logits_out}, {"lse_partials", args.lse_partials},
                 {"target_logit_out", args.target_logit_out}},
                {{"a", args.a}, {"b", args.b}, {"rstd", args.rstd}, {"targets", args.targets}});
  return check.status();
}

Status validate(const LseFinishArgs& args) {
  ArgCheck check("lse_finish");
  check.tensor("partials", args.partials, {-1, -1}, kFP32Only);
  if (!check.ok()) return check.status();
  check.tensor("lse_out", args.lse_out, {args.partials.rows()}, kFP32Only)
      .no_alias({{"lse_out", args.lse_out}}, {{"partials", args.partials}});
  return check.status();
}

Status validate(const CrossEntropyArgs& args) {
  ArgCheck check("cross_entropy");
  check.tensor("lse", args.lse, {-1}, kFP32Only);
  if (!check.ok()) return check.status();
  const int64_t m = args.lse.rows();
  check.tensor("target_logit", args.target_logit, {m}, kFP32Only)
      .tensor("targets", args.targets, {m}, kInt32Only)
      .rule(args.reduction == Reduction::kMean || args.reduction == Reduction::kSum, "reduction",
            "must be mean or sum")
      .tensor("loss_out", args.loss_out, {1}, kFP32Only)
      .optional("row_loss_out", args.row_loss_out, {m}, kFP32Only)
      .optional("logits", args.logits, {m, -1}, kStoreTypes, Layout::kRowMajor16);
  if (!check.ok()) return check.status();
  const int64_t v = args.logits.defined() ? args.logits.cols() : -1;
  check.rule(!args.dlogits_out.defined() || args.logits.defined(), "dlogits_out",
             "needs 'logits' (the gradient is computed from the stored logits)")
      .rule(!args.zdz_out.defined() || args.dlogits_out.defined(), "zdz_out", "needs 'dlogits_out'")
      .optional("dlogits_out", args.dlogits_out, {m, v}, kStoreTypes, Layout::kRowMajor16)
      .optional("zdz_out", args.zdz_out, {m}, kFP32Only)
      .rule(args.ignore_index < 0 || v < 0 || args.ignore_index >= v, "ignore_index",
            "must not be a valid class in [0, V), got " + std::to_string(args.ignore_index))
      .no_alias({{"loss_out", args.loss_out}, {"row_loss_out", args.row_loss_out},
                 {"dlogits_out", args.dlogits_out}, {"zdz_out", args.zdz_out}},
                {{"lse", args.lse}, {"target_logit", args.target_logit}, {"targets", args.targets},
                 {"logits", args.logits}},
                {{"dlogits_out", "logits"}});
  return check.status();
}

size_t lm_head_loss_workspace_bytes(int64_t m, int64_t v) {
  const auto t = static_cast<size_t>(ceil_div(v, CODA_PARTIAL_COLS));
  return (static_cast<size_t>(m) * (t + 2) * sizeof(float) + 255) / 256 * 256;
}

Status plan_lm_head_loss(const LmHeadLossArgs& args, LmHeadLossPlan* plan) {
  const char* op = args.rstd.defined() ? "lm_head_loss (rmsnorm)" : "lm_head_loss";
  const int64_t m = args.a.rows(), v = args.b.rows();
  const size_t need = lm_head_loss_workspace_bytes(m, v);
  if (args.workspace_bytes < need || (need > 0 && !args.workspace))
    return Status::invalid_argument(std::string(op) + ": argument 'workspace' must hold at least " +
                                    std::to_string(need) + " bytes (lm_head_loss_workspace_bytes), got " +
                                    std::to_string(args.workspace_bytes));
  auto* base = static_cast<float*>(args.workspace);
  const int64_t t = ceil_div(v, CODA_PARTIAL_COLS);
  const TensorView partials = TensorView::matrix(base, DType::kFP32, m, t);
  const TensorView target_logit = TensorView::vector(base + m * t, DType::kFP32, m);
  const TensorView lse = args.lse_out.defined() ? args.lse_out
                                                : TensorView::vector(base + m * (t + 1), DType::kFP32, m);
  plan->lse = LmHeadLseArgs{args.a, args.b, args.rstd, args.targets, args.ignore_index, {}, partials, target_logit};
  plan->finish = LseFinishArgs{partials, lse};
  CrossEntropyArgs& ce = plan->ce;
  ce = CrossEntropyArgs{};
  ce.lse = lse;
  ce.target_logit = target_logit;
  ce.targets = args.targets;
  ce.ignore_index = args.ignore_index;
  ce.reduction = args.reduction;
  ce.loss_out = args.loss_out;
  ce.row_loss_out = args.row_loss_out;
  // Everything is validated before the first step runs.
  CODA_TRY(validate(plan->lse));
  CODA_TRY(validate(plan->finish));
  return validate(ce);
}

Status validate(const LmHeadExpArgs& args, const Grain& grain) {
  ArgCheck check(args.rstd.defined() ? "gemm_rmsnorm_lse_exp" : "gemm_lse_exp");
  const GemmShape s = check_lm_head_inputs(check, args.a, args.b, args.rstd, args.targets, args.ignore_index);
  check_exp_dtype(check, args.a);
  check.tensor("shift", args.shift, {s.m}, kFP32Only)
      .tensor("exp_out", args.exp_out, {s.m, s.n}, kGemmInputTypes, Layout::kRowMajor16);
  if (check.ok()) check.same_dtype("a", args.a, "exp_out", args.exp_out);  // bf16: fp16 cannot hold E
  check.tensor("sum_partials", args.sum_partials, {s.m, ceil_div(s.n, grain.cols)}, kFP32Only)
      .tensor("target_logit_out", args.target_logit_out, {s.m}, kFP32Only)
      .no_alias({{"exp_out", args.exp_out}, {"sum_partials", args.sum_partials},
                 {"target_logit_out", args.target_logit_out}},
                {{"a", args.a}, {"b", args.b}, {"rstd", args.rstd}, {"targets", args.targets}, {"shift", args.shift}});
  return check.status();
}

namespace {

// Workspace regions, each 256-byte aligned.
size_t region(size_t bytes) { return (bytes + 255) / 256 * 256; }
int64_t anchor_classes(int64_t v) { return std::min<int64_t>(v, kLmAnchorClasses); }
int64_t pad8(int64_t n) { return (n + 7) / 8 * 8; }

// The workspace's size, and its regions when `base` is given.
size_t train_layout(int64_t m, int64_t v, const Grain& grain, DType dt, char* base, LmHeadTrainPlan* plan) {
  const auto um = static_cast<size_t>(m);
  const int64_t na = anchor_classes(v), t = ceil_div(v, grain.cols);
  size_t off = 0;
  auto take = [&](size_t bytes) {
    char* p = base ? base + off : nullptr;
    off += region(bytes);
    return p;
  };
  char* anchor = take(um * static_cast<size_t>(pad8(na)) * 2);
  char* shift = take(um * 4);
  char* partials = take(um * static_cast<size_t>(t) * 4);
  char* tl = take(um * 4);
  char* lse = take(um * 4);
  char* norm = take(4);
  char* flagged = take((um + 1) * 4);
  if (base) {
    plan->anchor = TensorView::matrix(anchor, dt, m, na, pad8(na));
    plan->exp.shift = TensorView::vector(shift, DType::kFP32, m);
    plan->exp.sum_partials = TensorView::matrix(partials, DType::kFP32, m, t);
    plan->exp.target_logit_out = TensorView::vector(tl, DType::kFP32, m);
    plan->lse = TensorView::vector(lse, DType::kFP32, m);
    plan->norm = TensorView::vector(norm, DType::kFP32, 1);
    plan->flagged = TensorView::vector(flagged, DType::kInt32, m + 1);
  }
  return off;
}

Status check_workspace(const char* op, const char* fn, size_t need, const void* ws, size_t bytes) {
  if (bytes < need || (need > 0 && !ws))
    return Status::invalid_argument(std::string(op) + ": argument 'workspace' must hold at least " +
                                    std::to_string(need) + " bytes (" + fn + "), got " + std::to_string(bytes));
  return {};
}

}  // namespace

size_t lm_head_train_workspace_bytes(int64_t m, int64_t v) {
  return train_layout(m, v, Grain{}, DType::kBF16, nullptr, nullptr);
}

Status plan_lm_head_train(const LmHeadTrainArgs& args, LmHeadTrainPlan* plan, const Grain& grain) {
  const char* op = "lm_head_train";
  {
    ArgCheck check(op);
    const GemmShape s = check_lm_head_inputs(check, args.a, args.b, args.rstd, args.targets, args.ignore_index);
    check.rule(s.n > 0 || !check.ok(), "b", "must have at least one class (V >= 1)");
    check_exp_dtype(check, args.a);
    check.rule(args.reduction == Reduction::kMean || args.reduction == Reduction::kSum, "reduction",
               "must be mean or sum")
        .tensor("loss_out", args.loss_out, {1}, kFP32Only)
        .optional("row_loss_out", args.row_loss_out, {s.m}, kFP32Only)
        .optional("lse_out", args.lse_out, {s.m}, kFP32Only)
        .tensor("grad_out", args.grad_out, {s.m, s.n}, kGemmInputTypes, Layout::kRowMajor16);
    if (check.ok()) check.same_dtype("a", args.a, "grad_out", args.grad_out);
    check.tensor("grad_scale_out", args.grad_scale_out, {s.m}, kFP32Only)
        .no_alias({{"loss_out", args.loss_out}, {"row_loss_out", args.row_loss_out}, {"lse_out", args.lse_out},
                   {"grad_out", args.grad_out}, {"grad_scale_out", args.grad_scale_out}},
                  {{"a", args.a}, {"b", args.b}, {"rstd", args.rstd}, {"targets", args.targets}});
    CODA_TRY(check.status());
  }
  const int64_t m = args.a.rows(), v = args.b.rows();
  CODA_TRY(check_workspace(op, "lm_head_train_workspace_bytes", train_layout(m, v, grain, args.a.dtype(), nullptr, nullptr),
                           args.workspace, args.workspace_bytes));
  train_layout(m, v, grain, args.a.dtype(), static_cast<char*>(args.workspace), plan);
  plan->anchor_b = args.b.row_slice(0, anchor_classes(v));
  if (args.lse_out.defined()) plan->lse = args.lse_out;
  LmHeadExpArgs& e = plan->exp;
  e.a = args.a;
  e.b = args.b;
  e.rstd = args.rstd;
  e.targets = args.targets;
  e.ignore_index = args.ignore_index;
  e.exp_out = args.grad_out;
  CrossEntropyArgs& ce = plan->ce;
  ce = CrossEntropyArgs{};
  ce.lse = plan->lse;
  ce.target_logit = e.target_logit_out;
  ce.targets = args.targets;
  ce.ignore_index = args.ignore_index;
  ce.reduction = args.reduction;
  ce.loss_out = args.loss_out;
  ce.row_loss_out = args.row_loss_out;
  CODA_TRY(validate(e, grain));
  return validate(ce);
}

namespace {

size_t backward_layout(int64_t m, int64_t k, char* base, DType dt, LmHeadBackwardPlan* plan) {
  const auto um = static_cast<size_t>(m);
  const size_t s_bytes = region(um * 4);
  if (base) {
    plan->row_scale = TensorView::vector(base, DType::kFP32, m);
    plan->scaled_a = TensorView::matrix(base + s_bytes, dt, m, k, pad8(k));
  }
  return s_bytes + region(um * static_cast<size_t>(pad8(k)) * 2);
}

}  // namespace

size_t lm_head_backward_workspace_bytes(int64_t m, int64_t k) {
  return backward_layout(m, k, nullptr, DType::kBF16, nullptr);
}

Status plan_lm_head_backward(const LmHeadBackwardArgs& args, LmHeadBackwardPlan* plan) {
  const char* op = "lm_head_backward";
  ArgCheck check(op);
  const GemmShape s = check_gemm_operands(check, args.a, args.b);
  check.optional("rstd", args.rstd, {s.m}, kFP32Only)
      .tensor("grad", args.grad, {s.m, s.n}, kGemmInputTypes, Layout::kRowMajor16);
  if (check.ok()) check.same_dtype("a", args.a, "grad", args.grad);
  check.tensor("grad_scale", args.grad_scale, {s.m}, kFP32Only)
      .rule(std::isfinite(args.dloss) || args.dloss_ptr, "dloss", "must be finite")
      .optional("da_out", args.da_out, {s.m, s.k}, kGemmInputTypes, Layout::kRowMajor16)
      .optional("db_out", args.db_out, {s.n, s.k}, kStoreTypes, Layout::kRowMajor16)
      .no_alias({{"da_out", args.da_out}, {"db_out", args.db_out}},
                {{"a", args.a}, {"b", args.b}, {"rstd", args.rstd}, {"grad", args.grad},
                 {"grad_scale", args.grad_scale}});
  if (check.ok() && args.da_out.defined()) check.same_dtype("a", args.a, "da_out", args.da_out);
  CODA_TRY(check.status());
  if (!(args.a.stride(1) == 1 || args.a.size(1) <= 1))
    return Status::invalid_argument(std::string(op) + ": argument 'a' [M, K] must be row-major (unit stride along K)");
  if (!(args.b.stride(1) == 1 || args.b.size(1) <= 1))
    return Status::invalid_argument(std::string(op) + ": argument 'b' [V, K] must be row-major (unit stride along K)");
  CODA_TRY(check_workspace(op, "lm_head_backward_workspace_bytes", backward_layout(s.m, s.k, nullptr, args.a.dtype(), nullptr),
                           args.workspace, args.workspace_bytes));
  backward_layout(s.m, s.k, static_cast<char*>(args.workspace), args.a.dtype(), plan);
  return {};
}

}  // namespace coda
