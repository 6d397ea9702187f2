/* samp.h - token sampling: greedy, and top-k + temperature by Gumbel-max.
 *
 * The noise comes from rng.h keyed by (seed, step, stream, vocabulary
 * index), so any backend (CPU or GPU) draws the same token from the same
 * logits. Stream numbering of the LM step (SAMP_STREAM_*): 0 = the text
 * token, 1 + k = depformer sub-step k (audio codebook k of the generated
 * streams). `step` is the slot's step counter (LMGen offset at the call).
 *
 * Top-k + temperature: among the k largest logits (ties: lower index first),
 * argmax(logit_i / T + G_i) with G_i = -log(-log(u_i)) ~ Gumbel(0, 1): the
 * same distribution as the official exponential race argmax(p_i / E_i) over
 * p = softmax(top-k logits / T) (spec/moshi-lm.md, section 5). T <= 0 (or
 * NaN) means greedy; k <= 0 or k >= n means the whole vocabulary.
 *
 * One arithmetic for every backend: the per-element steps below (samp_key,
 * samp_gumbel, samp_score, samp_better) are inline functions that compile
 * as C and as CUDA (host and device); samp.c and the CUDA sampler
 * (cuda/cu_sample.cu) both call them, so from the same logits both pick the
 * same index (docs/cuda.md, "Same logits, same token"):
 *  - logits rank by a 64-bit key, value first (NaN as -inf, -0 as +0), then
 *    the lower index: all keys of a row are distinct, so "the top k" is one
 *    well-defined set however it is found (a heap here, a radix select on
 *    the GPU);
 *  - the quotient logit / T is an IEEE float division (a NaN quotient
 *    scores -inf); u = (top 24 bits of rng_bits + 0.5) / 2^24 exactly in
 *    double (rng_uniform); G and the score (double)(logit / T) + G in
 *    double; the best score wins, then the lower index (a total order, so
 *    the order candidates are visited in does not matter).
 */
#ifndef MOSHID_SAMP_H
#define MOSHID_SAMP_H

#include <math.h>
#include <stdint.h>

#include "rng.h"

#ifdef __CUDACC__
#define SAMP_FN __host__ __device__ __forceinline__ static
#else
#define SAMP_FN static inline
#endif

#define SAMP_STREAM_TEXT 0u
#define SAMP_STREAM_AUDIO(k) (1u + (uint32_t)(k))

/* Defaults of the official server (also those of moshid's configuration,
 * sampling.*). */
#define SAMP_TEXT_TEMP 0.7
#define SAMP_TEXT_TOPK 25
#define SAMP_AUDIO_TEMP 0.8
#define SAMP_AUDIO_TOPK 250

/* Per-row sampling parameters of a batched call (one row = one session's
 * logits for one stream); the same layout on the host and the device. */
typedef struct samp_row {
    uint64_t seed;  /* the session's seed for this stream kind */
    uint64_t step;  /* the session's step (frame) number */
    float temp;     /* temperature; <= 0 (or NaN) means greedy */
    int32_t topk;   /* candidates kept; <= 0 or >= N means all */
} samp_row;

/* ---- the shared arithmetic (C and CUDA, host and device) ----------------- */

/* samp_ord: a float as a uint32 with the same order (NaN as -inf, -0 as +0). */
SAMP_FN uint32_t samp_ord(float v) {
    if (v != v) v = -INFINITY;
    if (v == 0.0f) v = 0.0f;
    union { float f; uint32_t u; } c;
    c.f = v;
    return (c.u & 0x80000000u) ? ~c.u : (c.u | 0x80000000u);
}

/* samp_key: the 64-bit rank key of logit v at index i: larger is better,
 * value first, then the lower index. All keys of a row are distinct and
 * every key is > 0. */
SAMP_FN uint64_t samp_key(float v, uint32_t i) {
    return ((uint64_t)samp_ord(v) << 32) | (uint64_t)(0xFFFFFFFFu - i);
}

/* samp_gumbel: the standard Gumbel variate -log(-log(u)), in double; finite
 * for every u rng_uniform returns (|G| < 17.4). */
SAMP_FN double samp_gumbel(double u) {
    return -log(-log(u));
}

/* samp_score: logit v at temperature temp (> 0) plus Gumbel noise g; a NaN
 * quotient (NaN logit, inf/inf) scores -inf. */
SAMP_FN double samp_score(float v, float temp, double g) {
    float q = v / temp;   /* IEEE float division on both sides */
    if (q != q) q = -INFINITY;
    return (double)q + g;
}

/* samp_better: does candidate (s, i) beat (bs, bi)? Higher score, then the
 * lower index; bi < 0 means no candidate yet. */
SAMP_FN int samp_better(double s, int32_t i, double bs, int32_t bi) {
    return bi < 0 || s > bs || (s == bs && i < bi);
}

/* ---- the CPU sampler (samp.c) ------------------------------------------- */

#ifdef __cplusplus
extern "C" {
#endif

/* samp_greedy: index of the largest of logits[0..n) by samp_key: the lowest
 * index wins a tie; NaN ranks as -inf. n >= 1. */
int samp_greedy(const float *logits, int n);

/* samp_topk: draw from logits (n) as described above; stream is the RNG
 * stream (SAMP_STREAM_*). scratch must hold n ints (the top-k heap).
 * Thread: any (no shared state). */
int samp_topk(const float *logits, int n, float temp, int topk, uint64_t seed, uint64_t step, uint32_t stream,
              int *scratch);

/* samp_topk_rows: samp_topk on each row of a batch, each row with its own
 * samp_row; in the argument order of the CUDA launcher cu_samp_topk_rows
 * (scratch where the launcher has its CUDA stream), which it is the C twin
 * of. stream is the RNG stream shared by the batch. scratch must hold N
 * ints. B >= 0, N >= 1. Thread: any. */
void samp_topk_rows(int32_t *out,          /* (B) token index in [0, N) */
                    const float *logits,   /* (B, N) */
                    const samp_row *rows,  /* (B) */
                    int B, int N, uint32_t stream, int *scratch);

#ifdef __cplusplus
}
#endif

#endif
