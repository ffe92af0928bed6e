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
// expf and IEEE division are ~20 instructions with a slow-path branch, per element.
CODA_HD float sigmoid(float g) {
#if CODA_DEVICE_CODE
  float e, r;
  asm("ex2.approx.f32 %0, %1;" : "=f"(e) : "f"(g * -1.44269504088896341f));
  asm("rcp.approx.f32 %0, %1;" : "=f"(r) : "f"(1.0f + e));
  return r;
#else
  return 1.0f / (1.0f + exp_f(-g));
#endif
}
CODA_HD float silu(float g) { return g * sigmoid(g); }

CODA_HD float swiglu(float g, float u) { return silu(g) * u; }

// d(silu(g) u): dg = do * u * s * (1 + g (1 - s)), du = do * silu(g), s = sigmoid(g).
CODA_HD void swiglu_backward(float g, float u, float dout, float* dg, float* du) {
  const float s = sigmoid(g);
  *dg = dout * u * s * (1.0f + g * (1.0f - s));
  *du = dout * g * s;
}

// RoPE angle in turns, reduced exactly to [-0.5, 0.5).
//
// NOTES: theta = pos * f (f in turns per position, fp32) is formed as an exact integer product
// pos * mantissa(f) (< 2^56), and the integer turns are dropped by shifting them out of a 64-bit
// fixed-point fraction, so the fractional turn carries no error from the size of pos; only its
// final rounding to fp32 (< 2^-25 turns) remains. A plain fp32 pos * freq loses ~pos * 2^-24
// radians (0.008 rad at pos 131072). Written without branches (selects and 32-bit funnel shifts):
// the GPU fills 16 angles at a time, and with a branch per case each angle waited for the last
// (~400 cycles apiece on an H200). fp64 (one exact product, one rounding to integer) measured slower.
// The frequency's part (RopeFreq) is decoded once per frequency: the GPU's table fill reuses it for
// both rows of a pair slot, half of the per-angle work (bench/NOTES.md, step p).
struct RopeFreq {
  uint32_t mant;  // f = mant * 2^-s
  int s, k, kk;   // k: left shift that drops the whole turns (0 when s >= 64); kk = k mod 32
  float scale;    // 2^-64 * 2^-(s - 64) for s > 64
};
CODA_HD RopeFreq rope_freq(float f_turns) {
  const uint32_t b = float_bits(f_turns) & 0x7fffffffu;
  const uint32_t e = b >> 23;
  RopeFreq d;
  d.mant = (b & 0x7fffffu) | (e != 0 ? 0x800000u : 0u);
  d.s = 150 - static_cast<int>(e != 0 ? e : 1u);
  // s < 64: the whole turns shift out of a = prod << (64 - s); s >= 64: prod is all fraction, a =
  // prod. Then t = a * 2^-64 * 2^-(s - 64): power-of-two scalings of one rounding.
  d.k = d.s < 64 ? 64 - d.s : 0;
  d.kk = d.k & 31;
  const int x = d.s > 64 ? d.s - 64 : 0;  // at most 85: 2^-x is a normal float
  d.scale = bits_float(static_cast<uint32_t>(127 - x) << 23) * 5.42101086242752217e-20f;  // exact: powers of two
  return d;
}
CODA_HD float rope_turns(uint32_t pos, const RopeFreq& d) {
  const uint64_t prod = static_cast<uint64_t>(pos) * d.mant;
  const uint32_t lo = static_cast<uint32_t>(prod), hi = static_cast<uint32_t>(prod >> 32);
#if CODA_DEVICE_CODE
  const uint32_t hi_k = __funnelshift_l(lo, hi, d.kk);
#else
  const uint32_t hi_k = d.kk ? (hi << d.kk) | (lo >> (32 - d.kk)) : hi;
#endif
  const uint32_t lo_k = lo << d.kk;
  const uint64_t a = d.k >= 32 ? static_cast<uint64_t>(lo_k) << 32 : (static_cast<uint64_t>(hi_k) << 32) | lo_k;
  float t = static_cast<float>(a) * d.scale;
  t = t >= 0.5f ? t - 1.0f : t;
  return d.s <= 0 ? 0.0f : t;  // s <= 0: f is a whole number of turns
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
