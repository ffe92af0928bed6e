// Epilogue programs: what a program is, and the context every backend provides.
//
// A program is a small struct with
//     template <class Ctx> CODA_HD void operator()(Frag& f, Ctx& ctx) const;
// called once per accumulator column pair (frag.hpp states the contract). Its body is an ordered
// list of primitives (scale.hpp, tile_load.hpp, reduce.hpp, pairwise.hpp, store.hpp); order
// matters (e.g. add the residual, then reduce, then scale). The program holds only launch-time
// constants (switches, head counts); every tensor is reached through the context by an operand
// index the program declares.
//
// Switches (an optional operand or output, e.g. "a residual is given") are bits of one member,
//     uint32_t flags;  static constexpr int kFlagBits = n;   // bits 0 .. n-1, tested as flags & kBit
// The GPU compiles the visit of interior chunks once per combination of the bits with `flags`
// pinned to a compile-time value, so no switch is tested per pair (NOTES: a switch tested per pair
// is a branch the compiler does not hoist loads across: each pair's shared load then waited out
// its own latency; bench/NOTES.md step s). Each bit doubles the visit copies, and ptxas spills
// when a program's copies grow (RoPE with four: CUDA 13.0, sm_90a). A switch that only selects a
// value already in registers (e.g. "multiply by rstd when given": epi::row_mul_if) can be a plain
// member instead: the visit selects the factor once per row, not per pair.
//
// A program whose per-pair work depends on where its columns lie against a bound (RoPE: q and k
// heads rotate, v heads do not) may also declare per-span switches:
//     CODA_HD uint32_t span_flags(int n0, int n1) const;
// its flags plus the bits that hold for every pair of columns [n0, n1) (RoPE: "no column here
// rotates"). The GPU pins them per 64-column chunk of the interior visit (the edge visit tests the
// launch's flags per pair), the emulator per 64-column span of the same alignment, so a chunk
// wholly past the bound skips that work and a chunk across it (a head of 48 columns) keeps the
// per-pair test. A program whose ctx.rotation calls all sit behind one such bit names it
// `static constexpr uint32_t kNoRotation`: the GPU then skips the chunk's sin/cos table fill.
//
// The context is the backend: the GPU epilogue driver (registers, shared memory, TMA) or the CPU
// emulator (plain loops). Coordinates are ints (M, N < 2^31). It provides:
//   float   scalar(int i)                        scalar operand i (value or device pointer)
//   float   row(int i, const Frag&)              per-row vector i at row f.m          (fp32)
//   int     row_int(int i, const Frag&)          per-row int32 vector i at row f.m
//   float   col(int i, const Frag&, int n)       per-column vector i at column n of the pair (f.n or
//                                                f.n + 1); the binding maps n to an entry (a periodic
//                                                vector, e.g. RoPE frequencies, repeats every head)
//   float   tile(int i, const Frag&, int n)      tile operand i at (f.m, n), its own column space
//   Pair    tile2(int i, const Frag&, int n)     columns n, n + 1 (n even, both inside) in one load
//   float   store(int o, const Frag&, int n, float v)   output o at (f.m, n), rounded once;
//                                                       returns the value as stored. A half-width
//                                                       output takes the pair's column f.n / 2.
//   Pair    store2(int o, const Frag&, int n, float v0, float v1)  columns n, n+1 (n even, both
//                                                       inside the output) in one store. A same-
//                                                       width output is stored so (epi::store does
//                                                       it), once per pair: the GPU's interior
//                                                       visit groups the stores of pair slots
//                                                       (stmatrix, quad-exchanged direct stores)
//   void    row_store(int o, const Frag&, float v)          per-row output o at f.m
//   void    row_sum(int r, const Frag&, float v)            add to row partial r (current granule)
//   void    row_lse(int r, const Frag&, float v0, float v1) feed the pair to row LSE partial r
//                                                           (v1 only when f.ok[1])
//   void    seg_sum(int s, const Frag&, int n, float v) add to the segment holding column n
//   void    col_sum(int c, const Frag&, int n, float v) add to column partial c at column n
//   void    rotation(const Frag&, int pos, int freq, float* s, float* c)
//           sin and cos of the angle row_int(pos)[m] * col(freq)[n] turns (RoPE; epi::rope_sincos,
//           NaN for a negative position). Depends on the row and on the column's entry only, so
//           the GPU computes it once per (row, entry) of a tile and reuses it for every head.
// Partial accumulators are flushed by the backend: per-row partials once per column granule
// (CODA_PARTIAL_COLS), per-column partials once per row granule (CODA_PARTIAL_ROWS).
//
// NOTES: on the GPU the program is inlined into a loop over the thread's pairs with compile-time
// indices, so row, column and tile operands resolve to registers or one shared-memory access each;
// keep the column argument n to the pair's own columns (f.n, f.n + 1) for same-width operands.
//
// A program that needs more than plain same-width outputs declares what the GPU driver must
// provision, as `static constexpr epi::Resources kResources{...}` (absent: none of it):
//   row_sums, row_lses, seg_sums   partial-reduction slots 0 .. n-1 it feeds
//   tma_tiles                      tile operands 0 .. n-1 that are staged by TMA (16-bit dtypes),
//                                  prefetched one 64 x 64 chunk ahead of the program
//   half_outs                      bit mask of outputs with half the accumulator's columns
//                                  (output column n / 2 for accumulator pair (n, n + 1))
//   col_vecs                       column vectors 0 .. n-1 it reads (staged once per tile)
//   rotation                       1 if it calls ctx.rotation (the GPU keeps a sin/cos table)
//   col_sums                       column-partial slots 0 .. n-1 it feeds (ctx.col_sum)
//   wide_tiles, wide_outs          bit masks of tile operands / outputs with twice the accumulator's
//                                  columns (columns 2n .. 2n + 3 for accumulator pair (n, n + 1))
//   visit_chunks                   GPU tuning: 64 x 64 chunks visited per loop iteration (one copy
//                                  of the visit each; 0: the kernel's choice, two where it can). 1 for
//                                  programs whose state spills registers with two; 4, every chunk of
//                                  a tile, saves the accumulator's register moves between iterations
//                                  (set with epi::chunk_visits; measure per program)
//   out_tiles                      GPU staging: outputs staged in place of a TMA-staged tile operand
//                                  of the same width (set with epi::stage_in_tile); see below
//   direct_outs                    GPU staging: bit mask of outputs stored from registers straight
//                                  to global memory (epi::store_direct; every one: store_direct_all)
// Output slots are staged in order up to the last one used: put optional outputs in the last slots.
#pragma once

