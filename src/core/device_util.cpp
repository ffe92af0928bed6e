// Device buffers and the cuBLAS reference GEMMs.
#include "coda/device_util.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>
#include <vector>

namespace coda::dev {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(std::string(what) + ": cuBLAS status " + std::to_string(int(s)));
}

Buffer::Buffer(size_t bytes) : bytes_(bytes) { check(cudaMalloc(&ptr_, bytes ? bytes : 16), "cudaMalloc"); }
Buffer::~Buffer() {
  if (ptr_) cudaFree(ptr_);
}
Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) cudaFree(ptr_);
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

DeviceTensor poisoned_like(const HostTensor& h) {
  DeviceTensor d{Buffer(h.bytes()), h.view()};
  d.view.desc.data = d.buf.get();
  check(cudaMemset(d.buf.get(), 0xff, h.bytes()), "cudaMemset");
  return d;
}

DeviceTensor upload(const HostTensor& h) {
  DeviceTensor d{Buffer(h.bytes()), h.view()};
  d.view.desc.data = d.buf.get();
  check(cudaMemcpy(d.buf.get(), h.data(), h.bytes(), cudaMemcpyHostToDevice), "upload");
  return d;
}

void download(const DeviceTensor& d, HostTensor& h) {
  check(cudaMemcpy(h.data(), d.buf.get(), h.bytes(), cudaMemcpyDeviceToHost), "download");
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::kBF16: return CUDA_R_16BF;
    case DType::kFP16: return CUDA_R_16F;
    case DType::kFP32: return CUDA_R_32F;
    case DType::kInt32: return CUDA_R_32I;
  }
  return CUDA_R_32F;
}

namespace {
// coda's D[M,N] = A[M,K] B[N,K]^T is, column-major, D^T[N,M] = B[N,K] (A[M,K])^T.
struct ColMajor {
  cublasOperation_t op;
  int64_t ld;
};
ColMajor as_b(const TensorView& b) {  // the N x K operand
  return b.stride(1) == 1 || b.size(1) <= 1 ? ColMajor{CUBLAS_OP_T, std::max<int64_t>(b.stride(0), b.size(1))}
                                            : ColMajor{CUBLAS_OP_N, b.stride(1)};
}
ColMajor as_at(const TensorView& a) {  // A^T, K x M
  return a.stride(1) == 1 || a.size(1) <= 1 ? ColMajor{CUBLAS_OP_N, std::max<int64_t>(a.stride(0), a.size(1))}
                                            : ColMajor{CUBLAS_OP_T, a.stride(1)};
}
}  // namespace

void cublas_gemm(cublasHandle_t h, const TensorView& a, const TensorView& b, const TensorView& d, float alpha,
                 float beta, cudaStream_t stream) {
  const ColMajor cb = as_b(b), ca = as_at(a);
  check(cublasSetStream(h, stream), "cublasSetStream");
  check(cublasGemmEx(h, cb.op, ca.op, int(b.rows()), int(a.rows()), int(a.cols()), &alpha, b.data(),
                     cuda_type(b.dtype()), int(cb.ld), a.data(), cuda_type(a.dtype()), int(ca.ld), &beta, d.data(),
                     cuda_type(d.dtype()), int(d.stride(0)), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
}

LtGemm::LtGemm(cublasLtHandle_t lt, const TensorView& a, const TensorView& b, const TensorView& d, void* ws,
               size_t ws_bytes, cudaStream_t stream)
    : lt_(lt), a_(a.data()), b_(b.data()), d_(d.data()), ws_(ws), ws_bytes_(ws_bytes) {
  const ColMajor cb = as_b(b), ca = as_at(a);
  check(cublasLtMatmulDescCreate(&op_, CUBLAS_COMPUTE_32F, CUDA_R_32F), "LtDesc");
  check(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSA, &cb.op, sizeof(cb.op)), "transa");
  check(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSB, &ca.op, sizeof(ca.op)), "transb");
  const int64_t m = b.rows(), n = a.rows(), k = a.cols();
  const bool tb = cb.op == CUBLAS_OP_T, ta = ca.op == CUBLAS_OP_T;
  check(cublasLtMatrixLayoutCreate(&la_, cuda_type(b.dtype()), tb ? k : m, tb ? m : k, cb.ld), "layout b");
  check(cublasLtMatrixLayoutCreate(&lb_, cuda_type(a.dtype()), ta ? n : k, ta ? k : n, ca.ld), "layout a");
  check(cublasLtMatrixLayoutCreate(&ld_, cuda_type(d.dtype()), m, n, d.stride(0)), "layout d");
  cublasLtMatmulPreference_t pref;
  check(cublasLtMatmulPreferenceCreate(&pref), "pref");
  check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes_,
                                             sizeof(ws_bytes_)),
        "pref ws");
  cublasLtMatmulHeuristicResult_t res[16];
  int found = 0;
  check(cublasLtMatmulAlgoGetHeuristic(lt_, op_, la_, lb_, ld_, ld_, pref, 16, res, &found), "heuristic");
  cublasLtMatmulPreferenceDestroy(pref);
  if (found == 0) throw std::runtime_error("cuBLASLt found no algorithm");
  const float alpha = 1.0f, beta = 0.0f;
  cudaEvent_t e0, e1;
  check(cudaEventCreate(&e0), "event");
  check(cudaEventCreate(&e1), "event");
  auto time_once = [&](int i) {
    cudaEventRecord(e0, stream);
    cublasLtMatmul(lt_, op_, &alpha, b_, la_, a_, lb_, &beta, d_, ld_, d_, ld_, &res[i].algo, ws_, ws_bytes_, stream);
    cudaEventRecord(e1, stream);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    return ms;
  };
  auto median = [](std::vector<float> t) {
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  };
  // Pass 1: every candidate that runs, the median of 5 back to back.
  std::vector<std::pair<float, int>> ranked;
  for (int i = 0; i < found; ++i) {
    if (cublasLtMatmul(lt_, op_, &alpha, b_, la_, a_, lb_, &beta, d_, ld_, d_, ld_, &res[i].algo, ws_, ws_bytes_,
                       stream) != CUBLAS_STATUS_SUCCESS)
      continue;
    ++tried_;
    std::vector<float> t;
    for (int r = 0; r < 5; ++r) t.push_back(time_once(i));
    ranked.push_back({median(t), i});
  }
  // Pass 2: the best three again, round-robin, 7 rounds. NOTES: timed back to back, the candidates
  // met different clocks (a long GEMM heats the chip and the power cap lowers the clock for the
  // ones timed later), so the pick changed between processes: on an H200 the LM head's GEMM
  // (16384 x 128256 x 2048) got tile 248 (13.3 ms) in one run and tile 197 (12.4 ms) in another,
  // which moved every LM-head ratio by 8% (bench/NOTES.md). Interleaving gives each the same drift.
  std::sort(ranked.begin(), ranked.end());
  const size_t finalists = std::min<size_t>(3, ranked.size());
  std::vector<std::vector<float>> t(finalists);
  for (int r = 0; r < 7; ++r)
    for (size_t c = 0; c < finalists; ++c) t[c].push_back(time_once(ranked[c].second));
  float best = 1e30f;
  for (size_t c = 0; c < finalists; ++c) {
    const float m = median(t[c]);
    if (m < best) {
      best = m;
      algo_ = res[ranked[c].second].algo;
    }
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  if (tried_ == 0) throw std::runtime_error("cuBLASLt: no candidate algorithm ran");
}

