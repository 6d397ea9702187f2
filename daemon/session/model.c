/* model.c - LM + Mimi + tokenizer as one sched_model. See model.h. */
#include "model.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "clock.h"
#include "cu_plan.h"
#include "lm.h"
#include "job.h"
#include "lmgen.h"
#include "log.h"
#include "plugin.h"
#include "spm.h"
#include "voice.h"

#define GIB_F (1024.0 * 1024.0 * 1024.0)
/* The memory plan of a plugin backend with n slots at the model's context,
 * asked as the CUDA backend asks it at open (cuda/cu_backend.c: every slot
 * in the largest bucket, bf16 weights, Mimi on the device unless
 * cuda.codec = host, lm_gpu_opts_get): the figures the daemon logs and
 * quotes agree with the backend's own check; the 8-bit schemes as
 * configured, a q8 checkpoint under engine.weights = stored counted as
 * bf16: an over-count. */
#define PLAN_REQ(o, n)                                                                                    \
    ((cu_plan_req){.slots = (n), .max_bucket = (n), .weight_bytes_per_el = 2, .codec = plan_codec(o),     \
                   .w8 = (o)->weights == LM_WEIGHTS_INT8, .kv8 = (o)->kv == LM_KV_INT8})
static int plan_codec(const model_opts *o) {
    lm_gpu_opts go;
    lm_gpu_opts_get(&o->cuda, &go);
    return !go.codec_host;
}

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
    int slots;              /* session slots: backend slots 0 .. slots - 1 */
    /* personas (PersonaPlex): prime slots are backend slots slots .. slots + prime_slots - 1 */
    int prime_slots;
    mimi_model *host_mimi;  /* a host copy of the codec for voice files */
    spm_enc *enc;           /* text -> ids for role prompts */
    int silence[PP_SIDE_CODEBOOKS], sine[PP_SIDE_CODEBOOKS];
    char id[512];           /* the checkpoint, for cache keys */
    pthread_mutex_t mu;     /* guards the three queues below */
    model_prime *todo, *todo_tail;   /* submitted, not started */
    model_prime *done, *done_tail;   /* finished, not polled */
    model_snap *frees;               /* snapshots to free */
    /* engine thread: the prime running on each prime slot */
    model_prime **run;      /* (prime_slots) */
    pjob **pj;              /* (prime_slots) */
    double *run_t0;         /* (prime_slots) ms */
    int next_prime;
    model_slot *s;          /* (slots) */
    lm_backend_stats open_stats;   /* the backend's figures once open (loop thread reads them) */
    /* each scheduler batch's rows' bookkeeping, by batch id (engine thread) */
    lmgen_slot **gens[LM_MAX_INFLIGHT];   /* (slots) */
};

static void rec_close(model_slot *s);

/* Open what personas need (PersonaPlex): a host copy of the codec (voice
 * files are encoded on a worker thread, the backend's codec belongs to
 * the engine), its SILENCE/SINE frames, the text encoder, the prime
 * slots' state. */
static int model_personas_open(model *m, ms_error *err) {
    int rc = mimi_model_load(&m->host_mimi, m->o.mimi, m->o.mimi_config, err);
    if (rc != MS_OK) return rc;
    int released = 0;
    if ((rc = pp_side_tokens(m->host_mimi, m->silence, m->sine, &released, err)) != MS_OK) return rc;
    if (m->o.tokenizer && m->o.tokenizer[0] && !(m->enc = spm_enc_load(m->o.tokenizer, err)))
        return err ? err->code : MS_ERR_FORMAT;
    if (m->enc && spm_enc_size(m->enc) != m->cfg->text_card)
        return ms_err_set(err, MS_ERR_FORMAT, "model: tokenizer %s has %d pieces, the LM's text_card is %d",
                          m->o.tokenizer, spm_enc_size(m->enc), m->cfg->text_card);
    size_t n = (size_t)(m->prime_slots > 0 ? m->prime_slots : 1);
    m->run = calloc(n, sizeof *m->run);
    m->pj = calloc(n, sizeof *m->pj);
    m->run_t0 = calloc(n, sizeof *m->run_t0);
    if (!m->run || !m->pj || !m->run_t0) return ms_err_set(err, MS_ERR_NOMEM, "model: out of memory");
    LOGI("personas_codec", "side_tokens=%s host_mimi_mib=%.1f silence=%d,%d,%d,%d,%d,%d,%d,%d",
         released ? "released" : "encoded", (double)mimi_model_bytes(m->host_mimi) / 1048576.0, m->silence[0],
         m->silence[1], m->silence[2], m->silence[3], m->silence[4], m->silence[5], m->silence[6], m->silence[7]);
    return MS_OK;
}

