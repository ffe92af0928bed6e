// C++ view over the C ABI's coda_tensor_t, and the Status every coda call returns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "coda/coda.h"

namespace coda {

enum class DType : int32_t {
  kBF16 = CODA_DTYPE_BF16,
  kFP16 = CODA_DTYPE_FP16,
  kFP32 = CODA_DTYPE_FP32,
  kInt32 = CODA_DTYPE_INT32,
};

const char* dtype_name(DType dtype);
size_t dtype_size(DType dtype);

// The result of every coda call: a code from coda.h and, on failure, a readable message.
class Status {
 public:
  Status() = default;
  Status(coda_status_t code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status success() { return Status(); }
  static Status invalid_argument(std::string m) { return {CODA_ERROR_INVALID_ARGUMENT, std::move(m)}; }
  static Status not_supported(std::string m) { return {CODA_ERROR_NOT_SUPPORTED, std::move(m)}; }
  static Status cuda_error(std::string m) { return {CODA_ERROR_CUDA, std::move(m)}; }
  static Status internal(std::string m) { return {CODA_ERROR_INTERNAL, std::move(m)}; }

  bool ok() const { return code_ == CODA_SUCCESS; }
  coda_status_t code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  coda_status_t code_ = CODA_SUCCESS;
  std::string message_;
};

// A non-owning view of a strided tensor: the C descriptor plus helpers. A default-constructed
// view (null data) means "argument absent".
struct TensorView {
  coda_tensor_t desc{};

  TensorView() = default;
  explicit TensorView(const coda_tensor_t& d) : desc(d) {}

  static TensorView vector(void* data, DType dtype, int64_t n);
  // Row-major matrix; row_stride < 0 means dense (row_stride = cols).
  static TensorView matrix(void* data, DType dtype, int64_t rows, int64_t cols, int64_t row_stride = -1);
  static TensorView from(const coda_tensor_t* d) { return d ? TensorView(*d) : TensorView(); }

  bool defined() const { return desc.data != nullptr; }
  void* data() const { return desc.data; }
  int rank() const { return desc.rank; }
  DType dtype() const { return static_cast<DType>(desc.dtype); }
  int64_t size(int i) const { return desc.sizes[i]; }
  int64_t stride(int i) const { return desc.strides[i]; }
  int64_t rows() const { return desc.sizes[0]; }
  int64_t cols() const { return desc.rank >= 2 ? desc.sizes[1] : 1; }
  int64_t numel() const;
  size_t element_size() const { return dtype_size(dtype()); }

  // Swap the two dimensions of a rank-2 view (no data moves).
  TensorView transposed() const;
  // The rank-2 sub-view rows [r0, r0 + n) (rank 1: elements).
  TensorView row_slice(int64_t r0, int64_t n) const;

  template <class T>
  T* ptr() const { return static_cast<T*>(desc.data); }

  // Bytes spanned by the view: [first, last) relative to address 0.
  std::pair<uintptr_t, uintptr_t> byte_extent() const;
  bool same_view(const TensorView& o) const;
  // "[1000, 2048] bf16, strides (2048, 1)"
  std::string describe() const;
};

}  // namespace coda

// Return early from a function returning Status when `expr` fails.
#define CODA_TRY(expr)                    \
  do {                                    \
    ::coda::Status coda_try_s_ = (expr);  \
    if (!coda_try_s_.ok()) return coda_try_s_; \
  } while (0)
