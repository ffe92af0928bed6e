// Fused-operator kernels, bf16 inputs.
#include "fused_instances.hpp"

namespace coda::sm90 {
CODA_FUSED_KERNELS(CODA_GEMM_INSTANTIATE, cutlass::bfloat16_t)
}  // namespace coda::sm90
