// The CPU epilogue driver: partial-reduction bookkeeping.
#include "driver.hpp"

namespace coda::emu::detail {

void HostCtx::seg_sum(int s, const epi::Frag& f, int n, float v) {
  const int64_t head = n / seg_head_dim;
  const int64_t within = n % seg_head_dim;
  const int64_t seg = seg_per_head == 1 ? 0 : within / (seg_head_dim / seg_per_head);
  const int64_t idx = head * seg_per_head + seg;
  const int64_t nseg = seg_partials[s].cols();
  seg_acc_[s][static_cast<size_t>((f.m - m0_) * nseg + idx)] += v;
  seg_touched_[s][static_cast<size_t>(idx)] = 1;
}

void HostCtx::begin_tile(int64_t m0, int64_t n0, int64_t tm, int64_t tn, int64_t tile_m, int64_t tile_n) {
  m0_ = m0;
  n0_ = n0;
  tm_ = tm;
  tn_ = tn;
  tile_m_ = tile_m;
  tile_n_ = tile_n;
  for (int i = 0; i < kSlots; ++i) {
    if (row_partials[i].defined()) row_acc_[i].assign(static_cast<size_t>(tm), 0.0f);
    if (lse_partials[i].defined()) lse_acc_[i].assign(static_cast<size_t>(tm), epi::OnlineLse{});
    if (col_partials[i].defined()) col_acc_[i].assign(static_cast<size_t>(tn), 0.0f);
    if (seg_partials[i].defined()) {
      seg_acc_[i].assign(static_cast<size_t>(tm * seg_partials[i].cols()), 0.0f);
      seg_touched_[i].assign(static_cast<size_t>(seg_partials[i].cols()), 0);
    }
  }
}

void HostCtx::end_tile() {
  const int64_t tcol = n0_ / tile_n_;
  const int64_t trow = m0_ / tile_m_;
  for (int s = 0; s < kSlots; ++s) {
    if (row_partials[s].defined())
      for (int64_t i = 0; i < tm_; ++i) store_f32(row_partials[s], m0_ + i, tcol, row_acc_[s][static_cast<size_t>(i)]);
    if (lse_partials[s].defined())
      for (int64_t i = 0; i < tm_; ++i)
        store_f32(lse_partials[s], m0_ + i, tcol, lse_acc_[s][static_cast<size_t>(i)].value());
    if (col_partials[s].defined())
      for (int64_t j = 0; j < tn_; ++j) store_f32(col_partials[s], trow, n0_ + j, col_acc_[s][static_cast<size_t>(j)]);
    if (seg_partials[s].defined()) {
      const int64_t nseg = seg_partials[s].cols();
      for (int64_t idx = 0; idx < nseg; ++idx) {
        if (!seg_touched_[s][static_cast<size_t>(idx)]) continue;
        for (int64_t i = 0; i < tm_; ++i)
          store_f32(seg_partials[s], m0_ + i, idx, seg_acc_[s][static_cast<size_t>(i * nseg + idx)]);
      }
    }
  }
}

GemmInputs::GemmInputs(const TensorView& av, const TensorView& bv)
    : m(av.rows()), n(bv.rows()), k(av.cols()) {
  a.resize(static_cast<size_t>(m * k));
  b.resize(static_cast<size_t>(n * k));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t kk = 0; kk < k; ++kk) a[static_cast<size_t>(i * k + kk)] = load_f32(av, i, kk);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t kk = 0; kk < k; ++kk) b[static_cast<size_t>(j * k + kk)] = load_f32(bv, j, kk);
}

}  // namespace coda::emu::detail
