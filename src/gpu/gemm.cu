// GEMM host entry points: validation -> config (heuristic or autotune cache) -> launch.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "coda/gpu.hpp"
#include "gemm_instances.hpp"
#include "launch_host.hpp"

namespace coda::sm90 {
CODA_GEMM_FORMS(CODA_GEMM_EXTERN)
}  // namespace coda::sm90

namespace coda {
namespace {

using namespace gpu_host;
using sm90::EpiParams;
using sm90::LaunchArgs;

// ---- dispatch over the compiled kernels -----------------------------------------------------------

template <class Program>
Status dispatch(const GemmProblem& prob, const LaunchArgs<Program>& L, cudaStream_t s) {
  using sm90::launch_variant;
  const int v = static_cast<int>(L.config.variant);
  const bool bf16 = prob.in == DType::kBF16;
#define CODA_DISPATCH_VARIANT(E, AK, BK)                                              \
  switch (v) {                                                                        \
    case 0: return launch_variant<E, AK, BK, 0, Program>(L, s);                       \
    case 1: return launch_variant<E, AK, BK, 1, Program>(L, s);                       \
    default: return launch_variant<E, AK, BK, 2, Program>(L, s);                      \
  }
#define CODA_DISPATCH_FORM(E)                                                         \
  switch (prob.form) {                                                                \
    case GemmForm::kTN: CODA_DISPATCH_VARIANT(E, true, true)                          \
    case GemmForm::kTT: CODA_DISPATCH_VARIANT(E, true, false)                         \
    case GemmForm::kNT: CODA_DISPATCH_VARIANT(E, false, false)                        \
  }
  if (bf16) {
    CODA_DISPATCH_FORM(cutlass::bfloat16_t)
  } else {
    CODA_DISPATCH_FORM(cutlass::half_t)
  }
#undef CODA_DISPATCH_FORM
#undef CODA_DISPATCH_VARIANT
  return Status::internal("gemm: no kernel for " + prob.describe());
}

// ---- config choice: heuristic, or the autotune cache ----------------------------------------------


std::string cache_path() {
  if (const char* p = std::getenv("CODA_AUTOTUNE_CACHE")) return p;
  if (const char* x = std::getenv("XDG_CACHE_HOME")) return std::string(x) + "/coda-autotune.tsv";
  if (const char* h = std::getenv("HOME")) return std::string(h) + "/.cache/coda-autotune.tsv";
  return "coda-autotune.tsv";
}

std::string device_name() {
  int dev = 0;
  cudaGetDevice(&dev);
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, dev);
  std::string n = prop.name;
  for (char& c : n)
    if (c == '\t' || c == '\n') c = ' ';
  return n;
}

std::string cache_key(const GemmProblem& p) {
  std::ostringstream s;
  s << device_name() << '\t' << p.op << '\t' << static_cast<int>(p.form) << '\t' << p.m << '\t' << p.n << '\t'
    << p.k << '\t' << dtype_name(p.in) << '\t' << dtype_name(p.out);
  return s.str();
}

class AutotuneCache {
 public:
  bool find(const std::string& key, GemmConfig* c) {
    std::lock_guard<std::mutex> lock(mu_);
    load();
    auto it = entries_.find(key);
    if (it == entries_.end()) return false;
    *c = it->second;
    return true;
  }
  void put(const std::string& key, const GemmConfig& c) {
    std::lock_guard<std::mutex> lock(mu_);
    load();
    entries_[key] = c;
    std::ofstream f(cache_path(), std::ios::app);
    if (f) f << key << '\t' << static_cast<int>(c.variant) << '\t' << c.swizzle << '\t' << (c.raster_n ? 1 : 0) << '\n';
  }

