// GPU tests of the sm90 GEMM engine (Hopper only; skipped elsewhere).
//
// Each case: fresh random inputs, the output poisoned (NaN bytes) before the launch and checked
// fully written, the result compared with cuBLAS on every element and with a float64 reference on
// sampled rows under design.md's rule (error <= 2 x cuBLAS's own error + eps).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "coda/coda.h"
#include "coda/device_util.hpp"
#include "coda/gpu.hpp"
#include "coda/host.hpp"

namespace coda {
namespace {

using dev::DeviceTensor;

uint64_t fresh_seed() {
  if (const char* s = std::getenv("CODA_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  std::random_device rd;
  return (uint64_t(rd()) << 32) ^ rd();
}

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (coda_device_check(0) != CODA_SUCCESS) GTEST_SKIP() << "no Hopper GPU: " << coda_last_error();
    if (!handle_) dev::check(cublasCreate(&handle_), "cublasCreate");
  }
  static cublasHandle_t handle_;
};
cublasHandle_t GpuTest::handle_ = nullptr;

int64_t pad8(int64_t x) { return (x + 7) / 8 * 8; }

// Random values exactly representable in `t`, uniform in [-2, 2), drawn on the host from `g`.
HostTensor random_host(std::mt19937_64& g, DType t, int64_t rows, int64_t cols, int64_t ld) {
  HostTensor h = HostTensor::matrix(t, rows, cols, ld);
  uint64_t x = g() | 1;
  auto next = [&x] {  // xorshift64*: fast enough for the 10^8-element LLaMA operands
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    return static_cast<float>((x * 0x2545F4914F6CDD1Dull) >> 40) * (4.0f / 16777216.0f) - 2.0f;
  };
  if (t == DType::kBF16 || t == DType::kFP16) {
    auto* p = static_cast<uint16_t*>(h.data());
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) p[i * ld + j] = t == DType::kBF16 ? float_to_bf16_bits(next()) : float_to_fp16_bits(next());
  } else {
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) h.set(i, j, next());
  }
  return h;
}

enum class Form { kForward, kDgrad, kWgrad };
const char* name(Form f) { return f == Form::kForward ? "fwd" : f == Form::kDgrad ? "dgrad" : "wgrad"; }

struct Case {
  int64_t m, n, k;
  Form form = Form::kForward;
  DType in = DType::kBF16;
  DType out = DType::kBF16;
  int sample_rows = 24;
  std::string label() const {
    return std::string(name(form)) + " M " + std::to_string(m) + " N " + std::to_string(n) + " K " +
           std::to_string(k) + " " + dtype_name(in) + "->" + dtype_name(out);
  }
};

// Host operands in the form's memory layout, and their [M,K] / [N,K] views.
struct Operands {
  HostTensor a_store, b_store;
  TensorView a, b;  // logical views (host memory)
};

Operands make_operands(std::mt19937_64& g, const Case& c) {
  Operands o;
  if (c.form == Form::kWgrad) {  // a stored [K, M] (M-major view)
    o.a_store = random_host(g, c.in, c.k, c.m, pad8(c.m));
    o.a = o.a_store.view().transposed();
  } else {
    o.a_store = random_host(g, c.in, c.m, c.k, pad8(c.k));
    o.a = o.a_store.view();
  }
  if (c.form == Form::kForward) {  // b stored [N, K]
    o.b_store = random_host(g, c.in, c.n, c.k, pad8(c.k));
    o.b = o.b_store.view();
  } else {  // b stored [K, N] (N-major view)
    o.b_store = random_host(g, c.in, c.k, c.n, pad8(c.n));
    o.b = o.b_store.view().transposed();
  }
  return o;
}

TensorView on_device(const TensorView& host_view, const HostTensor& store, const DeviceTensor& d) {
  TensorView v = host_view;
  v.desc.data = static_cast<char*>(d.buf.get()) +
                (static_cast<const char*>(host_view.data()) - static_cast<const char*>(store.data()));
  return v;
}

