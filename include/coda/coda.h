/* coda C ABI: plain functions on raw pointers, sizes, strides, dtypes and a CUDA stream.
 *
 * Every function returns a coda_status_t. On failure, coda_last_error() returns a message (per
 * thread, valid until the next coda call on that thread) that names the function, the argument
 * and the rule it broke. A failed call writes nothing to its outputs and launches nothing.
 *
 * Tensors are described by coda_tensor_t: a data pointer, a rank (1..CODA_MAX_RANK), sizes and
 * strides in elements, and a dtype. An optional argument is passed as a NULL pointer.
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
#define CODA_PARTIAL_COLS 256
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
  void* data;                       /* device pointer (host pointer for the CPU emulator) */
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

/* ---- GEMM (sm_90a) ------------------------------------------------------------------------------
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
 * are read from those device pointers when the kernel runs (alpha / beta are then ignored). */
coda_status_t coda_gemm_ex(const coda_tensor_t* a, const coda_tensor_t* b, const coda_tensor_t* c,
                           const coda_tensor_t* d, float alpha, float beta, const float* alpha_ptr,
                           const float* beta_ptr, coda_stream_t stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* CODA_CODA_H */
