/* cu_kern.h - launchers of the CUDA kernels, callable from C. Each has a C
 * twin in the CPU backend with the same name stem and argument order
 * (outputs, inputs, weights, dims), the CUDA stream last where the C twin
 * has its CPU resource (thread pool, scratch):
 *     cu_matvec_bf16     kern_matvec_bf16   (engine/cpu/kern_cpu.h)
 *     cu_rmsnorm         kern_rmsnorm       (engine/cpu/kern_cpu.h)
 *     cu_samp_topk_rows  samp_topk_rows     (engine/lm/samp.h)
 * (kern_X <-> cu_X: kern_ only says "CPU kernel"; samp_X <-> cu_samp_X).
 * tests/gpu/engine_test.c compares each launcher against its twin.
 *
 * Every pointer is a device pointer. A launcher only enqueues work: it
 * returns cudaErrorInvalidValue for bad dimensions, otherwise the launch's
 * status (cudaGetLastError); wrap it in CU_CHECK (cu_check.h). Errors inside
 * the kernel surface at the next synchronising call. Any host thread.
 */
#ifndef MOSHID_CU_KERN_H
#define MOSHID_CU_KERN_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#include "samp.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest batch one matvec launch reads W once for; larger batches tile the
 * batch and read W once per tile of this many rows. */
#define CU_MATVEC_BATCH_TILE 8

/* cu_matvec_bf16: y = x . W^T (f32 accumulation). Fast path when K % 8 == 0
 * and x, w are 16-byte aligned; otherwise a scalar path. */
cudaError_t cu_matvec_bf16(float *y,          /* (B, N) */
                           const float *x,    /* (B, K) */
                           const uint16_t *w, /* (N, K) bf16 */
                           int B, int N, int K, cudaStream_t stream);

/* cu_rmsnorm: y = x * alpha / sqrt(mean(x^2) + eps) per row; y may alias x. */
cudaError_t cu_rmsnorm(float *y,            /* (B, C) */
                       const float *x,      /* (B, C) */
                       const float *alpha,  /* (C) */
                       int B, int C, float eps, cudaStream_t stream);

/* cu_samp_topk_rows: one token per row, the same index as samp_topk_rows
 * for the same inputs (samp.h; cuda/samp_core.h). stream_id is the RNG
 * stream (SAMP_STREAM_*); rows is a device array. */
cudaError_t cu_samp_topk_rows(int32_t *out,          /* (B) token index in [0, N) */
                              const float *logits,   /* (B, N) */
                              const samp_row *rows,  /* (B) */
                              int B, int N, uint32_t stream_id, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