// Float64 reference rows: D[r, :] = sum_k A[r, k] B[:, k] for the sampled rows.
std::vector<double> reference_rows(const TensorView& a, const TensorView& b, const std::vector<int64_t>& rows) {
  const int64_t n = b.rows(), k = a.cols();
  std::vector<double> out(rows.size() * size_t(n));
  std::vector<double> bt(size_t(n * k));
  for (int64_t j = 0; j < n; ++j)
    for (int64_t kk = 0; kk < k; ++kk) bt[size_t(j * k + kk)] = load_f32(b, j, kk);
  const unsigned nthreads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < nthreads; ++t)
    pool.emplace_back([&, t] {
      std::vector<double> arow(static_cast<size_t>(k));
      for (size_t r = t; r < rows.size(); r += nthreads) {
        for (int64_t kk = 0; kk < k; ++kk) arow[size_t(kk)] = load_f32(a, rows[r], kk);
        for (int64_t j = 0; j < n; ++j) {
          double s = 0;
          const double* bj = &bt[size_t(j * k)];
          for (int64_t kk = 0; kk < k; ++kk) s += arow[size_t(kk)] * bj[kk];
          out[r * size_t(n) + size_t(j)] = s;
        }
      }
    });
  for (auto& th : pool) th.join();
  return out;
}

double rel_err_rows(const HostTensor& d, const std::vector<int64_t>& rows, const std::vector<double>& ref) {
  const int64_t n = d.cols();
  double num = 0, den = 0;
  for (size_t r = 0; r < rows.size(); ++r)
    for (int64_t j = 0; j < n; ++j) {
      const double x = d.get(rows[r], j), y = ref[r * size_t(n) + size_t(j)];
      num += (x - y) * (x - y);
      den += y * y;
    }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

class GemmTest : public GpuTest {
 protected:
  std::optional<GemmConfig> forced_;  // run_case uses this config instead of the heuristic
  void run_case(const Case& c) {
    SCOPED_TRACE(c.label());
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed) + " (replay with CODA_TEST_SEED)");
    std::mt19937_64 g(seed);
    Operands o = make_operands(g, c);
    DeviceTensor da = dev::upload(o.a_store), db = dev::upload(o.b_store);
    const int64_t ldd = c.out == DType::kFP32 ? (c.n + 3) / 4 * 4 : pad8(c.n);
    HostTensor d = HostTensor::matrix(c.out, c.m, c.n, ldd);
    HostTensor d_ref = HostTensor::matrix(c.out, c.m, c.n, ldd);
    HostTensor d32 = HostTensor::matrix(DType::kFP32, c.m, c.n, (c.n + 3) / 4 * 4);
    DeviceTensor dd = dev::poisoned_like(d), d32d = dev::poisoned_like(d32);

    GemmArgs args;
    args.a = on_device(o.a, o.a_store, da);
    args.b = on_device(o.b, o.b_store, db);
    args.d = dd.view;
    const Status s = forced_ ? gemm_with_config(args, *forced_) : gemm(args);
    ASSERT_TRUE(s.ok()) << s.message();
    dev::check(cudaDeviceSynchronize(), "gemm");
    dev::cublas_gemm(handle_, args.a, args.b, d32d.view);
    dev::check(cudaDeviceSynchronize(), "cublas");
    dev::download(dd, d);
    dev::download(d32d, d32);
    // cuBLAS's result in our output dtype: its fp32 result rounded once (what cuBLAS stores).
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j) d_ref.set(i, j, d32.get(i, j));

    // Fully written: inputs are finite, so no NaN may remain from the poison.
    int64_t unwritten = 0;
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j) unwritten += std::isnan(d.get(i, j));
    EXPECT_EQ(unwritten, 0) << "elements left unwritten (still NaN)";
    // Padding beyond N is never written.
    if (ldd > c.n && c.m > 0) {
      HostTensor raw = HostTensor::matrix(c.out, c.m, ldd);
      dev::check(cudaMemcpy(raw.data(), dd.buf.get(), raw.bytes(), cudaMemcpyDeviceToHost), "raw");
      EXPECT_TRUE(std::isnan(raw.get(0, ldd - 1))) << "a store went past N into the row padding";
    }
    // Every element against cuBLAS (fp32 output): within the output's rounding; for an fp32
    // output, within the noise of fp32 tensor-core accumulation over K terms in one tile
    // (16 x 2^-24 x sqrt(K); cuBLAS may split K, coda does not).
    const double acc_noise = 16.0 * 5.9604644775390625e-8 * std::sqrt(double(c.k) + 1);
    const double ulp = c.out == DType::kFP32 ? acc_noise + 1e-6 : (c.out == DType::kBF16 ? 1.0 / 128 : 1.0 / 1024);
    double num = 0, den = 0, worst = 0;
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j) den += double(d32.get(i, j)) * d32.get(i, j);
    const double rms = std::sqrt(den / double(std::max<int64_t>(1, c.m * c.n)));
    den = 0;
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j) {
        const double x = d.get(i, j), y = d32.get(i, j);
        num += (x - y) * (x - y);
        den += y * y;
        worst = std::max(worst, std::fabs(x - y) / (std::fabs(y) + rms + 1e-30));
      }
    const double vs_cublas = den > 0 ? std::sqrt(num / den) : 0.0;
    EXPECT_LT(vs_cublas, ulp) << "relative Frobenius difference from cuBLAS";
    EXPECT_LT(worst, 4 * ulp) << "worst element vs cuBLAS";
    // Sampled rows against float64, under the 2x rule with cuBLAS (same output dtype) as yardstick.
    std::vector<int64_t> rows;
    for (int i = 0; i < c.sample_rows && i < c.m; ++i) rows.push_back(i == 0 ? c.m - 1 : int64_t(g() % uint64_t(c.m)));
    const std::vector<double> ref = reference_rows(o.a, o.b, rows);
    const double ours = rel_err_rows(d, rows, ref), theirs = rel_err_rows(d_ref, rows, ref);
    const double eps = c.out == DType::kFP32 ? acc_noise : 1e-5;
    EXPECT_LE(ours, 2 * theirs + eps) << "float64 error " << ours << " vs cuBLAS " << theirs;
  }
};

