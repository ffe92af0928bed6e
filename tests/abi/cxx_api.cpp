// The documented C++ API through libcoda.so alone (CTest abi.cxx_api): this program links the
// shared library and nothing else of coda, so each function it names must be exported
// (src/libcoda.map); one that is not fails the build here, at link time.
//
// It calls every entry point of gpu.hpp and ref/emulator.hpp and every validate() with empty
// arguments (each must fail with a message, before touching a GPU), and runs the host pieces
// (tensor views, host tensors, the float64 reference, configs, planning) on small inputs.
// Functions that need real work or a GPU (block checks, the unfused block) are only referenced.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "coda/block/gpu_backend.hpp"
#include "coda/block/llama3.hpp"
#include "coda/gpu.hpp"
#include "coda/host.hpp"
#include "coda/ops.hpp"
#include "coda/ref/block_check.hpp"
#include "coda/ref/emulator.hpp"
#include "coda/ref/reference.hpp"
#include "coda/tensor.hpp"

namespace {

int g_failures = 0;
int g_calls = 0;

void fail(const std::string& what) {
  ++g_failures;
  std::printf("FAIL: %s\n", what.c_str());
}

// A call with empty arguments must fail with a message.
void expect_rejected(const char* what, const coda::Status& s) {
  ++g_calls;
  if (s.ok() || s.message().empty()) fail(std::string(what) + ": expected an error with a message, got '" +
                                          s.message() + "'");
}

void expect(bool ok, const std::string& what) {
  ++g_calls;
  if (!ok) fail(what);
}

// Keeps a reference to a function the test does not call, so the link must resolve it.
void* volatile g_sink;
template <class F>
void reference(F f) {
  g_sink = reinterpret_cast<void*>(f);
}

}  // namespace

#define REJECT(call) expect_rejected(#call, call)

