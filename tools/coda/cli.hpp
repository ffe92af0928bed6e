// Shared pieces of the coda command-line tool.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "coda/block/llama3.hpp"

namespace coda::cli {

struct Options {
  std::string command;
  std::string json_path;  // --json FILE
  bool emulate = false;   // --emulate: force the CPU emulator
  bool diag = false;      // --diag: bench prints where the time goes (epilogue on/off, block steps)
  bool variants = false;  // --variants: bench times each fused case on every compiled fused variant
  uint64_t seed = 0;      // --seed N (0: fresh)
  bool seed_given = false;
  Llama3Dims dims;        // --tokens/--hidden/--ffn/--heads/--kv-heads/--head-dim
  std::vector<std::string> filters;  // positional: case-name substrings
};

std::string git_commit();
std::string now_iso8601();
// Escape a string for JSON.
std::string json_str(const std::string& s);

// The GPU benchmarks (Hopper only); returns the process exit code.
int run_gpu_bench(const Options& opt);

// The emulated block check: prints the per-operator error table; returns the process exit code.
int run_emulated_check(const Options& opt, const std::string& why);

}  // namespace coda::cli