/* Probe text of the CUDA plugin, bounded and terminated whatever the
 * plugin wrote. Returns its device count (<= 0: none usable). */
static int probe_plugin(const moshid_plugin *p, char *what, size_t len) {
    what[0] = '\0';
    if (!p->probe) {
        snprintf(what, len, "the plugin has no probe function");
        return -1;
    }
    int n = p->probe(what, len);
    what[len - 1] = '\0';
    if (!what[0]) snprintf(what, len, "%s", n > 0 ? "(no description)" : "no usable device");
    return n;
}

/* The backend engine.backend asks for (loop thread, at start-up):
 *   cpu   the CPU backend;
 *   cuda  the CUDA plugin's table, or an error naming why not (the plugin
 *         cannot load, carries no table, has a table missing entries, or
 *         its probe reports no usable device: the probe's text);
 *   auto  the plugin's table when it loads, carries a complete table and
 *         its probe reports a usable device, else the CPU; the choice and
 *         why are logged (backend_auto).
 * *plugin is set when the table is the plugin's (its open's failure is then
 * explained by model_open). */
static const lm_backend_ops *pick_backend(const model_opts *o, int *plugin, ms_error *err) {
    *plugin = 0;
    if (strcmp(o->backend, "cpu") == 0) return &lm_cpu_backend;
    int demand = strcmp(o->backend, "cuda") == 0;
    char why[MS_ERR_MSG_MAX];
    ms_error perr = {0};
    const moshid_plugin *p = plugin_load("cuda", &perr);
    if (!p) {
        snprintf(why, sizeof why, "%s", perr.msg);
    } else if (!p->backend) {
        snprintf(why, sizeof why, "the CUDA plugin (%s) carries no backend table yet", p->build ? p->build : "?");
    } else {
        /* plugin_load checked the ABI number, which covers the table's shape
         * (MOSHID_PLUGIN_ABI moves with LM_BACKEND_VERSION) */
        const lm_backend_ops *ops = p->backend;
        char what[512];
        int n = probe_plugin(p, what, sizeof what);
        if (!ops->name || !ops->open || !ops->close || !ops->config || !ops->step)
            snprintf(why, sizeof why, "the CUDA plugin's backend table lacks an entry (name, open, close, config, step)");
        else if (n <= 0)
            snprintf(why, sizeof why, "no usable CUDA device: %s", what);
        else {
            LOGI(demand ? "backend" : "backend_auto", "chosen=%s devices=%d gpu=%d probe=\"%s\"", ops->name, n, o->gpu,
                 what);
            *plugin = 1;
            return ops;
        }
    }
    if (demand) {
        ms_err_set(err, p ? MS_ERR_UNSUPPORTED : (perr.code ? perr.code : MS_ERR_NOTFOUND),
                   "engine.backend = cuda: %s", why);
        return NULL;
    }
    LOGI("backend_auto", "chosen=cpu reason=\"%s\"", why);
    return &lm_cpu_backend;
}

/* After a plugin backend's open failed: the memory plan of what was asked
 * (cuda/cu_plan.h) appended to err, so that "out of memory" says how much
 * the configured slots at the configured context need. The configuration
 * is read again here (the backend's own copy is gone); nothing is added
 * when it cannot be read. */
