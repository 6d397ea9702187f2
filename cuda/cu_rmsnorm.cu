/* cu_rmsnorm.cu - RMSNorm, y = x * alpha / sqrt(mean(x^2) + eps) with eps
 * inside the root (spec/moshi-lm.md, section 2). C twin: kern_rmsnorm
 * (engine/cpu/kern_cpu.h), which scales in the same order, x * (alpha *
 * inv), and sums the squares in double where this kernel sums in f32.
 *
 * One block per row: each thread sums the squares of a strided slice in
 * f32, the block reduces (cu_rms_inv, cuda/cu_norm.cuh: the one order
 * every norm of the step uses), then every thread scales its slice. Rows
 * are short (1024 or 4096) and the op reads B*C floats: launch-bound, not
 * bandwidth-bound, at the batch sizes of a step. So the step launches
 * neither kernel below the GEMM crossover: the products fold the norm into
 * their loads (cu_matvec_*_fused, cuda/cu_matvec.cu) and the residual add
 * into their stores (issue 25: graph nodes are most of the predicted time
 * over the floor at batch 1). From the crossover on, cu_rmsnorm_bf16 is
 * the GEMM's input conversion with the norm in it: one launch, as the
 * plain conversion was.
 */
#include "cu_bf16.cuh"
#include "cu_kern.h"
#include "cu_norm.cuh"

#define RN_THREADS CU_RN_THREADS   /* threads per block: the order's own count */

/* y = rmsnorm(x) * alpha, in float, or (uint16_t) rounded to bf16 as
 * cu_f32_to_bf16 rounds. y may alias x (float): each thread reads its own
 * elements before writing them, after the block's sum. */
__device__ inline void rn_store(float *y, float v) { *y = v; }
__device__ inline void rn_store(uint16_t *y, float v) { *y = cu_f2bf(v); }

template <typename T>
__global__ void __launch_bounds__(RN_THREADS)
rmsnorm_kernel(T *y,                  /* (B, C); may alias x when float */
               const float *x,        /* (B, C) */
               const float *alpha,    /* (C) */
               int C, float eps) {
    __shared__ float scratch[CU_RN_WARPS];
    const float *xr = x + (size_t)blockIdx.x * C;   /* (C) */
    T *yr = y + (size_t)blockIdx.x * C;             /* (C) */
    float inv_r[1];
    cu_rms_inv<RN_THREADS, 1>(inv_r, scratch, xr, (size_t)C, 1, C, eps);
    const float inv = inv_r[0];
    for (int c = threadIdx.x; c < C; c += RN_THREADS) rn_store(yr + c, xr[c] * (alpha[c] * inv));
}

extern "C" cudaError_t cu_rmsnorm(float *y, const float *x, const float *alpha, int B, int C, float eps,
                                  cudaStream_t stream) {
    if (B < 0 || C <= 0 || !(eps >= 0.0f)) return cudaErrorInvalidValue;
    if (B == 0) return cudaSuccess;
    rmsnorm_kernel<float><<<(unsigned)B, RN_THREADS, 0, stream>>>(y, x, alpha, C, eps);
    return cudaGetLastError();
}

extern "C" cudaError_t cu_rmsnorm_bf16(uint16_t *yb, const float *x, const float *alpha, int B, int C, float eps,
                                       cudaStream_t stream) {
    if (B < 0 || C <= 0 || !(eps >= 0.0f)) return cudaErrorInvalidValue;
    if (B == 0) return cudaSuccess;
    rmsnorm_kernel<uint16_t><<<(unsigned)B, RN_THREADS, 0, stream>>>(yb, x, alpha, C, eps);
    return cudaGetLastError();
}
