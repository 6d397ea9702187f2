/* lmgen.c - LMGen bookkeeping over a batch of slots (see lmgen.h). */
#include "lmgen.h"
#include "lmgen_pp.h"

#include <string.h>

void lmgen_reset(lmgen_slot *g) {
    for (int s = 0; s < LM_MAX_STREAMS; s++)
        for (int i = 0; i < LMGEN_MAX_RING; i++) {
            g->tokens[s][i] = LMGEN_UNGENERATED;
            g->provided[s][i] = 0;
        }
    g->offset = 0;
}

void lmgen_init(lmgen_slot *g, const lm_config *c, int slot, const lm_samp *samp) {
    memset(g, 0, sizeof *g);
    g->slot = slot;
    g->variant = c->variant;
    g->n_streams = c->n_streams;
    g->dep_q = c->dep_q;
    g->n_user = c->n_user;
    g->max_delay = c->max_delay;
    g->ring = c->max_delay + (c->variant == LM_VARIANT_PERSONAPLEX ? 3 : 2);
    memcpy(g->delays, c->delays, sizeof g->delays);
    g->initial[0] = c->text_card;
    for (int s = 1; s < LM_MAX_STREAMS; s++) g->initial[s] = c->card;
    g->samp = *samp;
    g->dep_steps = -1;
    lmgen_reset(g);
}

void lmgen_restore(lmgen_slot *dst, const lmgen_slot *saved) {
    int slot = dst->slot, dep_steps = dst->dep_steps;
    lm_samp samp = dst->samp;
    *dst = *saved;
    dst->slot = slot;
    dst->samp = samp;
    dst->dep_steps = dep_steps;
}

int lmgen_prepare(lmgen_slot *g, const int *user, int card, lm_step_slot *s, ms_error *err) {
    if (g->variant != LM_VARIANT_KYUTAI)
        return ms_err_set(err, MS_ERR_UNSUPPORTED, "the %s step is not implemented yet",
                          g->variant == LM_VARIANT_PERSONAPLEX ? "PersonaPlex" : "unknown variant");
    for (int k = 0; k < g->n_user; k++)
        if (user[k] < 0 || user[k] >= card)
            return ms_err_set(err, MS_ERR_RANGE, "user code %d = %d out of range (0..%d)", k, user[k], card - 1);
    int R = g->ring;
    int64_t t = g->offset;
    for (int k = 0; k < g->n_user; k++) {
        int st = 1 + g->dep_q + k;
        g->tokens[st][(t + g->delays[st]) % R] = user[k];
    }
    memset(s, 0, sizeof *s);
    s->slot = g->slot;
    for (int st = 0; st < g->n_streams; st++)
        s->tokens[st] = t <= g->delays[st] ? g->initial[st] : g->tokens[st][t % R];
    s->target = NULL;
    s->provided = NULL;
    s->samp = g->samp;
    s->step = (uint64_t)t;
    s->dep_steps = g->dep_steps;
    return MS_OK;
}

int lmgen_commit(lmgen_slot *g, const lm_step_slot *s, int *out) {
    int R = g->ring;
    g->offset++;
    int64_t t = g->offset;
    g->tokens[0][t % R] = s->out_text;
    for (int k = 0; k < g->dep_q; k++) g->tokens[1 + k][t % R] = s->out_audio[k];
    if (t <= g->max_delay) return 0;
    for (int st = 0; st <= g->dep_q; st++) out[st] = g->tokens[st][(t - g->max_delay + g->delays[st]) % R];
    return 1;
}

int lmgen_step_batch(lm_backend *b, lmgen_slot *const *g, int n, const int *user, int *out, int *has_out,
                     float *text_logits, float *audio_logits, ms_error *err) {
    if (b->cfg.variant == LM_VARIANT_PERSONAPLEX)   /* its own step: user (n, 8), lmgen_pp.h */
        return pp_step_users(b, g, n, user, out, has_out, text_logits, audio_logits, err);
    const lm_config *c = &b->cfg;
    if (n < 1 || n > b->max_slots) return ms_err_set(err, MS_ERR_ARG, "lmgen: %d slots (max %d)", n, b->max_slots);
    lm_step_slot *req = b->step_req;
    for (int i = 0; i < n; i++) {
        int rc = lmgen_prepare(g[i], user + (size_t)i * c->n_user, c->card, &req[i], err);
        if (rc != MS_OK) {
            ms_err_prefix(err, "slot %d", g[i]->slot);
            return rc;
        }
        req[i].text_logits = text_logits ? text_logits + (size_t)i * c->text_card : NULL;
        req[i].audio_logits = audio_logits ? audio_logits + (size_t)i * c->dep_q * c->card : NULL;
    }
    int rc = lm_backend_step(b, req, n, err);
    if (rc == MS_OK)
        for (int i = 0; i < n; i++) has_out[i] = lmgen_commit(g[i], &req[i], out + (size_t)i * (1 + c->dep_q));
    return rc;
}
