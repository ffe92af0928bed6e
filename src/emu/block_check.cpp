// Block check: fused schedule on the emulator vs the float64 and bf16-storage unfused blocks.
#include "coda/ref/block_check.hpp"

#include <chrono>
#include <cmath>
#include <random>

#include "coda/host.hpp"
#include "coda/ref/emu_backend.hpp"
#include "coda/ref/reference.hpp"

namespace coda {

Llama3Dims default_check_dims() {
  Llama3Dims d;
  d.tokens = 77;
  d.hidden = 256;
  d.ffn = 512;
  d.heads = HeadDims{4, 2, 64};
  d.eps = 1e-5f;
  return d;
}

namespace {

struct Inputs {
  ref::BlockDims dims;
  ref::BlockWeights w;
  ref::Mat x0, y0, dx2, dqkv;
  std::vector<int32_t> pos;
};

ref::Mat bf16_mat(std::mt19937_64& g, int64_t r, int64_t c, double sd) {
  std::normal_distribution<double> n(0.0, sd);
  ref::Mat m(r, c);
  for (double& x : m.v) x = n(g);
  ref::round_bf16(m);
  return m;
}

ref::Vec bf16_vec(std::mt19937_64& g, int64_t n, double mean, double sd) {
  ref::Mat m = bf16_mat(g, n, 1, sd);
  for (double& x : m.v) x = static_cast<double>(round_bf16(static_cast<float>(x + mean)));
  return m.v;
}

Inputs make_inputs(const Llama3Dims& d, uint64_t seed) {
  std::mt19937_64 g(seed);
  Inputs in;
  in.dims.tokens = d.tokens;
  in.dims.hidden = d.hidden;
  in.dims.ffn = d.ffn;
  in.dims.heads = ref::Heads{d.heads.heads_q, d.heads.heads_kv, d.heads.head_dim};
  in.dims.eps = static_cast<double>(d.eps);
  const double sd = 1.0 / std::sqrt(static_cast<double>(d.hidden));
  in.w.wo = bf16_mat(g, d.hidden, d.hidden, sd);
  in.w.wgu = bf16_mat(g, 2 * d.ffn, d.hidden, sd);
  in.w.wdown = bf16_mat(g, d.hidden, d.ffn, 1.0 / std::sqrt(static_cast<double>(d.ffn)));
  in.w.wqkv = bf16_mat(g, d.heads.qkv_cols(), d.hidden, sd);
  in.w.norm0 = bf16_vec(g, d.hidden, 1.0, 0.1);
  in.w.norm1 = bf16_vec(g, d.hidden, 1.0, 0.1);
  const std::vector<float> f = rope_frequencies(d.heads.head_dim, 500000.0, RopeScaling{8.0, 1.0, 4.0, 8192.0});
  in.w.freqs.assign(f.begin(), f.end());
  in.x0 = bf16_mat(g, d.tokens, d.hidden, 1.0);
  in.y0 = bf16_mat(g, d.tokens, d.hidden, 1.0);
  in.dx2 = bf16_mat(g, d.tokens, d.hidden, 1.0);
  in.dqkv = bf16_mat(g, d.tokens, d.heads.qkv_cols(), 1.0);
  std::uniform_int_distribution<int32_t> p(0, 131071);
  in.pos.resize(static_cast<size_t>(d.tokens));
  for (auto& x : in.pos) x = p(g);
  return in;
}

void add_row(BlockCheckResult& r, const char* op, const char* out, const ref::Mat& fused, const ref::Mat& unfused,
             const ref::Mat& truth, double eps) {
  ErrorRow row;
  row.op = op;
  row.output = out;
  row.fused = ref::rel_error(fused, truth);
  row.unfused = ref::rel_error(unfused, truth);
  row.bound = 2.0 * row.unfused + eps;
  row.ok = !std::isnan(row.fused) && row.fused <= row.bound;
  r.rows.push_back(row);
}

}  // namespace

BlockCheckResult check_llama3_block_emulated(const Llama3Dims& d, uint64_t seed, const emu::EmuConfig& cfg,
                                             double eps, bool keep_y1) {
  return check_llama3_block(
      d, seed,
      [&cfg](const Llama3Dims& dims, const Llama3Weights& w, const Llama3Activations& act, const Llama3Grads* g) {
        emu::EmuBackend be(cfg);
        CODA_TRY(llama3_forward(be, dims, w, act));
        return g ? llama3_backward(be, dims, w, act, *g) : Status();
      },
      true, eps, keep_y1);
}

BlockCheckResult check_llama3_block(const Llama3Dims& d, uint64_t seed, const BlockRunner& run, bool backward,
                                    double eps, bool keep_y1) {
  BlockCheckResult result;
  const Inputs in = make_inputs(d, seed);
  const ref::Rounder bf16 = [](ref::Mat& m) { ref::round_bf16(m); };
  const ref::BlockForward f64 = ref::block_forward(in.dims, in.w, in.x0, in.y0, in.pos);
  const ref::BlockForward fu = ref::block_forward(in.dims, in.w, in.x0, in.y0, in.pos, bf16);
  ref::BlockGrad g64, gu;
  if (backward) {
    g64 = ref::block_backward(in.dims, in.w, in.x0, in.y0, in.pos, in.dx2, in.dqkv);
    gu = ref::block_backward(in.dims, in.w, in.x0, in.y0, in.pos, in.dx2, in.dqkv, bf16);
  }

  // The fused schedule on host tensors.
  const DType t = DType::kBF16;
  const int64_t m = d.tokens, n3 = d.heads.qkv_cols();
  HostTensor wo = from_mat(in.w.wo, t), wgu = from_mat(in.w.wgu, t), wdown = from_mat(in.w.wdown, t);
  HostTensor wqkv = from_mat(in.w.wqkv, t), n0 = from_vec(in.w.norm0, t), n1 = from_vec(in.w.norm1, t);
  HostTensor freqs = from_vec(in.w.freqs, DType::kFP32);
  const Llama3Weights w{wo, wgu, wdown, wqkv, n0, n1, freqs};
  HostTensor x0 = from_mat(in.x0, t), y0 = from_mat(in.y0, t), pos = from_ints(in.pos);
  auto out = [](DType dt, int64_t r, int64_t c) {
    HostTensor h = c == 0 ? HostTensor::vector(dt, r) : HostTensor::matrix(dt, r, c);
    h.poison();
    return h;
  };
  HostTensor x1 = out(t, m, d.hidden), x2 = out(t, m, d.hidden), z1 = out(t, m, 2 * d.ffn), qkv = out(t, m, n3);
  HostTensor r1 = out(DType::kFP32, m, 0), r2 = out(DType::kFP32, m, 0);
  HostTensor y1 = keep_y1 ? out(t, m, d.ffn) : HostTensor();
  Llama3Activations act{x0, y0, pos, x1, x2, z1, qkv, r1, r2, {}};
  if (keep_y1) act.y1 = y1;
  HostTensor dx2 = from_mat(in.dx2, t), dqkv = from_mat(in.dqkv, t);
  HostTensor dx0 = out(t, m, d.hidden), dy0 = out(t, m, d.hidden);
  HostTensor dwo = out(DType::kFP32, d.hidden, d.hidden), dwgu = out(DType::kFP32, 2 * d.ffn, d.hidden);
  HostTensor dwdown = out(DType::kFP32, d.hidden, d.ffn), dwqkv = out(DType::kFP32, n3, d.hidden);
  HostTensor dn0 = out(DType::kFP32, d.hidden, 0), dn1 = out(DType::kFP32, d.hidden, 0);
  const Llama3Grads grads{dx2, dqkv, dx0, dy0, dwo, dwgu, dwdown, dwqkv, dn0, dn1};

  const auto start = std::chrono::steady_clock::now();
  const Status s = run(d, w, act, backward ? &grads : nullptr);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!s.ok()) {
    result.error = s.message();
    return result;
  }
  for (const HostTensor* h : {&x1, &x2, &z1, &qkv, &r1, &r2, &dx0, &dy0, &dwo, &dwgu, &dwdown, &dwqkv, &dn0, &dn1}) {
    if (!backward && h == &dx0) break;
    if (!h->fully_written()) {
      result.error = "an output of the fused block was not fully written";
      return result;
    }
  }
  if (keep_y1 && m > 0 && !y1.fully_written()) {
    result.error = "act.y1 (the kept SwiGLU output) was not fully written";
    return result;
  }

