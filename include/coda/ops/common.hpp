// Shared pieces of every operator's argument struct.
#pragma once

#include <cstdint>

#include "coda/check.hpp"
#include "coda/coda.h"
#include "coda/tensor.hpp"

namespace coda {

// Granularity of partial reductions. The GPU kernels always use the library constants; the CPU
// emulator takes any grain, so tests can check that the math does not depend on it.
struct Grain {
  int64_t rows = CODA_PARTIAL_ROWS;
  int64_t cols = CODA_PARTIAL_COLS;
};

struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
  bool empty() const { return m == 0 || n == 0; }
};

// Checks the GEMM operands a [M, K] and b [N, K] (each with one unit stride: K-major or
// M/N-major, the other stride a multiple of 16 bytes), the same dtype (bf16 or fp16); returns the
// shape (zeros on failure). Any K >= 0 is accepted: K = 0 runs the epilogue on a zero accumulator
// (the weight gradient of an empty batch is zero, as in PyTorch).
GemmShape check_gemm_operands(ArgCheck& check, const TensorView& a, const TensorView& b);

// The *_rmsnorm_* entry points require the row scale: INVALID_ARGUMENT naming 'rstd' when absent.
Status check_rmsnorm_rstd(const char* op, const TensorView& rstd);

}  // namespace coda
