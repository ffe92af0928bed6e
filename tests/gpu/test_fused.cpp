// GPU tests of the forward fused operators (Hopper only; skipped elsewhere).
//
//  - the operator tests shared with the emulator (tests/common/op_tests.inc), run on the GPU:
//    every operator against float64 under design.md's rule, fresh inputs, poisoned outputs
//    checked fully written, awkward shapes;
//  - LLaMA-3 1B / 8B shapes with an awkward M, and the LM head at vocab 128256 and 32003, checked
//    against float64 on sampled rows (the rule on those rows);
//  - bad input rejected before any launch, outputs untouched; the weight-layout helpers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "coda/block/gpu_backend.hpp"
#include "coda/coda.h"
#include "coda/device_util.hpp"
#include "coda/gpu.hpp"
#include "coda/host.hpp"
#include "coda/ops.hpp"
#include "coda/ref/emulator.hpp"
#include "cpu/util.hpp"
#include "gpu/gpu_ops.hpp"
#include "common/op_prelude.hpp"

namespace coda {
namespace {

// The emulator's shapes plus multi-tile ones with ragged edges in M, N and K. {70, 136, 4104} and
// {130, 72, 4160}: K >= 4096 (the residual program's long-K instance), with and without a residual.
// {2000, 2056, 72} (last, so the other cases keep their residual and dtype rotation): more tiles
// than SMs, so a CTA runs several (pingpong: its two warpgroups take turns), edges in M and N.
const std::vector<Shape> kShapes = {{1, 8, 8},       {7, 72, 24},       {129, 40, 72},   {33, 264, 16},
                                    {300, 520, 200}, {1000, 1032, 264}, {70, 136, 4104}, {130, 72, 4160},
                                    {2000, 2056, 72}};
const std::vector<emu::EmuConfig> kGrains = {{CODA_PARTIAL_ROWS, CODA_PARTIAL_COLS}};
const std::vector<emu::EmuConfig> kQkGrains = kGrains;
const std::vector<int64_t> kQkHeadDims = {64, 128, 512};

class GpuOps : public ::testing::Test {
 protected:
  void SetUp() override {
    if (coda_device_check(0) != CODA_SUCCESS) GTEST_SKIP() << "no Hopper GPU: " << coda_last_error();
  }
};
#define CODA_OPS gpu_ops
#define CODA_OP_SUITE GpuOps
#define CODA_OPS_BACKWARD 0
#define CODA_OPS_RMSNORM_BACKWARD 1
#define CODA_OPS_SWIGLU_BACKWARD 1
#define CODA_OPS_ROPE_BACKWARD 1
#define CODA_OPS_QKNORM_BACKWARD 1

#include "common/op_tests.inc"

// ---- LLaMA shapes on sampled rows ------------------------------------------------------------------

// A device tensor of uniform values in [-scale, scale) (16-byte-padded rows) and its host copy.
struct Dual {
  HostTensor host;
  dev::DeviceTensor dev;
  TensorView view() const { return dev.view; }
};
Dual random_dual(uint64_t seed, DType t, int64_t rows, int64_t cols, float scale) {
  Dual d;
  d.host = HostTensor::matrix(t, rows, cols, test::padded_stride(t, cols));
  d.dev = dev::poisoned_like(d.host);
  dev::fill_uniform(d.dev.view, seed, scale);
  dev::check(cudaDeviceSynchronize(), "fill");
  dev::download(d.dev, d.host);
  return d;
}
// Outputs carry HostTensor's poison pattern on the device too, so that fully_written() after the
// download means every element was written by the operator.
Dual poisoned_dual(HostTensor host) {
  Dual d;
  d.host = std::move(host);
  d.host.poison();
  d.dev = dev::upload(d.host);
  return d;
}
Dual out_dual(DType t, int64_t rows, int64_t cols) {
  return poisoned_dual(cols == 0 ? HostTensor::vector(t, rows)
                                 : HostTensor::matrix(t, rows, cols, test::padded_stride(t, cols)));
}
// A dense fp32 partial-reduction tensor (rows not padded), poisoned.
Dual partial_dual(int64_t rows, int64_t cols) { return poisoned_dual(HostTensor::matrix(DType::kFP32, rows, cols)); }
Dual vec_dual(const Vec& v, DType t) {
  Dual d;
  d.host = from_vec(v, t);
  d.dev = dev::upload(d.host);
  return d;
}
void fetch(Dual& d) {
  dev::check(cudaDeviceSynchronize(), "operator");
  dev::download(d.dev, d.host);
}

// acc(i, n) = sum_k a[rows[i], k] b[n, k] in float64 from the stored values, on every core.
Mat sampled_matmul(const HostTensor& a, const std::vector<int64_t>& rows, const HostTensor& b) {
  const int64_t n = b.rows(), k = b.cols();
  Mat ar(static_cast<int64_t>(rows.size()), k);
  for (size_t i = 0; i < rows.size(); ++i)
    for (int64_t j = 0; j < k; ++j) ar(static_cast<int64_t>(i), j) = a.get(rows[i], j);
  Mat out(ar.rows, n);
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      std::vector<double> brow(static_cast<size_t>(k));
      for (int64_t c = t; c < n; c += threads) {
        for (int64_t j = 0; j < k; ++j) brow[static_cast<size_t>(j)] = b.get(c, j);
        for (int64_t i = 0; i < ar.rows; ++i) {
          double s = 0;
          for (int64_t j = 0; j < k; ++j) s += ar(i, j) * brow[static_cast<size_t>(j)];
          out(i, c) = s;
        }
      }
    });
  for (auto& th : pool) th.join();
  return out;
}
Mat rows_of(const HostTensor& t, const std::vector<int64_t>& rows) {
  Mat m(static_cast<int64_t>(rows.size()), t.cols());
  for (size_t i = 0; i < rows.size(); ++i)
    for (int64_t j = 0; j < t.cols(); ++j) m(static_cast<int64_t>(i), j) = t.get(rows[i], j);
  return m;
}
Vec vec_rows(const HostTensor& t, const std::vector<int64_t>& rows) {
  Vec v;
  for (int64_t r : rows) v.push_back(t.get(r));
  return v;
}
std::vector<int64_t> sample_rows(std::mt19937_64& g, int64_t m, int count) {
  std::vector<int64_t> r = {0, m - 1};
  while (static_cast<int>(r.size()) < count) r.push_back(static_cast<int64_t>(g() % static_cast<uint64_t>(m)));
  return r;
}
Mat row_scaled(Mat m, const Vec& r) {
  for (int64_t i = 0; i < m.rows; ++i)
    for (int64_t j = 0; j < m.cols; ++j) m(i, j) *= r[static_cast<size_t>(i)];
  return m;
}

