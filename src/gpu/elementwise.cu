// The small GPU kernels outside the GEMMs: partial finishes, cross-entropy, QK-norm + RoPE and the
// elementwise backwards of RoPE and QK-norm + RoPE, the logits-free loss, weight-layout helpers and
// the unfused path's straightforward kernels. They use the emulator's functors
// (coda/epilogue/*.hpp); every entry validates before launching.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "coda/epilogue/program.hpp"
#include "coda/gpu.hpp"
#include "launch_host.hpp"

namespace coda {
namespace {

using namespace gpu_host;

// ---- element access ---------------------------------------------------------------------------------

struct Mat2 {  // a strided row-major matrix (or vector: ld = 1 per row, cols = 1)
  void* p;
  int64_t ld;
  int dt;
};
Mat2 mat_of(const TensorView& t) {
  if (!t.defined()) return {nullptr, 0, 0};
  return {t.data(), t.rank() == 1 ? 1 : t.stride(0), static_cast<int>(t.dtype())};
}

__device__ __forceinline__ float ld_f(const void* p, int64_t i, int dt) {
  switch (dt) {
    case 0: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case 1: return __half2float(static_cast<const __half*>(p)[i]);
    case 2: return static_cast<const float*>(p)[i];
    default: return static_cast<float>(static_cast<const int*>(p)[i]);
  }
}
__device__ __forceinline__ void st_f(void* p, int64_t i, int dt, float v) {
  switch (dt) {
    case 0: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v); break;
    case 1: static_cast<__half*>(p)[i] = __float2half_rn(v); break;
    default: static_cast<float*>(p)[i] = v; break;
  }
}
__device__ __forceinline__ float at(const Mat2& m, int64_t r, int64_t c) { return ld_f(m.p, r * m.ld + c, m.dt); }
__device__ __forceinline__ void put(const Mat2& m, int64_t r, int64_t c, float v) { st_f(m.p, r * m.ld + c, m.dt, v); }

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
// Sum over a block of blockDim.x (a multiple of 32, <= 1024) threads; every thread gets it.
__device__ float block_sum(float v) {
  __shared__ float part[32];
  __shared__ float total;
  v = warp_sum(v);
  const int w = threadIdx.x / 32, l = threadIdx.x % 32;
  __syncthreads();
  if (l == 0) part[w] = v;
  __syncthreads();
  if (w == 0) {
    float s = l < int(blockDim.x / 32) ? part[l] : 0.0f;
    s = warp_sum(s);
    if (l == 0) total = s;
  }
  __syncthreads();
  return total;
}

Status launch_status(const char* op) {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return {};
  return Status::cuda_error(std::string(op) + ": launch failed: " + cudaGetErrorString(e));
}
int blocks_for(int64_t n, int threads) { return static_cast<int>((n + threads - 1) / threads); }

// ---- partial finishes ---------------------------------------------------------------------------------

// One warp per row: rstd (mode 0), scale * sum (mode 1), log-sum-exp of LSE partials (mode 2).
__global__ void row_finish_kernel(Mat2 part, int64_t rows, int64_t cols, float* out, int mode, float a, float b) {
  const int64_t m = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (m >= rows) return;
  if (mode == 2) {
    epi::OnlineLse acc;
    for (int64_t t = lane; t < cols; t += 32) {
      const float v = at(part, m, t);
      epi::OnlineLse p;
      if (v != -INFINITY) {
        p.max = v;
        p.sum = 1.0f;
      }
      acc.merge(p);
    }
    for (int o = 16; o > 0; o >>= 1) {
      epi::OnlineLse p;
      p.max = __shfl_xor_sync(0xffffffffu, acc.max, o);
      p.sum = __shfl_xor_sync(0xffffffffu, acc.sum, o);
      acc.merge(p);
    }
    if (lane == 0) out[m] = acc.value();
    return;
  }
  float s = 0.0f;
  for (int64_t t = lane; t < cols; t += 32) s += at(part, m, t);
  s = warp_sum(s);
  if (lane == 0) out[m] = mode == 0 ? epi::rms_rstd(s, a, b) : a * s;
}

Status row_finish(const char* op, const TensorView& partials, const TensorView& out, int mode, float a, float b,
                  cudaStream_t stream) {
  const int64_t rows = partials.rows();
  if (rows == 0) return {};
  CODA_TRY(device_prologue(op, {{"partials", partials}, {"out", out}}));
  row_finish_kernel<<<blocks_for(rows * 32, 256), 256, 0, stream>>>(mat_of(partials), rows, partials.cols(),
                                                                      static_cast<float*>(out.data()), mode, a, b);
  return launch_status(op);
}

// ---- cross-entropy ------------------------------------------------------------------------------------

struct CeParams {
  const float* lse;
  const float* target_logit;
  const int* targets;
  int64_t rows;
  int ignore;
  int mean;
  float* loss;
  float* row_loss;
  Mat2 logits, dlogits;
  int64_t classes;
  float dloss;
  float* zdz;
  float zdz_scale;
};

// The loss's row weight, over the whole block: 1 / count of the rows not ignored (mean; 0 when
// every row is ignored) or 1 (sum).
__device__ float target_norm(const int* targets, int64_t rows, int ignore, int mean) {
  float count = 0.0f;
  for (int64_t m = threadIdx.x; m < rows; m += blockDim.x) count += targets[m] != ignore ? 1.0f : 0.0f;
  count = block_sum(count);  // exact: integers below 2^24
  return mean ? (count > 0.0f ? 1.0f / count : 0.0f) : 1.0f;
}
__device__ float ce_norm(const CeParams& p) { return target_norm(p.targets, p.rows, p.ignore, p.mean); }

// One block: the reduced loss and the per-row losses.
__global__ void ce_loss_kernel(CeParams p) {
  const float norm = ce_norm(p);
  float total = 0.0f;
  for (int64_t m = threadIdx.x; m < p.rows; m += blockDim.x) {
    const bool ignored = p.targets[m] == p.ignore;
    const float rl = ignored ? 0.0f : p.lse[m] - p.target_logit[m];
    total += rl;
    if (p.row_loss) p.row_loss[m] = rl;
  }
  total = block_sum(total);
  if (threadIdx.x == 0) p.loss[0] = total * norm;
}

// One row of the cross-entropy gradient: d = (softmax - onehot) * dloss * norm per class, 0 where
// the row's target is ignored. The softmax is one FFMA and one SFU exponential (the lse scaled by
// log2 e once per row); relative error a few 1e-6, far below the 16-bit dlogits' rounding.
// NOTES: with expf and a 64-bit class index compared per element the vector kernel executed ~18
// instructions per class (H200, lmhead.train_fwd's in-place pass: 2.4 ms for 8.4 GB, 83% of copy).
struct CeRow {
  int target;
  bool ignored;
  float off;    // lse * log2 e
  float scale;  // dloss * norm
  __device__ CeRow(const CeParams& p, int64_t m, float norm) {
    target = p.targets[m];
    ignored = target == p.ignore;
    off = p.lse[m] * epi::kLog2e;
    scale = p.dloss * norm;
  }
  __device__ float grad(float logit, bool is_target) const {
    const float e = epi::ex2_ftz(fmaf(logit, epi::kLog2e, -off));
    return ignored ? 0.0f : (e - (is_target ? 1.0f : 0.0f)) * scale;
  }
};

// Rows strided over the grid: dlogits = (softmax - onehot) * dloss * norm, and ZdZ.
__global__ void ce_grad_kernel(CeParams p) {
  const float norm = ce_norm(p);
  for (int64_t m = blockIdx.x; m < p.rows; m += gridDim.x) {
    const CeRow row(p, m, norm);
    float zdz = 0.0f;
    for (int64_t v = threadIdx.x; v < p.classes; v += blockDim.x) {
      const float logit = at(p.logits, m, v);
      const float d = row.grad(logit, v == row.target);
      zdz += logit * d;
      put(p.dlogits, m, v, d);
    }
    if (p.zdz) {
      zdz = block_sum(zdz);
      if (threadIdx.x == 0) p.zdz[m] = p.zdz_scale * zdz;
    }
  }
}

// ---- QK-norm + RoPE -------------------------------------------------------------------------------------

struct QkParams {
  Mat2 qkv, sumsq, out;
  const void* gamma_q;
  const void* gamma_k;
  int gq_dt, gk_dt;
  const int* positions;
  const float* freqs;
  int64_t rows, hq, hkv, hd, segs, n;
  float eps;
};

__global__ void qknorm_rope_kernel(QkParams p) {
  const int64_t m = blockIdx.x;
  const auto pos = p.positions[m];
  const int64_t rope_cols = (p.hq + p.hkv) * p.hd;
  const float inv_hd = 1.0f / static_cast<float>(p.hd);
  for (int64_t c = 2 * threadIdx.x; c < p.n; c += 2 * blockDim.x) {
    float x = at(p.qkv, m, c), y = c + 1 < p.n ? at(p.qkv, m, c + 1) : 0.0f;
    if (c < rope_cols) {
      const int64_t head = c / p.hd, j = c % p.hd;
      float ss = 0.0f;
      for (int64_t s = 0; s < p.segs; ++s) ss += at(p.sumsq, m, head * p.segs + s);
      const float r = epi::rms_rstd(ss, inv_hd, p.eps);
      const bool is_q = head < p.hq;
      const void* g = is_q ? p.gamma_q : p.gamma_k;
      const int gdt = is_q ? p.gq_dt : p.gk_dt;
      x = x * r * ld_f(g, j, gdt);
      y = y * r * ld_f(g, j + 1, gdt);
      float s, co;
      epi::rope_sincos(static_cast<uint32_t>(pos), p.freqs[j / 2], &s, &co);
      if (pos < 0) s = co = NAN;
      epi::rotate(&x, &y, s, co);
    }
    put(p.out, m, c, x);
    if (c + 1 < p.n) put(p.out, m, c + 1, y);
  }
}

// ---- RoPE and QK-norm + RoPE backward -------------------------------------------------------------------
// The emulator's loops (src/emu/elementwise.cpp) spread over threads: the same functors, fp32 sums in
// another order. A negative position gives NaN gradients in its row's q and k columns (a NaN angle,
// as in the forward kernels); the emulator, which can read positions on the host, rejects it.

// One block per row, a thread per pair: dz = R(-theta) dqkv on q and k, dqkv as it is on v, and
// ZdZ = scale * sum_k qkv dqkv (= z dz: the rotation keeps dot products) by a block reduction. dz may
// be dqkv itself: each element is read and then written by the same thread.
__global__ void rope_backward_kernel(Mat2 qkv, Mat2 dqkv, Mat2 dz, const int* positions, const float* freqs,
                                     int64_t hd, int64_t rope_cols, int64_t n, float* zdz, float zdz_scale) {
  const int64_t m = blockIdx.x;
  const int pos = positions[m];
  float acc = 0.0f;
  for (int64_t c = 2 * threadIdx.x; c < n; c += 2 * blockDim.x) {  // n is even (head_dim is)
    float x = at(dqkv, m, c), y = at(dqkv, m, c + 1);
    acc += at(qkv, m, c) * x + at(qkv, m, c + 1) * y;
    if (c < rope_cols) {
      float s, co;
      epi::rope_sincos_at(pos, freqs[(c % hd) / 2], &s, &co);
      epi::rotate(&x, &y, -s, co);
    }
    put(dz, m, c, x);
    put(dz, m, c + 1, y);
  }
  if (zdz) {  // uniform over the block
    acc = block_sum(acc);
    if (threadIdx.x == 0) zdz[m] = zdz_scale * acc;
  }
}

struct QkBwdParams {
  Mat2 qkv, dout, dqkv, dgamma_q, dgamma_k;
  const void* gamma_q;
  const void* gamma_k;
  int gq_dt, gk_dt;
  const int* positions;
  const float* freqs;
  float* zdz;
  float zdz_scale;
  int64_t rows, hq, hkv, hd, n;
  float eps;
};

// du = R(-theta) dout at the q/k pair (c, c + 1) of row m: the gradient before the rotation.
__device__ __forceinline__ void unrotated_dout(const QkBwdParams& p, int64_t m, int64_t c, int pos, float freq,
                                               float* du) {
  float s, co;
  epi::rope_sincos_at(pos, freq, &s, &co);
  du[0] = at(p.dout, m, c);
  du[1] = at(p.dout, m, c + 1);
  epi::rotate(&du[0], &du[1], -s, co);
}

// One block per row granule (CODA_PARTIAL_ROWS rows, so blockIdx.x is the partial row), one warp per
// row at a time. For each q/k head the warp recomputes r from the stored pre-norm values, un-rotates
// dout, and writes dx = rmsnorm_dx(du, x r, r, gamma, c) with c = (1/hd) sum_j du_j gamma_j x_j r (sums
// by shuffles); v passes dout through; ZdZ = scale * sum over the row of qkv dqkv. A lane owns the
// pairs lane + 32 i of every head, so it alone touches those columns of dqkv (dout may be dqkv: it
// reads a column before it writes it) and of its warp's dgamma sums in shared memory
// ([warps][2][hd]: q then k, summed over the warp's rows and heads). At the end the block adds the
// warps' sums in a fixed order and stores partial row blockIdx.x: every entry, plain stores,
// deterministic.
// NOTES: a faster version would keep a head's pairs and the row's sin/cos in registers instead of
// re-reading them (L1 hits) and recomputing the angles per head, and would split a granule over a
// thread-block cluster (adding the blocks' sums through distributed shared memory) when M / 128 is
// below the SM count.
__global__ void qknorm_rope_backward_kernel(QkBwdParams p) {
  extern __shared__ float dgamma_sums[];
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  const int64_t hd = p.hd;
  float* mine = dgamma_sums + int64_t(w) * 2 * hd;
  for (int64_t j = 2 * lane; j < hd; j += 64) mine[j] = mine[j + 1] = mine[hd + j] = mine[hd + j + 1] = 0.0f;
  const int64_t g0 = int64_t(blockIdx.x) * CODA_PARTIAL_ROWS;
  const int64_t g1 = p.rows - g0 < CODA_PARTIAL_ROWS ? p.rows : g0 + CODA_PARTIAL_ROWS;
  const int64_t rope_cols = (p.hq + p.hkv) * hd;
  const float inv_hd = 1.0f / static_cast<float>(hd);
  for (int64_t m = g0 + w; m < g1; m += warps) {
    const int pos = p.positions[m];
    float zdz = 0.0f;
    for (int64_t head = 0; head < p.hq + p.hkv; ++head) {
      const bool is_q = head < p.hq;
      const void* g = is_q ? p.gamma_q : p.gamma_k;
      const int gdt = is_q ? p.gq_dt : p.gk_dt;
      float* dgamma = mine + (is_q ? 0 : hd);
      const int64_t c0 = head * hd;
      float ss = 0.0f;
      for (int64_t j = 2 * lane; j < hd; j += 64) {
        const float x0 = at(p.qkv, m, c0 + j), x1 = at(p.qkv, m, c0 + j + 1);
        ss += x0 * x0 + x1 * x1;
      }
      const float r = epi::rms_rstd(warp_sum(ss), inv_hd, p.eps);
      float c = 0.0f;
      for (int64_t j = 2 * lane; j < hd; j += 64) {
        float du[2];
        unrotated_dout(p, m, c0 + j, pos, p.freqs[j / 2], du);
        for (int b = 0; b < 2; ++b) c += du[b] * ld_f(g, j + b, gdt) * at(p.qkv, m, c0 + j + b) * r;
      }
      c = warp_sum(c) * inv_hd;
      for (int64_t j = 2 * lane; j < hd; j += 64) {
        float du[2];
        unrotated_dout(p, m, c0 + j, pos, p.freqs[j / 2], du);
        for (int b = 0; b < 2; ++b) {
          const float x = at(p.qkv, m, c0 + j + b), xh = x * r;
          dgamma[j + b] += du[b] * xh;
          const float dx = epi::rmsnorm_dx(du[b], xh, r, ld_f(g, j + b, gdt), c);
          zdz += x * dx;
          put(p.dqkv, m, c0 + j + b, dx);
        }
      }
    }
    for (int64_t col = rope_cols + lane; col < p.n; col += 32) {  // v: the gradient passes through
      const float d = at(p.dout, m, col);
      zdz += at(p.qkv, m, col) * d;
      put(p.dqkv, m, col, d);
    }
    if (p.zdz) {  // uniform over the block
      zdz = warp_sum(zdz);
      if (lane == 0) p.zdz[m] = p.zdz_scale * zdz;
    }
  }
  __syncthreads();
  for (int64_t j = threadIdx.x; j < 2 * hd; j += blockDim.x) {
    float s = 0.0f;
    for (int v = 0; v < warps; ++v) s += dgamma_sums[int64_t(v) * 2 * hd + j];
    put(j < hd ? p.dgamma_q : p.dgamma_k, blockIdx.x, j < hd ? j : j - hd, s);
  }
}

// ---- unfused elementwise kernels ---------------------------------------------------------------------

__global__ void add_kernel(Mat2 a, Mat2 b, Mat2 o, int64_t rows, int64_t cols) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  const int64_t r = i / cols, c = i % cols;
  put(o, r, c, at(a, r, c) + at(b, r, c));
}

