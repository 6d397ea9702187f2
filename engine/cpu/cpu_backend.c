/* cpu_backend.c - the CPU reference backend (see backend.h).
 *
 * Weights: lm_model (stored precision, mapped; or opts.weights: bf16, or
 * int8 rows with float32 scales, lm.h). K/V: per slot and layer a ring of
 * `context` rows of float32 keys (after RoPE) and values (opts.kv int8:
 * int8 with a scale per head, written before the row is attended), row
 * pos % context holding absolute position pos; the query at position q sees
 * the rows of positions max(0, q - window + 1) .. q (lm_config.window:
 * context for Kyutai, context - 1 for PersonaPlex), and depformer sub-step
 * k the sub-steps max(0, k - dep_window + 1) .. k. Activations float32.
 * A step or a prefill chunk runs each matrix product once over all its rows
 * (slots, or positions of one slot), so the weights stream once per call.
 *
 * Mimi: the codec model, one mimi_stream per slot (encoder and decoder
 * state) and two batch workspaces (one for encoding, one for decoding),
 * all made at open. The frame step's stages are the dispatcher's host code
 * (lm_frame_stages, handed once); this backend only schedules them. With
 * opts.pipeline a codec thread of its own runs the encode and the decode
 * stages of the frames in flight, in order, while the engine thread runs
 * their LM steps, in order: frame t + 1 is encoded
 * and frame t - 1 decoded while frame t steps (a slot's encoder state,
 * K/V and decoder state are disjoint). The LM step of a frame runs when
 * the next frame is submitted or when it is waited for, whichever first.
 * A frame's results are handed over from the codec thread as soon as its
 * decode ends (lm_frame.on_done), without waiting for the next LM step.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "clock.h"
#include "mimi.h"
#include "kern_cpu.h"
#include "lm.h"
#include "lmgen.h"
#include "log.h"
#include "samp.h"

/* Positions of one prefill pass (bounds the scratch memory). */
#define CPU_PREFILL_CHUNK 64

/* A slot's K/V ring: float32, or (opts.kv int8) int8 with one float32
 * scale per (layer, row, head). */
typedef struct cpu_slot {
    int64_t pos;      /* next temporal position */
    float *k, *v;     /* (num_layers, context, dim) each; NULL with int8 K/V */
    int8_t *k8, *v8;  /* (num_layers, context, dim) each; int8 K/V only */
    float *ks, *vs;   /* (num_layers, context, num_heads) scales; int8 K/V only */
} cpu_slot;

/* A snapshot in the ring's own precision (restored bit for bit). */
struct lm_kv_snap {
    int P, num_layers, dim, heads;
    float *k, *v;     /* (num_layers, P, dim); NULL with int8 K/V */
    int8_t *k8, *v8;  /* (num_layers, P, dim); int8 K/V only */
    float *ks, *vs;   /* (num_layers, P, heads); int8 K/V only */
};

/* One frame in flight through the pipeline (all fields under the ctx's mu;
 * the frame's buffers belong to the stage running). */
typedef struct cpu_flight {
    lm_frame *f;
    int enc_done, lm_done, dec_done;
    int rc;                  /* first failure of any stage */
    ms_error err;
} cpu_flight;

enum { JOB_ENCODE = 0, JOB_DECODE = 1 };

typedef struct cpu_ctx {
    lm_model *m;
    kern_pool *pool;
    int nslots, maxrows;
    cpu_slot *slots;
    /* scratch, maxrows rows each */
    float *x, *xn, *qkv, *att, *o, *u, *h;   /* (rows, dim) (rows, dim) (rows, 3dim) (rows, dim) (rows, dim) (rows, 2H) (rows, H) */
    float *scores;                            /* (threads, context + LM_MAX_DEP_Q) */
    float *logits;                            /* (rows, max(text_card, card)) */
    int *samp_scratch;                        /* (max(text_card, card)) */
    int *row_slot, *row_prev;                 /* (rows) */
    int64_t *row_pos;                         /* (rows) */
    /* depformer scratch */
    float *dy, *dyn, *dqkv, *datt, *do_, *du, *dh;   /* per row, ddim-based */
    float *dk, *dv;                           /* (rows, dep_layers, dep_q, ddim); float32 K/V only */
    int8_t *dk8, *dv8;                        /* (rows, dep_layers, dep_q, ddim); int8 K/V only */
    float *dks, *dvs;                         /* (rows, dep_layers, dep_q, dep_heads); int8 K/V only */
    int kv8;                                  /* 1: K/V caches in int8 (opts.kv) */
    /* codec */
    mimi_model *mimi;                         /* NULL: opened without a codec */
    mimi_stream **streams;                    /* (nslots) */
    mimi_ws *enc_ws, *dec_ws;                 /* one per stage (both on the codec thread with the pipeline) */
    mimi_stream **enc_tab, **dec_tab;         /* (nslots) streams of one batch call */
    /* pipeline: frames in flight (submit order) and the codec thread's jobs */
    int pipeline;
    pthread_t codec_thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    lm_frame_stages stages;                   /* the frame step's stages (frame_stages, before any frame) */
    cpu_flight fl[LM_MAX_INFLIGHT];           /* under mu: ring of frames in flight */
    uint64_t fl_head, fl_tail;                /* under mu: oldest, next */
    uint64_t jobs[2 * LM_MAX_INFLIGHT];       /* under mu: ring of codec jobs: frame index * 2 + kind */
    uint64_t job_head, job_tail;              /* under mu */
    int q_stop;                               /* under mu */
    lm_backend_stats st;
    size_t snap_bytes;                        /* snapshots alive */
} cpu_ctx;