  add_row(result, "gemm_residual_rmsnorm_partial", "x1", to_mat(x1), fu.x1, f64.x1, eps);
  add_row(result, "rms_finish", "r1", to_mat(r1), ref::from_vec(fu.r1), ref::from_vec(f64.r1), eps);
  add_row(result, "gemm_rmsnorm_swiglu", "z1", to_mat(z1), fu.z1, f64.z1, eps);
  add_row(result, "gemm_residual_rmsnorm_partial", "x2", to_mat(x2), fu.x2, f64.x2, eps);
  add_row(result, "rms_finish", "r2", to_mat(r2), ref::from_vec(fu.r2), ref::from_vec(f64.r2), eps);
  add_row(result, "gemm_rmsnorm_rope", "qkv", to_mat(qkv), fu.qkv, f64.qkv, eps);
  if (keep_y1) add_row(result, "gemm_rmsnorm_swiglu", "y1", to_mat(y1), fu.y1, f64.y1, eps);
  if (!backward) {
    result.ok = true;
    for (const ErrorRow& r : result.rows) result.ok = result.ok && r.ok;
    return result;
  }
  add_row(result, "gemm_rmsnorm_backward", "dx0", to_mat(dx0), gu.dx0, g64.dx0, eps);
  add_row(result, "gemm (dgrad)", "dy0", to_mat(dy0), gu.dy0, g64.dy0, eps);
  add_row(result, "gemm (wgrad)", "dWo", to_mat(dwo), gu.dwo, g64.dwo, eps);
  add_row(result, "gemm (wgrad)", "dWgu", to_mat(dwgu), gu.dwgu, g64.dwgu, eps);
  add_row(result, "gemm (wgrad)", "dWdown", to_mat(dwdown), gu.dwdown, g64.dwdown, eps);
  add_row(result, "gemm (wgrad)", "dWqkv", to_mat(dwqkv), gu.dwqkv, g64.dwqkv, eps);
  add_row(result, "col_sum_finish", "dnorm0", to_mat(dn0), ref::from_vec(gu.dnorm0), ref::from_vec(g64.dnorm0), eps);
  add_row(result, "col_sum_finish", "dnorm1", to_mat(dn1), ref::from_vec(gu.dnorm1), ref::from_vec(g64.dnorm1), eps);
  result.ok = true;
  for (const ErrorRow& r : result.rows) result.ok = result.ok && r.ok;
  return result;
}

}  // namespace coda
