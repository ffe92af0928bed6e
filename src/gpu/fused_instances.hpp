// The compiled fused-operator kernels: forward form (A and B K-major); the 128x256 cooperative and
// the 128x128 pingpong variants (the heuristic picks, as for the plain GEMM); one instantiation per
// (element, variant, program). CMakeLists.txt reads the entries below (one per line, this exact
// shape) and generates one translation unit per entry and element type, so they build in parallel.
#pragma once

#include "coda/ops.hpp"
#include "gemm_instances.hpp"

#define CODA_FUSED_KERNELS(X, E)                                      \
  X(E, true, true, 0, ::coda::programs::ResidualRmsNormPartial)       \
  X(E, true, true, 2, ::coda::programs::ResidualRmsNormPartial)       \
  X(E, true, true, 0, ::coda::programs::Swiglu)                       \
  X(E, true, true, 2, ::coda::programs::Swiglu)                       \
  X(E, true, true, 0, ::coda::programs::Rope)                         \
  X(E, true, true, 2, ::coda::programs::Rope)                         \
  X(E, true, true, 0, ::coda::programs::QkvSqsum)                     \
  X(E, true, true, 2, ::coda::programs::QkvSqsum)                     \
  X(E, true, true, 0, ::coda::programs::LmHeadLse)                    \
  X(E, true, true, 2, ::coda::programs::LmHeadLse)

#define CODA_FUSED_ALL(X)                    \
  CODA_FUSED_KERNELS(X, cutlass::bfloat16_t) \
  CODA_FUSED_KERNELS(X, cutlass::half_t)