struct Model {
  const char* name;
  int64_t d, f, hq, hkv, hd;
};

TEST_F(GpuOps, LlamaShapesSampledRows) {
  std::mt19937_64 g(test::seed());
  const uint64_t seed = g();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (const Model& md : {Model{"1B", 2048, 8192, 32, 8, 64}, Model{"8B", 4096, 14336, 32, 8, 128}}) {
    const int64_t m = 1337;  // no tile size divides it
    const HeadDims heads{md.hq, md.hkv, md.hd};
    const int64_t n3 = heads.qkv_cols();
    SCOPED_TRACE(std::string("LLaMA-3 ") + md.name + " M " + std::to_string(m));
    const std::vector<int64_t> rows = sample_rows(g, m, 12);
    const float ws = 1.0f / std::sqrt(static_cast<float>(md.d));
    Dual y0 = random_dual(seed + 1, kBF16, m, md.d, 1.0f), wo = random_dual(seed + 2, kBF16, md.d, md.d, ws);
    Dual x0 = random_dual(seed + 3, kBF16, m, md.d, 1.0f);
    Vec g0(static_cast<size_t>(md.d));
    for (double& v : g0) v = round_bf16(static_cast<float>(0.8 + 0.4 * static_cast<double>(g() % 1000) / 1000.0));
    Dual norm = vec_dual(g0, kBF16);
    const int64_t parts = ceil_div(md.d, CODA_PARTIAL_COLS);
    Dual x1 = out_dual(kBF16, m, md.d), h1 = out_dual(kBF16, m, md.d), p1 = partial_dual(m, parts);
    Dual r1 = out_dual(kFP32, m, 0);
    CODA_ASSERT_OK(gemm_residual_rmsnorm_partial({y0.view(), wo.view(), x0.view(), norm.view(), x1.view(), h1.view(),
                                                  p1.view(), 1.0f}));
    CODA_ASSERT_OK(rms_finish({p1.view(), r1.view(), md.d, 1e-5f}));
    fetch(x1), fetch(h1), fetch(p1), fetch(r1);
    EXPECT_TRUE(x1.host.fully_written() && h1.host.fully_written() && p1.host.fully_written() &&
                r1.host.fully_written());
    {
      const Mat acc = sampled_matmul(y0.host, rows, wo.host), res = rows_of(x0.host, rows);
      const Mat x64 = ref::add(acc, res), xu = rounded(ref::add(rounded(acc), res));
      EXPECT_TRUE(within_rule("x", ref::rel_error(rows_of(x1.host, rows), x64), ref::rel_error(xu, x64)));
      Mat h64 = x64, hu = xu;
      for (int64_t i = 0; i < h64.rows; ++i)
        for (int64_t j = 0; j < h64.cols; ++j) {
          h64(i, j) *= g0[static_cast<size_t>(j)];
          hu(i, j) = round_bf16(static_cast<float>(hu(i, j) * g0[static_cast<size_t>(j)]));
        }
      EXPECT_TRUE(within_rule("h", ref::rel_error(rows_of(h1.host, rows), h64), ref::rel_error(hu, h64)));
      const Vec r64 = ref::rms_rstd(x64, 1e-5), ru = ref::rms_rstd(xu, 1e-5);
      EXPECT_TRUE(within_rule("rstd", ref::rel_error(ref::from_vec(vec_rows(r1.host, rows)), ref::from_vec(r64)),
                              ref::rel_error(ref::from_vec(ru), ref::from_vec(r64))));
    }
    // The consumers read the stored h1 and r1 (as the block does).
    const Vec r_s = vec_rows(r1.host, rows);
    {
      Dual wgu = random_dual(seed + 4, kBF16, 2 * md.f, md.d, ws);
      Dual z = out_dual(kBF16, m, 2 * md.f), o = out_dual(kBF16, m, md.f);
      CODA_ASSERT_OK(gemm_rmsnorm_swiglu({h1.view(), wgu.view(), r1.view(), z.view(), o.view()}));
      fetch(z), fetch(o);
      EXPECT_TRUE(z.host.fully_written() && o.host.fully_written());
      const Mat acc = sampled_matmul(h1.host, rows, wgu.host);
      const Mat z64 = row_scaled(acc, r_s), zu = rounded(row_scaled(rounded(acc), r_s));
      EXPECT_TRUE(within_rule("z", ref::rel_error(rows_of(z.host, rows), z64), ref::rel_error(zu, z64)));
      const Mat o64 = ref::swiglu(z64);
      EXPECT_TRUE(within_rule("o", ref::rel_error(rows_of(o.host, rows), o64), ref::rel_error(rounded(ref::swiglu(zu)), o64)));
    }
    {
      Dual wqkv = random_dual(seed + 5, kBF16, n3, md.d, ws);
      std::vector<int32_t> pos(static_cast<size_t>(m));
      for (auto& p : pos) p = static_cast<int32_t>(g() % 131072);
      pos[0] = 131071;
      HostTensor tp = from_ints(pos);
      dev::DeviceTensor dp = dev::upload(tp);
      const std::vector<float> fr = rope_frequencies(md.hd, 500000.0, RopeScaling{8.0, 1.0, 4.0, 8192.0});
      const Vec fd(fr.begin(), fr.end());
      Dual freqs = vec_dual(fd, kFP32);
      Dual qkv = out_dual(kBF16, m, n3), pre = out_dual(kBF16, m, n3), qn = out_dual(kBF16, m, n3);
      const int64_t segs = qk_segments(md.hd, CODA_PARTIAL_COLS);
      Dual ss = partial_dual(m, (md.hq + md.hkv) * segs);
      CODA_ASSERT_OK(gemm_rmsnorm_rope({h1.view(), wqkv.view(), r1.view(), dp.view, freqs.view(), heads, qkv.view()}));
      CODA_ASSERT_OK(gemm_qkv_sqsum({h1.view(), wqkv.view(), r1.view(), heads, pre.view(), ss.view()}));
      Vec gq(static_cast<size_t>(md.hd)), gk(static_cast<size_t>(md.hd));
      for (double& v : gq) v = round_bf16(static_cast<float>(0.9 + 0.2 * static_cast<double>(g() % 100) / 100.0));
      for (double& v : gk) v = round_bf16(static_cast<float>(0.9 + 0.2 * static_cast<double>(g() % 100) / 100.0));
      Dual tgq = vec_dual(gq, kBF16), tgk = vec_dual(gk, kBF16);
      CODA_ASSERT_OK(qknorm_rope({pre.view(), ss.view(), tgq.view(), tgk.view(), dp.view, freqs.view(), heads, 1e-6f,
                                  qn.view()}));
      fetch(qkv), fetch(pre), fetch(ss), fetch(qn);
      EXPECT_TRUE(qkv.host.fully_written() && pre.host.fully_written() && ss.host.fully_written() &&
                  qn.host.fully_written());
      std::vector<int32_t> pos_s;
      for (int64_t r : rows) pos_s.push_back(pos[static_cast<size_t>(r)]);
      const ref::Heads rh{md.hq, md.hkv, md.hd};
      const Mat acc = sampled_matmul(h1.host, rows, wqkv.host);
      const Mat pre64 = row_scaled(acc, r_s), preu = rounded(row_scaled(rounded(acc), r_s));
      const Mat q64 = ref::rope(pre64, pos_s, fd, rh), qu = rounded(ref::rope(preu, pos_s, fd, rh));
      EXPECT_TRUE(within_rule("qkv (rope)", ref::rel_error(rows_of(qkv.host, rows), q64), ref::rel_error(qu, q64)));
      EXPECT_TRUE(within_rule("pre (sqsum)", ref::rel_error(rows_of(pre.host, rows), pre64), ref::rel_error(preu, pre64)));
      const Mat n64 = ref::qknorm_rope(pre64, gq, gk, pos_s, fd, rh, 1e-6);
      const Mat nu = rounded(ref::qknorm_rope(preu, gq, gk, pos_s, fd, rh, 1e-6));
      EXPECT_TRUE(within_rule("qknorm_rope", ref::rel_error(rows_of(qn.host, rows), n64), ref::rel_error(nu, n64)));
    }
  }
}