__global__ void rmsnorm_kernel(Mat2 x, const void* w, int wdt, float eps, Mat2 o, float* rstd, int64_t cols) {
  const int64_t m = blockIdx.x;
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float v = at(x, m, c);
    ss += v * v;
  }
  ss = block_sum(ss);
  const float r = epi::rms_rstd(ss, 1.0f / static_cast<float>(cols), eps);
  if (rstd && threadIdx.x == 0) rstd[m] = r;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) put(o, m, c, at(x, m, c) * r * ld_f(w, c, wdt));
}

__global__ void swiglu_kernel(Mat2 z, Mat2 o, int64_t rows, int64_t f) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * f) return;
  const int64_t r = i / f, c = i % f;
  put(o, r, c, epi::swiglu(at(z, r, 2 * c), at(z, r, 2 * c + 1)));
}

__global__ void rope_kernel(Mat2 q, const int* positions, const float* freqs, int64_t rows, int64_t hd,
                            int64_t rope_cols) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t pairs = rope_cols / 2;
  if (i >= rows * pairs) return;
  const int64_t r = i / pairs, c = 2 * (i % pairs);
  const int pos = positions[r];
  float x = at(q, r, c), y = at(q, r, c + 1), s, co;
  epi::rope_sincos(static_cast<uint32_t>(pos), freqs[(c % hd) / 2], &s, &co);
  if (pos < 0) s = co = NAN;
  epi::rotate(&x, &y, s, co);
  put(q, r, c, x);
  put(q, r, c + 1, y);
}

// The unfused RMSNorm backward, given dy (the dgrad GEMM's output, already rounded to its dtype):
// per element the same float expressions, in the same order, as programs::RmsNormBackward, so the
// two agree up to dy's rounding and the order of the dw sums. One thread per column walks the rows
// of one CODA_PARTIAL_ROWS-row granule (consecutive threads, consecutive columns: coalesced) and
// stores the granule's dw sum in row order: no atomics, the same result on every run.
struct RmsBwdParams {
  Mat2 dy, x, dres, dx, y, dw;
  const float* rstd;
  const float* zdz;
  const void* w;
  int wdt;
  int64_t rows, cols, granules;
};

