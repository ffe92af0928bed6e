// The float64 reference: the algebraic identities the rewrites rest on, and finite-difference
// checks of every backward formula and of the whole block backward.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "coda/ref/reference.hpp"
#include "util.hpp"

namespace coda::ref {
namespace {

using test::Rng;

Mat axpy(const Mat& x, double h, const Mat& v) {
  Mat y = x;
  for (size_t i = 0; i < y.v.size(); ++i) y.v[i] += h * v.v[i];
  return y;
}

// Central difference of L along a random direction v, against the analytic derivative <grad, v>.
// The error is relative to the larger of |<grad, v>| and ||grad|| (the spread of <grad, v> over
// random v): relative to |<grad, v>| alone, a v nearly orthogonal to grad failed a correct gradient
// (35 of 20,000 runs of these tests, at up to 1.5e-5); so measured, no check of 20,000 runs
// exceeded 1e-7, while a gradient wrong by e still errs by about ||e|| / ||grad||.
::testing::AssertionResult directional(const char* what, const std::function<double(const Mat&)>& loss, const Mat& x,
                                       const Mat& grad, Rng& rng, double h = 1e-5) {
  Mat v = rng.mat(x.rows, x.cols);
  const double numeric = (loss(axpy(x, h, v)) - loss(axpy(x, -h, v))) / (2 * h);
  const double analytic = dot(grad, v);
  const double scale = std::max({1e-8, std::fabs(analytic), frobenius(grad)});
  const double err = std::fabs(numeric - analytic) / scale;
  if (err < 1e-6) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": numeric " << numeric << " vs analytic " << analytic
                                       << " (rel. error " << err << ")";
}

Vec vec_of(const Mat& m) { return m.v; }
Mat mat_of(const Vec& v) { return from_vec(v); }

TEST(Reference, RmsNormSplitIdentity) {
  // RMSNorm(x) W^T == diag(r) ((x * w) W^T)
  CODA_SEEDED_RNG(rng);
  const Mat x = rng.mat(7, 24), w = rng.mat(10, 24);
  const Vec g = rng.vec(24, 1.0, 0.2);
  const Mat lhs = matmul_nt(rmsnorm(x, g, 1e-5), w);
  Mat xw = x;
  for (int64_t i = 0; i < x.rows; ++i)
    for (int64_t j = 0; j < x.cols; ++j) xw(i, j) *= g[static_cast<size_t>(j)];
  Mat rhs = matmul_nt(xw, w);
  const Vec r = rms_rstd(x, 1e-5);
  for (int64_t i = 0; i < rhs.rows; ++i)
    for (int64_t j = 0; j < rhs.cols; ++j) rhs(i, j) *= r[static_cast<size_t>(i)];
  EXPECT_LT(rel_error(rhs, lhs), 1e-13);
}

TEST(Reference, ZdZEqualsRowDotOfZAndDz) {
  // c = (1/d) sum_j dy_j y_j equals (1/d) sum_k dz_k z_k when z = y W^T and dy = dz W.
  CODA_SEEDED_RNG(rng);
  const Mat y = rng.mat(5, 16), w = rng.mat(12, 16), dz = rng.mat(5, 12);
  const Mat z = matmul_nt(y, w), dy = matmul_nn(dz, w);
  for (int64_t i = 0; i < y.rows; ++i) {
    double a = 0, b = 0;
    for (int64_t j = 0; j < y.cols; ++j) a += dy(i, j) * y(i, j);
    for (int64_t k = 0; k < z.cols; ++k) b += dz(i, k) * z(i, k);
    EXPECT_NEAR(a, b, 1e-11 * (std::fabs(a) + 1));
  }
}

TEST(Reference, RmsNormBackwardThroughZdZ) {
  // The fused form dx = r (dy w - xh c) with c from (z, dz) equals the plain backward.
  CODA_SEEDED_RNG(rng);
  const Mat x = rng.mat(6, 20), w = rng.mat(9, 20), dz = rng.mat(6, 9);
  const Vec g = rng.vec(20, 1.0, 0.3);
  const Mat y = rmsnorm(x, g, 1e-5), z = matmul_nt(y, w), dy = matmul_nn(dz, w);
  const RmsNormGrad plain = rmsnorm_backward(x, g, 1e-5, dy);
  const Vec r = rms_rstd(x, 1e-5);
  Mat dx(x.rows, x.cols);
  for (int64_t i = 0; i < x.rows; ++i) {
    double c = 0;
    for (int64_t k = 0; k < z.cols; ++k) c += z(i, k) * dz(i, k);
    c /= static_cast<double>(x.cols);
    for (int64_t j = 0; j < x.cols; ++j) {
      const double xh = x(i, j) * r[static_cast<size_t>(i)];
      dx(i, j) = r[static_cast<size_t>(i)] * (dy(i, j) * g[static_cast<size_t>(j)] - xh * c);
    }
  }
  EXPECT_LT(rel_error(dx, plain.dx), 1e-12);
}

TEST(Reference, RotationKeepsDotProducts) {
  CODA_SEEDED_RNG(rng);
  const Heads h{3, 1, 8};
  const Mat a = rng.mat(9, h.cols()), b = rng.mat(9, h.cols());
  std::vector<int32_t> pos(9);
  for (auto& p : pos) p = static_cast<int32_t>(rng.integer(0, 131072));
  const Vec f = rope_frequencies(h.dim, 10000.0);
  const Mat ra = rope(a, pos, f, h), rb = rope(b, pos, f, h);
  for (int64_t i = 0; i < a.rows; ++i) {
    double x = 0, y = 0;
    for (int64_t j = 0; j < a.cols; ++j) {
      x += a(i, j) * b(i, j);
      y += ra(i, j) * rb(i, j);
    }
    EXPECT_NEAR(x, y, 1e-11 * (std::fabs(x) + 1));
  }
  // V columns are untouched; the inverse rotation undoes the forward one.
  for (int64_t i = 0; i < a.rows; ++i)
    for (int64_t j = h.rope_cols(); j < h.cols(); ++j) EXPECT_EQ(ra(i, j), a(i, j));
  EXPECT_LT(rel_error(rope(ra, pos, f, h, -1), a), 1e-13);
}

TEST(Reference, SwigluZdZIsRowDot) {
  // sum_i (g_i dg_i + u_i du_i) = sum_k z_k dz_k on the interleaved layout.
  CODA_SEEDED_RNG(rng);
  const Mat z = rng.mat(4, 14), dout = rng.mat(4, 7);
  const Mat dz = swiglu_backward(z, dout);
  for (int64_t i = 0; i < z.rows; ++i) {
    double a = 0;
    for (int64_t k = 0; k < z.cols; ++k) a += z(i, k) * dz(i, k);
    double b = 0;
    for (int64_t j = 0; j < dout.cols; ++j) b += z(i, 2 * j) * dz(i, 2 * j) + z(i, 2 * j + 1) * dz(i, 2 * j + 1);
    EXPECT_NEAR(a, b, 1e-12 * (std::fabs(a) + 1));
  }
}

TEST(Reference, RopeFrequencies) {
  const Vec f = rope_frequencies(64, 10000.0);
  ASSERT_EQ(f.size(), 32u);
  EXPECT_NEAR(f[0], 1.0 / (2 * M_PI), 1e-15);
  EXPECT_NEAR(f[1], std::pow(10000.0, -2.0 / 64) / (2 * M_PI), 1e-15);
  // Llama-3.1 scaling: high frequencies kept, low frequencies divided by the factor.
  const Vec s = rope_frequencies(128, 500000.0, 8.0, 1.0, 4.0, 8192.0);
  const Vec p = rope_frequencies(128, 500000.0);
  EXPECT_EQ(s[0], p[0]);
  EXPECT_NEAR(s[63], p[63] / 8.0, 1e-18);
  for (size_t i = 1; i < s.size(); ++i) EXPECT_LE(s[i], s[i - 1]);
}

// ---- finite differences of every backward formula --------------------------------------------

TEST(FiniteDifference, RmsNorm) {
  CODA_SEEDED_RNG(rng);
  const Mat x = rng.mat(5, 13), dy = rng.mat(5, 13);
  const Vec w = rng.vec(13, 1.0, 0.3);
  const RmsNormGrad g = rmsnorm_backward(x, w, 1e-5, dy);
  EXPECT_TRUE(directional("dx", [&](const Mat& xx) { return dot(rmsnorm(xx, w, 1e-5), dy); }, x, g.dx, rng));
  EXPECT_TRUE(directional("dw", [&](const Mat& ww) { return dot(rmsnorm(x, vec_of(ww), 1e-5), dy); }, mat_of(w),
                          mat_of(g.dw), rng));
}

TEST(FiniteDifference, Swiglu) {
  CODA_SEEDED_RNG(rng);
  const Mat z = rng.mat(4, 18, 2.0), dout = rng.mat(4, 9);
  EXPECT_TRUE(directional("dz", [&](const Mat& zz) { return dot(swiglu(zz), dout); }, z, swiglu_backward(z, dout), rng));
}

TEST(FiniteDifference, Rope) {
  CODA_SEEDED_RNG(rng);
  const Heads h{2, 1, 6};
  const Mat x = rng.mat(5, h.cols()), dy = rng.mat(5, h.cols());
  std::vector<int32_t> pos{0, 1, 77, 4096, 131071};
  const Vec f = rope_frequencies(h.dim, 10000.0);
  EXPECT_TRUE(directional("dx", [&](const Mat& xx) { return dot(rope(xx, pos, f, h), dy); }, x,
                          rope_backward(dy, pos, f, h), rng));
}

TEST(FiniteDifference, QkNormRope) {
  CODA_SEEDED_RNG(rng);
  const Heads h{2, 1, 8};
  const Mat x = rng.mat(4, h.cols()), dy = rng.mat(4, h.cols());
  const Vec gq = rng.vec(8, 1.0, 0.3), gk = rng.vec(8, 1.0, 0.3);
  std::vector<int32_t> pos{3, 9, 100, 5000};
  const Vec f = rope_frequencies(h.dim, 10000.0);
  const QkNormGrad g = qknorm_rope_backward(x, gq, gk, pos, f, h, 1e-6, dy);
  EXPECT_TRUE(directional("dqkv", [&](const Mat& xx) { return dot(qknorm_rope(xx, gq, gk, pos, f, h, 1e-6), dy); }, x,
                          g.dqkv, rng));
  EXPECT_TRUE(directional("dgamma_q",
                          [&](const Mat& gg) { return dot(qknorm_rope(x, vec_of(gg), gk, pos, f, h, 1e-6), dy); },
                          mat_of(gq), mat_of(g.dgamma_q), rng));
  EXPECT_TRUE(directional("dgamma_k",
                          [&](const Mat& gg) { return dot(qknorm_rope(x, gq, vec_of(gg), pos, f, h, 1e-6), dy); },
                          mat_of(gk), mat_of(g.dgamma_k), rng));
}

TEST(FiniteDifference, CrossEntropyMeanAndSum) {
  CODA_SEEDED_RNG(rng);
  const Mat logits = rng.mat(6, 11, 3.0);
  const std::vector<int32_t> t{3, -100, 0, 10, -100, 7};
  for (bool mean : {true, false}) {
    const CrossEntropy ce = cross_entropy(logits, t, -100, mean, 1.0);
    EXPECT_EQ(ce.count, 4);
    EXPECT_TRUE(directional(mean ? "mean" : "sum",
                            [&](const Mat& l) { return cross_entropy(l, t, -100, mean).loss; }, logits, ce.dlogits, rng));
    for (int64_t j = 0; j < logits.cols; ++j) EXPECT_EQ(ce.dlogits(1, j), 0.0);  // ignored row
  }
  // All rows ignored: loss 0, gradient 0 (not NaN).
  const CrossEntropy none = cross_entropy(logits, std::vector<int32_t>(6, -100), -100, true);
  EXPECT_EQ(none.loss, 0.0);
  EXPECT_EQ(frobenius(none.dlogits), 0.0);
}

TEST(FiniteDifference, LinearForms) {
  // forward Y = X W^T, dgrad dX = dY W, wgrad dW = dY^T X
  CODA_SEEDED_RNG(rng);
  const Mat x = rng.mat(5, 7), w = rng.mat(3, 7), dy = rng.mat(5, 3);
  EXPECT_TRUE(directional("dX", [&](const Mat& xx) { return dot(matmul_nt(xx, w), dy); }, x, matmul_nn(dy, w), rng));
  EXPECT_TRUE(directional("dW", [&](const Mat& ww) { return dot(matmul_nt(x, ww), dy); }, w, matmul_tn(dy, x), rng));
}

struct SmallBlock {
  BlockDims d;
  BlockWeights w;
  Mat x0, y0, dx2, dqkv;
  std::vector<int32_t> pos;

