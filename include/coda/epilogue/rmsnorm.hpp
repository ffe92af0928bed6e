// RMSNorm pieces (coda-math.md 5.1, 5.2) as functors.
#pragma once

#include "coda/epilogue/math.hpp"
#include "coda/macros.hpp"

namespace coda::epi {

// r = 1 / sqrt(mean(x^2) + eps) from the finished sum of squares over d columns.
CODA_HD float rms_rstd(float sum_squares, float inv_d, float eps) {
  return rsqrt_f(sum_squares * inv_d + eps);
}

// dx = r * (dy * w - xh * c) with xh = x * r and c = ZdZ = (1/d) sum_j dy_j y_j.
CODA_HD float rmsnorm_dx(float dy, float xh, float r, float w, float c) {
  return r * (dy * w - xh * c);
}

}  // namespace coda::epi
