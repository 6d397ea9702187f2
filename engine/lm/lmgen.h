/* lmgen.h - the LMGen bookkeeping: token ring, delays, initial tokens and
 * the delay-realigned output, host code shared by every backend.
 *
 * One lmgen_slot per session slot; slots are independent (own offset, ring
 * and provided flags), and any subset is stepped together through
 * lmgen_step_batch (its step requests live in the backend's scratch,
 * lm_backend.step_req, sized at open: nothing is allocated per step).
 * Kyutai's LMGen (moshi 0.2.13, `LMGen._step`):
 *   ring of max_delay + 2 slots per stream, filled with -2 (ungenerated);
 *   step(user) at offset t: write user stream s at (t + delay[s]) % R; read
 *   slot t % R of every stream, the initial token where t <= delay[s]; run
 *   the model; t += 1; write text and dep_q audio samples at t % R; return
 *   nothing while t <= max_delay, else stream s of slot (t - max_delay +
 *   delay[s]) % R for s in 0..dep_q.
 * PersonaPlex (personas.md) keeps a ring of max_delay + 3 slots with
 * provided flags; its step is lmgen_pp.h (lmgen_step_batch dispatches to
 * it; lmgen_prepare/lmgen_commit are Kyutai's only).
 */
#ifndef MOSHID_LMGEN_H
#define MOSHID_LMGEN_H

#include <stdint.h>

#include "backend.h"
#include "lm_config.h"

/* Ring slots per stream, most (max delay + 3). */
#define LMGEN_MAX_RING (LM_MAX_DELAY + 3)
/* Token meaning "not generated yet" (never fed to the model). */
#define LMGEN_UNGENERATED (-2)

/* One slot's model call between pp_prepare and pp_commit (PersonaPlex's
 * step, lmgen_pp.h); must not move in between (the backend request points
 * into it). Streams 0 .. PP_STREAMS - 1 are used. */
typedef struct pp_call {
    int model;                            /* 1: a model call is needed */
    int64_t n;                            /* offset at the call */
    int in_pos, tgt_pos;                  /* ring slots (n-1) % R and n % R */
    int target[LM_MAX_STREAMS];           /* ring slot n % R */
    uint8_t provided[LM_MAX_STREAMS];     /* its provided flags */
} pp_call;

typedef struct lmgen_slot {
    int slot;                                     /* backend slot */
    lm_variant variant;
    int n_streams, dep_q, n_user, max_delay, ring;
    int delays[LM_MAX_STREAMS];
    int initial[LM_MAX_STREAMS];                  /* text_card, then card */
    int tokens[LM_MAX_STREAMS][LMGEN_MAX_RING];   /* the token ring */
    uint8_t provided[LM_MAX_STREAMS][LMGEN_MAX_RING];  /* PersonaPlex */
    int64_t offset;                               /* LMGen offset t */
    lm_samp samp;                                 /* sampling of this slot */
    int dep_steps;                                /* -1 = all */
    pp_call call;                                 /* PersonaPlex: pp_step_batch's call in progress */
} lmgen_slot;

/* lmgen_init: bookkeeping for backend slot `slot` of a model with config c
 * (variant resolved), sampling samp; ring reset. */
void lmgen_init(lmgen_slot *g, const lm_config *c, int slot, const lm_samp *samp);

/* lmgen_reset: ring to -2, offset 0 (the backend slot is reset separately:
 * lm_backend_reset_slot). */
void lmgen_reset(lmgen_slot *g);

/* lmgen_restore: make dst continue from the bookkeeping saved in `saved`
 * (a plain copy of an lmgen_slot taken at snapshot time: token ring,
 * provided flags, offset), keeping dst's backend slot, sampling and
 * dep_steps. With Kyutai's LMGen the slot's temporal position equals the
 * offset, so a K/V snapshot of [0, offset) restores the rest
 * (lm_backend_kv_restore). */
void lmgen_restore(lmgen_slot *dst, const lmgen_slot *saved);

/* lmgen_prepare: take one frame of user codes (n_user of them, each in
 * [0, card); borrowed) and fill the backend step request s for this slot.
 * Returns MS_OK, or an error for a code out of range or a variant not
 * implemented. */
int lmgen_prepare(lmgen_slot *g, const int *user, int card, lm_step_slot *s, ms_error *err);

/* lmgen_commit: consume the sampled tokens of s; returns 1 and writes the
 * realigned frame out (1 + dep_q: text, then audio) when LMGen returns one,
 * 0 when it returns nothing (the first max_delay steps). */
int lmgen_commit(lmgen_slot *g, const lm_step_slot *s, int *out);

/* lmgen_step_batch: prepare, one backend step over all n slots, commit.
 *   user (n, n_user) codes, out (n, 1 + dep_q), has_out (n): 1 when out row
 *   holds a frame. logits (optional, may be NULL): text (n, text_card) and
 *   audio (n, dep_q, card) of this step. A PersonaPlex model is stepped its
 *   own way instead (pp_step_users, lmgen_pp.h): user (n, 8), out (n, 17). */
int lmgen_step_batch(lm_backend *b, lmgen_slot *const *g, int n, const int *user, int *out, int *has_out,
                     float *text_logits, float *audio_logits, ms_error *err);

#endif
