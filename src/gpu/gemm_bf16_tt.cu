// GEMM kernels, bf16 inputs, dgrad: A K-major, B N-major.
#include "gemm_instances.hpp"

namespace coda::sm90 {
CODA_GEMM_KERNELS(CODA_GEMM_INSTANTIATE, cutlass::bfloat16_t, true, false)
}  // namespace coda::sm90