__global__ void rmsnorm_backward_kernel(RmsBwdParams p) {
  for (int64_t n = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; n < p.cols; n += int64_t(gridDim.x) * blockDim.x) {
    const float w = ld_f(p.w, n, p.wdt);
    for (int64_t t = blockIdx.y; t < p.granules; t += gridDim.y) {
      const int64_t end = (t + 1) * CODA_PARTIAL_ROWS < p.rows ? (t + 1) * CODA_PARTIAL_ROWS : p.rows;
      float dw = 0.0f;
      for (int64_t m = t * CODA_PARTIAL_ROWS; m < end; ++m) {
        const float r = p.rstd[m], c = p.zdz[m];
        const float dy = at(p.dy, m, n);
        const float xh = at(p.x, m, n) * r;
        float dx = epi::rmsnorm_dx(dy, xh, r, w, c);
        if (p.dres.p) dx += at(p.dres, m, n);  // read before the store below: dres may be dx_out
        put(p.dx, m, n, dx);
        if (p.y.p) put(p.y, m, n, xh * w);
        dw += dy * xh;
      }
      put(p.dw, t, n, dw);
    }
  }
}

// The unfused SwiGLU backward: one block of CODA_PARTIAL_COLS threads per (row, granule of F), a
// thread per output column i (z's pair 2i, 2i + 1), the epi:: functions of programs::SwigluBackward.
// The granule's ZdZ (sum of g dg + u du) is a block reduction in a fixed order, stored plainly.
struct SwiBwdParams {
  Mat2 dout, z, dz, o, zdz;
  int64_t rows, f, granules;
};

__global__ void __launch_bounds__(CODA_PARTIAL_COLS) swiglu_backward_kernel(SwiBwdParams p) {
  for (int64_t m = blockIdx.x; m < p.rows; m += gridDim.x)
    for (int64_t t = blockIdx.y; t < p.granules; t += gridDim.y) {  // uniform over the block: block_sum is safe
      const int64_t i = t * CODA_PARTIAL_COLS + threadIdx.x;
      float zdz = 0.0f;
      if (i < p.f) {
        const float g = at(p.z, m, 2 * i), u = at(p.z, m, 2 * i + 1);
        const epi::SwigluGrad d = epi::swiglu_grad(g, u, at(p.dout, m, i));
        put(p.dz, m, 2 * i, d.dg);
        put(p.dz, m, 2 * i + 1, d.du);
        if (p.o.p) put(p.o, m, i, d.o);
        zdz = d.zdz;
      }
      if (p.zdz.p) {
        zdz = block_sum(zdz);
        if (threadIdx.x == 0) put(p.zdz, m, t, zdz);
      }
    }
}

// out row r = src row map(r), element-wise copy; mode 0: interleave (a, b), 1: rotate-half -> pairs.
__global__ void gather_rows_kernel(Mat2 a, Mat2 b, Mat2 o, int64_t rows, int64_t cols, int mode, int64_t hd,
                                   int64_t rope_rows) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  const int64_t r = i / cols, c = i % cols;
  float v;
  if (mode == 0) {
    v = (r & 1) ? at(b, r / 2, c) : at(a, r / 2, c);
  } else {
    int64_t src = r;
    if (r < rope_rows) {
      const int64_t head = r / hd, j = r % hd;
      src = head * hd + ((j & 1) ? hd / 2 + j / 2 : j / 2);
    }
    v = at(a, src, c);
  }
  put(o, r, c, v);
}

// ---- unfused fast paths: 16-byte vectors ---------------------------------------------------------------
// Taken when the call's 16-bit tensors share one dtype (a template parameter, chosen once per launch)
// and each has unit column stride, a 16-byte-aligned base and row stride, and a multiple of 8
// columns; every other valid input takes the scalar kernels above. Same functors, fp32 arithmetic,
// one rounding to nearest per stored value, no division per element.
//
// NOTES: a uint4 holds 8 consecutive bf16/fp16 values, element 0 in the low half of .x (little
// endian); aligned uint4 accesses are single LDG.E.128 / STG.E.128, and a warp's 32 of them cover
// 512 contiguous bytes (16 whole 32-byte sectors). Several per thread in flight hide DRAM latency.

constexpr int kVec = 8;           // 16-bit values per 16-byte vector
constexpr int kAddVecs = 4;       // vectors per thread per operand: add
constexpr int kSwigluVecs = 2;    // output vectors per thread (2 z loads each): swiglu
constexpr int kRopeVecs = 4;      // vectors per thread per pass: rope
constexpr int kRopeMaxPairs = 512;  // rope fast path: head_dim <= 1024

template <class T>
__device__ __forceinline__ float half_to_f(uint32_t h);  // h: the value's 16 bits
template <>
__device__ __forceinline__ float half_to_f<__nv_bfloat16>(uint32_t h) {
  return __uint_as_float(h << 16);  // exact, as __bfloat162float
}
template <>
__device__ __forceinline__ float half_to_f<__half>(uint32_t h) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(h)));
}
// The same conversions as st_f (round to nearest even).
template <class T>
__device__ __forceinline__ uint32_t f_to_half(float v);
template <>
__device__ __forceinline__ uint32_t f_to_half<__nv_bfloat16>(float v) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}
template <>
__device__ __forceinline__ uint32_t f_to_half<__half>(float v) {
  return __half_as_ushort(__float2half_rn(v));
}

template <class T>
__device__ __forceinline__ void unpack8(const uint4& v, float* f) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  CODA_UNROLL
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = half_to_f<T>(w[i] & 0xffffu);
    f[2 * i + 1] = half_to_f<T>(w[i] >> 16);
  }
}
template <class T>
__device__ __forceinline__ uint4 pack8(const float* f) {
  uint32_t w[4];
  CODA_UNROLL
  for (int i = 0; i < 4; ++i) w[i] = f_to_half<T>(f[2 * i]) | (f_to_half<T>(f[2 * i + 1]) << 16);
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// 8 weights as raw 16-byte vectors (fp32: two), loaded ahead of their use.
template <class W>
struct W8 {
  uint4 v;
  __device__ __forceinline__ void load(const W* w, int i) { v = reinterpret_cast<const uint4*>(w)[i]; }
  __device__ __forceinline__ void get(float* f) const { unpack8<W>(v, f); }
};
template <>
struct W8<float> {
  float4 a, b;
  __device__ __forceinline__ void load(const float* w, int i) {
    a = reinterpret_cast<const float4*>(w)[2 * i];
    b = reinterpret_cast<const float4*>(w)[2 * i + 1];
  }
  __device__ __forceinline__ void get(float* f) const {
    f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
  }
};

// add and swiglu: rows of `vpr` output vectors (a dense tensor is passed as one long row). A block
// covers U * blockDim.x vectors of a row, U per thread, all loads issued before the first use, and
// strides over rows (grid.y) and column chunks (grid.x). ld*: row strides in vectors.
template <class T, int U>
__global__ void __launch_bounds__(256) add_vec_kernel(const uint4* a, int64_t lda, const uint4* b, int64_t ldb,
                                                      uint4* o, int64_t ldo, int64_t rows, int64_t vpr) {
  const int64_t chunk = int64_t(U) * blockDim.x;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const uint4* ar = a + r * lda;
    const uint4* br = b + r * ldb;
    uint4* orow = o + r * ldo;
    for (int64_t c0 = blockIdx.x * chunk + threadIdx.x; c0 < vpr; c0 += gridDim.x * chunk) {
      uint4 va[U], vb[U];
      CODA_UNROLL
      for (int k = 0; k < U; ++k) {
        const int64_t c = c0 + int64_t(k) * blockDim.x;
        if (c < vpr) {
          va[k] = ar[c];
          vb[k] = br[c];
        }
      }
      CODA_UNROLL
      for (int k = 0; k < U; ++k) {
        const int64_t c = c0 + int64_t(k) * blockDim.x;
        if (c >= vpr) continue;
        float fa[kVec], fb[kVec];
        unpack8<T>(va[k], fa);
        unpack8<T>(vb[k], fb);
        CODA_UNROLL
        for (int i = 0; i < kVec; ++i) fa[i] += fb[i];
        orow[c] = pack8<T>(fa);
      }
    }
  }
}

// Output vector c of a row: 8 (g, u) pairs from z vectors 2c and 2c + 1.
template <class T, int U>
__global__ void __launch_bounds__(256) swiglu_vec_kernel(const uint4* z, int64_t ldz, uint4* o, int64_t ldo,
                                                         int64_t rows, int64_t vpr) {
  const int64_t chunk = int64_t(U) * blockDim.x;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const uint4* zr = z + r * ldz;
    uint4* orow = o + r * ldo;
    for (int64_t c0 = blockIdx.x * chunk + threadIdx.x; c0 < vpr; c0 += gridDim.x * chunk) {
      uint4 v[U][2];
      CODA_UNROLL
      for (int k = 0; k < U; ++k) {
        const int64_t c = c0 + int64_t(k) * blockDim.x;
        if (c < vpr) {
          v[k][0] = zr[2 * c];
          v[k][1] = zr[2 * c + 1];
        }
      }
      CODA_UNROLL
      for (int k = 0; k < U; ++k) {
        const int64_t c = c0 + int64_t(k) * blockDim.x;
        if (c >= vpr) continue;
        float gu[2 * kVec], f[kVec];
        unpack8<T>(v[k][0], gu);
        unpack8<T>(v[k][1], gu + kVec);
        CODA_UNROLL
        for (int i = 0; i < kVec; ++i) f[i] = epi::swiglu(gu[2 * i], gu[2 * i + 1]);
        orow[c] = pack8<T>(f);
      }
    }
  }
}

