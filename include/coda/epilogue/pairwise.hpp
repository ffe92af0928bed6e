// Primitives: pairwise transforms on the adjacent columns (2i, 2i+1) of one row.
//
//  2->2 (RoPE):    (x, y) -> (x cos - y sin, x sin + y cos), theta = pos[m] * freq[i]
//  2->1 (SwiGLU):  o_i = silu(g_i) * u_i with (g_i, u_i) = (acc[2i], acc[2i+1])
//  1->2 (dSwiGLU): from do_i and the stored pair (g_i, u_i): (dg_i, du_i)
#pragma once

#include <cstdint>

#include "coda/epilogue/math.hpp"
#include "coda/macros.hpp"
#include "coda/numeric.hpp"

namespace coda::epi {

// NOTES: on the GPU through the special-function unit (ex2.approx, rcp.approx: relative error
// about 2^-22, four orders under the bf16 resolution of every stored result): a full-precision
// expf and IEEE division are ~20 instructions with a slow-path branch, per element. The .ftz forms:
// without them ex2 tests for a subnormal result and rescales around the SFU instruction (three
// instructions more per element, in SASS); here a subnormal e is 0 next to the 1 it is added to,
// and 1 + e >= 1 never makes rcp's argument or result subnormal.
CODA_HD float sigmoid(float g) {
#if CODA_DEVICE_CODE
  float e, r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(g * -kLog2e));
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(1.0f + e));
  return r;
#else
  return 1.0f / (1.0f + exp_f(-g));
#endif
}
CODA_HD float silu(float g) { return g * sigmoid(g); }

CODA_HD float swiglu(float g, float u) { return silu(g) * u; }

// SwiGLU's backward from the stored pair (g, u) and do = d(silu(g) u), with what the backward
// needs beside it: o = silu(g) u recomputed (for dWdown) and zdz = g dg + u du (ZdZ's term).
// s = sigmoid(g), silu = g s: dg = do u s (1 + g (1 - s)) = do u (s + silu (1 - s)), du = do silu.
// NOTES: silu computed once and reused, the products fused: the GPU's SwigluBackward visit went from
// 44.7 to 40.7 SASS instructions per pair against a separate swiglu_backward and swiglu (FMUL 18 ->
// 14; `scripts/sass_epilogue.py`, bench/NOTES.md).
struct SwigluGrad {
  float dg, du, o, zdz;
};
CODA_HD SwigluGrad swiglu_grad(float g, float u, float dout) {
  const float s = sigmoid(g), silu = g * s;
  SwigluGrad r;
  r.dg = dout * u * fmaf(silu, 1.0f - s, s);
  r.du = dout * silu;
  r.o = silu * u;
  r.zdz = fmaf(g, r.dg, u * r.du);
  return r;
}

