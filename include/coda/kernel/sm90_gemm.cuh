// coda's sm90 GEMM: a persistent, warp-specialized TMA + wgmma kernel whose epilogue runs an
// epilogue program (coda/epilogue/program.hpp) on the fp32 accumulator while it is in registers.
//
// Roles (384 threads, one CTA per SM):
//   warpgroup 0, warp 0   producer: TMA loads of A/B k-tiles into a Stages-deep smem ring
//                         (CUTLASS's sm90 collective mainloop, multicast across the cluster)
//   warpgroups 1, 2       consumers: wgmma into fp32 registers, then the epilogue. Cooperative:
//                         each owns half of every tile's rows. Pingpong: each owns whole tiles,
//                         alternating, so one's epilogue runs during the other's mainloop.
// Tile scheduler: persistent; cluster tiles are visited in bands of `swizzle` cluster rows (or
// columns) so that concurrently running CTAs share A and B tiles in L2.
//
// Epilogue lifecycle, per consumer warpgroup and per 64-row x 64-column chunk of its accumulator:
//   1. wait until the chunk's smem buffer is no longer being read by an earlier TMA store
//   2. call the program once per accumulator column pair (Frag) with a ChunkCtx; outputs are
//      rounded once and written to the smem buffer (128-byte swizzled rows)
//   3. fence (generic -> async proxy), warpgroup barrier, one thread issues the TMA stores
// Rows >= M and columns >= N are never visited; TMA clips the stores at the tensor's edge.
//
// NOTES: in the wgmma m64nNk16 fp32 accumulator a thread holds, per 8-column block j, the values
// (r, 8j + 2q), (r, 8j + 2q + 1), (r + 8, ...) with r = 16 warp + lane / 4, q = lane % 4; CuTe's
// per-thread C fragment has value mode (2, 2, N/8) in that order, so values (0, b, j) and (1, b, j)
// are a column pair.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <utility>

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/cutlass.h>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/numeric_types.h>
#include <cutlass/pipeline/sm90_pipeline.hpp>

#include "coda/coda.h"
#include "coda/epilogue/frag.hpp"
#include "coda/epilogue/program.hpp"
#include "coda/kernel/epilogue_params.hpp"
#include "coda/kernel/staging.hpp"
#include "coda/numeric.hpp"

namespace coda::sm90 {

using namespace cute;

// ---- compile-time unrolling ----------------------------------------------------------------------

// f(Int<0>{}), ..., f(Int<N-1>{}) as a fold expression, inlined into the caller. bench/NOTES.md
// 2026-12-05: cute::for_each leaves its inner lambda out of line when the body is large (CALL.REL in
// SASS); the callee takes the accumulator by reference, which puts it in local memory (a 1 KiB
// frame, wgmma serialized). Lambdas passed here need __attribute__((always_inline)).
template <class F, int... I>
CUTE_DEVICE void unrolled_impl(F&& f, std::integer_sequence<int, I...>) {
  (f(cute::Int<I>{}), ...);
}
template <int N, class F>
CUTE_DEVICE void unrolled(F&& f) {
  unrolled_impl(f, std::make_integer_sequence<int, N>{});
}

// ---- PTX helpers --------------------------------------------------------------------------------

CUTE_DEVICE void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
CUTE_DEVICE void fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
CUTE_DEVICE void tma_store_2d(const CUtensorMap* desc, uint32_t smem, int col, int row) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];" ::"l"(desc), "r"(col),
               "r"(row), "r"(smem)
               : "memory");
}
CUTE_DEVICE void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
template <int N>
CUTE_DEVICE void tma_store_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}
CUTE_DEVICE void tma_load_2d(const CUtensorMap* desc, uint32_t smem, uint64_t* bar, int col, int row) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
          smem),
      "l"(desc), "r"(col), "r"(row), "r"(cute::cast_smem_ptr_to_uint(bar))
      : "memory");
}

// Staging of TMA-loaded tile operands: per consumer warpgroup kSlots slots (two: double buffering,
// the next chunk's loads in flight during this chunk's visit; one: loaded when the previous chunk is
// visited), each holding one 64 x 64 16-bit chunk of every TMA tile operand, and a transaction
// barrier per slot (kept apart, so that the 1024-aligned data leaves no padding behind it).
template <int kTiles, int kSlotBytes, int kSlots>
struct TileRingStorage {
  alignas(1024) uint8_t data[2][kSlots][kTiles][kSlotBytes];  // [warpgroup][slot][tile]
};
template <int kSlotBytes, int kSlots>
struct TileRingStorage<0, kSlotBytes, kSlots> {};
template <int kTiles>
struct TileRingBarriers {
  uint64_t full[2][2];  // [warpgroup][slot]
};
template <>
struct TileRingBarriers<0> {};

// ---- element access by runtime dtype --------------------------------------------------------------

// An entry's raw bits (16-bit dtypes zero-extended) and their value: split so that a tile's row and
// column operands load together and convert after the mainloop (NOTES: converting each value right
// after its load made the warp wait out one global-load latency per operand group, four or five in a
// row per tile, in front of the mainloop; bench/NOTES.md step n).
CUTE_DEVICE uint32_t load_bits(const void* p, int64_t i, int dtype) {
  const bool wide = dtype == kDtFP32 || dtype == kDtInt32;
  return wide ? __ldg(static_cast<const uint32_t*>(p) + i) : __ldg(static_cast<const unsigned short*>(p) + i);
}
CUTE_DEVICE float bits_to_float(uint32_t bits, int dtype) {
  switch (dtype) {
    case kDtBF16: return bf16_bits_to_float(static_cast<unsigned short>(bits));
    case kDtFP16: return fp16_bits_to_float(static_cast<unsigned short>(bits));
    case kDtFP32: return __uint_as_float(bits);
    default: return static_cast<float>(static_cast<int>(bits));
  }
}
CUTE_DEVICE float load_as_float(const void* p, int64_t i, int dtype) { return bits_to_float(load_bits(p, i, dtype), dtype); }

// ---- the tile scheduler ---------------------------------------------------------------------------

struct TileSchedule {
  int ctiles_m = 0, ctiles_n = 0;  // cluster tiles along M and N
  int swizzle = 1;
  int raster_n = 0;
  CUTE_HOST_DEVICE int total() const { return ctiles_m * ctiles_n; }
};

CUTE_HOST_DEVICE void cluster_tile_coord(const TileSchedule& s, int t, int& cm, int& cn) {
  if (!s.raster_n) {
    const int per_band = s.swizzle * s.ctiles_n;
    const int band = t / per_band, r = t % per_band;
    const int m0 = band * s.swizzle;
    const int rows = min(s.swizzle, s.ctiles_m - m0);
    cm = m0 + r % rows;
    cn = r / rows;
  } else {
    const int per_band = s.swizzle * s.ctiles_m;
    const int band = t / per_band, r = t % per_band;
    const int n0 = band * s.swizzle;
    const int cols = min(s.swizzle, s.ctiles_n - n0);
    cn = n0 + r % cols;
    cm = r / cols;
  }
}

// ---- the kernel ---------------------------------------------------------------------------------

template <class Element, bool AKMajor, bool BKMajor, class TileShape_, class ClusterShape_, int Stages, bool kPingpong,
          class Program>
struct Sm90Gemm {
  using TileShape = TileShape_;
  using ClusterShape = ClusterShape_;
  static constexpr int kTileM = size<0>(TileShape{});
  static constexpr int kTileN = size<1>(TileShape{});
  static constexpr int kClusterM = size<0>(ClusterShape{});
  static constexpr int kClusterN = size<1>(ClusterShape{});
  static constexpr int kThreads = 384;
  static constexpr bool kPingpongV = kPingpong;
  // Per consumer warpgroup: one chunk of two same-width 16-bit outputs, 8 KiB more per double-width
  // output (epi::arena_bytes; the host's staging check uses the same rule).
  static constexpr int kEpiArenaBytes = epi::arena_bytes(epi::resources_of<Program>());
  static constexpr int kArenaDecl = kEpiArenaBytes > 0 ? kEpiArenaBytes : 16;  // declared (no zero-size array)
  static constexpr int kChunkCols = 64;         // accumulator columns per epilogue chunk
  static constexpr int kChunkRows = 64;

  // What the program needs beyond same-width outputs (epilogue/program.hpp).
  static constexpr epi::Resources kRes = epi::resources_of<Program>();
  static constexpr bool kHasPartials = kRes.row_sums + kRes.row_lses + kRes.seg_sums > 0;
  // Row partials (sums, LSEs) are per CODA_PARTIAL_COLS-column granule: every tile holds whole
  // granules, so each is flushed with plain stores once the chunks of its columns are visited (no
  // atomics, no zeroed or pre-filled tensor). NOTES: with 256-column granules a 128-column tile held
  // half of one and merged LSE halves by compare-and-swap, a round trip to L2 in each row block's
  // epilogue that cost the LM head ~13% of its time (bench/NOTES.md step y). Segments (at most a
  // granule wide) are flushed per row block.
  static constexpr int kGranuleCols = CODA_PARTIAL_COLS;
  static_assert(!kHasPartials || kTileN % kGranuleCols == 0, "partials need tiles of whole granules");
  // Column partials (ctx.col_sum) are per CODA_PARTIAL_ROWS-row granule: a tile is one granule, so
  // its sums, gathered in shared memory over the tile's chunks, are flushed with plain stores once
  // per tile (cooperative: both warpgroups add into one buffer, flushed after a 256-thread barrier).
  static constexpr int kColSums = kRes.col_sums;
  static_assert(kColSums == 0 || kTileM == CODA_PARTIAL_ROWS, "column partials need tiles of one row granule");
  static constexpr int kTmaTiles = kRes.tma_tiles;
  // A 64 x 64 chunk of a 16-bit tile, or 64 x 128 (two TMA boxes) when a tile is double width.
  static constexpr int kTileSlotBytes = kChunkRows * 128 * (kRes.wide_tiles ? 2 : 1);
  // Mainloop stages: as many as fit next to the epilogue staging (at most the variant's count).
  static constexpr int kStageBytes = (kTileM + kTileN) * 64 * int(sizeof(Element));
  static constexpr int kColBytes = (kRes.col_vecs + kRes.col_sums) * kTileN * 4 * 2;  // column vectors and sums
  // The trace's counters (-DCODA_EPI_TRACE builds only) are static shared memory (96 bytes, after
  // the staging arena): such a build may run a program one mainloop stage short where shared
  // memory is full.
#ifdef CODA_EPI_TRACE
  static constexpr int kTraceSmem = 128;
#else
  static constexpr int kTraceSmem = 0;
#endif
  static constexpr int stages_fit(int ring_slots) {
    return (232448 - 2048 - 2 * kArenaDecl - kTmaTiles * 2 * ring_slots * kTileSlotBytes - kColBytes -
            kTraceSmem) /
           kStageBytes;
  }
  // NOTES: tile-operand slots per warpgroup: two (the next chunk's loads overlap this chunk's visit)
  // unless one buys a mainloop stage (up to the variant's count) or two leave fewer than four;
  // then one, and the mainloop gets the bytes. With three stages the backward operators' mainloops
  // alone ran 1.2-1.5x the plain GEMM (H200, 8297266, `coda bench --diag`: RMSNorm backward 1b
  // gate/up 2222 us without an epilogue against 1559 us; two tiles, x and dres, took 64 KiB of
  // ring), and four against five cost the residual cases up to 17% (bench/NOTES.md step v).
  static constexpr int capped(int s) { return s < Stages ? s : Stages; }
  static constexpr int kRingSlots = capped(stages_fit(2)) >= 4 && capped(stages_fit(2)) >= capped(stages_fit(1)) ? 2 : 1;
  static constexpr int kStagesFit = stages_fit(kRingSlots);
  static constexpr int kStages = Stages < kStagesFit ? Stages : kStagesFit;
  static_assert(kStages >= 2, "no room for a two-stage mainloop");

  using LayoutA = cute::conditional_t<AKMajor, cutlass::layout::RowMajor, cutlass::layout::ColumnMajor>;
  using LayoutB = cute::conditional_t<BKMajor, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, LayoutA, 8, Element, LayoutB, 8, float, TileShape,
      ClusterShape, cutlass::gemm::collective::StageCount<kStages>,
      cute::conditional_t<kPingpong, cutlass::gemm::KernelTmaWarpSpecializedPingpong,
                          cutlass::gemm::KernelTmaWarpSpecializedCooperative>>::CollectiveOp;
  // Consumer threads per tile: cooperative = both warpgroups share a tile; pingpong = each owns one.
  static constexpr int kMmaThreads = kPingpong ? 128 : 256;
  using TiledMma = typename Mainloop::TiledMma;
  using MainloopPipeline = typename Mainloop::MainloopPipeline;
  using PipelineState = typename Mainloop::PipelineState;
  using AccLayout = typename decltype(partition_fragment_C(std::declval<TiledMma&>(),
                                                           take<0, 2>(TileShape{})))::layout_type;
  static constexpr int kVN = decltype(size<0>(AccLayout{}))::value / 4;  // 8-column blocks per wgmma atom
  static constexpr int kMmaM = decltype(size<1>(AccLayout{}))::value;
  static constexpr int kMmaN = decltype(size<2>(AccLayout{}))::value;
  static constexpr int kChunksPerTile = kMmaM * kMmaN * (kVN / 8);
  static_assert(kMmaN == 1, "the epilogue walks the accumulator in linear order: one wgmma atom along N");
  static_assert(decltype(cute::stride<0, 0>(AccLayout{}))::value == 1 &&
                    decltype(cute::stride<0, 1>(AccLayout{}))::value == 2 &&
                    decltype(cute::stride<0, 2>(AccLayout{}))::value == 4,
                "accumulator value order (x, b, j) expected to be compact");
  static constexpr int kRowsPerThread = 2;  // accumulator rows a thread holds per row block

