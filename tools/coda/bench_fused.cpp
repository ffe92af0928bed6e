// `coda bench`, fused part: every forward fused operator against the plain cuBLAS GEMM of the same
// shape (`vs_cublas`) and against the unfused path (cuBLAS + coda's straightforward elementwise
// kernels, `vs_unfused`); the LLaMA-3 block forward against its GEMMs alone; the LM-head loss.
// Same method as the GEMM table (bench_gpu.cpp): L2 flushed before every rep, runs interleaved,
// medians.
#include <cmath>
#include <memory>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>

#include "bench_util.hpp"
#include "coda/block/gpu_backend.hpp"
#include "coda/gpu.hpp"

namespace coda::cli {
namespace {

constexpr DType kBF16 = DType::kBF16;
constexpr DType kFP32 = DType::kFP32;

// A vector of values in [lo, hi).
DMat dpositive(int64_t n, uint64_t seed, float lo, float hi) {
  std::vector<float> v(static_cast<size_t>(n));
  std::mt19937_64 g(seed);
  for (float& x : v) x = lo + (hi - lo) * static_cast<float>(g() % 100000) / 100000.0f;
  DMat m = dmat(kFP32, n, 0);
  dev::check(cudaMemcpy(m.view.data(), v.data(), v.size() * 4, cudaMemcpyHostToDevice), "upload");
  return m;
}
DMat dints(const std::vector<int32_t>& v) {
  DMat m = dmat(DType::kInt32, static_cast<int64_t>(v.size()), 0);
  dev::check(cudaMemcpy(m.view.data(), v.data(), v.size() * 4, cudaMemcpyHostToDevice), "upload");
  return m;
}

struct Row {
  Row(std::string name_, int64_t m_, int64_t n_, int64_t k_) : name(std::move(name_)), m(m_), n(n_), k(k_) {}
  std::string name;
  int64_t m, n, k;
  double us = 0, cublas_us = 0, unfused_us = 0;  // unfused 0: no unfused counterpart
  double flops = 0, bytes = 0;
  std::string note;
  std::string cublas_algo;  // cuBLASLt's chosen algorithm(s) for the cuBLAS column (LtGemm::algo_name)
  bool barred = true;       // false: reported for comparison, held to no bar
};

class Bench {
 public:
  Bench(const Options& opt, Timer& timer, const Ceilings& ceil, uint64_t seed)
      : opt_(opt), timer_(timer), ceil_(ceil), seed_(seed), ws_(size_t(64) << 20) {
    dev::check(cublasLtCreate(&lt_), "cublasLtCreate");
  }
  ~Bench() { cublasLtDestroy(lt_); }
  cublasLtHandle_t lt() const { return lt_; }
  void* ws() const { return ws_.get(); }
  size_t ws_bytes() const { return ws_.bytes(); }
  uint64_t seed(uint64_t salt) const { return seed_ * 0x9E3779B97F4A7C15ull + salt; }

  // Checks that `fn` runs, then times {fused, cuBLAS, unfused} interleaved.
  bool measure(Row r, const std::function<Status()>& fused, const std::function<void()>& cublas,
               const std::function<Status()>& unfused, int reps = 11) {
    Status s = fused();
    if (s.ok() && unfused) s = unfused();
    const cudaError_t e = cudaDeviceSynchronize();
    if (!s.ok() || e != cudaSuccess) {
      std::fprintf(stderr, "coda bench: %s: %s\n", r.name.c_str(), s.ok() ? cudaGetErrorString(e) : s.message().c_str());
      return false;
    }
    std::vector<std::function<void()>> fns = {[&] { fused(); }, cublas};
    if (unfused) fns.push_back([&] { unfused(); });
    const std::vector<double> med = timer_.median_us_interleaved(fns, reps);
    r.us = med[0];
    r.cublas_us = med[1];
    r.unfused_us = unfused ? med[2] : 0.0;
    rows_.push_back(r);
    print(r);
    if (opt_.diag) {  // where the time goes: the epilogue without its program, without the epilogue
      setenv("CODA_DEBUG_EPILOGUE", "2", 1);
      const double no_program = timer_.median_us([&] { fused(); }, 5);
      setenv("CODA_DEBUG_EPILOGUE", "1", 1);
      const double no_epilogue = timer_.median_us([&] { fused(); }, 5);
      unsetenv("CODA_DEBUG_EPILOGUE");
      std::printf("  diag %-26s full %.1f us, epilogue without program %.1f us, no epilogue %.1f us\n",
                  r.name.c_str(), r.us, no_program, no_epilogue);
    }
    if (opt_.variants) {  // the same case forced onto each compiled variant, interleaved with cuBLAS
      auto forced = [&](const char* v) {
        return [&fused, v] {
          setenv("CODA_FUSED_VARIANT", v, 1);
          fused();
          unsetenv("CODA_FUSED_VARIANT");
        };
      };
      const std::vector<double> v = timer_.median_us_interleaved({forced("0"), forced("2"), cublas}, reps);
      std::printf("  variants %-22s x cuBLAS: cooperative 128x256 %.3f, pingpong 128x128 %.3f\n", r.name.c_str(),
                  v[0] / v[2], v[1] / v[2]);
    }
    return true;
  }

