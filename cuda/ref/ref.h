/* ref.h - the C twins of the CUDA kernels (cuda/cu_kern.h): plain C, no
 * CUDA, same name stem and argument order (outputs, inputs, weights, dims),
 * used as the references the kernels are tested against (tests/gpu/).
 * The CPU backend has its own kernels (engine/kern_*); a later issue unifies
 * the two sets.
 *
 * Tensors are row-major; bf16 is the upper half of an IEEE float (uint16).
 * All functions are pure and thread-safe.
 */
#ifndef MOSHID_CU_REF_H
#define MOSHID_CU_REF_H

#include <stdint.h>

#include "samp_core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ref_bf16_to_f32 / ref_f32_to_bf16: bf16 <-> float (round to nearest even;
 * NaN stays NaN). */
static inline float ref_bf16_to_f32(uint16_t h) {
    union { uint32_t u; float f; } c;
    c.u = (uint32_t)h << 16;
    return c.f;
}
static inline uint16_t ref_f32_to_bf16(float f) {
    union { float f; uint32_t u; } c;
    c.f = f;
    if ((c.u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((c.u >> 16) | 0x40u);
    return (uint16_t)((c.u + 0x7FFFu + ((c.u >> 16) & 1u)) >> 16);
}

/* ref_matvec_bf16: y = x . W^T for a batch of B vectors; accumulates in
 * float in 8 interleaved partial sums per row, added at the end (the kernel
 * sums in another order: results agree to rounding, not bit for bit). */
void ref_matvec_bf16(float *y,          /* (B, N) */
                     const float *x,    /* (B, K) */
                     const uint16_t *w, /* (N, K) bf16 */
                     int B, int N, int K);

/* ref_rmsnorm: y = x * alpha / sqrt(mean(x^2) + eps) per row (eps inside the
 * root); sum of squares in double. y may alias x. */
void ref_rmsnorm(float *y,             /* (B, C) */
                 const float *x,       /* (B, C) */
                 const float *alpha,   /* (C) */
                 int B, int C, float eps);

/* ref_sample_topk: one token per row by top-k + temperature Gumbel-max
 * (samp_core.h), or greedy where rows[b].temp <= 0. stream is the sampled
 * stream's number in the RNG key (0 text, 1 + k audio codebook k). Returns
 * MS_OK, MS_ERR_ARG on bad dims, MS_ERR_NOMEM (it allocates N keys). */
int ref_sample_topk(int32_t *out,          /* (B) token index in [0, N) */
                    const float *logits,   /* (B, N) */
                    const samp_row *rows,  /* (B) */
                    int B, int N, uint32_t stream);

#ifdef __cplusplus
}
#endif

#endif
