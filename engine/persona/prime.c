/* prime.c - PersonaPlex priming by steps or by prefill, voice-embedding
 * replay, persona snapshots (see prime.h). */
#include "prime.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const int pp_silence_tokens_mimi[PP_SIDE_CODEBOOKS] = {948, 243, 1178, 546, 1736, 1030, 1978, 2008};
const int pp_sine_tokens_mimi[PP_SIDE_CODEBOOKS] = {430, 1268, 381, 1611, 1095, 1495, 56, 472};

/* Most silence frames per silence phase. */
#define PP_PRIME_MAX_SILENCE 1000

void pp_prompt_init(pp_prompt *p) {
    memset(p, 0, sizeof *p);
    p->silence = pp_silence_tokens_mimi;
    p->sine = pp_sine_tokens_mimi;
    p->silence_frames = PP_PRIME_SILENCE_FRAMES;
}

/* one forced call as a row: text, agent 0..7, user 0..7 */
static void row_set(int *row, int text, const int *agent, const int *user) {
    row[0] = text;
    memcpy(row + 1, agent, sizeof(int) * PP_SIDE_CODEBOOKS);
    memcpy(row + 1 + PP_SIDE_CODEBOOKS, user, sizeof(int) * PP_SIDE_CODEBOOKS);
}

static pp_input row_input(const int *row) {
    pp_input in = {.user = row + 1 + PP_SIDE_CODEBOOKS, .agent = row + 1, .text = row[0]};
    return in;
}

int pp_prime_frames(const lm_config *c, const pp_prompt *p, int **rows, int *P, ms_error *err) {
    *rows = NULL;
    *P = 0;
    if (pp_check_config(c, err)) return err ? err->code : MS_ERR_UNSUPPORTED;
    if (!p->silence || !p->sine) return ms_err_set(err, MS_ERR_ARG, "prime: SILENCE and SINE tokens are required");
    if (p->n_voice < 0 || p->n_text < 0 || (p->n_voice && !p->voice) || (p->n_text && !p->text))
        return ms_err_set(err, MS_ERR_ARG, "prime: bad voice or text list");
    if (p->silence_frames < 0 || p->silence_frames > PP_PRIME_MAX_SILENCE)
        return ms_err_set(err, MS_ERR_RANGE, "prime: %d silence frames (0..%d)", p->silence_frames,
                          PP_PRIME_MAX_SILENCE);
    int64_t total = (int64_t)p->n_voice + 2 * (int64_t)p->silence_frames + p->n_text;
    if (total > PP_PRIME_MAX_CALLS)
        return ms_err_set(err, MS_ERR_LIMIT, "prime: %lld calls (most %d)", (long long)total, PP_PRIME_MAX_CALLS);
    pp_input chk = {.user = p->sine, .agent = p->silence, .text = LM_TEXT_PAD_ID};
    if (pp_check_input(c, &chk, err)) {
        ms_err_prefix(err, "prime: SILENCE/SINE tokens");
        return err ? err->code : MS_ERR_RANGE;
    }
    for (int i = 0; i < p->n_voice; i++) {
        chk.agent = p->voice + (size_t)i * PP_SIDE_CODEBOOKS;
        if (pp_check_input(c, &chk, err)) {
            ms_err_prefix(err, "prime: voice frame %d", i);
            return err ? err->code : MS_ERR_RANGE;
        }
    }
    for (int i = 0; i < p->n_text; i++)
        if (p->text[i] < 0 || p->text[i] >= c->text_card)
            return ms_err_set(err, MS_ERR_RANGE, "prime: text id %d = %d out of range (0..%d)", i, p->text[i],
                              c->text_card - 1);
    int *r = malloc(sizeof(int) * PP_STREAMS * (size_t)(total ? total : 1));
    if (!r) return ms_err_set(err, MS_ERR_NOMEM, "out of memory");
    int n = 0;
    for (int i = 0; i < p->n_voice; i++)
        row_set(r + (size_t)n++ * PP_STREAMS, LM_TEXT_PAD_ID, p->voice + (size_t)i * PP_SIDE_CODEBOOKS, p->sine);
    for (int i = 0; i < p->silence_frames; i++) row_set(r + (size_t)n++ * PP_STREAMS, LM_TEXT_PAD_ID, p->silence, p->sine);
    for (int i = 0; i < p->n_text; i++) row_set(r + (size_t)n++ * PP_STREAMS, p->text[i], p->silence, p->sine);
    for (int i = 0; i < p->silence_frames; i++) row_set(r + (size_t)n++ * PP_STREAMS, LM_TEXT_PAD_ID, p->silence, p->sine);
    MS_ASSERT(n == total);
    *rows = r;
    *P = n;
    return MS_OK;
}

