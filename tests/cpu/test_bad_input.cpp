// Bad input to every operator: rejected before any work with CODA_ERROR_INVALID_ARGUMENT and a
// message naming the operator, the argument and the rule; every output left exactly as it was.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "coda/block/llama3.hpp"
#include "coda/ref/emu_backend.hpp"
#include "coda/ref/emulator.hpp"
#include "util.hpp"

namespace coda {
namespace {

constexpr DType kBF16 = DType::kBF16;
constexpr DType kFP32 = DType::kFP32;

// Owns the tensors of one case; snapshots the outputs to prove they were not touched.
class Case {
 public:
  explicit Case(uint64_t seed) : rng_(seed) {}
  TensorView in(DType t, int64_t r, int64_t c) {
    store_.push_back(std::make_unique<HostTensor>(test::random_tensor(rng_, t, r, c, 1.0, nullptr)));
    return store_.back()->view();
  }
  // A dense matrix (partial-reduction tensors must be contiguous).
  TensorView dense(DType t, int64_t r, int64_t c) {
    store_.push_back(std::make_unique<HostTensor>(test::random_tensor(rng_, t, r, c, 1.0, nullptr, c)));
    return store_.back()->view();
  }
  TensorView vec(DType t, int64_t n, float value) {
    store_.push_back(std::make_unique<HostTensor>(HostTensor::vector(t, n)));
    for (int64_t i = 0; i < n; ++i) store_.back()->set(i, 0, value);
    return store_.back()->view();
  }
  TensorView ints(std::vector<int32_t> v) {
    store_.push_back(std::make_unique<HostTensor>(from_ints(v)));
    return store_.back()->view();
  }
  TensorView out(DType t, int64_t r, int64_t c) {
    store_.push_back(std::make_unique<HostTensor>(c == 0 ? HostTensor::vector(t, r) : HostTensor::matrix(t, r, c)));
    store_.back()->poison();
    outputs_.push_back(store_.back().get());
    return store_.back()->view();
  }
  void snapshot() {
    saved_.clear();
    for (const HostTensor* h : outputs_) {
      const auto* p = static_cast<const uint8_t*>(h->data());
      saved_.emplace_back(p, p + h->bytes());
    }
  }
  bool outputs_untouched() const {
    for (size_t i = 0; i < outputs_.size(); ++i)
      if (std::memcmp(outputs_[i]->data(), saved_[i].data(), saved_[i].size()) != 0) return false;
    return true;
  }

