// `coda bench`, unfused part: the straightforward elementwise kernels behind `vs_unfused`
// (unfused::add, rmsnorm, swiglu, rope) against the device copy bandwidth measured in this run, so
// that `x unfused` is known to compare against a competent unfused path. Bar (issue 8): each
// reaches at least 80% of the copy bandwidth. Same method as the other tables: L2 flushed before
// every rep, medians.
#include <algorithm>
#include <cstdio>
#include <sstream>

#include "bench_util.hpp"
#include "coda/gpu.hpp"

namespace coda::cli {
namespace {

constexpr DType kBF16 = DType::kBF16;
constexpr DType kFP32 = DType::kFP32;
constexpr double kBarPct = 80.0;

DMat dupload(DType t, const void* host, int64_t n) {
  DMat m = dmat(t, n, 0);
  dev::check(cudaMemcpy(m.view.data(), host, static_cast<size_t>(n) * dtype_size(t), cudaMemcpyHostToDevice),
             "upload");
  return m;
}

struct Row {
  std::string name;
  int64_t m, n;
  double bytes;  // read + written, each tensor once
  double us = 0;
};

class Bench {
 public:
  Bench(const Options& opt, Timer& timer, const Ceilings& ceil, uint64_t seed)
      : opt_(opt), timer_(timer), ceil_(ceil), seed_(seed) {}
  uint64_t seed(uint64_t salt) const { return seed_ * 0x9E3779B97F4A7C15ull + salt; }
  bool wanted(const std::string& name) const { return selected(opt_, name); }

  // Checks that `fn` runs, then times it: 10 warm-up runs and 51 reps, since these kernels take
  // 37-190 us (NOTES: 2 / 21 and 10 / 51 measured alike on an H200, 56e4474; the 1B add still reads
  // 52 us in some processes and 59 us in others).
  bool measure(Row r, const std::function<Status()>& fn, int reps = 51) {
    const Status s = fn();
    const cudaError_t e = cudaDeviceSynchronize();
    if (!s.ok() || e != cudaSuccess) {
      std::fprintf(stderr, "coda bench: %s: %s\n", r.name.c_str(),
                   s.ok() ? cudaGetErrorString(e) : s.message().c_str());
      return false;
    }
    r.us = timer_.median_us([&] { fn(); }, reps, 10);
    rows_.push_back(r);
    std::printf("%-24s %6ld %6ld %9.1f %8.0f %7.1f\n", r.name.c_str(), long(r.m), long(r.n), r.us, gbps(r),
                copy_pct(r));
    std::fflush(stdout);
    return true;
  }
  void header() const {
    std::printf("\n%-24s %6s %6s %9s %8s %7s\n", "unfused kernel", "M", "N", "time us", "GB/s", "%copy");
  }
  double gbps(const Row& r) const { return r.bytes / (r.us * 1e3); }
  double copy_pct(const Row& r) const { return 100.0 * gbps(r) / ceil_.copy_gbps; }
  void json(std::string& out) const {
    std::ostringstream f;
    for (const Row& r : rows_)
      f << ",\n    {\"name\": " << json_str(r.name) << ", \"m\": " << r.m << ", \"n\": " << r.n
        << ", \"k\": 0, \"time_us\": " << r.us << ", \"gbps\": " << gbps(r) << ", \"copy_pct\": " << copy_pct(r)
        << ", \"bytes\": " << r.bytes << "}";
    out += f.str();
  }
  const std::vector<Row>& rows() const { return rows_; }

 private:
  const Options& opt_;
  Timer& timer_;
  Ceilings ceil_;
  uint64_t seed_;
  std::vector<Row> rows_;
};

bool bench_kernels(Bench& b) {
  for (const ModelShape& ms : kModels) {
    const int64_t m = ms.tokens, d = ms.d, f = ms.f;
    const std::string p = std::string(".") + ms.name;
    const std::string add = "unfused.add" + p;
    if (b.wanted(add)) {
      DMat x = drand(kBF16, m, d, b.seed(1), 1.0f), y = drand(kBF16, m, d, b.seed(2), 1.0f), o = dmat(kBF16, m, d);
      if (!b.measure({add, m, d, 2.0 * 3 * m * d}, [&] { return unfused::add(x.view, y.view, o.view); })) return false;
    }
    const std::string rms = "unfused.rmsnorm" + p;
    if (b.wanted(rms)) {
      DMat x = drand(kBF16, m, d, b.seed(3), 1.0f), w = drand(kBF16, d, 0, b.seed(4), 1.0f);
      DMat o = dmat(kBF16, m, d), r = dmat(kFP32, m, 0);
      if (!b.measure({rms, m, d, 2.0 * (2 * m * d + d) + 4.0 * m},
                     [&] { return unfused::rmsnorm(x.view, w.view, 1e-5f, o.view, r.view); }))
        return false;
    }
    const std::string sw = "unfused.swiglu" + p;
    if (b.wanted(sw)) {
      DMat z = drand(kBF16, m, 2 * f, b.seed(5), 2.0f), o = dmat(kBF16, m, f);
      if (!b.measure({sw, m, 2 * f, 2.0 * 3 * m * f}, [&] { return unfused::swiglu(z.view, o.view); })) return false;
    }
    const std::string rope = "unfused.rope" + p;
    if (b.wanted(rope)) {
      const HeadDims heads{ms.hq, ms.hkv, ms.hd};
      std::vector<int32_t> pos(static_cast<size_t>(m));
      for (int64_t i = 0; i < m; ++i) pos[static_cast<size_t>(i)] = static_cast<int32_t>(i % 8192);
      const std::vector<float> fr = rope_frequencies(ms.hd, 500000.0, RopeScaling{8.0, 1.0, 4.0, 8192.0});
      DMat qkv = drand(kBF16, m, heads.qkv_cols(), b.seed(6), 1.0f);
      DMat dpos = dupload(DType::kInt32, pos.data(), m), freqs = dupload(kFP32, fr.data(), ms.hd / 2);
      // In place: the q and k columns are read and written, v is untouched.
      const double bytes = 2.0 * 2 * m * heads.rope_cols() + 4.0 * m + 4.0 * (ms.hd / 2);
      if (!b.measure({rope, m, heads.qkv_cols(), bytes},
                     [&] { return unfused::rope(qkv.view, dpos.view, freqs.view, heads); }))
        return false;
    }
  }
  return true;
}

}  // namespace

bool run_unfused_bench(const Options& opt, Timer& timer, const Ceilings& ceil, uint64_t seed, std::string& json) {
  Bench b(opt, timer, ceil, seed);
  b.header();
  const bool ok = bench_kernels(b);
  b.json(json);
  if (b.rows().empty()) return ok;
  double worst = 1e30;
  for (const Row& r : b.rows()) {
    worst = std::min(worst, b.copy_pct(r));
    if (b.copy_pct(r) < kBarPct)
      std::printf("  under the bar: %s %.1f%% of copy bandwidth < %.0f%%\n", r.name.c_str(), b.copy_pct(r), kBarPct);
  }
  std::printf("unfused kernels: worst %.1f%% of copy bandwidth (bar %.0f%%)\n", worst, kBarPct);
  return ok;
}

}  // namespace coda::cli