  // Pingpong: the mainloops of the two consumer warpgroups take turns (mma 0 | mma 1 | mma 2 ...);
  // each warpgroup's epilogue runs as soon as its own mainloop is done.
  // NOTES: the turn keeps a warpgroup from waiting on a ring stage more than one lap ahead of the
  // other: an mbarrier wait only sees the phase parity, so a wait one tile (> Stages k-tiles)
  // early would be satisfied by an older fill of the same stage. The epilogues are not ordered
  // (CUTLASS's pingpong orders them too, because its two warpgroups share the epilogue's shared
  // memory; here each has its own arena, tile ring and column vectors): ordered, a tile took
  // max(mainloop, epilogue) and the epilogue chain set the pace as soon as it was the longer;
  // unordered, a warpgroup's cycle is mainloop + epilogue and the two overlap, so a tile takes
  // max(mainloop, (mainloop + epilogue) / 2) (ncu, 1B o-proj: the wait for the epilogue turn was
  // the consumer warps' largest single stall; bench/NOTES.md step r).
  struct NoOrder {  // cooperative: both warpgroups run every tile together
    struct SharedStorage {};
    using Params = typename cutlass::OrderedSequenceBarrier<1, 2>::Params;
    CUTE_DEVICE NoOrder(SharedStorage&, const Params&) {}
    CUTE_DEVICE void wait() {}
    CUTE_DEVICE void arrive() {}
  };
  using OrderBarrier = cute::conditional_t<kPingpong, cutlass::OrderedSequenceBarrier<1, 2>, NoOrder>;

  // Column vectors of the tile, staged once per tile as fp32 (per consumer warpgroup).
  static constexpr int kColVecs = kRes.col_vecs;
  static constexpr int kColsPerThread = kTileN / 128;  // entries a thread stages per vector
  static_assert(kTileN % 128 == 0, "column staging: whole multiples of a warpgroup");
  template <int kVecs, int kN>
  struct alignas(16) ColStorage {  // 16: the RoPE table fill reads a column pair as one 8-byte load
    float v[2][kVecs][kN];  // [warpgroup][vector][tile column]
  };
  template <int kN>
  struct ColStorage<0, kN> {};

  struct SharedStorage {
    typename Mainloop::SharedStorage mainloop;
    typename OrderBarrier::SharedStorage order;
    TileRingBarriers<kTmaTiles> ring_bar;
    ColStorage<kColVecs, kTileN> cols;  // small members before the ring: they fill its alignment padding
    ColStorage<kColSums, kTileN> col_sums;  // [warpgroup (pingpong; cooperative: 0)][slot][tile column]
    TileRingStorage<kTmaTiles, kTileSlotBytes, kRingSlots> ring;
  };
  // Dynamic shared memory (+ slack to align the base); the staging arena is static, 2 x kArenaDecl.
  static constexpr int kSmemBytes = int(sizeof(SharedStorage)) + 1024;

  struct Params {
    typename Mainloop::Params mainloop;
    EpiParams epi;
    Program program;
    TileSchedule sched;
    int m, n, k;
    int tiles_m, tiles_n;
    int k_tiles;
    int epi_buffers;  // smem buffers per warpgroup (1 or 2), chosen by the host from the outputs
    int out_dtype;    // the storage dtype shared by every tile output
    int tile_dtype;   // the dtype shared by every TMA-staged tile operand (bf16 or fp16)
    int debug;        // diagnostics (CODA_DEBUG_EPILOGUE), bits: 1 = skip the epilogue, 2 = skip the program
                      // only, 4 = count cycles per phase into trace (Trace; builds with -DCODA_EPI_TRACE),
                      // 8 = no tile-operand loads (the program reads stale shared memory), 16 = no output
                      // stores (staged, never written; outputs stored from registers, epi::store_direct,
                      // still are); 8 and 16 isolate the epilogue's memory traffic;
                      // 32 = no wait for the staging buffer (races with its previous TMA store: timing only)
    unsigned long long* trace;  // kTrCount counters (debug & 4), summed over the consumer warpgroups
  };

  // ---- diagnostics: cycles per phase, seen by thread 0 of each consumer warpgroup (debug & 4) ----
  enum TracePhase {
    kTrOrderMma,  // waiting for the warpgroup's turn at the tensor cores
    kTrMma,       // mainloop (issue and tail)
    kTrConvert,   // after the mainloop: the tile's row and column operands to values
    kTrBufWait,   // per chunk: the staging buffer's previous TMA store, and the warpgroup barrier
    kTrTileWait,  // per chunk: the staged tile operands (issue of the next chunk's and wait)
    kTrProgram,   // per chunk: row selects, the program over the pairs, chunk-level reductions
    kTrPublish,   // per chunk: fence, warpgroup barrier, TMA store issue
    kTrFlush,     // per chunk: partial flushes (the accumulator shift is booked to the next chunk)
    kTrTiles,
    kTrChunks,
    kTrCount
  };
  // Compiled in only with -DCODA_EPI_TRACE (its registers would cost the kernels spills).
#ifdef CODA_EPI_TRACE
  static constexpr bool kTrace = true;
#else
  static constexpr bool kTrace = false;
#endif
  struct Trace {  // counters in shared memory (registers would perturb the kernel being measured)
    uint32_t* c;
    uint32_t last;
    bool on;
    CUTE_DEVICE void mark(int k) {
      if (kTrace && on) {
        const uint32_t now = static_cast<uint32_t>(clock());
        c[k] += now - last;
        last = now;
      }
    }
    CUTE_DEVICE void count(int k) {
      if (kTrace && on) c[k] += 1;
    }
  };

  // ---- per-tile state ---------------------------------------------------------------------------
  // Row operands of the thread's rows, read once per tile before its mainloop (the loads are in
  // flight while the tensor cores run); [slot][row block][half]. v and col hold the raw bits
  // (load_bits) until convert_tile_operands, after the mainloop.
  struct TileRows {
    float v[kEpiSlots][kMmaM][2];
    int i[kEpiSlots][kMmaM][2];
    float col[kColVecs > 0 ? kColVecs : 1][kColsPerThread];  // the thread's share of the column vectors
  };
  // Partial-reduction accumulators and the rotation table of one tile (registers; every index is a
  // compile-time constant after inlining). Rows: [slot][half b of the row block].
  struct TileAcc {
    float rs[kRes.row_sums > 0 ? kRes.row_sums : 1][kRowsPerThread];
    epi::OnlineLse lse[kRes.row_lses > 0 ? kRes.row_lses : 1][kRowsPerThread];
    float seg[kRes.seg_sums > 0 ? kRes.seg_sums : 1][kRowsPerThread];  // a segment wider than a chunk, so far
    // ctx.rotation's angle per pair slot in radians, 2 pi times the turns exactly reduced to
    // [-1/2, 1/2) (the integer work of epi::rope_turns), valid for the chunk origin row rot_m and
    // column key rot_key (the angle depends on the row and on the column modulo the frequencies'
    // period: the key is 0 where the period divides the chunk's columns, so every chunk of a row
    // block has the same angles, else the chunk's origin column, so each chunk fills its own).
    // NOTES: angles, not sin and cos: 16 registers next to the 128 accumulators fit the
    // 168-register budget of a 384-thread kernel, 32 spill; sin and cos are then two SFU
    // operations per pair. Radians, not turns: the 2 pi multiply once per fill.
    float rot_a[kRes.rotation ? 16 : 1];
    int rot_m, rot_key;
  };

  // Output o's columns per accumulator pair (1, 2, 4: half, same, double width) and per chunk, and
  // its place in a staging buffer.
  CUTE_HOST_DEVICE static constexpr int out_per(int o) { return epi::out_per(kRes, o); }
  CUTE_HOST_DEVICE static constexpr int out_cols(int o) { return kChunkCols / 2 * out_per(o); }
  // Outputs staged over a tile operand (epi::stage_in_tile) or stored directly (epi::store_direct)
  // take no arena bytes.
  CUTE_HOST_DEVICE static constexpr int out_tile(int o) { return epi::out_tile(kRes, o); }
  CUTE_HOST_DEVICE static constexpr bool out_direct(int o) { return epi::out_direct(kRes, o); }
  CUTE_HOST_DEVICE static constexpr int out_offset(int o, int es) {
    int off = 0;
    for (int i = 0; i < o; ++i)
      if (out_tile(i) < 0 && !out_direct(i)) off += kChunkRows * out_cols(i) * es;
    return off;
  }
  static constexpr bool kInTileOuts = kRes.out_tiles != 0;
  static constexpr bool direct_outs_valid() {
    for (int o = 0; o < kEpiSlots; ++o)
      if (out_direct(o) && (out_per(o) == 1 || out_tile(o) >= 0)) return false;
    return true;
  }
  static_assert(direct_outs_valid(), "epi::store_direct: a same- or double-width output, not staged over a tile");
  // No output is staged (epi::store_direct_all): the chunk loop has no publish step and no staging
  // buffer to wait for.
  static constexpr bool kStaged = !epi::staging_free(kRes);
  static constexpr int kDirectSlots = kRes.direct_outs != 0 ? kEpiSlots : 1;  // ChunkCtx::dptr's
  // The barrier after each chunk's visit: it publishes the staged outputs, lets a one-slot ring be
  // refilled, and orders the tile's shared column sums and vectors (the last chunk's adds and reads)
  // before the flush and the next tile's writes.
  // The barrier before each chunk's visit: the staging buffer is free (thread 0 waited for its
  // store), every warp is done with the previous chunk's ring slot, the tile's column vectors are
  // written. A program that shares no shared memory across warps (nothing staged, no tiles, no
  // column vectors or sums) has no barrier per chunk at all.
  static constexpr bool kChunkStartBarrier =
      kStaged || kRes.tma_tiles > 0 || kRes.col_sums > 0 || kRes.col_vecs > 0;
  static constexpr bool kChunkEndBarrier =
      kStaged || (kRes.tma_tiles > 0 && kRingSlots == 1) || kRes.col_sums > 0 || kRes.col_vecs > 0;
  // Programs with TMA-staged tile operands read their tile words ahead (ChunkCtx::pre).
  // NOTES: first only those whose visit stores beside its tile loads (outputs over the tile's slot,
  // or directly to global memory: addresses the compiler cannot tell apart). The staged residual
  // program, whose arena the compiler can tell apart, still had each pair's shared loads issued
  // just before their use (ptxas under the 168-register cap), and reading ahead took its 1B o-proj
  // from 1.159x to 1.137x cuBLAS (H200, seven alternating rounds; bench/NOTES.md 2026-12-03 night2).
  static constexpr bool kReadAhead = kTmaTiles > 0;
  // Staged same-width 16-bit outputs go out four pair slots per stmatrix (ChunkCtx::put_matrix).
#ifdef CODA_EXP_HEAD_STORES  // measurement only: the stores as before (4-byte STS per pair)
  static constexpr bool kStsm = false;
  static constexpr bool kQuadInterior = false;  // direct outputs: quad stores only with read-ahead tiles
#else
  static constexpr bool kQuadInterior = true;
  static constexpr bool kStsm = true;
#endif
  static constexpr int kStsmSlots = kStsm ? kEpiSlots : 1;
  static constexpr bool in_tile_outs_valid() {
    for (int o = 0; o < 8; ++o) {
      const int i = epi::out_tile(kRes, o);
      if (i >= 0 && (i >= kRes.tma_tiles || out_per(o) != epi::tile_per(kRes, i))) return false;
    }
    return true;
  }
  static_assert(in_tile_outs_valid(), "an output staged over a tile operand must have that TMA tile's width");

  // Staging addresses: coda/kernel/staging.hpp (per-thread StageAddr, per-pair stage_off).

