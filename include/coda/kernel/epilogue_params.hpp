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
  // Column vectors: column n reads entry epi::col_entry(n, period, step); e.g. RoPE frequencies,
  // one per pair of a head: period head_dim, step 2.
  int period = 0;
  int step = 1;
};

struct EpiTile {  // an M x cols tensor read by the epilogue
  CUtensorMap tma;  // TMA-staged tiles (Resources::tma_tiles): box 64 rows x 128 bytes, 128B swizzle
  const void* ptr = nullptr;
  int64_t ld = 0;  // row stride in elements
  int64_t cols = 0;
  int dtype = kDtBF16;
};

struct EpiPartial {  // an fp32 partial-reduction tensor [rows, cols] with row stride ld
  float* ptr = nullptr;
  int64_t ld = 0;
  int64_t cols = 0;    // segments: the number of segments (columns) the tensor holds
  int seg_shift = 0;   // segments: log2 of the columns per segment
};

struct EpiOutput {  // an M x cols tensor written through shared memory and TMA (or from registers)
  CUtensorMap tma;  // box: 64 rows x 128 bytes, 128-byte swizzle
  void* ptr = nullptr;  // outputs stored from registers (epi::store_direct)
  int64_t ld = 0;       // row stride in elements
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
  EpiPartial row_sums[kEpiSlots];  // [M, ceil(N / CODA_PARTIAL_COLS)] per-row sums per column granule
  EpiPartial row_lses[kEpiSlots];  // [M, ceil(N / CODA_PARTIAL_COLS)] per-row log-sum-exp per column granule
  EpiPartial seg_sums[kEpiSlots];  // [M, segments] per-row sums per column segment
  EpiPartial col_sums[kEpiSlots];  // [ceil(M / CODA_PARTIAL_ROWS), N] per-column sums per row granule
  float* row_outs[kEpiSlots] = {};  // [M] per-row values
  int num_outs = 0;  // outputs 0 .. num_outs-1 are staged (undefined ones are skipped)
  // ctx.rotation's operands: the row_ints slot of the positions, the cols slot of the frequencies
  // (whose period is the angles' period).
  int rotation_pos = 0, rotation_freq = 0;
};

}  // namespace coda::sm90
