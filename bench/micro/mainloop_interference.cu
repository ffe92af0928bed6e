// The mainloop next to an epilogue's memory traffic: do an epilogue's loads and stores slow a
// TMA-fed wgmma mainloop on the same SM?
//
// One CTA per SM, three warpgroups. Warpgroup 0's first thread is the producer: bulk copies
// (cp.async.bulk, the TMA engine) of `stage_kb` KiB per k-tile from an L2-resident region into a
// 6-stage ring with full / empty mbarriers. Warpgroup 1 consumes each stage with a 128 x 128 x 64
// k-tile of wgmma (two m64n128k16 accumulators), one commit group in flight, and releases the
// stage before: one pingpong warpgroup's mainloop. Warpgroup 2 is the interferer: a stream of
// global stores or loads (or arithmetic) until warpgroup 1 is done, slowed by __nanosleep between
// bursts. Printed: cycles per k-tile (peak 512), the mainloop's L2->SM bytes per cycle per SM, and
// the interferer's bytes per cycle per SM.
//
// Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a mainloop_interference.cu -o mi
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "wgmma_probe.cuh"
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, int parity) {
  asm volatile(
      "{\n.reg .pred p;\nWAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra WAIT_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void bulk_load_mc(uint32_t dst, const void* src, int bytes, uint32_t bar, uint16_t mask) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1], %2, [%3], %4;" ::"r"(
          dst),
      "l"(src), "r"(bytes), "r"(bar), "h"(mask)
      : "memory");
}
__device__ __forceinline__ uint32_t cta_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t bar, uint32_t rank) {
  asm volatile(
      "{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\n"
      "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [ra];\n}\n" ::"r"(bar),
      "r"(rank)
      : "memory");
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ void bulk_load(uint32_t dst, const void* src, int bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

enum Mode { kNone, kStg128, kStg64Rows, kLdgDram, kLdgL2, kAlu, kBulkStore, kModes };
static const char* kNames[kModes] = {"none", "stg.128 stream", "stg.64 8-row pattern", "ldg.128 dram", "ldg.128 l2",
                                     "ffma+mufu", "bulk store 16K"};
constexpr int kStages = 6, kStageBytes = 32768;

struct Out {
  unsigned long long mma_cycles, int_bytes, int_cycles;
  float sink;
};

__device__ __forceinline__ void probe_body(int mode, int k_tiles, int stage_bytes, const uint8_t* src,
                                                size_t src_chunks, uint8_t* big, size_t big_bytes, int sleep_ns,
                                                Out* out, int mc, uint8_t* smem, uint64_t* full, uint64_t* empty, volatile int& stop) {
  const int tid = threadIdx.x, wg = tid / 128, t = tid % 128;
  const uint32_t ring = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t rank = mc ? cta_rank() : 0;
  if (wg == 0) {
    if (tid != 0) return;
    size_t chunk = (size_t(blockIdx.x) * 977) % src_chunks;
    size_t bchunk = (size_t(blockIdx.x / 2) * 613 + 5) % src_chunks;  // the same for both CTAs of a pair
    for (int it = 0; it < k_tiles; ++it) {
      const int s = it % kStages, ph = (it / kStages) & 1;
      mbar_wait(static_cast<uint32_t>(__cvta_generic_to_shared(&empty[s])), ph ^ 1);
      const uint32_t fb = static_cast<uint32_t>(__cvta_generic_to_shared(&full[s]));
      mbar_expect_tx(fb, mc ? 32768 : stage_bytes);
      if (!mc) {
        bulk_load(ring + s * kStageBytes, src + chunk * stage_bytes, stage_bytes, fb);
      } else {  // A: 16 KiB of its own; B: 16 KiB shared by the pair, each CTA loads half for both
        bulk_load(ring + s * kStageBytes, src + chunk * 32768, 16384, fb);
        bulk_load_mc(ring + s * kStageBytes + 16384 + rank * 8192, src + bchunk * 32768 + 16384 + rank * 8192, 8192,
                     fb, 3);
      }
      chunk = chunk + 1 == src_chunks ? 0 : chunk + 1;
      bchunk = bchunk + 1 == src_chunks ? 0 : bchunk + 1;
    }
    // (the peer may still multicast into this CTA's ring: exit only with the cluster)
    return;
  }
  if (wg == 1) {
    float d0[64], d1[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) d0[i] = d1[i] = 0.0f;
    const long long t0 = clock64();
    for (int it = 0; it < k_tiles; ++it) {
      const int s = it % kStages, ph = (it / kStages) & 1;
      mbar_wait(static_cast<uint32_t>(__cvta_generic_to_shared(&full[s])), ph);
      const uint32_t base = ring + s * kStageBytes;
      const uint64_t a0 = desc_sw128(base), a1 = desc_sw128(base + 8192), b = desc_sw128(base + 16384);
      wgmma_ktile(d0, d1, a0, a1, b);
      wgmma_wait<1>();
      if (it > 0 && t % 32 == 0) {
        const uint32_t eb = static_cast<uint32_t>(__cvta_generic_to_shared(&empty[(it - 1) % kStages]));
        if (!mc) mbar_arrive(eb);
        else {
          mbar_arrive_cluster(eb, 0);
          mbar_arrive_cluster(eb, 1);
        }
      }
    }
    wgmma_wait<0>();
    const long long t1 = clock64();
    if (t == 0) {
      stop = 1;
      out[blockIdx.x].mma_cycles = t1 - t0;
    }
    keep_accumulators(d0, d1, &out[blockIdx.x].sink);
    return;
  }
  // warpgroup 2: the interferer
  if (mode == kNone) return;
  const size_t per_cta = big_bytes / gridDim.x & ~size_t(0xfffff);
  uint8_t* mine = big + size_t(blockIdx.x) * per_cta;
  size_t off = 0;
  unsigned long long bytes = 0;
  float f[8];
  uint32_t x = t;
#pragma unroll
  for (int i = 0; i < 8; ++i) f[i] = 1.0f + i * 1e-3f;
  const long long c0 = clock64();
  while (!stop) {
    switch (mode) {
      case kStg128:  // 8 x 2 KiB per warpgroup burst, contiguous (a staged tile row block's TMA store)
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          *reinterpret_cast<uint4*>(mine + off + i * 2048 + t * 16) = make_uint4(x, x + i, x ^ i, 7);
        }
        off += 8 * 2048;
        bytes += 8 * 2048;
        break;
      case kStg64Rows: {  // the accumulator's pattern: lanes r = lane / 4 own rows, 4 x 8 bytes each
        const int w = t / 32, l = t % 32;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const size_t row = size_t(w * 16 + (l / 4) + 8 * (i & 1)), col = (i / 2) * 32 + (l % 4) * 8;
          *reinterpret_cast<uint2*>(mine + off + row * 4096 + col) = make_uint2(x, x + i);
        }
        off += 128;  // the next 128 bytes of the same 64 rows
        if ((off & 4095) == 0) off += 63 * 4096;
        bytes += 8 * 1024;
        break;
      }
      case kLdgDram:
      case kLdgL2: {
        const size_t span = mode == kLdgL2 ? (size_t(1) << 20) : per_cta;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const uint4 v = __ldcg(reinterpret_cast<const uint4*>(mine + (off + i * 2048 + t * 16) % span));
          x ^= v.x + v.w;
        }
        off += 8 * 2048;
        bytes += 8 * 2048;
        break;
      }
      case kBulkStore:  // one thread: a 16 KiB bulk copy shared -> global per burst (a TMA store)
        if (t == 0) {
          asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(mine + off),
                       "r"(ring + kStages * kStageBytes), "r"(16384)
                       : "memory");
          asm volatile("cp.async.bulk.commit_group;" ::: "memory");
          asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
        }
        __syncwarp();
        off += 16384;
        bytes += 16384;
        break;
      case kAlu:
#pragma unroll
        for (int r = 0; r < 8; ++r)
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            f[i] = fmaf(f[i], 0.999f, 1e-4f);
            if (i == 0) asm volatile("ex2.approx.ftz.f32 %0, %0;" : "+f"(f[1]));
          }
        break;
    }
    if (off + 64 * 4096 >= per_cta) off = 0;
    if (sleep_ns) __nanosleep(sleep_ns);
  }
  const long long c1 = clock64();
  if (mode == kBulkStore && t == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  if (t == 0) {
    out[blockIdx.x].int_bytes = bytes;
    out[blockIdx.x].int_cycles = c1 - c0;
  }
  float acc = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) acc += f[i];
  if (acc == 12345.0f || x == 0x12345678u) out[blockIdx.x].sink = acc + x;
}

