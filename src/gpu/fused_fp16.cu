// Fused-operator kernels, fp16 inputs.
#include "fused_instances.hpp"

namespace coda::sm90 {
CODA_FUSED_KERNELS(CODA_GEMM_INSTANTIATE, cutlass::half_t)
}  // namespace coda::sm90