// ---- the LM head at real vocabularies -----------------------------------------------------------------

TEST_F(GpuOps, LmHeadVocab128256And32003) {
  std::mt19937_64 g(test::seed());
  const uint64_t seed = g();
  SCOPED_TRACE("seed " + std::to_string(seed));
  struct LmShape {
    int64_t m, v, k;
    int ignored;  // 0 none, 1 some, 2 all
  };
  for (const LmShape& s : {LmShape{333, 128256, 2048, 1}, LmShape{257, 32003, 4096, 0}, LmShape{65, 32003, 512, 2}}) {
    SCOPED_TRACE("M " + std::to_string(s.m) + " V " + std::to_string(s.v) + " K " + std::to_string(s.k));
    const std::vector<int64_t> rows = sample_rows(g, s.m, 8);
    Dual a = random_dual(seed + 11, kBF16, s.m, s.k, 1.0f);
    Dual w = random_dual(seed + 12, kBF16, s.v, s.k, 4.0f / std::sqrt(static_cast<float>(s.k)));
    Vec r(static_cast<size_t>(s.m));
    for (double& x : r) x = static_cast<float>(0.5 + static_cast<double>(g() % 1000) / 1000.0);
    Dual tr = vec_dual(r, kFP32);
    std::vector<int32_t> t(static_cast<size_t>(s.m));
    for (auto& x : t) x = static_cast<int32_t>(g() % static_cast<uint64_t>(s.v));
    t[static_cast<size_t>(s.m - 1)] = static_cast<int32_t>(s.v - 1);
    if (s.ignored == 1)
      for (size_t i = 1; i < t.size(); i += 5) t[i] = CODA_IGNORE_INDEX;
    if (s.ignored == 2) std::fill(t.begin(), t.end(), CODA_IGNORE_INDEX);
    HostTensor tt = from_ints(t);
    dev::DeviceTensor dt = dev::upload(tt);
    const int64_t parts = ceil_div(s.v, CODA_PARTIAL_COLS);
    Dual logits = out_dual(kBF16, s.m, s.v), lp = partial_dual(s.m, parts), tl = out_dual(kFP32, s.m, 0);
    Dual lse = out_dual(kFP32, s.m, 0), loss = out_dual(kFP32, 1, 0), rl = out_dual(kFP32, s.m, 0);
    CODA_ASSERT_OK(gemm_rmsnorm_lse({a.view(), w.view(), tr.view(), dt.view, CODA_IGNORE_INDEX, logits.view(),
                                     lp.view(), tl.view()}));
    CODA_ASSERT_OK(lse_finish({lp.view(), lse.view()}));
    CrossEntropyArgs ce;
    ce.lse = lse.view();
    ce.target_logit = tl.view();
    ce.targets = dt.view;
    ce.loss_out = loss.view();
    ce.row_loss_out = rl.view();
    ce.logits = logits.view();
    ce.dlogits_out = logits.view();  // in place
    CODA_ASSERT_OK(cross_entropy(ce));
    fetch(logits), fetch(lp), fetch(tl), fetch(lse), fetch(loss), fetch(rl);
    EXPECT_TRUE(logits.host.fully_written() && lp.host.fully_written() && tl.host.fully_written() &&
                lse.host.fully_written() && loss.host.fully_written() && rl.host.fully_written());

    // The logits-free forward: the same loss without an M x V tensor.
    Dual loss2 = out_dual(kFP32, 1, 0), rl2 = out_dual(kFP32, s.m, 0);
    dev::Buffer ws(lm_head_loss_workspace_bytes(s.m, s.v));
    LmHeadLossArgs la;
    la.a = a.view();
    la.b = w.view();
    la.rstd = tr.view();
    la.targets = dt.view;
    la.loss_out = loss2.view();
    la.row_loss_out = rl2.view();
    la.workspace = ws.get();
    la.workspace_bytes = ws.bytes();
    CODA_ASSERT_OK(lm_head_loss(la));
    fetch(loss2), fetch(rl2);
    // Per row: one fp32 partial per 128 columns, lse and the target logit: 1.6% of the bf16 logits.
    EXPECT_LT(static_cast<double>(ws.bytes()), 0.02 * static_cast<double>(s.m * s.v * 2))
        << "the logits-free loss's workspace must stay under 2% of the bf16 logits";

    std::vector<int32_t> t_s;
    for (int64_t i : rows) t_s.push_back(t[static_cast<size_t>(i)]);
    Vec r_s;
    for (int64_t i : rows) r_s.push_back(r[static_cast<size_t>(i)]);
    const Mat l64 = row_scaled(sampled_matmul(a.host, rows, w.host), r_s);
    // The unfused graph: bf16(a * rstd) then a bf16 GEMM output.
    HostTensor au = HostTensor::matrix(kBF16, static_cast<int64_t>(rows.size()), s.k);
    for (size_t i = 0; i < rows.size(); ++i)
      for (int64_t j = 0; j < s.k; ++j) au.set(static_cast<int64_t>(i), j, static_cast<float>(a.host.get(rows[i], j) * r_s[i]));
    std::vector<int64_t> all(rows.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
    const Mat lu = rounded(sampled_matmul(au, all, w.host));
    const ref::CrossEntropy want = ref::cross_entropy(l64, t_s, CODA_IGNORE_INDEX, true);
    const ref::CrossEntropy unf = ref::cross_entropy(lu, t_s, CODA_IGNORE_INDEX, true);
    EXPECT_TRUE(within_rule("lse", ref::rel_error(ref::from_vec(vec_rows(lse.host, rows)), ref::from_vec(want.lse)),
                            ref::rel_error(ref::from_vec(unf.lse), ref::from_vec(want.lse))));
    for (const auto* rlt : {&rl, &rl2}) {
      EXPECT_TRUE(within_rule("row loss", ref::rel_error(ref::from_vec(vec_rows(rlt->host, rows)), ref::from_vec(want.row_loss)),
                              ref::rel_error(ref::from_vec(unf.row_loss), ref::from_vec(want.row_loss))));
    }
    // The reduced loss agrees with the per-row losses, in both paths.
    double total = 0, count = 0;
    for (int64_t i = 0; i < s.m; ++i) {
      total += rl.host.get(i);
      count += t[static_cast<size_t>(i)] != CODA_IGNORE_INDEX;
    }
    const double mean = count > 0 ? total / count : 0.0;
    EXPECT_NEAR(loss.host.get(0), mean, 1e-4 * std::max(1.0, std::fabs(mean)));
    EXPECT_NEAR(loss2.host.get(0), mean, 1e-4 * std::max(1.0, std::fabs(mean)));
    if (s.ignored == 2) {
      EXPECT_EQ(loss.host.get(0), 0.0f);
      EXPECT_EQ(ref::frobenius(rows_of(logits.host, rows)), 0.0);
      continue;
    }
    // dlogits of the sampled rows (mean over the batch's count, not the sample's).
    Mat d64 = want.dlogits, du = unf.dlogits;
    const double scale = static_cast<double>(want.count) / count;
    for (double& x : d64.v) x *= scale;
    for (double& x : du.v) x *= scale;
    du = rounded(du);  // the unfused graph stores dlogits at their final scale
    EXPECT_TRUE(within_rule("dlogits", ref::rel_error(rows_of(logits.host, rows), d64), ref::rel_error(du, d64)));
  }
}

// ---- bad input: rejected before any launch, nothing written -------------------------------------------

TEST_F(GpuOps, BadInputWritesNothing) {
  std::mt19937_64 g(test::seed());
  const int64_t m = 96, n = 512, k = 64;
  Dual a = random_dual(g(), kBF16, m, k, 1.0f), w = random_dual(g(), kBF16, n, k, 0.2f);
  Dual res = random_dual(g(), kBF16, m, n, 1.0f);
  Dual res32 = random_dual(g(), kFP32, m, n, 1.0f);
  Dual norm = vec_dual(Vec(static_cast<size_t>(n), 1.0), kBF16);
  Dual x = out_dual(kBF16, m, n), h = out_dual(kBF16, m, n), p = partial_dual(m, ceil_div(n, CODA_PARTIAL_COLS));
  HostTensor host_a = HostTensor::matrix(kBF16, m, k, test::padded_stride(kBF16, k));
  auto expect = [](const Status& s, coda_status_t code, const std::string& needle) {
    EXPECT_EQ(s.code(), code) << s.message();
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
  };
  using Args = ResidualRmsNormPartialArgs;
  const Args good{a.view(), w.view(), res.view(), norm.view(), x.view(), h.view(), p.view(), 1.0f};
  Args bad = good;
  bad.a = host_a.view();
  expect(gemm_residual_rmsnorm_partial(bad), CODA_ERROR_INVALID_ARGUMENT, "argument 'a' points to host memory");
  bad = good;
  bad.partials.desc.sizes[1] = 3;
  expect(gemm_residual_rmsnorm_partial(bad), CODA_ERROR_INVALID_ARGUMENT, "argument 'partials'");
  bad = good;
  bad.residual = res32.view();
  expect(gemm_residual_rmsnorm_partial(bad), CODA_ERROR_NOT_SUPPORTED, "bf16 or fp16");
  bad = good;
  bad.a = a.view().transposed().transposed();
  bad.a.desc.strides[0] = 1;  // M-major view of the same bytes
  bad.a.desc.strides[1] = m;
  expect(gemm_residual_rmsnorm_partial(bad), CODA_ERROR_NOT_SUPPORTED, "'a' [M, K] must be row-major");
  bad = good;
  bad.x_out = h.view();  // outputs overlap
  expect(gemm_residual_rmsnorm_partial(bad), CODA_ERROR_INVALID_ARGUMENT, "x_out");
  Dual o = out_dual(kBF16, m, n / 2);
  expect(gemm_rmsnorm_swiglu({a.view(), w.view(), {}, {}, o.view()}), CODA_ERROR_INVALID_ARGUMENT, "'rstd' is required");
  expect(gemm_qkv_sqsum({a.view(), w.view(), {}, HeadDims{6, 1, 64}, x.view(), partial_dual(m, 5).view()}),
         CODA_ERROR_INVALID_ARGUMENT, "sumsq_out");
  // The unfused backward kernels: the same up-front rules (x as dx_out, h as dz_out, p as the partials
  // must stay unwritten).
  Dual rv = vec_dual(Vec(static_cast<size_t>(m), 1.0), DType::kFP32);
  Dual dwp = partial_dual(ceil_div(m, CODA_PARTIAL_ROWS), n);  // the right shape: the next rule is aliasing
  expect(unfused::rmsnorm_backward(res.view(), res.view(), rv.view(), rv.view(), norm.view(), {}, x.view(), {},
                                   p.view()),
         CODA_ERROR_INVALID_ARGUMENT, "argument 'dw_partials'");
  expect(unfused::rmsnorm_backward(res.view(), res.view(), rv.view(), rv.view(), norm.view(), x.view(), h.view(),
                                   x.view(), dwp.view()),
         CODA_ERROR_INVALID_ARGUMENT, "argument 'y_out' overlaps input 'dres'");
  expect(unfused::swiglu_backward(a.view(), res.view(), h.view(), {}, {}), CODA_ERROR_INVALID_ARGUMENT,
         "argument 'z'");
  // C ABI: the same rule through coda.h.
  coda_tensor_t ta = a.view().desc, tw = w.view().desc, tx = x.view().desc, th = h.view().desc, tp = p.view().desc;
  coda_tensor_t tn = norm.view().desc;
  th.sizes[1] = n - 1;
  EXPECT_EQ(coda_gemm_residual_rmsnorm_partial(&ta, &tw, nullptr, &tn, &tx, &th, &tp, 1.0f, nullptr),
            CODA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(coda_last_error()).find("argument 'h_out'"), std::string::npos) << coda_last_error();
  fetch(x), fetch(h), fetch(p), fetch(o), fetch(dwp);
  for (int64_t j = 0; j < n; ++j) ASSERT_TRUE(std::isnan(dwp.host.get(0, j))) << "a rejected call wrote dw_partials";
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      ASSERT_TRUE(std::isnan(x.host.get(i, j)) && std::isnan(h.host.get(i, j))) << "a rejected call wrote an output";
      if (j < n / 2) {
        ASSERT_TRUE(std::isnan(o.host.get(i, j)));
      }
      if (j < 2) {
        ASSERT_TRUE(std::isnan(p.host.get(i, j)));
      }
    }
}

