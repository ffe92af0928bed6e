// The GPU entry points (sm_90a). Each validates its arguments (the same validate() as the CPU
// emulator), chooses a config and launches on `stream`; nothing is written when validation fails.
#pragma once

#include <cuda_runtime_api.h>

#include "coda/kernel/config.hpp"
#include "coda/ops.hpp"

namespace coda {

// D = A B^T (the empty epilogue program) when args.c is absent, alpha == 1 and no scalar pointers
// are given; otherwise D = alpha A B^T + beta C.
Status gemm(const GemmArgs& args, cudaStream_t stream = nullptr);

// The config gemm() would use for this call (heuristic, or the autotune cache with
// CODA_AUTOTUNE=1), without launching. Fails like gemm() on bad arguments.
Status gemm_config(const GemmArgs& args, GemmConfig* config);

// Run gemm() with an explicit config (benchmarks and tests).
Status gemm_with_config(const GemmArgs& args, const GemmConfig& config, cudaStream_t stream = nullptr);

}  // namespace coda
