/* cu_rmsnorm.cu - RMSNorm, y = x * alpha / sqrt(mean(x^2) + eps) with eps
 * inside the root (spec/moshi-lm.md, section 2). C twin: kern_rmsnorm
 * (engine/cpu/kern_cpu.h), which scales in the same order, x * (alpha *
 * inv), and sums the squares in double where this kernel sums in f32.
 *
 * One block per row: each thread sums the squares of a strided slice in
 * f32, the block reduces, then every thread scales its slice. Rows are
 * short (1024 or 4096) and the op reads B*C floats: launch-bound, not
 * bandwidth-bound, at the batch sizes of a step. cu_add_rmsnorm fuses the
 * residual add before it (kern_add, then kern_rmsnorm): one launch, not
 * two, at every layer boundary of the step (issue 25: graph nodes are most
 * of the predicted time over the floor at batch 1).
 */
#include "cu_kern.h"
#include "cu_reduce.cuh"

#define RN_THREADS 256

__global__ void __launch_bounds__(RN_THREADS)
rmsnorm_kernel(float *y,              /* (B, C); may alias x */
               const float *x,        /* (B, C) */
               const float *alpha,    /* (C) */
               int C, float eps) {
    __shared__ float scratch[RN_THREADS / CU_WARP];
    __shared__ float inv_s;
    const float *xr = x + (size_t)blockIdx.x * C;   /* (C) */
    float *yr = y + (size_t)blockIdx.x * C;         /* (C) */
    float ss[1] = {0.0f};
    for (int c = threadIdx.x; c < C; c += RN_THREADS) ss[0] = fmaf(xr[c], xr[c], ss[0]);
    float tot = cu_block_sum<RN_THREADS, 1>(ss, scratch);
    if (threadIdx.x == 0) inv_s = 1.0f / sqrtf(tot / (float)C + eps);
    __syncthreads();
    const float inv = inv_s;
    for (int c = threadIdx.x; c < C; c += RN_THREADS) yr[c] = xr[c] * (alpha[c] * inv);
}

extern "C" cudaError_t cu_rmsnorm(float *y, const float *x, const float *alpha, int B, int C, float eps,
                                  cudaStream_t stream) {
    if (B < 0 || C <= 0 || !(eps >= 0.0f)) return cudaErrorInvalidValue;
    if (B == 0) return cudaSuccess;
    rmsnorm_kernel<<<(unsigned)B, RN_THREADS, 0, stream>>>(y, x, alpha, C, eps);
    return cudaGetLastError();
}

/* x += r, then y = rmsnorm(x) * alpha (y may alias x: each thread reads
 * its own elements before writing them). */
__global__ void __launch_bounds__(RN_THREADS)
add_rmsnorm_kernel(float *y,              /* (B, C) */
                   float *x,              /* (B, C) in: the residual stream; out: + r */
                   const float *r,        /* (B, C) */
                   const float *alpha,    /* (C) */
                   int C, float eps) {
    __shared__ float scratch[RN_THREADS / CU_WARP];
    __shared__ float inv_s;
    float *xr = x + (size_t)blockIdx.x * C;
    const float *rr = r + (size_t)blockIdx.x * C;
    float *yr = y + (size_t)blockIdx.x * C;
    float ss[1] = {0.0f};
    for (int c = threadIdx.x; c < C; c += RN_THREADS) {
        float v = xr[c] + rr[c];
        xr[c] = v;
        ss[0] = fmaf(v, v, ss[0]);
    }
    float tot = cu_block_sum<RN_THREADS, 1>(ss, scratch);
    if (threadIdx.x == 0) inv_s = 1.0f / sqrtf(tot / (float)C + eps);
    __syncthreads();
    const float inv = inv_s;
    for (int c = threadIdx.x; c < C; c += RN_THREADS) yr[c] = xr[c] * (alpha[c] * inv);
}

extern "C" cudaError_t cu_add_rmsnorm(float *y, float *x, const float *r, const float *alpha, int B, int C, float eps,
                                      cudaStream_t stream) {
    if (B < 0 || C <= 0 || !(eps >= 0.0f)) return cudaErrorInvalidValue;
    if (B == 0) return cudaSuccess;
    add_rmsnorm_kernel<<<(unsigned)B, RN_THREADS, 0, stream>>>(y, x, r, alpha, C, eps);
    return cudaGetLastError();
}
