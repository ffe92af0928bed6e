// The CPU epilogue driver: a host context for epilogue programs and the tile loop that runs them.
//
// It plays the GPU kernel's part in the simplest way: for each tile_m x tile_n output tile, form
// the fp32 accumulator from the stored inputs, call the program once per column pair (in row
// order), then flush the tile's partial reductions. The program struct is the kernel's own.
#pragma once

#include <vector>

#include "coda/epilogue/program.hpp"
#include "coda/host.hpp"
#include "coda/ref/emulator.hpp"

namespace coda::emu::detail {

constexpr int kSlots = 4;

class HostCtx {
 public:
  // ---- operands, bound by an operator before run_gemm -------------------------------------------
  float scalars[kSlots] = {1.0f, 0.0f, 0.0f, 0.0f};
  TensorView rows[kSlots];          // per-row float vectors   [M]
  TensorView row_ints[kSlots];      // per-row int32 vectors   [M]
  TensorView cols[kSlots];          // per-column vectors      [any]
  int col_period[kSlots] = {};      // column n reads entry epi::col_entry(n, period, step)
  int col_step[kSlots] = {1, 1, 1, 1};
  TensorView tiles[kSlots];         // tile operands           [M, any]
  TensorView outs[kSlots];          // tile outputs            [M, any]
  TensorView row_outs[kSlots];      // per-row outputs         [M]
  TensorView row_partials[kSlots];  // [M, ceil(N / tile_n)]
  TensorView lse_partials[kSlots];  // [M, ceil(N / tile_n)]
  TensorView col_partials[kSlots];  // [ceil(M / tile_m), N]
  TensorView seg_partials[kSlots];  // [M, heads * segments]
  int64_t seg_head_dim = 0;         // segment layout for seg_sum
  int64_t seg_per_head = 1;

  // ---- the context interface (epilogue/program.hpp) -----------------------------------------------
  float scalar(int i) const { return scalars[i]; }
  float row(int i, const epi::Frag& f) const { return load_f32(rows[i], f.m); }
  int row_int(int i, const epi::Frag& f) const { return static_cast<int>(load_i32(row_ints[i], f.m)); }
  float col(int i, const epi::Frag&, int n) const {
    return load_f32(cols[i], epi::col_entry(n, col_period[i], col_step[i]));
  }
  float tile(int i, const epi::Frag& f, int n) const { return load_f32(tiles[i], f.m, n); }
  epi::Pair tile2(int i, const epi::Frag& f, int n) const { return {tile(i, f, n), tile(i, f, n + 1)}; }
  float store(int o, const epi::Frag& f, int n, float v) const {
    if (!outs[o].defined() || n >= outs[o].cols()) return v;
    store_f32(outs[o], f.m, n, v);
    return load_f32(outs[o], f.m, n);
  }
  epi::Pair store2(int o, const epi::Frag& f, int n, float v0, float v1) const {
    return {store(o, f, n, v0), store(o, f, n + 1, v1)};
  }
  void row_store(int o, const epi::Frag& f, float v) const { store_f32(row_outs[o], f.m, 0, v); }
  void row_sum(int r, const epi::Frag& f, float v) { row_acc_[r][static_cast<size_t>(f.m - m0_)] += v; }
  void row_lse(int r, const epi::Frag& f, float v0, float v1) {
    epi::OnlineLse& l = lse_acc_[r][static_cast<size_t>(f.m - m0_)];
    l.add(v0);
    if (f.ok[1]) l.add(v1);
  }
  void col_sum(int c, const epi::Frag&, int n, float v) { col_acc_[c][static_cast<size_t>(n - n0_)] += v; }
  void seg_sum(int s, const epi::Frag& f, int n, float v);
  void rotation(const epi::Frag& f, int pos, int freq, float* s, float* c) const {
    epi::rope_sincos_at(row_int(pos, f), col(freq, f, f.n), s, c);
  }

