/* lmgen_pp.c - PersonaPlex's step over a batch of slots (see lmgen_pp.h). */
#include "lmgen_pp.h"

#include <math.h>
#include <string.h>

int pp_check_config(const lm_config *c, ms_error *err) {
    if (c->n_q != 2 * PP_SIDE_CODEBOOKS || c->dep_q != c->n_q)
        return ms_err_set(err, MS_ERR_UNSUPPORTED,
                          "PersonaPlex step: needs n_q = dep_q = %d (8 agent + 8 user codebooks), model has n_q %d "
                          "dep_q %d",
                          2 * PP_SIDE_CODEBOOKS, c->n_q, c->dep_q);
    if (c->text_card <= LM_TEXT_PAD_ID)
        return ms_err_set(err, MS_ERR_UNSUPPORTED, "PersonaPlex step: text_card %d has no PAD id %d", c->text_card,
                          LM_TEXT_PAD_ID);
    MS_ASSERT(c->n_streams == PP_STREAMS);
    return MS_OK;
}

static int check_codes(const int *codes, int card, const char *what, ms_error *err) {
    for (int q = 0; q < PP_SIDE_CODEBOOKS; q++)
        if (codes[q] < 0 || codes[q] >= card)
            return ms_err_set(err, MS_ERR_RANGE, "%s code %d = %d out of range (0..%d)", what, q, codes[q], card - 1);
    return MS_OK;
}

int pp_check_input(const lm_config *c, const pp_input *in, ms_error *err) {
    if (in->user && check_codes(in->user, c->card, "user", err)) return err ? err->code : MS_ERR_RANGE;
    if (in->agent && check_codes(in->agent, c->card, "agent", err)) return err ? err->code : MS_ERR_RANGE;
    if (in->text != PP_NO_TEXT && (in->text < 0 || in->text >= c->text_card))
        return ms_err_set(err, MS_ERR_RANGE, "text token %d out of range (0..%d)", in->text, c->text_card - 1);
    return MS_OK;
}

/* write token v of stream k at slot (n + delay[k]) % R, flagged */
static void put(lmgen_slot *g, int k, int v) {
    int pos = (int)((g->offset + g->delays[k]) % g->ring);
    g->tokens[k][pos] = v;
    g->provided[k][pos] = 1;
}

void pp_prepare(lmgen_slot *g, const pp_input *in, pp_call *call, lm_step_slot *req) {
    MS_ASSERT(g->variant == LM_VARIANT_PERSONAPLEX && g->n_streams == PP_STREAMS);
    const int R = g->ring;
    const int64_t n = g->offset;
    if (in->user)
        for (int q = 0; q < PP_SIDE_CODEBOOKS; q++) put(g, 1 + PP_SIDE_CODEBOOKS + q, in->user[q]);
    if (in->agent)
        for (int q = 0; q < PP_SIDE_CODEBOOKS; q++) put(g, 1 + q, in->agent[q]);
    if (in->text != PP_NO_TEXT) put(g, 0, in->text);
    for (int k = 0; k < PP_STREAMS; k++)
        if (n <= g->delays[k]) {
            g->tokens[k][n % R] = g->initial[k];
            g->provided[k][n % R] = 1;
        }
    memset(call, 0, sizeof *call);
    call->n = n;
    if (n == 0) {
        /* seeds slot 0 (over any user token written there); no model call */
        for (int k = 0; k < PP_STREAMS; k++) g->tokens[k][0] = g->initial[k];
        g->offset = 1;
        return;
    }
    call->model = 1;
    call->in_pos = (int)((n - 1) % R);
    call->tgt_pos = (int)(n % R);
    int need = 0;   /* depformer sub-steps whose samples can be kept */
    for (int k = 0; k < PP_STREAMS; k++) {
        call->target[k] = g->tokens[k][call->tgt_pos];
        call->provided[k] = g->provided[k][call->tgt_pos];
        if (k > 0 && !call->provided[k]) need = k;
    }
    memset(req, 0, sizeof *req);
    req->slot = g->slot;
    for (int k = 0; k < PP_STREAMS; k++) req->tokens[k] = g->tokens[k][call->in_pos];
    req->target = call->target;
    req->provided = call->provided;
    req->samp = g->samp;
    req->step = (uint64_t)n;
    req->dep_steps = g->dep_steps < 0 ? need : g->dep_steps;
}

int pp_commit(lmgen_slot *g, const pp_call *call, const lm_step_slot *req, int *out) {
    MS_ASSERT(call->model && call->n == g->offset);
    const int R = g->ring, tg = call->tgt_pos;
    const int64_t n = call->n;
    for (int k = 0; k < PP_STREAMS; k++) g->provided[k][call->in_pos] = 0;
    for (int k = 0; k < PP_STREAMS; k++) {
        if (g->provided[k][tg]) continue;
        MS_ASSERT(req != NULL);
        int v = k == 0 ? req->out_text : req->out_audio[k - 1];
        MS_ASSERT(v >= 0);   /* a skipped sub-step is never kept (pp_prepare's dep_steps) */
        g->tokens[k][tg] = v;
    }
    g->offset = n + 1;
    if (n <= g->max_delay) return 0;
    for (int k = 0; k < PP_STREAMS; k++) out[k] = g->tokens[k][(n - g->max_delay + g->delays[k]) % R];
    return 1;
}

