/* cu_reduce.cuh - warp and block reductions shared by the kernels. */
#ifndef MOSHID_CU_REDUCE_CUH
#define MOSHID_CU_REDUCE_CUH

#define CU_WARP 32
#define CU_FULL_MASK 0xFFFFFFFFu

/* cu_warp_sum: the sum of v over the warp, in every lane. */
__device__ __forceinline__ float cu_warp_sum(float v) {
#pragma unroll
    for (int o = CU_WARP / 2; o > 0; o >>= 1) v += __shfl_xor_sync(CU_FULL_MASK, v, o);
    return v;
}

/* cu_block_sum: sums each of the NV values v[j] over the block of NT
 * threads; thread j < NV gets the total of value j in its return slot
 * v[0] (others undefined). scratch: (NT / 32, NV) in shared memory. All
 * threads must call it; it synchronises. */
template <int NT, int NV>
__device__ __forceinline__ float cu_block_sum(float (&v)[NV], float *scratch) {
    const int lane = threadIdx.x % CU_WARP, warp = threadIdx.x / CU_WARP;
#pragma unroll
    for (int j = 0; j < NV; j++) v[j] = cu_warp_sum(v[j]);
    if (lane == 0) {
#pragma unroll
        for (int j = 0; j < NV; j++) scratch[warp * NV + j] = v[j];
    }
    __syncthreads();
    float s = 0.0f;
    if (threadIdx.x < NV) {
#pragma unroll
        for (int w = 0; w < NT / CU_WARP; w++) s += scratch[w * NV + threadIdx.x];
    }
    return s;
}

#endif
