/* cu_bf16.cuh - bf16 <-> f32 on the device, the host's rounding
 * (st_f32_to_bf16, engine/base/st.h: nearest even, NaN kept quiet); shared
 * by the kernels that write the GEMMs' bf16 activations (cu_lm.cu,
 * cu_rmsnorm.cu). */
#ifndef MOSHID_CU_BF16_CUH
#define MOSHID_CU_BF16_CUH

#include <stdint.h>

__device__ __forceinline__ float cu_bf2f(uint16_t h) { return __uint_as_float((unsigned)h << 16); }
__device__ __forceinline__ uint16_t cu_f2bf(float f) {
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

#endif
