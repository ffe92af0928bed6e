// The C ABI's common part: status strings, the per-thread error message, dtypes, descriptors,
// the device check, and where a call runs (host or device memory).
#include <cuda_runtime_api.h>

#include <string>

#include "coda/capi_util.hpp"
#include "coda/coda.h"
#include "coda/tensor.hpp"

namespace {
thread_local std::string g_last_error;

#define CODA_STR2(x) #x
#define CODA_STR(x) CODA_STR2(x)
constexpr const char* kVersion =
    CODA_STR(CODA_VERSION_MAJOR) "." CODA_STR(CODA_VERSION_MINOR) "." CODA_STR(CODA_VERSION_PATCH);
}  // namespace

namespace coda::detail {
coda_status_t report(const Status& s) {
  g_last_error = s.ok() ? std::string() : s.message();
  return s.code();
}

const char* place_name(Place p) { return p == Place::kDevice ? "device" : "host"; }

namespace {
// A process without a visible CUDA device (no driver, no GPU, CUDA_VISIBLE_DEVICES empty) has no
// device memory: every pointer is host memory, and CUDA is not asked again.
bool cuda_device_visible() {
  static const bool visible = [] {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
      cudaGetLastError();  // leave no error behind for the caller's next CUDA call
      return false;
    }
    return count > 0;
  }();
  return visible;
}
}  // namespace

Status place_of(const void* p, Place* place) {
  *place = Place::kHost;
  if (!p || !cuda_device_visible()) return {};
  cudaPointerAttributes attr{};
  const cudaError_t e = cudaPointerGetAttributes(&attr, p);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return Status::cuda_error(std::string("CUDA could not say where its memory lives (") + cudaGetErrorString(e) +
                              ")");
  }
  // Pageable memory is cudaMemoryTypeUnregistered, pinned/registered host memory cudaMemoryTypeHost:
  // both are host memory. Managed memory counts as device memory (the GPU runs the call).
  if (attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged) *place = Place::kDevice;
  return {};
}

Status common_place(const char* op, std::initializer_list<Operand> operands, Place* place, Locator locate) {
  *place = Place::kHost;
  const Operand* first = nullptr;
  for (const Operand& o : operands) {
    if (!o.ptr) continue;
    Place p = Place::kHost;
    const Status s = locate(o.ptr, &p);
    if (!s.ok()) return Status(s.code(), std::string(op) + ": argument '" + o.name + "': " + s.message());
    if (!first) {
      first = &o;
      *place = p;
    } else if (p != *place) {
      return Status::invalid_argument(std::string(op) + ": argument '" + o.name + "' points to " + place_name(p) +
                                      " memory but argument '" + first->name + "' to " + place_name(*place) +
                                      " memory; pass every tensor in device memory (the GPU runs the call) or every "
                                      "tensor in host memory (the CPU emulator runs it)");
    }
  }
  return {};
}
}  // namespace coda::detail

extern "C" {

const char* coda_status_string(coda_status_t status) {
  switch (status) {
    case CODA_SUCCESS: return "success";
    case CODA_ERROR_INVALID_ARGUMENT: return "invalid argument";
    case CODA_ERROR_NOT_SUPPORTED: return "not supported";
    case CODA_ERROR_CUDA: return "CUDA error";
    case CODA_ERROR_INTERNAL: return "internal error";
  }
  return "unknown status";
}

const char* coda_last_error(void) { return g_last_error.c_str(); }

const char* coda_version_string(void) { return kVersion; }

const char* coda_dtype_name(coda_dtype_t dtype) {
  switch (dtype) {
    case CODA_DTYPE_BF16: return "bf16";
    case CODA_DTYPE_FP16: return "fp16";
    case CODA_DTYPE_FP32: return "fp32";
    case CODA_DTYPE_INT32: return "int32";
  }
  return "unknown";
}

size_t coda_dtype_size(coda_dtype_t dtype) {
  switch (dtype) {
    case CODA_DTYPE_BF16:
    case CODA_DTYPE_FP16: return 2;
    case CODA_DTYPE_FP32:
    case CODA_DTYPE_INT32: return 4;
  }
  return 0;
}

coda_tensor_t coda_tensor_1d(void* data, coda_dtype_t dtype, int64_t n) {
  return coda::TensorView::vector(data, static_cast<coda::DType>(dtype), n).desc;
}

coda_tensor_t coda_tensor_2d(void* data, coda_dtype_t dtype, int64_t rows, int64_t cols, int64_t row_stride) {
  return coda::TensorView::matrix(data, static_cast<coda::DType>(dtype), rows, cols, row_stride).desc;
}

coda_status_t coda_device_check(int device) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    cudaGetLastError();
    return coda::detail::report(coda::Status::not_supported(
        std::string("coda_device_check: no CUDA device is visible (") +
        (e == cudaSuccess ? "0 devices" : cudaGetErrorString(e)) + "); coda's GPU kernels need an sm_90 (Hopper) GPU"));
  }
  if (device < 0 || device >= count)
    return coda::detail::report(coda::Status::invalid_argument(
        "coda_device_check: argument 'device' must be in [0, " + std::to_string(count) + "), got " +
        std::to_string(device)));
  cudaDeviceProp prop{};
  e = cudaGetDeviceProperties(&prop, device);
  if (e != cudaSuccess)
    return coda::detail::report(coda::Status::cuda_error(std::string("coda_device_check: ") + cudaGetErrorString(e)));
  if (prop.major != 9 || prop.minor != 0)
    return coda::detail::report(coda::Status::not_supported(
        std::string("coda_device_check: device ") + std::to_string(device) + " (" + prop.name + ") is sm_" +
        std::to_string(prop.major) + std::to_string(prop.minor) +
        "; coda's kernels are built for sm_90a (H100/H200) only"));
  return coda::detail::report(coda::Status());
}

}  // extern "C"
