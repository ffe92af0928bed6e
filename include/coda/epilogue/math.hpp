// Transcendentals used by epilogue functors, identical in meaning on host and device.
//
// Device code uses the CUDA math library (expf, rsqrtf: full-precision variants) except in the
// per-element epilogue work, where the special-function unit's approximations serve (sin/cos of an
// exactly reduced angle here, ex2/rcp in epi::sigmoid, exp2 in the GPU's LSE fold: relative or
// absolute errors near 2^-21, four orders under the bf16 rounding every stored result goes
// through); host code uses <cmath>.
#pragma once

#include <cmath>

#include "coda/macros.hpp"

namespace coda::epi {

constexpr float kLog2e = 1.4426950408889634f;  // log2(e): exp(x) = 2^(x log2 e) on the SFU's ex2

CODA_HD float exp_f(float x) {
#if CODA_DEVICE_CODE
  return expf(x);
#else
  return std::exp(x);
#endif
}

#ifdef __CUDACC__  // declared in nvcc's host pass too: device functions that call it are parsed there
// 2^x on the special-function unit with subnormal results flushed to 0 (for sums of exponentials
// next to their maximum's own term, 1: a term below 2^-126 adds nothing). NOTES: exp2f adds a
// subnormal range check and a rescale around the SFU instruction, four instructions more each.
__device__ __forceinline__ float ex2_ftz(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}
#endif

// 2^x with results below 2^-126 flushed to 0, the same on host and device (ex2_ftz on the GPU).
CODA_HD float exp2_ftz(float x) {
#if CODA_DEVICE_CODE
  return ex2_ftz(x);
#else
  const float r = std::exp2(x);
  return r < 1.17549435e-38f ? 0.0f : r;
#endif
}

CODA_HD float log_f(float x) {
#if CODA_DEVICE_CODE
  return logf(x);
#else
  return std::log(x);
#endif
}

CODA_HD float log1p_f(float x) {
#if CODA_DEVICE_CODE
  return log1pf(x);
#else
  return std::log1p(x);
#endif
}

CODA_HD float rsqrt_f(float x) {
#if CODA_DEVICE_CODE
  return rsqrtf(x);
#else
  return 1.0f / std::sqrt(x);
#endif
}

// sin and cos of 2*pi*t for t in [-0.5, 0.5] turns.
// NOTES: on the GPU through the special-function unit (sin.approx / cos.approx: absolute error
// below 2^-21 on [-pi, pi], four orders under the bf16 resolution every stored result has); the
// argument is already reduced exactly (rope_turns), so no range reduction is needed.
// sin and cos of a = 2 pi t radians, |a| <= pi, as the GPU computes them (sin.approx / cos.approx
// of the fp32 a). A caller that reuses an angle keeps a (radians_of_turns) and calls sincos_radians:
// sin.approx multiplies its argument by 1 / (2 pi) in SASS, so the 2 pi multiply is work per call.
CODA_HD float radians_of_turns(float t) { return 6.28318530717958647692f * t; }
#ifdef __CUDACC__  // declared in nvcc's host pass too: device functions that call it are parsed there
__device__ __forceinline__ void sincos_radians(float a, float* s, float* c) {
  asm("sin.approx.f32 %0, %1;" : "=f"(*s) : "f"(a));
  asm("cos.approx.f32 %0, %1;" : "=f"(*c) : "f"(a));
}
#endif
CODA_HD void sincos_turns(float t, float* s, float* c) {
#if CODA_DEVICE_CODE
  sincos_radians(radians_of_turns(t), s, c);
#else
  const double a = 6.283185307179586476925286766559 * static_cast<double>(t);
  *s = static_cast<float>(std::sin(a));
  *c = static_cast<float>(std::cos(a));
#endif
}

CODA_HD float fmax_f(float a, float b) {
#if CODA_DEVICE_CODE
  return fmaxf(a, b);
#else
  return std::fmax(a, b);
#endif
}

CODA_HD bool isnan_f(float x) { return x != x; }

CODA_HD float ldexp_f(float x, int e) {
#if CODA_DEVICE_CODE
  return ldexpf(x, e);
#else
  return std::ldexp(x, e);
#endif
}

}  // namespace coda::epi