  // ---- the context a program sees inside one chunk (epilogue/program.hpp) -------------------------
  // OutDt: the storage dtype of every tile output; TileDt: of every TMA-staged tile operand. Both
  // fixed per launch, so the executed path has no dtype branches. Every per-pair index (f.slot,
  // n - f.n) is a compile-time constant after inlining: operands are registers or one shared
  // access at a constant offset from a per-thread base.
  template <int OutDt, int TileDt>
  struct ChunkCtx {
    static constexpr int kEs = OutDt == kDtFP32 ? 4 : 2;
    const Params& p;
    float scalars[kEpiSlots];
    // This chunk's staging buffer. NOTES: the staging arena is a static __shared__ array of its
    // own (sm90_gemm_kernel), so the compiler knows these plain stores never alias the tile ring
    // or the column vectors (dynamic shared memory) and issues the program's loads ahead of them.
    uint8_t* buf;
    // This chunk's TMA-staged tile operands (slot 0). NOTES: read with plain loads, not volatile
    // asm, so the compiler can issue them ahead of the program's arithmetic; the ring barrier's
    // wait (a memory clobber) keeps them after the data has landed. Outputs staged over a tile
    // (epi::stage_in_tile) are written here too.
    uint8_t* tiles;
    StageAddr out_full, out_half, out_wide, tile_a, tile_w;  // staging addresses by columns per pair
    TileAcc& acc;
    float rowv[kEpiSlots][2];  // row operands at the thread's two rows
    int rowi[kEpiSlots][2];
    const float* cols;  // the tile's staged column vectors at the thread's first column of the chunk
    mutable float lse_v[kRes.row_lses > 0 ? kRes.row_lses : 1][16][2];  // fed values, folded after the visit
    mutable float segc[kRes.seg_sums > 0 ? kRes.seg_sums : 1][2][2];    // [slot][chunk half][b]
    mutable float rowo[kEpiSlots][2];  // per-row outputs of the chunk, written after the visit
    mutable int rowo_set;              // bit 2 o + b: rowo[o][b] holds a value
    // Column sums of the chunk, [slot][jj][column of the pair] (last: zero-initialized with the
    // context, which lists the members before it).
    mutable float colc[kColSums > 0 ? kColSums : 1][8][2];
    // Tile words read ahead (programs with TMA-staged tiles, interior visit): [tile][pair slot]
    // [word: a same-width pair is one 32-bit word, a double-width pair two].
    // NOTES: a program that stores into the slots it reads (or to global memory) keeps the
    // compiler and ptxas from moving a pair's shared loads above the previous pair's stores (their
    // addresses differ by a runtime XOR), and under the register cap ptxas does not hoist them in
    // the others either: each pair then waited out its load and its arithmetic in turn (SASS of the
    // SwiGLU backward: LDS, ~40 instructions, STS, LDS, ...). visit_chunk issues the loads
    // kPreAhead pairs before the program needs them instead.
    mutable uint32_t pre[kReadAhead ? kTmaTiles : 1][16][2];
    // The direct outputs (epi::store_direct) at the thread's first column of the chunk, in its rows
    // b = 0, 1 (entries of outputs the program never stores are dead code); words held for a wider
    // store: [0] the first half of the double-width pair being stored (interior visit: its two
    // halves go out as one 8-byte store), [1 + 2 o + b] same-width output o's word of slot (jj
    // even, b).
    uint8_t* dptr[kDirectSlots][2];
    mutable uint32_t dstash[kDirectSlots > 1 ? 1 + 2 * kEpiSlots : 1];
    // Set by visit_chunk for the interior visit: every pair slot is visited, in order, and each
    // same-width output is stored once per pair with store2 (the rule of epi::store_direct), so
    // stores may be grouped across pair slots (put_quad, put_matrix), and tile words are read ahead
    // (pre).
    mutable bool interior;
    // Staged same-width 16-bit outputs, interior visit: the lane's stmatrix row offset
    // (sm90::stsm_lane_off) and the words of the group's first three pair slots, per output.
    uint32_t stsm_lane;
    mutable uint32_t sstash[kStsmSlots][3];
    // RoPE's pair visit (visit_chunk_pair): the first chunk keeps each slot's sin and cos, the
    // second reads them through rot_from (null, as the braced initializations leave it: the chunk
    // computes its own).
    mutable float rot_sc[kRes.rotation ? 16 : 1][2];
    const ChunkCtx* rot_from;

    // The tile words of pair slot s, into pre.
    CUTE_DEVICE void preload(int s) const {
      CUTE_UNROLL
      for (int i = 0; i < kTmaTiles; ++i) {
        const uint8_t* a = pair_at(i, s);
        pre[i][s][0] = *reinterpret_cast<const uint32_t*>(a);
        if (tile_per(i) == 4) pre[i][s][1] = *reinterpret_cast<const uint32_t*>(a + 4);
      }
    }
    // Tile i's word holding column n of the pair (read ahead, or from shared memory now).
    CUTE_DEVICE uint32_t tile_word(int i, const epi::Frag& f, int n) const {
      const int c = pair_col(i, f, n);
      if (kReadAhead && interior) return pre[i][f.slot][c >> 1];
      return *reinterpret_cast<const uint32_t*>(pair_at(i, f.slot) + 2 * (c & ~1));
    }

    CUTE_DEVICE static int jj_of(const epi::Frag& f) { return f.slot >> 1; }
    CUTE_DEVICE static int b_of(const epi::Frag& f) { return f.slot & 1; }