__global__ void __launch_bounds__(384, 1) probe(int mode, int k_tiles, int stage_bytes, const uint8_t* src,
                                                size_t src_chunks, uint8_t* big, size_t big_bytes, int sleep_ns,
                                                Out* out, int mc) {
  extern __shared__ __align__(1024) uint8_t smem[];
  __shared__ __align__(8) uint64_t full[kStages], empty[kStages];
  __shared__ volatile int stop;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(static_cast<uint32_t>(__cvta_generic_to_shared(&full[s])), 1);
      mbar_init(static_cast<uint32_t>(__cvta_generic_to_shared(&empty[s])), mc ? 8 : 4);
    }
    stop = 0;
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (mc) cluster_sync();
  probe_body(mode, k_tiles, stage_bytes, src, src_chunks, big, big_bytes, sleep_ns, out, mc, smem, full, empty, stop);
  __syncwarp();
  if (mc) cluster_sync();  // the peer may still multicast into this CTA or arrive on its barriers
}

int main(int argc, char** argv) {
  const int k_tiles = argc > 1 ? std::atoi(argv[1]) : 8192;
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int smem = kStages * kStageBytes + 16384;
  CK(cudaFuncSetAttribute(probe, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const size_t src_bytes = size_t(24) << 20;  // operands: L2-resident after the first pass
  uint8_t *src, *big;
  CK(cudaMalloc(&src, src_bytes));
  CK(cudaMemset(src, 0x3c, src_bytes));
  const size_t big_bytes = size_t(2) << 30;
  CK(cudaMalloc(&big, big_bytes));
  CK(cudaMemset(big, 0, big_bytes));
  Out* out;
  CK(cudaMalloc(&out, sms * sizeof(Out)));
  int clk_khz = 0;
  CK(cudaDeviceGetAttribute(&clk_khz, cudaDevAttrClockRate, 0));
  std::printf("%d SMs, %d k-tiles of 128x128x64 per CTA (peak 512 cycles each), 6 stages\n", sms, k_tiles);
  std::printf("%-22s %6s %6s %14s %8s %16s %18s\n", "interferer", "stageK", "sleep", "cycles/k-tile", "x none",
              "ring B/clk/SM", "interferer B/clk/SM");
  const int stage_sizes[] = {16384, 24576, 0};  // 0: a 2 x 1 cluster, 16 KiB of A alone and 16 KiB of B multicast
  const int sleeps[] = {0, 1000, 2000, 4000};
  for (int sb : stage_sizes) {
    const int mc = sb == 0, stage_bytes = mc ? 24576 : sb;
    if (mc) std::printf("-- 2 x 1 cluster: A 16 KiB per CTA, B 16 KiB multicast (8 KiB issued by each): 32 KiB lands per stage\n");
    double none = 0;
    for (int mode = 0; mode < kModes; ++mode) {
      for (int sl : sleeps) {
        if (mode == kNone && sl != 0) continue;
        std::vector<double> per;
        double ib = 0;
        for (int rep = 0; rep < 3; ++rep) {
          cudaLaunchConfig_t cfg = {};
          cfg.gridDim = dim3(sms);
          cfg.blockDim = dim3(384);
          cfg.dynamicSmemBytes = smem;
          cudaLaunchAttribute attr[1];
          attr[0].id = cudaLaunchAttributeClusterDimension;
          attr[0].val.clusterDim.x = mc ? 2 : 1;
          attr[0].val.clusterDim.y = 1;
          attr[0].val.clusterDim.z = 1;
          cfg.attrs = attr;
          cfg.numAttrs = 1;
          const size_t chunks = src_bytes / (mc ? 32768 : stage_bytes);
          CK(cudaLaunchKernelEx(&cfg, probe, mode, k_tiles, stage_bytes, (const uint8_t*)src, chunks, big, big_bytes, sl,
                                out, mc));
          CK(cudaDeviceSynchronize());
          std::vector<Out> h(sms);
          CK(cudaMemcpy(h.data(), out, sms * sizeof(Out), cudaMemcpyDeviceToHost));
          std::vector<double> c;
          double by = 0, cy = 0;
          for (auto& o : h) {
            c.push_back(double(o.mma_cycles) / k_tiles);
            by += o.int_bytes;
            cy += o.int_cycles;
          }
          std::sort(c.begin(), c.end());
          per.push_back(c[c.size() / 2]);
          ib = cy > 0 ? by / cy : 0;
        }
        std::sort(per.begin(), per.end());
        const double med = per[1];
        if (mode == kNone) none = med;
        std::printf("%-22s %6d %6d %14.1f %8.3f %16.1f %18.1f\n", kNames[mode], stage_bytes / 1024, sl, med, med / none,
                    stage_bytes / med, ib);
      }
    }
  }
  return 0;
}