// ---- fp16 inputs and outputs; fp32 outputs ----------------------------------------------------------------

// The same operators with fp16 operands and outputs (their own kernels), against float64 under the
// rule with an fp16-storage yardstick; fp32 outputs where they fit the staging, a clear refusal
// (nothing written) where they do not.
TEST_F(GpuOps, Fp16AndFp32Outputs) {
  std::mt19937_64 g(test::seed());
  const DType h16 = DType::kFP16;
  auto round16 = [](Mat m) { return to_mat(from_mat(m, DType::kFP16)); };
  const int64_t m = 333, n = 520, k = 200;
  const std::vector<int64_t> all = [&] {
    std::vector<int64_t> r(static_cast<size_t>(m));
    for (int64_t i = 0; i < m; ++i) r[static_cast<size_t>(i)] = i;
    return r;
  }();
  Dual a = random_dual(g(), h16, m, k, 1.0f), w = random_dual(g(), h16, n, k, 0.1f);
  Dual res = random_dual(g(), h16, m, n, 1.0f);
  const Vec gw(static_cast<size_t>(n), 1.0);
  Dual norm = vec_dual(gw, h16);
  Dual x = out_dual(h16, m, n), h = out_dual(h16, m, n), p = partial_dual(m, ceil_div(n, CODA_PARTIAL_COLS));
  CODA_ASSERT_OK(gemm_residual_rmsnorm_partial({a.view(), w.view(), res.view(), norm.view(), x.view(), h.view(), p.view()}));
  fetch(x), fetch(h), fetch(p);
  EXPECT_TRUE(x.host.fully_written() && h.host.fully_written() && p.host.fully_written());
  const Mat acc = sampled_matmul(a.host, all, w.host), r0 = rows_of(res.host, all);
  const Mat x64 = ref::add(acc, r0), xu = round16(ref::add(round16(acc), r0));
  EXPECT_TRUE(within_rule("x fp16", ref::rel_error(to_mat(x.host), x64), ref::rel_error(xu, x64)));

  // SwiGLU with fp32 outputs: z (64 x 64 x 4 B) + o (64 x 32 x 4 B) = 24 KiB does not fit: refused.
  Dual z32 = out_dual(kFP32, m, n), o32 = out_dual(kFP32, m, n / 2);
  const Status s = gemm_swiglu({a.view(), w.view(), {}, z32.view(), o32.view()});
  EXPECT_EQ(s.code(), CODA_ERROR_NOT_SUPPORTED) << s.message();
  EXPECT_NE(s.message().find("fp32 tile outputs"), std::string::npos) << s.message();
  // Without z, the fp32 o alone fits.
  CODA_ASSERT_OK(gemm_swiglu({a.view(), w.view(), {}, {}, o32.view()}));
  fetch(z32), fetch(o32);
  EXPECT_TRUE(o32.host.fully_written());
  EXPECT_FALSE(z32.host.fully_written());
  const Mat o64 = ref::swiglu(acc);
  EXPECT_TRUE(within_rule("o fp32", ref::rel_error(to_mat(o32.host), o64), ref::rel_error(ref::swiglu(round16(acc)), o64)));
}

