// The LLaMA-3 block run through a coda backend and compared with the float64 unfused block.
//
// Random bf16 weights and inputs (fresh per seed) go through (1) the float64 reference (ground
// truth), (2) the same unfused graph with bf16 storage (the yardstick of design.md 7), and (3) the
// fused schedule on the given backend. For each output the relative Frobenius error of (2) and (3)
// against (1) is reported, with the rule fused <= 2 x unfused + eps.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "coda/block/llama3.hpp"
#include "coda/ref/emulator.hpp"

namespace coda {

struct ErrorRow {
  std::string op;      // the fused operator that produced the output
  std::string output;  // the tensor
  double fused = 0;    // rel. Frobenius error of the fused result vs float64
  double unfused = 0;  // same for the unfused bf16 pipeline
  double bound = 0;    // 2 x unfused + eps
  bool ok = false;
};

struct BlockCheckResult {
  std::vector<ErrorRow> rows;
  bool ok = false;
  double seconds = 0;  // wall time of the fused schedule (forward + backward) on the backend
  std::string error;   // non-empty if the schedule failed to run
};

// The embedded default: a small LLaMA-3-shaped block with awkward M (not a multiple of any tile).
Llama3Dims default_check_dims();

// Runs the block on host tensors: the forward, and the backward when grads is not null.
using BlockRunner = std::function<Status(const Llama3Dims&, const Llama3Weights&, const Llama3Activations&,
                                         const Llama3Grads*)>;
// The check with any runner (the emulator, the GPU through host mirrors); forward only when
// backward is false (6 rows instead of 14). keep_y1 gives the block Llama3Activations::y1 (the
// SwiGLU output kept for the backward) and checks it as one more row.
BlockCheckResult check_llama3_block(const Llama3Dims& dims, uint64_t seed, const BlockRunner& run, bool backward,
                                    double eps = 1e-4, bool keep_y1 = false);

// Runs the block forward and backward through the CPU emulator.
BlockCheckResult check_llama3_block_emulated(const Llama3Dims& dims, uint64_t seed, const emu::EmuConfig& cfg = {},
                                             double eps = 1e-4, bool keep_y1 = false);

}  // namespace coda