std::string LtGemm::algo_name() const {
  int32_t id = -1;
  uint32_t tile = 0, stages = 0;
  uint16_t cluster = 0;
  size_t written = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&algo_, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &written);
  cublasLtMatmulAlgoConfigGetAttribute(&algo_, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &written);
  cublasLtMatmulAlgoConfigGetAttribute(&algo_, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages, &written);
  cublasLtMatmulAlgoConfigGetAttribute(&algo_, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster, sizeof cluster,
                                       &written);
  return "algo " + std::to_string(id) + " tile " + std::to_string(tile) + " stages " + std::to_string(stages) +
         " cluster " + std::to_string(cluster);
}

LtGemm::~LtGemm() {
  if (la_) cublasLtMatrixLayoutDestroy(la_);
  if (lb_) cublasLtMatrixLayoutDestroy(lb_);
  if (ld_) cublasLtMatrixLayoutDestroy(ld_);
  if (op_) cublasLtMatmulDescDestroy(op_);
}

void LtGemm::run(cudaStream_t stream) const {
  const float alpha = 1.0f, beta = 0.0f;
  check(cublasLtMatmul(lt_, op_, &alpha, b_, la_, a_, lb_, &beta, d_, ld_, d_, ld_, &algo_, ws_, ws_bytes_, stream),
        "cublasLtMatmul");
}

std::string device_name(int device) {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, device) != cudaSuccess) return "unknown";
  return p.name;
}

Mirror::~Mirror() {
  for (auto& [lo, b] : blocks_) cudaFree(b.dev);
}

TensorView Mirror::map(const TensorView& h) {
  if (!h.defined()) return h;
  const auto [lo, hi] = h.byte_extent();
  Block* found = nullptr;
  for (auto& [l, b] : blocks_)
    if (lo >= l && hi <= l + b.bytes) found = &b;
  uintptr_t base = lo;
  if (found) {
    for (auto& [l, b] : blocks_)
      if (&b == found) base = l;
  } else {
    for (auto& [l, b] : blocks_)
      if (lo < l + b.bytes && l < hi) throw std::runtime_error("Mirror: partially overlapping host views");
    Block b;
    b.bytes = hi - lo;
    check(cudaMalloc(&b.dev, b.bytes > 0 ? b.bytes : 1), "cudaMalloc");
    check(cudaMemcpy(b.dev, reinterpret_cast<void*>(lo), b.bytes, cudaMemcpyHostToDevice), "upload");
    blocks_.emplace_back(lo, b);
    found = &blocks_.back().second;
  }
  TensorView d = h;
  d.desc.data = static_cast<char*>(found->dev) + (reinterpret_cast<uintptr_t>(h.data()) - base);
  return d;
}

void Mirror::copy_back() {
  check(cudaDeviceSynchronize(), "synchronize");
  for (auto& [lo, b] : blocks_)
    check(cudaMemcpy(reinterpret_cast<void*>(lo), b.dev, b.bytes, cudaMemcpyDeviceToHost), "download");
}

}  // namespace coda::dev