#include <type_traits>
#include <utility>

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
  int col_vecs = 0;
  int rotation = 0;
  int col_sums = 0;
  int wide_tiles = 0;
  int wide_outs = 0;
  int visit_chunks = 0;
  int out_tiles = 0;  // 4 bits per output o: 1 + the tile operand its chunk is staged over, 0: none
  int direct_outs = 0;
};

// r with visit_chunks = n (n chunks per visit-loop iteration on the GPU; n divides a tile's four).
constexpr Resources chunk_visits(Resources r, int n) {
  r.visit_chunks = n;
  return r;
}
// r with visit_chunks = 1 (one chunk per visit-loop iteration on the GPU).
constexpr Resources one_chunk_visits(Resources r) { return chunk_visits(r, 1); }

// r with output o staged over tile operand i on the GPU: the output's chunk is written into the
// tile's chunk slot in shared memory and stored from there, so the staging arena holds only the
// other outputs (8-16 KiB less per warpgroup; the bytes buy the tile ring its second slot, which
// prefetches the next chunk's operands: bench/NOTES.md, issue 9). Rules: the output has the tile's
// width and a 16-bit dtype (the host refuses fp32), and the program writes it at a pair only after
// reading the tile at that pair (the stored value may overwrite it; each pair's columns are its own).
constexpr Resources stage_in_tile(Resources r, int o, int i) {
  r.out_tiles |= (i + 1) << (4 * o);
  return r;
}
// r with output o stored from registers straight to global memory on the GPU, without staging: no
// arena bytes, no TMA store, and nothing that holds a tile slot until a store has read it. Rules:
// the output is same or double width, not staged over a tile, and the program writes a pair's
// columns with ctx.store2 (a double-width output in order, 2 f.n then 2 f.n + 2: the interior visit
// merges them into one 8-byte store, so a quad of lanes writes 32 contiguous bytes of a row per pair
// slot, whole sectors; a same-width 16-bit output's two pair slots are exchanged among the quad
// first, so it writes whole sectors too).
// NOTES: the SwiGLU backward staged dz over z's ring slot, so each chunk's next z load waited for
// dz's TMA store to have read the slot, then for the load itself (H200, bench/NOTES.md issue 9);
// stores of same-width 16-bit outputs from registers write half sectors and were slower than
// staging in the forward operators (issue 8 step x), where staging costs no mainloop stage.
constexpr Resources store_direct(Resources r, int o) {
  r.direct_outs |= 1 << o;
  return r;
}
constexpr bool out_direct(Resources r, int o) { return (r.direct_outs >> o) & 1; }
// r with every output slot stored from registers (epi::store_direct on each): the GPU epilogue then
// has no staging arena and no publish step (no fence, barrier or TMA store per chunk), and the
// bytes buy a second tile-ring slot (the next chunk's tile loads overlap this chunk's visit).
// NOTES: the SwiGLU backward's o, staged, held 16 KiB per warpgroup, so its z ring had one slot and
// each chunk waited out its z load (H200 trace, bench/NOTES.md 2026-12-02 morning).
constexpr int kDirectAll = 0xff;
constexpr Resources store_direct_all(Resources r) {
  r.direct_outs = kDirectAll;
  return r;
}
constexpr bool staging_free(Resources r) { return r.direct_outs == kDirectAll; }