// RoPE angle in turns, reduced exactly to [-0.5, 0.5).
//
// NOTES: theta = pos * f (f in turns per position, fp32 |f|) is reduced in fixed point, so the
// fractional turn carries no error from the size of pos. With f = mant * 2^-s, the fraction's top 32
// bits are F = low32(pos * mant * 2^(32 - s)): one 32 x 32 -> 64-bit product of pos and a per-
// frequency multiplier m, shifted right by a per-frequency amount sh <= 32 (the bits below 2^-32
// turns are dropped; s > 64 also drops mant's low bits, < 2^-32 turns for pos < 2^31). Read as a
// signed 32-bit integer F is the angle already wrapped to [-1/2, 1/2) turns; its conversion to fp32
// rounds once more (|error| < 2^-26 + 2^-32 turns in all). A plain fp32 pos * freq loses
// ~pos * 2^-24 radians (0.008 rad at pos 131072). Per angle the GPU executes one wide multiply, one
// funnel shift, one conversion and one multiply: the table fill of 16 angles ran ~20 instructions
// an angle with a 64-bit fraction and its u64 -> fp32 conversion, 14% of the 1B QKV projection's
// time (bench/NOTES.md step y). The frequency's part (RopeFreq) is decoded once per frequency and
// tile: the GPU stages it decoded with the tile's column vectors, and the table fill reads it for
// every row (the fill's multiply is rope_radians_at).
struct RopeFreq {
  uint32_t m;   // multiplier
  uint32_t sh;  // right shift of the 64-bit product, 0..32
};
CODA_HD RopeFreq rope_freq(float f_turns) {
  const uint32_t b = float_bits(f_turns) & 0x7fffffffu;
  const uint32_t e = b >> 23;
  const uint32_t mant = (b & 0x7fffffu) | (e != 0 ? 0x800000u : 0u);
  const int s = 150 - static_cast<int>(e != 0 ? e : 1u);  // f = mant * 2^-s
  // s <= 32: pos * f * 2^32 is an integer whose low 32 bits are those of pos * low32(mant << (32 - s))
  // (0 from a shift of 32 on: whole turns only). Selects, not branches (no divergence in a warp).
  const uint32_t lo = s <= 0 ? 0u : mant << (32 - s < 32 ? 32 - s : 0);
  const uint32_t hi = s >= 96 ? 0u : mant >> (s > 64 ? s - 64 : 0);
  RopeFreq d;
  d.m = s <= 32 ? lo : hi;
  d.sh = static_cast<uint32_t>(s <= 32 ? 0 : (s <= 64 ? s - 32 : 32));
  return d;
}
// The angle's top 32 fraction bits F (a signed 32-bit integer: the turns times 2^32, wrapped).
CODA_HD uint32_t rope_fraction(uint32_t pos, const RopeFreq& d) {
  const uint64_t prod = static_cast<uint64_t>(pos) * d.m;
#if CODA_DEVICE_CODE
  return __funnelshift_rc(static_cast<uint32_t>(prod), static_cast<uint32_t>(prod >> 32), d.sh);
#else
  return static_cast<uint32_t>(prod >> d.sh);
#endif
}
CODA_HD float rope_turns(uint32_t pos, const RopeFreq& d) {
  return static_cast<float>(static_cast<int32_t>(rope_fraction(pos, d))) * 2.3283064365386963e-10f;  // 2^-32
}
CODA_HD float rope_turns(uint32_t pos, float f_turns) { return rope_turns(pos, rope_freq(f_turns)); }

CODA_HD void rope_sincos(uint32_t pos, float f_turns, float* s, float* c) {
  sincos_turns(rope_turns(pos, f_turns), s, c);
}

// The rotation of a row at position pos (RoPE): a negative position poisons the row (a NaN angle,
// so NaN sin and cos) instead of rotating silently.
CODA_HD float rope_turns_at(int pos, const RopeFreq& d) {
  const float t = rope_turns(static_cast<uint32_t>(pos), d);  // computed either way: no branch
  return pos < 0 ? NAN : t;
}
CODA_HD float rope_turns_at(int pos, float f_turns) { return rope_turns_at(pos, rope_freq(f_turns)); }
// radians_of_turns(rope_turns_at(pos, d)), bit for bit, in one multiply: F * 2^-32 is exact, so
// scaling 2 pi by 2^-32 instead (also exact) rounds the same product once. The multiply's other
// factor is the row's (rope_row_scale): NaN for a negative position, so a table fill needs no
// select per angle.
CODA_HD float rope_row_scale(int pos) {
  constexpr float kRadiansPerFraction = 6.28318530717958647692f * 2.3283064365386963e-10f;  // 2 pi 2^-32
  return pos < 0 ? NAN : kRadiansPerFraction;
}
CODA_HD float rope_radians_scaled(int pos, const RopeFreq& d, float row_scale) {
  return static_cast<float>(static_cast<int32_t>(rope_fraction(static_cast<uint32_t>(pos), d))) * row_scale;
}
CODA_HD float rope_radians_at(int pos, const RopeFreq& d) { return rope_radians_scaled(pos, d, rope_row_scale(pos)); }
CODA_HD void rope_sincos_at(int pos, float f_turns, float* s, float* c) {
  sincos_turns(rope_turns_at(pos, f_turns), s, c);
}

// Rotate (x, y) by +theta (forward); pass -s for the backward rotation by -theta.
CODA_HD void rotate(float* x, float* y, float s, float c) {
  const float a = *x, b = *y;
  *x = a * c - b * s;
  *y = a * s + b * c;
}

}  // namespace coda::epi
