// Host-side helpers for GPU tests, benchmarks and tools: device buffers, copies, and the cuBLAS
// reference GEMM in coda's operand convention (D[M, N] = A[M, K] B[N, K]^T on strided views).
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "coda/host.hpp"
#include "coda/tensor.hpp"

namespace coda::dev {

// An owning device allocation with the same shape/strides as a host tensor.
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t bytes);
  ~Buffer();
  Buffer(Buffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; o.bytes_ = 0; }
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// A device copy of a host tensor (same strides); view() points at device memory.
struct DeviceTensor {
  Buffer buf;
  TensorView view;
};
DeviceTensor upload(const HostTensor& h);
// Allocate like `h` (same strides) without copying; filled with 0xFF bytes (NaN in every float type).
DeviceTensor poisoned_like(const HostTensor& h);
void download(const DeviceTensor& d, HostTensor& h);

// Throws std::runtime_error with `what` on a CUDA / cuBLAS error.
void check(cudaError_t e, const char* what);
void check(cublasStatus_t s, const char* what);

cudaDataType_t cuda_type(DType t);

// The same GEMM through cuBLAS (cublasGemmEx, fp32 compute): D = alpha A B^T + beta D.
void cublas_gemm(cublasHandle_t h, const TensorView& a, const TensorView& b, const TensorView& d, float alpha = 1.0f,
                 float beta = 0.0f, cudaStream_t stream = nullptr);

// cuBLASLt with its best algorithm for this problem: every heuristic candidate is timed and the
// fastest kept (the "best cuBLAS" of the benchmarks).
class LtGemm {
 public:
  LtGemm(cublasLtHandle_t lt, const TensorView& a, const TensorView& b, const TensorView& d, void* workspace,
         size_t workspace_bytes, cudaStream_t stream);
  ~LtGemm();
  void run(cudaStream_t stream) const;
  int algorithms_tried() const { return tried_; }
  // The chosen algorithm as "algo A tile T stages S cluster C" (cuBLASLt's config ids), so that
  // benchmark records show when a run picked another one.
  std::string algo_name() const;

 private:
  cublasLtHandle_t lt_;
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t la_ = nullptr, lb_ = nullptr, ld_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
  const void* a_;
  const void* b_;
  void* d_;
  void* ws_;
  size_t ws_bytes_;
  int tried_ = 0;
};

std::string device_name(int device = 0);

// Device copies of host views for running GPU operators on host data (tests, `coda check`):
// map() allocates a device block per distinct host extent (views of the same memory share it, so
// in-place arguments stay in place), copies host -> device, and returns the view re-pointed;
// copy_back() synchronizes and copies every block device -> host.
class Mirror {
 public:
  Mirror() = default;
  ~Mirror();
  Mirror(const Mirror&) = delete;
  Mirror& operator=(const Mirror&) = delete;
  TensorView map(const TensorView& host);
  void copy_back();

 private:
  struct Block {
    void* dev = nullptr;
    uintptr_t bytes = 0;
  };
  std::vector<std::pair<uintptr_t, Block>> blocks_;
};

// Fill a row-major bf16/fp16/fp32 tensor in device memory with scale * uniform[-1, 1) values from a
// counter-based hash of (seed, index) (src/gpu/fill.cu).
void fill_uniform(const TensorView& t, uint64_t seed, float scale = 1.0f, cudaStream_t stream = nullptr);

}  // namespace coda::dev
