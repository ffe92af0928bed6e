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

#include <cute/tensor.hpp>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/cutlass.h>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/numeric_types.h>
#include <cutlass/pipeline/sm90_pipeline.hpp>

#include "coda/epilogue/frag.hpp"
#include "coda/kernel/epilogue_params.hpp"
#include "coda/numeric.hpp"

namespace coda::sm90 {

using namespace cute;

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

// ---- element access by runtime dtype --------------------------------------------------------------

CUTE_DEVICE float load_as_float(const void* p, int64_t i, int dtype) {
  switch (dtype) {
    case kDtBF16: return bf16_bits_to_float(__ldg(static_cast<const unsigned short*>(p) + i));
    case kDtFP16: return fp16_bits_to_float(__ldg(static_cast<const unsigned short*>(p) + i));
    case kDtFP32: return __ldg(static_cast<const float*>(p) + i);
    default: return static_cast<float>(__ldg(static_cast<const int*>(p) + i));
  }
}

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
  static constexpr int kEpiArenaBytes = 16384;  // per consumer warpgroup
  static constexpr int kChunkCols = 64;         // accumulator columns per epilogue chunk
  static constexpr int kChunkRows = 64;

  using LayoutA = cute::conditional_t<AKMajor, cutlass::layout::RowMajor, cutlass::layout::ColumnMajor>;
  using LayoutB = cute::conditional_t<BKMajor, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, LayoutA, 8, Element, LayoutB, 8, float, TileShape,
      ClusterShape, cutlass::gemm::collective::StageCount<Stages>,
      cute::conditional_t<kPingpong, cutlass::gemm::KernelTmaWarpSpecializedPingpong,
                          cutlass::gemm::KernelTmaWarpSpecializedCooperative>>::CollectiveOp;
  // Consumer threads per tile: cooperative = both warpgroups share a tile; pingpong = each owns one.
  static constexpr int kMmaThreads = kPingpong ? 128 : 256;
  using TiledMma = typename Mainloop::TiledMma;
  using MainloopPipeline = typename Mainloop::MainloopPipeline;
  using PipelineState = typename Mainloop::PipelineState;

  // Pingpong: the math and epilogue phases of the two consumer warpgroups take turns
  // (mma 0 | mma 1 + epilogue 0 | mma 2 + epilogue 1 ...).
  // NOTES: this also keeps a warpgroup from waiting on a ring stage more than one lap ahead of the
  // other: an mbarrier wait only sees the phase parity, so a wait one tile (> Stages k-tiles)
  // early would be satisfied by an older fill of the same stage.
  struct NoOrder {  // cooperative: both warpgroups run every tile together
    struct SharedStorage {};
    using Params = typename cutlass::OrderedSequenceBarrier<2, 2>::Params;
    CUTE_DEVICE NoOrder(SharedStorage&, const Params&) {}
    CUTE_DEVICE void wait() {}
    CUTE_DEVICE void arrive() {}
  };
  using OrderBarrier = cute::conditional_t<kPingpong, cutlass::OrderedSequenceBarrier<2, 2>, NoOrder>;

