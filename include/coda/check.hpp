// Argument validation shared by every operator (GPU launchers and the CPU emulator alike).
//
// Each operator's validate() runs an ArgCheck over its arguments before anything is launched or
// written. The first failed rule is kept; its message names the operator, the argument and the
// rule, e.g.
//   gemm_residual_rmsnorm_partial: argument 'h_out' must have shape [1000, 2048], got [1000, 2047]
#pragma once

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "coda/tensor.hpp"

namespace coda {

// A set of accepted dtypes.
class DTypeSet {
 public:
  constexpr DTypeSet(std::initializer_list<DType> l) {
    for (DType d : l) bits_ |= 1u << static_cast<int>(d);
  }
  constexpr bool contains(DType d) const { return (bits_ >> static_cast<int>(d)) & 1u; }
  std::string describe() const;

 private:
  unsigned bits_ = 0;
};

inline constexpr DTypeSet kGemmInputTypes{DType::kBF16, DType::kFP16};
inline constexpr DTypeSet kStoreTypes{DType::kBF16, DType::kFP16, DType::kFP32};
inline constexpr DTypeSet kFloatTypes{DType::kBF16, DType::kFP16, DType::kFP32};
inline constexpr DTypeSet kFP32Only{DType::kFP32};
inline constexpr DTypeSet kInt32Only{DType::kInt32};

// How a tensor must be laid out in memory.
enum class Layout {
  kAny,          // any strides (sizes and non-negative strides still checked)
  kContiguous,   // dense row-major (vectors: unit stride)
  kRowMajor16,   // rank 2, unit column stride, rows and base 16-byte aligned (TMA tiles)
  kGemmOperand,  // rank 2, one unit stride (K-major or M/N-major), the other 16-byte aligned
};

class ArgCheck {
 public:
  explicit ArgCheck(std::string op) : op_(std::move(op)) {}

  // A required tensor: defined, given shape (-1 = any size), dtype in `dtypes`, layout.
  ArgCheck& tensor(const char* name, const TensorView& t, std::initializer_list<int64_t> shape,
                   DTypeSet dtypes, Layout layout = Layout::kContiguous);
  // Same, but an absent tensor (null data) is accepted.
  ArgCheck& optional(const char* name, const TensorView& t, std::initializer_list<int64_t> shape,
                     DTypeSet dtypes, Layout layout = Layout::kContiguous);
  // A free-form rule: when `holds` is false, fail with "argument 'name' <rule>".
  ArgCheck& rule(bool holds, const char* name, const std::string& rule);
  // Two tensors must have the same dtype.
  ArgCheck& same_dtype(const char* a_name, const TensorView& a, const char* b_name, const TensorView& b);

  // Outputs must not overlap inputs or each other. `in_place` lists (output, input) name pairs that
  // may be the very same view (identical pointer, sizes and strides) but must not partially overlap.
  struct Named {
    const char* name;
    TensorView view;
  };
  ArgCheck& no_alias(std::initializer_list<Named> outputs, std::initializer_list<Named> inputs,
                     std::initializer_list<std::pair<const char*, const char*>> in_place = {});

  bool ok() const { return failed_.empty(); }
  Status status() const { return ok() ? Status() : Status::invalid_argument(failed_); }
  const std::string& op() const { return op_; }

 private:
  ArgCheck& fail(const char* name, const std::string& what);
  void check_tensor(const char* name, const TensorView& t, std::initializer_list<int64_t> shape,
                    DTypeSet dtypes, Layout layout);

  std::string op_;
  std::string failed_;
};

std::string shape_string(std::initializer_list<int64_t> shape);
inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace coda
