/* coda C ABI: plain functions on raw pointers, sizes, strides, dtypes and a CUDA stream.
 *
 * Every function returns a coda_status_t. On failure, coda_last_error() returns a message (per
 * thread, valid until the next coda call on that thread) that names the function, the argument
 * and the rule it broke. A failed call writes nothing to its outputs and launches nothing.
 *
 * Tensors are described by coda_tensor_t: a data pointer, a rank (1..CODA_MAX_RANK), sizes and
 * strides in elements, and a dtype. An optional argument is passed as a NULL pointer.
 *
 * Where a call runs: every operator entry point runs where its tensors live.
 *   - all device memory (cudaMalloc and friends, or managed memory): the sm_90a kernels, launched
 *     on `stream` (asynchronous, like any CUDA launch);
 *   - all host memory (pageable, pinned or registered host memory): the CPU emulator, the same
 *     epilogue code on the host, synchronously before the call returns; `stream` is not used;
 *   - a mix: CODA_ERROR_INVALID_ARGUMENT naming the argument that differs from the first one.
 * Every pointer argument counts (tensors' data, the LM-head workspace, device scalars); NULL ones
 * are ignored. A pointer is device memory when CUDA reports it as device or managed memory
 * (cudaPointerGetAttributes); in a process with no CUDA driver or no visible device, every pointer
 * is host memory (CUDA is asked once; the error of that query is cleared). When a device is
 * visible but CUDA cannot answer for a pointer (a broken context), the call fails with
 * CODA_ERROR_CUDA rather than guess. Both places validate arguments identically (same messages);
 * the GPU adds the rules of its kernels (docs/ops.md), the emulator checks host-readable data
 * (targets in range, positions >= 0).
 */
#ifndef CODA_CODA_H
#define CODA_CODA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CODA_VERSION_MAJOR 0
#define CODA_VERSION_MINOR 1
#define CODA_VERSION_PATCH 0

#define CODA_MAX_RANK 4

/* Granularity of the partial reductions written by fused epilogues. A per-row partial tensor of an
 * M x N GEMM has ceil(N / CODA_PARTIAL_COLS) columns; a per-column partial tensor has
 * ceil(M / CODA_PARTIAL_ROWS) rows. */
#define CODA_PARTIAL_COLS 128
#define CODA_PARTIAL_ROWS 128

/* Target value of a cross-entropy row that is ignored (PyTorch's default). */
#define CODA_IGNORE_INDEX (-100)

typedef enum coda_status {
  CODA_SUCCESS = 0,
  CODA_ERROR_INVALID_ARGUMENT = 1, /* a precondition on an argument failed; nothing was written */
  CODA_ERROR_NOT_SUPPORTED = 2,    /* valid request this build or device cannot run (e.g. no sm_90) */
  CODA_ERROR_CUDA = 3,             /* a CUDA runtime or cuBLAS call failed */
  CODA_ERROR_INTERNAL = 4          /* a bug in coda: please report it with the message */
} coda_status_t;

typedef enum coda_dtype {
  CODA_DTYPE_BF16 = 0,
  CODA_DTYPE_FP16 = 1,
  CODA_DTYPE_FP32 = 2,
  CODA_DTYPE_INT32 = 3
} coda_dtype_t;

typedef struct coda_tensor {
  void* data;                       /* device memory (GPU) or host memory (CPU emulator) */
  int32_t rank;                     /* 1 .. CODA_MAX_RANK */
  coda_dtype_t dtype;
  int64_t sizes[CODA_MAX_RANK];     /* sizes[0] is the outermost dimension */
  int64_t strides[CODA_MAX_RANK];   /* in elements, not bytes */
} coda_tensor_t;

/* Same type as cudaStream_t; 0 is the legacy default stream. */
typedef struct CUstream_st* coda_stream_t;

const char* coda_status_string(coda_status_t status);
/* Message of the last failed coda call on this thread ("" if none). */
const char* coda_last_error(void);
const char* coda_version_string(void);
const char* coda_dtype_name(coda_dtype_t dtype);
/* Bytes per element; 0 for an unknown dtype. */
size_t coda_dtype_size(coda_dtype_t dtype);

