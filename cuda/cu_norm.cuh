/* cu_norm.cuh - the RMSNorm's inverse root, 1 / sqrt(mean(x^2) + eps),
 * in one summation order for every kernel that needs it: cu_rmsnorm's
 * kernels (cu_rmsnorm.cu) and the products that fold the norm into their
 * loads (cu_matvec.cu's norm prologue). Sharing the order makes a fused
 * product bit for bit the norm launch followed by the plain product.
 *
 * The order is that of CU_RN_THREADS (256) threads: thread v sums the
 * squares of elements v, v + 256, v + 512, ... with fmaf, each warp of 32
 * such threads sums its lanes (cu_warp_sum), then the 8 warps' sums are
 * added in warp order from 0. A block of NT threads (NT divides 256) plays
 * those 256: its thread t plays t, t + NT, t + 2 NT, ... (one partial sum
 * each, in registers); thread t + j NT lies in lane t % 32 of warp
 * t / 32 + j NT / 32, so the shuffles pair the same partial sums. No
 * __shared__ declarations here: cu2emu rewrites only the .cu files, so
 * the callers pass their shared arrays in.
 */
#ifndef MOSHID_CU_NORM_CUH
#define MOSHID_CU_NORM_CUH

#include "cu_reduce.cuh"

#define CU_RN_THREADS 256               /* the threads the summation order is written for */
#define CU_RN_WARPS (CU_RN_THREADS / CU_WARP)

/* cu_rms_inv: inv[r] = 1 / sqrt(mean(x_r^2) + eps) for the rows
 * x_r = x + r * ld (C floats each), r < nr <= NR (0 for r >= nr), in
 * every thread's registers; a block of NT threads, every thread calls it
 * (it synchronises once); scratch: CU_RN_WARPS * NR floats of shared
 * memory, not to be reused by the caller. Every thread adds the warps'
 * sums itself (the same order, so the same bits in every thread): no
 * second barrier, and no divergent branch around the division and the
 * root (whose slow paths are calls). */
template <int NT, int NR>
__device__ __forceinline__ void cu_rms_inv(float (&inv)[NR], float *scratch, const float *x, size_t ld, int nr, int C,
                                           float eps) {
    static_assert(CU_RN_THREADS % NT == 0 && NT % CU_WARP == 0, "NT must divide the order's 256 threads");
    constexpr int V = CU_RN_THREADS / NT;   /* threads of the order each thread plays */
    const int lane = threadIdx.x % CU_WARP, warp = threadIdx.x / CU_WARP;
    float ss[NR][V];
#pragma unroll
    for (int r = 0; r < NR; r++) {
#pragma unroll
        for (int j = 0; j < V; j++) {
            float s = 0.0f;
            if (r < nr) {
                const float *xr = x + (size_t)r * ld;
                for (int c = threadIdx.x + j * NT; c < C; c += CU_RN_THREADS) s = fmaf(xr[c], xr[c], s);
            }
            ss[r][j] = cu_warp_sum(s);
        }
    }
    if (lane == 0) {
#pragma unroll
        for (int r = 0; r < NR; r++)
#pragma unroll
            for (int j = 0; j < V; j++) scratch[(warp + j * (NT / CU_WARP)) * NR + r] = ss[r][j];
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < NR; r++) {
        float s = 0.0f;
#pragma unroll
        for (int w = 0; w < CU_RN_WARPS; w++) s += scratch[w * NR + r];
        inv[r] = r < nr ? 1.0f / sqrtf(s / (float)C + eps) : 0.0f;
    }
}

#endif
