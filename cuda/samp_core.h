/* samp_core.h - the arithmetic of top-k + temperature sampling that the C
 * twin (cuda/ref/sample.c) and the CUDA kernel (cuda/cu_sample.cu) share
 * word for word, so that given the same logits both pick the same index.
 *
 * The draw is the Gumbel-max trick restricted to the top k:
 *     choose argmax over i in topk(logits) of  logits[i] / T + g_i,
 *     g_i = -log(-log(u_i)),  u_i uniform in (0, 1) from engine/rng.h keyed
 *     by (seed, step, stream, i)
 * which has the distribution of softmax(logits / T) restricted to the top k
 * (spec/moshi-lm.md, section 5). T <= 0 (or NaN) is greedy: argmax of the
 * logits. Ties are broken by the lowest index everywhere: in the top-k set
 * (a key orders by value, then by lower index) and in the final argmax.
 * NaN logits rank as -inf, -0.0 as +0.0.
 *
 * Why CPU and GPU agree (docs/cuda.md has the long form): logits / T is an
 * IEEE division on both sides (nvcc without --use_fast_math, no FMA can
 * form); u is built exactly in double (rng_uniform); the transform and the score are
 * computed in double. The only inexact steps are the two log() calls, where
 * glibc and CUDA may differ by an ulp of a double (~1e-16 relative); the
 * index can differ only if the two best scores of a row lie within that
 * distance of each other.
 *
 * Compiles as C and as CUDA (host and device).
 */
#ifndef MOSHID_SAMP_CORE_H
#define MOSHID_SAMP_CORE_H

#include <math.h>
#include <stdint.h>

#include "rng.h"

#ifdef __CUDACC__
#define SAMP_FN __host__ __device__ __forceinline__ static
#else
#define SAMP_FN static inline
#endif

/* Per-row sampling parameters of a batched call (one row = one session's
 * logits for one stream). */
typedef struct samp_row {
    uint64_t seed;  /* the session's seed for this stream kind */
    uint64_t step;  /* the session's step (frame) number */
    float temp;     /* temperature; <= 0 (or NaN) means greedy */
    int32_t topk;   /* candidates kept; <= 0 or >= N means all */
} samp_row;

/* samp_ord: a float as a uint32 with the same order (NaN as -inf, -0 as +0). */
SAMP_FN uint32_t samp_ord(float v) {
    if (v != v) v = -INFINITY;
    if (v == 0.0f) v = 0.0f;
    union { float f; uint32_t u; } c;
    c.f = v;
    return (c.u & 0x80000000u) ? ~c.u : (c.u | 0x80000000u);
}

/* samp_key: the 64-bit rank key of logit v at index i: larger is better,
 * value first, then the lower index. All keys of a row are distinct. */
SAMP_FN uint64_t samp_key(float v, uint32_t i) {
    return ((uint64_t)samp_ord(v) << 32) | (uint64_t)(0xFFFFFFFFu - i);
}

/* samp_gumbel: the standard Gumbel variate -log(-log(u)), in double; finite
 * for every u rng_uniform returns (|g| < 17.4). */
SAMP_FN double samp_gumbel(double u) {
    return -log(-log(u));
}

/* samp_score: logit v at temperature temp plus gumbel g; a NaN quotient
 * (NaN logit, inf/inf) scores -inf. */
SAMP_FN double samp_score(float v, float temp, double g) {
    float q = v / temp;
    if (q != q) q = -INFINITY;
    return (double)q + g;
}

/* samp_better: does candidate (s, i) beat (bs, bi)? Higher score, then the
 * lower index; bi < 0 means no candidate yet. */
SAMP_FN int samp_better(double s, int32_t i, double bs, int32_t bi) {
    return bi < 0 || s > bs || (s == bs && i < bi);
}

/* samp_radix_pick: one pass of the MSD radix select of the k-th largest
 * rank key. hist[256] counts the next 8-bit digit of the keys that share
 * the prefix chosen so far; *krem is the rank (1-based, from the top) still
 * wanted among them. Returns the digit that holds it and updates *krem to
 * the rank within that digit; *done is set when every key of that digit is
 * wanted (then the threshold is the prefix with all lower bits zero). The
 * kernel runs it in one thread per pass; check_plugin tests it on the host
 * against a sort. */
SAMP_FN int samp_radix_pick(const unsigned int *hist, int *krem, int *done) {
    int k = *krem, d = 255;
    for (; d > 0; d--) {
        if ((int)hist[d] >= k) break;
        k -= (int)hist[d];
    }
    *krem = k;
    *done = (int)hist[d] == k;
    return d;
}

#endif