// ---- LLaMA-3 shapes: forward, dgrad and wgrad ----------------------------------------------------

struct Linear {
  const char* name;
  int64_t tokens, out, in;
};
const Linear kLlama[] = {
    {"1b.oproj", 16384, 2048, 2048}, {"1b.gateup", 16384, 16384, 2048}, {"1b.down", 16384, 2048, 8192},
    {"1b.qkv", 16384, 3072, 2048},   {"8b.oproj", 8192, 4096, 4096},    {"8b.gateup", 8192, 28672, 4096},
    {"8b.down", 8192, 4096, 14336},  {"8b.qkv", 8192, 6144, 4096},
};

TEST_F(GemmTest, LlamaForward) {
  for (const Linear& l : kLlama) run_case({l.tokens, l.out, l.in, Form::kForward, DType::kBF16, DType::kBF16, 8});
}
TEST_F(GemmTest, LlamaDgrad) {
  for (const Linear& l : kLlama) run_case({l.tokens, l.in, l.out, Form::kDgrad, DType::kBF16, DType::kBF16, 8});
}
TEST_F(GemmTest, LlamaWgrad) {
  for (const Linear& l : kLlama) run_case({l.out, l.in, l.tokens, Form::kWgrad, DType::kBF16, DType::kFP32, 4});
}

// ---- awkward shapes ---------------------------------------------------------------------------

TEST_F(GemmTest, AwkwardShapesForward) {
  for (int64_t m : {1, 7, 129, 1000})
    for (int64_t n : {8, 72, 1000})
      for (int64_t k : {8, 72, 4104}) run_case({m, n, k, Form::kForward, DType::kBF16, DType::kBF16});
}

TEST_F(GemmTest, AwkwardShapesAllFormsAndDtypes) {
  const DType outs[] = {DType::kBF16, DType::kFP16, DType::kFP32};
  int i = 0;
  for (Form f : {Form::kForward, Form::kDgrad, Form::kWgrad})
    for (DType in : {DType::kBF16, DType::kFP16})
      for (int64_t m : {7, 129, 1000})
        for (int64_t n : {72, 1000}) {
          const int64_t k = (i % 3 == 0) ? 8 : (i % 3 == 1 ? 72 : 4104);
          run_case({m, n, k, f, in, outs[i++ % 3]});
        }
}

// K = 1 in every form: a one-token batch's wgrad reads [M, 1] and [N, 1] views of rows one element
// apart, which are M/N-major (as K-major their row stride would be 2 bytes, illegal for TMA).
TEST_F(GemmTest, OneTermKAllForms) {
  for (Form f : {Form::kForward, Form::kDgrad, Form::kWgrad})
    for (int64_t m : {1, 129})
      for (int64_t n : {72, 1000}) run_case({m, n, 1, f, DType::kBF16, f == Form::kWgrad ? DType::kFP32 : DType::kBF16});
}