static void codec_stop(cpu_ctx *c) {
    if (!c->pipeline) return;
    pthread_mutex_lock(&c->mu);
    c->q_stop = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->codec_thread, NULL);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    c->pipeline = 0;
}

static void cpu_close(void *vctx) {
    cpu_ctx *c = vctx;
    if (!c) return;
    codec_stop(c);
    for (int i = 0; c->streams && i < c->nslots; i++) mimi_stream_free(c->streams[i]);
    free(c->streams);
    free(c->enc_tab);
    free(c->dec_tab);
    mimi_ws_free(c->enc_ws);
    mimi_ws_free(c->dec_ws);
    mimi_model_free(c->mimi);
    for (int i = 0; c->slots && i < c->nslots; i++) {
        free(c->slots[i].k);
        free(c->slots[i].v);
        free(c->slots[i].k8);
        free(c->slots[i].v8);
        free(c->slots[i].ks);
        free(c->slots[i].vs);
    }
    free(c->slots);
    float *bufs[] = {c->x, c->xn, c->qkv, c->att, c->o, c->u, c->h, c->scores, c->logits,
                     c->dy, c->dyn, c->dqkv, c->datt, c->do_, c->du, c->dh, c->dk, c->dv, c->dks, c->dvs};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    free(c->dk8);
    free(c->dv8);
    free(c->samp_scratch);
    free(c->row_slot);
    free(c->row_prev);
    free(c->row_pos);
    kern_pool_free(c->pool);
    lm_model_free(c->m);
    free(c);
}