static void explain_open_failure(const model_opts *o, int slots, ms_error *err) {
    if (!err || (err->code != MS_ERR_NOMEM && err->code != MS_ERR_DEVICE)) return;
    char path[4096];
    if (snprintf(path, sizeof path, "%s/config.json", o->lm_dir) >= (int)sizeof path) return;
    lm_config c;
    ms_error e = {0};
    lm_variant v = o->variant;
    if (lm_config_load(&c, path, &e) != MS_OK || (v == LM_VARIANT_AUTO && model_probe_variant(o->lm_dir, v, &v, &e)))
        return;
    if (v == LM_VARIANT_PERSONAPLEX) c.dep_q = LM_PERSONAPLEX_DEP_Q;
    c.variant = v;
    cu_plan_req r = PLAN_REQ(o, slots);
    cu_plan p;
    if (lm_config_finish(&c, &e) != MS_OK || cu_plan_compute(&c, &r, &p) != 0) return;
    char line[400];
    LOGW("cuda_plan", "slots=%d context=%d plan=\"%s\"", slots, c.context, cu_plan_describe(&p, slots, line, sizeof line));
    size_t used = strlen(err->msg);
    const char *pp = v == LM_VARIANT_PERSONAPLEX ? " --personaplex" : "";
    if (strstr(err->msg, "K/V ("))   /* the backend's message already holds its plan (cu_plan_describe) */
        snprintf(err->msg + used, sizeof err->msg - used, " (moshid-plan --config %s%s --gpu-gb N says what fits)",
                 path, pp);
    else
        snprintf(err->msg + used, sizeof err->msg - used,
                 " (the plan for %d slots at context %d needs %.1f GiB, %.2f GiB of K/V a slot; "
                 "moshid-plan --config %s%s --slots %d --gpu-gb N says what fits)",
                 slots, c.context, (double)p.total / GIB_F, (double)p.kv_per_slot / GIB_F, path, pp, slots);
}