// One block per row, the row held in registers (V vectors per thread): x is read once for the sum of
// squares and scaled from registers. w (L2-resident, read by every row) is loaded before the block
// reduction so that its latency hides behind it. NOTES: a warp per row (8 rows a block, then a
// persistent grid of warps issuing the next row's loads ahead) read 75-76% of the copy bandwidth at
// the 1B shape, against this form's 83-84% in the same process (H200, 7d3e027; bench/NOTES.md).
template <class T, class W, int V>
__global__ void __launch_bounds__(512) rmsnorm_vec_kernel(const uint4* x, int64_t ldx, const W* w, float eps,
                                                          uint4* o, int64_t ldo, float* rstd, int vpr, int64_t cols) {
  const int64_t m = blockIdx.x;
  const uint4* xr = x + m * ldx;
  uint4 v[V];
  W8<W> wv[V];
  CODA_UNROLL
  for (int k = 0; k < V; ++k) {
    const int i = k * blockDim.x + threadIdx.x;
    if (i < vpr) v[k] = xr[i];
  }
  CODA_UNROLL
  for (int k = 0; k < V; ++k) {
    const int i = k * blockDim.x + threadIdx.x;
    if (i < vpr) wv[k].load(w, i);
  }
  float ss = 0.0f;
  CODA_UNROLL
  for (int k = 0; k < V; ++k) {
    if (k * int(blockDim.x) + int(threadIdx.x) >= vpr) continue;
    float f[kVec];
    unpack8<T>(v[k], f);
    CODA_UNROLL
    for (int i = 0; i < kVec; ++i) ss += f[i] * f[i];
  }
  ss = block_sum(ss);
  const float r = epi::rms_rstd(ss, 1.0f / static_cast<float>(cols), eps);
  if (rstd && threadIdx.x == 0) rstd[m] = r;
  uint4* orow = o + m * ldo;
  CODA_UNROLL
  for (int k = 0; k < V; ++k) {
    const int i = k * blockDim.x + threadIdx.x;
    if (i >= vpr) continue;
    float f[kVec], g[kVec];
    unpack8<T>(v[k], f);
    wv[k].get(g);
    CODA_UNROLL
    for (int j = 0; j < kVec; ++j) f[j] = f[j] * r * g[j];
    orow[i] = pack8<T>(f);
  }
}

// ce_grad_kernel's vector form: rows strided over the grid, 16-byte vectors of 8 classes, U of them
// in flight per thread. NOTES: the scalar form (one 16-bit access per thread, a dtype switch per
// element) took ~4.8 ms at M 16384, V 128256 on an H200 (7d3e027: lmhead.train_fwd less the fused
// forward), 2.4x the copy time of the 8.4 GB it reads and writes.
template <class T, int U>
__global__ void __launch_bounds__(512) ce_grad_vec_kernel(CeParams p) {
  const float norm = ce_norm(p);
  const int64_t vpr = p.classes / kVec;
  for (int64_t m = blockIdx.x; m < p.rows; m += gridDim.x) {
    const CeRow row(p, m, norm);
    const uint4* in = static_cast<const uint4*>(p.logits.p) + m * (p.logits.ld / kVec);
    uint4* out = static_cast<uint4*>(p.dlogits.p) + m * (p.dlogits.ld / kVec);
    float zdz = 0.0f;
    for (int64_t i0 = threadIdx.x; i0 < vpr; i0 += int64_t(U) * blockDim.x) {
      uint4 v[U];
      CODA_UNROLL
      for (int u = 0; u < U; ++u)
        if (i0 + int64_t(u) * blockDim.x < vpr) v[u] = in[i0 + int64_t(u) * blockDim.x];
      CODA_UNROLL
      for (int u = 0; u < U; ++u) {
        const int64_t i = i0 + int64_t(u) * blockDim.x;
        if (i >= vpr) continue;
        float f[kVec];
        unpack8<T>(v[u], f);
        const int jt = row.target - static_cast<int>(i) * kVec;  // the target's place in the vector, if here
        CODA_UNROLL
        for (int j = 0; j < kVec; ++j) {
          const float d = row.grad(f[j], j == jt);
          zdz += f[j] * d;
          f[j] = d;
        }
        out[i] = pack8<T>(f);
      }
    }
    if (p.zdz) {
      zdz = block_sum(zdz);
      if (threadIdx.x == 0) p.zdz[m] = p.zdz_scale * zdz;
    }
  }
}

// One block per row over the q and k columns (vr vectors of 4 pairs). A row's angles depend only on
// (position, pair index within a head), so the head_dim / 2 sin/cos pairs are computed once per row
// into shared memory (while the row's first loads are in flight) and shared by all q and k heads.
template <class T, int V>
__global__ void __launch_bounds__(256) rope_vec_kernel(uint4* q, int64_t ldq, const int* positions, const float* freqs,
                                                       int vr, int hd) {
  __shared__ __align__(16) float sn[kRopeMaxPairs];
  __shared__ __align__(16) float cs[kRopeMaxPairs];
  const int64_t m = blockIdx.x;
  uint4* row = q + m * ldq;
  const int pos = positions[m];
  const int vh = hd / kVec;  // vectors per head
  for (int base = 0; base < vr; base += V * int(blockDim.x)) {
    uint4 v[V];
    CODA_UNROLL
    for (int k = 0; k < V; ++k) {
      const int i = base + k * int(blockDim.x) + int(threadIdx.x);
      if (i < vr) v[k] = row[i];
    }
    if (base == 0) {  // uniform over the block
      for (int j = threadIdx.x; j < hd / 2; j += blockDim.x) {
        float s, c;
        epi::rope_sincos(static_cast<uint32_t>(pos), freqs[j], &s, &c);
        if (pos < 0) s = c = NAN;
        sn[j] = s;
        cs[j] = c;
      }
      __syncthreads();
    }
    CODA_UNROLL
    for (int k = 0; k < V; ++k) {
      const int i = base + k * int(blockDim.x) + int(threadIdx.x);
      if (i >= vr) continue;
      const int j0 = (i % vh) * (kVec / 2);  // the vector's first pair within its head
      const float4 s4 = *reinterpret_cast<const float4*>(sn + j0);
      const float4 c4 = *reinterpret_cast<const float4*>(cs + j0);
      float f[kVec];
      unpack8<T>(v[k], f);
      epi::rotate(&f[0], &f[1], s4.x, c4.x);
      epi::rotate(&f[2], &f[3], s4.y, c4.y);
      epi::rotate(&f[4], &f[5], s4.z, c4.z);
      epi::rotate(&f[6], &f[7], s4.w, c4.w);
      row[i] = pack8<T>(f);
    }
  }
}

// rope_backward_kernel's vector form: one block per row, V vectors of qkv and of dqkv per thread in
// flight; the row's head_dim / 2 angles computed once into shared memory (as rope_vec_kernel) and
// un-rotating every q and k head. dz may be dqkv itself (each vector is read, then written, by one
// thread). NOTES: the scalar form (a dtype switch and an angle per pair) took 175 us at the 1B
// block's [16384, 3072] (H200, 2026-12-01), 2.3x the copy time of the 300 MB it moves.
template <class T, int V>
__global__ void __launch_bounds__(256)
    rope_backward_vec_kernel(const uint4* qkv, int64_t ldq, const uint4* dqkv, int64_t ldd, uint4* dz, int64_t ldz,
                             const int* positions, const float* freqs, int vr, int vrope, int hd, float* zdz,
                             float zdz_scale) {
  __shared__ __align__(16) float sn[kRopeMaxPairs];
  __shared__ __align__(16) float cs[kRopeMaxPairs];
  const int64_t m = blockIdx.x;
  qkv += m * ldq, dqkv += m * ldd, dz += m * ldz;
  const int pos = positions[m];
  const int vh = hd / kVec;  // vectors per head
  float acc = 0.0f;
  for (int base = 0; base < vr; base += V * int(blockDim.x)) {
    uint4 z[V], g[V];
    CODA_UNROLL
    for (int k = 0; k < V; ++k) {
      const int i = base + k * int(blockDim.x) + int(threadIdx.x);
      if (i < vr) z[k] = qkv[i], g[k] = dqkv[i];
    }
    if (base == 0) {  // uniform over the block
      for (int j = threadIdx.x; j < hd / 2; j += blockDim.x) {
        float s, c;
        epi::rope_sincos_at(pos, freqs[j], &s, &c);
        sn[j] = s;
        cs[j] = c;
      }
      __syncthreads();
    }
    CODA_UNROLL
    for (int k = 0; k < V; ++k) {
      const int i = base + k * int(blockDim.x) + int(threadIdx.x);
      if (i >= vr) continue;
      float f[kVec], x[kVec];
      unpack8<T>(z[k], x);
      unpack8<T>(g[k], f);
      CODA_UNROLL
      for (int j = 0; j < kVec; ++j) acc += x[j] * f[j];
      if (i < vrope) {
        const int j0 = (i % vh) * (kVec / 2);  // the vector's first pair within its head
        const float4 s4 = *reinterpret_cast<const float4*>(sn + j0);
        const float4 c4 = *reinterpret_cast<const float4*>(cs + j0);
        epi::rotate(&f[0], &f[1], -s4.x, c4.x);
        epi::rotate(&f[2], &f[3], -s4.y, c4.y);
        epi::rotate(&f[4], &f[5], -s4.z, c4.z);
        epi::rotate(&f[6], &f[7], -s4.w, c4.w);
      }
      dz[i] = pack8<T>(f);
    }
  }
  if (zdz) {  // uniform over the block
    acc = block_sum(acc);
    if (threadIdx.x == 0) zdz[m] = zdz_scale * acc;
  }
}

