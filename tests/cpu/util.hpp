// Test helpers: fresh random inputs (seed printed, CODA_TEST_SEED to replay), host tensors,
// and design.md's tolerance rule.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>

#include "coda/host.hpp"
#include "coda/ref/reference.hpp"

namespace coda::test {

// One seed per test, fresh each run unless CODA_TEST_SEED is set; printed on failure.
inline uint64_t seed() {
  if (const char* s = std::getenv("CODA_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  static std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

class Rng {
 public:
  explicit Rng(uint64_t s) : seed_(s), gen_(s) {}
  uint64_t seed() const { return seed_; }
  double normal(double sd = 1.0) { return std::normal_distribution<double>(0.0, sd)(gen_); }
  double uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(gen_); }
  int64_t integer(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(gen_); }
  ref::Mat mat(int64_t r, int64_t c, double sd = 1.0) {
    ref::Mat m(r, c);
    for (double& x : m.v) x = normal(sd);
    return m;
  }
  ref::Vec vec(int64_t n, double mean, double sd) {
    ref::Vec v(static_cast<size_t>(n));
    for (double& x : v) x = mean + normal(sd);
    return v;
  }

 private:
  uint64_t seed_;
  std::mt19937_64 gen_;
};

#define CODA_SEEDED_RNG(name)                 \
  ::coda::test::Rng name(::coda::test::seed()); \
  SCOPED_TRACE("seed " + std::to_string(name.seed()) + " (replay with CODA_TEST_SEED)")

// Smallest row stride (elements) >= cols whose rows start on 16-byte boundaries.
inline int64_t padded_stride(DType t, int64_t cols) {
  const int64_t per16 = 16 / static_cast<int64_t>(dtype_size(t));
  return (cols + per16 - 1) / per16 * per16;
}

// A host tensor with random values (exact in its dtype); `mat` receives the stored values as
// doubles. Rows are padded to 16 bytes unless row_stride is given.
inline HostTensor random_tensor(Rng& rng, DType t, int64_t rows, int64_t cols, double sd, ref::Mat* mat,
                                int64_t row_stride = -1) {
  HostTensor h = HostTensor::matrix(t, rows, cols, row_stride < 0 ? padded_stride(t, cols) : row_stride);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) h.set(i, j, static_cast<float>(rng.normal(sd)));
  if (mat) *mat = to_mat(h);
  return h;
}

// A poisoned output: a vector when cols == 0, else a matrix with 16-byte-padded rows.
inline HostTensor output(DType t, int64_t rows, int64_t cols) {
  HostTensor h = cols == 0 ? HostTensor::vector(t, rows) : HostTensor::matrix(t, rows, cols, padded_stride(t, cols));
  h.poison();
  return h;
}

// design.md 7: fused error vs float64 <= 2 x the unfused bf16 pipeline's error + eps.
inline ::testing::AssertionResult within_rule(const std::string& what, double fused, double unfused,
                                              double eps = 1e-4) {
  const double bound = 2.0 * unfused + eps;
  if (!std::isnan(fused) && fused <= bound)
    return ::testing::AssertionSuccess() << what << ": fused " << fused << " <= " << bound;
  return ::testing::AssertionFailure() << what << ": fused rel. error " << fused << " exceeds 2 x unfused ("
                                       << unfused << ") + " << eps << " = " << bound;
}

// A poisoned dense fp32 partial-reduction tensor.
inline HostTensor partials(int64_t rows, int64_t cols) {
  HostTensor h = HostTensor::matrix(DType::kFP32, rows, cols);
  h.poison();
  return h;
}

#define CODA_ASSERT_OK(expr)                                  \
  do {                                                        \
    const ::coda::Status coda_s_ = (expr);                    \
    ASSERT_TRUE(coda_s_.ok()) << #expr << ": " << coda_s_.message(); \
  } while (0)

inline ref::Mat rounded(ref::Mat m) {
  ref::round_bf16(m);
  return m;
}

}  // namespace coda::test
