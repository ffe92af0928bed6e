// GEMM kernels, fp16 inputs, forward: A K-major, B K-major.
#include "gemm_instances.hpp"

namespace coda::sm90 {
CODA_GEMM_KERNELS(CODA_GEMM_INSTANTIATE, cutlass::half_t, true, true)
}  // namespace coda::sm90