  void header() const {
    std::printf("\n%-32s %6s %6s %6s %9s %9s %9s %8s %7s %6s %8s %8s\n", "fused case", "M", "N", "K", "time us",
                "cuBLAS us", "unfused", "TFLOP/s", "GB/s", "%SoL", "x cuBLAS", "x unfused");
  }
  void print(const Row& r) const {
    const double sol_us = std::max(r.flops / (ceil_.gemm_tflops * 1e6), r.bytes / (ceil_.copy_gbps * 1e3));
    std::printf("%-32s %6ld %6ld %6ld %9.1f %9.1f %9.1f %8.1f %7.0f %6.1f %8.3f %8s  %s\n", r.name.c_str(), long(r.m),
                long(r.n), long(r.k), r.us, r.cublas_us, r.unfused_us, r.flops / (r.us * 1e6), r.bytes / (r.us * 1e3),
                100.0 * sol_us / r.us, r.us / r.cublas_us,
                r.unfused_us > 0 ? std::to_string(r.us / r.unfused_us).substr(0, 5).c_str() : "-", r.note.c_str());
    std::fflush(stdout);
  }
  void json(std::string& out) const {
    std::ostringstream f;
    for (const Row& r : rows_) {
      const double sol_us = std::max(r.flops / (ceil_.gemm_tflops * 1e6), r.bytes / (ceil_.copy_gbps * 1e3));
      f << ",\n    {\"name\": " << json_str(r.name) << ", \"m\": " << r.m << ", \"n\": " << r.n << ", \"k\": " << r.k
        << ", \"time_us\": " << r.us << ", \"tflops\": " << r.flops / (r.us * 1e6) << ", \"gbps\": "
        << r.bytes / (r.us * 1e3) << ", \"sol_pct\": " << 100.0 * sol_us / r.us << ", \"cublas_us\": " << r.cublas_us
        << ", \"vs_cublas\": " << r.us / r.cublas_us << ", \"unfused_us\": " << r.unfused_us << ", \"vs_unfused\": ";
      if (r.unfused_us > 0) f << r.us / r.unfused_us;
      else f << "null";
      f << ", \"cublas_algo\": " << json_str(r.cublas_algo) << ", \"note\": " << json_str(r.note) << "}";
    }
    out += f.str();
  }
  const std::vector<Row>& rows() const { return rows_; }
  bool wanted(const std::string& name) const { return selected(opt_, name); }
  bool diag() const { return opt_.diag; }
  Timer& timer() { return timer_; }

