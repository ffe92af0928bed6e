// The CPU emulator as a block Backend: scratch memory on the host, operators from coda::emu.
#pragma once

#include <vector>

#include "coda/host.hpp"
#include "coda/ref/emulator.hpp"

namespace coda::emu {

class EmuBackend {
 public:
  explicit EmuBackend(EmuConfig cfg = {}) : cfg_(cfg) {}

  Grain grain() const { return cfg_.grain(); }
  // A scratch tensor living as long as the backend (cols == 0: a vector of `rows`).
  TensorView scratch(DType dtype, int64_t rows, int64_t cols) {
    buffers_.push_back(cols == 0 ? HostTensor::vector(dtype, rows) : HostTensor::matrix(dtype, rows, cols));
    buffers_.back().poison();
    return buffers_.back().view();
  }

  Status gemm(const GemmArgs& a) { return emu::gemm(a, cfg_); }
  Status gemm_residual_rmsnorm_partial(const ResidualRmsNormPartialArgs& a) {
    return emu::gemm_residual_rmsnorm_partial(a, cfg_);
  }
  Status rms_finish(const RmsFinishArgs& a) { return emu::rms_finish(a); }
  Status gemm_rmsnorm_backward(const RmsNormBackwardArgs& a) { return emu::gemm_rmsnorm_backward(a, cfg_); }
  Status row_sum_finish(const RowSumFinishArgs& a) { return emu::row_sum_finish(a); }
  Status col_sum_finish(const ColSumFinishArgs& a) { return emu::col_sum_finish(a); }
  Status gemm_swiglu(const SwigluArgs& a) { return emu::gemm_swiglu(a, cfg_); }
  Status gemm_swiglu_backward(const SwigluBackwardArgs& a) { return emu::gemm_swiglu_backward(a, cfg_); }
  Status gemm_rope(const RopeArgs& a) { return emu::gemm_rope(a, cfg_); }
  Status rope_backward(const RopeBackwardArgs& a) { return emu::rope_backward(a); }

 private:
  EmuConfig cfg_;
  std::vector<HostTensor> buffers_;
};

}  // namespace coda::emu
