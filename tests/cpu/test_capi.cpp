// The C ABI (libcoda.so) on host tensors: every operator entry point runs through the CPU emulator
// when its tensors are host memory (coda.h, "Where a call runs"), with no GPU needed.
//
//  - the operator tests shared with the emulator and the GPU (tests/common/op_tests.inc) through
//    coda.h: every forward operator against float64 under design.md's rule;
//  - the host path is the emulator: same results bit for bit, same validation messages, nothing
//    written on failure, the stream never used;
//  - the LM-head loss and the LM-head training pair with host workspaces, the weight-layout
//    helpers, gemm_ex's host scalars.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "coda/coda.h"
#include "coda/host.hpp"
#include "coda/ops.hpp"
#include "coda/ref/emulator.hpp"
#include "cpu/capi_ops.hpp"
#include "cpu/util.hpp"
#include "common/op_prelude.hpp"

namespace coda {
namespace {

const std::vector<Shape> kShapes = {{1, 8, 8}, {7, 72, 24}, {129, 40, 72}, {33, 264, 16}};
const std::vector<emu::EmuConfig> kGrains = {{CODA_PARTIAL_ROWS, CODA_PARTIAL_COLS}};
const std::vector<emu::EmuConfig> kQkGrains = kGrains;
const std::vector<int64_t> kQkHeadDims = {16, 64, 128};

class CAbiHost : public ::testing::Test {};
#define CODA_OPS capi_ops
#define CODA_OP_SUITE CAbiHost
#define CODA_OPS_BACKWARD 0
#define CODA_OPS_RMSNORM_BACKWARD 1
#define CODA_OPS_SWIGLU_BACKWARD 1
#define CODA_OPS_ROPE_BACKWARD 1
#define CODA_OPS_QKNORM_BACKWARD 1
#define CODA_OPS_CE_ZDZ 0

#include "common/op_tests.inc"

// A stream the host path must never touch: any use of it would crash or fail.
const coda_stream_t kBogusStream = reinterpret_cast<coda_stream_t>(static_cast<uintptr_t>(0xdead));

bool same_bytes(const HostTensor& a, const HostTensor& b) {
  return a.bytes() == b.bytes() && std::memcmp(a.data(), b.data(), a.bytes()) == 0;
}

TEST_F(CAbiHost, HostPathIsTheEmulatorBitForBit) {
  CODA_SEEDED_RNG(rng);
  const int64_t m = 70, k = 72, f = 136;
  HostTensor a = random_tensor(rng, kBF16, m, k, 1.0, nullptr), w = random_tensor(rng, kBF16, 2 * f, k, 0.2, nullptr);
  HostTensor r = from_vec(positive_vec(rng, m), kFP32);
  HostTensor z1 = output(kBF16, m, 2 * f), o1 = output(kBF16, m, f), z2 = output(kBF16, m, 2 * f),
             o2 = output(kBF16, m, f);
  CODA_ASSERT_OK(emu::gemm_rmsnorm_swiglu({a, w, r, z1, o1}));
  const coda_tensor_t ta = a.view().desc, tw = w.view().desc, tr = r.view().desc, tz = z2.view().desc,
                      to = o2.view().desc;
  ASSERT_EQ(coda_gemm_rmsnorm_swiglu(&ta, &tw, &tr, &tz, &to, kBogusStream), CODA_SUCCESS) << coda_last_error();
  EXPECT_TRUE(same_bytes(z1, z2) && same_bytes(o1, o2));

  HostTensor d1 = output(kFP32, m, 2 * f), d2 = output(kFP32, m, 2 * f);
  CODA_ASSERT_OK(emu::gemm({a, w, {}, d1}));
  const coda_tensor_t td = d2.view().desc;
  ASSERT_EQ(coda_gemm(&ta, &tw, &td, kBogusStream), CODA_SUCCESS) << coda_last_error();
  EXPECT_TRUE(same_bytes(d1, d2));
}

// gemm_ex reads alpha and beta from host pointers on the host path.
TEST_F(CAbiHost, GemmExScalarsFromHostPointers) {
  CODA_SEEDED_RNG(rng);
  Mat a, b, c;
  HostTensor ta = random_tensor(rng, kBF16, 9, 24, 1.0, &a), tb = random_tensor(rng, kBF16, 16, 24, 1.0, &b);
  HostTensor tc = random_tensor(rng, kBF16, 9, 16, 1.0, &c);
  HostTensor d = output(kFP32, 9, 16);
  const float alpha = 0.5f, beta = -2.0f;
  const coda_tensor_t da = ta.view().desc, db = tb.view().desc, dc = tc.view().desc, dd = d.view().desc;
  ASSERT_EQ(coda_gemm_ex(&da, &db, &dc, &dd, 9.0f, 9.0f, &alpha, &beta, nullptr), CODA_SUCCESS) << coda_last_error();
  const Mat want = ref::add(ref::scale(ref::matmul_nt(a, b), 0.5), ref::scale(c, -2.0));
  EXPECT_LT(ref::rel_error(to_mat(d), want), 1e-6);
}

// A rejected call returns the emulator's message (the same validate() as the GPU) and writes nothing.
TEST_F(CAbiHost, SameMessagesAndNothingWritten) {
  CODA_SEEDED_RNG(rng);
  const int64_t m = 12, k = 16, n = 40;
  HostTensor a = random_tensor(rng, kBF16, m, k, 1.0, nullptr), w = random_tensor(rng, kBF16, n, k, 0.3, nullptr);
  HostTensor z = output(kBF16, m, n), o = output(kBF16, m, n / 2 + 1);  // o has one column too many
  const coda_tensor_t ta = a.view().desc, tw = w.view().desc, tz = z.view().desc, to = o.view().desc;
  const Status want = emu::gemm_swiglu({a, w, {}, z, o});
  ASSERT_EQ(want.code(), CODA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(want.message().find("argument 'o_out'"), std::string::npos) << want.message();
  EXPECT_EQ(coda_gemm_swiglu(&ta, &tw, nullptr, &tz, &to, nullptr), CODA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(coda_last_error()), want.message());
  EXPECT_FALSE(z.fully_written());
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) ASSERT_TRUE(std::isnan(z.get(i, j))) << "a rejected call wrote z";

  // The rmsnorm entry points require rstd, with the GPU's message.
  HostTensor o_ok = output(kBF16, m, n / 2);
  const coda_tensor_t tok = o_ok.view().desc;
  EXPECT_EQ(coda_gemm_rmsnorm_swiglu(&ta, &tw, nullptr, nullptr, &tok, nullptr), CODA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(coda_last_error()),
            "gemm_rmsnorm_swiglu: argument 'rstd' is required (the RMSNorm of the GEMM input); use the operator "
            "without 'rmsnorm' in its name to run without it");

  // A required tensor left out: validation names it (no pointer to place).
  EXPECT_EQ(coda_gemm(nullptr, &tw, &tz, nullptr), CODA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(coda_last_error()).find("argument 'a'"), std::string::npos) << coda_last_error();
  // Success clears the message.
  ASSERT_EQ(coda_gemm_swiglu(&ta, &tw, nullptr, &tz, &tok, nullptr), CODA_SUCCESS) << coda_last_error();
  EXPECT_STREQ(coda_last_error(), "");
  // Host data the emulator can read is checked: a negative position is rejected, nothing written.
  const HeadDims h{1, 1, 8};
  HostTensor wq = random_tensor(rng, kBF16, h.qkv_cols(), k, 0.3, nullptr), q = output(kBF16, m, h.qkv_cols());
  std::vector<int32_t> pos(static_cast<size_t>(m), 3);
  pos[4] = -1;
  HostTensor tp = from_ints(pos);
  Vec fd;
  HostTensor tf = freq_tensor(h.head_dim, &fd);
  const coda_tensor_t twq = wq.view().desc, tq = q.view().desc, tpp = tp.view().desc, tff = tf.view().desc;
  EXPECT_EQ(coda_gemm_rope(&ta, &twq, nullptr, &tpp, &tff, coda_heads_t{1, 1, 8}, &tq, nullptr),
            CODA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(coda_last_error()).find("gemm_rope: argument 'positions' holds a negative value"),
            std::string::npos)
      << coda_last_error();
  EXPECT_FALSE(q.fully_written());
}

// The logits-free loss with a host workspace equals its three steps run one by one, and the
// float64 loss under the rule; the workspace rule is the GPU's.
TEST_F(CAbiHost, LmHeadLossWithHostWorkspace) {
  CODA_SEEDED_RNG(rng);
  const int64_t m = 37, v = 517, k = 32;
  Mat a, w;
  HostTensor ta = random_tensor(rng, kBF16, m, k, 1.0, &a), tw = random_tensor(rng, kBF16, v, k, 0.5, &w);
  const Vec r = positive_vec(rng, m);
  HostTensor tr = from_vec(r, kFP32);
  std::vector<int32_t> t(static_cast<size_t>(m));
  for (auto& x : t) x = static_cast<int32_t>(rng.integer(0, v - 1));
  t[3] = CODA_IGNORE_INDEX;
  HostTensor tt = from_ints(t);
  const coda_tensor_t da = ta.view().desc, dw = tw.view().desc, dr = tr.view().desc, dt = tt.view().desc;

  const size_t wsb = coda_lm_head_loss_workspace_bytes(m, v);
  ASSERT_EQ(wsb, lm_head_loss_workspace_bytes(m, v));
  std::vector<float> ws(wsb / sizeof(float) + 1);
  HostTensor loss = output(kFP32, 1, 0), rl = output(kFP32, m, 0), lse = output(kFP32, m, 0);
  const coda_tensor_t dl = loss.view().desc, drl = rl.view().desc, dlse = lse.view().desc;
  ASSERT_EQ(coda_lm_head_loss(&da, &dw, &dr, &dt, CODA_IGNORE_INDEX, CODA_REDUCTION_MEAN, &dl, &drl, &dlse, ws.data(),
                              wsb, kBogusStream),
            CODA_SUCCESS)
      << coda_last_error();
  EXPECT_TRUE(loss.fully_written() && rl.fully_written() && lse.fully_written());

  // The same three steps through the C ABI.
  const int64_t parts = ceil_div(v, CODA_PARTIAL_COLS);
  HostTensor lp = test::partials(m, parts), tl = output(kFP32, m, 0), lse2 = output(kFP32, m, 0);
  HostTensor loss2 = output(kFP32, 1, 0), rl2 = output(kFP32, m, 0);
  const coda_tensor_t dlp = lp.view().desc, dtl = tl.view().desc, dlse2 = lse2.view().desc,
                      dl2 = loss2.view().desc, drl2 = rl2.view().desc;
  ASSERT_EQ(coda_gemm_rmsnorm_lse(&da, &dw, &dr, &dt, CODA_IGNORE_INDEX, nullptr, &dlp, &dtl, nullptr), CODA_SUCCESS);
  ASSERT_EQ(coda_lse_finish(&dlp, &dlse2, nullptr), CODA_SUCCESS);
  ASSERT_EQ(coda_cross_entropy(&dlse2, &dtl, &dt, CODA_IGNORE_INDEX, CODA_REDUCTION_MEAN, &dl2, &drl2, nullptr, nullptr,
                               1.0f, nullptr),
            CODA_SUCCESS)
      << coda_last_error();
  EXPECT_TRUE(same_bytes(loss, loss2) && same_bytes(rl, rl2) && same_bytes(lse, lse2));

  const Mat l64 = row_scale(ref::matmul_nt(a, w), r);
  const Mat lu = rounded(ref::matmul_nt(rounded(row_scale(a, r)), w));
  const ref::CrossEntropy want = ref::cross_entropy(l64, t, CODA_IGNORE_INDEX, true);
  const ref::CrossEntropy unf = ref::cross_entropy(lu, t, CODA_IGNORE_INDEX, true);
  EXPECT_TRUE(within_rule("row loss", ref::rel_error(to_mat(rl), ref::from_vec(want.row_loss)),
                          ref::rel_error(ref::from_vec(unf.row_loss), ref::from_vec(want.row_loss))));

  EXPECT_EQ(coda_lm_head_loss(&da, &dw, &dr, &dt, CODA_IGNORE_INDEX, CODA_REDUCTION_MEAN, &dl, nullptr, nullptr,
                              ws.data(), wsb - 4, nullptr),
            CODA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(coda_last_error()).find("lm_head_loss (rmsnorm): argument 'workspace' must hold at least"),
            std::string::npos)
      << coda_last_error();
  EXPECT_EQ(coda_lm_head_loss(&da, &dw, &dr, &dt, CODA_IGNORE_INDEX, static_cast<coda_reduction_t>(7), &dl, nullptr,
                              nullptr, ws.data(), wsb, nullptr),
            CODA_ERROR_INVALID_ARGUMENT);
}

// lm_head_train and lm_head_backward with host workspaces are the emulator's, bit for bit (the
// stream never used; dloss from a host pointer); a workspace one byte short is rejected with the
// message naming 'workspace' and its size function, and nothing is written.
TEST_F(CAbiHost, LmHeadTrainWithHostWorkspace) {
  CODA_SEEDED_RNG(rng);
  const int64_t m = 37, v = 517, k = 32;
  HostTensor ta = random_tensor(rng, kBF16, m, k, 1.0, nullptr), tw = random_tensor(rng, kBF16, v, k, 0.5, nullptr);
  HostTensor tr = from_vec(positive_vec(rng, m), kFP32);
  std::vector<int32_t> t(static_cast<size_t>(m));
  for (auto& x : t) x = static_cast<int32_t>(rng.integer(0, v - 1));
  t[3] = CODA_IGNORE_INDEX;
  HostTensor tt = from_ints(t);
  const coda_tensor_t da = ta.view().desc, dw = tw.view().desc, dr = tr.view().desc, dt = tt.view().desc;

  const size_t wsb = coda_lm_head_train_workspace_bytes(m, v);
  ASSERT_EQ(wsb, lm_head_train_workspace_bytes(m, v));
  std::vector<char> ws(wsb);
  HostTensor loss = output(kFP32, 1, 0), rl = output(kFP32, m, 0), lse = output(kFP32, m, 0);
  HostTensor grad = output(kBF16, m, v), u = output(kFP32, m, 0);
  const coda_tensor_t dl = loss.view().desc, drl = rl.view().desc, dlse = lse.view().desc, dg = grad.view().desc,
                      du = u.view().desc;
  ASSERT_EQ(coda_lm_head_train(&da, &dw, &dr, &dt, CODA_IGNORE_INDEX, CODA_REDUCTION_MEAN, &dl, &drl, &dlse, &dg, &du,
                               ws.data(), wsb, kBogusStream),
            CODA_SUCCESS)
      << coda_last_error();
  EXPECT_TRUE(loss.fully_written() && rl.fully_written() && lse.fully_written() && grad.fully_written() &&
              u.fully_written());

  // The emulator on the same inputs: the same bits.
  HostTensor loss2 = output(kFP32, 1, 0), rl2 = output(kFP32, m, 0), lse2 = output(kFP32, m, 0);
  HostTensor grad2 = output(kBF16, m, v), u2 = output(kFP32, m, 0);
  std::vector<char> ws2(wsb);
  LmHeadTrainArgs args;
  args.a = ta;
  args.b = tw;
  args.rstd = tr;
  args.targets = tt;
  args.loss_out = loss2;
  args.row_loss_out = rl2;
  args.lse_out = lse2;
  args.grad_out = grad2;
  args.grad_scale_out = u2;
  args.workspace = ws2.data();
  args.workspace_bytes = wsb;
  CODA_ASSERT_OK(emu::lm_head_train(args));
  EXPECT_TRUE(same_bytes(loss, loss2) && same_bytes(rl, rl2) && same_bytes(lse, lse2) && same_bytes(grad, grad2) &&
              same_bytes(u, u2));

  // The backward, dloss read from a host pointer, against the emulator with the same dloss by value.
  const size_t wbb = coda_lm_head_backward_workspace_bytes(m, k);
  ASSERT_EQ(wbb, lm_head_backward_workspace_bytes(m, k));
  std::vector<char> wb(wbb), wb2(wbb);
  const float dloss = 0.75f;
  HostTensor dA = output(kBF16, m, k), dB = output(kFP32, v, k), dA2 = output(kBF16, m, k), dB2 = output(kFP32, v, k);
  const coda_tensor_t dda = dA.view().desc, ddb = dB.view().desc;
  ASSERT_EQ(coda_lm_head_backward(&da, &dw, &dr, &dg, &du, 9.0f, &dloss, &dda, &ddb, wb.data(), wbb, kBogusStream),
            CODA_SUCCESS)
      << coda_last_error();
  EXPECT_TRUE(dA.fully_written() && dB.fully_written());
  LmHeadBackwardArgs bargs;
  bargs.a = ta;
  bargs.b = tw;
  bargs.rstd = tr;
  bargs.grad = grad2;
  bargs.grad_scale = u2;
  bargs.dloss = dloss;
  bargs.da_out = dA2;
  bargs.db_out = dB2;
  bargs.workspace = wb2.data();
  bargs.workspace_bytes = wbb;
  CODA_ASSERT_OK(emu::lm_head_backward(bargs));
  EXPECT_TRUE(same_bytes(dA, dA2) && same_bytes(dB, dB2));
  // Only db: da_out NULL.
  HostTensor dB3 = output(kFP32, v, k);
  const coda_tensor_t ddb3 = dB3.view().desc;
  ASSERT_EQ(coda_lm_head_backward(&da, &dw, &dr, &dg, &du, dloss, nullptr, nullptr, &ddb3, wb.data(), wbb, nullptr),
            CODA_SUCCESS)
      << coda_last_error();
  EXPECT_TRUE(same_bytes(dB, dB3));

  // A workspace one byte short: rejected, named, nothing written.
  HostTensor grad4 = output(kBF16, m, v), u4 = output(kFP32, m, 0), loss4 = output(kFP32, 1, 0);
  const coda_tensor_t dg4 = grad4.view().desc, du4 = u4.view().desc, dl4 = loss4.view().desc;
  EXPECT_EQ(coda_lm_head_train(&da, &dw, &dr, &dt, CODA_IGNORE_INDEX, CODA_REDUCTION_MEAN, &dl4, nullptr, nullptr,
                               &dg4, &du4, ws.data(), wsb - 1, nullptr),
            CODA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(coda_last_error())
                .find("lm_head_train: argument 'workspace' must hold at least " + std::to_string(wsb) +
                      " bytes (lm_head_train_workspace_bytes)"),
            std::string::npos)
      << coda_last_error();
  EXPECT_TRUE(same_bytes(grad4, output(kBF16, m, v)) && same_bytes(u4, output(kFP32, m, 0)) &&
              same_bytes(loss4, output(kFP32, 1, 0)))
      << "a rejected call wrote an output";
  EXPECT_EQ(coda_lm_head_train(&da, &dw, &dr, &dt, CODA_IGNORE_INDEX, CODA_REDUCTION_MEAN, &dl4, nullptr, nullptr,
                               &dg4, &du4, nullptr, wsb, nullptr),
            CODA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(coda_last_error()).find("argument 'workspace'"), std::string::npos) << coda_last_error();
  HostTensor dA4 = output(kBF16, m, k), dB4 = output(kFP32, v, k);
  const coda_tensor_t dda4 = dA4.view().desc, ddb4 = dB4.view().desc;
  EXPECT_EQ(coda_lm_head_backward(&da, &dw, &dr, &dg, &du, dloss, nullptr, &dda4, &ddb4, wb.data(), wbb - 1, nullptr),
            CODA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(coda_last_error())
                .find("lm_head_backward: argument 'workspace' must hold at least " + std::to_string(wbb) +
                      " bytes (lm_head_backward_workspace_bytes)"),
            std::string::npos)
      << coda_last_error();
  EXPECT_TRUE(same_bytes(dA4, output(kBF16, m, k)) && same_bytes(dB4, output(kFP32, v, k)))
      << "a rejected call wrote an output";
  EXPECT_EQ(coda_lm_head_train(&da, &dw, &dr, &dt, CODA_IGNORE_INDEX, static_cast<coda_reduction_t>(7), &dl4, nullptr,
                               nullptr, &dg4, &du4, ws.data(), wsb, nullptr),
            CODA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(coda_last_error()).find("coda_lm_head_train: argument 'reduction'"), std::string::npos)
      << coda_last_error();
}

TEST_F(CAbiHost, WeightLayoutHelpers) {
  CODA_SEEDED_RNG(rng);
  const int64_t f = 40, k = 24;
  HostTensor gate = random_tensor(rng, kBF16, f, k, 1.0, nullptr), up = random_tensor(rng, kBF16, f, k, 1.0, nullptr);
  HostTensor gu = output(kBF16, 2 * f, k);
  const coda_tensor_t tg = gate.view().desc, tu = up.view().desc, tgu = gu.view().desc;
  ASSERT_EQ(coda_interleave_gate_up(&tg, &tu, &tgu, kBogusStream), CODA_SUCCESS) << coda_last_error();
  for (int64_t r = 0; r < 2 * f; ++r)
    for (int64_t c = 0; c < k; ++c) ASSERT_EQ(gu.get(r, c), (r % 2 ? up : gate).get(r / 2, c)) << r << "," << c;
  HostTensor bad = output(kBF16, 2 * f + 1, k);
  const coda_tensor_t tbad = bad.view().desc;
  EXPECT_EQ(coda_interleave_gate_up(&tg, &tu, &tbad, nullptr), CODA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(coda_last_error()).find("interleave_gate_up: argument 'out'"), std::string::npos)
      << coda_last_error();

  // Rotate-half pairs (i, i + hd/2) of each q/k head -> interleaved (2i, 2i + 1); v rows copied.
  const HeadDims heads{2, 1, 8};
  const int64_t n3 = heads.qkv_cols();
  HostTensor w = random_tensor(rng, kBF16, n3, k, 1.0, nullptr), wp = output(kBF16, n3, k);
  const coda_tensor_t tw = w.view().desc, twp = wp.view().desc;
  ASSERT_EQ(coda_permute_rotate_half_to_interleaved(&tw, coda_heads_t{2, 1, 8}, &twp, kBogusStream), CODA_SUCCESS)
      << coda_last_error();
  for (int64_t r = 0; r < n3; ++r) {
    int64_t src = r;
    if (r < heads.rope_cols()) {
      const int64_t head = r / 8, j = r % 8;
      src = head * 8 + (j % 2 ? 4 + j / 2 : j / 2);
    }
    for (int64_t c = 0; c < k; ++c) ASSERT_EQ(wp.get(r, c), w.get(src, c)) << r;
  }
  EXPECT_EQ(coda_permute_rotate_half_to_interleaved(&tw, coda_heads_t{2, 1, 7}, &twp, nullptr),
            CODA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(coda_last_error()).find("argument 'heads'"), std::string::npos) << coda_last_error();
}

}  // namespace
}  // namespace coda
