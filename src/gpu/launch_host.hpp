// Host-side helpers shared by the GPU entry points: device and pointer checks, operand forms,
// TMA descriptors for epilogue outputs and tile operands, environment switches.
#pragma once

#include <cuda_runtime_api.h>

#include <initializer_list>

#include "coda/kernel/epilogue_params.hpp"
#include "coda/tensor.hpp"

namespace coda::gpu_host {

// NOT_SUPPORTED unless the current device is an sm_90 GPU (cached per device).
Status check_device(const char* op);
// INVALID_ARGUMENT when a defined tensor's pointer is host memory or unknown to CUDA.
Status check_device_pointer(const char* op, const char* name, const TensorView& t);

// A tensor argument with the name its error messages use.
struct Named {
  const char* name;
  TensorView t;
};
// The checks every GPU entry makes after validating its arguments (and after any early return on
// empty sizes): check_device, then check_device_pointer on each tensor in order.
Status device_prologue(const char* op, std::initializer_list<Named> tensors);

// K-major when the unit stride is along K (or K has one element), else M/N-major. Returns the
// non-unit stride, made TMA-legal when its dimension has a single element.
bool k_major(const TensorView& t);
int64_t lead_stride(const TensorView& t, bool kmaj);

// A TMA store descriptor for an M x cols row-major output in epilogue slot `slot`: boxes of 64
// rows x (64 >> shift) columns (at most 128 bytes), swizzled like the kernel's staging.
Status bind_output(sm90::EpiParams& epi, int slot, const TensorView& t, const char* op, int shift = 0);
// A TMA-staged tile operand (16-bit dtypes): 64-row x 64-column boxes, 128B swizzle.
Status bind_tma_tile(sm90::EpiParams& epi, int slot, const TensorView& t, const char* op);
// A tile operand read element-wise from global memory.
void bind_tile(sm90::EpiParams& epi, int slot, const TensorView& t);
// An fp32 partial tensor.
sm90::EpiPartial partial_of(const TensorView& t, int seg_shift = 0);

int dtype_code(DType d);
int sm_count();
// The device memory's peak bandwidth in GB/s from its clock and bus width (0 where the driver does
// not say): choose_config's device class.
double dram_gbps();
bool env_on(const char* name);
// Diagnostics for benchmarks only (bits, combinable; outputs are wrong with any but 4):
// CODA_DEBUG_EPILOGUE=1 skips the epilogue, 2 its program, 4 prints the cycles per phase of every
// launch (waits for it) to stderr in a build with -DCODA_EPI_TRACE, 8 skips the tile-operand
// loads (the residual), 16 the output stores, 32 the wait for a staging buffer (races with its
// previous TMA store).
int debug_flags();

}  // namespace coda::gpu_host
