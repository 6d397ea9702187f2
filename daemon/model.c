/* model.c - LM + Mimi + tokenizer as one sched_model. See model.h. */
#include "model.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "lm.h"
#include "job.h"
#include "lmgen.h"
#include "log.h"
#include "plugin.h"
#include "spm.h"

/* Text tokens never sent to clients (official servers: EPAD 0 and PAD 3). */
#define MODEL_TEXT_EPAD 0
#define MODEL_TEXT_PAD 3

typedef struct model_slot {
    lmgen_slot g;           /* the slot's LMGen bookkeeping (host) */
    uint64_t frames;        /* frames stepped since the session began */
    pp_job *job;            /* the session's start-up work (a persona's restore), or NULL */
    FILE *rec_codes, *rec_out;  /* debug recording (record_dir) */
} model_slot;

struct model {
    model_opts o;
    lm_backend *lm;         /* owns each slot's K/V and codec state */
    const lm_config *cfg;
    spm_model *spm;
    int slots;
    model_slot *s;          /* (slots) */
    /* one frame step per scheduler batch buffer (engine thread) */
    lm_backend_stats open_stats;   /* the backend's figures once open (loop thread reads them) */
    lm_frame frame[LM_MAX_INFLIGHT];
    lmgen_slot **gens[LM_MAX_INFLIGHT];   /* (slots) */
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
    lm_backend_opts bo = {.max_slots = o->slots, .threads = o->threads, .variant = o->variant, .device = o->gpu,
                          .mimi = o->mimi, .mimi_config = o->mimi_config, .pipeline = o->pipeline};
    if (!(m->lm = lm_backend_open(ops, o->lm_dir, &bo, err))) goto fail;
    m->cfg = &m->lm->cfg;
    if (o->tokenizer && o->tokenizer[0]) {
        if (!(m->spm = spm_load(o->tokenizer, err))) goto fail;
        if (spm_size(m->spm) != m->cfg->text_card) {
            ms_err_set(err, MS_ERR_FORMAT, "model: tokenizer %s has %d pieces, the LM's text_card is %d",
                       o->tokenizer, spm_size(m->spm), m->cfg->text_card);
            goto fail;
        }
    }
    m->s = calloc((size_t)m->slots, sizeof *m->s);
    if (!m->s) { ms_err_set(err, MS_ERR_NOMEM, "model: out of memory for %d slots", m->slots); goto fail; }
    for (int k = 0; k < LM_MAX_INFLIGHT; k++) {
        if (lm_frame_alloc(m->lm, &m->frame[k], m->slots, err) != MS_OK) goto fail;
        if (!(m->gens[k] = calloc((size_t)m->slots, sizeof *m->gens[k]))) {
            ms_err_set(err, MS_ERR_NOMEM, "model: out of memory");
            goto fail;
        }
    }
    lm_backend_stats_get(m->lm, &m->open_stats);
    const lm_backend_stats st = m->open_stats;
    LOGI("model_open", "lm=%s variant=%s backend=%s dim=%d layers=%d dep_q=%d context=%d slots=%d mimi=%s "
         "codebooks=%d pipeline=%d mem_used_mib=%.0f",
         o->lm_dir, lm_variant_name(m->cfg->variant), m->lm->ops->name, m->cfg->dim, m->cfg->num_layers,
         m->cfg->dep_q, m->cfg->context, m->slots, o->mimi, m->lm->ncb, st.pipeline, (double)st.mem_used / 1048576.0);
    if (o->step_delay_ms > 0)
        LOGW("step_delay", "ms=%d msg=\"debug.step_delay_ms: every engine step sleeps (a test aid)\"", o->step_delay_ms);
    return m;
fail:
    model_close(m);
    return NULL;
}