    CUTE_DEVICE float scalar(int i) const { return scalars[i]; }
    CUTE_DEVICE float row(int i, const epi::Frag& f) const { return rowv[i][b_of(f)]; }
    CUTE_DEVICE int row_int(int i, const epi::Frag& f) const { return rowi[i][b_of(f)]; }
    // One shared load at a constant offset (the compiler issues it early; no registers held). The
    // rotation's frequency vector (EpiParams::rotation_freq) is staged decoded and read by the table
    // fill only.
    CUTE_DEVICE float col(int i, const epi::Frag& f, int n) const {
      static_assert(kColVecs > 0, "the program reads column vectors: declare them in kResources.col_vecs");
      return cols[i * kTileN + 8 * jj_of(f) + (n - f.n)];
    }
    // Staged tile i at its column n, one of the pair's (64 x 64 16-bit boxes, 128-byte swizzled rows;
    // a double-width tile's pair covers its columns 2 f.n .. 2 f.n + 3).
    CUTE_DEVICE static constexpr int tile_per(int i) { return epi::tile_per(kRes, i); }
    // The first column of pair slot s in tile i's chunk slot (outputs staged over the tile share it).
    CUTE_DEVICE uint8_t* pair_at(int i, int s) const {
      return tiles + i * kTileSlotBytes +
             (tile_per(i) == 4 ? stage_off(tile_w, s >> 1, s & 1, 4, 2) : stage_off(tile_a, s >> 1, s & 1, 2, 2));
    }
    // Column n of the pair's columns in tile i's own column space: 0, 1 (same width) or 0 .. 3.
    CUTE_DEVICE static int pair_col(int i, const epi::Frag& f, int n) { return n - tile_per(i) / 2 * f.n; }
    CUTE_DEVICE uint8_t* tile_at(int i, const epi::Frag& f, int n) const {
      return pair_at(i, f.slot) + 2 * pair_col(i, f, n);
    }
    CUTE_DEVICE float tile(int i, const epi::Frag& f, int n) const {
      if (i < kTmaTiles && interior) {  // a TMA tile: kReadAhead holds, pre holds its words
        const uint32_t w = tile_word(i, f, n);
        return to_float(static_cast<unsigned short>(pair_col(i, f, n) & 1 ? w >> 16 : w & 0xffffu));
      }
      if (i < kTmaTiles) return to_float(*reinterpret_cast<const unsigned short*>(tile_at(i, f, n)));
      const EpiTile& t = p.epi.tiles[i];
      return load_as_float(t.ptr, int64_t(f.m) * t.ld + n, t.dtype);
    }
    CUTE_DEVICE epi::Pair tile2(int i, const epi::Frag& f, int n) const {
      if (i < kTmaTiles) {
        const uint32_t w = tile_word(i, f, n);
        return {to_float(static_cast<unsigned short>(w & 0xffffu)), to_float(static_cast<unsigned short>(w >> 16))};
      }
      return {tile(i, f, n), tile(i, f, n + 1)};
    }
    CUTE_DEVICE static float to_float(unsigned short bits) {
      if constexpr (TileDt == kDtFP16) return fp16_bits_to_float(bits);
      else return bf16_bits_to_float(bits);
    }
    // Output o's staging address at its column n, one of the pair's: f.n / 2 (half width), f.n or
    // f.n + 1 (same width), 2 f.n .. 2 f.n + 3 (double width).
    // Output o's staged chunk: over tile operand out_tile(o) (its layout: the same width; fp32 is
    // refused by the host), or its place in the staging buffer.
    CUTE_DEVICE uint8_t* out_base(int o) const {
      return kEs == 2 && out_tile(o) >= 0 ? tiles + out_tile(o) * kTileSlotBytes : buf + out_offset(o, kEs);
    }
    CUTE_DEVICE uint8_t* out_at(int o, const epi::Frag& f, int n) const {
      constexpr int kHalf = kRes.half_outs, kWide = kRes.wide_outs;
      if (kEs == 2 && out_tile(o) >= 0) return tile_at(out_tile(o), f, n);
      if ((kHalf >> o) & 1) return out_base(o) + stage_off(out_half, jj_of(f), b_of(f), 1, kEs);
      if ((kWide >> o) & 1) return out_base(o) + stage_off(out_wide, jj_of(f), b_of(f), 4, kEs) + (n - 2 * f.n) * kEs;
      return out_base(o) + stage_off(out_full, jj_of(f), b_of(f), 2, kEs) + (n - f.n) * kEs;
    }
    // Direct output o's (epi::store_direct) address at its column n of the pair.
    CUTE_DEVICE uint8_t* direct_at(int o, const epi::Frag& f, int n) const {
      return dptr[kDirectSlots > 1 ? o : 0][b_of(f)] + (4 * out_per(o) * jj_of(f) + n - out_per(o) / 2 * f.n) * kEs;
    }
    CUTE_DEVICE float store(int o, const epi::Frag& f, int n, float v) const {
      uint8_t* a = out_direct(o) ? direct_at(o, f, n) : out_at(o, f, n);
      if constexpr (OutDt == kDtBF16) {
        const __nv_bfloat16 h = __float2bfloat16_rn(v);
        *reinterpret_cast<unsigned short*>(a) = __bfloat16_as_ushort(h);
        return __bfloat162float(h);
      } else if constexpr (OutDt == kDtFP16) {
        const __half h = __float2half_rn(v);
        *reinterpret_cast<unsigned short*>(a) = __half_as_ushort(h);
        return __half2float(h);
      } else {
        *reinterpret_cast<float*>(a) = v;
        return v;
      }
    }
    // A packed pair h of 16-bit values for output o at column n: staged with a store of h's own
    // type. A direct output's (epi::store_direct) interior visit writes 8 bytes per lane: a
    // double-width output keeps a pair's first half (n = 2 f.n) and writes both halves at its
    // second (the program stores them in this order), a same-width one pairs slots jj and jj + 1
    // (put_quad); the checked visit, whose pair may lack its second half, stores each at once.
    template <class H>
    CUTE_DEVICE void put2(int o, const epi::Frag& f, int n, uint8_t* a, const H& h) const {
      // NOTES: the direct paths compiled only where the program has direct outputs: present but
      // never taken, they moved the inliner's choices and the RMSNorm backward spilled 8 bytes.
      if constexpr (kRes.direct_outs == 0) {
        put_staged(o, f, a, h);
      } else {
        const uint32_t w = *reinterpret_cast<const uint32_t*>(&h);
        if (!out_direct(o)) put_staged(o, f, a, h);
        else if (!(interior && (kQuadInterior || kReadAhead))) *reinterpret_cast<uint32_t*>(a) = w;
        else if (out_per(o) == 2) put_quad(o, f, a, w);
        else if (n == 2 * f.n) dstash[0] = w;
        else *reinterpret_cast<uint2*>(a - 2 * kEs) = make_uint2(dstash[0], w);
      }
    }
    // A staged output's pair: a same-width 16-bit one in the interior visit goes out with its group
    // of four pair slots (put_matrix), any other with one store of its own.
    template <class H>
    CUTE_DEVICE void put_staged(int o, const epi::Frag& f, uint8_t* a, const H& h) const {
      if (kStsm && out_per(o) == 2 && interior) put_matrix(o, f, *reinterpret_cast<const uint32_t*>(&h));
      else *reinterpret_cast<H*>(a) = h;
    }
    // The group of pair slots (jj0, 0), (jj0, 1), (jj0 + 1, 0), (jj0 + 1, 1), jj0 even, as one
    // stmatrix.x4 at the fourth (coda/kernel/staging.hpp: stsm_off): a quarter of the store
    // instructions of a 4-byte store per pair, into the same layout.
    CUTE_DEVICE void put_matrix(int o, const epi::Frag& f, uint32_t w) const {
      const int k = f.slot & 3;
      if (k < 3) {
        sstash[kStsmSlots > 1 ? o : 0][k] = w;
        return;
      }
      const uint32_t(&g)[3] = sstash[kStsmSlots > 1 ? o : 0];
      const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(out_base(o))) + stsm_off(stsm_lane, jj_of(f) - 1);
      // NOTES: two pair slots per stmatrix.x2 (one word held) spilled 8 bytes where x4 did not
      // (the residual program, CUDA 13.0): the held words are not the pressure (bench/NOTES.md 2026-12-06 second).
      asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(g[0]),
                   "r"(g[1]), "r"(g[2]), "r"(w));
    }
    // A same-width 16-bit direct output, interior visit: the words of pair slots jj (even) and jj + 1
    // of row half b go out together. The quad's eight words are exchanged by two shuffles so that
    // lane x holds columns 4 x .. 4 x + 3 of the 16 the two slots cover and writes them with one
    // 8-byte store: the quad writes 32 contiguous bytes of the row, a whole sector, with half the
    // store instructions of a 4-byte store per pair.
    CUTE_DEVICE void put_quad(int o, const epi::Frag& f, uint8_t* a, uint32_t w) const {
      uint32_t& stash = dstash[kDirectSlots > 1 ? 1 + 2 * o + b_of(f) : 0];
      if ((jj_of(f) & 1) == 0) {
        stash = w;
        return;
      }
      const uint32_t w0 = stash, w1 = w;  // lane x: columns 2 x, 2 x + 1 of slot jj - 1, of jj
      const int lane = int(threadIdx.x) & 31, x = lane & 3, q = lane & ~3;
      // Lane x gets: x = 0: w0 of lanes 0, 1; x = 1: w0 of 2, 3; x = 2: w1 of 0, 1; x = 3: w1 of 2, 3.
      const uint32_t r1 = __shfl_sync(0xffffffffu, x == 0 ? w1 : w0, q | ((0x3021 >> (4 * x)) & 3));  // from 1, 2, 0, -
      const uint32_t r2 = __shfl_sync(0xffffffffu, x == 1 || x == 2 ? w1 : w0, q | ((0x2130 >> (4 * x)) & 3));  // -, 3, 1, 2
      const uint32_t lo = x == 0 ? w0 : (x == 3 ? r2 : r1), hi = x == 0 ? r1 : (x == 3 ? w1 : r2);
      // a: this slot's first column for lane x (2 x past the quad's); the pair of slots' column 4 x
      *reinterpret_cast<uint2*>(a + (2 * x - 8) * kEs) = make_uint2(lo, hi);
    }
    // Columns (n, n + 1), n even: one packed conversion and one 4- or 8-byte store.
    CUTE_DEVICE epi::Pair store2(int o, const epi::Frag& f, int n, float v0, float v1) const {
      uint8_t* a = out_direct(o) ? direct_at(o, f, n) : out_at(o, f, n);
      if constexpr (OutDt == kDtBF16) {
        const __nv_bfloat162 h = __floats2bfloat162_rn(v0, v1);
        put2(o, f, n, a, h);
        // The stored values back as fp32: one shift and one mask (__low2float / __high2float are a
        // byte permute and a multiply each in SASS).
        const uint32_t w = *reinterpret_cast<const uint32_t*>(&h);
        return {__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u)};
      } else if constexpr (OutDt == kDtFP16) {
        const __half2 h = __floats2half2_rn(v0, v1);
        put2(o, f, n, a, h);
        return {__low2float(h), __high2float(h)};
      } else {
        *reinterpret_cast<float2*>(a) = make_float2(v0, v1);
        return {v0, v1};
      }
    }
    CUTE_DEVICE void row_store(int o, const epi::Frag& f, float v) const {
      rowo[o][b_of(f)] = v;
      rowo_set |= 1 << (2 * o + b_of(f));
    }
    CUTE_DEVICE void row_sum(int r, const epi::Frag& f, float v) const { acc.rs[r][b_of(f)] += v; }
    // Buffered: the driver folds the chunk's 16 values per row into the running state at once (one
    // max, then independent exponentials), not one serial online update per value.
    CUTE_DEVICE void row_lse(int r, const epi::Frag& f, float v0, float v1) const {
      lse_v[r][f.slot][0] = v0;
      lse_v[r][f.slot][1] = f.ok[1] ? v1 : -INFINITY;
    }
    // Segments are at least 32 columns and aligned to them: a chunk's columns fall in at most two,
    // split at its 32nd column (pairs jj >= 4); the driver flushes them per chunk (flush_chunk_segs).
    CUTE_DEVICE void seg_sum(int s, const epi::Frag& f, int, float v) const { segc[s][jj_of(f) >= 4][b_of(f)] += v; }
    // Summed over the thread's two rows in registers; the driver reduces the chunk across the
    // lanes and warps into the tile's shared column sums (add_col_sums).
    CUTE_DEVICE void col_sum(int c, const epi::Frag& f, int n, float v) const {
      static_assert(kColSums > 0, "the program calls ctx.col_sum: declare kResources.col_sums");
      colc[c][jj_of(f)][n - f.n] += v;
    }
    // The table read: the driver fills it (every pair slot of the chunk, from the operands the
    // binding names: EpiParams::rotation_pos / rotation_freq) when the chunk's rows or column phase
    // differ from the last fill.
    CUTE_DEVICE void rotation(const epi::Frag& f, int, int, float* s, float* c) const {
      static_assert(kRes.rotation != 0, "the program calls ctx.rotation: declare kResources.rotation = 1");
      if constexpr (kPingpongV) {  // the pair visit's kernel (the cooperative one compiles as before)
        if (rot_from) {
          *s = rot_from->rot_sc[f.slot][0];
          *c = rot_from->rot_sc[f.slot][1];
          return;
        }
      }
      epi::sincos_radians(acc.rot_a[f.slot], s, c);  // NaN angle (negative position): NaN sin and cos
      if constexpr (kPingpongV) {
        rot_sc[f.slot][0] = *s;
        rot_sc[f.slot][1] = *c;
      }
    }
    // Pair slot j = 2 jj + b: frequency jj, row b. NOTES: the frequency's decoded pair (multiplier,
    // shift) is one 8-byte shared load at a computed address, and a negative position's NaN comes
    // from the row's scale (epi::rope_row_scale), not from a select per angle: 4-5 instructions an
    // angle where the selects over the column-vector slots and the NaN select took 8
    // (scripts/sass_epilogue.py; bench/NOTES.md 2026-12-06, fourth).
    CUTE_DEVICE void fill_rotation() const {
      const int pos = p.epi.rotation_pos;
      int ps[2] = {0, 0};
      float scale[2];
      CUTE_UNROLL
      for (int b = 0; b < 2; ++b) {
        CUTE_UNROLL
        for (int i = 0; i < kEpiSlots; ++i) ps[b] = i == pos ? rowi[i][b] : ps[b];  // selects: slots stay registers
        scale[b] = epi::rope_row_scale(ps[b]);
      }
      const float* fc = cols + p.epi.rotation_freq * kTileN;  // the pair's two columns: its frequency decoded
      CUTE_UNROLL
      for (int jj = 0; jj < 8; ++jj) {
        // 8-byte aligned: the thread's first column is even, the column vectors 16-byte aligned
        const float2 w = *reinterpret_cast<const float2*>(fc + 8 * jj);
        const epi::RopeFreq d{__float_as_uint(w.x), __float_as_uint(w.y)};
        CUTE_UNROLL
        for (int b = 0; b < 2; ++b) acc.rot_a[2 * jj + b] = epi::rope_radians_scaled(ps[b], d, scale[b]);
      }
    }
  };

  // Bytes of one chunk over all output slots (64 rows of each output, in the launch's dtype).
  CUTE_HOST_DEVICE static int chunk_bytes_all(const EpiParams& e) {
    int es = 2;
    for (int o = 0; o < e.num_outs; ++o)
      if (e.outs[o].defined && e.outs[o].dtype == kDtFP32) es = 4;
    return out_offset(e.num_outs, es);
  }
  CUTE_HOST_DEVICE static int buffers_for(const EpiParams& e) {
    const int b = chunk_bytes_all(e);
    return b == 0 ? 2 : (2 * b <= kEpiArenaBytes ? 2 : (b <= kEpiArenaBytes ? 1 : 0));
  }

  // Visit one chunk: the program on every column pair (kChecked: skip pairs outside M x N). The
  // chunk's 32 values are the accumulator's 32 from kOff on (linear index kOff + x + 2 b + 4 jj for
  // value x of pair jj in row half b); (m0, n0) is the thread's first (row, column) in it. NOTES at
  // the top of this file: value (a, b, j) of a wgmma block sits at (r0 + 8 b, c0 + 8 j + a).
  // Programs with outputs staged over a tile operand: the interior visit reads each pair's tile
  // words this many pairs ahead (ChunkCtx::pre).
  static constexpr int kPreAhead = 4;
  template <bool kChecked, int kOff, int OutDt, int TileDt, class Accum>
  CUTE_DEVICE static void visit_chunk(const Params& p, const Program& prog, const ChunkCtx<OutDt, TileDt>& ctx,
                                      const Accum& accum, int m0, int n0) {
    constexpr bool kPre = kReadAhead && !kChecked;
    ctx.interior = !kChecked;
    if constexpr (kPre) {
      CUTE_UNROLL
      for (int s = 0; s < kPreAhead; ++s) ctx.preload(s);
    }
    CUTE_UNROLL
    for (int jj = 0; jj < 8; ++jj) {
      CUTE_UNROLL
      for (int b = 0; b < 2; ++b) {
        if constexpr (kPre) {
          if (2 * jj + b + kPreAhead < 16) ctx.preload(2 * jj + b + kPreAhead);
        }
        epi::Frag f;
        f.m = m0 + 8 * b;
        f.n = n0 + 8 * jj;
        f.slot = 2 * jj + b;
        f.ok[0] = true;
        f.ok[1] = true;
        if constexpr (kChecked) {
          if (f.m >= p.m || f.n >= p.n) continue;
          f.ok[1] = f.n + 1 < p.n;
        }
        f.v[0] = accum(kOff + 4 * jj + 2 * b);
        f.v[1] = f.ok[1] ? accum(kOff + 4 * jj + 2 * b + 1) : 0.0f;
        prog(f, ctx);
      }
    }
  }

  // RoPE's pair visit: two chunks of one row block, pair slot by pair slot (the second chunk's
  // columns 64 further), the rotation's sin and cos of a slot computed once for both (ctx1.rot_from
  // = &ctx0). Outputs staged by 4-byte stores, not stmatrix groups: with both chunks' stashes live
  // the kernel spilled 32 bytes. NOTES: bench/NOTES.md, 2026-12-07.
  template <int kOff0, int kOff1, int OutDt, int TileDt, class Accum>
  CUTE_DEVICE static void visit_chunk_pair(const Program& prog, const ChunkCtx<OutDt, TileDt>& ctx0,
                                           const ChunkCtx<OutDt, TileDt>& ctx1, const Accum& accum, int m0, int n0) {
    ctx0.interior = false;
    ctx1.interior = false;
    CUTE_UNROLL
    for (int jj = 0; jj < 8; ++jj) {
      CUTE_UNROLL
      for (int b = 0; b < 2; ++b) {
        epi::Frag f;
        f.m = m0 + 8 * b;
        f.slot = 2 * jj + b;
        f.ok[0] = true;
        f.ok[1] = true;
        f.n = n0 + 8 * jj;
        f.v[0] = accum(kOff0 + 4 * jj + 2 * b);
        f.v[1] = accum(kOff0 + 4 * jj + 2 * b + 1);
        prog(f, ctx0);
        f.n = n0 + 64 + 8 * jj;
        f.v[0] = accum(kOff1 + 4 * jj + 2 * b);
        f.v[1] = accum(kOff1 + 4 * jj + 2 * b + 1);
        prog(f, ctx1);
      }
    }
  }

  // The program's switches (Program::flags, epilogue/program.hpp): the interior visit is compiled
  // once per combination, with the flags pinned to a constant, so the pairs test none of them.
  static constexpr int kFlagBits = epi::flag_bits_of<Program>();
  static_assert(kFlagBits <= 3, "at most 8 specializations of the visit per program");
  // Per 64-column chunk [n0, n1): with the program's span flags (program.hpp, span_flags).
  CUTE_DEVICE static uint32_t flags_of(const Program& prog, int n0, int n1) {
    if constexpr (kFlagBits > 0) return epi::span_flags_of(prog, n0, n1) & ((1u << kFlagBits) - 1);
    else return 0u;
  }
  template <uint32_t kMask>
  CUTE_DEVICE static Program pinned(const Program& prog) {
    Program q = prog;
    if constexpr (kFlagBits > 0) q.flags = kMask;
    return q;
  }
  // f(std::integral_constant<uint32_t, mask>) for the runtime combination `mask`.
  template <uint32_t kMask = 0, class F>
  CUTE_DEVICE static void with_flags(uint32_t mask, F&& f) {
#ifdef CODA_SASS_FLAGS  // scripts/sass_epilogue.py: only this combination is compiled (exact counts)
    (void)mask;
    f(std::integral_constant<uint32_t, uint32_t(CODA_SASS_FLAGS) & ((1u << kFlagBits) - 1)>{});
#else
    if constexpr (kMask + 1 < (1u << kFlagBits)) {
      if (mask != kMask) {
        with_flags<kMask + 1>(mask, f);
        return;
      }
    }
    f(std::integral_constant<uint32_t, kMask>{});
#endif
  }

  // Fold the chunk's buffered LSE values into the running state of each of the thread's rows: one
  // max over the 16 values (NaN-propagating), then 16 independent exponentials.
  template <class Ctx>
  CUTE_DEVICE static void fold_lse(const Ctx& ctx, TileAcc& acc) {
    using epi::kLog2e;
    CUTE_UNROLL
    for (int r = 0; r < kRes.row_lses; ++r) {
      CUTE_UNROLL
      for (int b = 0; b < 2; ++b) {
        float mx[8];
        CUTE_UNROLL
        for (int jj = 0; jj < 8; ++jj) mx[jj] = fmax_nan(ctx.lse_v[r][2 * jj + b][0], ctx.lse_v[r][2 * jj + b][1]);
        CUTE_UNROLL
        for (int w = 4; w >= 1; w >>= 1) {
          CUTE_UNROLL
          for (int jj = 0; jj < w; ++jj) mx[jj] = fmax_nan(mx[jj], mx[jj + w]);
        }
        epi::OnlineLse& st = acc.lse[r][b];
        const float nm = fmax_nan(st.max, mx[0]);
        if (nm != -INFINITY) {  // else nothing but -inf so far: the state stays empty
          const float off = nm * kLog2e;
          float e[8];
          CUTE_UNROLL
          for (int jj = 0; jj < 8; ++jj)
            e[jj] = epi::ex2_ftz(fmaf(ctx.lse_v[r][2 * jj + b][0], kLog2e, -off)) +
                    epi::ex2_ftz(fmaf(ctx.lse_v[r][2 * jj + b][1], kLog2e, -off));
          CUTE_UNROLL
          for (int w = 4; w >= 1; w >>= 1) {
            CUTE_UNROLL
            for (int jj = 0; jj < w; ++jj) e[jj] += e[jj + w];
          }
          st.sum = st.sum * epi::ex2_ftz(fmaf(st.max, kLog2e, -off)) + e[0];  // st.max = -inf: 0 * 0
          st.max = nm;
        }
      }
    }
  }
  CUTE_DEVICE static float fmax_nan(float a, float b) {
    float r;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
  }

  // Issue the TMA loads of the chunk at (cm0, cn0) into ring slot seq % kRingSlots (nothing when it
  // lies outside M x N). One thread of the warpgroup.
  CUTE_DEVICE static void issue_tile_loads(const Params& p, uint8_t* ring, uint64_t* full, int seq, int cm0,
                                           int cn0) {
    if constexpr (kTmaTiles > 0) {
      if (cm0 >= p.m || cn0 >= p.n) return;
      // Outputs staged over tile operands: the slot is free once the stores that last read it have
      // (this thread issues every store of the warpgroup).
      if constexpr (kInTileOuts) tma_store_wait_read<0>();
      uint64_t* bar = &full[seq % kRingSlots];
      // a double-width tile: two 64-column boxes at its columns 2 cn0 and 2 cn0 + 64
      constexpr int kBox = kChunkRows * 128;
      int bytes = 0;
      for (int i = 0; i < kTmaTiles; ++i)
        if (p.epi.tiles[i].ptr) bytes += kBox * (epi::tile_per(kRes, i) / 2);
      cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(bar, uint32_t(bytes));
      for (int i = 0; i < kTmaTiles; ++i)
        if (p.epi.tiles[i].ptr) {
          const int per = epi::tile_per(kRes, i);
          uint8_t* slot = ring + ((seq % kRingSlots) * kTmaTiles + i) * kTileSlotBytes;
          for (int bx = 0; bx < per / 2; ++bx)
            tma_load_2d(&p.epi.tiles[i].tma, cute::cast_smem_ptr_to_uint(slot + bx * kBox), bar,
                        cn0 / 2 * per + 64 * bx, cm0);
        }
    }
  }
  // Global origin of the first chunk of accumulator row block mi (column block 0) of a tile.
  CUTE_DEVICE static void row_block_origin(int mma_thread_idx, int mi, int gm0, int gn0, int& cm0, int& cn0) {
    Tensor cD = make_identity_tensor(make_shape(Int<kTileM>{}, Int<kTileN>{}));
    TiledMma tiled_mma;
    Tensor tCcD = tiled_mma.get_thread_slice(mma_thread_idx).partition_C(cD);
    const auto base = tCcD(make_coord(make_coord(0, 0, 0), mi, 0));
    cm0 = gm0 + (get<0>(base) & ~(kChunkRows - 1));
    cn0 = gn0 + (get<1>(base) & ~(kChunkCols - 1));
  }
  CUTE_HOST_DEVICE static bool uses_tile_ring(const EpiParams& e) {
    bool any = false;
    for (int i = 0; i < kTmaTiles; ++i) any = any || e.tiles[i].ptr != nullptr;
    return any;
  }

  // Read the tile's row operands and this thread's share of its column vectors (before the
  // mainloop: the loads complete while the tensor cores run). Entries outside M or N read 0.
  CUTE_DEVICE static void load_tile_operands(const Params& p, TileRows& tr, int tile_m, int tile_n,
                                             int mma_thread_idx) {
    Tensor cD = make_identity_tensor(make_shape(Int<kTileM>{}, Int<kTileN>{}));
    TiledMma tiled_mma;
    Tensor tCcD = tiled_mma.get_thread_slice(mma_thread_idx).partition_C(cD);
    CUTE_UNROLL
    for (int mi = 0; mi < kMmaM; ++mi) {
      CUTE_UNROLL
      for (int b = 0; b < 2; ++b) {
        const int m = tile_m * kTileM + get<0>(tCcD(make_coord(make_coord(0, 0, 0), mi, 0))) + 8 * b;
        const bool in = m < p.m;
        CUTE_UNROLL
        for (int i = 0; i < kEpiSlots; ++i) {
          tr.v[i][mi][b] = __uint_as_float(p.epi.rows[i].ptr && in ? load_bits(p.epi.rows[i].ptr, m, p.epi.rows[i].dtype) : 0u);
          tr.i[i][mi][b] = p.epi.row_ints[i].ptr && in ? __ldg(static_cast<const int*>(p.epi.row_ints[i].ptr) + m) : 0;
        }
      }
    }
    const int t = mma_thread_idx % 128;
    CUTE_UNROLL
    for (int i = 0; i < kColVecs; ++i) {
      const EpiVector& c = p.epi.cols[i];
      CUTE_UNROLL
      for (int k = 0; k < kColsPerThread; ++k) {
        const int n = tile_n * kTileN + t + 128 * k;
        tr.col[i][k] = __uint_as_float(c.ptr && n < p.n ? load_bits(c.ptr, epi::col_entry(n, c.period, c.step), c.dtype) : 0u);
      }
    }
  }
  // The loaded bits to values (zero bits read 0 in every dtype), once per tile after the mainloop.
  CUTE_DEVICE static void convert_tile_operands(const Params& p, TileRows& tr) {
    CUTE_UNROLL
    for (int i = 0; i < kEpiSlots; ++i) {
      CUTE_UNROLL
      for (int mi = 0; mi < kMmaM; ++mi) {
        CUTE_UNROLL
        for (int b = 0; b < 2; ++b) tr.v[i][mi][b] = bits_to_float(__float_as_uint(tr.v[i][mi][b]), p.epi.rows[i].dtype);
      }
    }
    CUTE_UNROLL
    for (int i = 0; i < kColVecs; ++i) {
      CUTE_UNROLL
      for (int k = 0; k < kColsPerThread; ++k) tr.col[i][k] = bits_to_float(__float_as_uint(tr.col[i][k]), p.epi.cols[i].dtype);
    }
  }

  // The chunk's column sums (ctx.colc, each over the thread's two rows) summed across the eight lanes
  // that hold the same columns (lane bits 2-4 select the row) by a reduce-scatter: each round halves
  // the values a lane keeps (bit 4: pair slots jj 4-7 or 0-3; bit 3: jj 2-3 of those; bit 2: the
  // odd one), so every lane ends with both columns of pair slot jj = 4 b4 + 2 b3 + b2 and adds them
  // into the tile's shared column sums (the four warps add to the same columns: shared-memory
  // reductions). NOTES: 14 shuffles a chunk and slot where the butterfly on all 16 values took 48,
  // and 2 reductions per lane instead of 16 on lanes 0-3 (bench/NOTES.md, issue 9).
  // col0: the thread's first column, relative to the tile.
  // One round: lanes that differ in lane bit kBit swap halves of their first kN values; each keeps
  // the sum of its half (the upper one where its bit is set) in v[0 .. kN / 2).
  template <int kBit, int kN>
  CUTE_DEVICE static void reduce_scatter_round(float (&v)[16], int lane) {
    const bool hi = (lane >> kBit) & 1;
    CUTE_UNROLL
    for (int k = 0; k < kN / 2; ++k) {
      const float keep = hi ? v[kN / 2 + k] : v[k], give = hi ? v[k] : v[kN / 2 + k];
      v[k] = keep + __shfl_xor_sync(0xffffffffu, give, 1 << kBit);
    }
  }
  template <class Ctx>
  CUTE_DEVICE static void add_col_sums(const Ctx& ctx, float* sums, int col0, int lane) {
    CUTE_UNROLL
    for (int c = 0; c < kColSums; ++c) {
      float v[16];  // index 2 jj + x
      CUTE_UNROLL
      for (int jj = 0; jj < 8; ++jj) {
        v[2 * jj] = ctx.colc[c][jj][0];
        v[2 * jj + 1] = ctx.colc[c][jj][1];
      }
      reduce_scatter_round<4, 16>(v, lane);
      reduce_scatter_round<3, 8>(v, lane);
      reduce_scatter_round<2, 4>(v, lane);
      const int jj = 4 * ((lane >> 4) & 1) + 2 * ((lane >> 3) & 1) + ((lane >> 2) & 1);
      atomicAdd(sums + c * kTileN + col0 + 8 * jj, v[0]);
      atomicAdd(sums + c * kTileN + col0 + 8 * jj + 1, v[1]);
    }
  }
  // The tile's column sums to the partials' row granule tile_m (a tile is one granule) with plain
  // stores, and the shared sums zeroed for the next tile. Pingpong: the warpgroup's last chunk
  // barrier ordered its adds before these reads, and the next tile's first chunk barrier orders the
  // zeros before its adds. Cooperative: both warpgroups add into one buffer, so a 256-thread barrier
  // before the reads and one after the zeros.
  CUTE_DEVICE static void flush_col_sums(const Params& p, float* sums, int tile_m, int gn0, int mma_thread_idx) {
    if constexpr (!kPingpong) named_barrier_sync(3, 256);
    CUTE_UNROLL
    for (int k = 0; k < kTileN / kMmaThreads; ++k) {
      const int col = mma_thread_idx + kMmaThreads * k;
      CUTE_UNROLL
      for (int c = 0; c < kColSums; ++c) {
        const float v = sums[c * kTileN + col];
        sums[c * kTileN + col] = 0.0f;
        const EpiPartial& P = p.epi.col_sums[c];
        if (P.ptr && gn0 + col < p.n) P.ptr[int64_t(tile_m) * P.ld + gn0 + col] = v;
      }
    }
    if constexpr (!kPingpong) named_barrier_sync(3, 256);
  }

  // The quad's LSE states merged without branches (epi::OnlineLse::merge's meaning): one
  // NaN-propagating max and two SFU exponentials; an empty side (max -inf, sum 0) adds 0, two empty
  // sides stay empty, a +inf max makes the sum NaN, which lse_value maps back to +inf. NOTES: with
  // OnlineLse::merge and value() (branches, full-precision expf and logf) the flush of one granule
  // took ~2.6 K cycles, a quarter of the LM head's epilogue (trace, bench/NOTES.md step aa).
  CUTE_DEVICE static void lse_merge(float& mx, float& sm, float omx, float osm) {
    using epi::kLog2e;
    const float nm = fmax_nan(mx, omx);
    const float off = nm * kLog2e;
    const float s = sm * epi::ex2_ftz(fmaf(mx, kLog2e, -off)) + osm * epi::ex2_ftz(fmaf(omx, kLog2e, -off));
    sm = nm == -INFINITY ? 0.0f : s;
    mx = nm;
  }
  // log sum exp of a merged state: max + log(sum) (SFU logarithm, sum >= 1 after the max's own
  // term); an infinite max is the value itself, NaN stays NaN.
  CUTE_DEVICE static float lse_value(float mx, float sm) {
    constexpr float kLn2 = 0.6931471805599453f;
    return (mx == INFINITY || mx == -INFINITY) ? mx : fmaf(__log2f(sm), kLn2, mx);
  }

  // Flush the row partials (sums, LSEs) of accumulator row block mi for granule `gran` (a column
  // index of the partial tensors) and reset them: a quad of lanes shares each row (NOTES at the top).
  CUTE_DEVICE static void flush_rows(const Params& p, TileAcc& acc, int tile_m, int mma_thread_idx, int mi,
                                     int gran) {
    Tensor cD = make_identity_tensor(make_shape(Int<kTileM>{}, Int<kTileN>{}));
    TiledMma tiled_mma;
    Tensor tCcD = tiled_mma.get_thread_slice(mma_thread_idx).partition_C(cD);
    const bool writer = (threadIdx.x & 3) == 0 && gran * kGranuleCols < p.n;
    CUTE_UNROLL
    for (int b = 0; b < 2; ++b) {
      const int m = tile_m * kTileM + get<0>(tCcD(make_coord(make_coord(0, 0, 0), mi, 0))) + 8 * b;
      const bool live = writer && m < p.m;
      CUTE_UNROLL
      for (int r = 0; r < kRes.row_sums; ++r) {
        float v = acc.rs[r][b];
        acc.rs[r][b] = 0.0f;
        v += __shfl_xor_sync(0xffffffffu, v, 1);
        v += __shfl_xor_sync(0xffffffffu, v, 2);
        const EpiPartial& P = p.epi.row_sums[r];
        if (live && P.ptr) P.ptr[int64_t(m) * P.ld + gran] = v;
      }
      CUTE_UNROLL
      for (int r = 0; r < kRes.row_lses; ++r) {
        float mx = acc.lse[r][b].max, sm = acc.lse[r][b].sum;
        acc.lse[r][b] = epi::OnlineLse{};
        CUTE_UNROLL
        for (int x = 1; x <= 2; x <<= 1)
          lse_merge(mx, sm, __shfl_xor_sync(0xffffffffu, mx, x), __shfl_xor_sync(0xffffffffu, sm, x));
        const EpiPartial& P = p.epi.row_lses[r];
        if (live && P.ptr) P.ptr[int64_t(m) * P.ld + gran] = lse_value(mx, sm);
      }
    }
  }
  // Flush the chunk's segment sums (ctx.segc, per chunk half) to the segment partials, per chunk:
  // a 32-column segment is a chunk half, a 64-column one the chunk, and a wider one (at most a
  // granule) is summed over its chunks in acc.seg and flushed with its last (the chunks of a row
  // block are visited in column order). Each value is summed over the quad of lanes that shares its
  // row (two shuffles) and stored by the quad's first lane. m0: the thread's first row. NOTES: the
  // tile's segments were summed into eight slots per row by selects after every chunk and flushed
  // per row block behind a branch per slot: 80 + ~840 static SASS instructions (the QKV statistics'
  // flush phase, 1 K cycles a chunk in the trace; bench/NOTES.md 2026-12-03 evening).
  template <class Ctx>
  CUTE_DEVICE static void flush_chunk_segs(const Params& p, const Ctx& ctx, TileAcc& acc, int m0, int cn0) {
    const bool writer = (threadIdx.x & 3) == 0;
    CUTE_UNROLL
    for (int r = 0; r < kRes.seg_sums; ++r) {
      const EpiPartial& P = p.epi.seg_sums[r];
      const int sh = P.seg_shift;  // 5 .. log2(kGranuleCols), uniform
      float v[2][2];               // [segment of the chunk][b]
      int segs = 0;                // segments the chunk closes: 2 (32 columns), 1 or 0 (uniform)
      CUTE_UNROLL
      for (int b = 0; b < 2; ++b) {
        if (sh == 5) {
          v[0][b] = ctx.segc[r][0][b];
          v[1][b] = ctx.segc[r][1][b];
        } else {
          v[0][b] = acc.seg[r][b] + ctx.segc[r][0][b] + ctx.segc[r][1][b];
          v[1][b] = 0.0f;
        }
      }
      const int end = cn0 + kChunkCols;
      if (sh == 5) segs = 2;
      else segs = ((end & ((1 << sh) - 1)) == 0 || end >= p.n) ? 1 : 0;
      CUTE_UNROLL
      for (int b = 0; b < 2; ++b) acc.seg[r][b] = segs == 0 ? v[0][b] : 0.0f;
      CUTE_UNROLL
      for (int k = 0; k < 2; ++k) {
        if (k < segs) {
          const int seg = (cn0 >> sh) + k;
          CUTE_UNROLL
          for (int b = 0; b < 2; ++b) {
            float x = v[k][b];
            x += __shfl_xor_sync(0xffffffffu, x, 1);
            x += __shfl_xor_sync(0xffffffffu, x, 2);
            const int m = m0 + 8 * b;
            if (writer && m < p.m && P.ptr && seg < P.cols) P.ptr[int64_t(m) * P.ld + seg] = x;
          }
        }
      }
    }
  }

  template <int OutDt, int TileDt, class Accum>
  CUTE_DEVICE static void epilogue(const Params& p, Accum& accum, const float (&scalars)[kEpiSlots],
                                   const TileRows& tr, TileAcc& acc, uint8_t* arena, uint8_t* ring, uint64_t* full,
                                   float* colbuf, float* colsums, int tile_m, int tile_n, int mma_thread_idx,
                                   int wg, int& chunk_count, Trace& trace) {
    const int t = mma_thread_idx % 128;
    const int lane = int(threadIdx.x) & 31, warp = (int(threadIdx.x) >> 5) & 3;
    Tensor cD = make_identity_tensor(make_shape(Int<kTileM>{}, Int<kTileN>{}));
    TiledMma tiled_mma;
    Tensor tCcD = tiled_mma.get_thread_slice(mma_thread_idx).partition_C(cD);
    static_assert(kVN % (kChunkCols / 8) == 0, "the wgmma atom must hold whole epilogue chunks");
    const int gm0 = tile_m * kTileM, gn0 = tile_n * kTileN;
    constexpr int kEs = OutDt == kDtFP32 ? 4 : 2;
    // chunk_bytes_all with the launch's dtype (every output has OutDt) and a constant per output
    // count: selects, no runtime loop.
    int chunk_bytes = 0;
    CUTE_UNROLL
    for (int o = 1; o <= kEpiSlots; ++o) chunk_bytes = p.epi.num_outs == o ? out_offset(o, kEs) : chunk_bytes;
    const bool ring_on = uses_tile_ring(p.epi) && !(p.debug & 8);
    const StageAddr out_full = stage_addr(lane, warp, 2, kEs);
    const StageAddr out_half = stage_addr(lane, warp, 1, kEs);
    const StageAddr out_wide = stage_addr(lane, warp, 4, kEs);
    const StageAddr tile_a = stage_addr(lane, warp, 2, 2);
    const StageAddr tile_w = stage_addr(lane, warp, 4, 2);
    const uint32_t stsm_lane = stsm_lane_off(lane, warp);

    CUTE_UNROLL
    for (int i = 0; i < kRowsPerThread; ++i) {
      CUTE_UNROLL
      for (int r = 0; r < kRes.row_sums; ++r) acc.rs[r][i] = 0.0f;
      CUTE_UNROLL
      for (int r = 0; r < kRes.row_lses; ++r) acc.lse[r][i] = epi::OnlineLse{};
      CUTE_UNROLL
      for (int r = 0; r < kRes.seg_sums; ++r) acc.seg[r][i] = 0.0f;
    }
    acc.rot_m = -1;  // the rotation table is refilled for every tile
    acc.rot_key = -1;
    // Every chunk of a row block has the same angles where the frequencies' period divides the
    // chunk's columns (RoPE at head_dim 64). NOTES: once per tile; the phase as cn0 % period was an
    // integer division in every chunk (~26 SASS instructions, with a dynamically indexed parameter
    // load).
    bool rot_shared = false;
    if constexpr (kRes.rotation != 0) {
      const int period = p.epi.cols[p.epi.rotation_freq].period;
      rot_shared = period > 0 && kChunkCols % period == 0;
    }
    // The tile's column vectors into shared memory. The previous tile's last chunk read them before
    // its final barrier; this chunk loop's first barrier orders these writes before any read.
    // The rotation's frequencies go in decoded (epi::RopeFreq), once per tile: a pair's two columns
    // share one frequency (bound with step 2), so its first column holds the multiplier and its
    // second the shift, and the table fill reads them instead of decoding eight frequencies per
    // fill. NOTES: the decode was ~20 of the fill's ~40 SASS instructions an angle pair, and the
    // fill runs two (1B: head_dim 64) or four (8B) times a tile (bench/NOTES.md 2026-12-03 evening).
    CUTE_UNROLL
    for (int i = 0; i < kColVecs; ++i) {
      CUTE_UNROLL
      for (int k = 0; k < kColsPerThread; ++k) {
        float v = tr.col[i][k];
        if constexpr (kRes.rotation != 0) {
          if (i == p.epi.rotation_freq) {
            const epi::RopeFreq d = epi::rope_freq(v);
            v = __uint_as_float(t & 1 ? d.sh : d.m);  // column t + 128 k has t's parity
          }
        }
        colbuf[i * kTileN + t + 128 * k] = v;
      }
    }

    // NOTES: the chunks run in a runtime loop, not fully unrolled: the epilogue of a rich program
    // outgrows the instruction cache and the warps wait on instruction fetch. A tile inside M x N
    // visits a group of kGroup chunks per iteration, chunk c of the group at the compile-time
    // accumulator offset 32 c (kGroup copies of the interior visit), then shifts the accumulator
    // down by 32 kGroup (register moves; a runtime index would put it in local memory): 64 moves a
    // tile, where one chunk per iteration executed 288 (bench/NOTES.md step ad: every epilogue
    // instruction slows the other warpgroup's HGMMA). A tile at the edge of M or N visits one chunk
    // per iteration with the checked visit only: a checked copy next to the grouped interior ones
    // spilled registers (step ac).
    // The accumulator's linear order is (x, b, j) inside an atom, then atoms along M: chunk ci is
    // linear [32 ci, 32 ci + 32), row block mi = ci / kCJ, column block cj = ci % kCJ.
    constexpr int kCJ = kVN / 8;  // chunks per wgmma atom
    constexpr int kAccN = decltype(size(AccLayout{}))::value;
    // Chunks per loop iteration: Resources::visit_chunks, else two where the chunk count is even and
    // the program keeps no LSE state, else one. NOTES: one for programs whose state spills with two
    // visit copies; the LSE programs' default is one because they keep 32 buffered values per
    // chunk (ChunkCtx::lse_v). Chosen per program on the H200 (bench/NOTES.md 2026-12-04, second):
    // two won for the QKV statistics and the LM head (1.117 -> 1.072x cuBLAS with logits); four
    // (no accumulator moves) lost or tied for the residual, RoPE, the RMSNorm backward and the LM head.
#ifdef CODA_VISIT_CHUNKS  // measurement only: every program of the unit on N chunks per iteration
    constexpr int kVisit = CODA_VISIT_CHUNKS;  // (scripts/ab-variants.sh UNIT 'c4=-DCODA_VISIT_CHUNKS=4')
#else
    constexpr int kVisit = kRes.visit_chunks;
#endif
    static_assert(kChunksPerTile % (kVisit > 0 ? kVisit : 1) == 0, "visit_chunks must divide the chunks of a tile");
    constexpr int kGroup =
        kVisit > 0 ? kVisit : (kChunksPerTile % 2 == 0 && kRes.row_lses == 0 ? 2 : 1);
    // The accumulator moves down 32 kGroup2 registers at a time. The LSE programs visit one chunk
    // per iteration by default but take the chunks in pairs: 32 + 64 + 32 moves a 128 x 128 tile
    // instead of 3 x 96 (H200: the LM head 2-3% faster). NOTES: only them: with the same loop RoPE
    // spilled 72 bytes and the RMSNorm backward 12, and the QKV statistics gained nothing. The
    // grouped visits go through unrolled<> with the chunk forced inline: a visit left out of line
    // takes the accumulator by reference, in local memory (a 1 KiB frame, wgmma serialized, block
    // forward + backward 4x slower: bench/NOTES.md 2026-12-03 night and 2026-12-05).
    constexpr int kGroup2 =
        kGroup > 1 ? kGroup : (kVisit == 0 && kChunksPerTile % 2 == 0 && kRes.row_lses > 0 ? 2 : 1);
    // The row operands of row block mi into a chunk's context (selects over the tile's row blocks,
    // not an index: the slots stay registers).
    auto select_rows = [&](auto& ctx, int mi) __attribute__((always_inline)) {
      CUTE_UNROLL
      for (int i = 0; i < kEpiSlots; ++i) {
        CUTE_UNROLL
        for (int b = 0; b < 2; ++b) {
          float v = tr.v[i][0][b];
          int iv = tr.i[i][0][b];
          CUTE_UNROLL
          for (int k = 1; k < kMmaM; ++k) {
            v = mi == k ? tr.v[i][k][b] : v;
            iv = mi == k ? tr.i[i][k][b] : iv;
          }
          ctx.rowv[i][b] = v;
          ctx.rowi[i][b] = iv;
        }
      }
    };
    // Thread 0 stores a staged chunk at (cm0, cn0), from buf (from the tile slots at tiles for an
    // output staged over a tile operand), as one bulk group; with debug_c true, none where p.debug
    // has 16 (CODA_DEBUG_EPILOGUE). Shared by the chunk visit and RoPE's pair visit (the SASS of
    // each one's own copy before, cuobjdump; debug_c is a compile-time tag because a runtime bool
    // changed every GEMM unit's SASS, bench/NOTES.md 2026-12-07 third). Unrolled over the slots:
    // every offset, box and trip count below is a compile-time constant, so thread 0 (whose stores
    // the next chunk's barrier waits for) issues them straight. NOTES: a runtime loop over
    // p.epi.num_outs computed out_offset and the box count (an unsigned division) per output at run
    // time: ~150 dependent instructions a chunk (SASS), and the publish phase took 2.1 K cycles a
    // chunk for SwiGLU's two outputs against 0.7 K for one (trace, H200; bench/NOTES.md 2026-12-03
    // midday).
    auto issue_stores = [&](auto debug_c, uint8_t* buf, uint8_t* tiles, int cm0, int cn0) __attribute__((always_inline)) {
      CUTE_UNROLL
      for (int o = 0; o < kEpiSlots; ++o) {
        if (out_direct(o) || o >= p.epi.num_outs) continue;
        const EpiOutput& out = p.epi.outs[o];
        if (!out.defined) continue;
        const int row_bytes = out_cols(o) * kEs;
        const int box = row_bytes < 128 ? row_bytes : 128;
        uint8_t* src = buf + out_offset(o, kEs);
        if (out_tile(o) >= 0) src = tiles + out_tile(o) * kTileSlotBytes;  // the tile slot's boxes
        CUTE_UNROLL
        for (int bx = 0; bx < row_bytes / box; ++bx) {
          const uint32_t sm = cute::cast_smem_ptr_to_uint(src + bx * kChunkRows * box);
          if (!(decltype(debug_c)::value && (p.debug & 16)))
            tma_store_2d(&out.tma, sm, cn0 / 2 * out_per(o) + bx * (box / kEs), cm0);
        }
      }
      tma_store_commit();
    };
    // One chunk: ci its index in the tile, kOff its accumulator offset, kChecked the edge visit.
    auto chunk = [&](auto off_c, auto checked_c, int ci) __attribute__((always_inline)) {
      constexpr int kOff = decltype(off_c)::value;
      constexpr bool kChecked = decltype(checked_c)::value;
      const int cj = ci % kCJ, mi = ci / kCJ;
      const auto base = tCcD(make_coord(make_coord(0, 0, 0), mi, 0));
      const int r0 = get<0>(base), c0 = get<1>(base);
      const int cm0 = gm0 + (r0 & ~(kChunkRows - 1));
      const int cn0 = gn0 + ((c0 + 64 * cj) & ~(kChunkCols - 1));
      if (cm0 < p.m && cn0 < p.n) {  // warpgroup-uniform
      trace.count(kTrChunks);
      uint8_t* buf = arena + (p.epi_buffers == 2 ? (chunk_count & 1) : 0) * chunk_bytes;
      // 1. the buffer is free once the store that last used it has finished reading it (outputs
      //    staged over a tile operand that is not loaded: its slot too, which only the tile loads
      //    wait for otherwise). Without staging, the barrier alone where warps share shared memory
      //    (kChunkStartBarrier).
      if (!(p.debug & 32)) {
        if (kStaged && t == 0) {
          if (p.epi_buffers == 2 && !(kInTileOuts && !ring_on)) tma_store_wait_read<1>();
          else tma_store_wait_read<0>();
        }
        if constexpr (kChunkStartBarrier) named_barrier_sync(1 + wg, 128);
      }
      trace.mark(kTrBufWait);
      // The next chunk in visiting order: the next 64 columns of this row block while they lie
      // inside N (column blocks are contiguous), else the next row block's first (none: M).
      auto issue_next_tile_loads = [&] {
        int nm0 = cm0, nn0 = cn0 + kChunkCols;
        if (nn0 >= gn0 + kTileN || nn0 >= p.n) {
          nm0 = p.m;
          if (mi + 1 < kMmaM) row_block_origin(mma_thread_idx, mi + 1, gm0, gn0, nm0, nn0);
        }
        issue_tile_loads(p, ring, full, chunk_count + 1, nm0, nn0);
      };
      // 1b. tile operands: two slots: prefetch the next chunk's (its slot was read by the
      //     previous chunk, finished by now); then wait for this chunk's (issued one chunk, or
      //     one mainloop, ago; one slot: at the previous chunk's publish, step 3).
      if constexpr (kTmaTiles > 0) {
        if (ring_on) {
          if (kRingSlots == 2 && t == 0) issue_next_tile_loads();
          cutlass::arch::ClusterTransactionBarrier::wait(&full[chunk_count % kRingSlots],
                                                         uint32_t((chunk_count / kRingSlots) & 1));
        }
      }
      trace.mark(kTrTileWait);
      // 2. the program, once per column pair
      ChunkCtx<OutDt, TileDt> ctx{p,
                                  {scalars[0], scalars[1], scalars[2], scalars[3]},
                                  buf,
                                  kTmaTiles > 0 ? ring + (chunk_count % kRingSlots) * kTmaTiles * kTileSlotBytes
                                                : nullptr,
                                  out_full,
                                  out_half,
                                  out_wide,
                                  tile_a,
                                  tile_w,
                                  acc,
                                  {},
                                  {},
                                  kColVecs > 0 ? colbuf + c0 + 64 * cj : nullptr,
                                  {},
                                  {},
                                  {},
                                  0};
      CUTE_UNROLL
      for (int o = 0; o < kEpiSlots; ++o) {  // the direct outputs' row pointers at the thread's first column
        if (out_direct(o)) {  // a constant after unrolling
          const EpiOutput& d = p.epi.outs[o];
          CUTE_UNROLL
          for (int b = 0; b < 2; ++b)
            ctx.dptr[kDirectSlots > 1 ? o : 0][b] = static_cast<uint8_t*>(d.ptr) +
                             (int64_t(gm0 + r0 + 8 * b) * d.ld + out_per(o) / 2 * (gn0 + c0 + 64 * cj)) * kEs;
        }
      }
      ctx.stsm_lane = stsm_lane;
      select_rows(ctx, mi);
      CUTE_UNROLL
      for (int r = 0; r < kRes.seg_sums; ++r) {
        CUTE_UNROLL
        for (int h = 0; h < 2; ++h) ctx.segc[r][h][0] = ctx.segc[r][h][1] = 0.0f;
      }
      CUTE_UNROLL
      for (int r = 0; r < kRes.row_lses; ++r) {  // pairs not fed (edge, or a conditional feed) add nothing
        CUTE_UNROLL
        for (int j = 0; j < 16; ++j) ctx.lse_v[r][j][0] = ctx.lse_v[r][j][1] = -INFINITY;
      }
      // The program's switches for this chunk, pinned in the interior visit (the edge visit tests
      // the launch's flags per pair).
      const uint32_t cflags = flags_of(p.program, cn0, cn0 + kChunkCols);
      if constexpr (kRes.rotation != 0) {  // the angles depend on the rows and the column phase only
        const int key = rot_shared ? 0 : cn0;  // TileAcc::rot_key
        const bool rotates = kChecked || !(cflags & epi::no_rotation_flag<Program>());
        if (rotates && !(acc.rot_m == cm0 && acc.rot_key == key) && !(p.debug & 2)) {
          ctx.fill_rotation();
          acc.rot_m = cm0;
          acc.rot_key = key;
        }
      }
      if (p.debug & 2) {
        // diagnostics: staging and stores without the program
      } else if constexpr (!kChecked) {
        with_flags(cflags, [&](auto mask) {
          visit_chunk<false, kOff>(p, pinned<decltype(mask)::value>(p.program), ctx, accum, gm0 + r0,
                                   gn0 + c0 + 64 * cj);
        });
      } else {
        visit_chunk<true, kOff>(p, p.program, ctx, accum, gm0 + r0, gn0 + c0 + 64 * cj);
      }
      if (!(p.debug & 2)) {
        // chunk-level reductions: the LSE fold (the segments are flushed after the publish step)
        if constexpr (kRes.row_lses > 0) fold_lse(ctx, acc);
        if constexpr (kColSums > 0) add_col_sums(ctx, colsums, c0 + 64 * cj, lane);
        if (ctx.rowo_set) {
          CUTE_UNROLL
          for (int o = 0; o < kEpiSlots; ++o) {
            CUTE_UNROLL
            for (int b = 0; b < 2; ++b)
              if ((ctx.rowo_set >> (2 * o + b)) & 1) p.epi.row_outs[o][gm0 + r0 + 8 * b] = ctx.rowo[o][b];
          }
        }
      }
      trace.mark(kTrProgram);
      // 3. publish the chunk: generic-proxy writes -> TMA (async proxy) reads. Without staging,
      //    nothing to publish: only a one-slot ring's refill waits for every warp's visit.
      if constexpr (kStaged) fence_async_shared();
      if constexpr (kChunkEndBarrier) named_barrier_sync(1 + wg, 128);
      if (kStaged && t == 0) issue_stores(cute::true_type{}, buf, ctx.tiles, cm0, cn0);
      // One tile-ring slot: every thread's visit has read it (the barrier above), so the next
      // chunk's loads go out now, beside this chunk's stores: after them, since an output staged
      // over a tile operand is stored from the slot (issue_tile_loads waits for those stores to
      // have read it; issued before them, the loads overwrote the outputs: cooperative variant,
      // GpuOps tests, H200).
      // They go out from warp 1 when no output is staged over the slot, beside thread 0's stores
      // rather than after them (H200, 1B SwiGLU backward ~1.5% faster: bench/NOTES.md, 2026-12-02
      // morning); an output staged over the slot keeps them on thread 0, after its stores.
      if constexpr (kTmaTiles > 0 && kRingSlots == 1) {
        if (ring_on && t == (kInTileOuts ? 0 : 32)) issue_next_tile_loads();
      }
      ++chunk_count;
      trace.mark(kTrPublish);
      if constexpr (kRes.seg_sums > 0) flush_chunk_segs(p, ctx, acc, gm0 + r0, cn0);
      }
      if constexpr (kRes.row_sums + kRes.row_lses > 0) {  // a granule of the row block done
        constexpr int kChunksPerGranule = kGranuleCols / kChunkCols;
        if (cj % kChunksPerGranule == kChunksPerGranule - 1)
          flush_rows(p, acc, tile_m, mma_thread_idx, mi, (gn0 + kChunkCols * cj) / kGranuleCols);
      }
      trace.mark(kTrFlush);
    };
    // RoPE's pair visit: a group of two chunks of one row block (the frequencies' period dividing a
    // chunk: the tile's two heads share their angles) visited pair slot by pair slot, sin and cos
    // once per slot for both (issue 8 item 1; 2.8% off RoPE 1B on an H100, bench/NOTES.md
    // 2026-12-07). Both staging buffers must be free first (every earlier store has read
    // shared memory), one barrier each side, one bulk group per chunk's store (so a later chunk's
    // wait_read<1> keeps its meaning). Returns false where it does not apply (then the chunks run
    // one after the other). Pingpong only: the cooperative unit spilled 12 bytes with it. Per-row
    // outputs (ctx.row_store) are not written here (writing them changed the RoPE unit's schedule):
    // no rotating program stores any, and one that did would fail the GPU tests' written checks.
    constexpr bool kPairVisit = kPingpongV && kRes.rotation != 0 && kGroup == 2 && kGroup2 == 2 && kTmaTiles == 0 &&
                                kRes.row_sums == 0 && kRes.row_lses == 0 && kRes.seg_sums == 0 && kColSums == 0 &&
                                kRes.direct_outs == 0 && !kInTileOuts && kStaged;
    auto pair_chunk = [&](int g) __attribute__((always_inline)) -> bool {
      if constexpr (!kPairVisit) {
        return false;
      } else {
        const int ci0 = 2 * g, cj0 = ci0 % kCJ, mi = ci0 / kCJ;
        const auto base = tCcD(make_coord(make_coord(0, 0, 0), mi, 0));
        const int r0 = get<0>(base), c0 = get<1>(base);
        const int cm0 = gm0 + (r0 & ~(kChunkRows - 1));
        const int cn0 = gn0 + ((c0 + 64 * cj0) & ~(kChunkCols - 1));
        const uint32_t cflags = flags_of(p.program, cn0, cn0 + kChunkCols);
        if (!rot_shared || p.epi_buffers != 2 || p.debug != 0 ||
            cflags != flags_of(p.program, cn0 + kChunkCols, cn0 + 2 * kChunkCols))
          return false;
        if (t == 0) tma_store_wait_read<0>();
        named_barrier_sync(1 + wg, 128);
        uint8_t* buf0 = arena + (chunk_count & 1) * chunk_bytes;
        uint8_t* buf1 = arena + ((chunk_count + 1) & 1) * chunk_bytes;
        using Ctx = ChunkCtx<OutDt, TileDt>;
        Ctx ctx0{p, {scalars[0], scalars[1], scalars[2], scalars[3]}, buf0, nullptr, out_full, out_half, out_wide,
                 tile_a, tile_w, acc, {}, {}, colbuf + c0 + 64 * cj0, {}, {}, {}, 0};
        Ctx ctx1{p, {scalars[0], scalars[1], scalars[2], scalars[3]}, buf1, nullptr, out_full, out_half, out_wide,
                 tile_a, tile_w, acc, {}, {}, colbuf + c0 + 64 * (cj0 + 1), {}, {}, {}, 0};
        ctx0.stsm_lane = stsm_lane;
        ctx1.stsm_lane = stsm_lane;
        ctx0.rot_from = nullptr;
        ctx1.rot_from = &ctx0;
        select_rows(ctx0, mi);
        select_rows(ctx1, mi);
        if (!(acc.rot_m == cm0 && acc.rot_key == 0)) {  // rot_shared: the key is 0
          ctx0.fill_rotation();
          acc.rot_m = cm0;
          acc.rot_key = 0;
        }
        with_flags(cflags, [&](auto mask) {
          visit_chunk_pair<0, 32>(pinned<decltype(mask)::value>(p.program), ctx0, ctx1, accum, gm0 + r0,
                                  gn0 + c0 + 64 * cj0);
        });
        fence_async_shared();
        named_barrier_sync(1 + wg, 128);
        if (t == 0) {
          CUTE_UNROLL
          for (int h = 0; h < 2; ++h)  // p.debug is 0 here
            issue_stores(cute::false_type{}, h ? buf1 : buf0, nullptr, cm0, cn0 + 64 * h);
        }
        chunk_count += 2;
        return true;
      }
    };
#ifdef CODA_SASS_INTERIOR_ONLY  // scripts/sass_epilogue.py: the interior visits only, for unambiguous counts
    const bool tile_inside = true;
#else
    const bool tile_inside = gm0 + kTileM <= p.m && gn0 + kTileN <= p.n;
#endif
    if (tile_inside) {
#pragma unroll 1
      for (int g = 0; g < kChunksPerTile / kGroup2; ++g) {
        if constexpr (kGroup2 == kGroup) {
          if (!pair_chunk(g))
            unrolled<kGroup>([&](auto c) __attribute__((always_inline)) {
              chunk(cute::Int<32 * decltype(c)::value>{}, cute::false_type{}, g * kGroup + c);
            });
        } else {  // one visit copy for a pair of chunks, the second moved down between them
#pragma unroll 1
          for (int h = 0; h < 2; ++h) {
            chunk(cute::Int<0>{}, cute::false_type{}, 2 * g + h);
            if (h == 1) break;
            CUTE_UNROLL
            for (int i = 0; i < 32; ++i) accum(i) = accum(i + 32);
          }
        }
        if (g + 1 == kChunksPerTile / kGroup2) break;
        CUTE_UNROLL
        for (int i = 0; i + 32 * kGroup2 < kAccN; ++i) accum(i) = accum(i + 32 * kGroup2);
      }
    } else {
#pragma unroll 1
      for (int ci = 0; ci < kChunksPerTile; ++ci) {
        chunk(cute::Int<0>{}, cute::true_type{}, ci);
        if (ci + 1 == kChunksPerTile) break;
        CUTE_UNROLL
        for (int i = 0; i + 32 < kAccN; ++i) accum(i) = accum(i + 32);
      }
    }
    if constexpr (kColSums > 0) flush_col_sums(p, colsums, tile_m, gn0, mma_thread_idx);
  }

  template <int TileDt, class Accum>
  CUTE_DEVICE static void dispatch_epilogue(const Params& p, Accum& accum, const float (&scalars)[kEpiSlots],
                                            const TileRows& tr, TileAcc& acc, uint8_t* arena, uint8_t* ring,
                                            uint64_t* full, float* colbuf, float* colsums, int tm, int tn,
                                            int mma_thread_idx, int wg, int& chunk_count, Trace& trace) {
    switch (p.out_dtype) {
      case kDtBF16:
        epilogue<kDtBF16, TileDt>(p, accum, scalars, tr, acc, arena, ring, full, colbuf, colsums, tm, tn,
                                  mma_thread_idx, wg, chunk_count, trace);
        break;
      case kDtFP16:
        epilogue<kDtFP16, TileDt>(p, accum, scalars, tr, acc, arena, ring, full, colbuf, colsums, tm, tn,
                                  mma_thread_idx, wg, chunk_count, trace);
        break;
      default:
        epilogue<kDtFP32, TileDt>(p, accum, scalars, tr, acc, arena, ring, full, colbuf, colsums, tm, tn,
                                  mma_thread_idx, wg, chunk_count, trace);
        break;
    }
  }

  CUTE_DEVICE static void run(const Params& p, char* smem_raw, uint8_t (&epi_arena)[2][kArenaDecl]) {
    // NOTES: align by pointer arithmetic on the shared array (not through an integer), so that
    // the compiler keeps the shared address space and emits LDS/STS for the epilogue's accesses.
    const auto misalign = uint32_t(reinterpret_cast<uintptr_t>(smem_raw) & 1023u);
    auto& shared = *reinterpret_cast<SharedStorage*>(smem_raw + ((1024u - misalign) & 1023u));

    const int thread_idx = int(threadIdx.x);
    const int warp_group = thread_idx / 128;
    const int warp_in_group = (thread_idx / 32) % 4;
    const int lane = thread_idx % 32;
    const uint32_t block_rank_in_cluster = cute::block_rank_in_cluster();

    if (thread_idx == 0) Mainloop::prefetch_tma_descriptors(p.mainloop);
    if constexpr (kTmaTiles > 0) {
      if (thread_idx == 0) {
        for (int w = 0; w < 2; ++w)
          for (int b = 0; b < 2; ++b) cutlass::arch::ClusterTransactionBarrier::init(&shared.ring_bar.full[w][b], 1);
        cutlass::arch::fence_barrier_init();
      }
    }

    typename MainloopPipeline::Params pp;
    if (warp_group == 0 && warp_in_group == 0) pp.role = MainloopPipeline::ThreadCategory::Producer;
    if (warp_group > 0) pp.role = MainloopPipeline::ThreadCategory::Consumer;
    pp.is_leader = (thread_idx % 128) == 0;
    pp.num_consumers = kMmaThreads;
    pp.transaction_bytes = p.mainloop.tma_transaction_bytes;
    // The barriers here, before the cluster sync; each role builds its own view after setmaxnreg, so
    // the consumers' arrival masks are computed there and not kept live from here through the tile
    // loop (ptxas spilled them beside the epilogue's visit: bench/NOTES.md 2026-12-04 third, 2026-12-06).
    MainloopPipeline barrier_init(shared.mainloop.pipeline, pp, ClusterShape{}, cute::true_type{}, cute::false_type{});
    (void)barrier_init;
    typename OrderBarrier::Params op;
    op.group_id = warp_group >= 1 ? uint32_t(warp_group - 1) : 0u;
    op.group_size = 128;
    OrderBarrier order(shared.order, op);

    if constexpr (kColSums > 0) {  // the column sums start at zero (the cluster arrive below is relaxed)
      float* z = &shared.col_sums.v[0][0][0];
      for (int i = thread_idx; i < 2 * kColSums * kTileN; i += kThreads) z[i] = 0.0f;
      __syncthreads();
    }
    if constexpr (size(ClusterShape{}) > 1) {
      cute::cluster_arrive_relaxed();
      cute::cluster_wait();
    } else {
      __syncthreads();
    }

    // Cluster-tile loop bounds: clusters are laid out along blockIdx.x.
    const int cluster_id = int(blockIdx.x) / kClusterM;
    const int num_clusters = int(gridDim.x) / kClusterM;
    const int rank_m = int(blockIdx.x) % kClusterM;
    const int rank_n = int(blockIdx.y);
    auto tile_of = [&](int t, int& tm, int& tn) {
      int cm, cn;
      cluster_tile_coord(p.sched, t, cm, cn);
      tm = cm * kClusterM + rank_m;
      tn = cn * kClusterN + rank_n;
    };

    Mainloop collective;
    auto problem = make_shape(p.m, p.n, max(p.k, 1), 1);

    if (warp_group == 0) {
      cutlass::arch::warpgroup_reg_dealloc<40>();
      if (warp_in_group == 0) {
        MainloopPipeline pipeline(shared.mainloop.pipeline, pp, ClusterShape{}, cute::false_type{}, cute::true_type{});
        auto load_inputs = collective.load_init(problem, p.mainloop);
        PipelineState state = cutlass::make_producer_start_state<MainloopPipeline>();
        for (int t = cluster_id; t < p.sched.total(); t += num_clusters) {
          int tm, tn;
          tile_of(t, tm, tn);
          if (p.k_tiles > 0) {
            auto k_iter = cute::make_coord_iterator(shape<3>(get<0>(load_inputs)));
            collective.load(p.mainloop, pipeline, state, load_inputs, make_coord(tm, tn, _, 0), k_iter, p.k_tiles,
                            lane, block_rank_in_cluster, shared.mainloop.tensors);
            state.advance(p.k_tiles);
          }
        }
        collective.load_tail(pipeline, state);
      }
    } else {
      cutlass::arch::warpgroup_reg_alloc<232>();
      MainloopPipeline pipeline(shared.mainloop.pipeline, pp, ClusterShape{}, cute::false_type{}, cute::true_type{});
      const int wg = warp_group - 1;
      // Cooperative: both warpgroups run every tile (rows split). Pingpong: warpgroup w runs the
      // CTA's tiles w, w + 2, ...; the smem ring is filled in tile order, so the two alternate
      // and one's epilogue overlaps the other's mainloop.
      const int mma_thread_idx = kPingpong ? thread_idx % 128 : thread_idx - 128;
      const int first = kPingpong ? cluster_id + wg * num_clusters : cluster_id;
      const int step = kPingpong ? 2 * num_clusters : num_clusters;
      float scalars[kEpiSlots];
      CUTE_UNROLL
      for (int i = 0; i < kEpiSlots; ++i)
        scalars[i] = p.epi.scalars[i].ptr ? *p.epi.scalars[i].ptr : p.epi.scalars[i].value;
      uint8_t* arena = epi_arena[wg];
      uint8_t* ring = nullptr;
      uint64_t* full = nullptr;
      if constexpr (kTmaTiles > 0) {
        ring = &shared.ring.data[wg][0][0][0];
        full = &shared.ring_bar.full[wg][0];
      }
      const bool ring_on = uses_tile_ring(p.epi) && !(p.debug & 8);
      float* colbuf = nullptr;
      if constexpr (kColVecs > 0) colbuf = &shared.cols.v[wg][0][0];
      float* colsums = nullptr;  // pingpong: the warpgroup's own; cooperative: one for the tile
      if constexpr (kColSums > 0) colsums = &shared.col_sums.v[kPingpong ? wg : 0][0][0];
      TileRows tr;
      TileAcc acc;
      PipelineState state;
      if (kPingpong && wg == 1) state.advance(p.k_tiles);
      TiledMma tiled_mma;
      int chunk_count = 0;
      Trace trace{};
#ifdef CODA_EPI_TRACE
      __shared__ uint32_t trace_counts[2][kTrCount];
      trace.c = trace_counts[wg];
      trace.on = (p.debug & 4) && thread_idx % 128 == 0;
      if (trace.on) {
        for (int k = 0; k < kTrCount; ++k) trace.c[k] = 0;
        trace.last = static_cast<uint32_t>(clock());
      }
#endif
      for (int t = first; t < p.sched.total(); t += step) {
        int tm, tn;
        tile_of(t, tm, tn);
        auto accum = partition_fragment_C(tiled_mma, take<0, 2>(TileShape{}));
        const bool run_epilogue = tm < p.tiles_m && tn < p.tiles_n && !(p.debug & 1);
        // Tile operands of the tile's first chunk: loaded during the mainloop.
        if (kTmaTiles > 0 && ring_on && run_epilogue && thread_idx % 128 == 0) {
          int cm0, cn0;
          row_block_origin(mma_thread_idx, 0, tm * kTileM, tn * kTileN, cm0, cn0);
          issue_tile_loads(p, ring, full, chunk_count, cm0, cn0);
        }
        if (run_epilogue) load_tile_operands(p, tr, tm, tn, mma_thread_idx);
        // NOTES: mma and mma_tail stay in one branch: in-flight wgmma accumulators must not cross a
        // control-flow merge (ptxas would copy them and spill).
        order.wait();
        trace.mark(kTrOrderMma);
        trace.count(kTrTiles);
        if (p.k_tiles > 0) {
          collective.mma(pipeline, state, accum, p.k_tiles, mma_thread_idx, shared.mainloop.tensors, p.mainloop);
          order.arrive();
          collective.mma_tail(pipeline, state, p.k_tiles);
          state.advance(kPingpong ? 2 * p.k_tiles : p.k_tiles);
        } else {
          order.arrive();
          clear(accum);
        }
        trace.mark(kTrMma);
        if (run_epilogue) convert_tile_operands(p, tr);
        trace.mark(kTrConvert);
        if (run_epilogue) {
          // uniform: one compact path per (output dtype, staged tile dtype)
          bool fp16_tiles = false;
          if constexpr (kTmaTiles > 0) fp16_tiles = p.tile_dtype == kDtFP16;
          if (fp16_tiles) {
            if constexpr (kTmaTiles > 0)
              dispatch_epilogue<kDtFP16>(p, accum, scalars, tr, acc, arena, ring, full, colbuf, colsums, tm, tn,
                                         mma_thread_idx, wg, chunk_count, trace);
          } else {
            dispatch_epilogue<kDtBF16>(p, accum, scalars, tr, acc, arena, ring, full, colbuf, colsums, tm, tn,
                                       mma_thread_idx, wg, chunk_count, trace);
          }
        }
      }
      if (thread_idx % 128 == 0) tma_store_wait_read<0>();
      if (kTrace && trace.on) {
        CUTE_UNROLL
        for (int k = 0; k < kTrCount; ++k) atomicAdd(p.trace + k, static_cast<unsigned long long>(trace.c[k]));
      }
    }
  }
};

template <class Kernel>
__global__ void __launch_bounds__(384, 1) sm90_gemm_kernel(CUTE_GRID_CONSTANT const typename Kernel::Params p) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  extern __shared__ char smem[];
  // The epilogue's staging arena: static, so it is a separate object from the dynamic shared memory
  // (mainloop ring, tile ring, column vectors) for the compiler's alias analysis (ChunkCtx::buf).
  __shared__ alignas(1024) uint8_t epi_arena[2][Kernel::kArenaDecl];
  Kernel::run(p, smem, epi_arena);
#endif
}

}  // namespace coda::sm90
