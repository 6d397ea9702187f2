/* model.c - LM + Mimi + tokenizer as one sched_model. See model.h. */
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "lm.h"
#include "lmgen.h"
#include "lmgen_pp.h"
#include "log.h"
#include "mimi.h"
#include "plugin.h"
#include "spm.h"

/* Text tokens never sent to clients (official servers: EPAD 0 and PAD 3). */
#define MODEL_TEXT_EPAD 0
#define MODEL_TEXT_PAD 3

typedef struct model_slot {
    lmgen_slot g;
    mimi_stream *mimi;
    uint64_t frames;        /* frames encoded since the session began */
    FILE *rec_codes, *rec_out;  /* debug recording (record_dir) */
} model_slot;

struct model {
    model_opts o;
    lm_backend *lm;
    const lm_config *cfg;
    mimi_model *mimi;
    spm_model *spm;
    int ncb, F;
    int n_user;             /* user codes per frame the bookkeeping reads */
    int slots;
    model_slot *s;          /* (slots) */
    /* engine-thread scratch */
    mimi_stream **streams;  /* (slots) */
    lmgen_slot **gens;      /* (slots) */
    int *codes;             /* (slots, ncb) */
    int *out;               /* (slots, 1 + dep_q) */
    int *has_out;           /* (slots) */
    int *dec_rows;          /* (slots) */
    int *dec_codes;         /* (slots, ncb) */
    float *dec_pcm;         /* (slots, F) */
};

static void rec_close(model_slot *s);

static const lm_backend_ops *pick_backend(const model_opts *o, ms_error *err) {
    if (strcmp(o->backend, "cpu") == 0) return &lm_cpu_backend;
    ms_error perr = {0};
    const moshid_plugin *p = plugin_load("cuda", &perr);
    const lm_backend_ops *ops = p ? p->backend : NULL;
    if (ops) return ops;
    if (strcmp(o->backend, "cuda") == 0) {
        if (p) ms_err_set(err, MS_ERR_UNSUPPORTED, "backend cuda: the plugin carries no backend yet");
        else ms_err_set(err, perr.code, "%s", perr.msg);
        return NULL;
    }
    LOGI("backend_auto", "chosen=cpu reason=\"%s\"", p ? "the CUDA plugin carries no backend yet" : perr.msg);
    return &lm_cpu_backend;
}

