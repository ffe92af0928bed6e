// Every emulated operator against the float64 reference, under design.md's tolerance rule:
// the fused result's relative Frobenius error must be at most 2x that of the unfused bf16 pipeline
// (the same math with a bf16 rounding at every tensor an unfused graph stores) plus 1e-4.
// Fresh random inputs, poisoned outputs checked fully written, awkward shapes, several tile grains.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "coda/host.hpp"
#include "coda/ops.hpp"
#include "coda/ref/emulator.hpp"
#include "util.hpp"

namespace coda {
namespace {

using ref::Mat;
using ref::Vec;
using test::output;
using test::random_tensor;
using test::rounded;
using test::within_rule;

constexpr DType kBF16 = DType::kBF16;
constexpr DType kFP32 = DType::kFP32;

// Shapes: (M, N, K), tiny, non-multiples of 64/128 and a multi-tile one.
struct Shape {
  int64_t m, n, k;
};
const std::vector<Shape> kShapes = {{1, 8, 8}, {7, 72, 24}, {129, 40, 72}, {33, 264, 16}};
const std::vector<emu::EmuConfig> kGrains = {{128, 256}, {16, 32}, {3, 8}};

Mat row_scale(Mat m, const Vec& r) {
  for (int64_t i = 0; i < m.rows; ++i)
    for (int64_t j = 0; j < m.cols; ++j) m(i, j) *= r[static_cast<size_t>(i)];
  return m;
}
Mat col_scale(Mat m, const Vec& w) {
  for (int64_t i = 0; i < m.rows; ++i)
    for (int64_t j = 0; j < m.cols; ++j) m(i, j) *= w[static_cast<size_t>(j)];
  return m;
}
Vec positive_vec(test::Rng& rng, int64_t n) {
  Vec v(static_cast<size_t>(n));
  for (double& x : v) x = static_cast<double>(static_cast<float>(rng.uniform(0.5, 1.5)));
  return v;
}
// Values stored in bf16 (as a reference vector of the stored values).
Vec bf16_vec(test::Rng& rng, int64_t n, double mean, double sd) {
  Vec v = rng.vec(n, mean, sd);
  for (double& x : v) x = round_bf16(static_cast<float>(x));
  return v;
}
Vec sum_cols_per_grain(const Mat& x, int64_t grain, int64_t parts, bool squares) {
  Vec p(static_cast<size_t>(x.rows * parts), 0.0);
  for (int64_t i = 0; i < x.rows; ++i)
    for (int64_t j = 0; j < x.cols; ++j) p[static_cast<size_t>(i * parts + j / grain)] += squares ? x(i, j) * x(i, j) : x(i, j);
  return p;
}
std::vector<int32_t> random_positions(test::Rng& rng, int64_t m) {
  std::vector<int32_t> p(static_cast<size_t>(m));
  for (auto& x : p) x = static_cast<int32_t>(rng.integer(0, 131071));
  if (m > 1) p[1] = 131071;
  p[0] = 0;
  return p;
}
HostTensor freq_tensor(int64_t hd, Vec* as_double) {
  const std::vector<float> f = rope_frequencies(hd, 500000.0, RopeScaling{8.0, 1.0, 4.0, 8192.0});
  Vec v(f.begin(), f.end());
  *as_double = v;
  return from_vec(v, kFP32);
}

TEST(Emulator, GemmAllFormsAndDtypes) {
  CODA_SEEDED_RNG(rng);
  for (const Shape& s : kShapes)
    for (DType out : {DType::kBF16, DType::kFP16, DType::kFP32})
      for (int form = 0; form < 3; ++form) {
        SCOPED_TRACE("M " + std::to_string(s.m) + " N " + std::to_string(s.n) + " K " + std::to_string(s.k) +
                     " out " + dtype_name(out) + " form " + std::to_string(form));
        Mat a, b, c;
        // form 0: a [M,K], b [N,K]; 1 (dgrad): b stored [K,N]; 2 (wgrad): a stored [K,M], b stored [K,N]
        const int64_t lda = (s.m + 7) / 8 * 8, ldb = (s.n + 7) / 8 * 8;
        HostTensor ta = form == 2 ? random_tensor(rng, kBF16, s.k, s.m, 1.0, &a, lda)
                                  : random_tensor(rng, kBF16, s.m, s.k, 1.0, &a);
        HostTensor tb = form == 0 ? random_tensor(rng, kBF16, s.n, s.k, 1.0, &b)
                                  : random_tensor(rng, kBF16, s.k, s.n, 1.0, &b, ldb);
        const TensorView av = form == 2 ? ta.view().transposed() : ta.view();
        const TensorView bv = form == 0 ? tb.view() : tb.view().transposed();
        if (form == 2) a = ref::transpose(a);
        if (form != 0) b = ref::transpose(b);
        HostTensor tc = random_tensor(rng, kBF16, s.m, s.n, 1.0, &c);
        HostTensor d = output(out, s.m, s.n);
        GemmArgs args{av, bv, tc, d, 0.75f, -0.5f};
        CODA_ASSERT_OK(emu::gemm(args, kGrains[static_cast<size_t>(form)]));
        EXPECT_TRUE(d.fully_written());
        const Mat ab = ref::matmul_nt(a, b);
        const Mat want = ref::add(ref::scale(ab, 0.75), ref::scale(c, -0.5));
        Mat unfused = ref::add(rounded(ref::scale(rounded(ab), 0.75)), rounded(ref::scale(c, -0.5)));
        if (out != DType::kFP32) ref::round_bf16(unfused);
        EXPECT_TRUE(within_rule("D", ref::rel_error(to_mat(d), want), ref::rel_error(unfused, want)));
      }
}

TEST(Emulator, PlainGemmIsTheEmptyProgram) {
  CODA_SEEDED_RNG(rng);
  Mat a, b;
  HostTensor ta = random_tensor(rng, kBF16, 50, 24, 1.0, &a), tb = random_tensor(rng, kBF16, 30, 24, 1.0, &b);
  HostTensor d = output(kFP32, 50, 30);
  CODA_ASSERT_OK(emu::gemm({ta, tb, {}, d}));
  EXPECT_LT(ref::rel_error(to_mat(d), ref::matmul_nt(a, b)), 1e-6);
}

TEST(Emulator, ResidualRmsNormPartialAndFinish) {
  CODA_SEEDED_RNG(rng);
  for (const Shape& s : kShapes)
    for (const auto& cfg : kGrains) {
      SCOPED_TRACE("M " + std::to_string(s.m) + " N " + std::to_string(s.n) + " grain " + std::to_string(cfg.tile_n));
      Mat a, w, res;
      HostTensor ta = random_tensor(rng, kBF16, s.m, s.k, 1.0, &a), tw = random_tensor(rng, kBF16, s.n, s.k, 0.3, &w);
      HostTensor tres = random_tensor(rng, kBF16, s.m, s.n, 1.0, &res);
      const Vec g = bf16_vec(rng, s.n, 1.0, 0.2);
      HostTensor tg = from_vec(g, kBF16);
      const int64_t parts = ceil_div(s.n, cfg.tile_n);
      HostTensor x = output(kBF16, s.m, s.n), h = output(kBF16, s.m, s.n), p = test::partials(s.m, parts);
      HostTensor r = output(kFP32, s.m, 0);
      CODA_ASSERT_OK(emu::gemm_residual_rmsnorm_partial({ta, tw, tres, tg, x, h, p, 1.0f}, cfg));
      CODA_ASSERT_OK(emu::rms_finish({p, r, s.n, 1e-5f}));
      EXPECT_TRUE(x.fully_written() && h.fully_written() && p.fully_written() && r.fully_written());

      const Mat x64 = ref::add(ref::matmul_nt(a, w), res);
      const Mat xu = rounded(ref::add(rounded(ref::matmul_nt(a, w)), res));
      EXPECT_TRUE(within_rule("x", ref::rel_error(to_mat(x), x64), ref::rel_error(xu, x64)));
      const Mat h64 = col_scale(x64, g);
      EXPECT_TRUE(within_rule("h", ref::rel_error(to_mat(h), h64), ref::rel_error(rounded(col_scale(xu, g)), h64)));
      const Vec p64 = sum_cols_per_grain(x64, cfg.tile_n, parts, true);
      const Vec pu = sum_cols_per_grain(xu, cfg.tile_n, parts, true);
      EXPECT_TRUE(within_rule("partials", ref::rel_error(to_mat(p), [&] { Mat m(s.m, parts); m.v = p64; return m; }()),
                              ref::rel_error([&] { Mat m(s.m, parts); m.v = pu; return m; }(),
                                             [&] { Mat m(s.m, parts); m.v = p64; return m; }())));
      const Vec r64 = ref::rms_rstd(x64, 1e-5);
      EXPECT_TRUE(within_rule("rstd", ref::rel_error(to_mat(r), ref::from_vec(r64)),
                              ref::rel_error(ref::from_vec(ref::rms_rstd(xu, 1e-5)), ref::from_vec(r64))));
    }
}

TEST(Emulator, RmsNormBackward) {
  CODA_SEEDED_RNG(rng);
  for (const Shape& s : kShapes)
    for (const auto& cfg : kGrains) {
      SCOPED_TRACE("M " + std::to_string(s.m) + " N " + std::to_string(s.n) + " grain " + std::to_string(cfg.tile_m));
      // dy = dz W with W stored [K, N] (the consuming GEMM's weight), the dgrad form.
      Mat dz, wt, x, dres;
      HostTensor tdz = random_tensor(rng, kBF16, s.m, s.k, 1.0, &dz);
      HostTensor tw = random_tensor(rng, kBF16, s.k, s.n, 0.3, &wt);
      HostTensor tx = random_tensor(rng, kBF16, s.m, s.n, 1.0, &x);
      HostTensor tdres = random_tensor(rng, kBF16, s.m, s.n, 1.0, &dres);
      const Vec g = bf16_vec(rng, s.n, 1.0, 0.2);
      HostTensor tg = from_vec(g, kBF16);
      Vec r = ref::rms_rstd(x, 1e-5);
      for (double& v : r) v = static_cast<float>(v);
      Vec c = rng.vec(s.m, 0.0, 0.3);
      for (double& v : c) v = static_cast<float>(v);
      HostTensor tr = from_vec(r, kFP32), tc = from_vec(c, kFP32);
      const int64_t parts = ceil_div(s.m, cfg.tile_m);
      HostTensor dx = output(kBF16, s.m, s.n), y = output(kBF16, s.m, s.n), q = test::partials(parts, s.n);
      HostTensor dw = output(kFP32, s.n, 0);
      CODA_ASSERT_OK(emu::gemm_rmsnorm_backward({tdz, tw.view().transposed(), tx, tr, tc, tg, tdres, dx, y, q}, cfg));
      CODA_ASSERT_OK(emu::col_sum_finish({q, dw}));
      EXPECT_TRUE(dx.fully_written() && y.fully_written() && q.fully_written() && dw.fully_written());

      auto backward = [&](const Mat& dy, bool round) {
        Mat dxm(s.m, s.n), ym(s.m, s.n);
        Vec dwv(static_cast<size_t>(s.n), 0.0);
        for (int64_t i = 0; i < s.m; ++i)
          for (int64_t j = 0; j < s.n; ++j) {
            const double xh = x(i, j) * r[static_cast<size_t>(i)];
            double d = r[static_cast<size_t>(i)] * (dy(i, j) * g[static_cast<size_t>(j)] - xh * c[static_cast<size_t>(i)]);
            if (round) d = round_bf16(static_cast<float>(d));
            dxm(i, j) = d + dres(i, j);
            ym(i, j) = xh * g[static_cast<size_t>(j)];
            dwv[static_cast<size_t>(j)] += dy(i, j) * xh;
          }
        if (round) {
          ref::round_bf16(dxm);
          ref::round_bf16(ym);
        }
        return std::make_tuple(dxm, ym, dwv);
      };
      const Mat dy64 = ref::matmul_nt(dz, ref::transpose(wt));
      const auto [dx64, y64, dw64] = backward(dy64, false);
      const auto [dxu, yu, dwu] = backward(rounded(dy64), true);
      EXPECT_TRUE(within_rule("dx", ref::rel_error(to_mat(dx), dx64), ref::rel_error(dxu, dx64)));
      EXPECT_TRUE(within_rule("y", ref::rel_error(to_mat(y), y64), ref::rel_error(yu, y64)));
      EXPECT_TRUE(within_rule("dw", ref::rel_error(to_mat(dw), ref::from_vec(dw64)),
                              ref::rel_error(ref::from_vec(dwu), ref::from_vec(dw64))));
    }
}

TEST(Emulator, SwigluForwardWithAndWithoutRstd) {
  CODA_SEEDED_RNG(rng);
  for (const Shape& s : kShapes)
    for (bool with_rstd : {true, false}) {
      SCOPED_TRACE("M " + std::to_string(s.m) + " 2F " + std::to_string(s.n) + (with_rstd ? " rstd" : ""));
      Mat a, w;
      HostTensor ta = random_tensor(rng, kBF16, s.m, s.k, 1.0, &a), tw = random_tensor(rng, kBF16, s.n, s.k, 0.4, &w);
      const Vec r = with_rstd ? positive_vec(rng, s.m) : Vec(static_cast<size_t>(s.m), 1.0);
      HostTensor tr = from_vec(r, kFP32);
      HostTensor z = output(kBF16, s.m, s.n), o = output(kBF16, s.m, s.n / 2);
      SwigluArgs args{ta, tw, with_rstd ? tr.view() : TensorView(), z, o};
      CODA_ASSERT_OK(emu::gemm_swiglu(args, kGrains[static_cast<size_t>(s.m % 3)]));
      EXPECT_TRUE(z.fully_written() && o.fully_written());
      const Mat z64 = row_scale(ref::matmul_nt(a, w), r);
      const Mat zu = rounded(row_scale(rounded(ref::matmul_nt(a, w)), r));
      EXPECT_TRUE(within_rule("z", ref::rel_error(to_mat(z), z64), ref::rel_error(zu, z64)));
      const Mat o64 = ref::swiglu(z64);
      EXPECT_TRUE(within_rule("o", ref::rel_error(to_mat(o), o64), ref::rel_error(rounded(ref::swiglu(zu)), o64)));
    }
}

TEST(Emulator, SwigluBackward) {
  CODA_SEEDED_RNG(rng);
  for (const Shape& s : kShapes)
    for (const auto& cfg : kGrains) {
      const int64_t f = s.n;  // the GEMM's N is F
      SCOPED_TRACE("M " + std::to_string(s.m) + " F " + std::to_string(f) + " grain " + std::to_string(cfg.tile_n));
      Mat dy, wd, z;
      HostTensor tdy = random_tensor(rng, kBF16, s.m, s.k, 1.0, &dy);
      HostTensor twd = random_tensor(rng, kBF16, s.k, f, 0.3, &wd);  // Wdown [K = d, F]
      HostTensor tz = random_tensor(rng, kBF16, s.m, 2 * f, 1.5, &z);
      const int64_t parts = ceil_div(f, cfg.tile_n);
      HostTensor dz = output(kBF16, s.m, 2 * f), o = output(kBF16, s.m, f), p = test::partials(s.m, parts);
      HostTensor zdz = output(kFP32, s.m, 0);
      CODA_ASSERT_OK(emu::gemm_swiglu_backward({tdy, twd.view().transposed(), tz, dz, o, p}, cfg));
      CODA_ASSERT_OK(emu::row_sum_finish({p, zdz, 0.5f}));
      EXPECT_TRUE(dz.fully_written() && o.fully_written() && p.fully_written() && zdz.fully_written());
      const Mat do64 = ref::matmul_nn(dy, wd);
      const Mat dz64 = ref::swiglu_backward(z, do64);
      const Mat dzu = rounded(ref::swiglu_backward(z, rounded(do64)));
      EXPECT_TRUE(within_rule("dz", ref::rel_error(to_mat(dz), dz64), ref::rel_error(dzu, dz64)));
      const Mat o64 = ref::swiglu(z);
      EXPECT_TRUE(within_rule("o", ref::rel_error(to_mat(o), o64), ref::rel_error(rounded(o64), o64)));
      Mat zdz64(s.m, 1), zdzu(s.m, 1);
      for (int64_t i = 0; i < s.m; ++i)
        for (int64_t k = 0; k < 2 * f; ++k) {
          zdz64(i, 0) += 0.5 * z(i, k) * dz64(i, k);
          zdzu(i, 0) += 0.5 * z(i, k) * dzu(i, k);
        }
      EXPECT_TRUE(within_rule("zdz", ref::rel_error(to_mat(zdz), zdz64), ref::rel_error(zdzu, zdz64)));
    }
}

TEST(Emulator, RopeForwardUpTo128kPositions) {
  CODA_SEEDED_RNG(rng);
  const std::vector<HeadDims> heads = {{2, 1, 8}, {4, 2, 64}, {3, 1, 128}};
  for (const HeadDims& h : heads)
    for (bool with_rstd : {true, false}) {
      const int64_t m = rng.integer(1, 70), k = 8 * rng.integer(1, 9), n = h.qkv_cols();
      SCOPED_TRACE("M " + std::to_string(m) + " hd " + std::to_string(h.head_dim));
      Mat a, w;
      HostTensor ta = random_tensor(rng, kBF16, m, k, 1.0, &a), tw = random_tensor(rng, kBF16, n, k, 0.4, &w);
      const Vec r = with_rstd ? positive_vec(rng, m) : Vec(static_cast<size_t>(m), 1.0);
      HostTensor tr = from_vec(r, kFP32);
      const std::vector<int32_t> pos = random_positions(rng, m);
      HostTensor tp = from_ints(pos);
      Vec fd;
      HostTensor tf = freq_tensor(h.head_dim, &fd);
      HostTensor out = output(kBF16, m, n);
      CODA_ASSERT_OK(emu::gemm_rope({ta, tw, with_rstd ? tr.view() : TensorView(), tp, tf, h, out},
                                 kGrains[static_cast<size_t>(m % 3)]));
      EXPECT_TRUE(out.fully_written());
      const ref::Heads rh{h.heads_q, h.heads_kv, h.head_dim};
      const Mat want = ref::rope(row_scale(ref::matmul_nt(a, w), r), pos, fd, rh);
      const Mat unfused = rounded(ref::rope(rounded(row_scale(rounded(ref::matmul_nt(a, w)), r)), pos, fd, rh));
      EXPECT_TRUE(within_rule("qkv", ref::rel_error(to_mat(out), want), ref::rel_error(unfused, want)));
    }
}

TEST(Emulator, RopeBackward) {
  CODA_SEEDED_RNG(rng);
  const HeadDims h{4, 2, 32};
  const int64_t m = 45, n = h.qkv_cols();
  Mat q, dq;
  HostTensor tq = random_tensor(rng, kBF16, m, n, 1.0, &q), tdq = random_tensor(rng, kBF16, m, n, 1.0, &dq);
  const std::vector<int32_t> pos = random_positions(rng, m);
  HostTensor tp = from_ints(pos);
  Vec fd;
  HostTensor tf = freq_tensor(h.head_dim, &fd);
  HostTensor dz = output(kBF16, m, n), zdz = output(kFP32, m, 0);
  CODA_ASSERT_OK(emu::rope_backward({tq, tdq, tp, tf, h, dz, zdz, 0.25f}));
  EXPECT_TRUE(dz.fully_written() && zdz.fully_written());
  const ref::Heads rh{h.heads_q, h.heads_kv, h.head_dim};
  const Mat want = ref::rope_backward(dq, pos, fd, rh);
  EXPECT_TRUE(within_rule("dz", ref::rel_error(to_mat(dz), want), ref::rel_error(rounded(want), want)));
  Mat zdz64(m, 1);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) zdz64(i, 0) += 0.25 * q(i, j) * dq(i, j);
  EXPECT_LT(ref::rel_error(to_mat(zdz), zdz64), 1e-5);
}

TEST(Emulator, QkNormRopeForwardAndBackward) {
  CODA_SEEDED_RNG(rng);
  for (int64_t hd : {16, 64, 128})
    for (const auto& cfg : {emu::EmuConfig{128, 256}, emu::EmuConfig{16, 32}}) {
      const HeadDims h{4, 2, hd};
      const int64_t m = rng.integer(1, 40), k = 24, n = h.qkv_cols();
      SCOPED_TRACE("hd " + std::to_string(hd) + " grain " + std::to_string(cfg.tile_n) + " M " + std::to_string(m));
      Mat a, w;
      HostTensor ta = random_tensor(rng, kBF16, m, k, 1.0, &a), tw = random_tensor(rng, kBF16, n, k, 0.4, &w);
      const Vec r = positive_vec(rng, m);
      HostTensor tr = from_vec(r, kFP32);
      const int64_t segs = qk_segments(hd, cfg.tile_n);
      HostTensor pre = output(kBF16, m, n), ss = test::partials(m, 6 * segs), out = output(kBF16, m, n);
      CODA_ASSERT_OK(emu::gemm_qkv_sqsum({ta, tw, tr, h, pre, ss}, cfg));
      const Vec gq = bf16_vec(rng, hd, 1.0, 0.2), gk = bf16_vec(rng, hd, 1.0, 0.2);
      HostTensor tgq = from_vec(gq, kBF16), tgk = from_vec(gk, kBF16);
      const std::vector<int32_t> pos = random_positions(rng, m);
      HostTensor tp = from_ints(pos);
      Vec fd;
      HostTensor tf = freq_tensor(hd, &fd);
      CODA_ASSERT_OK(emu::qknorm_rope({pre, ss, tgq, tgk, tp, tf, h, 1e-6f, out}, cfg));
      EXPECT_TRUE(pre.fully_written() && ss.fully_written() && out.fully_written());
      const ref::Heads rh{h.heads_q, h.heads_kv, h.head_dim};
      const Mat pre64 = row_scale(ref::matmul_nt(a, w), r);
      const Mat preu = rounded(row_scale(rounded(ref::matmul_nt(a, w)), r));
      const Mat want = ref::qknorm_rope(pre64, gq, gk, pos, fd, rh, 1e-6);
      const Mat unfused = rounded(ref::qknorm_rope(preu, gq, gk, pos, fd, rh, 1e-6));
      EXPECT_TRUE(within_rule("out", ref::rel_error(to_mat(out), want), ref::rel_error(unfused, want)));

      // Backward from the stored pre-norm tensor.
      Mat dout;
      HostTensor tdout = random_tensor(rng, kBF16, m, n, 1.0, &dout);
      const int64_t parts = ceil_div(m, cfg.tile_m);
      HostTensor dqkv = output(kBF16, m, n), pq = test::partials(parts, hd), pk = test::partials(parts, hd);
      HostTensor zdz = output(kFP32, m, 0), dgq = output(kFP32, hd, 0), dgk = output(kFP32, hd, 0);
      CODA_ASSERT_OK(emu::qknorm_rope_backward({pre, tgq, tgk, tp, tf, h, 1e-6f, tdout, dqkv, pq, pk, zdz, 1.0f}, cfg));
      CODA_ASSERT_OK(emu::col_sum_finish({pq, dgq}));
      CODA_ASSERT_OK(emu::col_sum_finish({pk, dgk}));
      EXPECT_TRUE(dqkv.fully_written() && zdz.fully_written() && dgq.fully_written() && dgk.fully_written());
      const Mat pre_stored = to_mat(pre);
      const ref::QkNormGrad g = ref::qknorm_rope_backward(pre_stored, gq, gk, pos, fd, rh, 1e-6, dout);
      const ref::QkNormGrad gu = ref::qknorm_rope_backward(pre_stored, gq, gk, pos, fd, rh, 1e-6, dout);
      EXPECT_TRUE(within_rule("dqkv", ref::rel_error(to_mat(dqkv), g.dqkv), ref::rel_error(rounded(gu.dqkv), g.dqkv)));
      EXPECT_LT(ref::rel_error(to_mat(dgq), ref::from_vec(g.dgamma_q)), 1e-4);
      EXPECT_LT(ref::rel_error(to_mat(dgk), ref::from_vec(g.dgamma_k)), 1e-4);
      Mat zdz64(m, 1);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) zdz64(i, 0) += pre_stored(i, j) * g.dqkv(i, j);
      EXPECT_LT(ref::rel_error(to_mat(zdz), zdz64), 1e-4);
    }
}

