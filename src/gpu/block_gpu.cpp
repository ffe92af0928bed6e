// The LLaMA-3 block on the GPU: the fused schedule's backend, the unfused path and the check.
#include <cublas_v2.h>

#include "coda/block/gpu_backend.hpp"
#include "coda/device_util.hpp"

namespace coda {

GpuBackend::~GpuBackend() {
  for (Slot& s : slots_) cudaFree(s.ptr);
}

TensorView GpuBackend::scratch(DType dtype, int64_t rows, int64_t cols) {
  const int64_t c = cols == 0 ? 1 : cols;
  const int64_t per16 = 16 / static_cast<int64_t>(dtype_size(dtype));
  // Tile tensors get 16-byte-aligned rows (TMA); fp32 scratch is partials, which are dense.
  const int64_t ld = dtype == DType::kFP32 ? c : (c + per16 - 1) / per16 * per16;
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(rows, 1) * ld) * dtype_size(dtype);
  if (next_ == slots_.size()) slots_.push_back({});
  Slot& s = slots_[next_++];
  if (s.bytes < bytes) {
    cudaFree(s.ptr);
    s = {};
    if (cudaMalloc(&s.ptr, bytes) != cudaSuccess) {
      cudaGetLastError();
      return TensorView();  // the operator that receives it reports the missing argument
    }
    s.bytes = bytes;
    cudaMemset(s.ptr, 0xff, bytes);  // poison: an unwritten scratch reads as NaN
  }
  return cols == 0 ? TensorView::vector(s.ptr, dtype, rows) : TensorView::matrix(s.ptr, dtype, rows, cols, ld);
}

Status llama3_forward_unfused(GpuBackend& be, void* cublas_handle, const Llama3Dims& d, const Llama3Weights& w,
                              const Llama3Activations& act) {
  CODA_TRY(validate(d, w, act));
  const int64_t m = d.tokens;
  if (m == 0) return {};
  auto h = static_cast<cublasHandle_t>(cublas_handle);
  cudaStream_t s = be.stream();
  if (cublasSetStream(h, s) != CUBLAS_STATUS_SUCCESS) return Status::cuda_error("llama3_forward_unfused: cublasSetStream");
  const DType t = act.x1.dtype();
  auto mm = [&](const TensorView& a, const TensorView& b, const TensorView& out) -> Status {
    try {
      dev::cublas_gemm(h, a, b, out, 1.0f, 0.0f, s);
    } catch (const std::exception& e) {
      return Status::cuda_error(std::string("llama3_forward_unfused: ") + e.what());
    }
    return {};
  };
  const TensorView tmp = be.scratch(t, m, d.hidden);
  const TensorView n1 = be.scratch(t, m, d.hidden);
  const TensorView y1 = act.y1.defined() ? act.y1 : be.scratch(t, m, d.ffn);
  const TensorView n2 = be.scratch(t, m, d.hidden);
  CODA_TRY(mm(act.y0, w.wo, tmp));
  CODA_TRY(unfused::add(tmp, act.x0, act.x1, s));
  CODA_TRY(unfused::rmsnorm(act.x1, w.norm0, d.eps, n1, act.r1, s));
  CODA_TRY(mm(n1, w.wgu, act.z1));
  CODA_TRY(unfused::swiglu(act.z1, y1, s));
  CODA_TRY(mm(y1, w.wdown, tmp));
  CODA_TRY(unfused::add(tmp, act.x1, act.x2, s));
  CODA_TRY(unfused::rmsnorm(act.x2, w.norm1, d.eps, n2, act.r2, s));
  CODA_TRY(mm(n2, w.wqkv, act.qkv));
  return unfused::rope(act.qkv, act.positions, w.freqs, d.heads, s);
}

