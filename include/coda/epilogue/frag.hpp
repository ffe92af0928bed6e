// The unit an epilogue program works on: two adjacent accumulator columns of one row.
//
// NOTES: in the wgmma fp32 accumulator fragment a thread holds the pairs (n, n+1) at rows r and
// r+8, so a column pair is always thread-local; pairwise primitives (RoPE, SwiGLU) rely on it.
//
// Contract for every backend (GPU epilogue driver, CPU emulator):
//  - a program is called once per (row m, even column n) with m < M and n < N;
//  - v[0], v[1] hold the fp32 accumulator at (m, n) and (m, n + 1); ok[1] is false when
//    n + 1 == N (then v[1] is 0 and must not be stored or reduced);
//  - the program may read operands and write outputs only through its context (see program.hpp).
#pragma once

#include <cstdint>

namespace coda::epi {

struct Frag {
  float v[2];
  int64_t m;
  int64_t n;
  bool ok[2];
  // Backend scratch: the GPU driver's position of the pair inside its staging chunk (programs do
  // not use these; the CPU emulator leaves them 0).
  int lr = 0, lc = 0;
};

// The two values a pair store wrote, as a later read returns them (rounded to the dtype).
struct Stored2 {
  float v0, v1;
};

}  // namespace coda::epi