static void fill_nan(float *p, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = NAN;
}

/* pp_step_batch's work; input i is in[i], or with in NULL the user codes
 * user + 8 i alone (pp_step_users). */
static int step_batch(lm_backend *b, lmgen_slot *const *g, int n, const pp_input *in, const int *user, int *out,
                      int *has_out, float *text_logits, float *audio_logits, ms_error *err) {
    const lm_config *c = &b->cfg;
    if (n < 1 || n > LM_MAX_SLOTS || n > b->max_slots || !g || (!in && !user) || !out || !has_out)
        return ms_err_set(err, MS_ERR_ARG, "PersonaPlex step: %d slots (max %d) or missing argument", n, b->max_slots);
    if (pp_check_config(c, err)) return err ? err->code : MS_ERR_UNSUPPORTED;
    uint8_t seen[LM_MAX_SLOTS] = {0};
    for (int i = 0; i < n; i++) {
        if (g[i]->variant != LM_VARIANT_PERSONAPLEX || g[i]->ring != c->max_delay + 3)
            return ms_err_set(err, MS_ERR_STATE, "PersonaPlex step: slot %d is not set up for PersonaPlex",
                              g[i]->slot);
        if (g[i]->slot < 0 || g[i]->slot >= b->max_slots)
            return ms_err_set(err, MS_ERR_RANGE, "PersonaPlex step: slot %d out of range", g[i]->slot);
        if (seen[g[i]->slot]++) return ms_err_set(err, MS_ERR_ARG, "PersonaPlex step: slot %d given twice", g[i]->slot);
        int64_t want = g[i]->offset > 0 ? g[i]->offset - 1 : 0;
        if (lm_backend_pos(b, g[i]->slot) != want)
            return ms_err_set(err, MS_ERR_STATE,
                              "PersonaPlex step: slot %d holds %lld positions, its offset %lld implies %lld (reset "
                              "both together)",
                              g[i]->slot, (long long)lm_backend_pos(b, g[i]->slot), (long long)g[i]->offset,
                              (long long)want);
        if (g[i]->dep_steps != -1 && g[i]->dep_steps != c->dep_q)
            return ms_err_set(err, MS_ERR_RANGE, "PersonaPlex step: dep_steps %d: -1 (kept sub-steps) or %d (all)",
                              g[i]->dep_steps, c->dep_q);
        pp_input ui = {.user = in ? NULL : user + (size_t)i * PP_SIDE_CODEBOOKS, .agent = NULL, .text = PP_NO_TEXT};
        if (pp_check_input(c, in ? &in[i] : &ui, err)) {
            ms_err_prefix(err, "PersonaPlex step: slot %d", g[i]->slot);
            return err ? err->code : MS_ERR_RANGE;
        }
    }
    lm_step_slot *req = b->step_req;
    int *map = b->step_rows;
    int m = 0, rc = MS_OK;
    for (int i = 0; i < n; i++) {
        has_out[i] = 0;
        float *tl = text_logits ? text_logits + (size_t)i * c->text_card : NULL;
        float *al = audio_logits ? audio_logits + (size_t)i * c->dep_q * c->card : NULL;
        if (tl) fill_nan(tl, (size_t)c->text_card);
        if (al) fill_nan(al, (size_t)c->dep_q * c->card);
        pp_input ui = {.user = in ? NULL : user + (size_t)i * PP_SIDE_CODEBOOKS, .agent = NULL, .text = PP_NO_TEXT};
        pp_prepare(g[i], in ? &in[i] : &ui, &g[i]->call, &req[m]);
        if (!g[i]->call.model) continue;
        req[m].text_logits = tl;
        req[m].audio_logits = al;
        map[m++] = i;
    }
    if (m > 0) rc = lm_backend_step(b, req, m, err);
    for (int j = 0; rc == MS_OK && j < m; j++) {
        int i = map[j];
        has_out[i] = pp_commit(g[i], &g[i]->call, &req[j], out + (size_t)i * PP_OUT_TOKENS);
    }
    return rc;
}

int pp_step_batch(lm_backend *b, lmgen_slot *const *g, int n, const pp_input *in, int *out, int *has_out,
                  float *text_logits, float *audio_logits, ms_error *err) {
    if (!in) return ms_err_set(err, MS_ERR_ARG, "PersonaPlex step: no inputs");
    return step_batch(b, g, n, in, NULL, out, has_out, text_logits, audio_logits, err);
}

int pp_step_users(lm_backend *b, lmgen_slot *const *g, int n, const int *user, int *out, int *has_out,
                  float *text_logits, float *audio_logits, ms_error *err) {
    if (n < 1 || n > LM_MAX_SLOTS || !user)
        return ms_err_set(err, MS_ERR_ARG, "PersonaPlex step: %d slots or no user codes", n);
    return step_batch(b, g, n, NULL, user, out, has_out, text_logits, audio_logits, err);
}
