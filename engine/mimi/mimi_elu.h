/* mimi_elu.h - the codec's ELU in one copy for the CPU (mimi_layers.c's
 * scalar path) and the device (cuda/cu_mimi_kern.cu): expm1 for x <= 0 by
 * range reduction and a degree-7 polynomial, so that both compute the same
 * operations and the device codes equal the CPU's (the AVX2 path of
 * mimi_layers.c spells the same steps in intrinsics).
 *
 * expm1 for x <= 0 in float: x = n ln2 + r, |r| <= ln2/2, expm1(x) =
 * 2^n expm1(r) + (2^n - 1), expm1(r) by its Taylor polynomial to r^7
 * (truncation below 6e-9 relative). Accurate where x is tiny too.
 */
#ifndef MOSHID_MIMI_ELU_H
#define MOSHID_MIMI_ELU_H

#include <math.h>

#ifdef __CUDACC__
#define MIMI_ELU_FN __host__ __device__ __forceinline__ static
#else
#define MIMI_ELU_FN static inline
#endif

MIMI_ELU_FN float mimi_expm1_neg(float x) {
    if (x < -87.f) x = -87.f;
    float n = nearbyintf(x * 1.44269504f);
    float r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.f / 5040.f;
    p = p * r + 1.f / 720.f;
    p = p * r + 1.f / 120.f;
    p = p * r + 1.f / 24.f;
    p = p * r + 1.f / 6.f;
    p = p * r + 0.5f;
    p = p * r * r + r;
    float two_n = ldexpf(1.f, (int)n);
    return p * two_n + (two_n - 1.f);
}

/* ELU with alpha 1. */
MIMI_ELU_FN float mimi_elu1(float x) { return x > 0.f ? x : mimi_expm1_neg(x); }

#endif