static float *falloc(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

static void *codec_main(void *arg);

/* The codec of cpu_open: model, per-slot streams, workspaces, thread. */
static int codec_open(cpu_ctx *c, const lm_backend_opts *opts, ms_error *err) {
    if (mimi_model_load(&c->mimi, opts->mimi, opts->mimi_config, err) != MS_OK) return err ? err->code : MS_ERR_FORMAT;
    if (mimi_model_check_serving(c->mimi, err) != MS_OK) return err ? err->code : MS_ERR_UNSUPPORTED;
    c->streams = calloc((size_t)c->nslots, sizeof *c->streams);
    c->enc_tab = calloc((size_t)c->nslots, sizeof *c->enc_tab);
    c->dec_tab = calloc((size_t)c->nslots, sizeof *c->dec_tab);
    if (!c->streams || !c->enc_tab || !c->dec_tab) return ms_err_set(err, MS_ERR_NOMEM, "cpu backend: out of memory");
    for (int i = 0; i < c->nslots; i++)
        if (!(c->streams[i] = mimi_stream_create(c->mimi, err))) return err ? err->code : MS_ERR_NOMEM;
    if (!(c->enc_ws = mimi_ws_create(c->mimi, c->nslots, err)) || !(c->dec_ws = mimi_ws_create(c->mimi, c->nslots, err)))
        return err ? err->code : MS_ERR_NOMEM;
    c->st.codec_bytes = mimi_model_bytes(c->mimi) + (size_t)c->nslots * mimi_stream_bytes(c->mimi) +
                        2 * mimi_ws_bytes(c->mimi, c->nslots);
    if (opts->pipeline) {
        pthread_mutex_init(&c->mu, NULL);
        pthread_cond_init(&c->cv, NULL);
        if (pthread_create(&c->codec_thread, NULL, codec_main, c) != 0) {
            pthread_mutex_destroy(&c->mu);
            pthread_cond_destroy(&c->cv);
            return ms_err_set(err, MS_ERR_NOMEM, "cpu backend: cannot start the codec thread");
        }
        c->pipeline = 1;
    }
    c->st.pipeline = c->pipeline;
    return MS_OK;
}

/* the dtype the linear matrices run in (float schemes) */
static const char *weights_scheme(const lm_model *m) {
    switch (m->text_linear.dtype) {
    case ST_BF16: return "bf16";
    case ST_F16: return "f16";
    default: return "f32";
    }
}

static int cpu_open(void **out, const char *dir, const lm_backend_opts *opts, ms_error *err) {
    cpu_ctx *c = calloc(1, sizeof *c);
    if (!c) return ms_err_set(err, MS_ERR_NOMEM, "out of memory");
    c->m = lm_model_load_ex(dir, opts->variant, (lm_weights)opts->weights, err);
    if (!c->m) {
        free(c);
        return err ? err->code : MS_ERR_FORMAT;
    }
    const lm_config *g = &c->m->cfg;
    c->pool = kern_pool_create(opts->threads);
    c->nslots = opts->max_slots;
    c->maxrows = opts->max_slots > CPU_PREFILL_CHUNK ? opts->max_slots : CPU_PREFILL_CHUNK;
    size_t R = (size_t)c->maxrows, D = (size_t)g->dim, dd = (size_t)g->depformer_dim;
    size_t V = (size_t)(g->text_card > g->card ? g->text_card : g->card);
    c->slots = calloc((size_t)c->nslots, sizeof *c->slots);
    int ok = c->pool && c->slots;
    size_t kvn = (size_t)g->num_layers * (size_t)g->context * D;
    size_t kvs = (size_t)g->num_layers * (size_t)g->context * (size_t)g->num_heads;
    c->kv8 = opts->kv == LM_KV_INT8;
    /* bytes of one slot's ring: keys and values */
    size_t slot_bytes = c->kv8 ? 2 * (kvn + kvs * sizeof(float)) : 2 * kvn * sizeof(float);
    for (int i = 0; ok && i < c->nslots; i++) {
        cpu_slot *sl = &c->slots[i];   /* calloc: pages become resident when written */
        if (c->kv8)
            ok = (sl->k8 = calloc(kvn ? kvn : 1, 1)) && (sl->v8 = calloc(kvn ? kvn : 1, 1)) &&
                 (sl->ks = falloc(kvs)) && (sl->vs = falloc(kvs));
        else
            ok = (sl->k = falloc(kvn)) && (sl->v = falloc(kvn));
    }
    ok = ok && (c->x = falloc(R * D)) && (c->xn = falloc(R * D)) && (c->qkv = falloc(R * 3 * D)) &&
         (c->att = falloc(R * D)) && (c->o = falloc(R * D)) && (c->u = falloc(R * 2 * (size_t)g->hidden)) &&
         (c->h = falloc(R * (size_t)g->hidden)) && (c->scores = falloc((size_t)kern_pool_threads(c->pool) * ((size_t)g->context + LM_MAX_DEP_Q))) &&
         (c->logits = falloc(R * V)) && (c->samp_scratch = calloc(V, sizeof(int))) &&
         (c->row_slot = calloc(R, sizeof(int))) && (c->row_prev = calloc(R, sizeof(int))) &&
         (c->row_pos = calloc(R, sizeof(int64_t))) &&
         (c->dy = falloc(R * dd)) && (c->dyn = falloc(R * dd)) && (c->dqkv = falloc(R * 3 * dd)) &&
         (c->datt = falloc(R * dd)) && (c->do_ = falloc(R * dd)) &&
         (c->du = falloc(R * 2 * (size_t)g->dep_hidden)) && (c->dh = falloc(R * (size_t)g->dep_hidden)) &&
         (c->dk = falloc(R * (size_t)g->depformer_num_layers * LM_MAX_DEP_Q * dd)) &&
         (c->dv = falloc(R * (size_t)g->depformer_num_layers * LM_MAX_DEP_Q * dd)) &&
         (!c->kv8 || ((c->dk8 = calloc(R * (size_t)g->depformer_num_layers * LM_MAX_DEP_Q * dd, 1)) &&
                      (c->dv8 = calloc(R * (size_t)g->depformer_num_layers * LM_MAX_DEP_Q * dd, 1)) &&
                      (c->dks = falloc(R * (size_t)g->depformer_num_layers * LM_MAX_DEP_Q * g->depformer_num_heads)) &&
                      (c->dvs = falloc(R * (size_t)g->depformer_num_layers * LM_MAX_DEP_Q * g->depformer_num_heads))));
    if (!ok) {
        cpu_close(c);
        return ms_err_set(err, MS_ERR_NOMEM, "cpu backend: out of memory for %d slots (K/V %.1f MiB each)",
                          opts->max_slots, slot_bytes / 1048576.0);
    }
    c->st.weight_bytes = c->m->weight_bytes;
    c->st.kv_bytes = (size_t)c->nslots * slot_bytes;
    c->st.weights_scheme = c->m->int8 ? "int8" : weights_scheme(c->m);
    c->st.kv_scheme = c->kv8 ? "int8" : "f32";
    LOGI("cpu_backend_open", "slots=%d threads=%d weights=%s kv=%s kv_mb_per_slot=%.1f", c->nslots,
         kern_pool_threads(c->pool), c->st.weights_scheme, c->st.kv_scheme, slot_bytes / 1048576.0);
    c->st.threads = kern_pool_threads(c->pool);
    if (opts->mimi && codec_open(c, opts, err) != MS_OK) {
        cpu_close(c);
        return err ? err->code : MS_ERR_FORMAT;
    }
    *out = c;
    return MS_OK;
}

static const lm_config *cpu_config(void *vctx) { return &((cpu_ctx *)vctx)->m->cfg; }

static int cpu_reset_slot(void *vctx, int slot, ms_error *err) {
    (void)err;
    ((cpu_ctx *)vctx)->slots[slot].pos = 0;   /* stale rows are never read: see the ring rule */
    return MS_OK;
}

static int64_t cpu_pos(void *vctx, int slot) { return ((cpu_ctx *)vctx)->slots[slot].pos; }

/* x (n, dim): embeddings in; out_norm(h) out. Row r is position pos[r] of
 * slot slot[r]; rows of one slot must come in increasing position order. */
static void temporal(cpu_ctx *c, int n, const int *slot, const int64_t *pos) {
    const lm_model *m = c->m;
    const lm_config *g = &m->cfg;
    int D = g->dim, H = g->hidden, ctx = g->context, NH = g->num_heads;
    for (int l = 0; l < g->num_layers; l++) {
        const lm_layer_w *L = &m->layers[l];
        kern_rmsnorm(c->xn, c->x, L->norm1, n, D, LM_NORM_EPS);
        kern_matmul(c->qkv, c->xn, &L->attn_in, n, c->pool);
        for (int r = 0; r < n; r++) {
            float *q = c->qkv + (size_t)r * 3 * D, *k = q + D, *v = q + 2 * D;
            kern_rope(q, g->num_heads, g->head_dim, pos[r], (float)g->max_period);
            kern_rope(k, g->num_heads, g->head_dim, pos[r], (float)g->max_period);
            cpu_slot *s = &c->slots[slot[r]];
            size_t base = (size_t)l * ctx * D;
            size_t row = (size_t)(pos[r] % ctx);
            int64_t lo = pos[r] + 1 > g->window ? pos[r] + 1 - g->window : 0;   /* oldest position seen */
            if (c->kv8) {
                /* the new row quantized first, then read back like the others */
                size_t sb = (size_t)l * ctx * NH;
                kern_q8_quantize_heads(s->k8 + base + row * D, s->ks + sb + row * NH, k, NH, g->head_dim);
                kern_q8_quantize_heads(s->v8 + base + row * D, s->vs + sb + row * NH, v, NH, g->head_dim);
                kern_attend_ring_q8_pool(c->att + (size_t)r * D, q, s->k8 + base, s->ks + sb, s->v8 + base, s->vs + sb,
                                         c->scores, ctx, (int)(lo % ctx), (int)(pos[r] - lo + 1), NH, g->head_dim, D,
                                         NH, c->pool);
                continue;
            }
            memcpy(s->k + base + row * D, k, sizeof(float) * D);
            memcpy(s->v + base + row * D, v, sizeof(float) * D);
            kern_attend_ring_pool(c->att + (size_t)r * D, q, s->k + base, s->v + base, c->scores, ctx,
                                  (int)(lo % ctx), (int)(pos[r] - lo + 1), g->num_heads, g->head_dim, D, c->pool);
        }
        kern_matmul(c->o, c->att, &L->attn_out, n, c->pool);
        kern_add(c->x, c->o, n * D);
        kern_rmsnorm(c->xn, c->x, L->norm2, n, D, LM_NORM_EPS);
        kern_matmul(c->u, c->xn, &L->ffn_in, n, c->pool);
        for (int r = 0; r < n; r++) kern_silu_gate(c->h + (size_t)r * H, c->u + (size_t)r * 2 * H, H);
        kern_matmul(c->o, c->h, &L->ffn_out, n, c->pool);
        kern_add(c->x, c->o, n * D);
    }
    kern_rmsnorm(c->x, c->x, m->out_norm, n, D, LM_NORM_EPS);
}

static void embed(const lm_model *m, float *x, const int *tok) {
    const lm_config *g = &m->cfg;
    memset(x, 0, sizeof(float) * g->dim);
    for (int q = 0; q < g->n_q; q++) kern_embed_add(x, &m->emb[q], tok[1 + q]);
    kern_embed_add(x, &m->text_emb, tok[0]);
}

/* depformer sub-step k for n rows: dy in (n, ddim), logits out (n, card) */
static void dep_substep(cpu_ctx *c, int n, int k) {
    const lm_model *m = c->m;
    const lm_config *g = &m->cfg;
    int dd = g->depformer_dim, Hd = g->dep_hidden;
    size_t per_row = (size_t)g->depformer_num_layers * LM_MAX_DEP_Q * dd;
    size_t per_row_s = (size_t)g->depformer_num_layers * LM_MAX_DEP_Q * g->depformer_num_heads;
    for (int l = 0; l < g->depformer_num_layers; l++) {
        const lm_dep_layer_w *L = &m->dep_layers[l];
        kern_rmsnorm(c->dyn, c->dy, L->norm1, n, dd, LM_NORM_EPS);
        kern_matmul(c->dqkv, c->dyn, &L->attn_in[k], n, c->pool);
        for (int r = 0; r < n; r++) {
            float *q = c->dqkv + (size_t)r * 3 * dd;
            float *kc = c->dk + r * per_row + (size_t)l * LM_MAX_DEP_Q * dd;
            float *vc = c->dv + r * per_row + (size_t)l * LM_MAX_DEP_Q * dd;
            int lo = k + 1 > g->dep_window ? k + 1 - g->dep_window : 0;   /* oldest sub-step seen */
            if (c->kv8) {
                int DH = g->depformer_num_heads;
                size_t o8 = r * per_row + (size_t)l * LM_MAX_DEP_Q * dd;
                size_t os = r * per_row_s + (size_t)l * LM_MAX_DEP_Q * DH;
                kern_q8_quantize_heads(c->dk8 + o8 + (size_t)k * dd, c->dks + os + (size_t)k * DH, q + dd, DH, g->dep_head_dim);
                kern_q8_quantize_heads(c->dv8 + o8 + (size_t)k * dd, c->dvs + os + (size_t)k * DH, q + 2 * dd, DH,
                                       g->dep_head_dim);
                kern_attend_ring_q8(c->datt + (size_t)r * dd, q, c->dk8 + o8, c->dks + os, c->dv8 + o8, c->dvs + os,
                                    c->scores, LM_MAX_DEP_Q, lo, k + 1 - lo, DH, g->dep_head_dim, dd, DH);
                continue;
            }
            memcpy(kc + (size_t)k * dd, q + dd, sizeof(float) * dd);
            memcpy(vc + (size_t)k * dd, q + 2 * dd, sizeof(float) * dd);
            kern_attend(c->datt + (size_t)r * dd, q, kc + (size_t)lo * dd, vc + (size_t)lo * dd, c->scores, k + 1 - lo,
                        g->depformer_num_heads, g->dep_head_dim, dd);
        }
        kern_matmul(c->do_, c->datt, &L->attn_out[k], n, c->pool);
        kern_add(c->dy, c->do_, n * dd);
        kern_rmsnorm(c->dyn, c->dy, L->norm2, n, dd, LM_NORM_EPS);
        kern_matmul(c->du, c->dyn, &L->ffn_in[k], n, c->pool);
        for (int r = 0; r < n; r++) kern_silu_gate(c->dh + (size_t)r * Hd, c->du + (size_t)r * 2 * Hd, Hd);
        kern_matmul(c->do_, c->dh, &L->ffn_out[k], n, c->pool);
        kern_add(c->dy, c->do_, n * dd);
    }
    kern_matmul(c->logits, c->dy, &m->linears[k], n, c->pool);
}

static int cpu_step(void *vctx, lm_step_slot *slots, int n, ms_error *err) {
    (void)err;
    cpu_ctx *c = vctx;
    const lm_model *m = c->m;
    const lm_config *g = &m->cfg;
    if (n == 0) return MS_OK;
    double t0 = ms_mono_ms() / 1e3;
    int D = g->dim, dd = g->depformer_dim;
    int *sl = c->row_slot, *prev = c->row_prev;
    int64_t *ps = c->row_pos;
    for (int r = 0; r < n; r++) {
        sl[r] = slots[r].slot;
        ps[r] = c->slots[sl[r]].pos;
        embed(m, c->x + (size_t)r * D, slots[r].tokens);
    }
    temporal(c, n, sl, ps);
    kern_matmul(c->logits, c->x, &m->text_linear, n, c->pool);
    int maxdep = 0;
    for (int r = 0; r < n; r++) {
        lm_step_slot *s = &slots[r];
        const float *lg = c->logits + (size_t)r * g->text_card;
        if (s->text_logits) memcpy(s->text_logits, lg, sizeof(float) * g->text_card);
        s->out_text = samp_topk(lg, g->text_card, s->samp.text_temp, s->samp.text_topk, s->samp.seed, s->step,
                                SAMP_STREAM_TEXT, c->samp_scratch);
        prev[r] = s->target && s->provided[0] ? s->target[0] : s->out_text;
        int nd = s->dep_steps < 0 ? g->dep_q : s->dep_steps;
        if (nd > maxdep) maxdep = nd;
        for (int k = 0; k < LM_MAX_DEP_Q; k++) s->out_audio[k] = -1;
        c->slots[sl[r]].pos++;
    }
    /* depformer: all rows run each sub-step up to the largest dep_steps
     * asked for (rows past their own count are computed and dropped) */
    for (int k = 0; k < maxdep; k++) {
        kern_matmul(c->dy, c->x, &m->dep_in[k], n, c->pool);   /* reads out_norm(h), not the residual */
        for (int r = 0; r < n; r++)
            kern_embed_add(c->dy + (size_t)r * dd, k == 0 ? &m->dep_text_emb : &m->dep_emb[k - 1], prev[r]);
        dep_substep(c, n, k);
        for (int r = 0; r < n; r++) {
            lm_step_slot *s = &slots[r];
            int nd = s->dep_steps < 0 ? g->dep_q : s->dep_steps;
            if (k >= nd) continue;
            const float *lg = c->logits + (size_t)r * g->card;
            if (s->audio_logits) memcpy(s->audio_logits + (size_t)k * g->card, lg, sizeof(float) * g->card);
            s->out_audio[k] = samp_topk(lg, g->card, s->samp.audio_temp, s->samp.audio_topk, s->samp.audio_seed, s->step,
                                        SAMP_STREAM_AUDIO(k), c->samp_scratch);
            prev[r] = s->target && s->provided[1 + k] ? s->target[1 + k] : s->out_audio[k];
        }
    }
    c->st.steps += (uint64_t)n;
    c->st.step_calls++;
    c->st.step_seconds += ms_mono_ms() / 1e3 - t0;
    return MS_OK;
}

static int cpu_prefill(void *vctx, int slot, int64_t pos0, int P, const int *tokens, const float *embs,
                       ms_error *err) {
    (void)err;
    cpu_ctx *c = vctx;
    const lm_config *g = &c->m->cfg;
    int D = g->dim;
    int *sl = c->row_slot;
    int64_t *ps = c->row_pos;
    for (int p0 = 0; p0 < P; p0 += CPU_PREFILL_CHUNK) {
        int n = P - p0 < CPU_PREFILL_CHUNK ? P - p0 : CPU_PREFILL_CHUNK;
        for (int r = 0; r < n; r++) {
            sl[r] = slot;
            ps[r] = pos0 + p0 + r;
            if (tokens)
                embed(c->m, c->x + (size_t)r * D, tokens + (size_t)(p0 + r) * g->n_streams);
            else
                memcpy(c->x + (size_t)r * D, embs + (size_t)(p0 + r) * D, sizeof(float) * D);
        }
        temporal(c, n, sl, ps);
    }
    c->slots[slot].pos = pos0 + P;
    c->st.prefill_positions += (uint64_t)P;
    return MS_OK;
}

static size_t snap_bytes(const lm_kv_snap *s) {
    size_t n = (size_t)s->num_layers * s->P;
    return s->k8 ? 2 * n * ((size_t)s->dim + (size_t)s->heads * sizeof(float)) : 2 * n * s->dim * sizeof(float);
}

static void snap_free_bufs(lm_kv_snap *s) {
    free(s->k);
    free(s->v);
    free(s->k8);
    free(s->v8);
    free(s->ks);
    free(s->vs);
}

static int cpu_kv_snapshot(void *vctx, int slot, int P, lm_kv_snap **out, ms_error *err) {
    cpu_ctx *c = vctx;
    const lm_config *g = &c->m->cfg;
    lm_kv_snap *s = calloc(1, sizeof *s);
    size_t per = (size_t)P * g->dim, pers = (size_t)P * g->num_heads, L = (size_t)g->num_layers;
    int ok = s != NULL;
    if (ok && c->kv8)
        ok = (s->k8 = malloc(L * per + 1)) && (s->v8 = malloc(L * per + 1)) && (s->ks = falloc(L * pers)) &&
             (s->vs = falloc(L * pers));
    else if (ok)
        ok = (s->k = falloc(L * per)) && (s->v = falloc(L * per));
    if (!ok) {
        if (s) snap_free_bufs(s);
        free(s);
        return ms_err_set(err, MS_ERR_NOMEM, "kv_snapshot: out of memory for %d positions", P);
    }
    s->P = P;
    s->num_layers = g->num_layers;
    s->dim = g->dim;
    s->heads = g->num_heads;
    c->snap_bytes += snap_bytes(s);
    const cpu_slot *cs = &c->slots[slot];
    for (size_t l = 0; l < L; l++) {
        /* P <= context: rows 0..P-1 hold positions 0..P-1 */
        size_t base = l * g->context * g->dim, sbase = l * g->context * g->num_heads;
        if (c->kv8) {
            memcpy(s->k8 + l * per, cs->k8 + base, per);
            memcpy(s->v8 + l * per, cs->v8 + base, per);
            memcpy(s->ks + l * pers, cs->ks + sbase, sizeof(float) * pers);
            memcpy(s->vs + l * pers, cs->vs + sbase, sizeof(float) * pers);
        } else {
            memcpy(s->k + l * per, cs->k + base, sizeof(float) * per);
            memcpy(s->v + l * per, cs->v + base, sizeof(float) * per);
        }
    }
    *out = s;
    return MS_OK;
}

static int cpu_kv_restore(void *vctx, int slot, const lm_kv_snap *s, int l0, int l1, ms_error *err) {
    cpu_ctx *c = vctx;
    const lm_config *g = &c->m->cfg;
    if (s->num_layers != g->num_layers || s->dim != g->dim || s->P > g->context)
        return ms_err_set(err, MS_ERR_ARG, "kv_restore: snapshot of another model shape");
    if (!!s->k8 != c->kv8)
        return ms_err_set(err, MS_ERR_ARG, "kv_restore: snapshot of another K/V precision");
    size_t per = (size_t)s->P * g->dim, pers = (size_t)s->P * g->num_heads;
    cpu_slot *cs = &c->slots[slot];
    for (size_t l = (size_t)l0; l < (size_t)l1; l++) {
        size_t base = l * g->context * g->dim, sbase = l * g->context * g->num_heads;
        if (c->kv8) {
            memcpy(cs->k8 + base, s->k8 + l * per, per);
            memcpy(cs->v8 + base, s->v8 + l * per, per);
            memcpy(cs->ks + sbase, s->ks + l * pers, sizeof(float) * pers);
            memcpy(cs->vs + sbase, s->vs + l * pers, sizeof(float) * pers);
        } else {
            memcpy(cs->k + base, s->k + l * per, sizeof(float) * per);
            memcpy(cs->v + base, s->v + l * per, sizeof(float) * per);
        }
    }
    if (l1 == g->num_layers) cs->pos = s->P;
    return MS_OK;
}

static int cpu_kv_snap_info(void *vctx, const lm_kv_snap *s, lm_snap_info *info) {
    (void)vctx;
    info->positions = s->P;
    info->bytes = snap_bytes(s);
    info->where = LM_MEM_HOST;
    return MS_OK;
}

static int cpu_kv_snap_len(void *vctx, const lm_kv_snap *s) {
    (void)vctx;
    return s->P;
}

/* float32: copied; int8: dequantized (q * s per head) */
static int cpu_kv_snap_read(void *vctx, const lm_kv_snap *s, int layer, int which, float *dst, ms_error *err) {
    (void)vctx;
    (void)err;
    size_t n = (size_t)s->P * (size_t)s->dim;
    if (!s->k8) {
        memcpy(dst, (which ? s->v : s->k) + (size_t)layer * n, n * sizeof(float));
        return MS_OK;
    }
    const int8_t *q = (which ? s->v8 : s->k8) + (size_t)layer * n;
    const float *sc = (which ? s->vs : s->ks) + (size_t)layer * s->P * s->heads;
    int hd = s->dim / s->heads;
    for (size_t i = 0; i < n; i++) dst[i] = (float)q[i] * sc[i / (size_t)hd];
    return MS_OK;
}

static void cpu_kv_snap_free(void *vctx, lm_kv_snap *s) {
    cpu_ctx *c = vctx;
    if (!s) return;
    c->snap_bytes -= snap_bytes(s);
    snap_free_bufs(s);
    free(s);
}

/* MemAvailable of /proc/meminfo, bytes (0 when unknown). */
static size_t host_mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    fclose(f);
    return (size_t)kb * 1024;
}

