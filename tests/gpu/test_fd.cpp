// GPU finite-difference check of the LLaMA-3 block backward (issue 9 item 4; Hopper only, skipped
// elsewhere): the fused schedule's gradients (llama3_backward on GpuBackend) against central
// differences of the fused GPU forward (llama3_forward), on small shapes, fresh random inputs.
//
// L = <x2, dx2> + <qkv, dqkv>, summed in float64 on the host from the stored bf16 outputs, with the
// backward's bf16 upstream gradients dx2, dqkv as the fixed weights. Every input is bf16, so a
// perturbed input is rounded: x+ = bf16(x + s v), x- = bf16(x - s v), and the analytic side uses
// the step actually taken, <grad, x+ - x-> (exact in float64).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "coda/block/gpu_backend.hpp"
#include "coda/coda.h"
#include "coda/device_util.hpp"
#include "coda/host.hpp"
#include "common/op_prelude.hpp"

namespace coda {
namespace {

class GpuFiniteDifference : public ::testing::Test {
 protected:
  void SetUp() override {
    if (coda_device_check(0) != CODA_SUCCESS) GTEST_SKIP() << "no Hopper GPU: " << coda_last_error();
  }
};

// Small blocks: the block check's tiny head shape with a ragged M, and a wider one.
std::vector<Llama3Dims> fd_dims() {
  Llama3Dims a;
  a.tokens = 77;
  a.hidden = 64;
  a.ffn = 96;
  a.heads = HeadDims{2, 1, 32};
  Llama3Dims b;
  b.tokens = 128;
  b.hidden = 128;
  b.ffn = 256;
  b.heads = HeadDims{4, 2, 32};
  return {a, b};
}

Mat bf16_normal(test::Rng& rng, int64_t rows, int64_t cols, double sd, double mean = 0.0) {
  Mat m = rng.mat(rows, cols, sd);
  for (double& x : m.v) x += mean;
  ref::round_bf16(m);
  return m;
}

// A device copy of host values; a norm weight ([d, 1] on the host) as a vector.
dev::DeviceTensor upload(const Mat& m, bool vector) {
  return dev::upload(vector ? from_vec(m.v, kBF16) : from_mat(m, kBF16));
}

// An output: poisoned on the host and on the device, so that fully_written() after the download
// means the schedule wrote every element.
struct Out {
  HostTensor host;
  dev::DeviceTensor dev;
  TensorView view() const { return dev.view; }
  Mat fetch() {
    dev::download(dev, host);
    return to_mat(host);
  }
};
Out poisoned(DType t, int64_t rows, int64_t cols) {
  Out o;
  o.host = cols == 0 ? HostTensor::vector(t, rows) : HostTensor::matrix(t, rows, cols);
  o.host.poison();
  o.dev = dev::upload(o.host);
  return o;
}

// One input the check perturbs: its stored values, where a run takes it, the GPU gradient, and the
// perturbation unit (the input's typical size).
struct Input {
  const char* name;
  Mat value;  // a norm weight as [d, 1]
  bool vector;
  std::function<void(Llama3Weights&, Llama3Activations&, const TensorView&)> place;
  Mat grad;
  double unit;
  bool per_token;  // x0, y0: row i reaches only row i of the outputs (the block has no attention)
};

// The step: s = kStep * unit and 2 s. Richardson's combination of the two central differences,
// 8 [L(x + s v) - L(x - s v)] - [L(x + 2s v) - L(x - 2s v)] = 12 s <grad, v> + O(s^5), cancels the
// cubic term, so s can be large enough for bf16.
//
// NOTES: tolerance. Each perturbed run rounds every stored bf16 tensor (x1, h1, z1, y1, x2, h2,
// qkv) afresh, so L(x + s v) and L(x - s v) carry rounding noise (relative 2^-9 per element) that
// does not cancel: on the CPU emulator (the same rounding points) it is about 0.3% of the
// directional derivative at unit step, so ~1.3% at s = 1/4 (noise ~ 1/s); the O(s^5) remainder
// (x0 moves by up to half its size) and the backward's own bf16 error against float64 (0.3-0.5%)
// add well under 1%. Measured there over 20 seeds (10 for the weights) and both shapes: mean 1.5%,
// at most 2.1% for dx0 and dy0 (per token: 77-128 derivatives), 2.4% for the weights (32 directions
// each; fewer directions make the ratio's denominator, a sum of few squares, occasionally small).
// Hence 5%. A sign error gives 200%, a gradient 10% too large ~10%, 7% too small ~7.5%.
constexpr double kStep = 0.25;
constexpr double kTolerance = 0.05;
constexpr int kWeightDirections = 32;

TEST_F(GpuFiniteDifference, WholeBlockBackward) {
  for (const Llama3Dims& d : fd_dims()) {
    const uint64_t seed = test::seed();
    SCOPED_TRACE("M " + std::to_string(d.tokens) + " d " + std::to_string(d.hidden) + " F " + std::to_string(d.ffn) +
                 " seed " + std::to_string(seed) + " (replay with CODA_TEST_SEED)");
    test::Rng rng(seed);
    const int64_t m = d.tokens, n3 = d.heads.qkv_cols();
    const double sd = 1.0 / std::sqrt(static_cast<double>(d.hidden));
    const double sdf = 1.0 / std::sqrt(static_cast<double>(d.ffn));

    // Inputs as the block check draws them (float64 copies of bf16 values).
    const Mat wo = bf16_normal(rng, d.hidden, d.hidden, sd), wgu = bf16_normal(rng, 2 * d.ffn, d.hidden, sd);
    const Mat wdown = bf16_normal(rng, d.hidden, d.ffn, sdf), wqkv = bf16_normal(rng, n3, d.hidden, sd);
    const Mat norm0 = bf16_normal(rng, d.hidden, 1, 0.1, 1.0), norm1 = bf16_normal(rng, d.hidden, 1, 0.1, 1.0);
    const Mat x0 = bf16_normal(rng, m, d.hidden, 1.0), y0 = bf16_normal(rng, m, d.hidden, 1.0);
    const Mat dx2 = bf16_normal(rng, m, d.hidden, 1.0), dqkv = bf16_normal(rng, m, n3, 1.0);
    std::vector<int32_t> pos(static_cast<size_t>(m));
    for (int32_t& p : pos) p = static_cast<int32_t>(rng.integer(0, 131071));
    const std::vector<float> fr =
        rope_frequencies(d.heads.head_dim, 500000.0, RopeScaling{8.0, 1.0, 4.0, 8192.0});

    const dev::DeviceTensor wo_d = upload(wo, false), wgu_d = upload(wgu, false), wdown_d = upload(wdown, false);
    const dev::DeviceTensor wqkv_d = upload(wqkv, false), norm0_d = upload(norm0, true), norm1_d = upload(norm1, true);
    const dev::DeviceTensor freqs_d = dev::upload(from_vec(Vec(fr.begin(), fr.end()), kFP32));
    const dev::DeviceTensor x0_d = upload(x0, false), y0_d = upload(y0, false), pos_d = dev::upload(from_ints(pos));
    const dev::DeviceTensor dx2_d = upload(dx2, false), dqkv_d = upload(dqkv, false);
    Out x1 = poisoned(kBF16, m, d.hidden), x2 = poisoned(kBF16, m, d.hidden), z1 = poisoned(kBF16, m, 2 * d.ffn);
    Out qkv = poisoned(kBF16, m, n3), r1 = poisoned(kFP32, m, 0), r2 = poisoned(kFP32, m, 0);
    const Llama3Weights w{wo_d.view, wgu_d.view, wdown_d.view, wqkv_d.view, norm0_d.view, norm1_d.view, freqs_d.view};
    const Llama3Activations act{x0_d.view, y0_d.view, pos_d.view, x1.view(), x2.view(), z1.view(), qkv.view(),
                                r1.view(), r2.view(), {}};

    // The fused forward on (w, a); the per-token losses L_i = <x2_i, dx2_i> + <qkv_i, dqkv_i>.
    GpuBackend be;
    auto losses = [&](const Llama3Weights& ww, const Llama3Activations& a) {
      be.reset();
      const Status s = llama3_forward(be, d, ww, a);
      if (!s.ok()) throw std::runtime_error("llama3_forward: " + s.message());
      dev::check(cudaDeviceSynchronize(), "llama3_forward");
      const Mat xo = x2.fetch(), qo = qkv.fetch();
      Vec l(static_cast<size_t>(m), 0.0);
      for (int64_t i = 0; i < m; ++i) {
        double s2 = 0;
        for (int64_t j = 0; j < d.hidden; ++j) s2 += xo(i, j) * dx2(i, j);
        for (int64_t j = 0; j < n3; ++j) s2 += qo(i, j) * dqkv(i, j);
        l[static_cast<size_t>(i)] = s2;
      }
      return l;
    };

    // The forward that the backward reads, then the backward; every output fully written.
    losses(w, act);
    for (Out* o : {&x1, &x2, &z1, &qkv, &r1, &r2}) {
      o->fetch();
      ASSERT_TRUE(o->host.fully_written());
    }
    Out dx0 = poisoned(kBF16, m, d.hidden), dy0 = poisoned(kBF16, m, d.hidden);
    Out dwo = poisoned(kFP32, d.hidden, d.hidden), dwgu = poisoned(kFP32, 2 * d.ffn, d.hidden);
    Out dwdown = poisoned(kFP32, d.hidden, d.ffn), dwqkv = poisoned(kFP32, n3, d.hidden);
    Out dnorm0 = poisoned(kFP32, d.hidden, 0), dnorm1 = poisoned(kFP32, d.hidden, 0);
    const Llama3Grads grads{dx2_d.view,    dqkv_d.view,    dx0.view(),    dy0.view(),    dwo.view(),
                            dwgu.view(),   dwdown.view(),  dwqkv.view(),  dnorm0.view(), dnorm1.view()};
    be.reset();
    CODA_ASSERT_OK(llama3_backward(be, d, w, act, grads));
    dev::check(cudaDeviceSynchronize(), "llama3_backward");
    for (Out* o : {&dx0, &dy0, &dwo, &dwgu, &dwdown, &dwqkv, &dnorm0, &dnorm1}) {
      o->fetch();
      ASSERT_TRUE(o->host.fully_written());
    }

    // Units: the inputs' sizes; Wdown twice its sd (its input y1 = SwiGLU(z1) is about half the
    // size of the other GEMMs' inputs), the norm weights their value (about 1).
    using W = Llama3Weights;
    using A = Llama3Activations;
    auto weight = [](TensorView W::*f) {
      return [f](W& ww, A&, const TensorView& v) { ww.*f = v; };
    };
    auto activation = [](TensorView A::*f) {
      return [f](W&, A& a, const TensorView& v) { a.*f = v; };
    };
    std::vector<Input> inputs = {
        {"x0", x0, false, activation(&A::x0), dx0.fetch(), 1.0, true},
        {"y0", y0, false, activation(&A::y0), dy0.fetch(), 1.0, true},
        {"Wo", wo, false, weight(&W::wo), dwo.fetch(), sd, false},
        {"Wgu", wgu, false, weight(&W::wgu), dwgu.fetch(), sd, false},
        {"Wdown", wdown, false, weight(&W::wdown), dwdown.fetch(), 2 * sdf, false},
        {"Wqkv", wqkv, false, weight(&W::wqkv), dwqkv.fetch(), sd, false},
        {"norm0", norm0, true, weight(&W::norm0), dnorm0.fetch(), 1.0, false},
        {"norm1", norm1, true, weight(&W::norm1), dnorm1.fetch(), 1.0, false},
    };

    for (const Input& in : inputs) {
      ASSERT_EQ(in.grad.rows, in.value.rows);
      ASSERT_EQ(in.grad.cols, in.value.cols);
      // The loss after replacing this input by `x`.
      auto loss_at = [&](const Mat& x) {
        const dev::DeviceTensor xd = upload(x, in.vector);
        W ww = w;
        A a = act;
        in.place(ww, a, xd.view);
        return losses(ww, a);
      };
      // Per token for x0 and y0 (one direction, M derivatives); for a weight the total loss, along
      // kWeightDirections directions.
      const int directions = in.per_token ? 1 : kWeightDirections;
      Vec numeric, analytic;
      for (int k = 0; k < directions; ++k) {
        const Mat v = rng.mat(in.value.rows, in.value.cols);
        const size_t n = in.per_token ? static_cast<size_t>(m) : 1;
        Vec num(n, 0.0), an(n, 0.0);
        for (const auto& [mult, c] : {std::pair{1.0, 8.0}, std::pair{2.0, -1.0}}) {
          const double s = mult * kStep * in.unit;
          Mat xp = in.value, xm = in.value;
          for (size_t e = 0; e < v.v.size(); ++e) {
            xp.v[e] += s * v.v[e];
            xm.v[e] -= s * v.v[e];
          }
          ref::round_bf16(xp);
          ref::round_bf16(xm);
          Mat step = xp;  // x+ - x-, exact
          for (size_t e = 0; e < step.v.size(); ++e) step.v[e] -= xm.v[e];
          const Vec lp = loss_at(xp), lm = loss_at(xm);
          for (int64_t i = 0; i < m; ++i) {
            const size_t r = in.per_token ? static_cast<size_t>(i) : 0;
            num[r] += c * (lp[static_cast<size_t>(i)] - lm[static_cast<size_t>(i)]);
            if (in.per_token) {
              double dot = 0;
              for (int64_t j = 0; j < step.cols; ++j) dot += in.grad(i, j) * step(i, j);
              an[r] += c * dot;
            }
          }
          if (!in.per_token) an[0] += c * ref::dot(in.grad, step);
        }
        numeric.insert(numeric.end(), num.begin(), num.end());
        analytic.insert(analytic.end(), an.begin(), an.end());
      }
      const double err = ref::rel_error(ref::from_vec(numeric), ref::from_vec(analytic));
      std::printf("  d%-6s M %4lld: rel. error %.4f over %zu directional derivatives\n", in.name,
                  static_cast<long long>(d.tokens), err, numeric.size());
      EXPECT_LE(err, kTolerance) << "d" << in.name << ": finite differences vs the GPU backward, rel. error "
                                 << err << " over " << numeric.size() << " directional derivatives";
      EXPECT_GT(ref::frobenius(ref::from_vec(analytic)), 0.0) << "d" << in.name << " is zero";
    }
  }
}

}  // namespace
}  // namespace coda
