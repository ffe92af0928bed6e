// The LLaMA-3 block on the GPU: the fused schedule's backend (coda/block/llama3.hpp) and the
// unfused path (cuBLAS GEMMs + straightforward elementwise kernels), the cross-check and the
// `vs_unfused` baseline of the benchmarks.
#pragma once

#include <cuda_runtime_api.h>

#include <vector>

#include "coda/block/llama3.hpp"
#include "coda/gpu.hpp"
#include "coda/ref/block_check.hpp"

namespace coda {

// Scratch tensors are device allocations owned by the backend and reused across runs: call
// reset() before each schedule; the k-th scratch() request of a run gets the k-th buffer.
class GpuBackend {
 public:
  explicit GpuBackend(cudaStream_t stream = nullptr) : stream_(stream) {}
  ~GpuBackend();
  GpuBackend(const GpuBackend&) = delete;
  GpuBackend& operator=(const GpuBackend&) = delete;

  void reset() { next_ = 0; }
  Grain grain() const { return Grain{}; }
  TensorView scratch(DType dtype, int64_t rows, int64_t cols);
  cudaStream_t stream() const { return stream_; }

  Status gemm(const GemmArgs& a) { return coda::gemm(a, stream_); }
  Status gemm_residual_rmsnorm_partial(const ResidualRmsNormPartialArgs& a) {
    return coda::gemm_residual_rmsnorm_partial(a, stream_);
  }
  Status rms_finish(const RmsFinishArgs& a) { return coda::rms_finish(a, stream_); }
  Status gemm_swiglu(const SwigluArgs& a) { return coda::gemm_swiglu(a, stream_); }
  Status gemm_rope(const RopeArgs& a) { return coda::gemm_rope(a, stream_); }
  Status rope_backward(const RopeBackwardArgs& a) { return coda::rope_backward(a, stream_); }
  Status gemm_rmsnorm_backward(const RmsNormBackwardArgs& a) { return coda::gemm_rmsnorm_backward(a, stream_); }
  Status gemm_swiglu_backward(const SwigluBackwardArgs& a) { return coda::gemm_swiglu_backward(a, stream_); }
  Status row_sum_finish(const RowSumFinishArgs& a) { return coda::row_sum_finish(a, stream_); }
  Status col_sum_finish(const ColSumFinishArgs& a) { return coda::col_sum_finish(a, stream_); }

 private:
  struct Slot {
    void* ptr = nullptr;
    size_t bytes = 0;
  };
  cudaStream_t stream_;
  std::vector<Slot> slots_;
  size_t next_ = 0;
};

// The same block forward unfused: x1 = y0 Wo^T + x0 (cuBLAS, add), n1 = RMSNorm(x1), z1 = n1 Wgu^T,
// y1 = SwiGLU(z1), x2 = y1 Wdown^T + x1, n2 = RMSNorm(x2), qkv = RoPE(n2 Wqkv^T); writes the
// same activations (x1, x2, z1, qkv, r1, r2). Scratch from `be`; GEMMs through cuBLAS (`handle`).
Status llama3_forward_unfused(GpuBackend& be, void* cublas_handle, const Llama3Dims& d, const Llama3Weights& w,
                              const Llama3Activations& act);

// The same block backward unfused, step for step as llama3_backward: rope_backward, then each
// fused dgrad GEMM + epilogue becomes a cuBLAS GEMM into a stored gradient and an elementwise
// kernel (unfused::rmsnorm_backward, unfused::swiglu_backward); the partial finishes are the fused
// path's own; weight gradients by cuBLAS in the grads' dtype. Checked against the float64 block by the GPU test BlockForwardBackwardUnfused.
Status llama3_backward_unfused(GpuBackend& be, void* cublas_handle, const Llama3Dims& d, const Llama3Weights& w,
                               const Llama3Activations& act, const Llama3Grads& g);

// The block check of coda/ref/block_check.hpp on the GPU: the fused schedule's forward, and its
// backward when `backward` is set; or the same through the unfused path when `unfused` is set;
// with Llama3Activations::y1 given when `keep_y1` is set.
BlockCheckResult check_llama3_block_gpu(const Llama3Dims& dims, uint64_t seed, bool unfused = false,
                                        double eps = 1e-4, bool backward = false, bool keep_y1 = false);

}  // namespace coda
