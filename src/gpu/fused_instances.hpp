// The compiled fused-operator kernels: forward form (A and B K-major), the 128x256 cooperative
// variant (one 256-column partial granule per tile), one instantiation per (element, program).
#pragma once

#include "coda/ops.hpp"
#include "gemm_instances.hpp"

#define CODA_FUSED_KERNELS(X, E)                                      \
  X(E, true, true, 0, ::coda::programs::ResidualRmsNormPartial)       \
  X(E, true, true, 0, ::coda::programs::Swiglu)                       \
  X(E, true, true, 0, ::coda::programs::Rope)                         \
  X(E, true, true, 0, ::coda::programs::QkvSqsum)                     \
  X(E, true, true, 0, ::coda::programs::LmHeadLse)

#define CODA_FUSED_ALL(X)                    \
  CODA_FUSED_KERNELS(X, cutlass::bfloat16_t) \
  CODA_FUSED_KERNELS(X, cutlass::half_t)