TEST_F(GemmTest, LargeK) {
  run_case({129, 72, 65536, Form::kForward, DType::kBF16, DType::kBF16});
  run_case({129, 72, 65536, Form::kForward, DType::kBF16, DType::kFP32});
  run_case({256, 256, 131072, Form::kWgrad, DType::kBF16, DType::kFP32});
}

// ---- the linear-combination program and the scalar pointer --------------------------------------

TEST_F(GemmTest, LinearCombination) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 g(seed);
  for (DType ct : {DType::kBF16, DType::kFP32}) {
    const int64_t m = 333, n = 520, k = 200;
    Case c{m, n, k};
    Operands o = make_operands(g, c);
    HostTensor hc = random_host(g, ct, m, n, ct == DType::kFP32 ? 520 : 520);
    DeviceTensor da = dev::upload(o.a_store), db = dev::upload(o.b_store), dc = dev::upload(hc);
    HostTensor d = HostTensor::matrix(DType::kBF16, m, n);
    DeviceTensor dd = dev::poisoned_like(d);
    dev::Buffer alpha(sizeof(float));
    const float alpha_value = -1.25f;
    dev::check(cudaMemcpy(alpha.get(), &alpha_value, 4, cudaMemcpyHostToDevice), "alpha");
    GemmArgs args{on_device(o.a, o.a_store, da), on_device(o.b, o.b_store, db), dc.view, dd.view, 99.0f, 0.5f,
                  static_cast<const float*>(alpha.get()), nullptr};
    const Status s = gemm(args);
    ASSERT_TRUE(s.ok()) << s.message();
    dev::download(dd, d);
    const std::vector<int64_t> rows = {0, 1, 100, 332};
    const std::vector<double> ab = reference_rows(o.a, o.b, rows);
    double num = 0, den = 0;
    for (size_t r = 0; r < rows.size(); ++r)
      for (int64_t j = 0; j < n; ++j) {
        const double want = -1.25 * ab[r * size_t(n) + size_t(j)] + 0.5 * hc.get(rows[r], j);
        const double got = d.get(rows[r], j);
        num += (got - want) * (got - want);
        den += want * want;
      }
    EXPECT_LT(std::sqrt(num / den), 4e-3) << "D = alpha (from a device pointer) A B^T + beta C, C " << dtype_name(ct);
  }
}

TEST_F(GemmTest, ZeroKGivesBetaC) {
  std::mt19937_64 g(fresh_seed());
  const int64_t m = 100, n = 64;
  HostTensor a = HostTensor::matrix(DType::kBF16, m, 0, 8), b = HostTensor::matrix(DType::kBF16, n, 0, 8);
  HostTensor hc = random_host(g, DType::kBF16, m, n, n);
  DeviceTensor da = dev::upload(a), db = dev::upload(b), dc = dev::upload(hc);
  HostTensor d = HostTensor::matrix(DType::kFP32, m, n);
  DeviceTensor dd = dev::poisoned_like(d);
  ASSERT_TRUE(gemm({da.view, db.view, dc.view, dd.view, 1.0f, 2.0f}).ok());
  dev::download(dd, d);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) ASSERT_EQ(d.get(i, j), 2.0f * hc.get(i, j));
}

// ---- NaN / Inf propagate as in cuBLAS --------------------------------------------------------------

