// coda: the command-line tool. `coda --help` for usage.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <string>

#include "cli.hpp"
#include "coda/coda.h"
#include "coda/ref/block_check.hpp"

#include "coda_commit.h"  // generated at build time (cmake/commit.cmake)

namespace coda::cli {

std::string git_commit() { return CODA_GIT_COMMIT; }

std::string now_iso8601() {
  char buf[32];
  const std::time_t t = std::time(nullptr);
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o + "\"";
}

namespace {

const char* kUsage =
    "coda %s: Transformer memory-bound work fused into Hopper GEMM epilogues\n"
    "\n"
    "usage: coda <command> [options]\n"
    "\n"
    "commands:\n"
    "  bench     the benchmarks: on a Hopper (sm_90) GPU, coda's GEMMs against cuBLAS (time, TFLOP/s, GB/s,\n"
    "            %% of speed of light, ratio to cuBLAS). Without one: the CPU emulator runs the LLaMA-3 block\n"
    "            forward and backward against the float64 unfused block and prints a per-operator error table.\n"
    "            Positional arguments filter the cases by name (e.g. coda bench 1b.oproj lmhead)\n"
    "  check     correctness checks (the same block check; exit status 1 if any output is out of tolerance)\n"
    "  info      version, build and device\n"
    "  help      this text\n"
    "\n"
    "options:\n"
    "  --json FILE        also write the results as JSON\n"
    "  --emulate          use the CPU emulator even when a Hopper GPU is present\n"
    "  --diag             bench: also time each GEMM without its epilogue program and without its epilogue,\n"
    "                     and each block's schedule step by step next to the same GEMMs through cuBLAS\n"
    "  --variants         bench: also time each GEMM and fused case on every compiled kernel variant,\n"
    "                     interleaved with cuBLAS in one measurement\n"
    "  --seed N           fixed random seed (default: fresh each run)\n"
    "  --tokens M --hidden D --ffn F --heads HQ --kv-heads HKV --head-dim HD\n"
    "                     block shape for the emulated check (default: 77 256 512 4 2 64)\n";

int usage(FILE* f, int code) {
  std::fprintf(f, kUsage, coda_version_string());
  return code;
}

bool parse(int argc, char** argv, Options& o, std::string& err) {
  o.dims = default_check_dims();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](int64_t& dst) {
      if (i + 1 >= argc) {
        err = "option " + a + " needs a value";
        return false;
      }
      char* end = nullptr;
      dst = std::strtoll(argv[++i], &end, 10);
      if (!end || *end != '\0' || dst < 0) {
        err = "option " + a + " needs a non-negative integer, got '" + argv[i] + "'";
        return false;
      }
      return true;
    };
    int64_t v = 0;
    if (a == "--help" || a == "-h") {
      o.command = "help";
    } else if (a == "--json") {
      if (i + 1 >= argc) {
        err = "option --json needs a file name";
        return false;
      }
      o.json_path = argv[++i];
    } else if (a == "--emulate") {
      o.emulate = true;
    } else if (a == "--diag") {
      o.diag = true;
    } else if (a == "--variants") {
      o.variants = true;
    } else if (a == "--seed") {
      if (!value(v)) return false;
      o.seed = static_cast<uint64_t>(v);
      o.seed_given = true;
    } else if (a == "--tokens") {
      if (!value(o.dims.tokens)) return false;
    } else if (a == "--hidden") {
      if (!value(o.dims.hidden)) return false;
    } else if (a == "--ffn") {
      if (!value(o.dims.ffn)) return false;
    } else if (a == "--heads") {
      if (!value(o.dims.heads.heads_q)) return false;
    } else if (a == "--kv-heads") {
      if (!value(o.dims.heads.heads_kv)) return false;
    } else if (a == "--head-dim") {
      if (!value(o.dims.heads.head_dim)) return false;
    } else if (!a.empty() && a[0] == '-') {
      err = "unknown option " + a;
      return false;
    } else if (o.command.empty()) {
      o.command = a;
    } else {
      o.filters.push_back(a);
    }
  }
  return true;
}

// Why the GPU path cannot run here, or "" when it can.
std::string gpu_unavailable() {
  if (coda_device_check(0) == CODA_SUCCESS) return "";
  return coda_last_error();
}

int info() {
  std::printf("coda %s (commit %s)\n", coda_version_string(), git_commit().c_str());
  std::printf("kernels: built for sm_90a (H100/H200)\n");
  const std::string why = gpu_unavailable();
  std::printf("device 0: %s\n", why.empty() ? "Hopper GPU available" : why.c_str());
  return 0;
}

}  // namespace
}  // namespace coda::cli

int main(int argc, char** argv) {
  using namespace coda::cli;
  Options opt;
  std::string err;
  if (!parse(argc, argv, opt, err)) {
    std::fprintf(stderr, "coda: %s\n\n", err.c_str());
    return usage(stderr, 2);
  }
  if (opt.command.empty() || opt.command == "help") return usage(stdout, opt.command.empty() ? 2 : 0);
  if (opt.command == "info") return info();
  if (opt.command == "bench" || opt.command == "check") {
    const std::string why = gpu_unavailable();
    std::string note;
    if (opt.emulate) {
      note = "--emulate: running the CPU emulator.";
    } else if (!why.empty()) {
      note = "No Hopper GPU: " + why + ".\nGPU kernels need sm_90; running the CPU emulator on the embedded default model.";
    } else if (opt.command == "bench") {
      try {
        return run_gpu_bench(opt);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "coda bench: %s\n", e.what());
        return 2;
      }
    } else {
      note = "GPU correctness checks are the GPU test suite (./coda test on this machine); the fused block\n"
             "check here runs on the CPU emulator.";
    }
    return run_emulated_check(opt, note);
  }
  std::fprintf(stderr, "coda: unknown command '%s'\n\n", opt.command.c_str());
  return usage(stderr, 2);
}