  struct SharedStorage {
    alignas(1024) uint8_t epi[2][kEpiArenaBytes];
    typename Mainloop::SharedStorage mainloop;
    typename OrderBarrier::SharedStorage order;
  };
  static constexpr int kSmemBytes = int(sizeof(SharedStorage)) + 1024;  // + slack to align the base

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
    int debug;        // diagnostics (CODA_DEBUG_EPILOGUE): 1 = skip the epilogue, 2 = skip the program only
  };

  // The context a program sees inside one epilogue chunk (see epilogue/program.hpp). OutDt is the
  // storage dtype of every tile output of the launch (fixed per tile, so the executed path has no
  // dtype branches).
  template <int OutDt>
  struct ChunkCtx {
    static constexpr int kEs = OutDt == kDtFP32 ? 4 : 2;
    const Params& p;
    float scalars[kEpiSlots];  // resolved at kernel start (by value: stays in registers)
    uint8_t* buf;              // this chunk's staging buffer
    int m0, n0;                // global origin of the chunk (M, N < 2^31)

    CUTE_DEVICE float scalar(int i) const { return scalars[i]; }
    CUTE_DEVICE float row(int i, const epi::Frag& f) const {
      return load_as_float(p.epi.rows[i].ptr, f.m, p.epi.rows[i].dtype);
    }
    CUTE_DEVICE int64_t row_int(int i, const epi::Frag& f) const {
      return __ldg(static_cast<const int*>(p.epi.row_ints[i].ptr) + f.m);
    }
    CUTE_DEVICE float col(int i, const epi::Frag&, int64_t n) const {
      return load_as_float(p.epi.cols[i].ptr, n, p.epi.cols[i].dtype);
    }
    CUTE_DEVICE float tile(int i, const epi::Frag& f, int64_t n) const {
      const EpiTile& t = p.epi.tiles[i];
      return load_as_float(t.ptr, f.m * t.ld + n, t.dtype);
    }
    // Address of element (r, c) of output o's chunk: boxes of 64 rows x 128 bytes, 128-byte
    // swizzle (16-byte unit index XOR row % 8). Outputs are packed in slot order.
    CUTE_DEVICE uint8_t* at(int o, int r, int c) const {
      const int byte = c * kEs;
      return buf + o * (kChunkRows * kChunkCols * kEs) + (byte >> 7) * (kChunkRows * 128) + r * 128 +
             ((((byte >> 4) & 7) ^ (r & 7)) << 4) + (byte & 15);
    }
    // Output columns are those of the accumulator (same width): column n is f.lc + (n - f.n).
    CUTE_DEVICE float store(int o, const epi::Frag& f, int64_t n, float v) const {
      uint8_t* a = at(o, f.lr, f.lc + int(n - f.n));
      if constexpr (OutDt == kDtBF16) {
        const __nv_bfloat16 h = __float2bfloat16_rn(v);
        *reinterpret_cast<__nv_bfloat16*>(a) = h;
        return __bfloat162float(h);
      } else if constexpr (OutDt == kDtFP16) {
        const __half h = __float2half_rn(v);
        *reinterpret_cast<__half*>(a) = h;
        return __half2float(h);
      } else {
        *reinterpret_cast<float*>(a) = v;
        return v;
      }
    }
    // Columns (n, n + 1), n even: one packed conversion and one 4- or 8-byte store.
    CUTE_DEVICE epi::Stored2 store2(int o, const epi::Frag& f, int64_t n, float v0, float v1) const {
      uint8_t* a = at(o, f.lr, f.lc + int(n - f.n));
      if constexpr (OutDt == kDtBF16) {
        const __nv_bfloat162 h = __floats2bfloat162_rn(v0, v1);
        *reinterpret_cast<__nv_bfloat162*>(a) = h;
        return {__low2float(h), __high2float(h)};
      } else if constexpr (OutDt == kDtFP16) {
        const __half2 h = __floats2half2_rn(v0, v1);
        *reinterpret_cast<__half2*>(a) = h;
        return {__low2float(h), __high2float(h)};
      } else {
        *reinterpret_cast<float2*>(a) = make_float2(v0, v1);
        return {v0, v1};
      }
    }
    CUTE_DEVICE void row_store(int o, const epi::Frag& f, float v) const;
    CUTE_DEVICE void row_sum(int r, const epi::Frag& f, float v);
    CUTE_DEVICE void row_lse(int r, const epi::Frag& f, float v);
    CUTE_DEVICE void seg_sum(int s, const epi::Frag& f, int64_t n, float v);
    CUTE_DEVICE void col_sum(int c, const epi::Frag& f, int64_t n, float v);
  };

  // Bytes of one chunk over all output slots: 64 x 64 elements of the launch's output dtype each.
  CUTE_HOST_DEVICE static int chunk_bytes_all(const EpiParams& e) {
    int es = 2;
    for (int o = 0; o < e.num_outs; ++o)
      if (e.outs[o].defined && e.outs[o].dtype == kDtFP32) es = 4;
    return e.num_outs * kChunkRows * kChunkCols * es;
  }
  CUTE_HOST_DEVICE static int buffers_for(const EpiParams& e) {
    const int b = chunk_bytes_all(e);
    return b == 0 ? 2 : (2 * b <= kEpiArenaBytes ? 2 : (b <= kEpiArenaBytes ? 1 : 0));
  }

  // Visit one chunk: the program on every column pair (kChecked: skip pairs outside M x N).
  // (r0, c0) is the thread's first accumulator coordinate in wgmma block (mi, ni); value (a, b, j)
  // of the block sits at (r0 + 8 b, c0 + 8 j + a) (NOTES at the top of this file). Inside the
  // 64 x 64 chunk that is row 16 warp + lane / 4 + 8 b and column 2 (lane % 4) + 8 jj, which the
  // context uses for its shared-memory addresses (cheap, known bit ranges).
  template <bool kChecked, int OutDt, class Accum>
  CUTE_DEVICE static void visit_chunk(const Params& p, const ChunkCtx<OutDt>& ctx, const Accum& accum, int gm0,
                                      int gn0, int r0, int c0, int mi, int ni, int cj) {
    const int lane = int(threadIdx.x) & 31, warp = (int(threadIdx.x) >> 5) & 3;
    const int lr = 16 * warp + (lane >> 2), lc = 2 * (lane & 3);
    CUTE_UNROLL
    for (int jj = 0; jj < 8; ++jj) {
      CUTE_UNROLL
      for (int b = 0; b < 2; ++b) {
        const int m = gm0 + r0 + 8 * b, n = gn0 + c0 + 8 * (cj * 8 + jj);
        epi::Frag f;
        f.m = m;
        f.n = n;
        f.lr = lr + 8 * b;
        f.lc = lc + 8 * jj;
        f.ok[0] = true;
        f.ok[1] = true;
        if constexpr (kChecked) {
          if (m >= p.m || n >= p.n) continue;
          f.ok[1] = n + 1 < p.n;
        }
        f.v[0] = accum(make_coord(make_coord(0, b, cj * 8 + jj), mi, ni));
        f.v[1] = f.ok[1] ? accum(make_coord(make_coord(1, b, cj * 8 + jj), mi, ni)) : 0.0f;
        p.program(f, ctx);
      }
    }
  }

  template <int OutDt, class Accum>
  CUTE_DEVICE static void epilogue(const Params& p, const Accum& accum, const float (&scalars)[kEpiSlots],
                                   uint8_t* arena, int tile_m, int tile_n, int mma_thread_idx, int wg,
                                   int& chunk_count) {
    const int t = mma_thread_idx % 128;
    Tensor cD = make_identity_tensor(make_shape(Int<kTileM>{}, Int<kTileN>{}));
    TiledMma tiled_mma;
    Tensor tCcD = tiled_mma.get_thread_slice(mma_thread_idx).partition_C(cD);
    using AccLayout = typename Accum::layout_type;
    constexpr int kVN = decltype(size<0>(AccLayout{}))::value / 4;  // 8-column blocks per wgmma atom
    constexpr int kMmaM = decltype(size<1>(AccLayout{}))::value;
    constexpr int kMmaN = decltype(size<2>(AccLayout{}))::value;
    static_assert(kVN % (kChunkCols / 8) == 0, "the wgmma atom must hold whole epilogue chunks");
    const int gm0 = tile_m * kTileM, gn0 = tile_n * kTileN;
    const int chunk_bytes = chunk_bytes_all(p.epi);

    CUTE_UNROLL
    for (int mi = 0; mi < kMmaM; ++mi) {
      CUTE_UNROLL
      for (int ni = 0; ni < kMmaN; ++ni) {
        CUTE_UNROLL
        for (int cj = 0; cj < kVN / 8; ++cj) {
          const auto base = tCcD(make_coord(make_coord(0, 0, 0), mi, ni));
          const int r0 = get<0>(base), c0 = get<1>(base);
          const int cm0 = gm0 + (r0 & ~(kChunkRows - 1));
          const int cn0 = gn0 + ((c0 + 64 * cj) & ~(kChunkCols - 1));
          if (cm0 >= p.m || cn0 >= p.n) continue;  // warpgroup-uniform
          uint8_t* buf = arena + (p.epi_buffers == 2 ? (chunk_count & 1) : 0) * chunk_bytes;
          // 1. the buffer is free once the store that last used it has finished reading it
          if (t == 0) {
            if (p.epi_buffers == 2) tma_store_wait_read<1>();
            else tma_store_wait_read<0>();
          }
          named_barrier_sync(1 + wg, 128);
          // 2. the program, once per column pair
          const ChunkCtx<OutDt> ctx{p, {scalars[0], scalars[1], scalars[2], scalars[3]}, buf, cm0, cn0};
          if (p.debug & 2) {
            // diagnostics: staging and stores without the program
          } else if (cm0 + kChunkRows <= p.m && cn0 + kChunkCols <= p.n) {
            visit_chunk<false>(p, ctx, accum, gm0, gn0, r0, c0, mi, ni, cj);
          } else {
            visit_chunk<true>(p, ctx, accum, gm0, gn0, r0, c0, mi, ni, cj);
          }
          // 3. publish the chunk: generic-proxy writes -> TMA (async proxy) reads
          fence_async_shared();
          named_barrier_sync(1 + wg, 128);
          if (t == 0) {
            constexpr int es = ChunkCtx<OutDt>::kEs;
            for (int o = 0; o < p.epi.num_outs; ++o) {
              const EpiOutput& out = p.epi.outs[o];
              if (!out.defined) continue;
              CUTE_UNROLL
              for (int bx = 0; bx < kChunkCols * es / 128; ++bx) {
                const uint32_t s =
                    cute::cast_smem_ptr_to_uint(buf + o * (kChunkRows * kChunkCols * es) + bx * kChunkRows * 128);
                tma_store_2d(&out.tma, s, cn0 + bx * (128 / es), cm0);
              }
            }
            tma_store_commit();
          }
          ++chunk_count;
        }
      }
    }
  }

  CUTE_DEVICE static void run(const Params& p, char* smem_raw) {
    auto base = reinterpret_cast<uintptr_t>(smem_raw);
    auto& shared = *reinterpret_cast<SharedStorage*>((base + 1023) & ~uintptr_t(1023));

    const int thread_idx = int(threadIdx.x);
    const int warp_group = thread_idx / 128;
    const int warp_in_group = (thread_idx / 32) % 4;
    const int lane = thread_idx % 32;
    const uint32_t block_rank_in_cluster = cute::block_rank_in_cluster();

    if (thread_idx == 0) Mainloop::prefetch_tma_descriptors(p.mainloop);

    typename MainloopPipeline::Params pp;
    if (warp_group == 0 && warp_in_group == 0) pp.role = MainloopPipeline::ThreadCategory::Producer;
    if (warp_group > 0) pp.role = MainloopPipeline::ThreadCategory::Consumer;
    pp.is_leader = (thread_idx % 128) == 0;
    pp.num_consumers = kMmaThreads;
    pp.transaction_bytes = p.mainloop.tma_transaction_bytes;
    MainloopPipeline pipeline(shared.mainloop.pipeline, pp, ClusterShape{});
    typename OrderBarrier::Params op;
    op.group_id = warp_group >= 1 ? uint32_t(warp_group - 1) : 0u;
    op.group_size = 128;
    OrderBarrier order(shared.order, op);

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
      uint8_t* arena = shared.epi[wg];
      PipelineState state;
      if (kPingpong && wg == 1) state.advance(p.k_tiles);
      TiledMma tiled_mma;
      int chunk_count = 0;
      for (int t = first; t < p.sched.total(); t += step) {
        int tm, tn;
        tile_of(t, tm, tn);
        auto accum = partition_fragment_C(tiled_mma, take<0, 2>(TileShape{}));
        // NOTES: mma and mma_tail stay in one branch: in-flight wgmma accumulators must not cross a
        // control-flow merge (ptxas would copy them and spill).
        order.wait();
        if (p.k_tiles > 0) {
          collective.mma(pipeline, state, accum, p.k_tiles, mma_thread_idx, shared.mainloop.tensors, p.mainloop);
          order.arrive();
          collective.mma_tail(pipeline, state, p.k_tiles);
          state.advance(kPingpong ? 2 * p.k_tiles : p.k_tiles);
        } else {
          order.arrive();
          clear(accum);
        }
        order.wait();
        if (tm < p.tiles_m && tn < p.tiles_n && !(p.debug & 1)) {
          switch (p.out_dtype) {  // uniform: one compact path per tile
            case kDtBF16: epilogue<kDtBF16>(p, accum, scalars, arena, tm, tn, mma_thread_idx, wg, chunk_count); break;
            case kDtFP16: epilogue<kDtFP16>(p, accum, scalars, arena, tm, tn, mma_thread_idx, wg, chunk_count); break;
            default: epilogue<kDtFP32>(p, accum, scalars, arena, tm, tn, mma_thread_idx, wg, chunk_count); break;
          }
        }
        order.arrive();
      }
      if (thread_idx % 128 == 0) tma_store_wait_read<0>();
    }
  }
};

template <class Kernel>
__global__ void __launch_bounds__(384, 1) sm90_gemm_kernel(CUTE_GRID_CONSTANT const typename Kernel::Params p) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  extern __shared__ char smem[];
  Kernel::run(p, smem);
#endif
}

}  // namespace coda::sm90
