// Forward fused operators on the GPU: validation (the emulator's validate()), GPU-only rules,
// epilogue bindings, launch of the fused kernel.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "coda/gpu.hpp"
#include "fused_instances.hpp"
#include "launch_host.hpp"

namespace coda::sm90 {
CODA_FUSED_ALL(CODA_GEMM_EXTERN)
}  // namespace coda::sm90

namespace coda {
namespace {

using namespace gpu_host;
using sm90::LaunchArgs;

// GPU rules on the tile outputs, checked before anything is written: one dtype per launch; the
// epilogue stages 64 rows of every output per chunk in epi::arena_bytes per warpgroup (16 KiB, 8 KiB
// more per double-width output; half-width outputs take half, double-width ones twice), so fp32
// outputs of two-output operators do not fit; outputs staged over a tile operand
// (epi::stage_in_tile) take no arena bytes and must be 16-bit; outputs stored from registers
// (epi::store_direct) take none, in any output dtype.
template <class Program>
Status check_staging(const char* op, const sm90::EpiParams& e) {
  constexpr epi::Resources R = epi::resources_of<Program>();
  int dt = -1;
  for (int o = 0; o < e.num_outs; ++o) {
    if (!e.outs[o].defined) continue;
    if (dt >= 0 && e.outs[o].dtype != dt)
      return Status::not_supported(std::string(op) + ": the tile outputs of one fused operator must share a dtype");
    dt = e.outs[o].dtype;
  }
  int es = 2;
  for (int o = 0; o < e.num_outs; ++o)
    if (e.outs[o].defined && e.outs[o].dtype == sm90::kDtFP32) es = 4;
  int bytes = 0;
  for (int o = 0; o < e.num_outs; ++o) {
    if (epi::out_direct(R, o)) continue;  // stored from registers (epi::store_direct)
    if (epi::out_tile(R, o) < 0) {
      bytes += 64 * 32 * epi::out_per(R, o) * es;
    } else if (e.outs[o].defined && e.outs[o].dtype == sm90::kDtFP32) {  // staged over a 16-bit tile operand
      return Status::not_supported(std::string(op) +
                                   ": this operator's tile outputs must be bf16 or fp16 (the GPU stages one in place "
                                   "of its 16-bit tile operand)");
    }
  }
  if (bytes > epi::arena_bytes(R))
    return Status::not_supported(std::string(op) + ": these fp32 tile outputs do not fit the epilogue's staging buffer (" +
                                 std::to_string(epi::arena_bytes(R) / 1024) +
                                 " KiB per 64-row chunk); use bf16 or fp16 outputs for this operator");
  return {};
}

// Bytes the epilogue reads (tile operands) and writes (tile outputs) per accumulator element, from
// the program's widths (half, same, double: epi::out_per / tile_per columns per pair) and the bound
// dtypes: GemmProblem::epi_bytes, which choose_fused_config weighs against K.
template <class Program>
double epilogue_bytes(const sm90::EpiParams& e) {
  constexpr epi::Resources R = epi::resources_of<Program>();
  const auto bytes = [](int dt) { return dt == sm90::kDtFP32 || dt == sm90::kDtInt32 ? 4.0 : 2.0; };
  double b = 0.0;
  for (int o = 0; o < e.num_outs; ++o)
    if (e.outs[o].defined) b += 0.5 * epi::out_per(R, o) * bytes(e.outs[o].dtype);
  for (int i = 0; i < sm90::kEpiSlots; ++i)
    if (e.tiles[i].ptr) b += 0.5 * epi::tile_per(R, i) * bytes(e.tiles[i].dtype);
  return b;
}

// Launch a fused program on a [M, K] x b [N, K]: the forward form (kBK: b row-major, the weight
// [N, K]) or the dgrad form of a backward operator (b the weight [K, N] stored row-major, viewed
// as [N, K]: unit stride along N).
template <bool kBK = true, class Program>
Status run_fused(const char* op, const TensorView& a, const TensorView& b, LaunchArgs<Program>& L,
                 cudaStream_t stream) {
  if (!k_major(a))
    return Status::not_supported(std::string(op) + ": argument 'a' [M, K] must be row-major (unit stride along K)");
  if (kBK && !k_major(b))
    return Status::not_supported(std::string(op) +
                                 ": this operator runs the forward form: argument 'b' [N, K] must be row-major (unit "
                                 "stride along K)");
  if (!kBK && !(b.stride(0) == 1 || b.size(0) <= 1))
    return Status::not_supported(std::string(op) +
                                 ": this backward operator runs the dgrad form: argument 'b' [N, K] must be the weight "
                                 "[K, N] stored row-major and viewed transposed (unit stride along N)");
  L.a = a.data();
  L.lda = lead_stride(a, true);
  L.b = b.data();
  L.ldb = lead_stride(b, kBK);
  L.m = a.rows();
  L.n = b.rows();
  L.k = a.cols();
  L.debug = debug_flags();
  GemmProblem prob;
  prob.m = L.m;
  prob.n = L.n;
  prob.k = L.k;
  prob.in = a.dtype();
  prob.form = kBK ? GemmForm::kTN : GemmForm::kTT;  // what CODA_PRINT_CONFIG shows; the rules read the shape
  prob.op = op;
  prob.sm_count = sm_count();
  prob.dram_gbps = dram_gbps();
  prob.epi_bytes = epilogue_bytes<Program>(L.epi);
  // The variant by device and shape (choose_fused_config); both stay compiled for every program.
  KernelVariant forced = KernelVariant::kCount;
  if (const char* v = std::getenv("CODA_FUSED_VARIANT")) {  // benchmarks: force a compiled variant
    if (std::string(v) == "0") forced = KernelVariant::k128x256_c2x1;
    if (std::string(v) == "2") forced = KernelVariant::k128x128_pp_c2x1;
  }
  GemmConfig c = choose_fused_config(prob, forced == KernelVariant::kCount ? nullptr : &forced);
  // Benchmarks: force the tile order (CODA_FUSED_SWIZZLE = 1, 2, 4, 8 or 16 cluster tiles per band;
  // CODA_FUSED_RASTER = M or N); other values are ignored.
  if (const char* v = std::getenv("CODA_FUSED_SWIZZLE")) {
    const std::string w(v);
    for (int sw : {1, 2, 4, 8, 16})
      if (w == std::to_string(sw)) c.swizzle = sw;
  }
  if (const char* v = std::getenv("CODA_FUSED_RASTER")) {
    if (std::string(v) == "M") c.raster_n = false;
    if (std::string(v) == "N") c.raster_n = true;
  }
  L.config = c;
  CODA_TRY(check_staging<Program>(op, L.epi));  // before anything is written
  if (env_on("CODA_PRINT_CONFIG"))
    std::fprintf(stderr, "coda: %s -> %s [fused]\n", prob.describe().c_str(), c.describe().c_str());
  const auto launch = [&](auto element) {
    using E = decltype(element);
    return c.variant == KernelVariant::k128x128_pp_c2x1 ? sm90::launch_variant<E, true, kBK, 2, Program>(L, stream)
                                                        : sm90::launch_variant<E, true, kBK, 0, Program>(L, stream);
  };
  const bool bf16 = a.dtype() == DType::kBF16;
  if constexpr (epi::bf16_only<Program>()) {  // no fp16 kernels compiled (validate refuses fp16 first)
    if (!bf16) return Status::internal(std::string(op) + ": no fp16 kernel for this operator");
    return launch(cutlass::bfloat16_t{});
  } else {
    return bf16 ? launch(cutlass::bfloat16_t{}) : launch(cutlass::half_t{});
  }
}

sm90::EpiVector vec_of(const TensorView& t) {
  sm90::EpiVector v;
  if (t.defined()) {
    v.ptr = t.data();
    v.dtype = dtype_code(t.dtype());
  }
  return v;
}

int log2_exact(int64_t v) {
  int s = 0;
  while ((int64_t{1} << s) < v) ++s;
  return (int64_t{1} << s) == v ? s : -1;
}

Status swiglu_impl(const char* op, const SwigluArgs& args, cudaStream_t stream) {
  CODA_TRY(validate(args));
  if (args.a.rows() == 0) return {};
  CODA_TRY(device_prologue(op, {{"a", args.a}, {"b", args.b}, {"rstd", args.rstd}, {"z_out", args.z_out},
                                {"o_out", args.o_out}}));
  using P = programs::Swiglu;
  LaunchArgs<P> L;
  L.program.flags |= args.rstd.defined() ? P::kHasRstd : 0u;
  L.program.flags |= args.z_out.defined() ? P::kHasZ : 0u;
  L.epi.rows[P::kRowRstd] = vec_of(args.rstd);
  CODA_TRY(bind_output(L.epi, P::kOutZ, args.z_out, op));
  CODA_TRY(bind_output(L.epi, P::kOutO, args.o_out, op, 1));
  return run_fused(op, args.a, args.b, L, stream);
}

Status rope_impl(const char* op, const RopeArgs& args, cudaStream_t stream) {
  CODA_TRY(validate(args));
  if (args.a.rows() == 0) return {};
  CODA_TRY(device_prologue(op, {{"a", args.a}, {"b", args.b}, {"rstd", args.rstd}, {"positions", args.positions},
                                {"freqs", args.freqs}, {"out", args.out}}));
  using P = programs::Rope;
  LaunchArgs<P> L;
  L.program.has_rstd = args.rstd.defined();
  L.program.rope_cols = static_cast<int>(args.heads.rope_cols());
  L.epi.rows[P::kRowRstd] = vec_of(args.rstd);
  L.epi.row_ints[P::kRowPos] = vec_of(args.positions);
  L.epi.cols[P::kColFreq] = vec_of(args.freqs);
  L.epi.cols[P::kColFreq].period = static_cast<int>(args.heads.head_dim);  // one frequency per pair of a head
  L.epi.cols[P::kColFreq].step = 2;
  L.epi.rotation_pos = P::kRowPos;
  L.epi.rotation_freq = P::kColFreq;
  CODA_TRY(bind_output(L.epi, P::kOut, args.out, op));
  return run_fused(op, args.a, args.b, L, stream);
}

Status lse_impl(const char* op, const LmHeadLseArgs& args, cudaStream_t stream) {
  CODA_TRY(validate(args));
  if (args.a.rows() == 0) return {};
  CODA_TRY(device_prologue(op, {{"a", args.a}, {"b", args.b}, {"rstd", args.rstd}, {"targets", args.targets},
                                {"logits_out", args.logits_out}, {"lse_partials", args.lse_partials},
                                {"target_logit_out", args.target_logit_out}}));
  using P = programs::LmHeadLse;
  LaunchArgs<P> L;
  L.program.flags |= args.rstd.defined() ? P::kHasRstd : 0u;
  L.program.flags |= args.logits_out.defined() ? P::kHasLogits : 0u;
  L.program.ignore_index = args.ignore_index;
  L.program.classes = static_cast<int>(args.b.rows());
  L.epi.rows[P::kRowRstd] = vec_of(args.rstd);
  L.epi.row_ints[P::kRowTargets] = vec_of(args.targets);
  CODA_TRY(bind_output(L.epi, P::kOutLogits, args.logits_out, op));
  L.epi.row_outs[P::kRowOutTarget] = static_cast<float*>(args.target_logit_out.data());
  L.epi.row_lses[P::kRowLse] = partial_of(args.lse_partials);
  return run_fused(op, args.a, args.b, L, stream);
}

Status lse_exp_impl(const char* op, const LmHeadExpArgs& args, cudaStream_t stream) {
  CODA_TRY(validate(args));
  if (args.a.rows() == 0) return {};
  CODA_TRY(device_prologue(op, {{"a", args.a}, {"b", args.b}, {"rstd", args.rstd}, {"targets", args.targets},
                                {"shift", args.shift}, {"exp_out", args.exp_out}, {"sum_partials", args.sum_partials},
                                {"target_logit_out", args.target_logit_out}}));
  using P = programs::LmHeadExp;
  LaunchArgs<P> L;
  L.program.flags |= args.rstd.defined() ? P::kHasRstd : 0u;
  L.program.ignore_index = args.ignore_index;
  L.program.classes = static_cast<int>(args.b.rows());
  L.epi.rows[P::kRowRstd] = vec_of(args.rstd);
  L.epi.rows[P::kRowShift] = vec_of(args.shift);
  L.epi.row_ints[P::kRowTargets] = vec_of(args.targets);
  CODA_TRY(bind_output(L.epi, P::kOutExp, args.exp_out, op));
  L.epi.row_outs[P::kRowOutTarget] = static_cast<float*>(args.target_logit_out.data());
  L.epi.row_sums[P::kRowSum] = partial_of(args.sum_partials);
  return run_fused(op, args.a, args.b, L, stream);
}

// Residual + RMSNorm partial (either instance of the program; the caller has validated).
template <class P>
Status residual_impl(const char* op, const ResidualRmsNormPartialArgs& args, cudaStream_t stream) {
  LaunchArgs<P> L;
  L.program.flags |= args.residual.defined() ? P::kHasResidual : 0u;
  L.epi.scalars[P::kAlpha].value = args.alpha;
  CODA_TRY(bind_tma_tile(L.epi, P::kTileResidual, args.residual, op));
  L.epi.cols[P::kColNormWeight] = vec_of(args.norm_weight);
  CODA_TRY(bind_output(L.epi, P::kOutX, args.x_out, op));
  CODA_TRY(bind_output(L.epi, P::kOutH, args.h_out, op));
  L.epi.row_sums[P::kRowSumSq] = partial_of(args.partials);
  return run_fused(op, args.a, args.b, L, stream);
}

}  // namespace

Status gemm_residual_rmsnorm_partial(const ResidualRmsNormPartialArgs& args, cudaStream_t stream) {
  const char* op = "gemm_residual_rmsnorm_partial";
  CODA_TRY(validate(args));
  if (args.a.rows() == 0) return {};
  CODA_TRY(device_prologue(op, {{"a", args.a}, {"b", args.b}, {"residual", args.residual},
                                {"norm_weight", args.norm_weight}, {"x_out", args.x_out}, {"h_out", args.h_out},
                                {"partials", args.partials}}));
  if (args.x_out.dtype() == DType::kFP32 || args.h_out.dtype() == DType::kFP32)  // too wide to stage
    return residual_impl<programs::ResidualRmsNormPartialDirect>(op, args, stream);
  using Long = programs::ResidualRmsNormPartialLongK;
  if (args.a.cols() >= Long::kMinK) return residual_impl<Long>(op, args, stream);
  return residual_impl<programs::ResidualRmsNormPartial>(op, args, stream);
}

// The backward of RMSNorm in the epilogue of dy = dz W (coda-math.md 5.2), the dgrad form.
Status gemm_rmsnorm_backward(const RmsNormBackwardArgs& args, cudaStream_t stream) {
  const char* op = "gemm_rmsnorm_backward";
  CODA_TRY(validate(args));
  if (args.a.rows() == 0) return {};
  CODA_TRY(device_prologue(op, {{"a", args.a}, {"b", args.b}, {"x", args.x}, {"rstd", args.rstd}, {"zdz", args.zdz},
                                {"norm_weight", args.norm_weight}, {"dres", args.dres}, {"dx_out", args.dx_out},
                                {"y_out", args.y_out}, {"dw_partials", args.dw_partials}}));
  using P = programs::RmsNormBackward;
  LaunchArgs<P> L;
  L.program.flags |= args.dres.defined() ? P::kHasDres : 0u;
  L.program.flags |= args.y_out.defined() ? P::kHasY : 0u;
  L.epi.rows[P::kRowRstd] = vec_of(args.rstd);
  L.epi.rows[P::kRowZdZ] = vec_of(args.zdz);
  L.epi.cols[P::kColNormWeight] = vec_of(args.norm_weight);
  CODA_TRY(bind_tma_tile(L.epi, P::kTileX, args.x, op));
  CODA_TRY(bind_tma_tile(L.epi, P::kTileDres, args.dres, op));
  CODA_TRY(bind_output(L.epi, P::kOutDx, args.dx_out, op));
  CODA_TRY(bind_output(L.epi, P::kOutY, args.y_out, op));
  L.epi.col_sums[P::kColDw] = partial_of(args.dw_partials);
  return run_fused<false>(op, args.a, args.b, L, stream);
}

// The backward of SwiGLU in the epilogue of do = dY Wdown (coda-math.md 5.3), the dgrad form: dz
// and z span twice the accumulator's columns (interleaved gate/up).
Status gemm_swiglu_backward(const SwigluBackwardArgs& args, cudaStream_t stream) {
  const char* op = "gemm_swiglu_backward";
  CODA_TRY(validate(args));
  if (args.a.rows() == 0) return {};
  CODA_TRY(device_prologue(op, {{"a", args.a}, {"b", args.b}, {"z", args.z}, {"dz_out", args.dz_out},
                                {"o_out", args.o_out}, {"zdz_partials", args.zdz_partials}}));
  using P = programs::SwigluBackward;
  LaunchArgs<P> L;
  L.program.flags |= args.o_out.defined() ? P::kHasO : 0u;
  L.program.flags |= args.zdz_partials.defined() ? P::kHasZdZ : 0u;
  CODA_TRY(bind_tma_tile(L.epi, P::kTileZ, args.z, op));
  CODA_TRY(bind_output(L.epi, P::kOutDz, args.dz_out, op));
  CODA_TRY(bind_output(L.epi, P::kOutO, args.o_out, op));
  L.epi.row_sums[P::kRowZdZ] = partial_of(args.zdz_partials);
  return run_fused<false>(op, args.a, args.b, L, stream);
}

Status gemm_swiglu(const SwigluArgs& args, cudaStream_t stream) {
  return swiglu_impl(args.rstd.defined() ? "gemm_rmsnorm_swiglu" : "gemm_swiglu", args, stream);
}
Status gemm_rmsnorm_swiglu(const SwigluArgs& args, cudaStream_t stream) {
  CODA_TRY(check_rmsnorm_rstd("gemm_rmsnorm_swiglu", args.rstd));
  return swiglu_impl("gemm_rmsnorm_swiglu", args, stream);
}
Status gemm_rope(const RopeArgs& args, cudaStream_t stream) {
  return rope_impl(args.rstd.defined() ? "gemm_rmsnorm_rope" : "gemm_rope", args, stream);
}
Status gemm_rmsnorm_rope(const RopeArgs& args, cudaStream_t stream) {
  CODA_TRY(check_rmsnorm_rstd("gemm_rmsnorm_rope", args.rstd));
  return rope_impl("gemm_rmsnorm_rope", args, stream);
}
Status gemm_lse(const LmHeadLseArgs& args, cudaStream_t stream) {
  return lse_impl(args.rstd.defined() ? "gemm_rmsnorm_lse" : "gemm_lse", args, stream);
}
Status gemm_rmsnorm_lse(const LmHeadLseArgs& args, cudaStream_t stream) {
  CODA_TRY(check_rmsnorm_rstd("gemm_rmsnorm_lse", args.rstd));
  return lse_impl("gemm_rmsnorm_lse", args, stream);
}

Status gemm_lse_exp(const LmHeadExpArgs& args, cudaStream_t stream) {
  return lse_exp_impl(args.rstd.defined() ? "gemm_rmsnorm_lse_exp" : "gemm_lse_exp", args, stream);
}

Status gemm_row_scale(const TensorView& a, const TensorView& b, const TensorView& row_scale, const TensorView& d,
                      cudaStream_t stream) {
  const char* op = "gemm_row_scale";
  CODA_TRY(validate_gemm_row_scale(a, b, row_scale, d));
  if (a.rows() == 0 || b.rows() == 0) return {};
  CODA_TRY(device_prologue(op, {{"a", a}, {"b", b}, {"row_scale", row_scale}, {"d", d}}));
  using P = programs::RowScale;
  LaunchArgs<P> L;
  L.epi.rows[P::kRowScale] = vec_of(row_scale);
  CODA_TRY(bind_output(L.epi, P::kOutD, d, op));
  return run_fused<false>(op, a, b, L, stream);
}

Status gemm_qkv_sqsum(const QkvSqsumArgs& args, cudaStream_t stream) {
  const char* op = "gemm_qkv_sqsum";
  CODA_TRY(validate(args));
  const int64_t segs = qk_segments(args.heads.head_dim, CODA_PARTIAL_COLS);
  const int64_t seg_cols = args.heads.head_dim / segs;
  if (seg_cols < 32)  // the kernel sums segments of at least a chunk half (Sm90Gemm::flush_chunk_segs)
    return Status::not_supported(std::string(op) + ": argument 'heads' has head_dim " +
                                 std::to_string(args.heads.head_dim) + "; the GPU kernel needs head_dim >= 32");
  if (args.a.rows() == 0) return {};
  CODA_TRY(device_prologue(op, {{"a", args.a}, {"b", args.b}, {"rstd", args.rstd}, {"qkv_out", args.qkv_out},
                                {"sumsq_out", args.sumsq_out}}));
  using P = programs::QkvSqsum;
  LaunchArgs<P> L;
  L.program.has_rstd = args.rstd.defined();
  L.program.rope_cols = static_cast<int>(args.heads.rope_cols());
  L.epi.rows[P::kRowRstd] = vec_of(args.rstd);
  CODA_TRY(bind_output(L.epi, P::kOutQkv, args.qkv_out, op));
  L.epi.seg_sums[P::kSegSumSq] = partial_of(args.sumsq_out, log2_exact(seg_cols));
  return run_fused(op, args.a, args.b, L, stream);
}

}  // namespace coda