  // ---- driver hooks -------------------------------------------------------------------------------
  void begin_tile(int64_t m0, int64_t n0, int64_t tm, int64_t tn, int64_t tile_m, int64_t tile_n);
  void end_tile();

 private:
  int64_t m0_ = 0, n0_ = 0, tm_ = 0, tn_ = 0, tile_m_ = 1, tile_n_ = 1;
  std::vector<float> row_acc_[kSlots];
  std::vector<epi::OnlineLse> lse_acc_[kSlots];
  std::vector<float> col_acc_[kSlots];
  std::vector<float> seg_acc_[kSlots];    // [tm, segments]
  std::vector<char> seg_touched_[kSlots];  // [segments]
};

// Inputs of a GEMM converted once to fp32 (exact for bf16/fp16).
struct GemmInputs {
  int64_t m = 0, n = 0, k = 0;
  std::vector<float> a;  // [m, k]
  std::vector<float> b;  // [n, k]
  GemmInputs(const TensorView& a_view, const TensorView& b_view);
};

// Columns of a span of pinned switches (epi::span_flags): the GPU epilogue's chunk width.
constexpr int64_t kSpanCols = 64;

// Run `program` over every output tile of a b^T.
template <class Program>
void run_gemm(const GemmInputs& in, const Program& program, HostCtx& ctx, const EmuConfig& cfg) {
  std::vector<float> acc(static_cast<size_t>(cfg.tile_m * cfg.tile_n));
  for (int64_t m0 = 0; m0 < in.m; m0 += cfg.tile_m) {
    const int64_t tm = std::min(cfg.tile_m, in.m - m0);
    for (int64_t n0 = 0; n0 < in.n; n0 += cfg.tile_n) {
      const int64_t tn = std::min(cfg.tile_n, in.n - n0);
      ctx.begin_tile(m0, n0, tm, tn, cfg.tile_m, cfg.tile_n);
      for (int64_t i = 0; i < tm; ++i) {
        const float* arow = &in.a[static_cast<size_t>((m0 + i) * in.k)];
        for (int64_t j = 0; j < tn; ++j) {
          const float* brow = &in.b[static_cast<size_t>((n0 + j) * in.k)];
          float s = 0.0f;
          for (int64_t kk = 0; kk < in.k; ++kk) s += arow[kk] * brow[kk];
          acc[static_cast<size_t>(i * cfg.tile_n + j)] = s;
        }
      }
      for (int64_t i = 0; i < tm; ++i) {
        Program span_program = program;  // its switches pinned per span, as the GPU's chunks are
        for (int64_t j = 0; j < tn; j += 2) {
          if (j == 0 || (n0 + j) % kSpanCols == 0) {
            const int64_t s0 = (n0 + j) / kSpanCols * kSpanCols;
            span_program = epi::for_span(program, static_cast<int>(s0),
                                         static_cast<int>(std::min(s0 + kSpanCols, in.n)));
          }
          epi::Frag f;
          f.m = static_cast<int>(m0 + i);
          f.n = static_cast<int>(n0 + j);
          f.ok[0] = true;
          f.ok[1] = j + 1 < tn;
          f.v[0] = acc[static_cast<size_t>(i * cfg.tile_n + j)];
          f.v[1] = f.ok[1] ? acc[static_cast<size_t>(i * cfg.tile_n + j + 1)] : 0.0f;
          span_program(f, ctx);
        }
      }
      ctx.end_tile();
    }
  }
}

}  // namespace coda::emu::detail

namespace coda::emu {
// Host-data checks the GPU path cannot make before launch (gemm_ops.cpp).
Status check_positions(const char* op, const TensorView& positions);
// Each target in [0, classes) or equal to ignore_index (classes < 0: no upper bound).
Status check_targets(const char* op, const TensorView& targets, int64_t classes, int32_t ignore_index);
Status check_ce_targets(const CrossEntropyArgs& args);
}  // namespace coda::emu