// Column sums of per-row-granule partials, deterministic: a block of 32 columns x kColFinishGroups
// row groups; each thread sums its group's rows (every kColFinishGroups-th), then the groups' sums
// are added in a fixed order. NOTES: one thread per column (a 128-row serial sum over 2048 columns
// in 8 blocks) took ~20 us at the 1B block's [128, 2048] (H200, 2026-12-01) for a 1 MB read.
constexpr int kColFinishGroups = 16;
__global__ void __launch_bounds__(32 * kColFinishGroups) col_finish_kernel(Mat2 part, int64_t rows, int64_t cols,
                                                                          Mat2 out) {
  __shared__ float sum[kColFinishGroups][33];
  const int lane = threadIdx.x % 32, grp = threadIdx.x / 32;
  const int64_t n = int64_t(blockIdx.x) * 32 + lane;
  float s = 0.0f;
  if (n < cols)
    for (int64_t t = grp; t < rows; t += kColFinishGroups) s += at(part, t, n);
  sum[grp][lane] = s;
  __syncthreads();
  if (grp == 0 && n < cols) {
    float total = 0.0f;
    for (int q = 0; q < kColFinishGroups; ++q) total += sum[q][lane];
    st_f(out.p, n, out.dt, total);
  }
}

// ---- fast-path host helpers -------------------------------------------------------------------------

template <class T>
struct Tag {
  using type = T;
};
// f(Tag<T>{}) with T the 16-bit dtype d (bf16 or fp16): the dtype is dispatched once per launch.
template <class F>
void with_half(DType d, F&& f) {
  if (d == DType::kBF16) f(Tag<__nv_bfloat16>{});
  else f(Tag<__half>{});
}

// A 16-bit matrix the fast paths can move as whole 16-byte vectors.
bool vec16(const TensorView& t) {
  return t.rank() == 2 && (t.dtype() == DType::kBF16 || t.dtype() == DType::kFP16) && t.stride(1) == 1 &&
         t.cols() % kVec == 0 && t.stride(0) % kVec == 0 && reinterpret_cast<uintptr_t>(t.data()) % 16 == 0;
}
bool dense(const TensorView& t) { return t.rows() <= 1 || t.stride(0) == t.cols(); }
uint4* vecs(const TensorView& t) { return static_cast<uint4*>(t.data()); }
int64_t ld_vecs(const TensorView& t) { return t.stride(0) / kVec; }

// Rows of vpr vectors, u per thread: a warp-multiple block no wider than a row needs, at most 256.
struct VecLaunch {
  dim3 grid;
  unsigned threads;
};
VecLaunch vec_launch(int64_t rows, int64_t vpr, int u) {
  const int64_t threads = std::min<int64_t>(256, ceil_div(ceil_div(vpr, u), 32) * 32);
  const int64_t gx = std::min<int64_t>(ceil_div(vpr, u * threads), INT32_MAX);
  return {dim3(static_cast<unsigned>(gx), static_cast<unsigned>(std::min<int64_t>(rows, 65535))),
          static_cast<unsigned>(threads)};
}

// The fields the QK-norm + RoPE kernels' parameters share (QkParams, QkBwdParams), from the
// arguments' members of the same names.
template <class P, class Args>
void set_qk_common(P& p, const Args& args, int64_t rows) {
  p.gamma_q = args.gamma_q.data();
  p.gamma_k = args.gamma_k.data();
  p.gq_dt = static_cast<int>(args.gamma_q.dtype());
  p.gk_dt = static_cast<int>(args.gamma_k.dtype());
  p.positions = static_cast<const int*>(args.positions.data());
  p.freqs = static_cast<const float*>(args.freqs.data());
  p.rows = rows;
  p.hq = args.heads.heads_q;
  p.hkv = args.heads.heads_kv;
  p.hd = args.heads.head_dim;
}

// ---- lm_head_train / lm_head_backward (coda/ops/cross_entropy.hpp) -------------------------------

struct LmTrainParams {
  Mat2 anchor;            // [M, A] fp32
  Mat2 a, b;              // the GEMM operands (K-major), for the exact path
  const float* rstd;      // optional
  const int* targets;
  int ignore;
  int mean;
  int64_t rows, classes, k, anchor_cols, parts;
  float* shift;           // [M]
  const float* partials;  // [M, parts]
  float* lse;
  float* norm;            // [1]
  int* flagged;           // [M + 1]: count, rows
  Mat2 grad;              // [M, V]
  float* scale;           // u [M]
};

// One block: norm = 1 / count (mean) or 1, and the exact path's row count cleared.
__global__ void lm_norm_kernel(LmTrainParams p) {
  const float norm = target_norm(p.targets, p.rows, p.ignore, p.mean);
  if (threadIdx.x == 0) {
    p.norm[0] = norm;
    p.flagged[0] = 0;
  }
}

// One warp per row: the shift from the anchor's largest logit.
__global__ void lm_shift_kernel(LmTrainParams p) {
  const int64_t m = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (m >= p.rows) return;
  float mx = -INFINITY;
  for (int64_t c = lane; c < p.anchor_cols; c += 32) mx = epi::fmax_f(mx, at(p.anchor, m, c));
  for (int o = 16; o > 0; o >>= 1) mx = epi::fmax_f(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  if (lane == 0) p.shift[m] = lm_head_shift(mx * (p.rstd ? p.rstd[m] : 1.0f));
}

// One warp per row: S = sum of the granule sums; lse, u, the target's entry less S. A row whose S
// left fp32's range is queued for lm_exact_kernel instead.
__global__ void lm_finish_kernel(LmTrainParams p) {
  const int64_t m = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (m >= p.rows) return;
  float sum = 0.0f;
  for (int64_t t = lane; t < p.parts; t += 32) sum += p.partials[m * p.parts + t];
  sum = warp_sum(sum);
  if (lane != 0) return;
  const int t = p.targets[m];
  const bool ignored = t == p.ignore;
  if (!ignored && lm_head_sum_out_of_range(sum)) {
    p.flagged[1 + atomicAdd(p.flagged, 1)] = static_cast<int>(m);
    return;
  }
  p.lse[m] = lm_head_lse(p.shift[m], sum);
  p.scale[m] = ignored ? 0.0f : p.norm[0] / sum;
  if (!ignored && t >= 0 && t < p.classes) put(p.grad, m, t, at(p.grad, m, t) - sum);
}

// The exact path, one block per queued row (none in a sane model): the logits in fp32 from the
// operands (K-major bf16), twice (lse, then grad = softmax - onehot), u = norm. Reads all of b
// twice per row.
__device__ float lm_logit(const __nv_bfloat16* a, const __nv_bfloat16* b, int64_t k, float r, int lane) {
  float s = 0.0f;
  for (int64_t j = lane; j < k; j += 32) s += __bfloat162float(a[j]) * __bfloat162float(b[j]);
  return warp_sum(s) * r;
}
__global__ void __launch_bounds__(256) lm_exact_kernel(LmTrainParams p) {
  __shared__ float wmax[8], wsum[8];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  const auto* a = static_cast<const __nv_bfloat16*>(p.a.p);
  const auto* b = static_cast<const __nv_bfloat16*>(p.b.p);
  for (int i = blockIdx.x; i < p.flagged[0]; i += gridDim.x) {
    const int64_t m = p.flagged[1 + i];
    const float r = p.rstd ? p.rstd[m] : 1.0f;
    float mx = -INFINITY, sum = 0.0f;
    for (int64_t v = warp; v < p.classes; v += warps) {
      const float x = lm_logit(a + m * p.a.ld, b + v * p.b.ld, p.k, r, lane);
      const float nm = fmaxf(mx, x);
      sum = sum * expf(mx - nm) + expf(x - nm);
      mx = nm;
    }
    if (lane == 0) wmax[warp] = mx, wsum[warp] = sum;
    __syncthreads();
    float all = -INFINITY, total = 0.0f;
    for (int w = 0; w < warps; ++w) all = fmaxf(all, wmax[w]);
    for (int w = 0; w < warps; ++w) total += wsum[w] * expf(wmax[w] - all);
    const float lse = all + logf(total);
    const int t = p.targets[m];
    for (int64_t v = warp; v < p.classes; v += warps) {
      const float x = lm_logit(a + m * p.a.ld, b + v * p.b.ld, p.k, r, lane);
      if (lane == 0) put(p.grad, m, v, expf(x - lse) - (v == t ? 1.0f : 0.0f));
    }
    if (threadIdx.x == 0) {
      p.lse[m] = lse;
      p.scale[m] = p.norm[0];
    }
    __syncthreads();
  }
}

// Backward: s = dloss u (rstd) per row; scaled_a = s a (8 values per vector) when asked.
template <class T>
__global__ void __launch_bounds__(256) lm_scale_vec_kernel(const float* u, const float* rstd, float dloss,
                                                           const float* dloss_ptr, float* s_out, const uint4* a,
                                                           int64_t lda, uint4* sa, int64_t ldsa, int64_t rows,
                                                           int64_t vpr) {
  const float dl = dloss_ptr ? *dloss_ptr : dloss;
  for (int64_t m = blockIdx.x; m < rows; m += gridDim.x) {
    const float s = lm_head_row_scale(dl, u[m], rstd ? rstd[m] : 1.0f);
    if (threadIdx.x == 0) s_out[m] = s;
    if (!sa) continue;
    for (int64_t c = threadIdx.x; c < vpr; c += blockDim.x) {
      float f[kVec];
      unpack8<T>(a[m * lda + c], f);
      CODA_UNROLL
      for (int i = 0; i < kVec; ++i) f[i] *= s;
      sa[m * ldsa + c] = pack8<T>(f);
    }
  }
}
__global__ void lm_scale_kernel(const float* u, const float* rstd, float dloss, const float* dloss_ptr, float* s_out,
                                Mat2 a, Mat2 sa, int64_t rows, int64_t k) {
  const float dl = dloss_ptr ? *dloss_ptr : dloss;
  for (int64_t m = blockIdx.x; m < rows; m += gridDim.x) {
    const float s = lm_head_row_scale(dl, u[m], rstd ? rstd[m] : 1.0f);
    if (threadIdx.x == 0) s_out[m] = s;
    if (!sa.p) continue;
    for (int64_t j = threadIdx.x; j < k; j += blockDim.x) put(sa, m, j, s * at(a, m, j));
  }
}

}  // namespace

