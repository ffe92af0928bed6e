// The list of compiled GEMM kernels: (element, A K-major, B K-major, variant, program).
// Instantiation TUs expand CODA_GEMM_KERNELS with CODA_GEMM_INSTANTIATE; the dispatcher with
// CODA_GEMM_EXTERN, so each kernel is compiled exactly once.
#pragma once

#include "coda/ops/gemm.hpp"
#include "gemm_launch.cuh"

#define CODA_GEMM_KERNELS(X, E, AK, BK)                                                          \
  X(E, AK, BK, 0, ::coda::programs::Identity)                                                    \
  X(E, AK, BK, 1, ::coda::programs::Identity)                                                    \
  X(E, AK, BK, 2, ::coda::programs::Identity)                                                    \
  X(E, AK, BK, 0, ::coda::programs::LinearCombination)                                           \
  X(E, AK, BK, 1, ::coda::programs::LinearCombination)                                           \
  X(E, AK, BK, 2, ::coda::programs::LinearCombination)

#define CODA_GEMM_INSTANTIATE(E, AK, BK, V, P) \
  template ::coda::Status launch_variant<E, AK, BK, V, P>(const LaunchArgs<P>&, cudaStream_t);
#define CODA_GEMM_EXTERN(E, AK, BK, V, P) \
  extern template ::coda::Status launch_variant<E, AK, BK, V, P>(const LaunchArgs<P>&, cudaStream_t);

// Every (element, form) pair; each expands to one instantiation TU.
#define CODA_GEMM_FORMS(X)                          \
  CODA_GEMM_KERNELS(X, cutlass::bfloat16_t, true, true)  \
  CODA_GEMM_KERNELS(X, cutlass::bfloat16_t, true, false) \
  CODA_GEMM_KERNELS(X, cutlass::bfloat16_t, false, false) \
  CODA_GEMM_KERNELS(X, cutlass::half_t, true, true)      \
  CODA_GEMM_KERNELS(X, cutlass::half_t, true, false)     \
  CODA_GEMM_KERNELS(X, cutlass::half_t, false, false)