model *model_open(const model_opts *o, ms_error *err) {
    model *m = calloc(1, sizeof *m);
    if (!m) { ms_err_set(err, MS_ERR_NOMEM, "model: out of memory"); return NULL; }
    m->o = *o;
    m->slots = o->slots;
    const lm_backend_ops *ops = pick_backend(o, err);
    if (!ops) goto fail;
    lm_backend_opts bo = {.max_slots = o->slots, .threads = o->threads, .variant = o->variant, .device = o->gpu};
    if (!(m->lm = lm_backend_open(ops, o->lm_dir, &bo, err))) goto fail;
    m->cfg = &m->lm->cfg;
    if (mimi_model_load(&m->mimi, o->mimi, o->mimi_config, err) != MS_OK) goto fail;
    m->ncb = mimi_num_codebooks(m->mimi);
    m->F = mimi_frame_samples(m->mimi);
    /* Kyutai's LMGen reads n_q - dep_q user streams; PersonaPlex's step
     * always reads the user's 8 codebooks (its streams 9..16). */
    m->n_user = m->cfg->variant == LM_VARIANT_PERSONAPLEX ? PP_SIDE_CODEBOOKS : m->cfg->n_user;
    if (m->ncb < m->n_user || m->ncb < 8 || m->n_user < 1) {
        ms_err_set(err, MS_ERR_UNSUPPORTED, "model: Mimi gives %d codebooks, the LM reads %d user streams", m->ncb,
                   m->n_user);
        goto fail;
    }
    if (o->tokenizer && o->tokenizer[0]) {
        if (!(m->spm = spm_load(o->tokenizer, err))) goto fail;
        if (spm_size(m->spm) != m->cfg->text_card) {
            ms_err_set(err, MS_ERR_FORMAT, "model: tokenizer %s has %d pieces, the LM's text_card is %d",
                       o->tokenizer, spm_size(m->spm), m->cfg->text_card);
            goto fail;
        }
    }
    size_t S = (size_t)m->slots, dq = (size_t)m->cfg->dep_q;
    m->s = calloc(S, sizeof *m->s);
    m->streams = calloc(S, sizeof *m->streams);
    m->gens = calloc(S, sizeof *m->gens);
    m->codes = calloc(S * (size_t)m->ncb, sizeof(int));
    m->out = calloc(S * (1 + dq), sizeof(int));
    m->has_out = calloc(S, sizeof(int));
    m->dec_rows = calloc(S, sizeof(int));
    m->dec_codes = calloc(S * (size_t)m->ncb, sizeof(int));
    m->dec_pcm = calloc(S * (size_t)m->F, sizeof(float));
    if (!m->s || !m->streams || !m->gens || !m->codes || !m->out || !m->has_out || !m->dec_rows || !m->dec_codes ||
        !m->dec_pcm) {
        ms_err_set(err, MS_ERR_NOMEM, "model: out of memory for %d slots", m->slots);
        goto fail;
    }
    for (int i = 0; i < m->slots; i++)
        if (!(m->s[i].mimi = mimi_stream_create(m->mimi, err))) goto fail;
    LOGI("model_open", "lm=%s variant=%s backend=%s dim=%d layers=%d dep_q=%d slots=%d mimi=%s codebooks=%d",
         o->lm_dir, lm_variant_name(m->cfg->variant), m->lm->ops->name, m->cfg->dim, m->cfg->num_layers,
         m->cfg->dep_q, m->slots, o->mimi, m->ncb);
    return m;
fail:
    model_close(m);
    return NULL;
}

void model_close(model *m) {
    if (!m) return;
    for (int i = 0; m->s && i < m->slots; i++) {
        rec_close(&m->s[i]);
        mimi_stream_free(m->s[i].mimi);
    }
    free(m->s);
    free(m->streams); free(m->gens); free(m->codes); free(m->out); free(m->has_out);
    free(m->dec_rows); free(m->dec_codes); free(m->dec_pcm);
    if (m->spm) spm_free(m->spm);
    if (m->mimi) mimi_model_free(m->mimi);
    if (m->lm) lm_backend_close(m->lm);
    free(m);
}

static void rec_close(model_slot *s) {
    if (s->rec_codes) fclose(s->rec_codes);
    if (s->rec_out) fclose(s->rec_out);
    s->rec_codes = s->rec_out = NULL;
}

static void rec_open(model *m, model_slot *s, uint64_t id) {
    char path[4096];
    snprintf(path, sizeof path, "%s/session-%llu.codes", m->o.record_dir, (unsigned long long)id);
    s->rec_codes = fopen(path, "w");
    snprintf(path, sizeof path, "%s/session-%llu.jsonl", m->o.record_dir, (unsigned long long)id);
    s->rec_out = fopen(path, "w");
    if (!s->rec_codes || !s->rec_out) {
        LOGW("record_failed", "dir=%s", m->o.record_dir);
        rec_close(s);
    }
}

static int m_begin(void *ctx, int slot, const sched_params *p, ms_error *err) {
    model *m = ctx;
    model_slot *s = &m->s[slot];
    rec_close(s);
    if (m->o.record_dir && m->o.record_dir[0]) rec_open(m, s, p->session_id);
    lmgen_init(&s->g, m->cfg, slot, &p->samp);
    s->frames = 0;
    mimi_stream_reset_encoder(s->mimi);
    mimi_stream_reset_decoder(s->mimi);
    return lm_backend_reset_slot(m->lm, slot, err);
}

static void m_end(void *ctx, int slot) {
    model *m = ctx;
    rec_close(&m->s[slot]); /* nothing else is held beyond the slot's reusable state */
}