/* Row-major descriptors. row_stride is in elements (pass cols for a dense matrix). */
coda_tensor_t coda_tensor_1d(void* data, coda_dtype_t dtype, int64_t n);
coda_tensor_t coda_tensor_2d(void* data, coda_dtype_t dtype, int64_t rows, int64_t cols,
                             int64_t row_stride);

/* CODA_SUCCESS when `device` is a Hopper GPU (sm_90) and this build carries sm_90a kernels;
 * CODA_ERROR_NOT_SUPPORTED with a message otherwise (no GPU, another architecture). */
coda_status_t coda_device_check(int device);

/* ---- GEMM (sm_90a; host tensors: the emulator) ------------------------------------------------
 * D[M, N] = A[M, K] B[N, K]^T. Operand forms through strides (no copies):
 *   forward  a = X [M, K] row-major,  b = W [N, K] row-major
 *   dgrad    a = dY [M, K] row-major, b = W [K, N] row-major viewed as [N, K] (strides {1, N})
 *   wgrad    a = dY^T (dY [K, M] viewed as [M, K], strides {1, M}), b = X^T likewise
 * a, b: bf16 or fp16 (the same); d (and c): bf16, fp16 or fp32, row-major with 16-byte-aligned
 * rows and base. Any M, N, K >= 0 (K = 0 gives d = beta c, or zeros).
 */
coda_status_t coda_gemm(const coda_tensor_t* a, const coda_tensor_t* b, const coda_tensor_t* d,
                        coda_stream_t stream);
/* D = alpha A B^T + beta C; c may be NULL. When alpha_ptr / beta_ptr are not NULL, the scalars
 * are read from those pointers (device memory, or host memory for host tensors) when the kernel
 * runs (alpha / beta are then ignored). */
coda_status_t coda_gemm_ex(const coda_tensor_t* a, const coda_tensor_t* b, const coda_tensor_t* c,
                           const coda_tensor_t* d, float alpha, float beta, const float* alpha_ptr,
                           const float* beta_ptr, coda_stream_t stream);

/* ---- forward fused operators (sm_90a; host tensors: the emulator; docs/ops.md) -----------------
 * GEMM operands in the forward form: a [M, K] and b [N, K], both row-major, bf16 or fp16. Tile
 * outputs are row-major with 16-byte-aligned rows and base, and share one dtype per call. Partial
 * tensors are dense fp32 [M, ceil(N / CODA_PARTIAL_COLS)]. Optional arguments may be NULL.
 * Functions named *_rmsnorm_* require rstd; the others take it as optional (then identical).
 */
typedef struct coda_heads {
  int64_t heads_q;  /* query heads */
  int64_t heads_kv; /* key/value heads */
  int64_t head_dim; /* even */
} coda_heads_t;

typedef enum coda_reduction { CODA_REDUCTION_MEAN = 0, CODA_REDUCTION_SUM = 1 } coda_reduction_t;

/* x = alpha a b^T (+ residual), h = x * norm_weight, partials[m, t] = sum over granule t of x^2.
 * residual may be x_out itself (in place); it is read through TMA and must be bf16 or fp16. */
coda_status_t coda_gemm_residual_rmsnorm_partial(const coda_tensor_t* a, const coda_tensor_t* b,
                                                 const coda_tensor_t* residual,
                                                 const coda_tensor_t* norm_weight,
                                                 const coda_tensor_t* x_out, const coda_tensor_t* h_out,
                                                 const coda_tensor_t* partials, float alpha,
                                                 coda_stream_t stream);
/* rstd[m] = 1 / sqrt(sum_t partials[m, t] / dim + eps) */
coda_status_t coda_rms_finish(const coda_tensor_t* partials, const coda_tensor_t* rstd_out, int64_t dim,
                              float eps, coda_stream_t stream);
/* z = (rstd *) a b^T with b the interleaved gate/up weight [2F, K]; o[:, i] = silu(z[:, 2i]) z[:, 2i+1].
 * z_out [M, 2F] is optional (saved for backward), o_out is [M, F]. */
coda_status_t coda_gemm_swiglu(const coda_tensor_t* a, const coda_tensor_t* b, const coda_tensor_t* rstd,
                               const coda_tensor_t* z_out, const coda_tensor_t* o_out, coda_stream_t stream);