// ---- entries --------------------------------------------------------------------------------------------

Status rms_finish(const RmsFinishArgs& args, cudaStream_t stream) {
  CODA_TRY(validate(args));
  return row_finish("rms_finish", args.partials, args.rstd_out, 0, 1.0f / static_cast<float>(args.dim), args.eps,
                    stream);
}

Status row_sum_finish(const RowSumFinishArgs& args, cudaStream_t stream) {
  CODA_TRY(validate(args));
  return row_finish("row_sum_finish", args.partials, args.out, 1, args.scale, 0.0f, stream);
}

Status col_sum_finish(const ColSumFinishArgs& args, cudaStream_t stream) {
  const char* op = "col_sum_finish";
  CODA_TRY(validate(args));
  const int64_t cols = args.partials.cols();
  if (cols == 0) return {};
  CODA_TRY(device_prologue(op, {{"partials", args.partials}, {"out", args.out}}));
  col_finish_kernel<<<blocks_for(cols, 32), 32 * kColFinishGroups, 0, stream>>>(
      mat_of(args.partials), args.partials.rows(), cols, mat_of(args.out));
  return launch_status(op);
}

Status lse_finish(const LseFinishArgs& args, cudaStream_t stream) {
  CODA_TRY(validate(args));
  return row_finish("lse_finish", args.partials, args.lse_out, 2, 0.0f, 0.0f, stream);
}

Status cross_entropy(const CrossEntropyArgs& args, cudaStream_t stream) {
  const char* op = "cross_entropy";
  CODA_TRY(validate(args));
  CODA_TRY(device_prologue(op, {{"lse", args.lse}, {"target_logit", args.target_logit}, {"targets", args.targets},
                                {"loss_out", args.loss_out}, {"row_loss_out", args.row_loss_out},
                                {"logits", args.logits}, {"dlogits_out", args.dlogits_out},
                                {"zdz_out", args.zdz_out}}));
  CeParams p{};
  p.lse = static_cast<const float*>(args.lse.data());
  p.target_logit = static_cast<const float*>(args.target_logit.data());
  p.targets = static_cast<const int*>(args.targets.data());
  p.rows = args.lse.rows();
  p.ignore = args.ignore_index;
  p.mean = args.reduction == Reduction::kMean;
  p.loss = static_cast<float*>(args.loss_out.data());
  p.row_loss = static_cast<float*>(args.row_loss_out.data());
  p.logits = mat_of(args.logits);
  p.dlogits = mat_of(args.dlogits_out);
  p.classes = args.logits.defined() ? args.logits.cols() : 0;
  p.dloss = args.dloss;
  p.zdz = static_cast<float*>(args.zdz_out.data());
  p.zdz_scale = args.zdz_scale;
  // The gradient pass first: with dlogits in place of the logits, the loss pass reads neither.
  if (args.dlogits_out.defined() && p.rows > 0) {
    const int grid = static_cast<int>(std::min<int64_t>(p.rows, 4 * sm_count()));
    if (vec16(args.logits) && vec16(args.dlogits_out) && args.logits.dtype() == args.dlogits_out.dtype()) {
      with_half(args.logits.dtype(), [&](auto tag) {
        ce_grad_vec_kernel<typename decltype(tag)::type, 4><<<grid, 512, 0, stream>>>(p);
      });
    } else {
      ce_grad_kernel<<<grid, 512, 0, stream>>>(p);
    }
    CODA_TRY(launch_status(op));
  }
  ce_loss_kernel<<<1, 1024, 0, stream>>>(p);
  return launch_status(op);
}

Status qknorm_rope(const QkNormRopeArgs& args, cudaStream_t stream) {
  const char* op = "qknorm_rope";
  CODA_TRY(validate(args));
  const int64_t rows = args.qkv.rows();
  if (rows == 0) return {};
  CODA_TRY(device_prologue(op, {{"qkv", args.qkv}, {"sumsq", args.sumsq}, {"gamma_q", args.gamma_q},
                                {"gamma_k", args.gamma_k}, {"positions", args.positions}, {"freqs", args.freqs},
                                {"out", args.out}}));
  QkParams p{};
  p.qkv = mat_of(args.qkv);
  p.sumsq = mat_of(args.sumsq);
  p.out = mat_of(args.out);
  set_qk_common(p, args, rows);
  p.segs = qk_segments(p.hd, CODA_PARTIAL_COLS);
  p.n = args.heads.qkv_cols();
  p.eps = args.eps;
  qknorm_rope_kernel<<<static_cast<unsigned>(rows), 256, 0, stream>>>(p);
  return launch_status(op);
}

Status rope_backward(const RopeBackwardArgs& args, cudaStream_t stream) {
  const char* op = "rope_backward";
  CODA_TRY(validate(args));
  const int64_t rows = args.qkv.rows();
  if (rows == 0) return {};
  CODA_TRY(device_prologue(op, {{"qkv", args.qkv}, {"dqkv", args.dqkv}, {"positions", args.positions},
                                {"freqs", args.freqs}, {"dz_out", args.dz_out}, {"zdz_out", args.zdz_out}}));
  const int64_t n = args.heads.qkv_cols(), hd = args.heads.head_dim;
  float* zdz = static_cast<float*>(args.zdz_out.data());
  const auto* pos = static_cast<const int*>(args.positions.data());
  const auto* freqs = static_cast<const float*>(args.freqs.data());
  const DType t = args.qkv.dtype();
  if (vec16(args.qkv) && vec16(args.dqkv) && vec16(args.dz_out) && args.dqkv.dtype() == t &&
      args.dz_out.dtype() == t && hd % kVec == 0 && hd / 2 <= kRopeMaxPairs) {
    constexpr int V = 4;
    const int vr = static_cast<int>(n / kVec);
    const auto threads = static_cast<unsigned>(std::min<int64_t>(256, ceil_div(ceil_div(int64_t(vr), V), 32) * 32));
    with_half(t, [&](auto tag) {
      rope_backward_vec_kernel<typename decltype(tag)::type, V><<<static_cast<unsigned>(rows), threads, 0, stream>>>(
          vecs(args.qkv), ld_vecs(args.qkv), vecs(args.dqkv), ld_vecs(args.dqkv), vecs(args.dz_out),
          ld_vecs(args.dz_out), pos, freqs, vr, static_cast<int>(args.heads.rope_cols() / kVec), static_cast<int>(hd),
          zdz, args.zdz_scale);
    });
    return launch_status(op);
  }
  const auto threads = static_cast<unsigned>(std::min<int64_t>(256, ceil_div(n / 2, 32) * 32));
  rope_backward_kernel<<<static_cast<unsigned>(rows), threads, 0, stream>>>(
      mat_of(args.qkv), mat_of(args.dqkv), mat_of(args.dz_out), static_cast<const int*>(args.positions.data()),
      static_cast<const float*>(args.freqs.data()), args.heads.head_dim, args.heads.rope_cols(), n,
      static_cast<float*>(args.zdz_out.data()), args.zdz_scale);
  return launch_status(op);
}

Status qknorm_rope_backward(const QkNormRopeBackwardArgs& args, cudaStream_t stream) {
  const char* op = "qknorm_rope_backward";
  CODA_TRY(validate(args));
  // The kernel's per-warp dgamma sums (2 head_dim floats a warp) live in at most 48 KiB of shared
  // memory (no opt-in): up to 8 warps a block, fewer for a wide head, one at the least.
  constexpr int64_t kSmemBytes = 48 * 1024, kMaxWarps = 8;
  const int64_t hd = args.heads.head_dim, warp_bytes = 2 * hd * static_cast<int64_t>(sizeof(float));
  if (warp_bytes > kSmemBytes)
    return Status::not_supported(std::string(op) + ": argument 'heads.head_dim' must be <= " +
                                 std::to_string(kSmemBytes / 8) + " on the GPU (a warp's dgamma sums in shared " +
                                 "memory), got " + std::to_string(hd));
  const int64_t rows = args.qkv.rows();
  if (rows == 0) return {};
  CODA_TRY(device_prologue(op, {{"qkv", args.qkv}, {"gamma_q", args.gamma_q}, {"gamma_k", args.gamma_k},
                                {"positions", args.positions}, {"freqs", args.freqs}, {"dout", args.dout},
                                {"dqkv_out", args.dqkv_out}, {"dgamma_q_partials", args.dgamma_q_partials},
                                {"dgamma_k_partials", args.dgamma_k_partials}, {"zdz_out", args.zdz_out}}));
  QkBwdParams p{};
  p.qkv = mat_of(args.qkv);
  p.dout = mat_of(args.dout);
  p.dqkv = mat_of(args.dqkv_out);
  p.dgamma_q = mat_of(args.dgamma_q_partials);
  p.dgamma_k = mat_of(args.dgamma_k_partials);
  p.zdz = static_cast<float*>(args.zdz_out.data());
  p.zdz_scale = args.zdz_scale;
  set_qk_common(p, args, rows);
  p.n = args.heads.qkv_cols();
  p.eps = args.eps;
  const int64_t warps = std::min(kMaxWarps, kSmemBytes / warp_bytes);
  const auto grid = static_cast<unsigned>(ceil_div(rows, CODA_PARTIAL_ROWS));
  qknorm_rope_backward_kernel<<<grid, static_cast<unsigned>(32 * warps), static_cast<size_t>(warps * warp_bytes),
                                stream>>>(p);
  return launch_status(op);
}

