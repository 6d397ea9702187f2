/* cu_q8.cuh - the 8-bit K/V rule's device helpers, shared by the kernels
 * that quantize keys and values (cu_lm.cu) and by the depformer attention
 * folded into the out-projection (cu_matvec.cu), so that both compute the
 * same scales and the same int8 values.
 *
 * The rule (kern_q8_quantize_heads): s = max|x| / 127 (1 for a zero
 * vector), q = x / s (an IEEE division: no fast math) rounded half to
 * even, clamped to +-127.
 */
#ifndef MOSHID_CU_Q8_CUH
#define MOSHID_CU_Q8_CUH

#include "cu_reduce.cuh"

__device__ __forceinline__ float q8_scale(float absmax) { return absmax > 0.0f ? absmax / 127.0f : 1.0f; }
__device__ __forceinline__ int8_t q8_round(float v, float s) { return (int8_t)fminf(fmaxf(rintf(v / s), -127.0f), 127.0f); }
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = CU_WARP / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(CU_FULL_MASK, v, o));
    return v;
}

#endif