int main() {
  using namespace coda;

  // ---- tensor.hpp --------------------------------------------------------------------------------
  std::vector<uint16_t> buf(16 * 4);
  const TensorView v = TensorView::matrix(buf.data(), DType::kBF16, 4, 16);
  expect(v.describe() == "[4, 16] bf16, strides (16, 1)", "TensorView::describe: " + v.describe());
  expect(v.transposed().describe() == "[16, 4] bf16, strides (1, 16)", "TensorView::transposed");
  expect(v.row_slice(1, 2).rows() == 2 && v.numel() == 64 && v.same_view(v), "TensorView members");
  expect(v.byte_extent().second - v.byte_extent().first == 128, "TensorView::byte_extent");
  expect(TensorView::vector(buf.data(), DType::kFP32, 3).rank() == 1, "TensorView::vector");
  expect(std::string(dtype_name(DType::kFP16)) == "fp16" && dtype_size(DType::kFP32) == 4, "dtype_name/size");

  // ---- ops.hpp: validation and planning ---------------------------------------------------------
  REJECT(validate(GemmArgs{}));
  REJECT(validate(ResidualRmsNormPartialArgs{}));
  REJECT(validate(RmsFinishArgs{}));
  REJECT(validate(RmsNormBackwardArgs{}));
  REJECT(validate(RowSumFinishArgs{}));
  REJECT(validate(ColSumFinishArgs{}));
  REJECT(validate(SwigluArgs{}));
  REJECT(validate(SwigluBackwardArgs{}));
  REJECT(validate(RopeArgs{}));
  REJECT(validate(RopeBackwardArgs{}));
  REJECT(validate(QkvSqsumArgs{}));
  REJECT(validate(QkNormRopeArgs{}));
  REJECT(validate(QkNormRopeBackwardArgs{}));
  REJECT(validate(LmHeadLseArgs{}));
  REJECT(validate(LseFinishArgs{}));
  REJECT(validate(CrossEntropyArgs{}));
  REJECT(validate(Llama3Dims{}, Llama3Weights{}, Llama3Activations{}));
  REJECT(validate(Llama3Dims{}, Llama3Weights{}, Llama3Activations{}, Llama3Grads{}));
  REJECT(validate_interleave_gate_up({}, {}, {}));
  REJECT(validate_permute_rotate_half_to_interleaved({}, HeadDims{}, {}));
  LmHeadLossPlan plan;
  REJECT(plan_lm_head_loss(LmHeadLossArgs{}, &plan));
  expect(lm_head_loss_workspace_bytes(8, 1000) > 0, "lm_head_loss_workspace_bytes");
  REJECT(validate(LmHeadExpArgs{}));
  LmHeadTrainPlan train_plan;
  REJECT(plan_lm_head_train(LmHeadTrainArgs{}, &train_plan));
  expect(lm_head_train_workspace_bytes(8, 1000) > 0, "lm_head_train_workspace_bytes");
  LmHeadBackwardPlan backward_plan;
  REJECT(plan_lm_head_backward(LmHeadBackwardArgs{}, &backward_plan));
  expect(lm_head_backward_workspace_bytes(8, 64) > 0, "lm_head_backward_workspace_bytes");
  expect(rope_frequencies(64, 500000.0).size() == 32, "rope_frequencies");

  // ---- gpu.hpp: every entry point validates before it touches a GPU -------------------------------
  GemmConfig cfg;
  REJECT(gemm(GemmArgs{}));
  REJECT(gemm_config(GemmArgs{}, &cfg));
  REJECT(gemm_with_config(GemmArgs{}, cfg));
  REJECT(gemm_residual_rmsnorm_partial(ResidualRmsNormPartialArgs{}));
  REJECT(rms_finish(RmsFinishArgs{}));
  REJECT(gemm_swiglu(SwigluArgs{}));
  REJECT(gemm_rmsnorm_swiglu(SwigluArgs{}));
  REJECT(gemm_rope(RopeArgs{}));
  REJECT(gemm_rmsnorm_rope(RopeArgs{}));
  REJECT(gemm_qkv_sqsum(QkvSqsumArgs{}));
  REJECT(qknorm_rope(QkNormRopeArgs{}));
  REJECT(gemm_lse(LmHeadLseArgs{}));
  REJECT(gemm_rmsnorm_lse(LmHeadLseArgs{}));
  REJECT(lse_finish(LseFinishArgs{}));
  REJECT(cross_entropy(CrossEntropyArgs{}));
  REJECT(lm_head_loss(LmHeadLossArgs{}));
  REJECT(lm_head_train(LmHeadTrainArgs{}));
  REJECT(lm_head_backward(LmHeadBackwardArgs{}));
  REJECT(gemm_rmsnorm_backward(RmsNormBackwardArgs{}));
  REJECT(gemm_swiglu_backward(SwigluBackwardArgs{}));
  REJECT(row_sum_finish(RowSumFinishArgs{}));
  REJECT(col_sum_finish(ColSumFinishArgs{}));
  REJECT(rope_backward(RopeBackwardArgs{}));
  REJECT(qknorm_rope_backward(QkNormRopeBackwardArgs{}));
  REJECT(interleave_gate_up({}, {}, {}));
  REJECT(permute_rotate_half_to_interleaved({}, HeadDims{}, {}));
  REJECT(unfused::add({}, {}, {}));
  REJECT(unfused::rmsnorm({}, {}, 1e-5f, {}, {}));
  REJECT(unfused::swiglu({}, {}));
  REJECT(unfused::rope({}, {}, {}, HeadDims{}));
  REJECT(unfused::rmsnorm_backward({}, {}, {}, {}, {}, {}, {}, {}, {}));
  REJECT(unfused::swiglu_backward({}, {}, {}, {}, {}));
  // kernel/config.hpp, reached through gemm_config
  GemmProblem prob;
  prob.m = prob.n = prob.k = 4096;
  expect(!choose_config(prob).describe().empty() && !prob.describe().empty(), "choose_config/describe");
  expect(form_name(GemmForm::kTN) && variant_name(KernelVariant::k128x256_c2x1), "form/variant names");
  expect(variant_tile_m(KernelVariant::k128x256_c2x1) > 0 && variant_tile_n(KernelVariant::k128x256_c2x1) > 0,
         "variant tiles");

  // ---- ref/emulator.hpp ------------------------------------------------------------------------
  REJECT(emu::gemm(GemmArgs{}));
  REJECT(emu::gemm_residual_rmsnorm_partial(ResidualRmsNormPartialArgs{}));
  REJECT(emu::rms_finish(RmsFinishArgs{}));
  REJECT(emu::gemm_rmsnorm_backward(RmsNormBackwardArgs{}));
  REJECT(emu::row_sum_finish(RowSumFinishArgs{}));
  REJECT(emu::col_sum_finish(ColSumFinishArgs{}));
  REJECT(emu::gemm_swiglu(SwigluArgs{}));
  REJECT(emu::gemm_rmsnorm_swiglu(SwigluArgs{}));
  REJECT(emu::gemm_swiglu_backward(SwigluBackwardArgs{}));
  REJECT(emu::gemm_rope(RopeArgs{}));
  REJECT(emu::gemm_rmsnorm_rope(RopeArgs{}));
  REJECT(emu::rope_backward(RopeBackwardArgs{}));
  REJECT(emu::gemm_qkv_sqsum(QkvSqsumArgs{}));
  REJECT(emu::qknorm_rope(QkNormRopeArgs{}));
  REJECT(emu::qknorm_rope_backward(QkNormRopeBackwardArgs{}));
  REJECT(emu::gemm_lse(LmHeadLseArgs{}));
  REJECT(emu::gemm_rmsnorm_lse(LmHeadLseArgs{}));
  REJECT(emu::lse_finish(LseFinishArgs{}));
  REJECT(emu::cross_entropy(CrossEntropyArgs{}));
  REJECT(emu::lm_head_loss(LmHeadLossArgs{}));
  REJECT(emu::lm_head_train(LmHeadTrainArgs{}));
  REJECT(emu::lm_head_backward(LmHeadBackwardArgs{}));
  REJECT(emu::interleave_gate_up({}, {}, {}));
  REJECT(emu::permute_rotate_half_to_interleaved({}, HeadDims{}, {}));

  // ---- host.hpp and the float64 reference: a small GEMM through the emulator --------------------
  ref::Mat a(3, 8), b(5, 8);
  for (int64_t i = 0; i < 3 * 8; ++i) a.v[i] = double(i % 7) - 3;
  for (int64_t i = 0; i < 5 * 8; ++i) b.v[i] = double(i % 5) - 2;
  const HostTensor ha = from_mat(a, DType::kBF16), hb = from_mat(b, DType::kBF16);
  HostTensor hd = HostTensor::matrix(DType::kFP32, 3, 8);  // 32-byte rows
  hd.poison();
  GemmArgs g;
  g.a = ha.view();
  g.b = hb.view();
  g.d = TensorView::matrix(hd.data(), DType::kFP32, 3, 5, 8);
  const Status s = emu::gemm(g);
  expect(s.ok(), "emu::gemm on host tensors: " + s.message());
  expect(s.ok() && ref::rel_error(to_mat(g.d), ref::matmul_nt(a, b)) == 0.0, "emu::gemm vs ref::matmul_nt");
  expect(to_vec(TensorView::vector(hd.data(), DType::kFP32, 2)).size() == 2 && load_f32(g.d, 0, 0) == hd.get(0, 0),
         "to_vec / load_f32");
  HostTensor hi = from_ints({1, -100, 3});
  store_f32(hd.view(), 0, 0, 1.5f);
  expect(hi.get_int(1) == -100 && load_i32(hi.view(), 2) == 3 && hd.get(0, 0) == 1.5f, "host element access");
  expect(from_vec(ref::Vec{1.0, 2.0}, DType::kFP32).rows() == 2, "from_vec");

  // ---- referenced only: need a GPU or real work ---------------------------------------------------
  reference(&llama3_forward_unfused);
  reference(&llama3_backward_unfused);
  reference(&check_llama3_block_gpu);
  reference(&check_llama3_block_emulated);
  reference(&check_llama3_block);
  reference(&default_check_dims);
  { GpuBackend be; be.reset(); }  // constructor and destructor (no allocation made)

  std::printf("abi.cxx_api: %d checks through libcoda.so, %s\n", g_calls,
              g_failures ? (std::to_string(g_failures) + " failed").c_str() : "ok");
  return g_failures ? 1 : 0;
}