struct LmCase {
  int64_t m, v;
  int ignored;  // 0: none, 1: some, 2: all
};

// The LM head as an unfused graph computes it: n = bf16(RMSNorm(x)) (here bf16(a * rstd)), logits =
// bf16(n W^T), then an fp32 cross-entropy over the bf16 logits. The 2x rule is statistical: it is
// applied to per-row tensors (a scalar loss is one sample of summed rounding noise, so it is checked
// for consistency with the per-row losses instead), and M = 1 gets a floor of 1e-2 (one row).
TEST(Emulator, LmHeadLossTrainingAndLogitsFree) {
  CODA_SEEDED_RNG(rng);
  for (const LmCase& lc : {LmCase{37, 517, 1}, LmCase{1, 1000, 0}, LmCase{20, 300, 2}, LmCase{64, 1024, 1}})
    for (Reduction red : {Reduction::kMean, Reduction::kSum}) {
      const int64_t m = lc.m, v = lc.v, k = 32;
      SCOPED_TRACE("M " + std::to_string(m) + " V " + std::to_string(v) + " ignored " + std::to_string(lc.ignored));
      const emu::EmuConfig cfg = kGrains[static_cast<size_t>(m % 3)];
      Mat a, w;
      HostTensor ta = random_tensor(rng, kBF16, m, k, 1.0, &a), tw = random_tensor(rng, kBF16, v, k, 0.5, &w);
      const Vec r = positive_vec(rng, m);
      HostTensor tr = from_vec(r, kFP32);
      std::vector<int32_t> t(static_cast<size_t>(m));
      for (auto& x : t) x = static_cast<int32_t>(rng.integer(0, v - 1));
      if (lc.ignored == 1)
        for (size_t i = 0; i < t.size(); i += 3) t[i] = CODA_IGNORE_INDEX;
      if (lc.ignored == 2) std::fill(t.begin(), t.end(), CODA_IGNORE_INDEX);
      HostTensor tt = from_ints(t);
      const int64_t parts = ceil_div(v, cfg.tile_n);
      const bool mean = red == Reduction::kMean;
      const Mat l64 = row_scale(ref::matmul_nt(a, w), r);
      const Mat lu = rounded(ref::matmul_nt(rounded(row_scale(a, r)), w));
      const ref::CrossEntropy want = ref::cross_entropy(l64, t, CODA_IGNORE_INDEX, mean);
      const ref::CrossEntropy unf = ref::cross_entropy(lu, t, CODA_IGNORE_INDEX, mean);
      auto check = [&](const char* what, double fused, double unfused) {
        EXPECT_TRUE(within_rule(what, fused, unfused, m == 1 ? 1e-2 : 1e-4));
      };
      for (bool training : {true, false}) {
        SCOPED_TRACE(training ? "training" : "logits-free");
        HostTensor logits = output(kBF16, m, v), lp = test::partials(m, parts), tl = output(kFP32, m, 0);
        HostTensor lse = output(kFP32, m, 0), loss = output(kFP32, 1, 0), rl = output(kFP32, m, 0);
        HostTensor zdz = output(kFP32, m, 0);
        LmHeadLseArgs la{ta, tw, tr, tt, CODA_IGNORE_INDEX, training ? logits.view() : TensorView(), lp, tl};
        CODA_ASSERT_OK(emu::gemm_lse(la, cfg));
        CODA_ASSERT_OK(emu::lse_finish({lp, lse}));
        CrossEntropyArgs ce;
        ce.lse = lse;
        ce.target_logit = tl;
        ce.targets = tt;
        ce.reduction = red;
        ce.loss_out = loss;
        ce.row_loss_out = rl;
        if (training) {
          ce.logits = logits;
          ce.dlogits_out = logits;  // in place
          ce.zdz_out = zdz;
          ce.zdz_scale = 1.0f / 32;
        }
        CODA_ASSERT_OK(emu::cross_entropy(ce));
        EXPECT_TRUE(lp.fully_written() && tl.fully_written() && lse.fully_written() && loss.fully_written() &&
                    rl.fully_written());
        double total = 0;
        for (int64_t i = 0; i < m; ++i) total += rl.get(i);
        const double expect_loss = mean ? (want.count ? total / static_cast<double>(want.count) : 0.0) : total;
        EXPECT_NEAR(loss.get(0), expect_loss, 1e-5 * std::fabs(expect_loss));
        if (lc.ignored == 2) {
          EXPECT_EQ(loss.get(0), 0.0f);
        }
        check("row loss", ref::rel_error(to_mat(rl), ref::from_vec(want.row_loss)),
              ref::rel_error(ref::from_vec(unf.row_loss), ref::from_vec(want.row_loss)));
        check("lse", ref::rel_error(to_mat(lse), ref::from_vec(want.lse)),
              ref::rel_error(ref::from_vec(unf.lse), ref::from_vec(want.lse)));
        if (!training) {
          EXPECT_FALSE(logits.fully_written());  // logits-free: the M x V tensor is never touched
          continue;
        }
        EXPECT_TRUE(logits.fully_written() && zdz.fully_written());
        if (lc.ignored == 2) {
          EXPECT_EQ(ref::frobenius(to_mat(logits)), 0.0);
          continue;
        }
        const Mat dlu = rounded(unf.dlogits);
        check("dlogits", ref::rel_error(to_mat(logits), want.dlogits), ref::rel_error(dlu, want.dlogits));
        Mat zdz64(m, 1), zdzu(m, 1);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < v; ++j) {
            zdz64(i, 0) += l64(i, j) * want.dlogits(i, j) / 32;
            zdzu(i, 0) += lu(i, j) * dlu(i, j) / 32;
          }
        // ZdZ = E_p[logit] - logit_t cancels within a row; one row is too noisy a sample for the rule.
        if (m > 1) check("zdz", ref::rel_error(to_mat(zdz), zdz64), ref::rel_error(zdzu, zdz64));
      }
    }
}

TEST(Emulator, NaNPropagatesLikeTheUnfusedGraph) {
  CODA_SEEDED_RNG(rng);
  Mat a, w;
  HostTensor ta = random_tensor(rng, kBF16, 9, 16, 1.0, &a), tw = random_tensor(rng, kBF16, 24, 16, 1.0, &w);
  ta.set(3, 5, NAN);
  HostTensor tg = from_vec(Vec(24, 1.0), kBF16);
  HostTensor x = output(kBF16, 9, 24), h = output(kBF16, 9, 24), p = test::partials(9, 1), r = output(kFP32, 9, 0);
  CODA_ASSERT_OK(emu::gemm_residual_rmsnorm_partial({ta, tw, {}, tg, x, h, p}));
  CODA_ASSERT_OK(emu::rms_finish({p, r, 24, 1e-5f}));
  for (int64_t i = 0; i < 9; ++i) {
    for (int64_t j = 0; j < 24; ++j) EXPECT_EQ(std::isnan(x.get(i, j)), i == 3);
    EXPECT_EQ(std::isnan(r.get(i)), i == 3);
  }
}

}  // namespace
}  // namespace coda
