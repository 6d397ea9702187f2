/* cu_rope.cuh - RoPE's arithmetic on one pair, shared by the kernels that
 * rotate q and k: qkv_rope_kernel (cu_lm.cu) and the QKV product with the
 * rotation in its epilogue (cu_matvec.cu, matvec_*_norm_rope), so that the
 * fused launch equals RoPE's own bit for bit. The rotation's products and
 * sums are each rounded (the _rn intrinsics, which no compiler contracts
 * into an fma): whether x0 * cr - x1 * ci becomes an fma, and which
 * product it keeps, is the compiler's choice in each context (the
 * emulator's host compiler, tuned for AMD cores, chose differently in the
 * two kernels), so a shared inline function alone does not fix the bits.
 *
 * kern_rope's rule (engine/cpu/kern_cpu.h): pair i of a head (elements 2i,
 * 2i + 1) at position t turns by the angle f * t, f = expf(i * rope_k),
 * rope_k = -log(max_period) * 2 / head_dim; float cos and sin.
 */
#ifndef MOSHID_CU_ROPE_CUH
#define MOSHID_CU_ROPE_CUH

/* cu_rope_cs: the cosine and sine of pair i at position t. */
__device__ __forceinline__ void cu_rope_cs(int i, float t, float rope_k, float *cr, float *ci) {
    float f = expf((float)i * rope_k);
    float a = f * t;
    *cr = cosf(a);
    *ci = sinf(a);
}

/* cu_rope_rot: the pair (x0, x1) turned by (cr, ci). */
__device__ __forceinline__ float2 cu_rope_rot(float x0, float x1, float cr, float ci) {
    return make_float2(__fadd_rn(__fmul_rn(x0, cr), -__fmul_rn(x1, ci)),
                       __fadd_rn(__fmul_rn(x0, ci), __fmul_rn(x1, cr)));
}

#endif