// ---- the C ABI gives the C++ entry points' results, bit for bit ----------------------------------------

TEST_F(GpuOps, CAbiMatchesCpp) {
  std::mt19937_64 g(test::seed());
  const int64_t m = 70, k = 72, f = 136;
  Dual a = random_dual(g(), kBF16, m, k, 1.0f), w = random_dual(g(), kBF16, 2 * f, k, 0.2f);
  Dual r = vec_dual(Vec(static_cast<size_t>(m), 0.75), kFP32);
  Dual z1 = out_dual(kBF16, m, 2 * f), o1 = out_dual(kBF16, m, f), z2 = out_dual(kBF16, m, 2 * f), o2 = out_dual(kBF16, m, f);
  CODA_ASSERT_OK(gemm_rmsnorm_swiglu({a.view(), w.view(), r.view(), z1.view(), o1.view()}));
  coda_tensor_t ta = a.view().desc, tw = w.view().desc, tr = r.view().desc, tz = z2.view().desc, to = o2.view().desc;
  ASSERT_EQ(coda_gemm_rmsnorm_swiglu(&ta, &tw, &tr, &tz, &to, nullptr), CODA_SUCCESS) << coda_last_error();
  fetch(z1), fetch(o1), fetch(z2), fetch(o2);
  EXPECT_EQ(std::memcmp(z1.host.data(), z2.host.data(), z1.host.bytes()), 0);
  EXPECT_EQ(std::memcmp(o1.host.data(), o2.host.data(), o1.host.bytes()), 0);

  // Frequencies through C equal the C++ helper's.
  std::vector<float> fc(32);
  ASSERT_EQ(coda_rope_frequencies(fc.data(), 64, 500000.0, 8.0, 1.0, 4.0, 8192.0), CODA_SUCCESS);
  const std::vector<float> fcpp = rope_frequencies(64, 500000.0, RopeScaling{8.0, 1.0, 4.0, 8192.0});
  EXPECT_EQ(fc, fcpp);
  EXPECT_EQ(coda_rope_frequencies(fc.data(), 63, 500000.0, 0, 1, 4, 8192), CODA_ERROR_INVALID_ARGUMENT);

  // The logits-free loss through C, and its workspace rule.
  std::vector<int32_t> t(static_cast<size_t>(m), 5);
  HostTensor tt = from_ints(t);
  dev::DeviceTensor dt = dev::upload(tt);
  Dual loss1 = out_dual(kFP32, 1, 0), loss2 = out_dual(kFP32, 1, 0);
  const size_t wsb = coda_lm_head_loss_workspace_bytes(m, 2 * f);
  EXPECT_EQ(wsb, lm_head_loss_workspace_bytes(m, 2 * f));
  dev::Buffer ws(wsb);
  LmHeadLossArgs la;
  la.a = a.view();
  la.b = w.view();
  la.targets = dt.view;
  la.loss_out = loss1.view();
  la.workspace = ws.get();
  la.workspace_bytes = ws.bytes();
  CODA_ASSERT_OK(lm_head_loss(la));
  coda_tensor_t tl = loss2.view().desc, tg = dt.view.desc;
  ASSERT_EQ(coda_lm_head_loss(&ta, &tw, nullptr, &tg, CODA_IGNORE_INDEX, CODA_REDUCTION_MEAN, &tl, nullptr, nullptr,
                              ws.get(), ws.bytes(), nullptr),
            CODA_SUCCESS)
      << coda_last_error();
  EXPECT_EQ(coda_lm_head_loss(&ta, &tw, nullptr, &tg, CODA_IGNORE_INDEX, CODA_REDUCTION_MEAN, &tl, nullptr, nullptr,
                              ws.get(), ws.bytes() - 4, nullptr),
            CODA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(coda_last_error()).find("argument 'workspace'"), std::string::npos) << coda_last_error();
  fetch(loss1), fetch(loss2);
  EXPECT_EQ(loss1.host.get(0), loss2.host.get(0));
  EXPECT_TRUE(std::isfinite(loss1.host.get(0)));
}