Status lm_head_loss(const LmHeadLossArgs& args, cudaStream_t stream) {
  LmHeadLossPlan plan;
  CODA_TRY(plan_lm_head_loss(args, &plan));
  CODA_TRY(gemm_lse(plan.lse, stream));
  CODA_TRY(lse_finish(plan.finish, stream));
  return cross_entropy(plan.ce, stream);
}

Status lm_head_train(const LmHeadTrainArgs& args, cudaStream_t stream) {
  const char* op = "lm_head_train";
  LmHeadTrainPlan plan;
  CODA_TRY(plan_lm_head_train(args, &plan));
  const int64_t rows = args.a.rows(), v = args.b.rows();
  if (rows == 0) return cross_entropy(plan.ce, stream);
  CODA_TRY(device_prologue(op, {{"a", args.a}, {"b", args.b}, {"rstd", args.rstd}, {"targets", args.targets},
                                {"loss_out", args.loss_out}, {"row_loss_out", args.row_loss_out},
                                {"lse_out", args.lse_out}, {"grad_out", args.grad_out},
                                {"grad_scale_out", args.grad_scale_out}, {"workspace", plan.exp.shift}}));
  // The fused GEMM's rules, before anything runs.
  if (!k_major(args.a) || !k_major(args.b))
    return Status::not_supported(std::string(op) + ": arguments 'a' [M, K] and 'b' [V, K] must be row-major (unit "
                                 "stride along K) on the GPU");
  LmTrainParams p{};
  p.anchor = mat_of(plan.anchor);
  p.a = mat_of(args.a);
  p.b = mat_of(args.b);
  p.rstd = static_cast<const float*>(args.rstd.data());
  p.targets = static_cast<const int*>(args.targets.data());
  p.ignore = args.ignore_index;
  p.mean = args.reduction == Reduction::kMean;
  p.rows = rows;
  p.classes = v;
  p.k = args.a.cols();
  p.anchor_cols = plan.anchor.cols();
  p.parts = plan.exp.sum_partials.cols();
  p.shift = static_cast<float*>(plan.exp.shift.data());
  p.partials = static_cast<const float*>(plan.exp.sum_partials.data());
  p.lse = static_cast<float*>(plan.lse.data());
  p.norm = static_cast<float*>(plan.norm.data());
  p.flagged = static_cast<int*>(plan.flagged.data());
  p.grad = mat_of(args.grad_out);
  p.scale = static_cast<float*>(args.grad_scale_out.data());
  // 1. The anchor's logits and the per-row shift; norm.
  CODA_TRY(gemm({args.a, plan.anchor_b, {}, plan.anchor}, stream));
  lm_norm_kernel<<<1, 1024, 0, stream>>>(p);
  lm_shift_kernel<<<blocks_for(rows * 32, 256), 256, 0, stream>>>(p);
  CODA_TRY(launch_status(op));
  // 2. E, its granule sums, the target logits: the fused GEMM.
  CODA_TRY(gemm_lse_exp(plan.exp, stream));
  // 3. lse, u, the target's entry; rows out of range recomputed exactly.
  lm_finish_kernel<<<blocks_for(rows * 32, 256), 256, 0, stream>>>(p);
  lm_exact_kernel<<<static_cast<unsigned>(std::min<int64_t>(rows, 2 * sm_count())), 256, 0, stream>>>(p);
  CODA_TRY(launch_status(op));
  // 4. The loss from lse and the target logits.
  return cross_entropy(plan.ce, stream);
}

Status lm_head_backward(const LmHeadBackwardArgs& args, cudaStream_t stream) {
  const char* op = "lm_head_backward";
  LmHeadBackwardPlan plan;
  CODA_TRY(plan_lm_head_backward(args, &plan));
  const int64_t rows = args.a.rows(), k = args.a.cols();
  if (!args.da_out.defined() && !args.db_out.defined()) return {};
  CODA_TRY(device_prologue(op, {{"a", args.a}, {"b", args.b}, {"rstd", args.rstd}, {"grad", args.grad},
                                {"grad_scale", args.grad_scale}, {"da_out", args.da_out}, {"db_out", args.db_out},
                                {"workspace", plan.row_scale}}));
  if (rows > 0) {
    const auto* u = static_cast<const float*>(args.grad_scale.data());
    const auto* rstd = static_cast<const float*>(args.rstd.data());
    auto* s = static_cast<float*>(plan.row_scale.data());
    const bool with_a = args.db_out.defined();
    const auto grid = static_cast<unsigned>(std::min<int64_t>(rows, 8 * sm_count()));
    if (vec16(args.a) && vec16(plan.scaled_a) && args.a.dtype() == plan.scaled_a.dtype()) {
      with_half(args.a.dtype(), [&](auto tag) {
        lm_scale_vec_kernel<typename decltype(tag)::type><<<grid, 256, 0, stream>>>(
            u, rstd, args.dloss, args.dloss_ptr, s, vecs(args.a), ld_vecs(args.a),
            with_a ? vecs(plan.scaled_a) : nullptr, ld_vecs(plan.scaled_a), rows, k / kVec);
      });
    } else {
      lm_scale_kernel<<<grid, 256, 0, stream>>>(u, rstd, args.dloss, args.dloss_ptr, s, mat_of(args.a),
                                                with_a ? mat_of(plan.scaled_a) : Mat2{nullptr, 0, 0}, rows, k);
    }
    CODA_TRY(launch_status(op));
  }
  if (args.da_out.defined()) CODA_TRY(gemm_row_scale(args.grad, args.b.transposed(), plan.row_scale, args.da_out, stream));
  if (args.db_out.defined())
    CODA_TRY(gemm({args.grad.transposed(), plan.scaled_a.transposed(), {}, args.db_out}, stream));
  return {};
}

Status interleave_gate_up(const TensorView& gate, const TensorView& up, const TensorView& out, cudaStream_t stream) {
  const char* op = "interleave_gate_up";
  CODA_TRY(validate_interleave_gate_up(gate, up, out));
  const int64_t f = gate.rows(), k = gate.cols();
  if (f == 0 || k == 0) return {};
  CODA_TRY(device_prologue(op, {{"gate", gate}, {"up", up}, {"out", out}}));
  gather_rows_kernel<<<blocks_for(2 * f * k, 256), 256, 0, stream>>>(mat_of(gate), mat_of(up), mat_of(out), 2 * f, k,
                                                                     0, 0, 0);
  return launch_status(op);
}

Status permute_rotate_half_to_interleaved(const TensorView& w, const HeadDims& heads, const TensorView& out,
                                          cudaStream_t stream) {
  const char* op = "permute_rotate_half_to_interleaved";
  CODA_TRY(validate_permute_rotate_half_to_interleaved(w, heads, out));
  const int64_t n3 = heads.qkv_cols(), k = w.cols();
  if (k == 0) return {};
  CODA_TRY(device_prologue(op, {{"w", w}, {"out", out}}));
  gather_rows_kernel<<<blocks_for(n3 * k, 256), 256, 0, stream>>>(mat_of(w), mat_of(w), mat_of(out), n3, k, 1,
                                                                  heads.head_dim, heads.rope_cols());
  return launch_status(op);
}

