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
 * p = softmax(top-k logits / T). T <= 0 means greedy; k <= 0 or k >= n means
 * the whole vocabulary.
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
 * a tie; NaN never wins unless all are NaN (then 0). */
int samp_greedy(const float *logits, int n);

/* samp_topk: draw from logits (n) as described above. scratch must hold n
 * ints (top-k heap). Thread: any (no shared state). */
int samp_topk(const float *logits, int n, float temp, int topk, uint64_t seed, uint64_t step, uint32_t stream,
              int *scratch);

/* samp_gumbel: the Gumbel noise used for (seed, step, stream, index). */
float samp_gumbel(uint64_t seed, uint64_t step, uint32_t stream, uint32_t index);

#endif