// ---- the C ABI runs a call where its tensors live ------------------------------------------------------

// Device tensors: the GPU; host tensors (pageable or pinned): the emulator, bit for bit; a mix:
// INVALID_ARGUMENT naming the argument, nothing written.
TEST_F(GpuOps, CAbiRunsWhereTheTensorsLive) {
  std::mt19937_64 g(test::seed());
  const int64_t m = 70, k = 72, f = 136;
  Dual a = random_dual(g(), kBF16, m, k, 1.0f), w = random_dual(g(), kBF16, 2 * f, k, 0.2f);
  Dual o = out_dual(kBF16, m, f);
  const coda_tensor_t ta = a.view().desc, tw = w.view().desc, to = o.view().desc;
  // Host a (pageable) with device w and o.
  coda_tensor_t ha = a.host.view().desc;
  EXPECT_EQ(coda_gemm_swiglu(&ha, &tw, nullptr, nullptr, &to, nullptr), CODA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(coda_last_error())
                .find("gemm_swiglu: argument 'b' points to device memory but argument 'a' to host memory"),
            std::string::npos)
      << coda_last_error();
  // Device a and w, host o.
  HostTensor ho = output(kBF16, m, f);
  const coda_tensor_t tho = ho.view().desc;
  EXPECT_EQ(coda_gemm_swiglu(&ta, &tw, nullptr, nullptr, &tho, nullptr), CODA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(coda_last_error()).find("argument 'o_out' points to host memory but argument 'a' to device"),
            std::string::npos)
      << coda_last_error();
  EXPECT_FALSE(ho.fully_written());
  fetch(o);
  EXPECT_FALSE(o.host.fully_written());

  // All host, pinned memory included: the emulator's bits; all device: the GPU.
  void* pinned = nullptr;
  dev::check(cudaMallocHost(&pinned, o.host.bytes()), "cudaMallocHost");
  coda_tensor_t tpin = o.host.view().desc;
  tpin.data = pinned;
  const coda_tensor_t hw = w.host.view().desc;
  ASSERT_EQ(coda_gemm_swiglu(&ha, &hw, nullptr, nullptr, &tpin, nullptr), CODA_SUCCESS) << coda_last_error();
  HostTensor want = output(kBF16, m, f);
  CODA_ASSERT_OK(emu::gemm_swiglu({a.host.view(), w.host.view(), {}, {}, want.view()}));
  EXPECT_EQ(std::memcmp(pinned, want.data(), want.bytes()), 0);
  cudaFreeHost(pinned);
  ASSERT_EQ(coda_gemm_swiglu(&ta, &tw, nullptr, nullptr, &to, nullptr), CODA_SUCCESS) << coda_last_error();
  fetch(o);
  EXPECT_TRUE(o.host.fully_written());
  const Mat o64 = ref::swiglu(ref::matmul_nt(to_mat(a.host), to_mat(w.host)));
  EXPECT_LT(ref::rel_error(to_mat(o.host), o64), 2e-2);
}

// ---- weight-layout helpers -------------------------------------------------------------------------------

TEST_F(GpuOps, WeightLayoutHelpers) {
  std::mt19937_64 g(test::seed());
  const int64_t f = 40, k = 24;
  Dual gate = random_dual(g(), kBF16, f, k, 1.0f), up = random_dual(g(), kBF16, f, k, 1.0f);
  Dual gu = out_dual(kBF16, 2 * f, k);
  CODA_ASSERT_OK(interleave_gate_up(gate.view(), up.view(), gu.view()));
  fetch(gu);
  for (int64_t r = 0; r < 2 * f; ++r)
    for (int64_t c = 0; c < k; ++c)
      ASSERT_EQ(gu.host.get(r, c), (r % 2 ? up : gate).host.get(r / 2, c)) << r << "," << c;

  // Rotate-half (HF) pairs (i, i + hd/2) -> interleaved (2i, 2i + 1); then the rotation of pair i
  // is the same: gemm_rope on the permuted weight == HF rotate-half RoPE on the original.
  const HeadDims heads{2, 1, 8};
  const int64_t n3 = heads.qkv_cols();
  Dual w = random_dual(g(), kBF16, n3, k, 1.0f), wp = out_dual(kBF16, n3, k);
  CODA_ASSERT_OK(permute_rotate_half_to_interleaved(w.view(), heads, wp.view()));
  fetch(wp);
  for (int64_t r = 0; r < n3; ++r) {
    int64_t src = r;
    if (r < heads.rope_cols()) {
      const int64_t head = r / 8, j = r % 8;
      src = head * 8 + (j % 2 ? 4 + j / 2 : j / 2);
    }
    for (int64_t c = 0; c < k; ++c) ASSERT_EQ(wp.host.get(r, c), w.host.get(src, c)) << r;
  }
  EXPECT_EQ(interleave_gate_up(gate.view(), up.view(), out_dual(kBF16, 2 * f + 1, k).view()).code(),
            CODA_ERROR_INVALID_ARGUMENT);
}

// ---- a small run of every fused kernel, for compute-sanitizer (memcheck, racecheck) -------------------

