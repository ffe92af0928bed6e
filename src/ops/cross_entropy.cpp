// Argument checks of the LM-head loss pieces.
#include "coda/ops/cross_entropy.hpp"

#include <string>

namespace coda {

Status validate(const LmHeadLseArgs& args, const Grain& grain) {
  ArgCheck check(args.rstd.defined() ? "gemm_rmsnorm_lse" : "gemm_lse");
  const GemmShape s = check_gemm_operands(check, args.a, args.b);
  check.optional("rstd", args.rstd, {s.m}, kFP32Only)
      .tensor("targets", args.targets, {s.m}, kInt32Only)
      .rule(args.ignore_index < 0 || args.ignore_index >= s.n, "ignore_index",
            "must not be a valid class in [0, V), got " + std::to_string(args.ignore_index))
      .optional("logits_out", args.logits_out, {s.m, s.n}, kStoreTypes, Layout::kRowMajor16)
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

}  // namespace coda
