// Host-side tensors: owning buffers for the CPU emulator, tests and tools, and element access
// for any strided TensorView in host memory.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "coda/ref/reference.hpp"
#include "coda/tensor.hpp"

namespace coda {

// Read element (i, j) (rank 1: element i) of a float-typed view as fp32.
float load_f32(const TensorView& t, int64_t i, int64_t j = 0);
// Write element (i, j), rounding once to the view's dtype (round to nearest even).
void store_f32(const TensorView& t, int64_t i, int64_t j, float v);
int32_t load_i32(const TensorView& t, int64_t i);

// A dense (or row-padded) host buffer, 64-byte aligned, with its view.
class HostTensor {
 public:
  HostTensor() = default;
  static HostTensor vector(DType dtype, int64_t n);
  static HostTensor matrix(DType dtype, int64_t rows, int64_t cols, int64_t row_stride = -1);

  const TensorView& view() const { return view_; }
  operator const TensorView&() const { return view_; }  // NOLINT: a HostTensor is used as its view
  int64_t rows() const { return view_.rows(); }
  int64_t cols() const { return view_.cols(); }
  size_t bytes() const { return bytes_; }
  void* data() const { return buf_.get(); }

  float get(int64_t i, int64_t j = 0) const { return load_f32(view_, i, j); }
  void set(int64_t i, int64_t j, float v) { store_f32(view_, i, j, v); }
  int32_t get_int(int64_t i) const { return load_i32(view_, i); }
  void set_int(int64_t i, int32_t v);

  // Fill every byte (including row padding) with a NaN pattern (0x7fff / 0x7fffffff), or zeros.
  void poison();
  void zero();
  // True when every logical element differs from the poison pattern (was written).
  bool fully_written() const;

 private:
  struct Free {
    void operator()(uint8_t* p) const;
  };
  std::unique_ptr<uint8_t[], Free> buf_;
  size_t bytes_ = 0;
  TensorView view_;
};

// Conversions to and from float64 reference matrices (rank-1 views become [n, 1]).
ref::Mat to_mat(const TensorView& t);
ref::Vec to_vec(const TensorView& t);
HostTensor from_mat(const ref::Mat& m, DType dtype);
HostTensor from_vec(const ref::Vec& v, DType dtype);
HostTensor from_ints(const std::vector<int32_t>& v);

}  // namespace coda