// The tile operand output o is staged over, or -1 (the staging arena).
constexpr int out_tile(Resources r, int o) { return ((r.out_tiles >> (4 * o)) & 15) - 1; }

// The columns of output o / tile operand i that one accumulator pair covers: 1 (half width), 2
// (same width) or 4 (double width); a 64-column accumulator chunk holds 32 per of them.
constexpr int out_per(Resources r, int o) { return (r.half_outs >> o) & 1 ? 1 : ((r.wide_outs >> o) & 1 ? 4 : 2); }
constexpr int tile_per(Resources r, int i) { return (r.wide_tiles >> i) & 1 ? 4 : 2; }
// The GPU epilogue's staging arena per warpgroup: one 64-row chunk of two same-width 16-bit outputs,
// plus 8 KiB for each staged double-width output, less the outputs staged over tile operands (a
// 16-bit chunk of output o is 4 KiB per column it covers per pair); at least 1 KiB. Outputs stored
// directly take none; a program that stores every output directly (store_direct_all) has none.
constexpr int arena_bytes(Resources r) {
  if (staging_free(r)) return 0;
  int n = 0;
  for (int m = r.wide_outs & ~r.direct_outs; m; m >>= 1) n += m & 1;
  int bytes = 16384 + 8192 * n;
  for (int o = 0; o < 8; ++o)
    if (out_tile(r, o) >= 0) bytes -= 4096 * out_per(r, o);
  return bytes > 1024 ? bytes : 1024;
}

// The entry of a column vector that column n reads: (n mod period) / step, period 0 meaning none
// (RoPE frequencies, one per pair of a head: period head_dim, step 2). Both backends' bindings.
CODA_HD int col_entry(int n, int period, int step) { return (period > 0 ? n % period : n) / step; }

// Optional members of a program: Has<Member, P> is true when Member<P> names something (the
// detection idiom, one definition for every optional member).
template <template <class> class Member, class P, class = void>
struct Has : std::false_type {};
template <template <class> class Member, class P>
struct Has<Member, P, std::void_t<Member<P>>> : std::true_type {};
template <class P>
using ResourcesMember = decltype(P::kResources);
template <class P>
using FlagBitsMember = decltype(P::kFlagBits);
template <class P>
using Bf16OnlyMember = decltype(P::kBf16Only);
template <class P>
using SpanFlagsMember = decltype(std::declval<const P&>().span_flags(0, 0));
template <class P>
using NoRotationMember = decltype(P::kNoRotation);

template <class P>
constexpr Resources resources_of() {
  if constexpr (Has<ResourcesMember, P>::value) return P::kResources;
  else return Resources{};
}

// True when P's operator takes bf16 inputs only (`static constexpr bool kBf16Only = true;`, its
// validate() refusing fp16): the GPU compiles its kernels for bf16 alone (src/gpu/fused_instances.hpp).
template <class P>
constexpr bool bf16_only() {
  if constexpr (Has<Bf16OnlyMember, P>::value) return P::kBf16Only;
  else return false;
}

// The number of switch bits in P::flags (0 when P has none).
template <class P>
constexpr int flag_bits_of() {
  if constexpr (Has<FlagBitsMember, P>::value) return P::kFlagBits;
  else return 0;
}

// P's switches for the pairs of columns [n0, n1): P::span_flags where P declares it, else P::flags
// (0 when P has none).
template <class P>
CODA_HD uint32_t span_flags_of(const P& prog, int n0, int n1) {
  if constexpr (Has<SpanFlagsMember, P>::value) return prog.span_flags(n0, n1);
  else if constexpr (flag_bits_of<P>() > 0) return prog.flags;
  else return 0u;
}

// The switch bit under which P makes no ctx.rotation call (0: none).
template <class P>
constexpr uint32_t no_rotation_flag() {
  if constexpr (Has<NoRotationMember, P>::value) return P::kNoRotation;
  else return 0u;
}

// prog with its flags for the span [n0, n1) (the emulator's per-span pinning; see span_flags).
template <class P>
CODA_HD P for_span(const P& prog, int n0, int n1) {
  P q = prog;
  if constexpr (Has<SpanFlagsMember, P>::value) q.flags = span_flags_of(prog, n0, n1);
  return q;
}

}  // namespace coda::epi
