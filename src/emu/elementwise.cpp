// Emulated elementwise and row-statistics operators (the tiny kernels outside the GEMMs).
// fp32 arithmetic with the kernels' functors; outputs rounded once.
#include <cmath>
#include <string>
#include <vector>

#include "driver.hpp"

namespace coda::emu {

Status rms_finish(const RmsFinishArgs& args) {
  CODA_TRY(validate(args));
  const float inv_d = 1.0f / static_cast<float>(args.dim);
  for (int64_t m = 0; m < args.partials.rows(); ++m) {
    float s = 0.0f;
    for (int64_t t = 0; t < args.partials.cols(); ++t) s += load_f32(args.partials, m, t);
    store_f32(args.rstd_out, m, 0, epi::rms_rstd(s, inv_d, args.eps));
  }
  return {};
}

Status row_sum_finish(const RowSumFinishArgs& args) {
  CODA_TRY(validate(args));
  for (int64_t m = 0; m < args.partials.rows(); ++m) {
    float s = 0.0f;
    for (int64_t t = 0; t < args.partials.cols(); ++t) s += load_f32(args.partials, m, t);
    store_f32(args.out, m, 0, args.scale * s);
  }
  return {};
}

Status col_sum_finish(const ColSumFinishArgs& args) {
  CODA_TRY(validate(args));
  for (int64_t n = 0; n < args.partials.cols(); ++n) {
    float s = 0.0f;
    for (int64_t t = 0; t < args.partials.rows(); ++t) s += load_f32(args.partials, t, n);
    store_f32(args.out, n, 0, s);
  }
  return {};
}

Status rope_backward(const RopeBackwardArgs& args) {
  CODA_TRY(validate(args));
  CODA_TRY(check_positions("rope_backward", args.positions));
  const HeadDims& h = args.heads;
  const int64_t n = h.qkv_cols();
  std::vector<float> row(static_cast<size_t>(n));
  for (int64_t m = 0; m < args.qkv.rows(); ++m) {
    const auto pos = static_cast<uint32_t>(load_i32(args.positions, m));
    float zdz = 0.0f;
    for (int64_t c = 0; c < n; ++c) {
      const float g = load_f32(args.dqkv, m, c);
      zdz += load_f32(args.qkv, m, c) * g;
      row[static_cast<size_t>(c)] = g;
    }
    for (int64_t c = 0; c < h.rope_cols(); c += 2) {
      float s, co;
      epi::rope_sincos(pos, load_f32(args.freqs, (c % h.head_dim) / 2), &s, &co);
      epi::rotate(&row[static_cast<size_t>(c)], &row[static_cast<size_t>(c + 1)], -s, co);
    }
    for (int64_t c = 0; c < n; ++c) store_f32(args.dz_out, m, c, row[static_cast<size_t>(c)]);
    if (args.zdz_out.defined()) store_f32(args.zdz_out, m, 0, args.zdz_scale * zdz);
  }
  return {};
}

Status qknorm_rope(const QkNormRopeArgs& args, const EmuConfig& cfg) {
  CODA_TRY(validate(args, cfg.grain()));
  CODA_TRY(check_positions("qknorm_rope", args.positions));
  const HeadDims& h = args.heads;
  const int64_t n = h.qkv_cols();
  const int64_t segs = qk_segments(h.head_dim, cfg.tile_n);
  const float inv_hd = 1.0f / static_cast<float>(h.head_dim);
  std::vector<float> row(static_cast<size_t>(n));
  for (int64_t m = 0; m < args.qkv.rows(); ++m) {
    const auto pos = static_cast<uint32_t>(load_i32(args.positions, m));
    for (int64_t c = 0; c < n; ++c) row[static_cast<size_t>(c)] = load_f32(args.qkv, m, c);
    for (int64_t head = 0; head < h.heads_q + h.heads_kv; ++head) {
      float ss = 0.0f;
      for (int64_t s = 0; s < segs; ++s) ss += load_f32(args.sumsq, m, head * segs + s);
      const float r = epi::rms_rstd(ss, inv_hd, args.eps);
      const TensorView& gamma = head < h.heads_q ? args.gamma_q : args.gamma_k;
      const int64_t c0 = head * h.head_dim;
      for (int64_t j = 0; j < h.head_dim; j += 2) {
        float x = row[static_cast<size_t>(c0 + j)] * r * load_f32(gamma, j);
        float y = row[static_cast<size_t>(c0 + j + 1)] * r * load_f32(gamma, j + 1);
        float s, co;
        epi::rope_sincos(pos, load_f32(args.freqs, j / 2), &s, &co);
        epi::rotate(&x, &y, s, co);
        row[static_cast<size_t>(c0 + j)] = x;
        row[static_cast<size_t>(c0 + j + 1)] = y;
      }
    }
    for (int64_t c = 0; c < n; ++c) store_f32(args.out, m, c, row[static_cast<size_t>(c)]);
  }
  return {};
}

Status qknorm_rope_backward(const QkNormRopeBackwardArgs& args, const EmuConfig& cfg) {
  CODA_TRY(validate(args, cfg.grain()));
  CODA_TRY(check_positions("qknorm_rope_backward", args.positions));
  const HeadDims& h = args.heads;
  const int64_t n = h.qkv_cols();
  const int64_t hd = h.head_dim;
  const float inv_hd = 1.0f / static_cast<float>(hd);
  const int64_t rows = args.qkv.rows();
  std::vector<float> dq(static_cast<size_t>(hd)), dk(static_cast<size_t>(hd));
  std::vector<float> du(static_cast<size_t>(hd));
  for (int64_t g0 = 0; g0 < rows; g0 += cfg.tile_m) {
    std::fill(dq.begin(), dq.end(), 0.0f);
    std::fill(dk.begin(), dk.end(), 0.0f);
    for (int64_t m = g0; m < std::min(rows, g0 + cfg.tile_m); ++m) {
      const auto pos = static_cast<uint32_t>(load_i32(args.positions, m));
      float zdz = 0.0f;
      for (int64_t head = 0; head < h.heads_q + h.heads_kv; ++head) {
        const bool is_q = head < h.heads_q;
        const TensorView& gamma = is_q ? args.gamma_q : args.gamma_k;
        std::vector<float>& dgamma = is_q ? dq : dk;
        const int64_t c0 = head * hd;
        float ss = 0.0f;
        for (int64_t j = 0; j < hd; ++j) ss += load_f32(args.qkv, m, c0 + j) * load_f32(args.qkv, m, c0 + j);
        const float r = epi::rms_rstd(ss, inv_hd, args.eps);
        for (int64_t j = 0; j < hd; j += 2) {  // un-rotate the incoming gradient
          float x = load_f32(args.dout, m, c0 + j), y = load_f32(args.dout, m, c0 + j + 1);
          float s, co;
          epi::rope_sincos(pos, load_f32(args.freqs, j / 2), &s, &co);
          epi::rotate(&x, &y, -s, co);
          du[static_cast<size_t>(j)] = x;
          du[static_cast<size_t>(j + 1)] = y;
        }
        float c = 0.0f;
        for (int64_t j = 0; j < hd; ++j)
          c += du[static_cast<size_t>(j)] * load_f32(gamma, j) * load_f32(args.qkv, m, c0 + j) * r;
        c *= inv_hd;
        for (int64_t j = 0; j < hd; ++j) {
          const float x = load_f32(args.qkv, m, c0 + j);
          const float xh = x * r;
          dgamma[static_cast<size_t>(j)] += du[static_cast<size_t>(j)] * xh;
          const float dx = epi::rmsnorm_dx(du[static_cast<size_t>(j)], xh, r, load_f32(gamma, j), c);
          zdz += x * dx;
          store_f32(args.dqkv_out, m, c0 + j, dx);
        }
      }
      for (int64_t c = h.rope_cols(); c < n; ++c) {  // V: gradient passes through
        const float g = load_f32(args.dout, m, c);
        zdz += load_f32(args.qkv, m, c) * g;
        store_f32(args.dqkv_out, m, c, g);
      }
      if (args.zdz_out.defined()) store_f32(args.zdz_out, m, 0, args.zdz_scale * zdz);
    }
    for (int64_t j = 0; j < hd; ++j) {
      store_f32(args.dgamma_q_partials, g0 / cfg.tile_m, j, dq[static_cast<size_t>(j)]);
      store_f32(args.dgamma_k_partials, g0 / cfg.tile_m, j, dk[static_cast<size_t>(j)]);
    }
  }
  return {};
}

Status lse_finish(const LseFinishArgs& args) {
  CODA_TRY(validate(args));
  for (int64_t m = 0; m < args.partials.rows(); ++m) {
    epi::OnlineLse acc;
    for (int64_t t = 0; t < args.partials.cols(); ++t) {
      const float v = load_f32(args.partials, m, t);
      epi::OnlineLse part;
      if (v != -INFINITY) {
        part.max = v;
        part.sum = 1.0f;
      }
      acc.merge(part);
    }
    store_f32(args.lse_out, m, 0, acc.value());
  }
  return {};
}

Status cross_entropy(const CrossEntropyArgs& args) {
  CODA_TRY(validate(args));
  CODA_TRY(check_ce_targets(args));
  const int64_t rows = args.lse.rows();
  int64_t count = 0;
  for (int64_t m = 0; m < rows; ++m) count += load_i32(args.targets, m) != args.ignore_index;
  const float norm =
      args.reduction == Reduction::kMean ? (count ? 1.0f / static_cast<float>(count) : 0.0f) : 1.0f;
  float total = 0.0f;
  for (int64_t m = 0; m < rows; ++m) {
    const int32_t t = load_i32(args.targets, m);
    const bool ignored = t == args.ignore_index;
    const float lse = load_f32(args.lse, m);
    const float row_loss = ignored ? 0.0f : lse - load_f32(args.target_logit, m);
    total += row_loss;
    if (args.row_loss_out.defined()) store_f32(args.row_loss_out, m, 0, row_loss);
    if (!args.dlogits_out.defined()) continue;
    const float scale = ignored ? 0.0f : args.dloss * norm;
    float zdz = 0.0f;
    for (int64_t v = 0; v < args.logits.cols(); ++v) {
      const float logit = load_f32(args.logits, m, v);
      const float p = epi::exp_f(logit - lse);
      const float d = ignored ? 0.0f : (p - (v == t ? 1.0f : 0.0f)) * scale;
      zdz += logit * d;
      store_f32(args.dlogits_out, m, v, d);
    }
    if (args.zdz_out.defined()) store_f32(args.zdz_out, m, 0, args.zdz_scale * zdz);
  }
  store_f32(args.loss_out, 0, 0, total * norm);
  return {};
}

Status lm_head_loss(const LmHeadLossArgs& args) {
  LmHeadLossPlan plan;
  CODA_TRY(plan_lm_head_loss(args, &plan));
  CODA_TRY(gemm_lse(plan.lse));
  CODA_TRY(lse_finish(plan.finish));
  return cross_entropy(plan.ce);
}

// One row of lm_head_train's exact path (a row whose sum of E left fp32's range): the logits in
// fp32 from the stored operands, lse, grad = softmax - onehot, u = norm. The GPU's
// lm_head_exact_row_kernel computes the same.
void lm_head_exact_row(const LmHeadTrainArgs& args, const LmHeadTrainPlan& plan, int64_t m, float norm) {
  const int64_t v = args.b.rows(), k = args.a.cols();
  const float r = args.rstd.defined() ? load_f32(args.rstd, m) : 1.0f;
  std::vector<float> logits(static_cast<size_t>(v));
  epi::OnlineLse acc;
  for (int64_t c = 0; c < v; ++c) {
    float dot = 0.0f;
    for (int64_t j = 0; j < k; ++j) dot += load_f32(args.a, m, j) * load_f32(args.b, c, j);
    logits[static_cast<size_t>(c)] = dot * r;
    acc.add(dot * r);
  }
  const float lse = acc.value();
  const int32_t t = load_i32(args.targets, m);
  for (int64_t c = 0; c < v; ++c)
    store_f32(args.grad_out, m, c, epi::exp_f(logits[static_cast<size_t>(c)] - lse) - (c == t ? 1.0f : 0.0f));
  store_f32(plan.lse, m, 0, lse);
  store_f32(args.grad_scale_out, m, 0, norm);
}

Status lm_head_train(const LmHeadTrainArgs& args) {
  LmHeadTrainPlan plan;
  CODA_TRY(plan_lm_head_train(args, &plan));
  CODA_TRY(check_targets("lm_head_train", args.targets, args.b.rows(), args.ignore_index));
  const int64_t rows = args.a.rows();
  if (rows == 0) return cross_entropy(plan.ce);
  // 1. The anchor: the first A logits (before rstd), then c = max * rstd + margin per row.
  CODA_TRY(gemm({args.a, plan.anchor_b, {}, plan.anchor}));
  for (int64_t m = 0; m < rows; ++m) {
    float mx = -INFINITY;
    for (int64_t c = 0; c < plan.anchor.cols(); ++c) mx = epi::fmax_f(mx, load_f32(plan.anchor, m, c));
    const float r = args.rstd.defined() ? load_f32(args.rstd, m) : 1.0f;
    store_f32(plan.exp.shift, m, 0, lm_head_shift(mx * r));
  }
  // 2. E, its granule sums and the target logits.
  CODA_TRY(gemm_lse_exp(plan.exp));
  // 3. Per row: S, lse, the target's entry less S, u; rows out of range take the exact path.
  int64_t count = 0;
  for (int64_t m = 0; m < rows; ++m) count += load_i32(args.targets, m) != args.ignore_index;
  const float norm = args.reduction == Reduction::kMean ? (count ? 1.0f / static_cast<float>(count) : 0.0f) : 1.0f;
  for (int64_t m = 0; m < rows; ++m) {
    float sum = 0.0f;
    for (int64_t t = 0; t < plan.exp.sum_partials.cols(); ++t) sum += load_f32(plan.exp.sum_partials, m, t);
    const int32_t t = load_i32(args.targets, m);
    const bool ignored = t == args.ignore_index;
    if (!ignored && lm_head_sum_out_of_range(sum)) {
      lm_head_exact_row(args, plan, m, norm);
      continue;
    }
    store_f32(plan.lse, m, 0, lm_head_lse(load_f32(plan.exp.shift, m), sum));
    store_f32(args.grad_scale_out, m, 0, ignored ? 0.0f : norm / sum);
    if (!ignored) store_f32(args.grad_out, m, t, load_f32(args.grad_out, m, t) - sum);
  }
  return cross_entropy(plan.ce);
}

Status lm_head_backward(const LmHeadBackwardArgs& args) {
  LmHeadBackwardPlan plan;
  CODA_TRY(plan_lm_head_backward(args, &plan));
  const int64_t rows = args.a.rows(), k = args.a.cols();
  const float dloss = args.dloss_ptr ? *args.dloss_ptr : args.dloss;
  for (int64_t m = 0; m < rows; ++m) {
    const float s = lm_head_row_scale(dloss, load_f32(args.grad_scale, m),
                                      args.rstd.defined() ? load_f32(args.rstd, m) : 1.0f);
    store_f32(plan.row_scale, m, 0, s);
    if (args.db_out.defined())
      for (int64_t j = 0; j < k; ++j) store_f32(plan.scaled_a, m, j, s * load_f32(args.a, m, j));
  }
  if (args.da_out.defined()) CODA_TRY(gemm_row_scale(args.grad, args.b.transposed(), plan.row_scale, args.da_out));
  if (args.db_out.defined()) CODA_TRY(gemm({args.grad.transposed(), plan.scaled_a.transposed(), {}, args.db_out}));
  return {};
}

Status interleave_gate_up(const TensorView& gate, const TensorView& up, const TensorView& out) {
  CODA_TRY(validate_interleave_gate_up(gate, up, out));
  for (int64_t r = 0; r < out.rows(); ++r)
    for (int64_t c = 0; c < out.cols(); ++c) store_f32(out, r, c, load_f32(r % 2 ? up : gate, r / 2, c));
  return {};
}

Status permute_rotate_half_to_interleaved(const TensorView& w, const HeadDims& heads, const TensorView& out) {
  CODA_TRY(validate_permute_rotate_half_to_interleaved(w, heads, out));
  const int64_t hd = heads.head_dim;
  for (int64_t r = 0; r < out.rows(); ++r) {
    // Row 2i of a q/k head takes row i, row 2i + 1 takes row i + hd/2; v rows are copied.
    const int64_t j = r % hd;
    const int64_t src = r < heads.rope_cols() ? r - j + (j % 2 ? hd / 2 + j / 2 : j / 2) : r;
    for (int64_t c = 0; c < out.cols(); ++c) store_f32(out, r, c, load_f32(w, src, c));
  }
  return {};
}

}  // namespace coda::emu
