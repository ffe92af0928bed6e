// Float64 reference implementations. Straight loops; correctness over speed.
#include "coda/ref/reference.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>

#include "coda/numeric.hpp"

namespace coda::ref {

namespace {
constexpr double kTwoPi = 6.283185307179586476925286766559;

void require(bool ok, const char* what) {
  if (!ok) throw std::invalid_argument(std::string("coda::ref: ") + what);
}

double sigmoid(double g) { return 1.0 / (1.0 + std::exp(-g)); }

void apply(const Rounder& round, Mat& m) {
  if (round) round(m);
}

// theta / (2 pi) reduced to [0, 1): pos * f is exact in double for pos < 2^29 and fp32 f.
double turns(int32_t pos, double f) {
  const double t = static_cast<double>(pos) * f;
  return t - std::floor(t);
}
}  // namespace

// ---- linear algebra ---------------------------------------------------------------------------

Mat matmul_nt(const Mat& a, const Mat& b) {
  require(a.cols == b.cols, "matmul_nt: inner sizes differ");
  Mat c(a.rows, b.rows);
  for (int64_t i = 0; i < a.rows; ++i)
    for (int64_t j = 0; j < b.rows; ++j) {
      double s = 0;
      const double* x = &a.v[static_cast<size_t>(i * a.cols)];
      const double* y = &b.v[static_cast<size_t>(j * b.cols)];
      for (int64_t k = 0; k < a.cols; ++k) s += x[k] * y[k];
      c(i, j) = s;
    }
  return c;
}

Mat transpose(const Mat& a) {
  Mat t(a.cols, a.rows);
  for (int64_t i = 0; i < a.rows; ++i)
    for (int64_t j = 0; j < a.cols; ++j) t(j, i) = a(i, j);
  return t;
}

Mat matmul_nn(const Mat& a, const Mat& b) { return matmul_nt(a, transpose(b)); }
Mat matmul_tn(const Mat& a, const Mat& b) { return matmul_nt(transpose(a), transpose(b)); }

Mat add(const Mat& a, const Mat& b) {
  require(a.rows == b.rows && a.cols == b.cols, "add: shapes differ");
  Mat c = a;
  for (size_t i = 0; i < c.v.size(); ++i) c.v[i] += b.v[i];
  return c;
}

Mat scale(const Mat& a, double s) {
  Mat c = a;
  for (double& x : c.v) x *= s;
  return c;
}

double dot(const Mat& a, const Mat& b) {
  require(a.v.size() == b.v.size(), "dot: sizes differ");
  double s = 0;
  for (size_t i = 0; i < a.v.size(); ++i) s += a.v[i] * b.v[i];
  return s;
}

double frobenius(const Mat& a) { return std::sqrt(dot(a, a)); }

double rel_error(const Mat& a, const Mat& b) {
  require(a.v.size() == b.v.size(), "rel_error: sizes differ");
  double num = 0, den = 0;
  for (size_t i = 0; i < a.v.size(); ++i) {
    const double d = a.v[i] - b.v[i];
    num += d * d;
    den += b.v[i] * b.v[i];
  }
  if (std::isnan(num) || std::isnan(den)) return std::numeric_limits<double>::quiet_NaN();
  if (den == 0) return num == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(num / den);
}

Mat from_vec(const Vec& v) {
  Mat m(static_cast<int64_t>(v.size()), 1);
  m.v = v;
  return m;
}

void round_bf16(Mat& m) {
  for (double& x : m.v) x = static_cast<double>(coda::round_bf16(static_cast<float>(x)));
}

// ---- RMSNorm ----------------------------------------------------------------------------------

Vec rms_rstd(const Mat& x, double eps) {
  Vec r(static_cast<size_t>(x.rows));
  for (int64_t i = 0; i < x.rows; ++i) {
    double s = 0;
    for (int64_t j = 0; j < x.cols; ++j) s += x(i, j) * x(i, j);
    r[static_cast<size_t>(i)] = 1.0 / std::sqrt(s / static_cast<double>(x.cols) + eps);
  }
  return r;
}

Mat rmsnorm(const Mat& x, const Vec& w, double eps) {
  require(static_cast<int64_t>(w.size()) == x.cols, "rmsnorm: weight size");
  const Vec r = rms_rstd(x, eps);
  Mat y(x.rows, x.cols);
  for (int64_t i = 0; i < x.rows; ++i)
    for (int64_t j = 0; j < x.cols; ++j) y(i, j) = x(i, j) * r[static_cast<size_t>(i)] * w[static_cast<size_t>(j)];
  return y;
}

RmsNormGrad rmsnorm_backward(const Mat& x, const Vec& w, double eps, const Mat& dy) {
  const Vec r = rms_rstd(x, eps);
  RmsNormGrad g{Mat(x.rows, x.cols), Vec(static_cast<size_t>(x.cols), 0.0)};
  const double d = static_cast<double>(x.cols);
  for (int64_t i = 0; i < x.rows; ++i) {
    const double ri = r[static_cast<size_t>(i)];
    double c = 0;  // (1/d) sum_j dy_j w_j xh_j
    for (int64_t j = 0; j < x.cols; ++j) c += dy(i, j) * w[static_cast<size_t>(j)] * x(i, j) * ri;
    c /= d;
    for (int64_t j = 0; j < x.cols; ++j) {
      const double xh = x(i, j) * ri;
      g.dx(i, j) = ri * (dy(i, j) * w[static_cast<size_t>(j)] - xh * c);
      g.dw[static_cast<size_t>(j)] += dy(i, j) * xh;
    }
  }
  return g;
}

// ---- SwiGLU -----------------------------------------------------------------------------------

Mat swiglu(const Mat& z) {
  require(z.cols % 2 == 0, "swiglu: odd width");
  Mat o(z.rows, z.cols / 2);
  for (int64_t i = 0; i < z.rows; ++i)
    for (int64_t j = 0; j < o.cols; ++j) {
      const double g = z(i, 2 * j), u = z(i, 2 * j + 1);
      o(i, j) = g * sigmoid(g) * u;
    }
  return o;
}

Mat swiglu_backward(const Mat& z, const Mat& dout) {
  require(z.cols == 2 * dout.cols && z.rows == dout.rows, "swiglu_backward: shapes");
  Mat dz(z.rows, z.cols);
  for (int64_t i = 0; i < z.rows; ++i)
    for (int64_t j = 0; j < dout.cols; ++j) {
      const double g = z(i, 2 * j), u = z(i, 2 * j + 1), s = sigmoid(g), d = dout(i, j);
      dz(i, 2 * j) = d * u * s * (1.0 + g * (1.0 - s));
      dz(i, 2 * j + 1) = d * g * s;
    }
  return dz;
}

// ---- RoPE -------------------------------------------------------------------------------------

Mat rope(const Mat& qkv, const std::vector<int32_t>& pos, const Vec& f, const Heads& h, int sign) {
  require(qkv.cols == h.cols() && h.dim % 2 == 0, "rope: shape");
  require(static_cast<int64_t>(pos.size()) == qkv.rows, "rope: positions");
  require(static_cast<int64_t>(f.size()) == h.dim / 2, "rope: frequencies");
  Mat out = qkv;
  for (int64_t i = 0; i < qkv.rows; ++i)
    for (int64_t c = 0; c < h.rope_cols(); c += 2) {
      const double theta = kTwoPi * turns(pos[static_cast<size_t>(i)], f[static_cast<size_t>((c % h.dim) / 2)]);
      const double cs = std::cos(theta), sn = sign * std::sin(theta);
      const double x = qkv(i, c), y = qkv(i, c + 1);
      out(i, c) = x * cs - y * sn;
      out(i, c + 1) = x * sn + y * cs;
    }
  return out;
}

Vec rope_frequencies(int64_t head_dim, double base, double factor, double low_freq_factor,
                     double high_freq_factor, double original_max_position) {
  require(head_dim > 0 && head_dim % 2 == 0, "rope_frequencies: head_dim must be even");
  Vec f(static_cast<size_t>(head_dim / 2));
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    double inv = std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
    if (factor > 0) {
      const double low_wavelen = original_max_position / low_freq_factor;
      const double high_wavelen = original_max_position / high_freq_factor;
      const double wavelen = kTwoPi / inv;
      if (wavelen > low_wavelen) {
        inv = inv / factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth = (original_max_position / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
        inv = (1.0 - smooth) * inv / factor + smooth * inv;
      }
    }
    f[static_cast<size_t>(i)] = inv / kTwoPi;
  }
  return f;
}

// ---- QK-norm + RoPE ---------------------------------------------------------------------------

namespace {
// The per-head RMSNorm half of qknorm_rope (q and k heads; V copied).
Mat qknorm(const Mat& qkv, const Vec& gq, const Vec& gk, const Heads& h, double eps) {
  Mat out = qkv;
  for (int64_t i = 0; i < qkv.rows; ++i)
    for (int64_t head = 0; head < h.q + h.kv; ++head) {
      const Vec& g = head < h.q ? gq : gk;
      double s = 0;
      for (int64_t j = 0; j < h.dim; ++j) s += qkv(i, head * h.dim + j) * qkv(i, head * h.dim + j);
      const double r = 1.0 / std::sqrt(s / static_cast<double>(h.dim) + eps);
      for (int64_t j = 0; j < h.dim; ++j) out(i, head * h.dim + j) = qkv(i, head * h.dim + j) * r * g[static_cast<size_t>(j)];
    }
  return out;
}
}  // namespace

Mat qknorm_rope(const Mat& qkv, const Vec& gq, const Vec& gk, const std::vector<int32_t>& pos, const Vec& f,
                const Heads& h, double eps) {
  return rope(qknorm(qkv, gq, gk, h, eps), pos, f, h, +1);
}

QkNormGrad qknorm_rope_backward(const Mat& qkv, const Vec& gq, const Vec& gk, const std::vector<int32_t>& pos,
                                const Vec& f, const Heads& h, double eps, const Mat& dout) {
  const Mat du = rope(dout, pos, f, h, -1);  // gradient of the normalized (pre-rotation) tensor
  QkNormGrad g{du, Vec(static_cast<size_t>(h.dim), 0.0), Vec(static_cast<size_t>(h.dim), 0.0)};
  for (int64_t i = 0; i < qkv.rows; ++i)
    for (int64_t head = 0; head < h.q + h.kv; ++head) {
      const bool is_q = head < h.q;
      const Vec& gamma = is_q ? gq : gk;
      Vec& dgamma = is_q ? g.dgamma_q : g.dgamma_k;
      const int64_t c0 = head * h.dim;
      double s = 0;
      for (int64_t j = 0; j < h.dim; ++j) s += qkv(i, c0 + j) * qkv(i, c0 + j);
      const double r = 1.0 / std::sqrt(s / static_cast<double>(h.dim) + eps);
      double c = 0;
      for (int64_t j = 0; j < h.dim; ++j) c += du(i, c0 + j) * gamma[static_cast<size_t>(j)] * qkv(i, c0 + j) * r;
      c /= static_cast<double>(h.dim);
      for (int64_t j = 0; j < h.dim; ++j) {
        const double xh = qkv(i, c0 + j) * r;
        dgamma[static_cast<size_t>(j)] += du(i, c0 + j) * xh;
        g.dqkv(i, c0 + j) = r * (du(i, c0 + j) * gamma[static_cast<size_t>(j)] - xh * c);
      }
    }
  return g;
}

// ---- cross-entropy ----------------------------------------------------------------------------

CrossEntropy cross_entropy(const Mat& logits, const std::vector<int32_t>& targets, int32_t ignore_index,
                           bool mean, double dloss) {
  require(static_cast<int64_t>(targets.size()) == logits.rows, "cross_entropy: targets");
  CrossEntropy ce;
  ce.row_loss.assign(static_cast<size_t>(logits.rows), 0.0);
  ce.lse.assign(static_cast<size_t>(logits.rows), 0.0);
  ce.dlogits = Mat(logits.rows, logits.cols);
  for (int64_t i = 0; i < logits.rows; ++i) {
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < logits.cols; ++j) mx = std::fmax(mx, logits(i, j));
    double s = 0;
    for (int64_t j = 0; j < logits.cols; ++j) s += std::exp(logits(i, j) - mx);
    ce.lse[static_cast<size_t>(i)] = mx + std::log(s);
    const int32_t t = targets[static_cast<size_t>(i)];
    if (t == ignore_index) continue;
    require(t >= 0 && t < logits.cols, "cross_entropy: target out of range");
    ce.row_loss[static_cast<size_t>(i)] = ce.lse[static_cast<size_t>(i)] - logits(i, t);
    ++ce.count;
  }
  double total = 0;
  for (double l : ce.row_loss) total += l;
  const double norm = mean ? (ce.count ? 1.0 / static_cast<double>(ce.count) : 0.0) : 1.0;
  ce.loss = total * norm;
  for (int64_t i = 0; i < logits.rows; ++i) {
    const int32_t t = targets[static_cast<size_t>(i)];
    if (t == ignore_index) continue;
    for (int64_t j = 0; j < logits.cols; ++j) {
      const double p = std::exp(logits(i, j) - ce.lse[static_cast<size_t>(i)]);
      ce.dlogits(i, j) = (p - (j == t ? 1.0 : 0.0)) * dloss * norm;
    }
  }
  return ce;
}