 private:
  const Options& opt_;
  Timer& timer_;
  Ceilings ceil_;
  uint64_t seed_;
  Buffer ws_;
  cublasLtHandle_t lt_ = nullptr;
  std::vector<Row> rows_;
};


std::vector<int32_t> positions(int64_t m) {
  std::vector<int32_t> p(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) p[static_cast<size_t>(i)] = static_cast<int32_t>(i % 8192);
  return p;
}

bool bench_ops(Bench& b) {
  for (const ModelShape& ms : kModels) {
    const int64_t m = ms.tokens, d = ms.d, f = ms.f;
    const HeadDims heads{ms.hq, ms.hkv, ms.hd};
    const int64_t n3 = heads.qkv_cols();
    const std::string p = std::string(".") + ms.name + ".";
    // RMSNorm producers: the out-projection and the down projection.
    for (const auto& [gemm, k] : {std::pair<const char*, int64_t>{"oproj", d}, {"down", f}}) {
      const std::string name = "op.residual_rmsnorm" + p + gemm;
      if (!b.wanted(name)) continue;
      DMat a = drand(kBF16, m, k, b.seed(1), 1.0f), w = drand(kBF16, d, k, b.seed(2), 0.03f);
      DMat res = drand(kBF16, m, d, b.seed(3), 1.0f), nw = drand(kBF16, d, 0, b.seed(4), 1.0f);
      DMat x = dmat(kBF16, m, d), h = dmat(kBF16, m, d), part = dmat(kFP32, m, ceil_div(d, CODA_PARTIAL_COLS));
      DMat tmp = dmat(kBF16, m, d), r = dmat(kFP32, m, 0);
      dev::LtGemm ref(b.lt(), a.view, w.view, tmp.view, b.ws(), b.ws_bytes(), nullptr);
      const ResidualRmsNormPartialArgs args{a.view, w.view, res.view, nw.view, x.view, h.view, part.view, 1.0f};
      Row row(name, m, d, k);
      row.cublas_algo = ref.algo_name();
      row.flops = 2.0 * m * d * k;
      row.bytes = 2.0 * (m * k + d * k + 3.0 * m * d) + 4.0 * m * ceil_div(d, CODA_PARTIAL_COLS);
      if (!b.measure(row, [&] { return gemm_residual_rmsnorm_partial(args); }, [&] { ref.run(nullptr); },
                     [&] {
                       ref.run(nullptr);
                       CODA_TRY(unfused::add(tmp.view, res.view, x.view));
                       return unfused::rmsnorm(x.view, nw.view, 1e-5f, h.view, r.view);
                     }))
        return false;
    }
    {
      const std::string name = "op.rmsnorm_swiglu" + p + "gateup";
      if (b.wanted(name)) {
        DMat a = drand(kBF16, m, d, b.seed(5), 1.0f), w = drand(kBF16, 2 * f, d, b.seed(6), 0.03f);
        DMat r = dpositive(m, b.seed(7), 0.5f, 1.5f);
        DMat z = dmat(kBF16, m, 2 * f), o = dmat(kBF16, m, f);
        dev::LtGemm ref(b.lt(), a.view, w.view, z.view, b.ws(), b.ws_bytes(), nullptr);
        const SwigluArgs args{a.view, w.view, r.view, z.view, o.view};
        Row row(name, m, 2 * f, d);
        row.cublas_algo = ref.algo_name();
        row.flops = 2.0 * m * 2 * f * d;
        row.bytes = 2.0 * (m * d + 2 * f * d + 3.0 * m * f);
        if (!b.measure(row, [&] { return gemm_rmsnorm_swiglu(args); }, [&] { ref.run(nullptr); },
                       [&] {
                         ref.run(nullptr);
                         return unfused::swiglu(z.view, o.view);
                       }))
          return false;
      }
    }
    {
      DMat a = drand(kBF16, m, d, b.seed(8), 1.0f), w = drand(kBF16, n3, d, b.seed(9), 0.03f);
      DMat r = dpositive(m, b.seed(10), 0.5f, 1.5f), pos = dints(positions(m));
      const std::vector<float> fr = rope_frequencies(ms.hd, 500000.0, RopeScaling{8.0, 1.0, 4.0, 8192.0});
      DMat freqs = dmat(kFP32, ms.hd / 2, 0);
      dev::check(cudaMemcpy(freqs.view.data(), fr.data(), fr.size() * 4, cudaMemcpyHostToDevice), "upload");
      DMat out = dmat(kBF16, m, n3), ss = dmat(kFP32, m, (ms.hq + ms.hkv) * qk_segments(ms.hd, CODA_PARTIAL_COLS));
      dev::LtGemm ref(b.lt(), a.view, w.view, out.view, b.ws(), b.ws_bytes(), nullptr);
      Row row("op.rmsnorm_rope" + p + "qkv", m, n3, d);
      row.cublas_algo = ref.algo_name();
      row.flops = 2.0 * m * n3 * d;
      row.bytes = 2.0 * (m * d + n3 * d + m * n3);
      const RopeArgs args{a.view, w.view, r.view, pos.view, freqs.view, heads, out.view};
      if (b.wanted(row.name) &&
          !b.measure(row, [&] { return gemm_rmsnorm_rope(args); }, [&] { ref.run(nullptr); },
                     [&] {
                       ref.run(nullptr);
                       return unfused::rope(out.view, pos.view, freqs.view, heads);
                     }))
        return false;
      row.name = "op.qkv_sqsum" + p + "qkv";
      row.note = "no unfused counterpart (QK-norm statistics)";
      const QkvSqsumArgs qa{a.view, w.view, r.view, heads, out.view, ss.view};
      if (b.wanted(row.name) && !b.measure(row, [&] { return gemm_qkv_sqsum(qa); }, [&] { ref.run(nullptr); }, {}))
        return false;
    }
  }
  return true;
}

// The backward fused operators (issue 9) against the plain cuBLAS GEMM of their dgrad form: the
// RMSNorm backward in the epilogue of dy = dz W for the two GEMMs that consume a normalized input
// (QKV, gate/up), the SwiGLU backward in the epilogue of do = dx Wdown. No unfused counterpart
// yet (the unfused GPU backward is still to write).
bool bench_backward_ops(Bench& b) {
  for (const ModelShape& ms : kModels) {
    const int64_t m = ms.tokens, d = ms.d, f = ms.f;
    const int64_t n3 = HeadDims{ms.hq, ms.hkv, ms.hd}.qkv_cols();
    const std::string p = std::string(".") + ms.name + ".";
    for (const auto& [gemm, k] : {std::pair<const char*, int64_t>{"qkv", n3}, {"gateup", 2 * f}}) {
      const std::string name = "op.rmsnorm_backward" + p + gemm;
      if (!b.wanted(name)) continue;
      // dz [M, K] and the consuming GEMM's weight W [K, d]: dy = dz W, its B operand W viewed [d, K]
      DMat dz = drand(kBF16, m, k, b.seed(40), 1.0f), w = drand(kBF16, k, d, b.seed(41), 0.03f);
      DMat x = drand(kBF16, m, d, b.seed(42), 1.0f), dres = drand(kBF16, m, d, b.seed(43), 1.0f);
      DMat nw = drand(kBF16, d, 0, b.seed(44), 1.0f), r = dpositive(m, b.seed(45), 0.5f, 1.5f);
      DMat c = dpositive(m, b.seed(46), -0.1f, 0.1f);
      DMat y = dmat(kBF16, m, d), q = dmat(kFP32, ceil_div(m, CODA_PARTIAL_ROWS), d), tmp = dmat(kBF16, m, d);
      const TensorView wt = w.view.transposed();
      dev::LtGemm ref(b.lt(), dz.view, wt, tmp.view, b.ws(), b.ws_bytes(), nullptr);
      // dx accumulated in place over dres, as the block backward runs it
      const RmsNormBackwardArgs args{dz.view, wt, x.view, r.view, c.view, nw.view, dres.view, dres.view, y.view, q.view};
      Row row(name, m, d, k);
      row.cublas_algo = ref.algo_name();
      row.flops = 2.0 * m * d * k;
      row.bytes = 2.0 * (m * k + d * k + 4.0 * m * d) + 4.0 * ceil_div(m, CODA_PARTIAL_ROWS) * d;
      row.note = "dx in place over dres, y and dw partials";
      if (!b.measure(row, [&] { return gemm_rmsnorm_backward(args); }, [&] { ref.run(nullptr); }, {})) return false;
    }
    const std::string name = "op.swiglu_backward" + p + "down";
    if (!b.wanted(name)) continue;
    // dx [M, d] and Wdown [d, F]: do = dx Wdown, its B operand Wdown viewed [F, d]
    DMat dx = drand(kBF16, m, d, b.seed(47), 1.0f), wd = drand(kBF16, d, f, b.seed(48), 0.02f);
    DMat z = drand(kBF16, m, 2 * f, b.seed(49), 1.5f);
    DMat dzo = dmat(kBF16, m, 2 * f), o = dmat(kBF16, m, f), zp = dmat(kFP32, m, ceil_div(f, CODA_PARTIAL_COLS));
    DMat tmp = dmat(kBF16, m, f);
    const TensorView wdt = wd.view.transposed();
    dev::LtGemm ref(b.lt(), dx.view, wdt, tmp.view, b.ws(), b.ws_bytes(), nullptr);
    const SwigluBackwardArgs args{dx.view, wdt, z.view, dzo.view, o.view, zp.view};
    Row row(name, m, f, d);
    row.cublas_algo = ref.algo_name();
    row.flops = 2.0 * m * f * d;
    row.bytes = 2.0 * (m * d + f * d + 5.0 * m * f) + 4.0 * m * ceil_div(f, CODA_PARTIAL_COLS);
    row.note = "dz, o recomputed, ZdZ partials";
    if (!b.measure(row, [&] { return gemm_swiglu_backward(args); }, [&] { ref.run(nullptr); }, {})) return false;
  }
  return true;
}

bool bench_lmhead(Bench& b) {
  const int64_t m = 16384, v = 128256, k = 2048;
  const std::vector<std::string> names = {"op.rmsnorm_lse.lmhead", "lmhead.loss_fwd", "lmhead.train_fwd",
                                          "lmhead.fwdbwd", "lmhead.fwdbwd_logits"};
  bool any = false;
  for (const auto& n : names) any = any || b.wanted(n);
  if (!any) return true;
  DMat a = drand(kBF16, m, k, b.seed(20), 1.0f), w = drand(kBF16, v, k, b.seed(21), 0.1f);
  DMat r = dpositive(m, b.seed(22), 0.5f, 1.5f);
  std::vector<int32_t> t(static_cast<size_t>(m));
  std::mt19937_64 g(b.seed(23));
  for (auto& x : t) x = static_cast<int32_t>(g() % v);
  for (size_t i = 0; i < t.size(); i += 16) t[i] = CODA_IGNORE_INDEX;
  DMat targets = dints(t);
  DMat logits = dmat(kBF16, m, v), part = dmat(kFP32, m, ceil_div(v, CODA_PARTIAL_COLS));
  DMat tl = dmat(kFP32, m, 0), lse = dmat(kFP32, m, 0), loss = dmat(kFP32, 1, 0);
  dev::LtGemm ref(b.lt(), a.view, w.view, logits.view, b.ws(), b.ws_bytes(), nullptr);
  const double flops = 2.0 * m * v * k;
  const LmHeadLseArgs la{a.view, w.view, r.view, targets.view, CODA_IGNORE_INDEX, logits.view, part.view, tl.view};
  if (b.wanted(names[0])) {
    Row row(names[0], m, v, k);
    row.cublas_algo = ref.algo_name();
    row.flops = flops;
    row.bytes = 2.0 * (m * k + v * k + m * v);
    row.note = "logits stored";
    if (!b.measure(row, [&] { return gemm_rmsnorm_lse(la); }, [&] { ref.run(nullptr); }, {}, 7)) return false;
  }
  if (b.wanted(names[1])) {
    const size_t ws_bytes = lm_head_loss_workspace_bytes(m, v);
    Buffer ws(ws_bytes);
    LmHeadLossArgs args;
    args.a = a.view;
    args.b = w.view;
    args.rstd = r.view;
    args.targets = targets.view;
    args.loss_out = loss.view;
    args.workspace = ws.get();
    args.workspace_bytes = ws_bytes;
    Row row(names[1], m, v, k);
    row.cublas_algo = ref.algo_name();
    row.flops = flops;
    row.bytes = 2.0 * (m * k + v * k);
    char note[128];
    std::snprintf(note, sizeof note, "logits-free: extra memory %.2f%% of the bf16 logits",
                  100.0 * double(ws_bytes) / (2.0 * double(m) * double(v)));
    row.note = note;
    if (!b.measure(row, [&] { return lm_head_loss(args); }, [&] { ref.run(nullptr); }, {}, 7)) return false;
  }
  // Training (lm_head_train, coda/ops/cross_entropy.hpp): loss, grad = E - S onehot and the row
  // scale u, so that dlogits = dloss u grad; no pass over the M x V tensor between the GEMMs.
  DMat grad = dmat(kBF16, m, v), u = dmat(kFP32, m, 0), da = dmat(kBF16, m, k), db = dmat(kBF16, v, k);
  Buffer train_ws(lm_head_train_workspace_bytes(m, v)), bwd_ws(lm_head_backward_workspace_bytes(m, k));
  LmHeadTrainArgs ta;
  ta.a = a.view;
  ta.b = w.view;
  ta.targets = targets.view;
  ta.loss_out = loss.view;
  ta.grad_out = grad.view;
  ta.grad_scale_out = u.view;
  ta.workspace = train_ws.get();
  ta.workspace_bytes = lm_head_train_workspace_bytes(m, v);
  LmHeadBackwardArgs ba;
  ba.a = a.view;
  ba.b = w.view;
  ba.grad = grad.view;
  ba.grad_scale = u.view;
  ba.da_out = da.view;
  ba.db_out = db.view;
  ba.workspace = bwd_ws.get();
  ba.workspace_bytes = lm_head_backward_workspace_bytes(m, k);
  const double extra_gib =
      (2.0 * double(m) * double(v) + double(ta.workspace_bytes) + double(ba.workspace_bytes)) / double(1 << 30);
  if (b.wanted(names[2])) {
    LmHeadTrainArgs tr = ta;
    tr.rstd = r.view;
    Row row(names[2], m, v, k);
    row.barred = false;
    row.cublas_algo = ref.algo_name();
    row.flops = flops;
    row.bytes = 2.0 * (m * k + v * k + m * v);
    row.note = "loss, grad and its row scale (lm_head_train)";
    if (!b.measure(row, [&] { return lm_head_train(tr); }, [&] { ref.run(nullptr); }, {}, 7)) return false;
  }
  // Forward + backward of the LM head and its loss (issue 9; h already normalized), through coda's
  // GEMMs; cuBLAS column: the 3 GEMMs alone. Nine samples: one takes ~40 ms and single samples moved
  // +-5% under the H200's power cap (bench/NOTES.md 2026-12-02 afternoon), so five left the ratio's
  // median +-4% between processes.
  dev::LtGemm dgrad(b.lt(), logits.view, w.view.transposed(), da.view, b.ws(), b.ws_bytes(), nullptr);
  dev::LtGemm wgrad(b.lt(), logits.view.transposed(), a.view.transposed(), db.view, b.ws(), b.ws_bytes(), nullptr);
  const std::string algos = ref.algo_name() + "; " + dgrad.algo_name() + "; " + wgrad.algo_name();
  const auto cublas3 = [&] {
    ref.run(nullptr);
    dgrad.run(nullptr);
    wgrad.run(nullptr);
  };
  if (b.wanted(names[3])) {
    Row row(names[3], m, v, k);
    row.cublas_algo = algos;
    row.flops = 3.0 * flops;
    row.bytes = 2.0 * (3.0 * (m * k + v * k) + 3.0 * m * v);
    char note[128];
    std::snprintf(note, sizeof note, "lm_head_train + lm_head_backward; extra memory %.2f GiB", extra_gib);
    row.note = note;
    if (!b.measure(row,
                   [&] {
                     CODA_TRY(lm_head_train(ta));
                     return lm_head_backward(ba);
                   },
                   cublas3, {}, 9))
      return false;
  }
  if (b.wanted(names[4])) {
    // The same with stored logits and dlogits written over them (cross_entropy in place): the design
    // lm_head_train replaced, kept for comparison (reported, no bar).
    CrossEntropyArgs ce;
    ce.lse = lse.view;
    ce.target_logit = tl.view;
    ce.targets = targets.view;
    ce.loss_out = loss.view;
    ce.logits = logits.view;
    ce.dlogits_out = logits.view;
    const LmHeadLseArgs plain{a.view, w.view, {}, targets.view, CODA_IGNORE_INDEX, logits.view, part.view, tl.view};
    Row row(names[4], m, v, k);
    row.barred = false;
    row.cublas_algo = algos;
    row.flops = 3.0 * flops;
    row.bytes = 2.0 * (3.0 * (m * k + v * k) + 3.0 * m * v);
    char note[128];
    std::snprintf(note, sizeof note, "logits stored, dlogits in place; extra memory %.2f GiB (+ %.2f%% partials)",
                  2.0 * double(m) * double(v) / double(1 << 30), 100.0 * 4.0 / (2.0 * CODA_PARTIAL_COLS));
    row.note = note;
    if (!b.measure(row,
                   [&] {
                     CODA_TRY(gemm_lse(plain));
                     CODA_TRY(lse_finish({part.view, lse.view}));
                     CODA_TRY(cross_entropy(ce));
                     CODA_TRY(gemm({logits.view, w.view.transposed(), {}, da.view}));
                     return gemm({logits.view.transposed(), a.view.transposed(), {}, db.view});
                   },
                   cublas3, {}, 9))
      return false;
  }
  return true;
}

// --diag for the blocks: where one block call's time goes, step by step. CUDA events around every
// backend call of the schedule (the steps back to back as in the timed call, the L2 flushed once
// before it); medians over runs.
class StepClock {
 public:
  StepClock() = default;
  StepClock(const StepClock&) = delete;
  StepClock& operator=(const StepClock&) = delete;
  ~StepClock() {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }
  void begin_run() { used_ = 0, names_.clear(); }
  template <class F>
  Status step(std::string name, F&& fn) {
    cudaEvent_t e0 = next(), e1 = next();
    dev::check(cudaEventRecord(e0), "record");
    const Status s = fn();
    dev::check(cudaEventRecord(e1), "record");
    names_.push_back(std::move(name));
    return s;
  }
  // The run's step times (us), appended to each step's samples.
  void end_run() {
    dev::check(cudaDeviceSynchronize(), "sync");
    samples_.resize(names_.size());
    for (size_t i = 0; i < names_.size(); ++i) {
      float ms = 0;
      dev::check(cudaEventElapsedTime(&ms, events_[2 * i], events_[2 * i + 1]), "elapsed");
      samples_[i].push_back(1000.0 * ms);
    }
  }
  // Each step's median (us); clears the samples.
  std::vector<double> medians() {
    std::vector<double> med;
    for (std::vector<double>& v : samples_) {
      std::sort(v.begin(), v.end());
      med.push_back(v[v.size() / 2]);
    }
    samples_.clear();
    return med;
  }
  // The steps' medians next to `cublas_us`, the medians of the same GEMMs through cuBLAS (in the
  // order the schedule runs them).
  void print(const std::string& title, const std::vector<double>& cublas_us) {
    double fused_sum = 0, cublas_sum = 0;
    std::printf("  steps %s (median us; cuBLAS: the same GEMMs alone, back to back)\n", title.c_str());
    const std::vector<double> med = medians();
    size_t g = 0;
    for (size_t i = 0; i < names_.size(); ++i) {
      const double us = med[i];
      fused_sum += us;
      const bool is_gemm = names_[i].find("gemm") != std::string::npos && g < cublas_us.size();
      if (is_gemm) {
        cublas_sum += cublas_us[g];
        std::printf("    %2zu %-58s %9.1f %9.1f %6.3f\n", i, names_[i].c_str(), us, cublas_us[g], us / cublas_us[g]);
        ++g;
      } else {
        std::printf("    %2zu %-58s %9.1f %9s\n", i, names_[i].c_str(), us, "-");
      }
    }
    std::printf("    sum %-57s %9.1f %9.1f %6.3f\n", "", fused_sum, cublas_sum, fused_sum / cublas_sum);
  }

