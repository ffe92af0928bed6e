// Primitive: tile load (accumulate): acc = acc + beta * C[m, n], C an M x N tensor of the same
// width as the accumulator. On the GPU the tile is staged through shared memory; here only the
// math and the order of operations are fixed.
#pragma once

#include "coda/epilogue/frag.hpp"
#include "coda/macros.hpp"

namespace coda::epi {

// The tile operand's values at the pair's columns (one load where both are inside; v1 = 0 where
// only the first is).
template <class Ctx>
CODA_HD Pair tile_pair(const Frag& f, Ctx& ctx, int operand) {
  if (f.ok[1]) return ctx.tile2(operand, f, f.n);
  return {ctx.tile(operand, f, f.n), 0.0f};
}

template <class Ctx>
CODA_HD void add_tile(Frag& f, Ctx& ctx, int operand, float beta = 1.0f) {
  const Pair c = tile_pair(f, ctx, operand);
  f.v[0] += beta * c.v0;
  if (f.ok[1]) f.v[1] += beta * c.v1;
}

}  // namespace coda::epi
