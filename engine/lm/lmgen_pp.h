/* lmgen_pp.h - PersonaPlex's step: the LMGen bookkeeping NVIDIA's
 * PersonaPlex weights were trained with, as host code shared by every
 * backend (facts: shared/spec/personas.md, "The PersonaPlex step is not
 * Kyutai's LMGen"; checked against NVIDIA/personaplex moshi/models/lm.py).
 *
 * State: an lmgen_slot (lmgen.h) initialised for LM_VARIANT_PERSONAPLEX:
 * R = max_delay + 3 ring slots per stream, a parallel ring of "provided"
 * flags, the offset n. Streams: 0 text, 1..8 agent audio (Moshi), 9..16
 * user audio; dep_q = n_q = 16 (the depformer predicts both sides).
 *
 * One call step(user[8] | none, agent[8] | none, text | none) at offset n:
 *   1. every given token of stream k goes to slot (n + delay[k]) % R,
 *      flagged provided;
 *   2. every stream with n <= delay[k]: slot n % R = its initial token,
 *      flagged provided;
 *   3. n == 0: slot 0 of every stream = initial, n = 1, no model call, no
 *      output;
 *   4. model input = slot (n-1) % R of the 17 streams; target = slot n % R;
 *      the depformer reads the target text when provided (else the text
 *      sample), and after sub-step k the target token of stream 1+k when
 *      provided (else the sample);
 *   5. flags of slot (n-1) % R cleared; samples written into slot n % R of
 *      the streams not provided there;
 *   6. n <= max_delay: n += 1, no output; else the output is slot
 *      (n - max_delay + delay[k]) % R of streams 0..16, n += 1.
 * The backend's K/V position after a call is n - 1 (one model call per
 * call but the first).
 *
 * Depformer sub-steps: a sub-step's sample is kept only when its stream is
 * not provided at the target, and sub-steps are causal, so only sub-steps
 * 0 .. last-unprovided are run (lmgen_slot.dep_steps = -1, the default):
 * 8 in live serving (the user streams 9..16 are always provided there),
 * 0 while priming. Outputs are identical to running all 16; with sampling
 * too, since the noise is keyed per (seed, step, stream, index).
 * dep_steps = dep_q runs all 16 (tests); other values are refused.
 * The rng step counter of a call is n.
 *
 * Threads: the engine thread (the one that calls the backend).
 */
#ifndef MOSHID_LMGEN_PP_H
#define MOSHID_LMGEN_PP_H

#include <stdint.h>

#include "backend.h"
#include "lm_config.h"
#include "lmgen.h"

/* Streams of a PersonaPlex model: text + 8 agent + 8 user. */
#define PP_STREAMS (1 + 2 * PP_SIDE_CODEBOOKS)
/* Output tokens of one step: text + dep_q (16) audio. */
#define PP_OUT_TOKENS PP_STREAMS
/* "No text token given" in pp_input.text. */
#define PP_NO_TEXT (-1)

/* What one call is given (step's input_tokens, moshi_tokens, text_token). */
typedef struct pp_input {
    const int *user;    /* (8) user codes in [0, card), or NULL (borrowed) */
    const int *agent;   /* (8) agent codes in [0, card), or NULL: forced (priming only) */
    int text;           /* text id in [0, text_card), or PP_NO_TEXT: forced (priming only) */
} pp_input;

/* pp_check_config: MS_OK when c can be stepped PersonaPlex's way
 * (n_q == dep_q == 16, text_card > LM_TEXT_PAD_ID), else an error naming the
 * mismatch. */
int pp_check_config(const lm_config *c, ms_error *err);

/* pp_check_input: range checks of in against c (codes [0, card), text
 * [0, text_card) or PP_NO_TEXT). Pure. */
int pp_check_input(const lm_config *c, const pp_input *in, ms_error *err);

/* pp_prepare: steps 1-4 for slot g (variant PersonaPlex), input in
 * (trusted: check it with pp_check_input; `card` codes, the initial token,
 * are accepted here because step_embeddings feeds them). Fills call, and
 * when call->model is set also *req (pointing into call). On the first
 * call (n == 0) the step is complete and call->model is 0. */
void pp_prepare(lmgen_slot *g, const pp_input *in, pp_call *call, lm_step_slot *req);

/* pp_commit: steps 5-6 after the model call; req holds the samples, or is
 * NULL when every target stream was provided (prefill: nothing sampled is
 * kept). Returns 1 and writes out (1 + dep_q) when the step returns a
 * frame, else 0. */
int pp_commit(lmgen_slot *g, const pp_call *call, const lm_step_slot *req, int *out);

/* pp_step_batch: one PersonaPlex step of n slots (distinct backend slots,
 * each an lmgen_slot of variant PersonaPlex whose backend slot holds
 * n-1 positions): checks every input first, prepares, runs one backend
 * step over the slots that need a model call, commits. Each slot's call
 * is kept in g[i]->call, the requests in the backend's scratch
 * (lm_backend.step_req): nothing is allocated.
 *   in (n); out (n, 1 + dep_q); has_out (n): 1 when out row holds a frame.
 *   text_logits (n, text_card), audio_logits (n, dep_q, card): optional;
 *   rows (and skipped sub-steps) that were not computed are NaN.
 * On an error found before the model call nothing has changed; a backend
 * error leaves the slots undefined (reset them). */
int pp_step_batch(lm_backend *b, lmgen_slot *const *g, int n, const pp_input *in, int *out, int *has_out,
                  float *text_logits, float *audio_logits, ms_error *err);

/* pp_step_users: live serving: pp_step_batch with user codes only.
 *   user (n, 8), out (n, 1 + dep_q), has_out (n); logits as above. */
int pp_step_users(lm_backend *b, lmgen_slot *const *g, int n, const int *user, int *out, int *has_out,
                  float *text_logits, float *audio_logits, ms_error *err);

#endif
