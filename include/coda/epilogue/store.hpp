// Primitive: store the pair to an output tile (the main output D or an extra output of the same
// width). The context rounds once to the output's dtype.
#pragma once

#include "coda/epilogue/frag.hpp"
#include "coda/macros.hpp"

namespace coda::epi {

template <class Ctx>
CODA_HD void store_pair(const Frag& f, Ctx& ctx, int output, float v0, float v1) {
  if (f.ok[1]) {
    ctx.store2(output, f, f.n, v0, v1);
  } else {
    ctx.store(output, f, f.n, v0);
  }
}

template <class Ctx>
CODA_HD void store(const Frag& f, Ctx& ctx, int output) {
  store_pair(f, ctx, output, f.v[0], f.v[1]);
}

// Store the pair and continue with the values as stored (rounded to the output's dtype), so that
// later primitives agree exactly with what a later kernel will read back.
template <class Ctx>
CODA_HD void store_rounded(Frag& f, Ctx& ctx, int output) {
  if (f.ok[1]) {
    const Stored2 s = ctx.store2(output, f, f.n, f.v[0], f.v[1]);
    f.v[0] = s.v0;
    f.v[1] = s.v1;
  } else {
    f.v[0] = ctx.store(output, f, f.n, f.v[0]);
  }
}

}  // namespace coda::epi