TEST_F(GpuOps, SanitizerSubsetFused) {
  std::mt19937_64 g(test::seed());
  const int64_t m = 130, n = 520, k = 72;
  Dual a = random_dual(g(), kBF16, m, k, 1.0f), w = random_dual(g(), kBF16, n, k, 0.2f);
  Dual res = random_dual(g(), kBF16, m, n, 1.0f), norm = vec_dual(Vec(static_cast<size_t>(n), 1.0), kBF16);
  Dual x = out_dual(kBF16, m, n), h = out_dual(kBF16, m, n), p = partial_dual(m, ceil_div(n, CODA_PARTIAL_COLS));
  Dual r = out_dual(kFP32, m, 0);
  CODA_ASSERT_OK(gemm_residual_rmsnorm_partial({a.view(), w.view(), res.view(), norm.view(), x.view(), h.view(), p.view()}));
  CODA_ASSERT_OK(rms_finish({p.view(), r.view(), n, 1e-5f}));
  Dual z = out_dual(kBF16, m, n), o = out_dual(kBF16, m, n / 2);
  CODA_ASSERT_OK(gemm_rmsnorm_swiglu({a.view(), w.view(), r.view(), z.view(), o.view()}));
  const HeadDims heads{2, 1, 64};
  Dual wq = random_dual(g(), kBF16, heads.qkv_cols(), k, 0.2f), q = out_dual(kBF16, m, heads.qkv_cols());
  std::vector<int32_t> pos(static_cast<size_t>(m), 7);
  HostTensor tp = from_ints(pos);
  dev::DeviceTensor dp = dev::upload(tp);
  const std::vector<float> fr = rope_frequencies(64, 10000.0);
  Dual freqs = vec_dual(Vec(fr.begin(), fr.end()), kFP32);
  CODA_ASSERT_OK(gemm_rope({a.view(), wq.view(), r.view(), dp.view, freqs.view(), heads, q.view()}));
  Dual ss = partial_dual(m, 3);
  CODA_ASSERT_OK(gemm_qkv_sqsum({a.view(), wq.view(), {}, heads, q.view(), ss.view()}));
  CODA_ASSERT_OK(qknorm_rope({q.view(), ss.view(), norm.view().row_slice(0, 64), norm.view().row_slice(0, 64), dp.view,
                              freqs.view(), heads, 1e-6f, q.view()}));
  std::vector<int32_t> t(static_cast<size_t>(m), 3);
  t[5] = CODA_IGNORE_INDEX;
  HostTensor tt = from_ints(t);
  dev::DeviceTensor dt = dev::upload(tt);
  Dual logits = out_dual(kBF16, m, n), lp = partial_dual(m, ceil_div(n, CODA_PARTIAL_COLS));
  Dual tl = out_dual(kFP32, m, 0), lse = out_dual(kFP32, m, 0), loss = out_dual(kFP32, 1, 0);
  CODA_ASSERT_OK(gemm_lse({a.view(), w.view(), {}, dt.view, CODA_IGNORE_INDEX, logits.view(), lp.view(), tl.view()}));
  CODA_ASSERT_OK(lse_finish({lp.view(), lse.view()}));
  CrossEntropyArgs ce;
  ce.lse = lse.view();
  ce.target_logit = tl.view();
  ce.targets = dt.view;
  ce.loss_out = loss.view();
  ce.logits = logits.view();
  ce.dlogits_out = logits.view();
  CODA_ASSERT_OK(cross_entropy(ce));
  for (Dual* d : {&x, &h, &p, &r, &z, &o, &q, &ss, &logits, &lp, &tl, &lse, &loss}) {
    fetch(*d);
    EXPECT_TRUE(d->host.fully_written());
  }
}

// ---- the block forward: fused schedule and unfused path, against the float64 block --------------------

// The backward operators under compute-sanitizer (memcheck, racecheck): ragged M and N, every
// optional output given, dx accumulated in place over dres.
TEST_F(GpuOps, SanitizerSubsetBackward) {
  std::mt19937_64 g(test::seed());
  const int64_t m = 130, n = 520, k = 72, f = n / 2;
  Dual dz = random_dual(g(), kBF16, m, k, 1.0f), wt = random_dual(g(), kBF16, k, n, 0.2f);
  Dual x = random_dual(g(), kBF16, m, n, 1.0f), dres = random_dual(g(), kBF16, m, n, 1.0f);
  Dual norm = vec_dual(Vec(static_cast<size_t>(n), 1.0), kBF16);
  Dual rstd = vec_dual(Vec(static_cast<size_t>(m), 0.9), kFP32), zdz = vec_dual(Vec(static_cast<size_t>(m), 0.1), kFP32);
  Dual y = out_dual(kBF16, m, n), q = partial_dual(ceil_div(m, CODA_PARTIAL_ROWS), n), dw = out_dual(kFP32, n, 0);
  CODA_ASSERT_OK(gemm_rmsnorm_backward({dz.view(), wt.view().transposed(), x.view(), rstd.view(), zdz.view(), norm.view(),
                                        dres.view(), dres.view(), y.view(), q.view()}));
  CODA_ASSERT_OK(col_sum_finish({q.view(), dw.view()}));
  Dual wd = random_dual(g(), kBF16, k, f, 0.2f);
  Dual dzs = out_dual(kBF16, m, n), o = out_dual(kBF16, m, f), zp = partial_dual(m, ceil_div(f, CODA_PARTIAL_COLS));
  Dual zz = out_dual(kFP32, m, 0);
  CODA_ASSERT_OK(gemm_swiglu_backward({dz.view(), wd.view().transposed(), x.view(), dzs.view(), o.view(), zp.view()}));
  CODA_ASSERT_OK(row_sum_finish({zp.view(), zz.view(), 0.5f}));
  const HeadDims heads{2, 1, 64};
  Dual qkv = random_dual(g(), kBF16, m, heads.qkv_cols(), 1.0f), dqkv = random_dual(g(), kBF16, m, heads.qkv_cols(), 1.0f);
  std::vector<int32_t> pos(static_cast<size_t>(m), 7);
  HostTensor tp = from_ints(pos);
  dev::DeviceTensor dp = dev::upload(tp);
  const std::vector<float> fr = rope_frequencies(64, 10000.0);
  Dual freqs = vec_dual(Vec(fr.begin(), fr.end()), kFP32);
  Dual drot = out_dual(kBF16, m, heads.qkv_cols()), rz = out_dual(kFP32, m, 0);
  CODA_ASSERT_OK(rope_backward({qkv.view(), dqkv.view(), dp.view, freqs.view(), heads, drot.view(), rz.view(), 1.0f}));
  Dual dqk = out_dual(kBF16, m, heads.qkv_cols()), gq = partial_dual(ceil_div(m, CODA_PARTIAL_ROWS), 64);
  Dual gk = partial_dual(ceil_div(m, CODA_PARTIAL_ROWS), 64), qz = out_dual(kFP32, m, 0);
  QkNormRopeBackwardArgs qa;
  qa.qkv = qkv.view();
  qa.gamma_q = norm.view().row_slice(0, 64);
  qa.gamma_k = norm.view().row_slice(0, 64);
  qa.positions = dp.view;
  qa.freqs = freqs.view();
  qa.heads = heads;
  qa.dout = dqkv.view();
  qa.dqkv_out = dqk.view();
  qa.dgamma_q_partials = gq.view();
  qa.dgamma_k_partials = gk.view();
  qa.zdz_out = qz.view();
  CODA_ASSERT_OK(qknorm_rope_backward(qa));
  for (Dual* d : {&dres, &y, &q, &dw, &dzs, &o, &zp, &zz, &drot, &rz, &dqk, &gq, &gk, &qz}) {
    fetch(*d);
    EXPECT_TRUE(d->host.fully_written());
  }
}

