// Shared pieces of the GPU benchmarks: the L2-flushing event timer, the run's ceilings, filters.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "cli.hpp"
#include "coda/device_util.hpp"

namespace coda::cli {

using dev::Buffer;

class Timer {
 public:
  explicit Timer(size_t flush_bytes) : flush_(flush_bytes) {
    dev::check(cudaEventCreate(&e0_), "event");
    dev::check(cudaEventCreate(&e1_), "event");
  }
  ~Timer() {
    cudaEventDestroy(e0_);
    cudaEventDestroy(e1_);
  }
  // One timed run (us) of fn after an L2 flush.
  double once_us(const std::function<void()>& fn, int salt) {
    dev::check(cudaMemsetAsync(flush_.get(), salt & 0xff, flush_.bytes()), "flush");
    dev::check(cudaEventRecord(e0_), "record");
    fn();
    dev::check(cudaEventRecord(e1_), "record");
    dev::check(cudaEventSynchronize(e1_), "sync");
    float ms = 0;
    dev::check(cudaEventElapsedTime(&ms, e0_, e1_), "elapsed");
    return 1000.0 * ms;
  }
  // Median time (us) of `reps` runs of fn, L2 flushed before each.
  double median_us(const std::function<void()>& fn, int reps, int warmup = 2) {
    return median_us_interleaved({fn}, reps, warmup)[0];
  }
  // Medians of several functions timed round-robin (fn0, fn1, ..., fn0, ...), so that clock and
  // temperature drift during the measurement affects each of them alike.
  std::vector<double> median_us_interleaved(const std::vector<std::function<void()>>& fns, int reps, int warmup = 2) {
    for (const auto& fn : fns)
      for (int i = 0; i < warmup; ++i) fn();
    std::vector<std::vector<double>> t(fns.size());
    if (const char* e = std::getenv("CODA_BENCH_REPS")) reps = std::max(reps, std::atoi(e));
    for (int r = 0; r < reps; ++r)
      for (size_t i = 0; i < fns.size(); ++i) t[i].push_back(once_us(fns[i], r));
    if (std::getenv("CODA_BENCH_SAMPLES")) {  // every sample in run order, one line per function
      for (size_t i = 0; i < t.size(); ++i) {
        std::fprintf(stderr, "samples %zu:", i);
        for (double x : t[i]) std::fprintf(stderr, " %.1f", x);
        std::fprintf(stderr, "\n");
      }
    }
    std::vector<double> med;
    for (auto& v : t) {
      std::sort(v.begin(), v.end());
      med.push_back(v[v.size() / 2]);
    }
    return med;
  }

 private:
  Buffer flush_;
  cudaEvent_t e0_, e1_;
};

struct Ceilings {
  double copy_gbps = 0;  // bytes read + written per second / 1e9
  double gemm_tflops = 0;
};


inline double geomean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += std::log(x);
  return v.empty() ? 0.0 : std::exp(s / double(v.size()));
}

inline bool selected(const Options& opt, const std::string& name) {
  if (opt.filters.empty()) return true;
  for (const std::string& f : opt.filters)
    if (name.find(f) != std::string::npos) return true;
  return false;
}


// ---- device data for the benchmarks (bench_fused.cpp, bench_unfused.cpp) ------------------------

// A device matrix (16-byte-padded rows) or vector that owns its memory. Tile tensors get
// 16-byte-aligned rows (TMA); fp32 matrices are partials, which are dense.
struct DMat {
  Buffer buf;
  TensorView view;
};
inline DMat dmat(DType t, int64_t rows, int64_t cols) {
  const int64_t per16 = 16 / static_cast<int64_t>(dtype_size(t));
  const int64_t c = cols == 0 ? 1 : cols;
  const int64_t ld = t == DType::kFP32 ? c : (c + per16 - 1) / per16 * per16;
  DMat m{Buffer(static_cast<size_t>(std::max<int64_t>(rows, 1) * ld) * dtype_size(t)), {}};
  m.view = cols == 0 ? TensorView::vector(m.buf.get(), t, rows) : TensorView::matrix(m.buf.get(), t, rows, cols, ld);
  return m;
}
// Uniform random values in [-scale, scale).
inline DMat drand(DType t, int64_t rows, int64_t cols, uint64_t seed, float scale) {
  DMat m = dmat(t, rows, cols);
  dev::fill_uniform(cols == 0 ? TensorView::matrix(m.view.data(), t, 1, rows) : m.view, seed, scale);
  return m;
}

// The LLaMA-3 shapes of design.md 8.
struct ModelShape {
  const char* name;
  int64_t tokens, d, f, hq, hkv, hd;
};
inline constexpr ModelShape kModels[] = {{"1b", 16384, 2048, 8192, 32, 8, 64}, {"8b", 8192, 4096, 14336, 32, 8, 128}};

// The fused benchmarks (op.*, block.*, lmhead.*): appends JSON records (without the brackets) to
// `json` and returns false on a failure (message printed).
bool run_fused_bench(const Options& opt, Timer& timer, const Ceilings& ceil, uint64_t seed, std::string& json);
// The unfused elementwise kernels (unfused.*) against the copy bandwidth; same contract.
bool run_unfused_bench(const Options& opt, Timer& timer, const Ceilings& ceil, uint64_t seed, std::string& json);

}  // namespace coda::cli