// ---- the unfused block ------------------------------------------------------------------------

namespace {
Mat linear(const Mat& x, const Mat& w, const Rounder& round) {
  Mat y = matmul_nt(x, w);
  apply(round, y);
  return y;
}
}  // namespace

BlockForward block_forward(const BlockDims& d, const BlockWeights& w, const Mat& x0, const Mat& y0,
                           const std::vector<int32_t>& pos, const Rounder& round) {
  BlockForward f;
  // 1. x1 = y0 Wo^T + x0 ; n1 = RMSNorm(x1) * wn0
  f.x1 = add(matmul_nt(y0, w.wo), x0);
  apply(round, f.x1);
  f.r1 = rms_rstd(f.x1, d.eps);
  f.n1 = rmsnorm(f.x1, w.norm0, d.eps);
  apply(round, f.n1);
  // 2. z1 = n1 Wgu^T ; y1 = swiglu(z1)
  f.z1 = linear(f.n1, w.wgu, round);
  f.y1 = swiglu(f.z1);
  apply(round, f.y1);
  // 3. x2 = y1 Wdown^T + x1 ; n2 = RMSNorm(x2) * wn1
  f.x2 = add(matmul_nt(f.y1, w.wdown), f.x1);
  apply(round, f.x2);
  f.r2 = rms_rstd(f.x2, d.eps);
  f.n2 = rmsnorm(f.x2, w.norm1, d.eps);
  apply(round, f.n2);
  // 4. qkv = rope(n2 Wqkv^T)
  f.qkv_pre = linear(f.n2, w.wqkv, round);
  f.qkv = rope(f.qkv_pre, pos, w.freqs, d.heads, +1);
  apply(round, f.qkv);
  return f;
}

