// GEMM kernels, bf16 inputs, wgrad: A M-major, B N-major.
#include "gemm_instances.hpp"

namespace coda::sm90 {
CODA_GEMM_KERNELS(CODA_GEMM_INSTANTIATE, cutlass::bfloat16_t, false, false)
}  // namespace coda::sm90
