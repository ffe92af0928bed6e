// Host-side helpers shared by the GPU entry points (launch_host.hpp).
#include "launch_host.hpp"

#include <cuda.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

namespace coda::gpu_host {

using sm90::EpiParams;

// ---- device and pointer checks --------------------------------------------------------------------

Status check_device(const char* op) {
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return Status::not_supported(std::string(op) + ": no usable CUDA device (" + cudaGetErrorString(e) +
                                 "); coda's kernels need an sm_90 GPU");
  }
  static std::mutex mu;
  static std::map<int, std::string> verdict;  // device -> "" (ok) or the reason
  std::lock_guard<std::mutex> lock(mu);
  auto it = verdict.find(dev);
  if (it == verdict.end()) {
    cudaDeviceProp prop{};
    e = cudaGetDeviceProperties(&prop, dev);
    std::string why;
    if (e != cudaSuccess) why = cudaGetErrorString(e);
    else if (prop.major != 9 || prop.minor != 0)
      why = std::string("device ") + std::to_string(dev) + " (" + prop.name + ") is sm_" +
            std::to_string(prop.major) + std::to_string(prop.minor) + "; coda's kernels need sm_90 (H100/H200)";
    it = verdict.emplace(dev, why).first;
  }
  if (!it->second.empty()) return Status::not_supported(std::string(op) + ": " + it->second);
  return {};
}

Status check_device_pointer(const char* op, const char* name, const TensorView& t) {
  if (!t.defined()) return {};
  cudaPointerAttributes attr{};
  const cudaError_t e = cudaPointerGetAttributes(&attr, t.data());
  if (e != cudaSuccess) {
    cudaGetLastError();
    return Status::invalid_argument(std::string(op) + ": argument '" + name + "' is not a pointer CUDA knows (" +
                                    cudaGetErrorString(e) + ")");
  }
  if (attr.type == cudaMemoryTypeUnregistered)
    return Status::invalid_argument(std::string(op) + ": argument '" + name +
                                    "' points to host memory; pass device memory (cudaMalloc) or registered/managed memory");
  return {};
}

Status device_prologue(const char* op, std::initializer_list<Named> tensors) {
  CODA_TRY(check_device(op));
  for (const Named& n : tensors) CODA_TRY(check_device_pointer(op, n.name, n.t));
  return {};
}

// ---- operand forms --------------------------------------------------------------------------------

// K-major when the unit stride is along K, else M/N-major. With one column (K = 1) either reading
// fits, except rows one element apart (a transposed vector, e.g. the wgrad of a one-token batch):
// that is M/N-major, since as K-major its row stride would be 2 bytes, which TMA rejects.
// lead_stride returns the non-unit stride, made TMA-legal when its dimension has a single element.
bool k_major(const TensorView& t) {
  if (t.size(1) > 1) return t.stride(1) == 1;
  return !(t.size(0) > 1 && t.stride(0) == 1);
}
int64_t lead_stride(const TensorView& t, bool kmaj) {
  const int64_t per16 = 16 / static_cast<int64_t>(t.element_size());
  const int dim = kmaj ? 0 : 1;
  if (t.size(dim) <= 1) {
    const int64_t inner = std::max<int64_t>(t.size(1 - dim), 1);
    return (inner + per16 - 1) / per16 * per16;
  }
  return t.stride(dim);
}

// ---- epilogue operands ----------------------------------------------------------------------------

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiled encode_fn() {
  static EncodeTiled fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      return static_cast<EncodeTiled>(nullptr);
    return reinterpret_cast<EncodeTiled>(p);
  }();
  return fn;
}

Status bind_output(EpiParams& epi, int slot, const TensorView& t, const char* op, int shift) {
  sm90::EpiOutput& out = epi.outs[slot];
  if (!t.defined()) {
    out.defined = 0;
    return {};
  }
  const auto es = static_cast<int64_t>(t.element_size());
  CUtensorMapDataType dt = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  out.dtype = sm90::kDtBF16;
  if (t.dtype() == DType::kFP16) {
    dt = CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    out.dtype = sm90::kDtFP16;
  } else if (t.dtype() == DType::kFP32) {
    dt = CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    out.dtype = sm90::kDtFP32;
  }
  const int64_t rows = t.rows(), cols = t.cols();
  int64_t row_bytes = t.stride(0) * es;
  if (rows <= 1) row_bytes = (cols * es + 15) / 16 * 16;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(row_bytes)};
  const int64_t box_bytes = std::min<int64_t>((64 >> shift) * es, 128);
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_bytes / es), 64};
  const cuuint32_t elem[2] = {1, 1};
  EncodeTiled encode = encode_fn();
  if (!encode) return Status::cuda_error(std::string(op) + ": the driver does not provide cuTensorMapEncodeTiled");
  const CUresult r = encode(&out.tma, dt, 2, t.data(), dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            box_bytes == 128 ? CU_TENSOR_MAP_SWIZZLE_128B
                                             : (box_bytes == 64 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_32B),
                            CU_TENSOR_MAP_L2_PROMOTION_NONE,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return Status::internal(std::string(op) + ": TMA descriptor for output slot " + std::to_string(slot) +
                            " rejected (CUresult " + std::to_string(int(r)) + ") for " + t.describe());
  out.ptr = t.data();
  out.ld = t.stride(0);
  out.cols = cols;
  out.defined = 1;
  epi.num_outs = std::max(epi.num_outs, slot + 1);
  return {};
}