 private:
  cudaEvent_t next() {
    if (used_ == events_.size()) {
      cudaEvent_t e = nullptr;
      dev::check(cudaEventCreate(&e), "event");
      events_.push_back(e);
    }
    return events_[used_++];
  }
  std::vector<cudaEvent_t> events_;
  size_t used_ = 0;
  std::vector<std::string> names_;
  std::vector<std::vector<double>> samples_;
};

// GpuBackend with every call timed by a StepClock; the name says the op and, for the GEMMs, M x N x K.
class TimedBackend {
 public:
  TimedBackend(GpuBackend& be, StepClock& clock) : be_(be), clock_(clock) {}
  void reset() { be_.reset(); }
  Grain grain() const { return be_.grain(); }
  TensorView scratch(DType t, int64_t rows, int64_t cols) { return be_.scratch(t, rows, cols); }

#define CODA_TIMED_GEMM(op, Args)                                                                     \
  Status op(const Args& a) {                                                                         \
    return clock_.step(std::string(#op) + " " + std::to_string(a.a.rows()) + "x" +                     \
                           std::to_string(a.b.rows()) + "x" + std::to_string(a.a.cols()),            \
                       [&] { return be_.op(a); });                                                   \
  }
#define CODA_TIMED(op, Args) \
  Status op(const Args& a) { return clock_.step(#op, [&] { return be_.op(a); }); }
  CODA_TIMED_GEMM(gemm, GemmArgs)
  CODA_TIMED_GEMM(gemm_residual_rmsnorm_partial, ResidualRmsNormPartialArgs)
  CODA_TIMED_GEMM(gemm_swiglu, SwigluArgs)
  CODA_TIMED_GEMM(gemm_rope, RopeArgs)
  CODA_TIMED_GEMM(gemm_rmsnorm_backward, RmsNormBackwardArgs)
  CODA_TIMED_GEMM(gemm_swiglu_backward, SwigluBackwardArgs)
  CODA_TIMED(rms_finish, RmsFinishArgs)
  CODA_TIMED(rope_backward, RopeBackwardArgs)
  CODA_TIMED(row_sum_finish, RowSumFinishArgs)
  CODA_TIMED(col_sum_finish, ColSumFinishArgs)
#undef CODA_TIMED_GEMM
#undef CODA_TIMED

 private:
  GpuBackend& be_;
  StepClock& clock_;
};

bool bench_blocks(Bench& b) {
  cublasHandle_t handle = nullptr;
  dev::check(cublasCreate(&handle), "cublasCreate");
  bool ok = true;
  for (const ModelShape& ms : kModels) {
    const std::string name = std::string("block.") + ms.name + ".fwd";
    const std::string name_fb = std::string("block.") + ms.name + ".fwdbwd";
    const std::string name_rc = name_fb + "_recompute";
    if (!b.wanted(name) && !b.wanted(name_fb) && !b.wanted(name_rc)) continue;
    Llama3Dims d;
    d.tokens = ms.tokens;
    d.hidden = ms.d;
    d.ffn = ms.f;
    d.heads = HeadDims{ms.hq, ms.hkv, ms.hd};
    const int64_t m = d.tokens, n3 = d.heads.qkv_cols();
    DMat wo = drand(kBF16, d.hidden, d.hidden, b.seed(30), 0.03f), wgu = drand(kBF16, 2 * d.ffn, d.hidden, b.seed(31), 0.03f);
    DMat wdown = drand(kBF16, d.hidden, d.ffn, b.seed(32), 0.02f), wqkv = drand(kBF16, n3, d.hidden, b.seed(33), 0.03f);
    DMat n0 = drand(kBF16, d.hidden, 0, b.seed(34), 1.0f), n1 = drand(kBF16, d.hidden, 0, b.seed(35), 1.0f);
    const std::vector<float> fr = rope_frequencies(ms.hd, 500000.0, RopeScaling{8.0, 1.0, 4.0, 8192.0});
    DMat freqs = dmat(kFP32, ms.hd / 2, 0);
    dev::check(cudaMemcpy(freqs.view.data(), fr.data(), fr.size() * 4, cudaMemcpyHostToDevice), "upload");
    DMat x0 = drand(kBF16, m, d.hidden, b.seed(36), 1.0f), y0 = drand(kBF16, m, d.hidden, b.seed(37), 1.0f);
    DMat pos = dints(positions(m));
    DMat x1 = dmat(kBF16, m, d.hidden), x2 = dmat(kBF16, m, d.hidden), z1 = dmat(kBF16, m, 2 * d.ffn);
    DMat qkv = dmat(kBF16, m, n3), r1 = dmat(kFP32, m, 0), r2 = dmat(kFP32, m, 0);
    DMat h = dmat(kBF16, m, d.hidden), y1 = dmat(kBF16, m, d.ffn);
    const Llama3Weights w{wo.view, wgu.view, wdown.view, wqkv.view, n0.view, n1.view, freqs.view};
    const Llama3Activations act{x0.view, y0.view, pos.view, x1.view, x2.view, z1.view, qkv.view, r1.view, r2.view, {}};
    // Its GEMMs alone, each with cuBLAS's best algorithm.
    dev::LtGemm g1(b.lt(), y0.view, wo.view, x1.view, b.ws(), b.ws_bytes(), nullptr);
    dev::LtGemm g2(b.lt(), h.view, wgu.view, z1.view, b.ws(), b.ws_bytes(), nullptr);
    dev::LtGemm g3(b.lt(), y1.view, wdown.view, x2.view, b.ws(), b.ws_bytes(), nullptr);
    dev::LtGemm g4(b.lt(), h.view, wqkv.view, qkv.view, b.ws(), b.ws_bytes(), nullptr);
    GpuBackend fused_be, unfused_be;
    // The training block keeps the SwiGLU output y1 for the backward (Llama3Activations::y1: M x F
    // more saved memory, a third fewer stores in the SwiGLU backward); the _recompute row runs the
    // schedule without it (y1 recomputed by the SwiGLU backward), for comparison. Its unfused
    // column makes the same choice.
    Llama3Activations act_kept = act;
    act_kept.y1 = y1.view;
    if (b.wanted(name_fb) || b.wanted(name_rc)) {  // forward + backward (issue 9) against the block's 12 GEMMs alone
      DMat dx2 = drand(kBF16, m, d.hidden, b.seed(38), 1.0f), dqkv = drand(kBF16, m, n3, b.seed(39), 1.0f);
      DMat dx0 = dmat(kBF16, m, d.hidden), dy0 = dmat(kBF16, m, d.hidden);
      DMat dwo = dmat(kBF16, d.hidden, d.hidden), dwgu = dmat(kBF16, 2 * d.ffn, d.hidden);
      DMat dwdown = dmat(kBF16, d.hidden, d.ffn), dwqkv = dmat(kBF16, n3, d.hidden);
      DMat dn0 = dmat(kBF16, d.hidden, 0), dn1 = dmat(kBF16, d.hidden, 0);
      DMat dz1 = dmat(kBF16, m, 2 * d.ffn), dx = dmat(kBF16, m, d.hidden);
      const Llama3Grads g{dx2.view, dqkv.view, dx0.view, dy0.view, dwo.view, dwgu.view, dwdown.view, dwqkv.view,
                          dn0.view, dn1.view};
      // Each forward GEMM Y = X W^T, its dgrad dX = dY W and its wgrad dW = dY^T X, with cuBLAS's
      // best algorithm (operands of the right shapes; the values do not matter for the time).
      struct Linear {
        TensorView x, w, y, dy, dx, dw;
      };
      const Linear lin[4] = {{y0.view, wo.view, x1.view, dx2.view, dy0.view, dwo.view},
                             {h.view, wgu.view, z1.view, dz1.view, dx.view, dwgu.view},
                             {y1.view, wdown.view, x2.view, dx.view, y1.view, dwdown.view},
                             {h.view, wqkv.view, qkv.view, dqkv.view, dx.view, dwqkv.view}};
      std::vector<std::unique_ptr<dev::LtGemm>> gemms;
      for (const Linear& l : lin) {
        gemms.push_back(std::make_unique<dev::LtGemm>(b.lt(), l.x, l.w, l.y, b.ws(), b.ws_bytes(), nullptr));
        gemms.push_back(
            std::make_unique<dev::LtGemm>(b.lt(), l.dy, l.w.transposed(), l.dx, b.ws(), b.ws_bytes(), nullptr));
        gemms.push_back(std::make_unique<dev::LtGemm>(b.lt(), l.dy.transposed(), l.x.transposed(), l.dw, b.ws(),
                                                      b.ws_bytes(), nullptr));
      }
      // The cuBLAS column runs them in the schedule's order: forward o-proj, gate/up, down, QKV; then
      // backward QKV, down, gate/up, o-proj, each dgrad then wgrad (gemms[3 l + 1], gemms[3 l + 2]).
      // NOTES: until 2026-12-02 it ran them per linear (forward, dgrad, wgrad of each), an order no
      // block can run, whose neighbours share operands in L2 (bench/NOTES.md).
      std::vector<dev::LtGemm*> order;
      for (int l = 0; l < 4; ++l) order.push_back(gemms[3 * l].get());
      for (int l = 3; l >= 0; --l) {
        order.push_back(gemms[3 * l + 1].get());
        order.push_back(gemms[3 * l + 2].get());
      }
      const std::function<void()> schedule = [&] {
        for (dev::LtGemm* gm : order) gm->run(nullptr);
      };
      for (const bool keep : {true, false}) {
        if (!b.wanted(keep ? name_fb : name_rc)) continue;
        const Llama3Activations& a = keep ? act_kept : act;
        Row fb(keep ? name_fb : name_rc, m, d.hidden, d.ffn);
        fb.barred = keep;
        fb.flops = 3 * 2.0 * m * d.hidden * (d.hidden + 2 * d.ffn + d.ffn + n3);
        fb.note = std::string(keep ? "y1 kept by the forward" : "y1 recomputed by the SwiGLU backward") +
                  "; cuBLAS column: the block's 12 GEMMs alone in the schedule's order (4 forward; dgrad and wgrad of each, in reverse); unfused: cuBLAS + elementwise kernels";
        ok = b.measure(fb,
                       [&] {
                         fused_be.reset();
                         CODA_TRY(llama3_forward(fused_be, d, w, a));
                         return llama3_backward(fused_be, d, w, a, g);
                       },
                       schedule,
                       [&] {
                         unfused_be.reset();
                         CODA_TRY(llama3_forward_unfused(unfused_be, handle, d, w, a));
                         return llama3_backward_unfused(unfused_be, handle, d, w, a, g);
                       });
        if (!ok) break;
      }
      if (!ok) break;
      if (b.diag() && b.wanted(name_fb)) {
        StepClock fused_clock, cublas_clock;
        TimedBackend timed(fused_be, fused_clock);
        for (int r = 0; r < 7; ++r) {
          b.timer().once_us(
              [&] {
                fused_clock.begin_run();
                timed.reset();
                (void)llama3_forward(timed, d, w, act_kept);
                (void)llama3_backward(timed, d, w, act_kept, g);
              },
              r);
          fused_clock.end_run();
          b.timer().once_us(
              [&] {
                cublas_clock.begin_run();
                for (dev::LtGemm* gm : order)
                  (void)cublas_clock.step("cublas", [&] {
                    gm->run(nullptr);
                    return Status{};
                  });
              },
              r);
          cublas_clock.end_run();
        }
        fused_clock.print(name_fb, cublas_clock.medians());
        // The cuBLAS column's order against one linear layer at a time (forward, dgrad, wgrad of
        // each: the column's order before 2026-12-02).
        const std::function<void()> per_linear = [&] {
          for (const auto& gm : gemms) gm->run(nullptr);
        };
        const std::vector<double> o = b.timer().median_us_interleaved({schedule, per_linear}, 9);
        std::printf("  order %s (median us): cuBLAS in the schedule's order %.1f, one linear layer at a time %.1f\n",
                    name_fb.c_str(), o[0], o[1]);
      }
    }
    if (!b.wanted(name)) continue;
    Row row(name, m, d.hidden, d.ffn);
    row.cublas_algo = g1.algo_name() + "; " + g2.algo_name() + "; " + g3.algo_name() + "; " + g4.algo_name();
    row.flops = 2.0 * m * d.hidden * (d.hidden + 2 * d.ffn + d.ffn + n3);
    row.bytes = 2.0 * (d.hidden * (d.hidden + 3 * d.ffn + n3) + m * (2 * d.hidden + 2 * d.hidden + 2 * d.ffn + n3)) +
                8.0 * m;
    row.note = "cuBLAS column: the block's 4 GEMMs alone; unfused: cuBLAS + elementwise kernels";
    ok = b.measure(row,
                   [&] {
                     fused_be.reset();
                     return llama3_forward(fused_be, d, w, act);
                   },
                   [&] {
                     g1.run(nullptr);
                     g2.run(nullptr);
                     g3.run(nullptr);
                     g4.run(nullptr);
                   },
                   [&] {
                     unfused_be.reset();
                     return llama3_forward_unfused(unfused_be, handle, d, w, act);
                   });
    if (!ok) break;
  }
  cublasDestroy(handle);
  return ok;
}

}  // namespace

bool run_fused_bench(const Options& opt, Timer& timer, const Ceilings& ceil, uint64_t seed, std::string& json) {
  Bench b(opt, timer, ceil, seed);
  b.header();
  const bool ok = bench_ops(b) && bench_backward_ops(b) && bench_lmhead(b) && bench_blocks(b);
  b.json(json);
  // Bars (issue 8): every fused GEMM operator (op.*) <= 1.08x its plain cuBLAS GEMM with a geomean
  // <= 1.04x, the block forward <= 1.06x its GEMMs, the LM-head loss forward <= 1.08x.
  // The backward operators (issue 9) have no per-operator bar; their geomean is reported apart.
  int over = 0, ops = 0, bwd = 0;
  double log_sum = 0.0, bwd_log_sum = 0.0;
  for (const Row& r : b.rows()) {
    const double bar = r.name.rfind("block.", 0) == 0 ? 1.06 : 1.08;
    if (!r.barred) continue;  // reported for comparison
    if (r.name.find("_backward.") != std::string::npos) {
      ++bwd;
      bwd_log_sum += std::log(r.us / r.cublas_us);
      continue;
    }
    if (r.name.rfind("op.", 0) == 0) {
      ++ops;
      log_sum += std::log(r.us / r.cublas_us);
    }
    if (r.us / r.cublas_us > bar) {
      ++over;
      std::printf("  over the bar: %s %.3f > %.2f\n", r.name.c_str(), r.us / r.cublas_us, bar);
    }
  }
  if (ops > 0)
    std::printf("fused operators (op.*): geomean %.3f x cuBLAS (bar 1.04)\n", std::exp(log_sum / ops));
  if (bwd > 0)
    std::printf("backward operators (op.*_backward.*): geomean %.3f x cuBLAS\n", std::exp(bwd_log_sum / bwd));
  if (!b.rows().empty())
    std::printf("fused cases over their bar (x cuBLAS): %d of %zu\n", over, b.rows().size());
  return ok;
}

}  // namespace coda::cli
