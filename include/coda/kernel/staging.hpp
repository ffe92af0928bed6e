// Shared-memory staging addresses of the epilogue (coda/kernel/sm90_gemm.cuh), host and device, so
// the CPU tests check them against TMA's swizzle (tests/cpu/test_staging.cpp).
//
// A 64-row chunk of an operand with `cols` columns of `es` bytes is staged as TMA boxes of
// box = min(cols es, 128) bytes per row, each swizzled like the box (TMA's 128B / 64B / 32B modes:
// 16-byte units XOR the row bits). An operand covers `per` of its columns per accumulator pair:
// 1 (half width: SwiGLU's o), 2 (same width), 4 (double width: SwiGLU backward's z and dz), so a
// chunk (the accumulator's 64 columns) holds cols = 32 per of them. The thread's pair (jj, b) of the
// wgmma accumulator sits at row lr0 + 8 b (lr0 = 16 warp + lane / 4) and columns cthr + cc .. + per - 1,
// with cthr = per q (q = lane % 4) and cc = 4 per jj. Its offset is
//     (cc es / box) (64 box) + (lr0 + 8 b) box + ((cc es mod box) XOR u),   u = cthr es XOR (row bits << 4)
// because the thread part never carries into the box index, its bits are disjoint from the pair
// part, and the row bits depend on the lane only (8 b and 16 warp leave them unchanged); the
// pair's further columns are the next elements of the same 16-byte unit. So an access costs one
// XOR with a constant and one add; the rest is the instruction's immediate.
#pragma once

#include <cstdint>

#include "coda/macros.hpp"

namespace coda::sm90 {

constexpr int kStageRows = 64;

CODA_HD constexpr int stage_box(int cols, int es) { return cols * es < 128 ? cols * es : 128; }

// TMA's swizzle of a byte offset in a box set with `box`-byte rows.
CODA_HD constexpr int tma_swizzle(int off, int box) {
  return off ^ ((off >> 3) & (box == 128 ? 0x70 : (box == 64 ? 0x30 : 0x10)));
}

// The definition: byte offset of element (r, c) of a staged 64-row chunk.
CODA_HD constexpr int stage_offset_ref(int r, int c, int cols, int es) {
  const int box = stage_box(cols, es), byte = c * es;
  return tma_swizzle((byte / box) * (kStageRows * box) + r * box + byte % box, box);
}

// The per-thread part of the offsets (once per kernel) ...
struct StageAddr {
  uint32_t row;  // lr0 * box
  uint32_t u;    // cthr es ^ (row bits << 4)
};
CODA_HD StageAddr stage_addr(int lane, int warp, int per, int es) {
  const int box = stage_box(32 * per, es);
  const int lr0 = 16 * warp + (lane >> 2), q = lane & 3;
  const int rowbits = ((lr0 * box) >> 7) & (box / 16 - 1);
  return {static_cast<uint32_t>(lr0 * box), static_cast<uint32_t>((per * q * es) ^ (rowbits << 4))};
}
// ... and the offset of pair (jj, b)'s first column: with jj, b and the operand's shape
// compile-time constants, one XOR and one add.
CODA_HD uint32_t stage_off(const StageAddr& a, int jj, int b, int per, int es) {
  const int box = stage_box(32 * per, es);
  const int cc = 4 * per * jj * es;
  return static_cast<uint32_t>((cc / box) * (kStageRows * box) + 8 * b * box) + a.row +
         (static_cast<uint32_t>(cc % box) ^ a.u);
}

// Four pairs in one `stmatrix.x4` (a same-width 16-bit output, 128-byte boxes): the pair slots
// (jj0, 0), (jj0, 1), (jj0 + 1, 0), (jj0 + 1, 1), jj0 even, are the four 8 x 8 matrices of the
// instruction (register m of a thread holds its pair of slot (jj0 + m / 2, m % 2): row lane / 4,
// columns 2 (lane % 4) of matrix m, as stmatrix expects), and lane l gives the address of row l % 8
// of matrix l / 8: a 16-byte unit. That address is the lane's offset (once per kernel) XOR jj0's
// unit bits: the unit index jj0 + m / 2 = jj0 ^ (m / 2) (jj0 even) is XORed with the row bits, and
// neither the row nor m / 2 touches jj0's bits. So one instruction stores what four 4-byte stores
// did, at one XOR with a constant.
CODA_HD uint32_t stsm_lane_off(int lane, int warp) {
  const int m = lane >> 3, r = lane & 7;
  const int row = 16 * warp + r + 8 * (m & 1);  // row bits (row mod 8) = r
  return static_cast<uint32_t>(row * 128 + 16 * ((m >> 1) ^ r));
}
CODA_HD uint32_t stsm_off(uint32_t lane_off, int jj0) { return lane_off ^ static_cast<uint32_t>(jj0 << 4); }

}  // namespace coda::sm90