coda_status_t coda_gemm_rmsnorm_swiglu(const coda_tensor_t* a, const coda_tensor_t* b,
                                       const coda_tensor_t* rstd, const coda_tensor_t* z_out,
                                       const coda_tensor_t* o_out, coda_stream_t stream);
/* out = RoPE((rstd *) a b^T): q and k heads rotated on interleaved pairs by pos[m] * freqs[i]
 * (turns), v columns unrotated. positions: int32 [M] >= 0 (a negative one yields NaN in its row). */
coda_status_t coda_gemm_rope(const coda_tensor_t* a, const coda_tensor_t* b, const coda_tensor_t* rstd,
                             const coda_tensor_t* positions, const coda_tensor_t* freqs, coda_heads_t heads,
                             const coda_tensor_t* out, coda_stream_t stream);
coda_status_t coda_gemm_rmsnorm_rope(const coda_tensor_t* a, const coda_tensor_t* b,
                                     const coda_tensor_t* rstd, const coda_tensor_t* positions,
                                     const coda_tensor_t* freqs, coda_heads_t heads, const coda_tensor_t* out,
                                     coda_stream_t stream);
/* Per-pair RoPE frequencies in turns per position (host): head_dim / 2 floats into out.
 * scaling_factor <= 0 disables the Llama-3.1 scaling (low/high_freq_factor, original_max_position). */
coda_status_t coda_rope_frequencies(float* out, int64_t head_dim, double base, double scaling_factor,
                                    double low_freq_factor, double high_freq_factor,
                                    double original_max_position);
/* qkv = (rstd *) a b^T stored; sumsq_out[m, head * segments + s]: per-head sums of squares of q, k. */
coda_status_t coda_gemm_qkv_sqsum(const coda_tensor_t* a, const coda_tensor_t* b, const coda_tensor_t* rstd,
                                  coda_heads_t heads, const coda_tensor_t* qkv_out,
                                  const coda_tensor_t* sumsq_out, coda_stream_t stream);
/* Per-head RMSNorm (gamma_q / gamma_k) and RoPE of q and k, v copied; out may be qkv (in place). */
coda_status_t coda_qknorm_rope(const coda_tensor_t* qkv, const coda_tensor_t* sumsq,
                               const coda_tensor_t* gamma_q, const coda_tensor_t* gamma_k,
                               const coda_tensor_t* positions, const coda_tensor_t* freqs, coda_heads_t heads,
                               float eps, const coda_tensor_t* out, coda_stream_t stream);
/* LM head: logits = (rstd *) a b^T; lse_partials [M, ceil(V / CODA_PARTIAL_COLS)], target_logit_out
 * [M] (0 for ignored rows, NaN for a target outside [0, V)); logits_out [M, V] only when given. */
coda_status_t coda_gemm_lse(const coda_tensor_t* a, const coda_tensor_t* b, const coda_tensor_t* rstd,
                            const coda_tensor_t* targets, int32_t ignore_index,
                            const coda_tensor_t* logits_out, const coda_tensor_t* lse_partials,
                            const coda_tensor_t* target_logit_out, coda_stream_t stream);
coda_status_t coda_gemm_rmsnorm_lse(const coda_tensor_t* a, const coda_tensor_t* b, const coda_tensor_t* rstd,
                                    const coda_tensor_t* targets, int32_t ignore_index,
                                    const coda_tensor_t* logits_out, const coda_tensor_t* lse_partials,
                                    const coda_tensor_t* target_logit_out, coda_stream_t stream);
/* lse[m] = log sum_t exp(partials[m, t]) */
coda_status_t coda_lse_finish(const coda_tensor_t* partials, const coda_tensor_t* lse_out,
                              coda_stream_t stream);
/* loss_out[0] = mean (or sum) over non-ignored rows of lse - target_logit; row_loss_out optional.
 * With logits and dlogits_out (may be the same tensor: in place), dlogits = (softmax - onehot) *
 * dloss (/ count for the mean). All rows ignored: loss 0 and zero gradients. */
coda_status_t coda_cross_entropy(const coda_tensor_t* lse, const coda_tensor_t* target_logit,
                                 const coda_tensor_t* targets, int32_t ignore_index,
                                 coda_reduction_t reduction, const coda_tensor_t* loss_out,
                                 const coda_tensor_t* row_loss_out, const coda_tensor_t* logits,
                                 const coda_tensor_t* dlogits_out, float dloss, coda_stream_t stream);