model *model_open(const model_opts *o, ms_error *err) {
    model *m = calloc(1, sizeof *m);
    if (!m) { ms_err_set(err, MS_ERR_NOMEM, "model: out of memory"); return NULL; }
    m->o = *o;
    m->slots = o->slots;
    pthread_mutex_init(&m->mu, NULL);
    int plugin = 0;
    const lm_backend_ops *ops = pick_backend(o, &plugin, err);
    if (!ops) goto fail;
    /* prime slots only for PersonaPlex: the variant first (mapping the
     * weights once more costs a header parse) */
    lm_variant v = o->variant;
    if (o->prime_slots > 0 && v == LM_VARIANT_AUTO && model_probe_variant(o->lm_dir, v, &v, err) != MS_OK) goto fail;
    m->prime_slots = v == LM_VARIANT_PERSONAPLEX && o->prime_slots > 0 ? o->prime_slots : 0;
    if (o->slots + m->prime_slots > LM_MAX_SLOTS) { /* the backend's limit comes first */
        LOGW("prime_slots", "wanted=%d kept=%d msg=\"sessions.max + personas.max_concurrent_primes exceed %d slots\"",
             m->prime_slots, LM_MAX_SLOTS - o->slots, LM_MAX_SLOTS);
        m->prime_slots = LM_MAX_SLOTS - o->slots;
    }
    lm_backend_opts bo = {.max_slots = o->slots + m->prime_slots, .threads = o->threads, .variant = o->variant,
                          .device = o->gpu, .mimi = o->mimi, .mimi_config = o->mimi_config, .pipeline = o->pipeline,
                          .weights = o->weights, .kv = o->kv, .gpu = &o->cuda};
    if (!(m->lm = lm_backend_open(ops, o->lm_dir, &bo, err))) {
        /* a device was found and chosen: no silent fall back to the CPU,
         * which would serve the configured sessions far below real time */
        if (plugin) {
            ms_err_prefix(err, "backend %s on GPU %d", ops->name, o->gpu);
            explain_open_failure(o, bo.max_slots, err);
        }
        goto fail;
    }
    m->cfg = &m->lm->cfg;
    if (plugin) {
        /* the planner's view of what was opened, beside what the backend
         * reports (model_open below): a gap between them is the planner's
         * estimates to correct (cuda/cu_plan.c) */
        cu_plan_req r = PLAN_REQ(o, bo.max_slots);
        cu_plan p;
        char line[400];
        if (cu_plan_compute(m->cfg, &r, &p) == 0)
            LOGI("cuda_plan", "slots=%d context=%d plan=\"%s\"", bo.max_slots, m->cfg->context,
                 cu_plan_describe(&p, bo.max_slots, line, sizeof line));
    }
    snprintf(m->id, sizeof m->id, "%s variant=%s", o->lm_dir, lm_variant_name(m->cfg->variant));
    if (m->cfg->variant != LM_VARIANT_PERSONAPLEX) m->prime_slots = 0;
    if (m->cfg->variant == LM_VARIANT_PERSONAPLEX && model_personas_open(m, err) != MS_OK) goto fail;
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
        if (!(m->gens[k] = calloc((size_t)m->slots, sizeof *m->gens[k]))) {
            ms_err_set(err, MS_ERR_NOMEM, "model: out of memory");
            goto fail;
        }
    }
    lm_backend_stats_get(m->lm, &m->open_stats);
    const lm_backend_stats st = m->open_stats;
    LOGI("model_open", "lm=%s variant=%s backend=%s weights=%s kv=%s dim=%d layers=%d dep_q=%d context=%d slots=%d "
         "prime_slots=%d mimi=%s codebooks=%d pipeline=%d mem_used_mib=%.0f",
         o->lm_dir, lm_variant_name(m->cfg->variant), m->lm->ops->name,
         st.weights_scheme ? st.weights_scheme : "unknown", st.kv_scheme ? st.kv_scheme : "unknown", m->cfg->dim,
         m->cfg->num_layers, m->cfg->dep_q, m->cfg->context, m->slots, m->prime_slots, o->mimi, m->lm->ncb,
         st.pipeline, (double)st.mem_used / 1048576.0);
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
    for (int k = 0; k < LM_MAX_INFLIGHT; k++) free(m->gens[k]);
    if (m->spm) spm_free(m->spm);
    /* personas: the engine thread is gone; what it held is freed here */
    for (int k = 0; m->pj && k < m->prime_slots; k++) pjob_free(m->pj[k]);
    for (model_prime *t = m->done; t; t = t->next)
        if (t->snap) {
            pp_persona_close(m->lm, &t->snap->p);
            free(t->snap);
            t->snap = NULL;
        }
    for (model_snap *f = m->frees, *n; f; f = n) {
        n = f->next;
        pp_persona_close(m->lm, &f->p);
        free(f);
    }
    free(m->run);
    free(m->pj);
    free(m->run_t0);
    spm_enc_free(m->enc);
    mimi_model_free(m->host_mimi);
    if (m->lm) lm_backend_close(m->lm);   /* stops its codec thread first */
    pthread_mutex_destroy(&m->mu);
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

/* debug.step_delay_ms: an engine slow on purpose (tests): every frame
 * step and every prime chunk sleeps that long. Engine thread. */
static void debug_delay(const model *m) {
    if (m->o.step_delay_ms <= 0) return;
    struct timespec d = {m->o.step_delay_ms / 1000, (long)(m->o.step_delay_ms % 1000) * 1000000L};
    while (nanosleep(&d, &d) != 0 && errno == EINTR) {
    }
}

/* The scheduler's batch frames are the backend's frame steps: sized by
 * the dispatcher (loop thread, sched_create / sched_free). */
static int m_frame_alloc(void *ctx, lm_frame *f, int max_n, ms_error *err) {
    model *m = ctx;
    return lm_frame_alloc(m->lm, f, max_n, err);
}

static void m_frame_free(void *ctx, lm_frame *f) {
    (void)ctx;
    lm_frame_free(f);
}

/* lm_frame.on_done: the backend's thread that finished the frame (the CPU
 * backend's codec thread with the pipeline), before m_wait's
 * lm_frame_wait returns: the batch (its frame holds the results) handed
 * over to the sessions at once (the early hand-over). */