static int cpu_stats(void *vctx, lm_backend_stats *st) {
    cpu_ctx *c = vctx;
    *st = c->st;
    st->snap_bytes = c->snap_bytes;
    st->where = LM_MEM_HOST;
    st->mem_used = st->weight_bytes + st->kv_bytes + st->codec_bytes + st->snap_bytes;
    st->mem_free = host_mem_available();
    return MS_OK;
}

/* ---- Mimi: the slots' streams, the context's workspaces ---- */

static int cpu_codec_books(void *vctx) {
    cpu_ctx *c = vctx;
    return c->mimi ? mimi_num_codebooks(c->mimi) : 0;
}

static int cpu_codec_reset(void *vctx, int slot, int which, ms_error *err) {
    (void)err;
    cpu_ctx *c = vctx;
    if (which & LM_CODEC_ENCODER) mimi_stream_reset_encoder(c->streams[slot]);
    if (which & LM_CODEC_DECODER) mimi_stream_reset_decoder(c->streams[slot]);
    return MS_OK;
}

/* Engine thread. */
static int cpu_mimi_encode(void *vctx, const int *slots, int n, const float *pcm, int *codes, ms_error *err) {
    cpu_ctx *c = vctx;
    for (int i = 0; i < n; i++) c->enc_tab[i] = c->streams[slots[i]];
    return mimi_encode_batch_ws(c->mimi, c->enc_ws, c->enc_tab, n, pcm, codes, err);
}

