// Primitive: tile load (accumulate): acc = acc + beta * C[m, n], C an M x N tensor of the same
// width as the accumulator. On the GPU the tile is staged through shared memory; here only the
// math and the order of operations are fixed.
#pragma once

#include "coda/epilogue/frag.hpp"
#include "coda/macros.hpp"

namespace coda::epi {

template <class Ctx>
CODA_HD void add_tile(Frag& f, Ctx& ctx, int operand, float beta = 1.0f) {
  if (f.ok[1]) {
    const Pair c = ctx.tile2(operand, f, f.n);
    f.v[0] += beta * c.v0;
    f.v[1] += beta * c.v1;
  } else {
    f.v[0] += beta * ctx.tile(operand, f, f.n);
  }
}

}  // namespace coda::epi
