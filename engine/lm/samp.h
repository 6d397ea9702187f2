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
 * p = softmax(top-k logits / T). T <= 0 (or NaN) means greedy; k <= 0 or
 * k >= n means the whole vocabulary.
 *
 * The arithmetic is the one the CUDA sampler uses (docs/cuda.md, "Same
 * logits, same token"), so both pick the same index from the same logits:
 * logits rank by value (NaN as -inf, -0 as +0) then lower index; the
 * quotient logit / T is an IEEE float division (a NaN quotient scores
 * -inf); u = (top 24 bits of rng_bits + 0.5) / 2^24 exactly in double;
 * G and the score (double)(logit / T) + G in double; the best score wins,
 * then the lower index.
 */
#ifndef MOSHID_SAMP_H
#define MOSHID_SAMP_H

#include <stdint.h>

#define SAMP_STREAM_TEXT 0u
#define SAMP_STREAM_AUDIO(k) (1u + (uint32_t)(k))

/* Defaults of the official server. */
#define SAMP_TEXT_TEMP 0.7f
#define SAMP_TEXT_TOPK 25
#define SAMP_AUDIO_TEMP 0.8f
#define SAMP_AUDIO_TOPK 250

/* samp_greedy: index of the largest of logits[0..n); the lowest index wins
 * a tie; NaN ranks as -inf. */
int samp_greedy(const float *logits, int n);

/* samp_topk: draw from logits (n) as described above. scratch must hold n
 * ints (top-k heap). Thread: any (no shared state). */
int samp_topk(const float *logits, int n, float temp, int topk, uint64_t seed, uint64_t step, uint32_t stream,
              int *scratch);

/* The uniform behind every draw is rng_uniform (engine/rng.h): exact in
 * double, strictly inside (0, 1). */

/* samp_gumbel: the Gumbel noise -log(-log(u)) used for (seed, step, stream,
 * index), in double; |G| < 17.4. */
double samp_gumbel(uint64_t seed, uint64_t step, uint32_t stream, uint32_t index);

#endif
