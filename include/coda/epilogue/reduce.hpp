// Primitives: partial reductions.
//
//  - per-row partial:   P[m, t] = sum over the columns n of column-granule t of g(acc[m, n])
//  - per-column partial: Q[t, n] = sum over the rows m of row-granule t of g(...)
//  - segmented per-row partial: like per-row, flushed at every segment (head) boundary
//  - online LSE partial: per (m, granule t) the value max + log(sum exp(x - max))
// The context owns the accumulators and flushes them at the end of the tile (or granule); these
// helpers only fix what is added. OnlineLse is the merge rule for the LSE state.
#pragma once

#include "coda/epilogue/frag.hpp"
#include "coda/epilogue/math.hpp"
#include "coda/macros.hpp"

namespace coda::epi {

// Running (max, sum of exp(x - max)); merge is associative and commutative (up to rounding).
struct OnlineLse {
  float max = -INFINITY;
  float sum = 0.0f;

  CODA_HD void add(float x) {
    if (isnan_f(x)) {
      max = x;
      sum = 1.0f;
      return;
    }
    if (isnan_f(max)) return;
    if (x > max) {
      sum = (max == -INFINITY ? 0.0f : sum * exp_f(max - x)) + 1.0f;
      max = x;
    } else {
      sum += (x == -INFINITY ? 0.0f : exp_f(x - max));
    }
  }
  CODA_HD void merge(const OnlineLse& o) {
    if (isnan_f(o.max) || isnan_f(max)) {
      max = isnan_f(o.max) ? o.max : max;
      sum = 1.0f;
      return;
    }
    if (o.max == -INFINITY) return;
    if (max == -INFINITY) {
      *this = o;
      return;
    }
    if (o.max > max) {
      sum = sum * exp_f(max - o.max) + o.sum;
      max = o.max;
    } else {
      sum += o.sum * exp_f(o.max - max);
    }
  }
  // log(sum exp(x)) over everything added; -inf when nothing (or only -inf) was added.
  CODA_HD float value() const {
    if (max == -INFINITY) return -INFINITY;
    if (max == INFINITY) return INFINITY;
    return max + log_f(sum);
  }
};

// Add g(acc) = acc^2 of both columns to the row's partial r.
template <class Ctx>
CODA_HD void row_sum_squares(const Frag& f, Ctx& ctx, int r) {
  ctx.row_sum(r, f, f.v[0] * f.v[0] + (f.ok[1] ? f.v[1] * f.v[1] : 0.0f));
}

// Feed both columns to the row's online LSE partial r.
template <class Ctx>
CODA_HD void row_lse(const Frag& f, Ctx& ctx, int r) {
  ctx.row_lse(r, f, f.v[0], f.v[1]);
}

// Segmented sum of squares: columns in [0, seg_cols) are summed per segment, the rest skipped.
template <class Ctx>
CODA_HD void segment_sum_squares(const Frag& f, Ctx& ctx, int s, int seg_cols) {
  if (f.n < seg_cols) ctx.seg_sum(s, f, f.n, f.v[0] * f.v[0]);
  if (f.ok[1] && f.n + 1 < seg_cols) ctx.seg_sum(s, f, f.n + 1, f.v[1] * f.v[1]);
}

// Target select: out[m] = acc[m, target[m]] for the tile that holds column target[m].
// NOTES: one unsigned difference and one compare per pair (the pair holds the target when
// target - f.n is 0, or 1 with its second column inside), not two compares and two stores.
template <class Ctx>
CODA_HD void select_target(const Frag& f, Ctx& ctx, int targets, int out) {
  const unsigned d = static_cast<unsigned>(ctx.row_int(targets, f)) - static_cast<unsigned>(f.n);
  if (d < (f.ok[1] ? 2u : 1u)) ctx.row_store(out, f, d != 0 ? f.v[1] : f.v[0]);
}

}  // namespace coda::epi