TEST_F(GemmTest, NanAndInfPropagate) {
  std::mt19937_64 g(fresh_seed());
  Case c{300, 264, 96};
  Operands o = make_operands(g, c);
  o.a_store.set(17, 5, NAN);
  o.a_store.set(42, 9, INFINITY);
  o.b_store.set(100, 3, -INFINITY);
  DeviceTensor da = dev::upload(o.a_store), db = dev::upload(o.b_store);
  HostTensor d = HostTensor::matrix(DType::kFP32, c.m, c.n), r = HostTensor::matrix(DType::kFP32, c.m, c.n);
  DeviceTensor dd = dev::poisoned_like(d), dr = dev::poisoned_like(r);
  GemmArgs args{on_device(o.a, o.a_store, da), on_device(o.b, o.b_store, db), {}, dd.view};
  ASSERT_TRUE(gemm(args).ok());
  dev::cublas_gemm(handle_, args.a, args.b, dr.view);
  dev::download(dd, d);
  dev::download(dr, r);
  int64_t nan = 0, inf = 0;
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < c.n; ++j) {
      const float x = d.get(i, j), y = r.get(i, j);
      ASSERT_EQ(std::isnan(x), std::isnan(y)) << "at " << i << "," << j;
      ASSERT_EQ(std::isinf(x), std::isinf(y)) << "at " << i << "," << j;
      if (std::isinf(x)) {
        ASSERT_EQ(std::signbit(x), std::signbit(y));
      }
      nan += std::isnan(x);
      inf += std::isinf(x);
    }
  EXPECT_GT(nan, 0);
  EXPECT_GT(inf, 0);
}

// ---- bad input on the GPU path: rejected before launch, nothing written ----------------------------

