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

namespace {
int64_t tiles_of(const GemmProblem& p, KernelVariant v) {
  return ((p.m + variant_tile_m(v) - 1) / variant_tile_m(v)) * ((p.n + variant_tile_n(v) - 1) / variant_tile_n(v));
}
// Fraction of the last wave's slots that hold a tile (1 = no quantization loss).
double wave_efficiency(int64_t tiles, int sms) {
  const int64_t waves = (tiles + sms - 1) / sms;
  return waves == 0 ? 1.0 : static_cast<double>(tiles) / static_cast<double>(waves * sms);
}
}  // namespace

GemmConfig choose_config(const GemmProblem& p) {
  // Measured on an H200 (bench/results/h200, `coda bench --variants gemm.`): the 128x128 pingpong
  // kernel, whose epilogue overlaps the other warpgroup's mainloop, is best for K <= 4096 and, with
  // at least two tiles per warpgroup (4 per SM), for long K too: on 2026-12-02 it was level with or
  // faster than the cooperative 128x256 tile on every such shape with K >= 6144 among both models'
  // forward, dgrad and wgrad GEMMs (8B gate/up wgrad 1.004 against 1.049x cuBLAS). With fewer tiles (e.g.
  // 2048 x 2048 weight gradients: 1.075 against 1.023) the cooperative tile, unless the pingpong's
  // smaller tiles fill the last wave clearly better. Beyond K = 32768 the long-K rule applies
  // whatever the tile count: the LM head's dgrad (16384 x 2048, K = 128256) read 1.04-1.23x cuBLAS
  // on the pingpong kernel over four processes (samples 12.3-18.8 ms), 0.995-1.006x on either
  // cooperative tile (H200, bench/NOTES.md 2026-12-02 afternoon).
  const KernelVariant coop = KernelVariant::k128x256_c2x1, pp = KernelVariant::k128x128_pp_c2x1;
  const int sms = p.sm_count > 0 ? p.sm_count : 132;
  GemmConfig c;
  if (p.k <= 4096 || (tiles_of(p, pp) >= 4 * int64_t(sms) && p.k <= kPingpongMaxK)) {
    c.variant = pp;
  } else {
    c.variant = wave_efficiency(tiles_of(p, pp), sms) > wave_efficiency(tiles_of(p, coop), sms) + 0.05 ? pp : coop;
  }
  const int64_t tiles_m = (p.m + variant_tile_m(c.variant) - 1) / variant_tile_m(c.variant);
  const int64_t tiles_n = (p.n + variant_tile_n(c.variant) - 1) / variant_tile_n(c.variant);
  // Bands across the longer dimension: consecutive tiles reuse the shorter operand from L2. Wide
  // outputs (gate/up, LM head): narrow M bands when N is not much longer than M, long N bands
  // for the vocabulary.
  c.raster_n = tiles_n > tiles_m;
  c.swizzle = 8;
  if (p.n >= 16384 && c.variant == pp) {
    c.raster_n = tiles_n > 2 * tiles_m;
    c.swizzle = c.raster_n ? 16 : 2;
  }
  return c;
}

}  // namespace coda
