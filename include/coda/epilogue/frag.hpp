// The unit an epilogue program works on: two adjacent accumulator columns of one row.
//
// NOTES: in the wgmma fp32 accumulator fragment a thread holds the pairs (n, n+1) at rows r and
// r+8, so a column pair is always thread-local; pairwise primitives (RoPE, SwiGLU) rely on it.
//
// Contract for every backend (GPU epilogue driver, CPU emulator):
//  - a program is called once per (row m, even column n) with m < M and n < N (M, N < 2^31);
//  - v[0], v[1] hold the fp32 accumulator at (m, n) and (m, n + 1); ok[1] is false when
//    n + 1 == N (then v[1] is 0 and must not be stored or reduced);
//  - the program may read operands and write outputs only through its context (see program.hpp).
#pragma once

#include <cstdint>

namespace coda::epi {

struct Frag {
  float v[2];
  int m;  // row
  int n;  // first column of the pair (even)
  bool ok[2];
  // Backend scratch: the GPU driver's index of the pair in the thread's fragment of the chunk, a
  // compile-time constant there (the context indexes its register arrays with it). Programs do not
  // use it; the CPU emulator leaves it 0.
  int slot = 0;
};

// Two adjacent values as stored (rounded to the output's dtype) or as loaded.
struct Pair {
  float v0, v1;
};
using Stored2 = Pair;

}  // namespace coda::epi
