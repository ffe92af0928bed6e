// Portability macros shared by host (g++) and device (nvcc) code.
#pragma once

#if defined(__CUDACC__)
#define CODA_HD __host__ __device__ __forceinline__
#define CODA_HOST_DEVICE __host__ __device__
#else
#define CODA_HD inline
#define CODA_HOST_DEVICE
#endif

#if defined(__CUDA_ARCH__)
#define CODA_DEVICE_CODE 1
#else
#define CODA_DEVICE_CODE 0
#endif

#if defined(__CUDA_ARCH__)
#define CODA_UNROLL _Pragma("unroll")
#else
#define CODA_UNROLL
#endif
