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
  const TensorView y1 = be.scratch(t, m, d.ffn);
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

BlockCheckResult check_llama3_block_gpu(const Llama3Dims& dims, uint64_t seed, bool unfused, double eps,
                                        bool backward) {
  if (unfused && backward) {
    BlockCheckResult r;
    r.error = "check_llama3_block_gpu: the unfused GPU path has no backward yet";
    return r;
  }
  return check_llama3_block(
      dims, seed,
      [unfused](const Llama3Dims& d, const Llama3Weights& hw, const Llama3Activations& ha,
                const Llama3Grads* hg) -> Status {
        try {
          dev::Mirror mirror;
          Llama3Weights w = hw;
          for (TensorView* v : {&w.wo, &w.wgu, &w.wdown, &w.wqkv, &w.norm0, &w.norm1, &w.freqs}) *v = mirror.map(*v);
          Llama3Activations a = ha;
          for (TensorView* v : {&a.x0, &a.y0, &a.positions, &a.x1, &a.x2, &a.z1, &a.qkv, &a.r1, &a.r2})
            *v = mirror.map(*v);
          GpuBackend be;
          if (unfused) {
            cublasHandle_t h = nullptr;
            if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return Status::cuda_error("cublasCreate failed");
            const Status s = llama3_forward_unfused(be, h, d, w, a);
            cublasDestroy(h);
            CODA_TRY(s);
          } else {
            CODA_TRY(llama3_forward(be, d, w, a));
            if (hg) {
              Llama3Grads g = *hg;
              for (TensorView* v : {&g.dx2, &g.dqkv, &g.dx0, &g.dy0, &g.dwo, &g.dwgu, &g.dwdown, &g.dwqkv, &g.dnorm0,
                                    &g.dnorm1})
                *v = mirror.map(*v);
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
      backward, eps);
}

}  // namespace coda
