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
  if (epi_bytes > 0.0) s << " epilogue " << epi_bytes << " B/element";
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
// The cooperative 128x256 tile unless the pingpong's 128x128 tiles fill the last wave clearly better.
KernelVariant coop_unless_pingpong_fills_better(const GemmProblem& p, int sms) {
  const KernelVariant coop = KernelVariant::k128x256_c2x1, pp = KernelVariant::k128x128_pp_c2x1;
  return wave_efficiency(tiles_of(p, pp), sms) > wave_efficiency(tiles_of(p, coop), sms) + 0.05 ? pp : coop;
}
// An H100-class device: less memory bandwidth than kLeanDramGbps (0: unknown, the H200's rules).
bool lean_memory(const GemmProblem& p) { return p.dram_gbps > 0.0 && p.dram_gbps < kLeanDramGbps; }
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
  const KernelVariant pp = KernelVariant::k128x128_pp_c2x1;
  const int sms = p.sm_count > 0 ? p.sm_count : 132;
  GemmConfig c;
  if (p.k <= 4096 || (tiles_of(p, pp) >= 4 * int64_t(sms) && p.k <= kPingpongMaxK)) {
    c.variant = pp;
  } else {
    c.variant = coop_unless_pingpong_fills_better(p, sms);
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
  // H100-class memory (kLeanDramGbps): the pingpong tile above loses at most large shapes there,
  // the cooperative one does not (H100 SXM, `coda bench --variants gemm.` at 4ca1a55, the tile order
  // above for every variant: geomean over the 29 GEMM cases 1.18x cuBLAS pingpong, 1.05x
  // cooperative, 1.041x with this rule, 1.033x the best of the three per case; 8B gate/up dgrad
  // 1.549 -> 1.003, LM head 1.607 -> 1.127). The pingpong tile stays where the cooperative one leaves
  // the last wave clearly emptier (1B QKV wgrad: 1.023 against 1.323).
  if (lean_memory(p) && p.k <= kPingpongMaxK) c.variant = coop_unless_pingpong_fills_better(p, sms);
  return c;
}

GemmConfig choose_fused_config(const GemmProblem& p, const KernelVariant* forced) {
  // Compiled for fused programs: 128x256 cooperative and 128x128 pingpong. On an H200 fused programs
  // run on the pingpong kernel at every K up to kPingpongMaxK: its epilogue hides under the other
  // warpgroup's mainloop, while the cooperative kernel's does not (120ddcf, `coda bench --variants`:
  // pingpong faster on all 14 cases, 1.02-1.22x cuBLAS against 1.06-1.43x, K = 8192 and 14336 and
  // the LM head included, whose 128-column tiles merge each granule's LSE halves; bench/NOTES.md).
  // Beyond kPingpongMaxK the plain GEMM's long-K rule applies (the epilogue is negligible there and
  // the pingpong kernel was unstable: lm_head_backward's dgrad, K = V).
  const KernelVariant coop = KernelVariant::k128x256_c2x1, pp = KernelVariant::k128x128_pp_c2x1;
  GemmProblem h200 = p;
  h200.dram_gbps = 0.0;  // the plain GEMM's rule of the H200 (above) only beyond kPingpongMaxK
  GemmConfig c = choose_config(h200);
  if (p.k <= kPingpongMaxK || c.variant != coop) c.variant = pp;
  // H100-class memory (kLeanDramGbps): the pingpong kernel still wins every 1B case, and the
  // cooperative one wins where the weight is large (H100 SXM, `coda bench --variants op. lmhead.
  // block.` at 4ca1a55, cooperative / pingpong x cuBLAS: LM head 1.368 / 1.961, 8B gate/up 1.129 /
  // 1.255, 8B down 1.058 / 1.088, SwiGLU backward 8B 1.291 / 1.451, RMSNorm backward 8B gate/up
  // 1.041 / 1.363, the pingpong kernel in the H200's tile order; against 1B gate/up 1.251 / 1.159 at
  // N x K = 2^25 and 8B QKV, N x K = 1.5 x 2^24, within 3% either way).
  // Except where the epilogue's traffic is large next to the mainloop's (epi_bytes per accumulator
  // element against K): there the pingpong kernel still hides that epilogue, given a tile order
  // that reuses the weight in L2. Its H200 order walks column bands there (raster N), streaming A,
  // which is not multicast: on the H100 that read 43.8 GB from DRAM for the LM head where a band
  // model says 4.2 (ncu, 31564f3). Row bands of two cluster rows (raster M, 512 rows) stream the
  // multicast weight instead. Three alternating rounds at 31564f3 (H100 SXM, median us, cooperative
  // against pingpong in those bands; bench/NOTES.md): the pingpong kernel won every round for the
  // LM head storing its logits (2 bytes at K = 2048: 15742 against 14979) and the SwiGLU backward
  // 8B (z read, dz and o written: 10 bytes at K = 4096; 1718 against 1573); the cooperative one for
  // the 8B gate/up (3 bytes at K = 4096: 2981 against 3089), 8B down (6 at 14336: 1400 against
  // 1499), the RMSNorm backward 8B (8 at 28672: 3094 against 4308) and the logits-free LM head
  // (13590 against 13937). kLeanHeavyEpilogueK sits between the closest two (1024 and 1365 K per
  // byte).
  const bool lean_large = lean_memory(p) && p.n * p.k > kLeanFusedPingpongMaxWeight;
  if (lean_large) c.variant = p.epi_bytes * kLeanHeavyEpilogueK >= double(p.k) ? pp : coop;
  if (forced) c.variant = *forced;  // tests and benchmarks (CODA_FUSED_VARIANT)
  if (c.variant == coop) {
    const int64_t tm = (p.m + 127) / 128, tn = (p.n + 255) / 256;
    c.raster_n = tn > tm;
    c.swizzle = 8;
  } else if (lean_large) {
    c.raster_n = false;
    c.swizzle = 2;
  }
  return c;
}

}  // namespace coda