// The block checks' shapes: the check's awkward default, one token, and a wider block (the LLaMA
// 1B / 8B shapes run in the benchmarks).
std::vector<Llama3Dims> block_test_dims() {
  Llama3Dims tiny;
  tiny.tokens = 1;
  tiny.hidden = 64;
  tiny.ffn = 96;
  tiny.heads = HeadDims{2, 1, 32};
  Llama3Dims wide = default_check_dims();
  wide.tokens = 300;
  wide.hidden = 512;
  wide.ffn = 1408;
  wide.heads = HeadDims{8, 2, 64};
  return {default_check_dims(), tiny, wide};
}

TEST_F(GpuOps, BlockForwardFusedAndUnfused) {
  for (const Llama3Dims& d : block_test_dims())
    for (bool unfused : {false, true}) {
      const uint64_t seed = test::seed();
      SCOPED_TRACE(std::string(unfused ? "unfused" : "fused") + " M " + std::to_string(d.tokens) + " d " +
                   std::to_string(d.hidden) + " seed " + std::to_string(seed));
      // One token is a single sample of rounding noise: the rule gets a floor there (as in the
      // emulator's single-row cases).
      const BlockCheckResult r = check_llama3_block_gpu(d, seed, unfused, d.tokens == 1 ? 1e-2 : 1e-4);
      ASSERT_TRUE(r.error.empty()) << r.error;
      ASSERT_EQ(r.rows.size(), 6u);
      for (const ErrorRow& row : r.rows) {
        EXPECT_TRUE(row.ok) << row.op << " -> " << row.output << ": " << row.fused << " > " << row.bound;
      }
    }
}

// Forward + backward on the GPU against the float64 block, every output and gradient under
// design.md's rule, with y1 recomputed by the backward and kept by the forward.
void expect_block_forward_backward(bool unfused) {
  for (const Llama3Dims& d : block_test_dims())
    for (bool keep_y1 : {false, true}) {
      const uint64_t seed = test::seed();
      SCOPED_TRACE("M " + std::to_string(d.tokens) + " d " + std::to_string(d.hidden) + " keep_y1 " +
                   std::to_string(keep_y1) + " seed " + std::to_string(seed));
      const BlockCheckResult r = check_llama3_block_gpu(d, seed, unfused, d.tokens == 1 ? 1e-2 : 1e-4, true, keep_y1);
      ASSERT_TRUE(r.error.empty()) << r.error;
      ASSERT_EQ(r.rows.size(), keep_y1 ? 15u : 14u);
      for (const ErrorRow& row : r.rows) {
        EXPECT_TRUE(row.ok) << row.op << " -> " << row.output << ": " << row.fused << " > " << row.bound;
      }
    }
}

// The fused schedule (issue 9 item 3).
TEST_F(GpuOps, BlockForwardBackwardFused) { expect_block_forward_backward(false); }

// The unfused path (cuBLAS GEMMs + unfused:: kernels): the cross-check and baseline of the fused
// backward (issue 9).
TEST_F(GpuOps, BlockForwardBackwardUnfused) { expect_block_forward_backward(true); }

// The unfused RMSNorm behind `x unfused` and the unfused block (a block per row, V vectors per
// thread; rows whose vector count is not a multiple of the block's threads), against float64 from
// the stored inputs; outputs poisoned and checked fully written.
TEST_F(GpuOps, UnfusedRmsNormAgainstFloat64) {
  const uint64_t seed = test::seed();
  std::mt19937_64 g(seed);
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{13, 264}, {37, 2048}, {5, 4096}, {3, 2056}, {1, 8}};
  for (const auto& [rows, cols] : shapes) {
    SCOPED_TRACE("rows " + std::to_string(rows) + " cols " + std::to_string(cols) + " seed " + std::to_string(seed));
    Dual x = random_dual(g(), DType::kBF16, rows, cols, 2.0f);
    Vec wv(static_cast<size_t>(cols));
    for (double& v : wv) v = 0.5 + static_cast<double>(g() % 1024) / 1024.0;
    Dual w = vec_dual(wv, DType::kBF16);
    Dual o = out_dual(DType::kBF16, rows, cols), r = out_dual(DType::kFP32, rows, 0);
    ASSERT_TRUE(unfused::rmsnorm(x.view(), w.view(), 1e-5f, o.view(), r.view()).ok());
    fetch(o);
    fetch(r);
    ASSERT_TRUE(o.host.fully_written() && r.host.fully_written());
    Mat o64(rows, cols), ov(rows, cols), r64(rows, 1), rv(rows, 1);
    for (int64_t i = 0; i < rows; ++i) {
      double ss = 0;
      for (int64_t j = 0; j < cols; ++j) ss += double(x.host.get(i, j)) * x.host.get(i, j);
      r64(i, 0) = 1.0 / std::sqrt(ss / static_cast<double>(cols) + 1e-5);
      rv(i, 0) = r.host.get(i);
      for (int64_t j = 0; j < cols; ++j) {
        o64(i, j) = x.host.get(i, j) * r64(i, 0) * w.host.get(j);
        ov(i, j) = o.host.get(i, j);
      }
    }
    EXPECT_LT(ref::rel_error(rv, r64), 1e-5);
    EXPECT_LT(ref::rel_error(ov, o64), 4e-3);  // one bf16 rounding (2^-9 relative at most)
  }
}

}  // namespace
}  // namespace coda