/* The engine thread, or the codec thread with the pipeline on (never both:
 * with the pipeline, decoding happens only there). */
static int cpu_mimi_decode(void *vctx, const int *slots, int n, const int *codes, float *pcm, ms_error *err) {
    cpu_ctx *c = vctx;
    for (int i = 0; i < n; i++) c->dec_tab[i] = c->streams[slots[i]];
    return mimi_decode_batch_ws(c->mimi, c->dec_ws, c->dec_tab, n, codes, pcm, err);
}

/* ---- the frame step, pipelined ---- */

/* Under mu: queue a codec job for frame index idx. */
static void job_push(cpu_ctx *c, uint64_t idx, int kind) {
    MS_ASSERT(c->job_tail - c->job_head < 2 * LM_MAX_INFLIGHT);
    c->jobs[c->job_tail++ % (2 * LM_MAX_INFLIGHT)] = idx * 2 + (uint64_t)kind;
    pthread_cond_broadcast(&c->cv);
}

/* The codec thread: encode and decode jobs in the order queued. */
static void *codec_main(void *arg) {
    cpu_ctx *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->q_stop && c->job_head == c->job_tail) pthread_cond_wait(&c->cv, &c->mu);
        if (c->job_head == c->job_tail) break;   /* stopping with nothing left */
        uint64_t job = c->jobs[c->job_head++ % (2 * LM_MAX_INFLIGHT)];
        cpu_flight *fl = &c->fl[(job / 2) % LM_MAX_INFLIGHT];
        int kind = (int)(job % 2), skip = fl->rc != MS_OK;
        pthread_mutex_unlock(&c->mu);
        ms_error e = {0};
        const lm_frame_stages *st = &c->stages;
        int rc = skip ? MS_OK : kind == JOB_ENCODE ? st->encode(st->ctx, fl->f, &e) : st->decode(st->ctx, fl->f, &e);
        /* the early hand-over: the frame's results are final (its LM step
         * ended before its decode was queued); the engine thread's wait
         * returns only after dec_done below */
        if (kind == JOB_DECODE && !skip && rc == MS_OK && fl->f->on_done) fl->f->on_done(fl->f->on_done_ud, fl->f);
        pthread_mutex_lock(&c->mu);
        if (rc != MS_OK && fl->rc == MS_OK) {
            fl->rc = rc;
            fl->err = e;
        }
        if (kind == JOB_ENCODE) fl->enc_done = 1;
        else fl->dec_done = 1;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* Engine thread: the LM step of frame index idx, once its encode is done;
 * then its decode goes to the codec thread. */
