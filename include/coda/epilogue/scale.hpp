// Primitive: scalar scale (acc *= alpha) and per-row / per-column broadcasts.
//
// The scalar may be given by value or by device pointer; the context resolves it (ctx.scalar).
// Per-row values (rstd) come from ctx.row, per-column values (norm weight, bias) from ctx.col.
#pragma once

#include "coda/epilogue/frag.hpp"
#include "coda/macros.hpp"

namespace coda::epi {

CODA_HD void scale(Frag& f, float alpha) {
  f.v[0] *= alpha;
  f.v[1] *= alpha;
}

// acc[m, n] *= u[m]
template <class Ctx>
CODA_HD void row_mul(Frag& f, Ctx& ctx, int operand) {
  const float u = ctx.row(operand, f);
  f.v[0] *= u;
  f.v[1] *= u;
}

// acc[m, n] *= u[m] when `given`, a runtime switch (a plain program member, program.hpp): the
// factor is selected, not the products, so the visit selects it once per row (two selects per pair
// otherwise, SASS).
template <class Ctx>
CODA_HD void row_mul_if(Frag& f, Ctx& ctx, int operand, bool given) {
  const float u = given ? ctx.row(operand, f) : 1.0f;
  f.v[0] *= u;
  f.v[1] *= u;
}

// acc[m, n] *= v[n]
template <class Ctx>
CODA_HD void col_mul(Frag& f, Ctx& ctx, int operand) {
  f.v[0] *= ctx.col(operand, f, f.n);
  if (f.ok[1]) f.v[1] *= ctx.col(operand, f, f.n + 1);
}

// acc[m, n] += v[n]
template <class Ctx>
CODA_HD void col_add(Frag& f, Ctx& ctx, int operand) {
  f.v[0] += ctx.col(operand, f, f.n);
  if (f.ok[1]) f.v[1] += ctx.col(operand, f, f.n + 1);
}

}  // namespace coda::epi