void model_close(model *m) {
    if (!m) return;
    for (int i = 0; m->s && i < m->slots; i++) {
        rec_close(&m->s[i]);
        pp_job_free(m->s[i].job);
    }
    free(m->s);
    for (int k = 0; k < LM_MAX_INFLIGHT; k++) {
        lm_frame_free(&m->frame[k]);
        free(m->gens[k]);
    }
    if (m->spm) spm_free(m->spm);
    if (m->lm) lm_backend_close(m->lm);   /* stops its codec thread first */
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

/* Engine thread: the slot's K/V and codec state reset (the backend), its
 * bookkeeping fresh; a persona (p->persona: a pp_persona of this backend)
 * is restored by a job, a few layers a chunk, between other slots' steps. */
static int m_begin(void *ctx, int slot, const sched_params *p, ms_error *err) {
    model *m = ctx;
    model_slot *s = &m->s[slot];
    rec_close(s);
    if (m->o.record_dir && m->o.record_dir[0]) rec_open(m, s, p->session_id);
    lmgen_init(&s->g, m->cfg, slot, &p->samp);
    s->frames = 0;
    int rc = lm_backend_reset_slot(m->lm, slot, err);
    if (rc == MS_OK && p->persona &&
        !(s->job = pp_job_restore(m->lm, (const pp_persona *)p->persona, &s->g, PP_JOB_RESTORE_LAYERS, err)))
        rc = err ? err->code : MS_ERR_ARG;
    return rc;
}

static int m_job(void *ctx, int slot, int *done, ms_error *err) {
    model *m = ctx;
    model_slot *s = &m->s[slot];
    if (!s->job) {
        *done = 1;
        return MS_OK;
    }
    int rc = pp_job_run(s->job, done, err);
    if (rc != MS_OK || *done) {
        pp_job_free(s->job);
        s->job = NULL;
    }
    return rc;
}

static void m_end(void *ctx, int slot) {
    model *m = ctx;
    rec_close(&m->s[slot]);
    pp_job_free(m->s[slot].job);   /* a session that left during its start-up */
    m->s[slot].job = NULL;
}

static int m_submit(void *ctx, sched_batch *b, ms_error *err) {
    model *m = ctx;
    lm_frame *f = &m->frame[b->id];
    if (m->o.step_delay_ms > 0) { /* debug.step_delay_ms: an engine slow on purpose (tests) */
        struct timespec d = {m->o.step_delay_ms / 1000, (long)(m->o.step_delay_ms % 1000) * 1000000L};
        while (nanosleep(&d, &d) != 0 && errno == EINTR) {
        }
    }
    for (int j = 0; j < b->n; j++) m->gens[b->id][j] = &m->s[b->slots[j]].g;
    f->n = b->n;
    f->slots = b->slots;
    f->gens = m->gens[b->id];
    f->pcm_in = b->pcm_in;
    return lm_frame_submit(m->lm, f, err);
}

/* Debug recording of one finished frame of slot row j (engine thread). */
static void record(model *m, const lm_frame *f, int j) {
    model_slot *s = &m->s[f->slots[j]];
    const int nu = m->lm->n_user, nout = 1 + m->cfg->dep_q;
    if (!s->rec_codes) return;
    for (int k = 0; k < nu; k++) fprintf(s->rec_codes, k ? " %d" : "%d", f->codes[(size_t)j * nu + k]);
    fputc('\n', s->rec_codes);
    fprintf(s->rec_out, "{\"step\": %llu, \"out\": ", (unsigned long long)s->frames);
    if (!f->has_out[j]) fputs("null", s->rec_out);
    else
        for (int k = 0; k < nout; k++) fprintf(s->rec_out, "%s%d", k ? ", " : "[", f->out[(size_t)j * nout + k]);
    fputs(f->has_out[j] ? "]}\n" : "}\n", s->rec_out);
}

static int m_wait(void *ctx, sched_batch *b, ms_error *err) {
    model *m = ctx;
    lm_frame *f = &m->frame[b->id];
    int rc = lm_frame_wait(m->lm, f, err);
    if (rc) return rc;
    const int nout = 1 + m->cfg->dep_q;
    for (int j = 0; j < b->n; j++) {
        record(m, f, j);
        m->s[b->slots[j]].frames++;
        b->has_pcm[j] = f->has_out[j];
        b->text[j] = f->has_out[j] ? f->out[(size_t)j * nout] : -1;
        if (f->has_out[j])
            memcpy(b->pcm_out + (size_t)j * MS_FRAME_SAMPLES, f->pcm_out + (size_t)j * MS_FRAME_SAMPLES,
                   sizeof(float) * MS_FRAME_SAMPLES);
    }
    return MS_OK;
}

sched_model model_sched(model *m) {
    return (sched_model){.ctx = m, .max_slots = m->slots, .begin = m_begin, .job = m_job, .end = m_end, .submit = m_submit,
                         .wait = m_wait};
}

const lm_backend_stats *model_open_stats(const model *m) { return &m->open_stats; }

const lm_config *model_lm_config(const model *m) { return m->cfg; }
const char *model_variant_name(const model *m) { return lm_variant_name(m->cfg->variant); }
const char *model_backend_name(const model *m) { return m->lm->ops->name; }

const char *model_piece(const model *m, int token) {
    if (!m->spm || token == MODEL_TEXT_EPAD || token == MODEL_TEXT_PAD) return NULL;
    return spm_piece(m->spm, token);
}