static int m_step(void *ctx, int n, const int *slots, const float *pcm_in, float *pcm_out, int *has_pcm, int *text,
                  ms_error *err) {
    model *m = ctx;
    const int ncb = m->ncb, nout = 1 + m->cfg->dep_q;
    for (int j = 0; j < n; j++) {
        m->streams[j] = m->s[slots[j]].mimi;
        m->gens[j] = &m->s[slots[j]].g;
    }
    int rc = lm_backend_mimi_encode(m->lm, m->streams, n, pcm_in, m->codes, err);
    if (rc) return rc;
    for (int j = 0; j < n; j++) {
        model_slot *s = &m->s[slots[j]];
        /* Kyutai's server: the first frame is "in the LM's past"; the second
         * is encoded from a fresh state again. */
        if (s->frames++ == 0 && m->cfg->variant == LM_VARIANT_KYUTAI) mimi_stream_reset_encoder(s->mimi);
    }
    /* the bookkeeping reads n_user codes per slot: the first n_user of each row */
    const int nu = m->n_user;
    if (nu != ncb)
        for (int j = 0; j < n; j++) memmove(m->codes + j * nu, m->codes + j * ncb, sizeof(int) * (size_t)nu);
    for (int j = 0; j < n; j++) {
        model_slot *s = &m->s[slots[j]];
        if (!s->rec_codes) continue;
        for (int k = 0; k < nu; k++) fprintf(s->rec_codes, k ? " %d" : "%d", m->codes[j * nu + k]);
        fputc('\n', s->rec_codes);
    }
    rc = lmgen_step_batch(m->lm, m->gens, n, m->codes, m->out, m->has_out, NULL, NULL, err);
    if (rc) return rc;
    for (int j = 0; j < n; j++) {
        model_slot *s = &m->s[slots[j]];
        if (!s->rec_out) continue;
        fprintf(s->rec_out, "{\"step\": %llu, \"out\": ", (unsigned long long)(s->frames - 1));
        if (!m->has_out[j]) fputs("null", s->rec_out);
        else
            for (int k = 0; k < nout; k++) fprintf(s->rec_out, "%s%d", k ? ", " : "[", m->out[(size_t)j * nout + k]);
        fputs(m->has_out[j] ? "]}\n" : "}\n", s->rec_out);
    }
    int nd = 0;
    for (int j = 0; j < n; j++) {
        has_pcm[j] = 0;
        text[j] = -1;
        if (!m->has_out[j]) continue;
        const int *o = m->out + (size_t)j * nout;
        text[j] = o[0];
        /* Moshi's audio: the first ncb of the dep_q generated codebooks */
        for (int k = 0; k < ncb; k++) m->dec_codes[(size_t)nd * ncb + k] = o[1 + k];
        m->streams[nd] = m->s[slots[j]].mimi;
        m->dec_rows[nd++] = j;
    }
    if (nd) {
        rc = lm_backend_mimi_decode(m->lm, m->streams, nd, m->dec_codes, m->dec_pcm, err);
        if (rc) return rc;
        for (int d = 0; d < nd; d++) {
            int j = m->dec_rows[d];
            memcpy(pcm_out + (size_t)j * m->F, m->dec_pcm + (size_t)d * m->F, sizeof(float) * (size_t)m->F);
            has_pcm[j] = 1;
        }
    }
    return MS_OK;
}

sched_model model_sched(model *m) {
    return (sched_model){.ctx = m, .max_slots = m->slots, .frame_samples = m->F,
                         .begin = m_begin, .end = m_end, .step = m_step};
}

const lm_config *model_lm_config(const model *m) { return m->cfg; }
const char *model_variant_name(const model *m) { return lm_variant_name(m->cfg->variant); }
const char *model_backend_name(const model *m) { return m->lm->ops->name; }

const char *model_piece(const model *m, int token) {
    if (!m->spm || token == MODEL_TEXT_EPAD || token == MODEL_TEXT_PAD) return NULL;
    return spm_piece(m->spm, token);
}
