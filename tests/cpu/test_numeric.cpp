// Storage rounding: bf16 and fp16 round-to-nearest-even, specials, subnormals, and the exact
// RoPE angle reduction.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "coda/epilogue/pairwise.hpp"
#include "coda/epilogue/reduce.hpp"
#include "coda/numeric.hpp"
#include "util.hpp"

namespace coda {
namespace {

// Round a float to `mant_bits` explicit mantissa bits, ties to even, in double arithmetic.
double rne_reference(double x, int mant_bits, int min_exp) {
  if (x == 0 || std::isinf(x)) return x;
  int e;
  std::frexp(x, &e);                      // x = f * 2^e, f in [0.5, 1)
  const int exp = std::max(e - 1, min_exp);  // unbiased exponent, clamped to the subnormal range
  const double ulp = std::ldexp(1.0, exp - mant_bits);
  return std::nearbyint(x / ulp) * ulp;   // nearbyint: ties to even in the default mode
}

TEST(Numeric, Bf16MatchesRoundToNearestEven) {
  CODA_SEEDED_RNG(rng);
  for (int i = 0; i < 200000; ++i) {
    const uint32_t bits = static_cast<uint32_t>(rng.integer(0, 0xffffffffLL));
    const float f = bits_float(bits);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(round_bf16(f)));
      continue;
    }
    const double want = rne_reference(f, 7, -126);
    const double got = round_bf16(f);
    if (std::fabs(want) >= 3.3961775292304957e38) {  // rounds past the largest bf16
      EXPECT_TRUE(std::isinf(got)) << f;
    } else {
      ASSERT_EQ(got, want) << "input bits " << std::hex << bits;
    }
  }
}

TEST(Numeric, Bf16Specials) {
  EXPECT_EQ(float_to_bf16_bits(0.0f), 0x0000);
  EXPECT_EQ(float_to_bf16_bits(-0.0f), 0x8000);
  EXPECT_EQ(float_to_bf16_bits(INFINITY), 0x7f80);
  EXPECT_EQ(float_to_bf16_bits(-INFINITY), 0xff80);
  EXPECT_TRUE(std::isnan(bf16_bits_to_float(float_to_bf16_bits(NAN))));
  EXPECT_EQ(float_to_bf16_bits(1.0f), 0x3f80);
  // 1 + 2^-8 is a tie between 1 and 1 + 2^-7: to even (1).
  EXPECT_EQ(round_bf16(1.0f + 0.00390625f), 1.0f);
  EXPECT_EQ(round_bf16(1.0f + 3 * 0.00390625f), 1.0f + 4 * 0.00390625f);
}

TEST(Numeric, Fp16MatchesCompilerConversion) {
  CODA_SEEDED_RNG(rng);
  for (int i = 0; i < 200000; ++i) {
    // Concentrate on fp16's range, including subnormals and overflow.
    const float f = static_cast<float>(std::ldexp(rng.uniform(-2.0, 2.0), static_cast<int>(rng.integer(-27, 17))));
    const _Float16 h = static_cast<_Float16>(f);
    uint16_t want;
    std::memcpy(&want, &h, 2);
    ASSERT_EQ(float_to_fp16_bits(f), want) << "input " << f;
    ASSERT_EQ(fp16_bits_to_float(want), static_cast<float>(h));
  }
  EXPECT_EQ(float_to_fp16_bits(65519.0f), 0x7bff);
  EXPECT_EQ(float_to_fp16_bits(65520.0f), 0x7c00);
  EXPECT_EQ(float_to_fp16_bits(-INFINITY), 0xfc00);
  EXPECT_TRUE(std::isnan(fp16_bits_to_float(float_to_fp16_bits(NAN))));
}

TEST(Numeric, RopeAngleReductionIsExactForLargePositions) {
  CODA_SEEDED_RNG(rng);
  const std::vector<float> freqs = [] {
    std::vector<float> f;
    for (double x : ref::rope_frequencies(128, 500000.0)) f.push_back(static_cast<float>(x));
    return f;
  }();
  double worst = 0, worst_naive = 0;
  for (int i = 0; i < 20000; ++i) {
    const auto pos = static_cast<uint32_t>(rng.integer(0, 131072));
    const float f = freqs[static_cast<size_t>(rng.integer(0, 63))];
    const double exact = static_cast<double>(pos) * static_cast<double>(f);
    double want = exact - std::floor(exact);
    if (want >= 0.5) want -= 1.0;
    const double got = epi::rope_turns(pos, f);
    double diff = std::fabs(got - want);
    diff = std::min(diff, 1.0 - diff);  // angles are modulo one turn
    worst = std::max(worst, diff);
    const float naive = static_cast<float>(pos) * f;
    double nd = std::fabs((naive - std::floor(naive)) - (want < 0 ? want + 1 : want));
    worst_naive = std::max(worst_naive, std::min(nd, 1.0 - nd));
  }
  EXPECT_LT(worst, 3.0e-8) << "turns";
  // The point of the exact reduction: a plain fp32 product is orders of magnitude worse here.
  EXPECT_GT(worst_naive, 100 * worst);
}

// The GPU's table fill computes 2 pi * turns in one multiply (rope_radians_scaled by the row's
// rope_row_scale, which is rope_radians_at); it must round to the same fp32 angle as
// radians_of_turns(rope_turns_at(...)), which the emulator's meaning follows, and a negative
// position must give NaN.
TEST(Numeric, RopeRadiansMatchTheTwoStepAngle) {
  CODA_SEEDED_RNG(rng);
  std::vector<float> freqs;
  for (double x : ref::rope_frequencies(128, 500000.0)) freqs.push_back(static_cast<float>(x));
  freqs.push_back(0.0f);
  freqs.push_back(0.5f);
  freqs.push_back(1.0e-30f);  // below 2^-96 turns a position: the angle is 0
  for (int i = 0; i < 50000; ++i) {
    const int pos = i < 16 ? i - 2 : static_cast<int>(rng.integer(0, i % 2 ? 131072 : 2147483647));
    const float f = freqs[static_cast<size_t>(rng.integer(0, static_cast<int64_t>(freqs.size()) - 1))];
    const epi::RopeFreq d = epi::rope_freq(f);
    const float two_step = epi::radians_of_turns(epi::rope_turns_at(pos, d));
    const float one = epi::rope_radians_at(pos, d);
    if (pos < 0) {
      EXPECT_TRUE(std::isnan(one)) << pos;
      continue;
    }
    ASSERT_EQ(float_bits(one), float_bits(two_step)) << "pos " << pos << " freq " << f;
  }
}

}  // namespace
}  // namespace coda