namespace unfused {

Status add(const TensorView& a, const TensorView& b, const TensorView& out, cudaStream_t stream) {
  ArgCheck check("unfused::add");
  check.tensor("a", a, {-1, -1}, kStoreTypes, Layout::kAny);
  if (!check.ok()) return check.status();
  check.tensor("b", b, {a.rows(), a.cols()}, kStoreTypes, Layout::kAny)
      .tensor("out", out, {a.rows(), a.cols()}, kStoreTypes, Layout::kAny);
  CODA_TRY(check.status());
  const int64_t n = a.rows() * a.cols();
  if (n == 0) return {};
  if (vec16(a) && vec16(b) && vec16(out) && b.dtype() == a.dtype() && out.dtype() == a.dtype()) {
    const bool flat = dense(a) && dense(b) && dense(out);  // one long row
    const int64_t rows = flat ? 1 : a.rows(), vpr = (flat ? n : a.cols()) / kVec;
    const VecLaunch l = vec_launch(rows, vpr, kAddVecs);
    with_half(a.dtype(), [&](auto tag) {
      add_vec_kernel<typename decltype(tag)::type, kAddVecs><<<l.grid, l.threads, 0, stream>>>(
          vecs(a), ld_vecs(a), vecs(b), ld_vecs(b), vecs(out), ld_vecs(out), rows, vpr);
    });
    return launch_status("unfused::add");
  }
  add_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(mat_of(a), mat_of(b), mat_of(out), a.rows(), a.cols());
  return launch_status("unfused::add");
}

Status rmsnorm(const TensorView& x, const TensorView& w, float eps, const TensorView& out, const TensorView& rstd_out,
               cudaStream_t stream) {
  ArgCheck check("unfused::rmsnorm");
  check.tensor("x", x, {-1, -1}, kStoreTypes, Layout::kAny);
  if (!check.ok()) return check.status();
  check.tensor("w", w, {x.cols()}, kFloatTypes)
      .tensor("out", out, {x.rows(), x.cols()}, kStoreTypes, Layout::kAny)
      .optional("rstd_out", rstd_out, {x.rows()}, kFP32Only);
  CODA_TRY(check.status());
  if (x.rows() == 0) return {};
  const int64_t vpr = x.cols() / kVec;
  if (vec16(x) && vec16(out) && out.dtype() == x.dtype() && vpr > 0 && vpr <= 8 * 512 &&
      x.rows() <= INT32_MAX && reinterpret_cast<uintptr_t>(w.data()) % 16 == 0) {
    // V vectors per thread, at most 512 threads: rows up to 16384 (V = 4) or 32768 (V = 8) values.
    const int v = vpr <= 4 * 512 ? 4 : 8;
    const auto threads = static_cast<unsigned>(ceil_div(ceil_div(vpr, v), 32) * 32);
    const auto grid = static_cast<unsigned>(x.rows());
    auto* rs = static_cast<float*>(rstd_out.data());
    with_half(x.dtype(), [&](auto tx) {
      using T = typename decltype(tx)::type;
      auto launch = [&](auto tw) {
        using W = typename decltype(tw)::type;
        const W* wp = static_cast<const W*>(w.data());
        if (v == 4)
          rmsnorm_vec_kernel<T, W, 4><<<grid, threads, 0, stream>>>(vecs(x), ld_vecs(x), wp, eps, vecs(out),
                                                                    ld_vecs(out), rs, int(vpr), x.cols());
        else
          rmsnorm_vec_kernel<T, W, 8><<<grid, threads, 0, stream>>>(vecs(x), ld_vecs(x), wp, eps, vecs(out),
                                                                    ld_vecs(out), rs, int(vpr), x.cols());
      };
      if (w.dtype() == DType::kFP32) launch(Tag<float>{});
      else with_half(w.dtype(), launch);
    });
    return launch_status("unfused::rmsnorm");
  }
  rmsnorm_kernel<<<static_cast<unsigned>(x.rows()), 256, 0, stream>>>(
      mat_of(x), w.data(), static_cast<int>(w.dtype()), eps, mat_of(out), static_cast<float*>(rstd_out.data()),
      x.cols());
  return launch_status("unfused::rmsnorm");
}

Status swiglu(const TensorView& z, const TensorView& o, cudaStream_t stream) {
  ArgCheck check("unfused::swiglu");
  check.tensor("z", z, {-1, -1}, kStoreTypes, Layout::kAny);
  if (!check.ok()) return check.status();
  check.rule(z.cols() % 2 == 0, "z", "must have an even number of columns (interleaved gate/up)")
      .tensor("o", o, {z.rows(), z.cols() / 2}, kStoreTypes, Layout::kAny);
  CODA_TRY(check.status());
  const int64_t n = z.rows() * (z.cols() / 2);
  if (n == 0) return {};
  if (vec16(z) && vec16(o) && o.dtype() == z.dtype()) {  // o: 8 | F, so z: 16 | 2F
    const bool flat = dense(z) && dense(o);                // one long row
    const int64_t rows = flat ? 1 : z.rows(), vpr = (flat ? n : o.cols()) / kVec;
    const VecLaunch l = vec_launch(rows, vpr, kSwigluVecs);
    with_half(z.dtype(), [&](auto tag) {
      swiglu_vec_kernel<typename decltype(tag)::type, kSwigluVecs><<<l.grid, l.threads, 0, stream>>>(
          vecs(z), ld_vecs(z), vecs(o), ld_vecs(o), rows, vpr);
    });
    return launch_status("unfused::swiglu");
  }
  swiglu_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(mat_of(z), mat_of(o), z.rows(), z.cols() / 2);
  return launch_status("unfused::swiglu");
}

Status rope(const TensorView& qkv, const TensorView& positions, const TensorView& freqs, const HeadDims& heads,
            cudaStream_t stream) {
  ArgCheck check("unfused::rope");
  check.tensor("qkv", qkv, {-1, heads.qkv_cols()}, kStoreTypes, Layout::kAny);
  if (!check.ok()) return check.status();
  check.tensor("positions", positions, {qkv.rows()}, kInt32Only)
      .tensor("freqs", freqs, {heads.head_dim / 2}, kFP32Only)
      .rule(heads.head_dim % 2 == 0, "heads", "must have an even head_dim");
  CODA_TRY(check.status());
  const int64_t n = qkv.rows() * (heads.rope_cols() / 2);
  if (n == 0) return {};
  const int64_t hd = heads.head_dim, vr = heads.rope_cols() / kVec;
  if (vec16(qkv) && hd >= kVec && hd % kVec == 0 && hd / 2 <= kRopeMaxPairs && vr <= INT32_MAX / 2 &&
      qkv.rows() <= INT32_MAX) {
    const auto threads = static_cast<unsigned>(std::min<int64_t>(256, ceil_div(ceil_div(vr, kRopeVecs), 32) * 32));
    with_half(qkv.dtype(), [&](auto tag) {
      rope_vec_kernel<typename decltype(tag)::type, kRopeVecs>
          <<<static_cast<unsigned>(qkv.rows()), threads, 0, stream>>>(
              vecs(qkv), ld_vecs(qkv), static_cast<const int*>(positions.data()),
              static_cast<const float*>(freqs.data()), static_cast<int>(vr), static_cast<int>(hd));
    });
    return launch_status("unfused::rope");
  }
  rope_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(mat_of(qkv), static_cast<const int*>(positions.data()),
                                                      static_cast<const float*>(freqs.data()), qkv.rows(),
                                                      heads.head_dim, heads.rope_cols());
  return launch_status("unfused::rope");
}

Status rmsnorm_backward(const TensorView& dy, const TensorView& x, const TensorView& rstd, const TensorView& zdz,
                        const TensorView& w, const TensorView& dres, const TensorView& dx_out, const TensorView& y_out,
                        const TensorView& dw_partials, cudaStream_t stream) {
  const char* op = "unfused::rmsnorm_backward";
  ArgCheck check(op);
  check.tensor("dy", dy, {-1, -1}, kStoreTypes, Layout::kAny);
  if (!check.ok()) return check.status();
  const int64_t m = dy.rows(), n = dy.cols(), granules = ceil_div(m, CODA_PARTIAL_ROWS);
  check.tensor("x", x, {m, n}, kStoreTypes, Layout::kAny)
      .tensor("rstd", rstd, {m}, kFP32Only)
      .tensor("zdz", zdz, {m}, kFP32Only)
      .tensor("w", w, {n}, kFloatTypes)
      .optional("dres", dres, {m, n}, kStoreTypes, Layout::kAny)
      .tensor("dx_out", dx_out, {m, n}, kStoreTypes, Layout::kAny)
      .optional("y_out", y_out, {m, n}, kStoreTypes, Layout::kAny)
      .tensor("dw_partials", dw_partials, {granules, n}, kFP32Only, Layout::kAny)
      .no_alias({{"dx_out", dx_out}, {"y_out", y_out}, {"dw_partials", dw_partials}},
                {{"dy", dy}, {"x", x}, {"rstd", rstd}, {"zdz", zdz}, {"w", w}, {"dres", dres}},
                {{"dx_out", "dres"}});
  CODA_TRY(check.status());
  if (m == 0 || n == 0) return {};
  CODA_TRY(device_prologue(op, {{"dy", dy}, {"x", x}, {"rstd", rstd}, {"zdz", zdz}, {"w", w}, {"dres", dres},
                                {"dx_out", dx_out}, {"y_out", y_out}, {"dw_partials", dw_partials}}));
  RmsBwdParams p{};
  p.dy = mat_of(dy);
  p.x = mat_of(x);
  p.dres = mat_of(dres);
  p.dx = mat_of(dx_out);
  p.y = mat_of(y_out);
  p.dw = mat_of(dw_partials);
  p.rstd = static_cast<const float*>(rstd.data());
  p.zdz = static_cast<const float*>(zdz.data());
  p.w = w.data();
  p.wdt = static_cast<int>(w.dtype());
  p.rows = m;
  p.cols = n;
  p.granules = granules;
  constexpr int kThreads = 128;
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(ceil_div(n, kThreads), INT32_MAX)),
                  static_cast<unsigned>(std::min<int64_t>(granules, 65535)));
  rmsnorm_backward_kernel<<<grid, kThreads, 0, stream>>>(p);
  return launch_status(op);
}

Status swiglu_backward(const TensorView& dout, const TensorView& z, const TensorView& dz_out, const TensorView& o_out,
                       const TensorView& zdz_partials, cudaStream_t stream) {
  const char* op = "unfused::swiglu_backward";
  ArgCheck check(op);
  check.tensor("dout", dout, {-1, -1}, kStoreTypes, Layout::kAny);
  if (!check.ok()) return check.status();
  const int64_t m = dout.rows(), f = dout.cols(), granules = ceil_div(f, CODA_PARTIAL_COLS);
  check.tensor("z", z, {m, 2 * f}, kStoreTypes, Layout::kAny)
      .tensor("dz_out", dz_out, {m, 2 * f}, kStoreTypes, Layout::kAny)
      .optional("o_out", o_out, {m, f}, kStoreTypes, Layout::kAny)
      .optional("zdz_partials", zdz_partials, {m, granules}, kFP32Only, Layout::kAny)
      .no_alias({{"dz_out", dz_out}, {"o_out", o_out}, {"zdz_partials", zdz_partials}},
                {{"dout", dout}, {"z", z}});
  CODA_TRY(check.status());
  if (m == 0 || f == 0) return {};
  CODA_TRY(device_prologue(op, {{"dout", dout}, {"z", z}, {"dz_out", dz_out}, {"o_out", o_out},
                                {"zdz_partials", zdz_partials}}));
  SwiBwdParams p{};
  p.dout = mat_of(dout);
  p.z = mat_of(z);
  p.dz = mat_of(dz_out);
  p.o = mat_of(o_out);
  p.zdz = mat_of(zdz_partials);
  p.rows = m;
  p.f = f;
  p.granules = granules;
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(m, INT32_MAX)),
                  static_cast<unsigned>(std::min<int64_t>(granules, 65535)));
  swiglu_backward_kernel<<<grid, CODA_PARTIAL_COLS, 0, stream>>>(p);
  return launch_status(op);
}

}  // namespace unfused
}  // namespace coda