/* the slot is PersonaPlex's and its backend slot holds offset - 1 positions */
static int check_slot(lm_backend *b, const lmgen_slot *g, ms_error *err) {
    if (pp_check_config(&b->cfg, err)) return err ? err->code : MS_ERR_UNSUPPORTED;
    if (g->variant != LM_VARIANT_PERSONAPLEX || g->ring != b->cfg.max_delay + 3)
        return ms_err_set(err, MS_ERR_STATE, "prime: slot %d is not set up for PersonaPlex", g->slot);
    if (g->slot < 0 || g->slot >= b->max_slots)
        return ms_err_set(err, MS_ERR_RANGE, "prime: slot %d out of range", g->slot);
    int64_t want = g->offset > 0 ? g->offset - 1 : 0;
    if (lm_backend_pos(b, g->slot) != want)
        return ms_err_set(err, MS_ERR_STATE, "prime: slot %d holds %lld positions, its offset %lld implies %lld",
                          g->slot, (long long)lm_backend_pos(b, g->slot), (long long)g->offset, (long long)want);
    return MS_OK;
}

static int all_provided(const pp_call *call) {
    for (int k = 0; k < PP_STREAMS; k++)
        if (!call->provided[k]) return 0;
    return 1;
}

int pp_prime_rows(lm_backend *b, lmgen_slot *g, const int *rows, int P, pp_prime_mode mode, ms_error *err) {
    if (check_slot(b, g, err)) return err ? err->code : MS_ERR_STATE;
    if (P < 0 || P > PP_PRIME_MAX_CALLS || (P && !rows))
        return ms_err_set(err, MS_ERR_ARG, "prime: %d calls (most %d)", P, PP_PRIME_MAX_CALLS);
    for (int i = 0; i < P; i++) {
        pp_input in = row_input(rows + (size_t)i * PP_STREAMS);
        if (pp_check_input(&b->cfg, &in, err)) {
            ms_err_prefix(err, "prime: call %d", i);
            return err ? err->code : MS_ERR_RANGE;
        }
    }
    if (mode == PP_PRIME_STEPS) {
        int out[PP_OUT_TOKENS], has;
        for (int i = 0; i < P; i++) {
            pp_input in = row_input(rows + (size_t)i * PP_STREAMS);
            int rc = pp_step_batch(b, &g, 1, &in, out, &has, NULL, NULL, err);
            if (rc) {
                ms_err_prefix(err, "prime: call %d", i);
                return rc;
            }
        }
        return MS_OK;
    }
    int *inputs = NULL, m = 0;
    lmgen_slot after;
    int rc = pp_prime_plan(b, g, rows, P, &inputs, &m, &after, err);
    if (rc == MS_OK && m > 0) rc = lm_backend_prefill(b, g->slot, lm_backend_pos(b, g->slot), m, inputs, NULL, err);
    free(inputs);
    if (rc == MS_OK) *g = after;
    return rc;
}

int pp_prime_plan(lm_backend *b, const lmgen_slot *g, const int *rows, int P, int **inputs_out, int *m_out,
                  lmgen_slot *after, ms_error *err) {
    *inputs_out = NULL;
    *m_out = 0;
    /* the bookkeeping on a copy, the model calls' inputs collected */
    lmgen_slot tmp = *g;
    int *inputs = malloc(sizeof(int) * PP_STREAMS * (size_t)(P ? P : 1));
    if (!inputs) return ms_err_set(err, MS_ERR_NOMEM, "out of memory");
    int m = 0, out[PP_OUT_TOKENS];
    for (int i = 0; i < P; i++) {
        pp_input in = row_input(rows + (size_t)i * PP_STREAMS);
        if (pp_check_input(&b->cfg, &in, err)) {
            free(inputs);
            ms_err_prefix(err, "prime: call %d", i);
            return err ? err->code : MS_ERR_RANGE;
        }
        pp_call call;
        lm_step_slot req;
        pp_prepare(&tmp, &in, &call, &req);
        if (!call.model) continue;
        if (!all_provided(&call)) {
            free(inputs);
            return ms_err_set(err, MS_ERR_STATE,
                              "prime by prefill: call %d (offset %lld) would keep a sample (a stream is not forced "
                              "at its target): prime by steps",
                              i, (long long)call.n);
        }
        memcpy(inputs + (size_t)m++ * PP_STREAMS, req.tokens, sizeof(int) * PP_STREAMS);
        pp_commit(&tmp, &call, NULL, out);
    }
    *inputs_out = inputs;
    *m_out = m;
    *after = tmp;
    return MS_OK;
}