static void m_frame_done(void *ud, const lm_frame *f) {
    (void)f;
    sched_batch *b = ud;
    b->handover(b);
}

static int m_submit(void *ctx, sched_batch *b, ms_error *err) {
    model *m = ctx;
    lm_frame *f = &b->f;
    debug_delay(m);
    for (int j = 0; j < f->n; j++) m->gens[b->id][j] = &m->s[f->slots[j]].g;
    f->gens = m->gens[b->id];
    f->on_done = b->handover ? m_frame_done : NULL;
    f->on_done_ud = b;
    return lm_frame_submit(m->lm, f, err);
}

/* Debug recording of one finished frame of slot row j (engine thread). */
static void record(model *m, const lm_frame *f, int j) {
    model_slot *s = &m->s[f->slots[j]];
    const int nu = m->lm->n_user, nout = f->nout;
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
    lm_frame *f = &b->f;
    int rc = lm_frame_wait(m->lm, f, err);
    if (rc) return rc;
    for (int j = 0; j < f->n; j++) {
        record(m, f, j);
        m->s[f->slots[j]].frames++;
    }
    return MS_OK;
}

/* ---- personas: primes on the prime slots, snapshot frees ---------------- */

/* Engine thread: prime slot k's task is over (t->rc says how): to the
 * done queue. */
static void prime_finish(model *m, int k) {
    model_prime *t = m->run[k];
    t->chunks = m->pj[k] ? pjob_chunks(m->pj[k]) : 0;
    t->ms = ms_mono_ms() - m->run_t0[k];
    pjob_free(m->pj[k]);
    m->pj[k] = NULL;
    m->run[k] = NULL;
    t->next = NULL;
    pthread_mutex_lock(&m->mu);
    if (m->done_tail) m->done_tail->next = t;
    else m->done = t;
    m->done_tail = t;
    pthread_mutex_unlock(&m->mu);
}

/* Engine thread: the background work (sched_model.bg): free the snapshots
 * given back, start the primes submitted, run one chunk of one running
 * prime (round robin over the prime slots). */
static int m_bg(void *ctx) {
    model *m = ctx;
    pthread_mutex_lock(&m->mu);
    model_snap *frees = m->frees;
    model_prime *todo = m->todo;
    m->frees = NULL;
    m->todo = m->todo_tail = NULL;
    pthread_mutex_unlock(&m->mu);
    int did = 0;
    for (model_snap *f = frees, *n; f; f = n) {
        n = f->next;
        pp_persona_close(m->lm, &f->p);
        free(f);
        did = 1;
    }
    for (model_prime *t = todo, *n; t; t = n) {
        n = t->next;
        int k = t->prime_slot;
        MS_ASSERT(k >= 0 && k < m->prime_slots && !m->run[k]);
        m->run[k] = t;
        m->run_t0[k] = ms_mono_ms();
        t->rc = MS_OK;
        t->snap = NULL;
        memset(&t->err, 0, sizeof t->err);
        if (!(m->pj[k] = pjob_create(m->lm, m->slots + k, &t->prompt, m->o.prime_chunk, &t->err))) {
            t->rc = t->err.code ? t->err.code : MS_ERR_ARG;
            prime_finish(m, k);
        }
        did = 1;
    }
    for (int i = 0; i < m->prime_slots; i++) {
        int k = (m->next_prime + i) % m->prime_slots;
        if (!m->run[k]) continue;
        m->next_prime = (k + 1) % m->prime_slots;
        model_prime *t = m->run[k];
        int done = 0;
        debug_delay(m);
        int rc = pjob_run(m->pj[k], &done, &t->err);
        if (rc != MS_OK) {
            t->rc = rc;
            prime_finish(m, k);
        } else if (done) {
            pp_persona *p = pjob_take(m->pj[k]);
            model_snap *s = calloc(1, sizeof *s);
            lm_snap_info info = {0};
            if (!s || lm_backend_kv_snap_info(m->lm, p->kv, &info) != MS_OK) {
                pp_persona_close(m->lm, p);
                free(s);
                t->rc = ms_err_set(&t->err, MS_ERR_NOMEM, "prime: out of memory for the snapshot");
            } else {
                s->p = *p;
                s->bytes = info.bytes;
                s->positions = info.positions;
                t->snap = s;
            }
            free(p);
            prime_finish(m, k);
        }
        return 1;
    }
    return did;
}