/* Logits-free LM-head loss forward: no M x V tensor is written. workspace: at least
 * coda_lm_head_loss_workspace_bytes(M, V) bytes, in the same place (device or host memory) as the
 * tensors. rstd, row_loss_out, lse_out optional. */
size_t coda_lm_head_loss_workspace_bytes(int64_t m, int64_t v);
coda_status_t coda_lm_head_loss(const coda_tensor_t* a, const coda_tensor_t* b, const coda_tensor_t* rstd,
                                const coda_tensor_t* targets, int32_t ignore_index,
                                coda_reduction_t reduction, const coda_tensor_t* loss_out,
                                const coda_tensor_t* row_loss_out, const coda_tensor_t* lse_out,
                                void* workspace, size_t workspace_bytes, coda_stream_t stream);
/* LM-head training without a dlogits pass (docs/ops.md). a, b bf16 only (fp16's range cannot hold
 * the shifted exponentials). The forward writes grad_out [M, V] (bf16, row-major with
 * 16-byte-aligned rows and base) and grad_scale_out fp32 [M] (u) such that
 * dlogits[m, :] = dloss * u[m] * grad[m, :] exactly (u = 0 for ignored rows), besides the loss as
 * coda_lm_head_loss gives it. workspace: at least coda_lm_head_train_workspace_bytes(M, V) bytes,
 * in the same place as the tensors. rstd, row_loss_out, lse_out optional. */
size_t coda_lm_head_train_workspace_bytes(int64_t m, int64_t v);
coda_status_t coda_lm_head_train(const coda_tensor_t* a, const coda_tensor_t* b, const coda_tensor_t* rstd,
                                 const coda_tensor_t* targets, int32_t ignore_index,
                                 coda_reduction_t reduction, const coda_tensor_t* loss_out,
                                 const coda_tensor_t* row_loss_out, const coda_tensor_t* lse_out,
                                 const coda_tensor_t* grad_out, const coda_tensor_t* grad_scale_out,
                                 void* workspace, size_t workspace_bytes, coda_stream_t stream);
/* Its backward from the forward's a, b, rstd (optional) and grad, grad_scale: with
 * s = dloss * grad_scale (* rstd) per row, da_out [M, K] = diag(s) (grad b) (a's dtype, 16-byte
 * rows) and db_out [V, K] = grad^T diag(s) a (bf16, fp16 or fp32, 16-byte rows); either may be
 * NULL. When dloss_ptr is not NULL, dloss is read from there (device memory, or host memory for
 * host tensors) when the kernels run (dloss is then ignored). workspace: at least
 * coda_lm_head_backward_workspace_bytes(M, K) bytes, in the same place as the tensors. */
size_t coda_lm_head_backward_workspace_bytes(int64_t m, int64_t k);
coda_status_t coda_lm_head_backward(const coda_tensor_t* a, const coda_tensor_t* b, const coda_tensor_t* rstd,
                                    const coda_tensor_t* grad, const coda_tensor_t* grad_scale, float dloss,
                                    const float* dloss_ptr, const coda_tensor_t* da_out,
                                    const coda_tensor_t* db_out, void* workspace, size_t workspace_bytes,
                                    coda_stream_t stream);

/* ---- backward fused operators (issue 9: on the GPU so far gemm_rmsnorm_backward, the finishes and
 * the elementwise rope_backward and qknorm_rope_backward) -----------------------------------------
 * The dgrad form: a [M, K] row-major (the gradient dz of the consuming GEMM's output), b [N, K] the
 * consuming GEMM's weight [K, N] stored row-major and viewed transposed (strides {1, N}).
 * dx = r (dy w - xh c) (+ dres) with dy = a b^T, xh = x r, c = zdz; y = xh w (optional);
 * dw_partials[t, n] = sum over row granule t (CODA_PARTIAL_ROWS rows) of dy xh. dres optional; dx_out
 * may be dres itself (in place). On the GPU, x and dres are read through TMA: bf16 or fp16, one dtype. */