 private:
  void load() {
    if (loaded_) return;
    loaded_ = true;
    std::ifstream f(cache_path());
    std::string line;
    while (std::getline(f, line)) {
      std::vector<std::string> cols;
      std::stringstream ss(line);
      std::string c;
      while (std::getline(ss, c, '\t')) cols.push_back(c);
      if (cols.size() != 11) continue;
      GemmConfig g;
      const int v = std::atoi(cols[8].c_str());
      if (v < 0 || v >= static_cast<int>(KernelVariant::kCount)) continue;
      g.variant = static_cast<KernelVariant>(v);
      g.swizzle = std::max(1, std::atoi(cols[9].c_str()));
      g.raster_n = cols[10] == "1";
      std::string key = cols[0];
      for (int i = 1; i < 8; ++i) key += '\t' + cols[static_cast<size_t>(i)];
      entries_[key] = g;
    }
  }
  std::mutex mu_;
  bool loaded_ = false;
  std::map<std::string, GemmConfig> entries_;
};

AutotuneCache& cache() {
  static AutotuneCache c;
  return c;
}

std::vector<GemmConfig> candidates() {
  std::vector<GemmConfig> out;
  for (int v = 0; v < static_cast<int>(KernelVariant::kCount); ++v)
    for (int sw : {1, 2, 4, 8, 16})
      for (bool rn : {false, true}) out.push_back(GemmConfig{static_cast<KernelVariant>(v), sw, rn});
  return out;
}

// Measure every candidate once (plain program into a scratch output) and keep the fastest.
template <class Program>
GemmConfig autotune(const GemmProblem& prob, LaunchArgs<Program> L, const TensorView& d, cudaStream_t s) {
  GemmConfig best = L.config;
  void* scratch = nullptr;
  const size_t bytes = static_cast<size_t>(d.rows()) * static_cast<size_t>(d.stride(0)) * d.element_size();
  if (cudaMalloc(&scratch, bytes) != cudaSuccess) {
    cudaGetLastError();
    return best;
  }
  LaunchArgs<programs::Identity> T;
  T.a = L.a;
  T.lda = L.lda;
  T.b = L.b;
  T.ldb = L.ldb;
  T.m = L.m;
  T.n = L.n;
  T.k = L.k;
  TensorView sd = d;
  sd.desc.data = scratch;
  if (!bind_output(T.epi, 0, sd, "gemm(autotune)").ok()) {
    cudaFree(scratch);
    return best;
  }
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  float best_ms = 1e30f;
  for (const GemmConfig& c : candidates()) {
    T.config = c;
    if (!dispatch(prob, T, s).ok()) continue;  // warm-up
    std::vector<float> times;
    for (int r = 0; r < 5; ++r) {
      cudaEventRecord(e0, s);
      dispatch(prob, T, s);
      cudaEventRecord(e1, s);
      cudaEventSynchronize(e1);
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      times.push_back(ms);
    }
    std::sort(times.begin(), times.end());
    if (times[2] < best_ms) {
      best_ms = times[2];
      best = c;
    }
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(scratch);
  cudaGetLastError();
  return best;
}

void maybe_print(const GemmProblem& prob, const GemmConfig& c, const char* source) {
  if (!env_on("CODA_PRINT_CONFIG")) return;
  static std::mutex mu;
  static std::set<std::string> seen;
  std::lock_guard<std::mutex> lock(mu);
  const std::string line = prob.describe() + " -> " + c.describe() + " [" + source + "]";
  if (seen.insert(line).second) std::fprintf(stderr, "coda: %s\n", line.c_str());
}

template <class Program>
GemmConfig select_config(const GemmProblem& prob, const LaunchArgs<Program>& L, const TensorView& d,
                         cudaStream_t s) {
  GemmConfig c = choose_config(prob);
  const char* source = "heuristic";
  if (env_on("CODA_AUTOTUNE")) {
    const std::string key = cache_key(prob);
    if (cache().find(key, &c)) {
      source = "autotune cache";
    } else {
      LaunchArgs<Program> T = L;
      T.config = c;
      c = autotune(prob, T, d, s);
      cache().put(key, c);
      source = "autotuned now";
    }
  }
  maybe_print(prob, c, source);
  return c;
}

// ---- the GEMM entry ---------------------------------------------------------------------------------


Status gemm_impl(const GemmArgs& args, const GemmConfig* forced, GemmConfig* chosen, cudaStream_t stream) {
  CODA_TRY(validate(args));
  const bool plain = !args.c.defined() && args.alpha == 1.0f && !args.alpha_ptr && !args.beta_ptr;
  const char* op = plain ? "gemm" : "gemm_ex";
  const int64_t m = args.a.rows(), n = args.b.rows(), k = args.a.cols();
  if (m == 0 || n == 0) return {};
  CODA_TRY(device_prologue(op, {{"a", args.a}, {"b", args.b}, {"c", args.c}, {"d", args.d}}));

  const bool ak = k_major(args.a), bk = k_major(args.b);
  GemmProblem prob;
  prob.m = m;
  prob.n = n;
  prob.k = k;
  prob.in = args.a.dtype();
  prob.out = args.d.dtype();
  prob.op = op;
  prob.sm_count = sm_count();
  prob.dram_gbps = dram_gbps();
  if (ak && bk) prob.form = GemmForm::kTN;
  else if (ak && !bk) prob.form = GemmForm::kTT;
  else if (!ak && !bk) prob.form = GemmForm::kNT;
  else
    return Status::not_supported(std::string(op) +
                                 ": argument 'a' is M-major while 'b' is K-major; the compiled forms are forward "
                                 "(both K-major), dgrad (b N-major) and wgrad (a M-major, b N-major)");

  auto fill = [&](auto& L) -> Status {
    L.debug = debug_flags();
    L.a = args.a.data();
    L.lda = lead_stride(args.a, ak);
    L.b = args.b.data();
    L.ldb = lead_stride(args.b, bk);
    L.m = m;
    L.n = n;
    L.k = k;
    return bind_output(L.epi, 0, args.d, op);
  };
  if (plain) {
    LaunchArgs<programs::Identity> L;
    CODA_TRY(fill(L));
    L.config = forced ? *forced : select_config(prob, L, args.d, stream);
    if (chosen) {
      *chosen = L.config;
      return {};
    }
    return dispatch(prob, L, stream);
  }
  using P = programs::LinearCombination;
  LaunchArgs<P> L;
  CODA_TRY(fill(L));
  L.program.flags |= args.c.defined() ? P::kHasC : 0u;
  L.epi.scalars[P::kAlpha] = {args.alpha, args.alpha_ptr};
  L.epi.scalars[P::kBeta] = {args.beta, args.beta_ptr};
  if (args.c.defined()) {
    bind_tile(L.epi, P::kTileC, args.c);
  }
  L.config = forced ? *forced : select_config(prob, L, args.d, stream);
  if (chosen) {
    *chosen = L.config;
    return {};
  }
  return dispatch(prob, L, stream);
}

}  // namespace

Status gemm(const GemmArgs& args, cudaStream_t stream) { return gemm_impl(args, nullptr, nullptr, stream); }

Status gemm_config(const GemmArgs& args, GemmConfig* config) {
  if (!config) return Status::invalid_argument("gemm_config: argument 'config' is null");
  return gemm_impl(args, nullptr, config, nullptr);
}

Status gemm_with_config(const GemmArgs& args, const GemmConfig& config, cudaStream_t stream) {
  if (static_cast<int>(config.variant) < 0 || config.variant >= KernelVariant::kCount || config.swizzle < 1)
    return Status::invalid_argument("gemm_with_config: argument 'config' names no compiled variant");
  return gemm_impl(args, &config, nullptr, stream);
}

}  // namespace coda