int pp_replay_embeddings(lm_backend *b, lmgen_slot *g, const float *embs, int T, const int *cache,
                         pp_prime_mode mode, ms_error *err) {
    const lm_config *c = &b->cfg;
    if (check_slot(b, g, err)) return err ? err->code : MS_ERR_STATE;
    if (T < 0 || T > PP_PRIME_MAX_CALLS || (T && !embs) || !cache)
        return ms_err_set(err, MS_ERR_ARG, "voice replay: %d rows (most %d) or missing cache", T, PP_PRIME_MAX_CALLS);
    for (size_t i = 0; i < (size_t)T * c->dim; i++)
        if (!isfinite(embs[i]))
            return ms_err_set(err, MS_ERR_FORMAT, "voice replay: row %zu: value %zu not finite", i / c->dim,
                              i % c->dim);
    for (int k = 0; k < PP_STREAMS; k++)
        for (int i = 0; i < g->ring; i++) {
            int v = cache[k * g->ring + i], hi = k == 0 ? c->text_card : c->card;
            if (v < LMGEN_UNGENERATED || v > hi)
                return ms_err_set(err, MS_ERR_RANGE, "voice replay: cache[%d][%d] = %d out of range (-2..%d)", k, i,
                                  v, hi);
        }
    /* step_embeddings' dummies: initial audio tokens on both sides, text PAD */
    int dummy[PP_SIDE_CODEBOOKS];
    for (int q = 0; q < PP_SIDE_CODEBOOKS; q++) dummy[q] = c->card;
    pp_input in = {.user = dummy, .agent = dummy, .text = LM_TEXT_PAD_ID};
    lmgen_slot tmp = *g;
    int out[PP_OUT_TOKENS], rc = MS_OK;
    int64_t pos0 = lm_backend_pos(b, g->slot);
    for (int r = 0; r < T; r++) {
        pp_call call;
        lm_step_slot req;
        do pp_prepare(&tmp, &in, &call, &req);
        while (!call.model);
        MS_ASSERT(all_provided(&call));   /* every stream was just forced */
        pp_commit(&tmp, &call, NULL, out);
        if (mode == PP_PRIME_STEPS &&
            (rc = lm_backend_prefill(b, g->slot, pos0 + r, 1, NULL, embs + (size_t)r * c->dim, err)) != MS_OK)
            return rc;   /* the backend slot moved: the caller resets both */
    }
    if (mode == PP_PRIME_PREFILL && T > 0 && (rc = lm_backend_prefill(b, g->slot, pos0, T, NULL, embs, err)) != MS_OK)
        return rc;
    for (int k = 0; k < PP_STREAMS; k++)
        for (int i = 0; i < g->ring; i++) tmp.tokens[k][i] = cache[k * g->ring + i];
    *g = tmp;
    return MS_OK;
}

int pp_prime(lm_backend *b, lmgen_slot *g, const pp_prompt *p, pp_prime_mode mode, ms_error *err) {
    if (p->voice_embs && p->n_voice)
        return ms_err_set(err, MS_ERR_ARG, "prime: give voice codes or saved voice embeddings, not both");
    int *rows = NULL, P = 0, rc;
    if ((rc = pp_prime_frames(&b->cfg, p, &rows, &P, err)) != MS_OK) return rc;
    if (p->voice_embs) rc = pp_replay_embeddings(b, g, p->voice_embs, p->n_voice_embs, p->voice_cache, mode, err);
    if (rc == MS_OK) rc = pp_prime_rows(b, g, rows, P, mode, err);
    free(rows);
    return rc;
}

int pp_persona_save(lm_backend *b, const lmgen_slot *g, pp_persona *out, ms_error *err) {
    memset(out, 0, sizeof *out);
    if (check_slot(b, g, err)) return err ? err->code : MS_ERR_STATE;
    int64_t pos = lm_backend_pos(b, g->slot);
    if (pos > b->cfg.context)
        return ms_err_set(err, MS_ERR_LIMIT, "persona: %lld primed positions exceed the context %d", (long long)pos,
                          b->cfg.context);
    int rc = lm_backend_kv_snapshot(b, g->slot, (int)pos, &out->kv, err);
    if (rc) return rc;
    out->pos = pos;
    out->st = *g;
    return MS_OK;
}

int pp_persona_load(lm_backend *b, const pp_persona *p, lmgen_slot *g, ms_error *err) {
    if (!p->kv || p->st.variant != LM_VARIANT_PERSONAPLEX || p->st.ring != g->ring || g->variant != p->st.variant)
        return ms_err_set(err, MS_ERR_ARG, "persona: not a PersonaPlex snapshot of this model");
    int rc = lm_backend_kv_restore(b, g->slot, p->kv, err);
    if (rc) return rc;
    lmgen_restore(g, &p->st);   /* keeps g's slot, sampling, dep_steps */
    MS_ASSERT(lm_backend_pos(b, g->slot) == p->pos);
    return MS_OK;
}

void pp_persona_close(lm_backend *b, pp_persona *p) {
    if (!p) return;
    lm_backend_kv_snap_free(b, p->kv);
    p->kv = NULL;
}