 private:
  test::Rng rng_;
  std::vector<std::unique_ptr<HostTensor>> store_;
  std::vector<const HostTensor*> outputs_;
  std::vector<std::vector<uint8_t>> saved_;
};

// Runs `call` on a fresh valid case with `mutate` applied; expects the named rejection.
template <class Args>
void expect_rejected(const char* what, const std::function<Args(Case&)>& make, const std::function<void(Args&)>& mutate,
                     const std::function<Status(const Args&)>& call, const std::string& op, const std::string& arg,
                     const std::string& rule_fragment = "") {
  SCOPED_TRACE(what);
  {  // the unmutated case is valid: the rejection below is caused by the mutation alone
    Case c(test::seed());
    Args ok = make(c);
    CODA_ASSERT_OK(call(ok));
  }
  Case c(test::seed());
  Args args = make(c);
  mutate(args);
  c.snapshot();
  const Status s = call(args);
  EXPECT_EQ(s.code(), CODA_ERROR_INVALID_ARGUMENT) << s.message();
  EXPECT_NE(s.message().find(op + ": argument '" + arg + "'"), std::string::npos) << s.message();
  if (!rule_fragment.empty()) {
    EXPECT_NE(s.message().find(rule_fragment), std::string::npos) << s.message();
  }
  EXPECT_TRUE(c.outputs_untouched()) << "a rejected call wrote to an output";
}

// ---- gemm -------------------------------------------------------------------------------------

GemmArgs make_gemm(Case& c) {
  return GemmArgs{c.in(kBF16, 33, 24), c.in(kBF16, 40, 24), c.in(kBF16, 33, 40), c.out(kBF16, 33, 40), 1.0f, 0.5f};
}
Status run_gemm(const GemmArgs& a) { return emu::gemm(a); }

TEST(BadInput, Gemm) {
  using A = GemmArgs;
  expect_rejected<A>("null a", make_gemm, [](A& a) { a.a = TensorView(); }, run_gemm, "gemm", "a", "is required");
  expect_rejected<A>("fp32 a", make_gemm, [](A& a) { a.a.desc.dtype = CODA_DTYPE_FP32; }, run_gemm, "gemm", "a",
                     "must have dtype bf16 or fp16");
  expect_rejected<A>("mixed dtypes", make_gemm, [](A& a) { a.b.desc.dtype = CODA_DTYPE_FP16; }, run_gemm, "gemm", "b",
                     "same dtype");
  expect_rejected<A>("K mismatch", make_gemm, [](A& a) { a.b.desc.sizes[1] = 16; }, run_gemm, "gemm", "b", "K = 24");
  // the epilogue addresses rows and columns with ints (the views are never read: rejected first)
  expect_rejected<A>("M >= 2^31", make_gemm, [](A& a) { a.a.desc.sizes[0] = int64_t{1} << 31; }, run_gemm, "gemm",
                     "a", "fewer than 2^31 rows");
  expect_rejected<A>("N >= 2^31", make_gemm, [](A& a) { a.b.desc.sizes[0] = int64_t{1} << 31; }, run_gemm, "gemm",
                     "b", "fewer than 2^31 rows");
  expect_rejected<A>("d shape", make_gemm, [](A& a) { a.d.desc.sizes[1] = 32; }, run_gemm, "gemm", "d",
                     "must have shape [33, 40]");
  expect_rejected<A>("d int32", make_gemm, [](A& a) { a.d.desc.dtype = CODA_DTYPE_INT32; }, run_gemm, "gemm", "d",
                     "dtype");
  expect_rejected<A>("c shape", make_gemm, [](A& a) { a.c.desc.sizes[0] = 32; }, run_gemm, "gemm", "c", "shape");
  expect_rejected<A>("d row stride", make_gemm,
                     [](A& a) {
                       a.d.desc.strides[0] = 41;
                       a.d.desc.sizes[0] = 32;
                       a.c.desc.sizes[0] = 32;
                       a.a.desc.sizes[0] = 32;
                     },
                     run_gemm, "gemm", "d", "16-byte boundaries");
  expect_rejected<A>("a strided both ways", make_gemm, [](A& a) { a.a.desc.strides[1] = 2; a.a.desc.sizes[1] = 12;
                                                                  a.b.desc.sizes[1] = 12; },
                     run_gemm, "gemm", "a", "unit stride");
  expect_rejected<A>("a misaligned leading stride", make_gemm,
                     [](A& a) { a.a.desc.strides[0] = 20; a.a.desc.sizes[1] = 20; a.b.desc.sizes[1] = 20;
                                a.b.desc.strides[0] = 24; },
                     run_gemm, "gemm", "a", "multiple of 16 bytes");
  expect_rejected<A>("d aliases a", make_gemm, [](A& a) { a.d.desc.data = a.a.desc.data; }, run_gemm, "gemm", "d",
                     "overlaps input 'a'");
  expect_rejected<A>("negative size", make_gemm, [](A& a) { a.a.desc.sizes[0] = -1; }, run_gemm, "gemm", "a");
}

// ---- the RMSNorm family ---------------------------------------------------------------------------

ResidualRmsNormPartialArgs make_rnp(Case& c) {
  return {c.in(kBF16, 20, 16), c.in(kBF16, 64, 16), c.in(kBF16, 20, 64), c.vec(kBF16, 64, 1.0f),
          c.out(kBF16, 20, 64), c.out(kBF16, 20, 64), c.out(kFP32, 20, 1)};
}

TEST(BadInput, ResidualRmsNormPartial) {
  using A = ResidualRmsNormPartialArgs;
  const std::function<Status(const A&)> run = [](const A& a) { return emu::gemm_residual_rmsnorm_partial(a); };
  const char* op = "gemm_residual_rmsnorm_partial";
  expect_rejected<A>("partials width", make_rnp, [](A& a) { a.partials.desc.sizes[1] = 2; }, run, op, "partials",
                     "[20, 1]");
  expect_rejected<A>("partials dtype", make_rnp, [](A& a) { a.partials.desc.dtype = CODA_DTYPE_INT32; }, run, op,
                     "partials", "fp32");
  expect_rejected<A>("norm weight length", make_rnp, [](A& a) { a.norm_weight.desc.sizes[0] = 63; }, run, op,
                     "norm_weight", "[64]");
  expect_rejected<A>("h aliases x", make_rnp, [](A& a) { a.h_out = a.x_out; }, run, op, "h_out", "overlaps output 'x_out'");
  expect_rejected<A>("x partially over residual", make_rnp, [](A& a) { a.x_out = a.residual.row_slice(1, 19);
                                                                       a.x_out.desc.sizes[0] = 20; },
                     run, op, "x_out", "in place");
}

TEST(BadInput, RmsFinishAndPartialFinishes) {
  using F = RmsFinishArgs;
  const auto make = [](Case& c) { return F{c.dense(kFP32, 10, 3), c.out(kFP32, 10, 0), 64, 1e-5f}; };
  const std::function<Status(const F&)> run = [](const F& a) { return emu::rms_finish(a); };
  expect_rejected<F>("dim", make, [](F& a) { a.dim = 0; }, run, "rms_finish", "dim", "> 0");
  expect_rejected<F>("eps", make, [](F& a) { a.eps = -1.0f; }, run, "rms_finish", "eps");
  expect_rejected<F>("rstd length", make, [](F& a) { a.rstd_out.desc.sizes[0] = 9; }, run, "rms_finish", "rstd_out");
  using R = RowSumFinishArgs;
  expect_rejected<R>("row out", [](Case& c) { return R{c.dense(kFP32, 10, 3), c.out(kFP32, 10, 0), 1.0f}; },
                     [](R& a) { a.out.desc.sizes[0] = 3; }, [](const R& a) { return emu::row_sum_finish(a); },
                     "row_sum_finish", "out", "[10]");
  using C = ColSumFinishArgs;
  expect_rejected<C>("col out", [](Case& c) { return C{c.dense(kFP32, 3, 16), c.out(kFP32, 16, 0)}; },
                     [](C& a) { a.out.desc.sizes[0] = 3; }, [](const C& a) { return emu::col_sum_finish(a); },
                     "col_sum_finish", "out", "[16]");
}

RmsNormBackwardArgs make_rnb(Case& c) {
  const TensorView w = c.in(kBF16, 24, 32);  // the consuming GEMM's weight [K, N]
  const TensorView dres = c.in(kBF16, 9, 32);
  return {c.in(kBF16, 9, 24), w.transposed(), c.in(kBF16, 9, 32), c.vec(kFP32, 9, 1.0f), c.vec(kFP32, 9, 0.1f),
          c.vec(kBF16, 32, 1.0f), dres, c.out(kBF16, 9, 32), c.out(kBF16, 9, 32), c.out(kFP32, 1, 32)};
}

TEST(BadInput, RmsNormBackward) {
  using A = RmsNormBackwardArgs;
  const std::function<Status(const A&)> run = [](const A& a) { return emu::gemm_rmsnorm_backward(a); };
  const char* op = "gemm_rmsnorm_backward";
  expect_rejected<A>("zdz dtype", make_rnb, [](A& a) { a.zdz.desc.dtype = CODA_DTYPE_BF16; }, run, op, "zdz", "fp32");
  expect_rejected<A>("dw partial rows", make_rnb, [](A& a) { a.dw_partials.desc.sizes[0] = 2; }, run, op,
                     "dw_partials", "[1, 32]");
  expect_rejected<A>("x shape", make_rnb, [](A& a) { a.x.desc.sizes[1] = 24; }, run, op, "x");
  expect_rejected<A>("rstd missing", make_rnb, [](A& a) { a.rstd = TensorView(); }, run, op, "rstd", "required");
  expect_rejected<A>("y aliases x", make_rnb, [](A& a) { a.y_out = a.x; }, run, op, "y_out", "overlaps input 'x'");
}

// ---- SwiGLU -----------------------------------------------------------------------------------

TEST(BadInput, Swiglu) {
  using A = SwigluArgs;
  const auto make = [](Case& c) {
    return A{c.in(kBF16, 12, 16), c.in(kBF16, 48, 16), c.vec(kFP32, 12, 1.0f), c.out(kBF16, 12, 48),
             c.out(kBF16, 12, 24)};
  };
  const std::function<Status(const A&)> run = [](const A& a) { return emu::gemm_swiglu(a); };
  expect_rejected<A>("odd N", make, [](A& a) { a.b.desc.sizes[0] = 47; a.z_out.desc.sizes[1] = 47; }, run,
                     "gemm_rmsnorm_swiglu", "b", "even number of rows");
  expect_rejected<A>("o width", make, [](A& a) { a.o_out.desc.sizes[1] = 48; }, run, "gemm_rmsnorm_swiglu", "o_out",
                     "[12, 24]");
  expect_rejected<A>("o width, no rstd", make, [](A& a) { a.rstd = TensorView(); a.o_out.desc.sizes[1] = 16; }, run,
                     "gemm_swiglu", "o_out");
  expect_rejected<A>("rstd length", make, [](A& a) { a.rstd.desc.sizes[0] = 11; }, run, "gemm_rmsnorm_swiglu", "rstd");
}

TEST(BadInput, SwigluBackward) {
  using A = SwigluBackwardArgs;
  const auto make = [](Case& c) {
    const TensorView wd = c.in(kBF16, 16, 24);  // Wdown [d, F]
    return A{c.in(kBF16, 12, 16), wd.transposed(), c.in(kBF16, 12, 48), c.out(kBF16, 12, 48), c.out(kBF16, 12, 24),
             c.out(kFP32, 12, 1)};
  };
  const std::function<Status(const A&)> run = [](const A& a) { return emu::gemm_swiglu_backward(a); };
  expect_rejected<A>("z width", make, [](A& a) { a.z.desc.sizes[1] = 24; }, run, "gemm_swiglu_backward", "z", "[12, 48]");
  expect_rejected<A>("dz aliases z", make, [](A& a) { a.dz_out = a.z; }, run, "gemm_swiglu_backward", "dz_out",
                     "overlaps input 'z'");
}

// ---- RoPE and QK-norm ---------------------------------------------------------------------------

RopeArgs make_rope(Case& c) {
  const HeadDims h{2, 1, 16};
  return {c.in(kBF16, 6, 16), c.in(kBF16, h.qkv_cols(), 16), c.vec(kFP32, 6, 1.0f), c.ints({0, 1, 2, 3, 131071, 7}),
          c.vec(kFP32, 8, 0.01f), h, c.out(kBF16, 6, h.qkv_cols())};
}

TEST(BadInput, Rope) {
  using A = RopeArgs;
  const std::function<Status(const A&)> run = [](const A& a) { return emu::gemm_rope(a); };
  const char* op = "gemm_rmsnorm_rope";
  expect_rejected<A>("weight rows", make_rope, [](A& a) { a.heads.heads_kv = 2; }, run, op, "b",
                     "(heads_q + 2 heads_kv) head_dim");
  expect_rejected<A>("odd head dim", make_rope, [](A& a) { a.heads = HeadDims{2, 1, 15}; }, run, op,
                     "heads.head_dim", "even");
  expect_rejected<A>("positions dtype", make_rope, [](A& a) { a.positions.desc.dtype = CODA_DTYPE_FP32; }, run, op,
                     "positions", "int32");
  expect_rejected<A>("freqs length", make_rope, [](A& a) { a.freqs.desc.sizes[0] = 16; }, run, op, "freqs", "[8]");
  expect_rejected<A>("negative position", make_rope,
                     [](A& a) { std::memcpy(static_cast<int32_t*>(a.positions.data()) + 3, "\xff\xff\xff\xff", 4); },
                     run, op, "positions", "negative");
  using B = RopeBackwardArgs;
  const auto make_b = [](Case& c) {
    const HeadDims h{2, 1, 16};
    return B{c.in(kBF16, 6, 64), c.in(kBF16, 6, 64), c.ints({0, 1, 2, 3, 4, 5}), c.vec(kFP32, 8, 0.01f), h,
             c.out(kBF16, 6, 64), c.out(kFP32, 6, 0), 1.0f};
  };
  expect_rejected<B>("bwd freqs", make_b, [](B& a) { a.freqs.desc.sizes[0] = 7; }, [](const B& a) { return emu::rope_backward(a); },
                     "rope_backward", "freqs");
  expect_rejected<B>("bwd dz shape", make_b, [](B& a) { a.dz_out.desc.sizes[0] = 5; },
                     [](const B& a) { return emu::rope_backward(a); }, "rope_backward", "dz_out");
}

TEST(BadInput, QkNorm) {
  using S = QkvSqsumArgs;
  const auto make_s = [](Case& c) {
    const HeadDims h{2, 1, 64};
    return S{c.in(kBF16, 5, 16), c.in(kBF16, h.qkv_cols(), 16), TensorView(), h, c.out(kBF16, 5, h.qkv_cols()),
             c.out(kFP32, 5, 3)};
  };
  const std::function<Status(const S&)> run_s = [](const S& a) { return emu::gemm_qkv_sqsum(a); };
  expect_rejected<S>("head dim vs grain", make_s,
                     [](S& a) { a.heads.head_dim = 96; a.b.desc.sizes[0] = 4 * 96; a.qkv_out.desc.sizes[1] = 4 * 96; },
                     run_s, "gemm_qkv_sqsum", "heads.head_dim", "divide 128");
  expect_rejected<S>("sumsq width", make_s, [](S& a) { a.sumsq_out.desc.sizes[1] = 4; }, run_s, "gemm_qkv_sqsum",
                     "sumsq_out", "[5, 3]");
  using Q = QkNormRopeArgs;
  const auto make_q = [](Case& c) {
    const HeadDims h{2, 1, 64};
    return Q{c.in(kBF16, 5, 256), c.dense(kFP32, 5, 3), c.vec(kBF16, 64, 1.0f), c.vec(kBF16, 64, 1.0f),
             c.ints({1, 2, 3, 4, 5}), c.vec(kFP32, 32, 0.01f), h, 1e-6f, c.out(kBF16, 5, 256)};
  };
  expect_rejected<Q>("gamma_k length", make_q, [](Q& a) { a.gamma_k.desc.sizes[0] = 32; },
                     [](const Q& a) { return emu::qknorm_rope(a); }, "qknorm_rope", "gamma_k", "[64]");
  using B = QkNormRopeBackwardArgs;
  const auto make_b = [](Case& c) {
    const HeadDims h{2, 1, 64};
    return B{c.in(kBF16, 5, 256), c.vec(kBF16, 64, 1.0f), c.vec(kBF16, 64, 1.0f), c.ints({1, 2, 3, 4, 5}),
             c.vec(kFP32, 32, 0.01f), h, 1e-6f, c.in(kBF16, 5, 256), c.out(kBF16, 5, 256), c.out(kFP32, 1, 64),
             c.out(kFP32, 1, 64), c.out(kFP32, 5, 0), 1.0f};
  };
  expect_rejected<B>("dgamma partial shape", make_b, [](B& a) { a.dgamma_q_partials.desc.sizes[1] = 32; },
                     [](const B& a) { return emu::qknorm_rope_backward(a); }, "qknorm_rope_backward",
                     "dgamma_q_partials", "[1, 64]");
}

// ---- LM head + cross-entropy ------------------------------------------------------------------

LmHeadLseArgs make_lse(Case& c) {
  return {c.in(kBF16, 4, 16), c.in(kBF16, 300, 16), c.vec(kFP32, 4, 1.0f), c.ints({0, 299, -100, 7}),
          CODA_IGNORE_INDEX, c.out(kBF16, 4, 304).row_slice(0, 4), c.out(kFP32, 4, ceil_div(300, CODA_PARTIAL_COLS)),
          c.out(kFP32, 4, 0)};
}

TEST(BadInput, LmHead) {
  using A = LmHeadLseArgs;
  const std::function<Status(const A&)> run = [](const A& a) { return emu::gemm_lse(a); };
  const auto fix_logits = [](A& a) { a.logits_out.desc.sizes[1] = 300; a.logits_out.desc.strides[0] = 304; };
  const std::function<A(Case&)> make = [&](Case& c) {
    A a = make_lse(c);
    fix_logits(a);
    return a;
  };
  const char* op = "gemm_rmsnorm_lse";
  expect_rejected<A>("target out of range", make,
                     [](A& a) { static_cast<int32_t*>(a.targets.data())[1] = 300; }, run, op, "targets", "outside [0, 300)");
  expect_rejected<A>("ignore index is a class", make, [](A& a) { a.ignore_index = 5; }, run, op, "ignore_index");
  expect_rejected<A>("lse partial width", make, [](A& a) { a.lse_partials.desc.sizes[1] = 1; }, run, op,
                     "lse_partials", "[4, " + std::to_string(ceil_div(300, CODA_PARTIAL_COLS)) + "]");
  using L = LseFinishArgs;
  expect_rejected<L>("lse length", [](Case& c) { return L{c.dense(kFP32, 4, 2), c.out(kFP32, 4, 0)}; },
                     [](L& a) { a.lse_out.desc.sizes[0] = 5; }, [](const L& a) { return emu::lse_finish(a); },
                     "lse_finish", "lse_out");
  using C = CrossEntropyArgs;
  const auto make_ce = [](Case& c) {
    C a;
    a.lse = c.vec(kFP32, 4, 5.0f);
    a.target_logit = c.vec(kFP32, 4, 1.0f);
    a.targets = c.ints({0, 2, -100, 7});
    a.loss_out = c.out(kFP32, 1, 0);
    a.logits = c.in(kBF16, 4, 16);
    a.dlogits_out = a.logits;
    return a;
  };
  const std::function<Status(const C&)> run_ce = [](const C& a) { return emu::cross_entropy(a); };
  expect_rejected<C>("dlogits without logits", make_ce, [](C& a) { a.logits = TensorView(); }, run_ce,
                     "cross_entropy", "dlogits_out", "needs 'logits'");
  expect_rejected<C>("target beyond V", make_ce, [](C& a) { static_cast<int32_t*>(a.targets.data())[3] = 16; },
                     run_ce, "cross_entropy", "targets");
  expect_rejected<C>("reduction", make_ce, [](C& a) { a.reduction = static_cast<Reduction>(7); }, run_ce,
                     "cross_entropy", "reduction");
  expect_rejected<C>("loss shape", make_ce, [](C& a) { a.loss_out.desc.sizes[0] = 2; }, run_ce, "cross_entropy",
                     "loss_out", "[1]");
}

TEST(BadInput, LmHeadTrain) {
  using T = LmHeadTrainArgs;
  static std::vector<char> ws(lm_head_train_workspace_bytes(4, 300));
  const std::function<T(Case&)> make = [](Case& c) {
    T a;
    a.a = c.in(kBF16, 4, 16);
    a.b = c.in(kBF16, 300, 16);
    a.targets = c.ints({0, 299, -100, 7});
    a.loss_out = c.out(kFP32, 1, 0);
    a.grad_out = c.out(kBF16, 4, 304).row_slice(0, 4);
    a.grad_out.desc.sizes[1] = 300;
    a.grad_scale_out = c.out(kFP32, 4, 0);
    a.workspace = ws.data();
    a.workspace_bytes = ws.size();
    return a;
  };
  const std::function<Status(const T&)> run = [](const T& a) { return emu::lm_head_train(a); };
  const char* op = "lm_head_train";
  expect_rejected<T>("workspace too small", make, [](T& a) { a.workspace_bytes -= 1; }, run, op, "workspace",
                     "lm_head_train_workspace_bytes");
  expect_rejected<T>("fp16 operands", make, [](T& a) { a.a.desc.dtype = a.b.desc.dtype = CODA_DTYPE_FP16; }, run, op,
                     "a", "must be bf16");
  expect_rejected<T>("fp32 grad", make, [](T& a) { a.grad_out.desc.dtype = CODA_DTYPE_FP32; }, run, op, "grad_out");
  expect_rejected<T>("grad shape", make, [](T& a) { a.grad_out.desc.sizes[1] = 299; }, run, op, "grad_out",
                     "[4, 300]");
  expect_rejected<T>("target out of range", make, [](T& a) { static_cast<int32_t*>(a.targets.data())[1] = 300; },
                     run, op, "targets", "outside [0, 300)");
  expect_rejected<T>("ignore index is a class", make, [](T& a) { a.ignore_index = 5; }, run, op, "ignore_index");
  expect_rejected<T>("scale length", make, [](T& a) { a.grad_scale_out.desc.sizes[0] = 3; }, run, op,
                     "grad_scale_out", "[4]");
  // its forward GEMM alone: bf16 only too (the GPU compiles no fp16 kernel for it)
  using E = LmHeadExpArgs;
  const std::function<E(Case&)> make_e = [](Case& c) {
    E a;
    a.a = c.in(kBF16, 4, 16);
    a.b = c.in(kBF16, 300, 16);
    a.targets = c.ints({0, 299, -100, 7});
    a.shift = c.vec(kFP32, 4, 1.0f);
    a.exp_out = c.out(kBF16, 4, 304).row_slice(0, 4);
    a.exp_out.desc.sizes[1] = 300;
    a.sum_partials = c.out(kFP32, 4, ceil_div(300, CODA_PARTIAL_COLS));
    a.target_logit_out = c.out(kFP32, 4, 0);
    return a;
  };
  expect_rejected<E>("gemm_lse_exp fp16 operands", make_e,
                     [](E& a) { a.a.desc.dtype = a.b.desc.dtype = a.exp_out.desc.dtype = CODA_DTYPE_FP16; },
                     [](const E& a) { return emu::gemm_lse_exp(a); }, "gemm_lse_exp", "a", "must be bf16");
  expect_rejected<E>("gemm_lse_exp fp16 exponentials", make_e, [](E& a) { a.exp_out.desc.dtype = CODA_DTYPE_FP16; },
                     [](const E& a) { return emu::gemm_lse_exp(a); }, "gemm_lse_exp", "exp_out");
  using B = LmHeadBackwardArgs;
  static std::vector<char> wsb(lm_head_backward_workspace_bytes(4, 16));
  const std::function<B(Case&)> make_b = [](Case& c) {
    B a;
    a.a = c.in(kBF16, 4, 16);
    a.b = c.in(kBF16, 300, 16);
    a.grad = c.in(kBF16, 4, 304).row_slice(0, 4);
    a.grad.desc.sizes[1] = 300;
    a.grad_scale = c.vec(kFP32, 4, 0.1f);
    a.da_out = c.out(kBF16, 4, 16);
    a.db_out = c.out(kFP32, 300, 16);
    a.workspace = wsb.data();
    a.workspace_bytes = wsb.size();
    return a;
  };
  const std::function<Status(const B&)> run_b = [](const B& a) { return emu::lm_head_backward(a); };
  expect_rejected<B>("grad width", make_b, [](B& a) { a.grad.desc.sizes[1] = 299; }, run_b, "lm_head_backward", "grad",
                     "[4, 300]");
  expect_rejected<B>("dloss NaN", make_b, [](B& a) { a.dloss = NAN; }, run_b, "lm_head_backward", "dloss", "finite");
  expect_rejected<B>("da dtype", make_b, [](B& a) { a.da_out.desc.dtype = CODA_DTYPE_FP16; }, run_b, "lm_head_backward",
                     "da_out");
  expect_rejected<B>("workspace", make_b, [](B& a) { a.workspace = nullptr; }, run_b, "lm_head_backward", "workspace");
}

// ---- the block --------------------------------------------------------------------------------

TEST(BadInput, Block) {
  Case c(test::seed());
  Llama3Dims d;
  d.tokens = 5;
  d.hidden = 32;
  d.ffn = 48;
  d.heads = HeadDims{2, 1, 16};
  const int64_t n3 = d.heads.qkv_cols();
  const Llama3Weights w{c.in(kBF16, 32, 32), c.in(kBF16, 96, 32), c.in(kBF16, 32, 48), c.in(kBF16, n3, 32),
                        c.vec(kBF16, 32, 1.0f), c.vec(kBF16, 32, 1.0f), c.vec(kFP32, 8, 0.01f)};
  Llama3Activations act{c.in(kBF16, 5, 32), c.in(kBF16, 5, 32), c.ints({0, 1, 2, 3, 4}), c.out(kBF16, 5, 32),
                        c.out(kBF16, 5, 32), c.out(kBF16, 5, 96), c.out(kBF16, 5, n3), c.out(kFP32, 5, 0),
                        c.out(kFP32, 5, 0), {}};
  emu::EmuBackend be;
  CODA_ASSERT_OK(llama3_forward(be, d, w, act));
  Llama3Dims bad = d;
  bad.ffn = 50;
  Status s = llama3_forward(be, bad, w, act);
  EXPECT_NE(s.message().find("llama3_forward: argument 'dims.ffn'"), std::string::npos) << s.message();
  Llama3Activations wrong = act;
  wrong.z1.desc.sizes[1] = 48;
  c.snapshot();
  s = llama3_forward(be, d, w, wrong);
  EXPECT_NE(s.message().find("llama3_forward: argument 'act.z1' must have shape [5, 96]"), std::string::npos)
      << s.message();
  EXPECT_TRUE(c.outputs_untouched());
  // The optional kept SwiGLU output: [M, F] in the activations' dtype, checked like the others.
  Llama3Activations kept = act;
  kept.y1 = c.out(kBF16, 5, 40);
  c.snapshot();
  s = llama3_forward(be, d, w, kept);
  EXPECT_NE(s.message().find("llama3_forward: argument 'act.y1' must have shape [5, 48]"), std::string::npos)
      << s.message();
  EXPECT_TRUE(c.outputs_untouched());
  kept.y1 = c.out(DType::kFP16, 5, 48);
  c.snapshot();
  s = llama3_forward(be, d, w, kept);
  EXPECT_NE(s.message().find("act.y1"), std::string::npos) << s.message();
  EXPECT_TRUE(c.outputs_untouched());
}

}  // namespace
}  // namespace coda
