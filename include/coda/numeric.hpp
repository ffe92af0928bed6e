// Storage formats and rounding, identical on host and device.
//
// Kernels and the CPU emulator compute in fp32 and round once when storing: bf16 and fp16 use
// round-to-nearest-even (the same result as cvt.rn.{bf16,f16}.f32), NaN stays NaN, overflow goes
// to infinity.
#pragma once

#include <cstdint>
#include <cstring>

#include "coda/macros.hpp"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

namespace coda {

CODA_HD uint32_t float_bits(float f) {
#if CODA_DEVICE_CODE
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
#endif
}

CODA_HD float bits_float(uint32_t u) {
#if CODA_DEVICE_CODE
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

CODA_HD uint16_t float_to_bf16_bits(float f) {
#if CODA_DEVICE_CODE
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));  // cvt.rn.bf16.f32: the same rounding
#endif
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

CODA_HD float bf16_bits_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

CODA_HD uint16_t float_to_fp16_bits(float f) {
#if CODA_DEVICE_CODE
  return __half_as_ushort(__float2half_rn(f));  // cvt.rn.f16.f32: the same rounding
#endif
  uint32_t x = float_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  if (x > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (x >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
  const uint32_t e = x >> 23;
  const uint32_t frac = x & 0x7fffffu;
  if (e < 113) {  // below 2^-14: fp16 subnormal (or zero); value = mant * 2^(e - 150)
    if (e == 0) return static_cast<uint16_t>(sign);
    const uint32_t mant = frac | 0x800000u;
    const uint32_t s = 126 - e;  // fp16 subnormal units of 2^-24
    if (s > 24) return static_cast<uint16_t>(sign);
    uint32_t h = mant >> s;
    const uint32_t rem = mant & ((1u << s) - 1u);
    const uint32_t half = 1u << (s - 1);
    if (rem > half || (rem == half && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = ((e - 112) << 10) | (frac >> 13);
  const uint32_t rem = frac & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

CODA_HD float fp16_bits_to_float(uint16_t h) {
#if CODA_DEVICE_CODE
  return __half2float(__ushort_as_half(h));  // one conversion instruction, exact
#else
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu;
  const uint32_t frac = h & 0x3ffu;
  if (e == 0) {
    // subnormal: frac * 2^-24, exact in fp32
    const float v = static_cast<float>(frac) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  if (e == 31) return bits_float(sign | 0x7f800000u | (frac << 13));
  return bits_float(sign | ((e + 112) << 23) | (frac << 13));
#endif
}

// Storage element types. Each is a 16-bit pattern with explicit conversions.
struct bf16_t {
  uint16_t bits;
  CODA_HD static bf16_t from_float(float f) { return bf16_t{float_to_bf16_bits(f)}; }
  CODA_HD float to_float() const { return bf16_bits_to_float(bits); }
};

struct fp16_t {
  uint16_t bits;
  CODA_HD static fp16_t from_float(float f) { return fp16_t{float_to_fp16_bits(f)}; }
  CODA_HD float to_float() const { return fp16_bits_to_float(bits); }
};

// Round an fp32 value through a storage format: what a later read of the stored value returns.
CODA_HD float round_bf16(float f) { return bf16_bits_to_float(float_to_bf16_bits(f)); }
CODA_HD float round_fp16(float f) { return fp16_bits_to_float(float_to_fp16_bits(f)); }

}  // namespace coda