  explicit SmallBlock(Rng& rng) {
    d.tokens = 5;
    d.hidden = 16;
    d.ffn = 12;
    d.heads = Heads{2, 1, 8};
    const double s = 1.0 / std::sqrt(16.0);
    w.wo = rng.mat(16, 16, s);
    w.wgu = rng.mat(24, 16, s);
    w.wdown = rng.mat(16, 12, 1.0 / std::sqrt(12.0));
    w.wqkv = rng.mat(d.heads.cols(), 16, s);
    w.norm0 = rng.vec(16, 1.0, 0.2);
    w.norm1 = rng.vec(16, 1.0, 0.2);
    w.freqs = rope_frequencies(8, 10000.0);
    x0 = rng.mat(5, 16);
    y0 = rng.mat(5, 16);
    dx2 = rng.mat(5, 16);
    dqkv = rng.mat(5, d.heads.cols());
    pos = {0, 5, 999, 65536, 131071};
  }
  double loss(const BlockWeights& ww, const Mat& xx0, const Mat& yy0) const {
    const BlockForward f = block_forward(d, ww, xx0, yy0, pos);
    return dot(f.x2, dx2) + dot(f.qkv, dqkv);
  }
};

TEST(FiniteDifference, WholeBlockBackward) {
  CODA_SEEDED_RNG(rng);
  const SmallBlock b(rng);
  const BlockGrad g = block_backward(b.d, b.w, b.x0, b.y0, b.pos, b.dx2, b.dqkv);
  EXPECT_TRUE(directional("dx0", [&](const Mat& x) { return b.loss(b.w, x, b.y0); }, b.x0, g.dx0, rng));
  EXPECT_TRUE(directional("dy0", [&](const Mat& y) { return b.loss(b.w, b.x0, y); }, b.y0, g.dy0, rng));
  auto weight = [&](const char* name, Mat BlockWeights::*field, const Mat& grad) {
    EXPECT_TRUE(directional(name, [&](const Mat& m) {
      BlockWeights w = b.w;
      w.*field = m;
      return b.loss(w, b.x0, b.y0);
    }, b.w.*field, grad, rng));
  };
  weight("dwo", &BlockWeights::wo, g.dwo);
  weight("dwgu", &BlockWeights::wgu, g.dwgu);
  weight("dwdown", &BlockWeights::wdown, g.dwdown);
  weight("dwqkv", &BlockWeights::wqkv, g.dwqkv);
  auto norm = [&](const char* name, Vec BlockWeights::*field, const Vec& grad) {
    EXPECT_TRUE(directional(name, [&](const Mat& m) {
      BlockWeights w = b.w;
      w.*field = vec_of(m);
      return b.loss(w, b.x0, b.y0);
    }, mat_of(b.w.*field), mat_of(grad), rng));
  };
  norm("dnorm0", &BlockWeights::norm0, g.dnorm0);
  norm("dnorm1", &BlockWeights::norm1, g.dnorm1);
}

TEST(FiniteDifference, LmHead) {
  CODA_SEEDED_RNG(rng);
  const Mat x = rng.mat(6, 16), w = rng.mat(21, 16, 0.5);
  const Vec g = rng.vec(16, 1.0, 0.2);
  const std::vector<int32_t> t{1, 20, -100, 0, 5, 5};
  const LmHeadResult r = lm_head(x, g, w, t, -100, true, 1e-5);
  EXPECT_TRUE(directional("dx", [&](const Mat& xx) { return lm_head(xx, g, w, t, -100, true, 1e-5).ce.loss; }, x, r.dx, rng));
  EXPECT_TRUE(directional("dw", [&](const Mat& ww) { return lm_head(x, g, ww, t, -100, true, 1e-5).ce.loss; }, w, r.dw, rng));
  EXPECT_TRUE(directional("dnorm",
                          [&](const Mat& gg) { return lm_head(x, vec_of(gg), w, t, -100, true, 1e-5).ce.loss; },
                          mat_of(g), mat_of(r.dnorm), rng));
}

}  // namespace
}  // namespace coda::ref