int model_prime_slots(const model *m) { return m->prime_slots; }

void model_prime_submit(model *m, model_prime *t) {
    MS_ASSERT(t->prime_slot >= 0 && t->prime_slot < m->prime_slots);
    t->next = NULL;
    pthread_mutex_lock(&m->mu);
    if (m->todo_tail) m->todo_tail->next = t;
    else m->todo = t;
    m->todo_tail = t;
    pthread_mutex_unlock(&m->mu);
}

model_prime *model_prime_poll(model *m) {
    pthread_mutex_lock(&m->mu);
    model_prime *t = m->done;
    if (t) {
        m->done = t->next;
        if (!m->done) m->done_tail = NULL;
        t->next = NULL;
    }
    pthread_mutex_unlock(&m->mu);
    return t;
}

void model_prime_abort(model *m) {
    for (int k = 0; k < m->prime_slots; k++)
        if (m->run[k]) {
            m->run[k]->rc = ms_err_set(&m->run[k]->err, MS_ERR_STATE, "the engine stopped");
            prime_finish(m, k);
        }
    pthread_mutex_lock(&m->mu);
    model_prime *t = m->todo;
    m->todo = m->todo_tail = NULL;
    pthread_mutex_unlock(&m->mu);
    for (model_prime *n; t; t = n) {
        n = t->next;
        int k = t->prime_slot;
        m->run[k] = t;
        m->run_t0[k] = ms_mono_ms();
        t->snap = NULL;
        t->rc = ms_err_set(&t->err, MS_ERR_STATE, "the engine stopped");
        prime_finish(m, k);
    }
}

void model_snap_free(model *m, model_snap *s) {
    if (!s) return;
    pthread_mutex_lock(&m->mu);
    s->next = m->frees;
    m->frees = s;
    pthread_mutex_unlock(&m->mu);
}

const mimi_model *model_mimi(const model *m) { return m->host_mimi; }
const spm_enc *model_spm_enc(const model *m) { return m->enc; }
const char *model_id(const model *m) { return m->id; }

void model_side_tokens(const model *m, int silence[PP_SIDE_CODEBOOKS], int sine[PP_SIDE_CODEBOOKS]) {
    memcpy(silence, m->silence, sizeof m->silence);
    memcpy(sine, m->sine, sizeof m->sine);
}

int model_probe_variant(const char *lm_dir, lm_variant v, lm_variant *out, ms_error *err) {
    if (v != LM_VARIANT_AUTO) {
        *out = v;
        return MS_OK;
    }
    lm_model *lm = lm_model_load(lm_dir, LM_VARIANT_AUTO, err);
    if (!lm) return err && err->code ? err->code : MS_ERR_FORMAT;
    *out = lm->cfg.variant;
    lm_model_free(lm);
    return MS_OK;
}

sched_model model_sched(model *m) {
    return (sched_model){.ctx = m, .max_slots = m->slots, .begin = m_begin, .job = m_job, .end = m_end,
                         .frame_alloc = m_frame_alloc, .frame_free = m_frame_free, .submit = m_submit,
                         .wait = m_wait, .bg = m->prime_slots > 0 ? m_bg : NULL};
}

const lm_backend_stats *model_open_stats(const model *m) { return &m->open_stats; }

const lm_config *model_lm_config(const model *m) { return m->cfg; }
const char *model_variant_name(const model *m) { return lm_variant_name(m->cfg->variant); }
const char *model_backend_name(const model *m) { return m->lm->ops->name; }

const char *model_piece(const model *m, int token) {
    if (!m->spm || token == LM_TEXT_EPAD_ID || token == LM_TEXT_PAD_ID) return NULL;
    return spm_piece(m->spm, token);
}
