// The compiled fused-operator kernels: the forward form (A and B K-major: X(E, true, true, ...)) or
// the dgrad form of the backward operators (B N-major, the weight [K, N] row-major viewed as
// [N, K]: X(E, true, false, ...)); the 128x256 cooperative and the 128x128 pingpong variants; one
// instantiation per (element, form, variant, program). CMakeLists.txt reads the entries below (one
// per line, this exact shape) and generates one translation unit per entry and element type (an
// entry that names its element, as in CODA_FUSED_KERNELS_BF16, one unit), so they build in
// parallel.
#pragma once

#include "coda/ops.hpp"
#include "gemm_instances.hpp"

#define CODA_FUSED_KERNELS(X, E)                                      \
  X(E, true, true, 0, ::coda::programs::ResidualRmsNormPartial)       \
  X(E, true, true, 2, ::coda::programs::ResidualRmsNormPartial)       \
  X(E, true, true, 0, ::coda::programs::ResidualRmsNormPartialDirect) \
  X(E, true, true, 2, ::coda::programs::ResidualRmsNormPartialDirect) \
  X(E, true, true, 0, ::coda::programs::ResidualRmsNormPartialLongK)  \
  X(E, true, true, 2, ::coda::programs::ResidualRmsNormPartialLongK)  \
  X(E, true, true, 0, ::coda::programs::Swiglu)                       \
  X(E, true, true, 2, ::coda::programs::Swiglu)                       \
  X(E, true, true, 0, ::coda::programs::Rope)                         \
  X(E, true, true, 2, ::coda::programs::Rope)                         \
  X(E, true, true, 0, ::coda::programs::QkvSqsum)                     \
  X(E, true, true, 2, ::coda::programs::QkvSqsum)                     \
  X(E, true, true, 0, ::coda::programs::LmHeadLse)                    \
  X(E, true, true, 2, ::coda::programs::LmHeadLse)                    \
  X(E, true, false, 0, ::coda::programs::RowScale)                    \
  X(E, true, false, 2, ::coda::programs::RowScale)                    \
  X(E, true, false, 0, ::coda::programs::RmsNormBackward)             \
  X(E, true, false, 2, ::coda::programs::RmsNormBackward)             \
  X(E, true, false, 0, ::coda::programs::SwigluBackward)              \
  X(E, true, false, 2, ::coda::programs::SwigluBackward)

// Programs whose operator takes bf16 only (epi::bf16_only): no fp16 kernels.
#define CODA_FUSED_KERNELS_BF16(X)                                            \
  X(cutlass::bfloat16_t, true, true, 0, ::coda::programs::LmHeadExp)          \
  X(cutlass::bfloat16_t, true, true, 2, ::coda::programs::LmHeadExp)

#define CODA_FUSED_ALL(X)                    \
  CODA_FUSED_KERNELS(X, cutlass::bfloat16_t) \
  CODA_FUSED_KERNELS(X, cutlass::half_t)     \
  CODA_FUSED_KERNELS_BF16(X)
