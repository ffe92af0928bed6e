// Host tensors and element access.
#include "coda/host.hpp"

#include <cstring>
#include <new>

#include "coda/numeric.hpp"

namespace coda {

namespace {
char* element(const TensorView& t, int64_t i, int64_t j) {
  int64_t off = i * t.stride(0);
  if (t.rank() >= 2) off += j * t.stride(1);
  return static_cast<char*>(t.data()) + off * static_cast<int64_t>(t.element_size());
}
}  // namespace

float load_f32(const TensorView& t, int64_t i, int64_t j) {
  const char* p = element(t, i, j);
  switch (t.dtype()) {
    case DType::kBF16: { uint16_t h; std::memcpy(&h, p, 2); return bf16_bits_to_float(h); }
    case DType::kFP16: { uint16_t h; std::memcpy(&h, p, 2); return fp16_bits_to_float(h); }
    case DType::kFP32: { float f; std::memcpy(&f, p, 4); return f; }
    case DType::kInt32: { int32_t v; std::memcpy(&v, p, 4); return static_cast<float>(v); }
  }
  return 0.0f;
}

void store_f32(const TensorView& t, int64_t i, int64_t j, float v) {
  char* p = element(t, i, j);
  switch (t.dtype()) {
    case DType::kBF16: { const uint16_t h = float_to_bf16_bits(v); std::memcpy(p, &h, 2); return; }
    case DType::kFP16: { const uint16_t h = float_to_fp16_bits(v); std::memcpy(p, &h, 2); return; }
    case DType::kFP32: std::memcpy(p, &v, 4); return;
    case DType::kInt32: { const auto x = static_cast<int32_t>(v); std::memcpy(p, &x, 4); return; }
  }
}

int32_t load_i32(const TensorView& t, int64_t i) {
  int32_t v;
  std::memcpy(&v, element(t, i, 0), 4);
  return v;
}

void HostTensor::Free::operator()(uint8_t* p) const { ::operator delete[](p, std::align_val_t(64)); }

HostTensor HostTensor::vector(DType dtype, int64_t n) {
  HostTensor h;
  h.bytes_ = static_cast<size_t>(n > 0 ? n : 0) * dtype_size(dtype);
  h.buf_.reset(static_cast<uint8_t*>(::operator new[](h.bytes_ ? h.bytes_ : 64, std::align_val_t(64))));
  h.view_ = TensorView::vector(h.buf_.get(), dtype, n);
  h.zero();
  return h;
}

HostTensor HostTensor::matrix(DType dtype, int64_t rows, int64_t cols, int64_t row_stride) {
  HostTensor h;
  const int64_t ld = row_stride < 0 ? cols : row_stride;
  h.bytes_ = static_cast<size_t>(rows > 0 ? rows * ld : 0) * dtype_size(dtype);
  h.buf_.reset(static_cast<uint8_t*>(::operator new[](h.bytes_ ? h.bytes_ : 64, std::align_val_t(64))));
  h.view_ = TensorView::matrix(h.buf_.get(), dtype, rows, cols, ld);
  h.zero();
  return h;
}

void HostTensor::set_int(int64_t i, int32_t v) { std::memcpy(element(view_, i, 0), &v, 4); }

void HostTensor::poison() {
  if (view_.element_size() == 2) {
    auto* p = reinterpret_cast<uint16_t*>(buf_.get());
    for (size_t i = 0; i < bytes_ / 2; ++i) p[i] = 0x7fff;
  } else {
    auto* p = reinterpret_cast<uint32_t*>(buf_.get());
    for (size_t i = 0; i < bytes_ / 4; ++i) p[i] = 0x7fffffffu;
  }
}

void HostTensor::zero() {
  if (bytes_) std::memset(buf_.get(), 0, bytes_);
}

bool HostTensor::fully_written() const {
  const int64_t cols = view_.rank() >= 2 ? view_.cols() : 1;
  for (int64_t i = 0; i < view_.rows(); ++i)
    for (int64_t j = 0; j < cols; ++j) {
      const char* p = element(view_, i, j);
      if (view_.element_size() == 2) {
        uint16_t h;
        std::memcpy(&h, p, 2);
        if (h == 0x7fff) return false;
      } else {
        uint32_t u;
        std::memcpy(&u, p, 4);
        if (u == 0x7fffffffu) return false;
      }
    }
  return true;
}

ref::Mat to_mat(const TensorView& t) {
  const int64_t cols = t.rank() >= 2 ? t.cols() : 1;
  ref::Mat m(t.rows(), cols);
  for (int64_t i = 0; i < t.rows(); ++i)
    for (int64_t j = 0; j < cols; ++j) m(i, j) = static_cast<double>(load_f32(t, i, j));
  return m;
}

ref::Vec to_vec(const TensorView& t) { return to_mat(t).v; }

HostTensor from_mat(const ref::Mat& m, DType dtype) {
  HostTensor h = HostTensor::matrix(dtype, m.rows, m.cols);
  for (int64_t i = 0; i < m.rows; ++i)
    for (int64_t j = 0; j < m.cols; ++j) h.set(i, j, static_cast<float>(m(i, j)));
  return h;
}

HostTensor from_vec(const ref::Vec& v, DType dtype) {
  HostTensor h = HostTensor::vector(dtype, static_cast<int64_t>(v.size()));
  for (size_t i = 0; i < v.size(); ++i) h.set(static_cast<int64_t>(i), 0, static_cast<float>(v[i]));
  return h;
}

HostTensor from_ints(const std::vector<int32_t>& v) {
  HostTensor h = HostTensor::vector(DType::kInt32, static_cast<int64_t>(v.size()));
  for (size_t i = 0; i < v.size(); ++i) h.set_int(static_cast<int64_t>(i), v[i]);
  return h;
}

}  // namespace coda