coda_status_t coda_gemm_rmsnorm_backward(const coda_tensor_t* a, const coda_tensor_t* b, const coda_tensor_t* x,
                                         const coda_tensor_t* rstd, const coda_tensor_t* zdz,
                                         const coda_tensor_t* norm_weight, const coda_tensor_t* dres,
                                         const coda_tensor_t* dx_out, const coda_tensor_t* y_out,
                                         const coda_tensor_t* dw_partials, coda_stream_t stream);
/* SwiGLU backward in the epilogue of do = a b^T (the dgrad form: b = Wdown [K, F] viewed as [F, K]):
 * dz_out [M, 2F] interleaved (dg, du) from do and the saved interleaved z [M, 2F] (on the GPU read
 * through TMA: bf16 or fp16), o_out [M, F] = silu(g) u recomputed (optional), zdz_partials
 * [M, ceil(F / CODA_PARTIAL_COLS)] fp32 = sum of g dg + u du per granule (optional; then
 * coda_row_sum_finish). */
coda_status_t coda_gemm_swiglu_backward(const coda_tensor_t* a, const coda_tensor_t* b, const coda_tensor_t* z,
                                        const coda_tensor_t* dz_out, const coda_tensor_t* o_out,
                                        const coda_tensor_t* zdz_partials, coda_stream_t stream);
/* out[m] = scale * sum_t partials[m, t] (ZdZ from row partials) */
coda_status_t coda_row_sum_finish(const coda_tensor_t* partials, const coda_tensor_t* out, float scale,
                                  coda_stream_t stream);
/* out[n] = sum_t partials[t, n] (the norm-weight gradient from column partials) */
coda_status_t coda_col_sum_finish(const coda_tensor_t* partials, const coda_tensor_t* out, coda_stream_t stream);
/* RoPE backward (elementwise): dz_out = R(-theta) dqkv on the q and k heads, v columns as they are;
 * zdz_out (optional, fp32 [M]) = zdz_scale * sum_k qkv dqkv with qkv the forward output. dz_out may
 * be dqkv itself (in place). positions >= 0 (a negative one yields NaN in its row on the GPU). */
coda_status_t coda_rope_backward(const coda_tensor_t* qkv, const coda_tensor_t* dqkv,
                                 const coda_tensor_t* positions, const coda_tensor_t* freqs, coda_heads_t heads,
                                 const coda_tensor_t* dz_out, const coda_tensor_t* zdz_out, float zdz_scale,
                                 coda_stream_t stream);
/* QK-norm + RoPE backward (elementwise) from the saved pre-norm qkv and dout, the gradient of the
 * coda_qknorm_rope output: dqkv_out (may be dout itself: in place), dgamma_q/k_partials fp32
 * [ceil(M / CODA_PARTIAL_ROWS), head_dim] (row t: the sum over row granule t; coda_col_sum_finish
 * adds them up) and zdz_out (optional, fp32 [M]) = zdz_scale * sum_k qkv dqkv. On the GPU,
 * head_dim <= 6144. */
coda_status_t coda_qknorm_rope_backward(const coda_tensor_t* qkv, const coda_tensor_t* gamma_q,
                                        const coda_tensor_t* gamma_k, const coda_tensor_t* positions,
                                        const coda_tensor_t* freqs, coda_heads_t heads, float eps,
                                        const coda_tensor_t* dout, const coda_tensor_t* dqkv_out,
                                        const coda_tensor_t* dgamma_q_partials,
                                        const coda_tensor_t* dgamma_k_partials, const coda_tensor_t* zdz_out,
                                        float zdz_scale, coda_stream_t stream);

/* ---- weight-layout helpers (device or host tensors) -----------------------------------------------
 * out [2F, K] = rows gate[0], up[0], gate[1], up[1], ... (the layout coda_gemm_swiglu expects). */
coda_status_t coda_interleave_gate_up(const coda_tensor_t* gate, const coda_tensor_t* up,
                                      const coda_tensor_t* out, coda_stream_t stream);
/* A fused [N3, K] q/k/v weight with Hugging Face rotate-half q/k rows (pairs (i, i + head_dim/2))
 * -> interleaved pairs (2i, 2i + 1), the layout coda_gemm_rope expects; v rows copied. */
coda_status_t coda_permute_rotate_half_to_interleaved(const coda_tensor_t* w, coda_heads_t heads,
                                                      const coda_tensor_t* out, coda_stream_t stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* CODA_CODA_H */