Status llama3_backward_unfused(GpuBackend& be, void* cublas_handle, const Llama3Dims& d, const Llama3Weights& w,
                               const Llama3Activations& act, const Llama3Grads& g) {
  CODA_TRY(validate(d, w, act, g));
  const char* op = "llama3_backward_unfused";
  cudaStream_t s = be.stream();
  const int64_t m = d.tokens;
  if (m == 0) {
    // No tokens: the weight and norm gradients are zeros (as llama3_backward gives); cuBLAS is not
    // asked for a K = 0 product.
    for (const TensorView* v : {&g.dwo, &g.dwgu, &g.dwdown, &g.dwqkv})
      if (cudaMemset2DAsync(v->data(), v->stride(0) * dtype_size(v->dtype()), 0, v->cols() * dtype_size(v->dtype()),
                            v->rows(), s) != cudaSuccess)
        return Status::cuda_error(std::string(op) + ": cudaMemset2DAsync: " + cudaGetErrorString(cudaGetLastError()));
    for (const TensorView* v : {&g.dnorm0, &g.dnorm1})
      if (cudaMemsetAsync(v->data(), 0, v->rows() * dtype_size(v->dtype()), s) != cudaSuccess)
        return Status::cuda_error(std::string(op) + ": cudaMemsetAsync: " + cudaGetErrorString(cudaGetLastError()));
    return {};
  }
  auto h = static_cast<cublasHandle_t>(cublas_handle);
  if (cublasSetStream(h, s) != CUBLAS_STATUS_SUCCESS) return Status::cuda_error(std::string(op) + ": cublasSetStream");
  // D = a b^T through cuBLAS (fp32 accumulation, one rounding to D's dtype); transposed views are
  // passed as they are, cublas_gemm picks the operation from the strides.
  auto mm = [&](const TensorView& a, const TensorView& b, const TensorView& out) -> Status {
    try {
      dev::cublas_gemm(h, a, b, out, 1.0f, 0.0f, s);
    } catch (const std::exception& e) {
      return Status::cuda_error(std::string(op) + ": " + e.what());
    }
    return {};
  };
  const Grain grain = be.grain();
  const DType t = act.x1.dtype();
  const float inv_d = 1.0f / static_cast<float>(d.hidden);
  const int64_t n3 = d.heads.qkv_cols();
  // The fused schedule's scratch, plus the dgrad GEMM outputs the fused epilogues never store
  // (dy2, do1, dy1), in the activations' dtype as an unfused framework would keep them.
  const TensorView dz2 = be.scratch(t, m, n3);
  const TensorView c2 = be.scratch(DType::kFP32, m, 0);
  const TensorView dy2 = be.scratch(t, m, d.hidden);
  const TensorView dx = be.scratch(t, m, d.hidden);
  const TensorView n2 = be.scratch(t, m, d.hidden);
  const TensorView q2 = be.scratch(DType::kFP32, ceil_div(m, grain.rows), d.hidden);
  const TensorView do1 = be.scratch(t, m, d.ffn);
  const TensorView dz1 = be.scratch(t, m, 2 * d.ffn);
  const bool keep_y1 = act.y1.defined();  // kept by the forward: read, not recomputed
  const TensorView y1 = keep_y1 ? act.y1 : be.scratch(t, m, d.ffn);
  const TensorView pz = be.scratch(DType::kFP32, m, ceil_div(d.ffn, grain.cols));
  const TensorView c1 = be.scratch(DType::kFP32, m, 0);
  const TensorView dy1 = be.scratch(t, m, d.hidden);
  const TensorView n1 = be.scratch(t, m, d.hidden);
  const TensorView q1 = be.scratch(DType::kFP32, ceil_div(m, grain.rows), d.hidden);

  // qkv = rope(r2 * h2 Wqkv^T): un-rotate, ZdZ2 = (1/d) sum qkv dqkv (the fused path's own kernel)
  CODA_TRY(rope_backward({act.qkv, g.dqkv, act.positions, w.freqs, d.heads, dz2, c2, inv_d}, s));
  // dx = RMSNorm-backward(dz2 Wqkv) + dx2; n2 = RMSNorm(x2) recomputed; dnorm1 partials
  CODA_TRY(mm(dz2, w.wqkv.transposed(), dy2));
  CODA_TRY(unfused::rmsnorm_backward(dy2, act.x2, act.r2, c2, w.norm1, g.dx2, dx, n2, q2, s));
  CODA_TRY(col_sum_finish({q2, g.dnorm1}, s));
  CODA_TRY(mm(dz2.transposed(), n2.transposed(), g.dwqkv));
  // dz1 = SwiGLU-backward(dx Wdown), ZdZ1 partials, y1 recomputed unless the forward kept it
  CODA_TRY(mm(dx, w.wdown.transposed(), do1));
  CODA_TRY(unfused::swiglu_backward(do1, act.z1, dz1, keep_y1 ? TensorView() : y1, pz, s));
  CODA_TRY(row_sum_finish({pz, c1, inv_d}, s));
  CODA_TRY(mm(dx.transposed(), y1.transposed(), g.dwdown));
  // dx0 = RMSNorm-backward(dz1 Wgu) + dx; n1 recomputed; dnorm0 partials
  CODA_TRY(mm(dz1, w.wgu.transposed(), dy1));
  CODA_TRY(unfused::rmsnorm_backward(dy1, act.x1, act.r1, c1, w.norm0, dx, g.dx0, n1, q1, s));
  CODA_TRY(col_sum_finish({q1, g.dnorm0}, s));
  CODA_TRY(mm(dz1.transposed(), n1.transposed(), g.dwgu));
  // x1 = y0 Wo^T + x0
  CODA_TRY(mm(g.dx0, w.wo.transposed(), g.dy0));
  return mm(g.dx0.transposed(), act.y0.transposed(), g.dwo);
}

