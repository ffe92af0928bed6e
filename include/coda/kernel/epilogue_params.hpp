// Parameters of coda's GPU epilogue: every operand slot an epilogue program can use, as a plain
// struct passed by value in the kernel's parameters (host and device).
#pragma once

#include <cuda.h>

#include <cstdint>

namespace coda::sm90 {

constexpr int kEpiSlots = 4;

// Storage dtypes as small integers (coda_dtype_t values).
enum : int { kDtBF16 = 0, kDtFP16 = 1, kDtFP32 = 2, kDtInt32 = 3 };

struct EpiScalar {
  float value = 0.0f;
  const float* ptr = nullptr;  // when set, read at kernel start instead of `value`
};

struct EpiVector {  // per-row (length M) or per-column vector
  const void* ptr = nullptr;
  int dtype = kDtFP32;
};

struct EpiTile {  // an M x cols tensor read by the epilogue
  const void* ptr = nullptr;
  int64_t ld = 0;  // row stride in elements
  int64_t cols = 0;
  int dtype = kDtBF16;
};

struct EpiOutput {  // an M x cols tensor written through shared memory and TMA
  CUtensorMap tma;  // box: 64 rows x 128 bytes, 128-byte swizzle
  int64_t cols = 0;
  int dtype = kDtBF16;
  int defined = 0;
};

struct EpiParams {
  EpiScalar scalars[kEpiSlots];
  EpiVector rows[kEpiSlots];
  EpiVector row_ints[kEpiSlots];
  EpiVector cols[kEpiSlots];
  EpiTile tiles[kEpiSlots];
  EpiOutput outs[kEpiSlots];
  int num_outs = 0;  // outputs 0 .. num_outs-1 are staged (undefined ones are skipped)
};

}  // namespace coda::sm90