int dtype_code(DType d) { return static_cast<int>(d); }

int sm_count() {
  int dev = 0, n = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
    cudaGetLastError();
    return 132;
  }
  return n;
}

// Queried once per device: the memory clock attribute cost ~0.6 ms per call on an H100 (driver 580,
// CUDA 13), which every GEMM launch paid when it was read per launch (bench/NOTES.md 2026-12-05).
// CODA_DRAM_GBPS (benchmarks only) replaces the value on every device: 0 takes the H200 rules,
// 3350 an H100's.
double dram_gbps() {
  static const double forced = [] {
    const char* v = std::getenv("CODA_DRAM_GBPS");
    return v && *v ? std::max(0.0, std::atof(v)) : -1.0;
  }();
  if (forced >= 0.0) return forced;
  constexpr int kMaxDevices = 64;
  static std::atomic<double> cache[kMaxDevices];  // 0: not yet read (or unknown), < 0: unknown
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) {
    cudaGetLastError();
    return 0.0;
  }
  const double known = cache[dev].load(std::memory_order_relaxed);
  if (known != 0.0) return known > 0.0 ? known : 0.0;
  int khz = 0, bits = 0;
  double gbps = -1.0;
  if (cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, dev) == cudaSuccess &&
      cudaDeviceGetAttribute(&bits, cudaDevAttrGlobalMemoryBusWidth, dev) == cudaSuccess && khz > 0 && bits > 0)
    gbps = 2.0 * double(khz) * 1e3 * double(bits) / 8.0 / 1e9;  // double data rate
  else
    cudaGetLastError();
  cache[dev].store(gbps, std::memory_order_relaxed);
  return gbps > 0.0 ? gbps : 0.0;
}

Status bind_tma_tile(EpiParams& epi, int slot, const TensorView& t, const char* op) {
  sm90::EpiTile& tile = epi.tiles[slot];
  tile = sm90::EpiTile{};
  if (!t.defined()) return {};
  if (t.dtype() != DType::kBF16 && t.dtype() != DType::kFP16)
    return Status::not_supported(std::string(op) + ": a tile operand staged by TMA must be bf16 or fp16, got " +
                                 t.describe());
  const int64_t rows = t.rows(), cols = t.cols();
  int64_t row_bytes = t.stride(0) * 2;
  if (rows <= 1) row_bytes = (cols * 2 + 15) / 16 * 16;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(row_bytes)};
  const cuuint32_t box[2] = {64, 64};
  const cuuint32_t elem[2] = {1, 1};
  EncodeTiled encode = encode_fn();
  if (!encode) return Status::cuda_error(std::string(op) + ": the driver does not provide cuTensorMapEncodeTiled");
  const CUresult r = encode(&tile.tma,
                            t.dtype() == DType::kBF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                            2, const_cast<void*>(t.data()), dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return Status::internal(std::string(op) + ": TMA descriptor for tile slot " + std::to_string(slot) +
                            " rejected (CUresult " + std::to_string(int(r)) + ") for " + t.describe());
  tile.ptr = t.data();
  tile.ld = t.stride(0);
  tile.cols = cols;
  tile.dtype = dtype_code(t.dtype());
  return {};
}

void bind_tile(EpiParams& epi, int slot, const TensorView& t) {
  sm90::EpiTile& tile = epi.tiles[slot];
  tile = sm90::EpiTile{};
  if (!t.defined()) return;
  tile.ptr = t.data();
  tile.ld = t.stride(0);
  tile.cols = t.cols();
  tile.dtype = dtype_code(t.dtype());
}

sm90::EpiPartial partial_of(const TensorView& t, int seg_shift) {
  sm90::EpiPartial p;
  if (!t.defined()) return p;
  p.ptr = static_cast<float*>(const_cast<void*>(t.data()));
  p.ld = t.rank() == 1 ? 1 : t.stride(0);
  p.cols = t.rank() == 1 ? 1 : t.cols();
  p.seg_shift = seg_shift;
  return p;
}

bool env_on(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::string(v) != "0";
}

int debug_flags() {
  const char* v = std::getenv("CODA_DEBUG_EPILOGUE");
  return v ? std::atoi(v) : 0;
}

}  // namespace coda::gpu_host