static void run_lm(cpu_ctx *c, uint64_t idx) {
    cpu_flight *fl = &c->fl[idx % LM_MAX_INFLIGHT];
    pthread_mutex_lock(&c->mu);
    while (!fl->enc_done) pthread_cond_wait(&c->cv, &c->mu);
    int skip = fl->rc != MS_OK;
    pthread_mutex_unlock(&c->mu);
    ms_error e = {0};
    int rc = skip ? MS_OK : c->stages.step(c->stages.ctx, fl->f, &e);
    pthread_mutex_lock(&c->mu);
    if (rc != MS_OK && fl->rc == MS_OK) {
        fl->rc = rc;
        fl->err = e;
    }
    fl->lm_done = 1;
    job_push(c, idx, JOB_DECODE);   /* skipped there after a failure */
    pthread_mutex_unlock(&c->mu);
}

/* Engine thread, before the first frame: the stages to run. */
static void cpu_frame_stages(void *vctx, const lm_frame_stages *st) {
    cpu_ctx *c = vctx;
    c->stages = *st;
}

/* Engine thread: synchronous without the pipeline; with it, the encode is
 * queued for the codec thread and the LM steps of the earlier frames still
 * waiting for theirs run now (they overlap this frame's encode and the
 * decode of the one before). */
static int cpu_frame_submit(void *vctx, lm_frame *f, ms_error *err) {
    cpu_ctx *c = vctx;
    const lm_frame_stages *st = &c->stages;
    c->st.frames += (uint64_t)f->n;
    if (!c->pipeline) {
        int rc = st->encode(st->ctx, f, err);
        if (rc == MS_OK) rc = st->step(st->ctx, f, err);
        return rc ? rc : st->decode(st->ctx, f, err);
    }
    pthread_mutex_lock(&c->mu);
    MS_ASSERT(c->fl_tail - c->fl_head < LM_MAX_INFLIGHT);
    uint64_t idx = c->fl_tail++;
    c->fl[idx % LM_MAX_INFLIGHT] = (cpu_flight){.f = f};
    job_push(c, idx, JOB_ENCODE);
    uint64_t first = c->fl_head;
    pthread_mutex_unlock(&c->mu);
    for (uint64_t i = first; i < idx; i++) {
        pthread_mutex_lock(&c->mu);
        int todo = !c->fl[i % LM_MAX_INFLIGHT].lm_done;
        pthread_mutex_unlock(&c->mu);
        if (todo) run_lm(c, i);
    }
    return MS_OK;
}