BlockGrad block_backward(const BlockDims& d, const BlockWeights& w, const Mat& x0, const Mat& y0,
                         const std::vector<int32_t>& pos, const Mat& dx2, const Mat& dqkv, const Rounder& round) {
  const BlockForward f = block_forward(d, w, x0, y0, pos, round);
  BlockGrad g;
  // qkv = rope(n2 Wqkv^T)
  Mat dqkv_pre = rope_backward(dqkv, pos, w.freqs, d.heads);
  apply(round, dqkv_pre);
  g.dwqkv = matmul_tn(dqkv_pre, f.n2);
  Mat dn2 = matmul_nn(dqkv_pre, w.wqkv);
  apply(round, dn2);
  RmsNormGrad ng1 = rmsnorm_backward(f.x2, w.norm1, d.eps, dn2);
  g.dnorm1 = ng1.dw;
  Mat dx2_total = add(ng1.dx, dx2);
  apply(round, dx2_total);
  // x2 = y1 Wdown^T + x1
  g.dwdown = matmul_tn(dx2_total, f.y1);
  Mat dy1 = matmul_nn(dx2_total, w.wdown);
  apply(round, dy1);
  Mat dz1 = swiglu_backward(f.z1, dy1);
  apply(round, dz1);
  g.dwgu = matmul_tn(dz1, f.n1);
  Mat dn1 = matmul_nn(dz1, w.wgu);
  apply(round, dn1);
  RmsNormGrad ng0 = rmsnorm_backward(f.x1, w.norm0, d.eps, dn1);
  g.dnorm0 = ng0.dw;
  Mat dx1_total = add(ng0.dx, dx2_total);
  apply(round, dx1_total);
  // x1 = y0 Wo^T + x0
  g.dx0 = dx1_total;
  g.dy0 = matmul_nn(dx1_total, w.wo);
  apply(round, g.dy0);
  g.dwo = matmul_tn(dx1_total, y0);
  for (Mat* m : {&g.dwqkv, &g.dwdown, &g.dwgu, &g.dwo}) apply(round, *m);
  return g;
}

LmHeadResult lm_head(const Mat& x, const Vec& norm, const Mat& w, const std::vector<int32_t>& targets,
                     int32_t ignore_index, bool mean, double eps, const Rounder& round) {
  LmHeadResult r;
  Mat n = rmsnorm(x, norm, eps);
  apply(round, n);
  r.logits = matmul_nt(n, w);
  apply(round, r.logits);
  r.ce = cross_entropy(r.logits, targets, ignore_index, mean, 1.0);
  Mat dl = r.ce.dlogits;
  apply(round, dl);
  r.dw = matmul_tn(dl, n);
  Mat dn = matmul_nn(dl, w);
  apply(round, dn);
  RmsNormGrad ng = rmsnorm_backward(x, norm, eps, dn);
  r.dx = ng.dx;
  r.dnorm = ng.dw;
  apply(round, r.dx);
  return r;
}

}  // namespace coda::ref
