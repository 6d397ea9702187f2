/* cu_check.h - checking CUDA runtime and cuBLAS status codes.
 *
 * Library code turns a failed call into an ms_error return that names the
 * call, the file, the line and the runtime's own error name and text:
 *
 *     int cu_thing(..., ms_error *err) {
 *         CU_CHECK(err, cudaMalloc(&p, bytes));
 *         CUBLAS_CHECK(err, cublasCreate(&h));
 *         ...
 *     }
 *   -> "cudaMalloc(&p, bytes) failed at cuda/cu_x.cu:42: cudaErrorMemoryAllocation
 *       (out of memory)", code MS_ERR_DEVICE
 *
 * Where cleanup is needed, CU_CHECK_GOTO(err, call, label) records the same
 * message and jumps to label instead of returning. Tests and tools use the
 * _FATAL variants, which print the same line to stderr and exit(1).
 *
 * Usable from .cu and from plain C (with the CUDA include path). The cuBLAS
 * part needs cublas_api.h only where CUBLAS_CHECK is used: define
 * CU_CHECK_CUBLAS before including this header.
 */
#ifndef MOSHID_CU_CHECK_H
#define MOSHID_CU_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

/* engine/err.h is a C header (no extern "C" of its own). */
#ifdef __cplusplus
extern "C" {
#endif
#include "err.h"
#ifdef __cplusplus
}
#endif

/* cu_err_set: record a failed runtime call in err (may be NULL); returns
 * MS_ERR_DEVICE. Used through the macros. Any thread. */
static inline int cu_err_set(ms_error *err, cudaError_t e, const char *call, const char *file, int line) {
    return ms_err_set(err, MS_ERR_DEVICE, "%s failed at %s:%d: %s (%s)", call, file, line, cudaGetErrorName(e),
                      cudaGetErrorString(e));
}

/* cu_fatal: print a failed runtime call to stderr and exit(1) (tests only). */
static inline void cu_fatal(cudaError_t e, const char *call, const char *file, int line) {
    fprintf(stderr, "%s failed at %s:%d: %s (%s)\n", call, file, line, cudaGetErrorName(e), cudaGetErrorString(e));
    exit(1);
}

#define CU_CHECK(err, call)                                                    \
    do {                                                                       \
        cudaError_t cu_e_ = (call);                                            \
        if (cu_e_ != cudaSuccess) return cu_err_set((err), cu_e_, #call, __FILE__, __LINE__); \
    } while (0)

#define CU_CHECK_GOTO(err, call, label)                                        \
    do {                                                                       \
        cudaError_t cu_e_ = (call);                                            \
        if (cu_e_ != cudaSuccess) {                                            \
            cu_err_set((err), cu_e_, #call, __FILE__, __LINE__);               \
            goto label;                                                        \
        }                                                                      \
    } while (0)

#define CU_CHECK_FATAL(call)                                                   \
    do {                                                                       \
        cudaError_t cu_e_ = (call);                                            \
        if (cu_e_ != cudaSuccess) cu_fatal(cu_e_, #call, __FILE__, __LINE__);  \
    } while (0)

#ifdef CU_CHECK_CUBLAS
#include <cublas_api.h>

/* cublas_err_set: as cu_err_set, for a cuBLAS status. */
static inline int cublas_err_set(ms_error *err, cublasStatus_t s, const char *call, const char *file, int line) {
    return ms_err_set(err, MS_ERR_DEVICE, "%s failed at %s:%d: %s (%s)", call, file, line, cublasGetStatusName(s),
                      cublasGetStatusString(s));
}

static inline void cublas_fatal(cublasStatus_t s, const char *call, const char *file, int line) {
    fprintf(stderr, "%s failed at %s:%d: %s (%s)\n", call, file, line, cublasGetStatusName(s),
            cublasGetStatusString(s));
    exit(1);
}

#define CUBLAS_CHECK(err, call)                                                \
    do {                                                                       \
        cublasStatus_t cb_s_ = (call);                                         \
        if (cb_s_ != CUBLAS_STATUS_SUCCESS) return cublas_err_set((err), cb_s_, #call, __FILE__, __LINE__); \
    } while (0)

#define CUBLAS_CHECK_GOTO(err, call, label)                                    \
    do {                                                                       \
        cublasStatus_t cb_s_ = (call);                                         \
        if (cb_s_ != CUBLAS_STATUS_SUCCESS) {                                  \
            cublas_err_set((err), cb_s_, #call, __FILE__, __LINE__);           \
            goto label;                                                        \
        }                                                                      \
    } while (0)

#define CUBLAS_CHECK_FATAL(call)                                               \
    do {                                                                       \
        cublasStatus_t cb_s_ = (call);                                         \
        if (cb_s_ != CUBLAS_STATUS_SUCCESS) cublas_fatal(cb_s_, #call, __FILE__, __LINE__); \
    } while (0)
#endif

#endif