/* Engine thread: the oldest frame in flight, finished (its LM step run now
 * if no later submit ran it). */
static int cpu_frame_wait(void *vctx, lm_frame *f, ms_error *err) {
    cpu_ctx *c = vctx;
    if (!c->pipeline) return MS_OK;
    pthread_mutex_lock(&c->mu);
    MS_ASSERT(c->fl_head < c->fl_tail && c->fl[c->fl_head % LM_MAX_INFLIGHT].f == f);
    uint64_t idx = c->fl_head;
    cpu_flight *fl = &c->fl[idx % LM_MAX_INFLIGHT];
    int todo = !fl->lm_done;
    pthread_mutex_unlock(&c->mu);
    if (todo) run_lm(c, idx);
    pthread_mutex_lock(&c->mu);
    while (!fl->dec_done) pthread_cond_wait(&c->cv, &c->mu);
    c->fl_head++;
    int rc = fl->rc;
    if (rc && err) *err = fl->err;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

const lm_backend_ops lm_cpu_backend = {
    .name = "cpu",
    .open = cpu_open,
    .close = cpu_close,
    .config = cpu_config,
    .reset_slot = cpu_reset_slot,
    .pos = cpu_pos,
    .step = cpu_step,
    .prefill = cpu_prefill,
    .kv_snapshot = cpu_kv_snapshot,
    .kv_restore = cpu_kv_restore,
    .kv_snap_free = cpu_kv_snap_free,
    .kv_snap_len = cpu_kv_snap_len,
    .kv_snap_read = cpu_kv_snap_read,
    .kv_snap_info = cpu_kv_snap_info,
    .codec_books = cpu_codec_books,
    .codec_reset = cpu_codec_reset,
    .mimi_encode = cpu_mimi_encode,
    .mimi_decode = cpu_mimi_decode,
    .frame_stages = cpu_frame_stages,
    .frame_submit = cpu_frame_submit,
    .frame_wait = cpu_frame_wait,
    .stats = cpu_stats,
    .schemes = LM_SCHEME_W_BF16 | LM_SCHEME_W_INT8 | LM_SCHEME_KV_INT8,
};
