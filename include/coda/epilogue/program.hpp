// Epilogue programs: what a program is, and the context every backend provides.
//
// A program is a small struct with
//     template <class Ctx> CODA_HD void operator()(Frag& f, Ctx& ctx) const;
// called once per accumulator column pair (frag.hpp states the contract). Its body is an ordered
// list of primitives (scale.hpp, tile_load.hpp, reduce.hpp, pairwise.hpp, store.hpp); order
// matters (e.g. add the residual, then reduce, then scale). The program holds only launch-time
// constants (flags, head counts); every tensor is reached through the context by an operand
// index the program declares.
//
// The context is the backend: the GPU epilogue driver (registers, shared memory, TMA) or the CPU
// emulator (plain loops). It provides:
//   float   scalar(int i)                        scalar operand i (value or device pointer)
//   float   row(int i, const Frag&)              per-row vector i at row f.m          (fp32)
//   int64_t row_int(int i, const Frag&)          per-row int32 vector i at row f.m    (int32)
//   float   col(int i, const Frag&, int64_t n)   per-column vector i at column n
//   float   tile(int i, const Frag&, int64_t n)  tile operand i at (f.m, n), its own column space
//   float   store(int o, const Frag&, int64_t n, float v)   output o at (f.m, n), rounded once;
//                                                           returns the value as stored
//   Stored2 store2(int o, const Frag&, int64_t n, float v0, float v1)  columns n, n+1 (n even,
//                                                           both inside the output) in one store
//   void    row_store(int o, const Frag&, float v)          per-row output o at f.m
//   void    row_sum(int r, const Frag&, float v)            add to row partial r (current granule)
//   void    row_lse(int r, const Frag&, float v)            feed row LSE partial r
//   void    seg_sum(int s, const Frag&, int64_t n, float v) add to the segment holding column n
//   void    col_sum(int c, const Frag&, int64_t n, float v) add to column partial c at column n
// Partial accumulators are flushed by the backend: per-row partials once per column granule
// (CODA_PARTIAL_COLS), per-column partials once per row granule (CODA_PARTIAL_ROWS).
//
// A program that needs more than plain same-width outputs declares what the GPU driver must
// provision, as `static constexpr epi::Resources kResources{...}` (absent: none of it):
//   row_sums, row_lses, seg_sums   partial-reduction slots 0 .. n-1 it feeds
//   tma_tiles                      tile operands 0 .. n-1 that are staged by TMA (16-bit dtypes),
//                                  prefetched one 64 x 64 chunk ahead of the program
//   half_outs                      bit mask of outputs with half the accumulator's columns
//                                  (output column n / 2 for accumulator pair (n, n + 1))
// Output slots are staged in order up to the last one used: put optional outputs in the last slots.
#pragma once

#include <type_traits>

#include "coda/epilogue/frag.hpp"
#include "coda/epilogue/pairwise.hpp"
#include "coda/epilogue/reduce.hpp"
#include "coda/epilogue/rmsnorm.hpp"
#include "coda/epilogue/scale.hpp"
#include "coda/epilogue/store.hpp"
#include "coda/epilogue/tile_load.hpp"

namespace coda::epi {

struct Resources {
  int row_sums = 0;
  int row_lses = 0;
  int seg_sums = 0;
  int tma_tiles = 0;
  int half_outs = 0;
};

template <class P, class = void>
struct HasResources : std::false_type {};
template <class P>
struct HasResources<P, std::void_t<decltype(P::kResources)>> : std::true_type {};

template <class P>
constexpr Resources resources_of() {
  if constexpr (HasResources<P>::value) return P::kResources;
  else return Resources{};
}

}  // namespace coda::epi
