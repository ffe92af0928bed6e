// GEMM configs: names, the printable description, and the shape heuristic.
#include <sstream>

#include "coda/kernel/config.hpp"

namespace coda {

const char* form_name(GemmForm f) {
  switch (f) {
    case GemmForm::kTN: return "TN(fwd)";
    case GemmForm::kTT: return "TT(dgrad)";
    case GemmForm::kNT: return "NT(wgrad)";
  }
  return "?";
}

const char* variant_name(KernelVariant v) {
  switch (v) {
    case KernelVariant::k128x256_c2x1: return "128x256x64 coop cluster2x1 stages4";
    case KernelVariant::k256x128_c1x2: return "256x128x64 coop cluster1x2 stages4";
    case KernelVariant::k128x128_pp_c2x1: return "128x128x64 pingpong cluster2x1 stages6";
    default: return "?";
  }
}

int variant_tile_m(KernelVariant v) { return v == KernelVariant::k256x128_c1x2 ? 256 : 128; }
int variant_tile_n(KernelVariant v) { return v == KernelVariant::k128x256_c2x1 ? 256 : 128; }

std::string GemmConfig::describe() const {
  std::ostringstream s;
  s << variant_name(variant) << " swizzle " << swizzle << " raster " << (raster_n ? "N" : "M");
  return s.str();
}

std::string GemmProblem::describe() const {
  std::ostringstream s;
  s << op << " M " << m << " N " << n << " K " << k << " " << form_name(form) << " " << dtype_name(in) << "->"
    << dtype_name(out);
  return s.str();
}

GemmConfig choose_config(const GemmProblem& p) {
  GemmConfig c;
  // 128x256 with a 2x1 cluster is the best stock configuration on most LLaMA shapes (baselines);
  // when N is much smaller than M, 256x128 (multicasting A along N) keeps more tiles per wave.
  c.variant = (p.n <= 1024 && p.m >= 4 * p.n) ? KernelVariant::k256x128_c1x2 : KernelVariant::k128x256_c2x1;
  const int64_t tiles_m = (p.m + variant_tile_m(c.variant) - 1) / variant_tile_m(c.variant);
  const int64_t tiles_n = (p.n + variant_tile_n(c.variant) - 1) / variant_tile_n(c.variant);
  // Bands across the longer dimension: consecutive tiles reuse the shorter operand from L2.
  c.raster_n = tiles_n > tiles_m;
  c.swizzle = 8;
  return c;
}

}  // namespace coda