TEST_F(GemmTest, BadInputWritesNothing) {
  std::mt19937_64 g(fresh_seed());
  Case c{64, 64, 64};
  Operands o = make_operands(g, c);
  DeviceTensor da = dev::upload(o.a_store), db = dev::upload(o.b_store);
  HostTensor d = HostTensor::matrix(DType::kBF16, 64, 64);
  DeviceTensor dd = dev::poisoned_like(d);
  GemmArgs host_a{o.a, on_device(o.b, o.b_store, db), {}, dd.view};
  Status s = gemm(host_a);
  EXPECT_EQ(s.code(), CODA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(s.message().find("gemm: argument 'a' points to host memory"), std::string::npos) << s.message();
  GemmArgs bad_k{on_device(o.a, o.a_store, da), on_device(o.b, o.b_store, db), {}, dd.view};
  bad_k.b.desc.sizes[1] = 32;
  s = gemm(bad_k);
  EXPECT_NE(s.message().find("argument 'b'"), std::string::npos) << s.message();
  coda_tensor_t ta = da.view.desc, tb = on_device(o.b, o.b_store, db).desc, td = dd.view.desc;
  td.sizes[1] = 63;
  EXPECT_EQ(coda_gemm(&ta, &tb, &td, nullptr), CODA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(coda_last_error()).find("argument 'd'"), std::string::npos) << coda_last_error();
  dev::check(cudaDeviceSynchronize(), "sync");
  dev::download(dd, d);
  for (int64_t i = 0; i < 64; ++i)
    for (int64_t j = 0; j < 64; ++j) ASSERT_TRUE(std::isnan(d.get(i, j))) << "a rejected call wrote the output";
}

// ---- every config and raster, every form, on awkward shapes (what the autotuner may pick) ----------

TEST_F(GemmTest, EveryConfigIsCorrect) {
  std::mt19937_64 g(fresh_seed());
  for (Form form : {Form::kForward, Form::kDgrad, Form::kWgrad}) {
    // 700 x 1000: tile counts that leave partial tiles, odd per-CTA tile counts and cluster padding.
    Case c{700, 1000, 136, form};
    SCOPED_TRACE(c.label());
    Operands o = make_operands(g, c);
    DeviceTensor da = dev::upload(o.a_store), db = dev::upload(o.b_store);
    HostTensor d = HostTensor::matrix(DType::kBF16, c.m, c.n), r = HostTensor::matrix(DType::kFP32, c.m, c.n);
    DeviceTensor dr = dev::poisoned_like(r);
    GemmArgs args{on_device(o.a, o.a_store, da), on_device(o.b, o.b_store, db), {}, {}};
    dev::cublas_gemm(handle_, args.a, args.b, dr.view);
    dev::download(dr, r);
    for (int v = 0; v < int(KernelVariant::kCount); ++v)
      for (int sw : {1, 3, 16})
        for (bool rn : {false, true}) {
          const GemmConfig cfg{KernelVariant(v), sw, rn};
          SCOPED_TRACE(cfg.describe());
          DeviceTensor dd = dev::poisoned_like(d);
          args.d = dd.view;
          ASSERT_TRUE(gemm_with_config(args, cfg).ok());
          dev::download(dd, d);
          double num = 0, den = 0;
          int64_t nan = 0;
          for (int64_t i = 0; i < c.m; ++i)
            for (int64_t j = 0; j < c.n; ++j) {
              const double x = d.get(i, j), y = r.get(i, j);
              nan += std::isnan(x);
              num += (x - y) * (x - y);
              den += y * y;
            }
          EXPECT_EQ(nan, 0) << "unwritten elements";
          EXPECT_LT(std::sqrt(num / den), 1.0 / 128);
        }
  }
}

// ---- every variant on a LLaMA shape with more k-tiles than pipeline stages ----------------------

TEST_F(GemmTest, EveryVariantLargeK) {
  for (int v = 0; v < int(KernelVariant::kCount); ++v) {
    SCOPED_TRACE(variant_name(KernelVariant(v)));
    forced_ = GemmConfig{KernelVariant(v), 8, false};
    run_case({2048, 2048, 2048, Form::kForward, DType::kBF16, DType::kBF16, 8});
    run_case({1000, 1000, 1000, Form::kDgrad, DType::kBF16, DType::kBF16, 8});
  }
  forced_.reset();
}

// ---- the opt-in autotuner: measures once, caches the choice on disk, reuses it -------------------

TEST_F(GemmTest, AutotuneCachesItsChoice) {
  const std::string path = "/tmp/coda-autotune-test-" + std::to_string(fresh_seed()) + ".tsv";
  setenv("CODA_AUTOTUNE_CACHE", path.c_str(), 1);
  setenv("CODA_AUTOTUNE", "1", 1);
  std::mt19937_64 g(fresh_seed());
  Case c{2048, 1536, 1024};
  Operands o = make_operands(g, c);
  DeviceTensor da = dev::upload(o.a_store), db = dev::upload(o.b_store);
  HostTensor d = HostTensor::matrix(DType::kBF16, c.m, c.n), r = HostTensor::matrix(DType::kFP32, c.m, c.n);
  DeviceTensor dd = dev::poisoned_like(d), dr = dev::poisoned_like(r);
  GemmArgs args{on_device(o.a, o.a_store, da), on_device(o.b, o.b_store, db), {}, dd.view};
  const Status s = gemm(args);  // first call: measures the candidates, writes the cache
  unsetenv("CODA_AUTOTUNE");
  ASSERT_TRUE(s.ok()) << s.message();
  dev::cublas_gemm(handle_, args.a, args.b, dr.view);
  dev::download(dd, d);
  dev::download(dr, r);
  double num = 0, den = 0;
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < c.n; ++j) {
      num += (d.get(i, j) - r.get(i, j)) * (d.get(i, j) - r.get(i, j));
      den += double(r.get(i, j)) * r.get(i, j);
    }
  EXPECT_LT(std::sqrt(num / den), 1.0 / 128) << "the result after autotuning";
  std::ifstream f(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(f, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 1u) << "one cache entry per (GPU, operation, shape, dtypes)";
  EXPECT_NE(lines[0].find(dev::device_name()), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("\tgemm\t0\t2048\t1536\t1024\tbf16\tbf16\t"), std::string::npos) << lines[0];
  // Second call: the cached choice, no new measurement or entry.
  setenv("CODA_AUTOTUNE", "1", 1);
  GemmConfig cached;
  ASSERT_TRUE(gemm_config(args, &cached).ok());
  ASSERT_TRUE(gemm(args).ok());
  unsetenv("CODA_AUTOTUNE");
  std::ifstream f2(path);
  int count = 0;
  for (std::string line; std::getline(f2, line);) ++count;
  EXPECT_EQ(count, 1);
  GemmConfig heuristic;
  ASSERT_TRUE(gemm_config(args, &heuristic).ok());
  std::printf("autotune chose: %s (heuristic: %s)\n", cached.describe().c_str(), heuristic.describe().c_str());
  std::remove(path.c_str());
  unsetenv("CODA_AUTOTUNE_CACHE");
}

// ---- a small subset for compute-sanitizer (scripts/device-run.sh runs it under memcheck/racecheck) -

TEST_F(GemmTest, SanitizerSubset) {
  run_case({129, 72, 72, Form::kForward, DType::kBF16, DType::kBF16});
  run_case({7, 264, 136, Form::kDgrad, DType::kFP16, DType::kFP32});
  run_case({300, 136, 264, Form::kWgrad, DType::kBF16, DType::kBF16});
}

}  // namespace
}  // namespace coda