BlockCheckResult check_llama3_block_gpu(const Llama3Dims& dims, uint64_t seed, bool unfused, double eps,
                                        bool backward, bool keep_y1) {
  return check_llama3_block(
      dims, seed,
      [unfused](const Llama3Dims& d, const Llama3Weights& hw, const Llama3Activations& ha,
                const Llama3Grads* hg) -> Status {
        try {
          dev::Mirror mirror;
          Llama3Weights w = hw;
          for (TensorView* v : {&w.wo, &w.wgu, &w.wdown, &w.wqkv, &w.norm0, &w.norm1, &w.freqs}) *v = mirror.map(*v);
          Llama3Activations a = ha;
          for (TensorView* v : {&a.x0, &a.y0, &a.positions, &a.x1, &a.x2, &a.z1, &a.qkv, &a.r1, &a.r2, &a.y1})
            if (v->defined()) *v = mirror.map(*v);
          Llama3Grads g;
          if (hg) {
            g = *hg;
            for (TensorView* v :
                 {&g.dx2, &g.dqkv, &g.dx0, &g.dy0, &g.dwo, &g.dwgu, &g.dwdown, &g.dwqkv, &g.dnorm0, &g.dnorm1})
              *v = mirror.map(*v);
          }
          GpuBackend be;
          if (unfused) {
            cublasHandle_t h = nullptr;
            if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return Status::cuda_error("cublasCreate failed");
            Status s = llama3_forward_unfused(be, h, d, w, a);
            if (s.ok() && hg) {
              be.reset();
              s = llama3_backward_unfused(be, h, d, w, a, g);
            }
            cublasDestroy(h);
            CODA_TRY(s);
          } else {
            CODA_TRY(llama3_forward(be, d, w, a));
            if (hg) {
              be.reset();
              CODA_TRY(llama3_backward(be, d, w, a, g));
            }
          }
          mirror.copy_back();
        } catch (const std::exception& e) {
          return Status::cuda_error(e.what());
        }
        return {};
      },
      backward, eps, keep_y1);
}

}  // namespace coda
