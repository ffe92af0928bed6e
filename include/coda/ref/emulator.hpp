// The CPU emulator: every coda operator run on host memory the way the GPU runs it.
//
// GEMM epilogue programs are the very structs the kernels instantiate (coda/ops/*.hpp), driven
// by a host context: the GEMM tile is accumulated in fp32 from the stored bf16/fp16 inputs, the
// program visits each column pair, outputs are rounded once to their dtype, partial reductions
// are flushed per tile (tile_m x tile_n = the partial grain). Elementwise operators use the same
// functors (coda/epilogue/*.hpp). Arguments go through the same validate() as the GPU path, plus
// checks of host-readable data (target range, positions >= 0). The entry points mirror the GPU's
// (coda/gpu.hpp) one for one; the C ABI runs these on host tensors.
#pragma once

#include "coda/ops.hpp"

namespace coda::emu {

struct EmuConfig {
  int64_t tile_m = CODA_PARTIAL_ROWS;
  int64_t tile_n = CODA_PARTIAL_COLS;
  Grain grain() const { return Grain{tile_m, tile_n}; }
};

Status gemm(const GemmArgs& args, const EmuConfig& cfg = {});
Status gemm_residual_rmsnorm_partial(const ResidualRmsNormPartialArgs& args, const EmuConfig& cfg = {});
Status rms_finish(const RmsFinishArgs& args);
Status gemm_rmsnorm_backward(const RmsNormBackwardArgs& args, const EmuConfig& cfg = {});
Status row_sum_finish(const RowSumFinishArgs& args);
Status col_sum_finish(const ColSumFinishArgs& args);
Status gemm_swiglu(const SwigluArgs& args, const EmuConfig& cfg = {});  // with or without rstd
Status gemm_rmsnorm_swiglu(const SwigluArgs& args, const EmuConfig& cfg = {});  // rstd required
Status gemm_swiglu_backward(const SwigluBackwardArgs& args, const EmuConfig& cfg = {});
Status gemm_rope(const RopeArgs& args, const EmuConfig& cfg = {});  // with or without rstd
Status gemm_rmsnorm_rope(const RopeArgs& args, const EmuConfig& cfg = {});  // rstd required
Status rope_backward(const RopeBackwardArgs& args);
Status gemm_qkv_sqsum(const QkvSqsumArgs& args, const EmuConfig& cfg = {});
Status qknorm_rope(const QkNormRopeArgs& args, const EmuConfig& cfg = {});
Status qknorm_rope_backward(const QkNormRopeBackwardArgs& args, const EmuConfig& cfg = {});
Status gemm_lse(const LmHeadLseArgs& args, const EmuConfig& cfg = {});  // with or without rstd
Status gemm_rmsnorm_lse(const LmHeadLseArgs& args, const EmuConfig& cfg = {});  // rstd required
Status lse_finish(const LseFinishArgs& args);
Status cross_entropy(const CrossEntropyArgs& args);
// gemm_(rmsnorm_)lse + lse_finish + cross_entropy on a host workspace (plan_lm_head_loss).
Status lm_head_loss(const LmHeadLossArgs& args);
// Training without a dlogits pass (coda/ops/cross_entropy.hpp): the shifted exponentials and their
// row scale on a host workspace (plan_lm_head_train), then the backward's two GEMMs.
Status lm_head_train(const LmHeadTrainArgs& args);
Status lm_head_backward(const LmHeadBackwardArgs& args);
// Their steps: the LmHeadExp program (library grain) and D = v[m] acc (the RowScale program).
Status gemm_lse_exp(const LmHeadExpArgs& args, const EmuConfig& cfg = {});
Status gemm_row_scale(const TensorView& a, const TensorView& b, const TensorView& row_scale, const TensorView& d,
                      const EmuConfig& cfg = {});

// Weight-layout helpers (ops/swiglu.hpp, ops/rope.hpp): row copies, values unchanged.
Status interleave_gate_up(const TensorView& gate, const TensorView& up, const TensorView& out);
Status permute_rotate_half_to_interleaved(const TensorView& w, const HeadDims& heads, const TensorView& out);

}  // namespace coda::emu
