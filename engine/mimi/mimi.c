/* mimi.c - Mimi streams: per-session state, reset, and the batched streaming
 * encode (SEANet -> transformer -> downsample -> split RVQ) and decode (RVQ
 * sum -> upsample -> transformer -> SEANet). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mimi_int.h"

static int tstate_init(mimi_tstate *t, const mimi_config *c) {
    size_t kv = (size_t)c->num_layers * 2 * c->context * c->d_model;
    t->kv = mimi_alloc_floats(kv);
    if (t->kv) memset(t->kv, 0, (kv ? kv : 1) * sizeof(float));
    t->pos = malloc((size_t)c->context * sizeof(long));
    return t->kv && t->pos ? 0 : -1;
}

static void tstate_reset(mimi_tstate *t, const mimi_config *c) {
    t->offset = 0;
    for (int i = 0; i < c->context; i++) t->pos[i] = -1;
}

void mimi_ws_free(mimi_ws *w) {
    if (!w) return;
    free(w->act0);
    free(w->act1);
    free(w->act2);
    free(w->col);
    free(w->xb);
    free(w->pack);
    free(w->tab);
    free(w);
}

mimi_ws *mimi_ws_create(const mimi_model *m, int n, ms_error *err) {
    if (!m || n < 1 || n > MIMI_MAX_BATCH) {
        ms_err_set(err, MS_ERR_ARG, "mimi: workspace for %d streams (limit %d)", n, MIMI_MAX_BATCH);
        return NULL;
    }
    mimi_ws *w = calloc(1, sizeof *w);
    if (!w) goto nomem;
    w->m = m;
    w->act0 = mimi_alloc_floats(m->ws_act * n);
    w->act1 = mimi_alloc_floats(m->ws_act * n);
    w->act2 = mimi_alloc_floats(m->ws_act * n);
    w->col = mimi_alloc_floats(m->ws_col * n);
    w->xb = mimi_alloc_floats(m->ws_xb * n);
    w->pack = mimi_alloc_floats(MIMI_GEMM_SCRATCH);
    w->tab = malloc((size_t)n * 4 * sizeof(void *));
    if (!w->act0 || !w->act1 || !w->act2 || !w->col || !w->xb || !w->pack || !w->tab) goto nomem;
    w->cap_n = (size_t)n;
    return w;
nomem:
    mimi_ws_free(w);
    ms_err_set(err, MS_ERR_NOMEM, "mimi: out of memory for a workspace of %d streams", n);
    return NULL;
}

size_t mimi_ws_bytes(const mimi_model *m, int n) {
    return ((3 * m->ws_act + m->ws_col + m->ws_xb) * (size_t)n + MIMI_GEMM_SCRATCH) * sizeof(float) +
           (size_t)n * 4 * sizeof(void *);
}

const mimi_model *mimi_stream_model(const mimi_stream *s) { return s->m; }

mimi_stream *mimi_stream_create(const mimi_model *m, ms_error *err) {
    mimi_stream *s = calloc(1, sizeof(*s));
    if (!s) goto nomem;
    s->m = m;
    s->enc_state = calloc(m->enc_state ? m->enc_state : 1, sizeof(float));
    s->dec_state = calloc(m->dec_state ? m->dec_state : 1, sizeof(float));
    s->enc_first = calloc(1, 1);
    if (!s->enc_state || !s->dec_state || !s->enc_first) goto nomem;
    if (tstate_init(&s->enc_tr, &m->cfg) || tstate_init(&s->dec_tr, &m->cfg)) goto nomem;
    mimi_stream_reset_encoder(s);
    mimi_stream_reset_decoder(s);
    return s;
nomem:
    mimi_stream_free(s);
    ms_err_set(err, MS_ERR_NOMEM, "mimi: out of memory for a stream");
    return NULL;
}

void mimi_stream_free(mimi_stream *s) {
    if (!s) return;
    free(s->enc_state);
    free(s->dec_state);
    free(s->enc_first);
    free(s->enc_tr.kv);
    free(s->enc_tr.pos);
    free(s->dec_tr.kv);
    free(s->dec_tr.pos);
    free(s);
}

void mimi_stream_reset_encoder(mimi_stream *s) {
    memset(s->enc_state, 0, (s->m->enc_state ? s->m->enc_state : 1) * sizeof(float));
    s->enc_first[0] = 1;
    tstate_reset(&s->enc_tr, &s->m->cfg);
}

void mimi_stream_reset_decoder(mimi_stream *s) {
    memset(s->dec_state, 0, (s->m->dec_state ? s->m->dec_state : 1) * sizeof(float));
    tstate_reset(&s->dec_tr, &s->m->cfg);
}

/* Common argument checks. */
static int batch_check(const mimi_model *m, const mimi_ws *ws, mimi_stream *const *streams, int n, const void *in,
                       const void *out, ms_error *err) {
    if (!m || !ws || !streams || !in || !out || n < 1 || n > MIMI_MAX_BATCH)
        return ms_err_set(err, MS_ERR_ARG, "mimi: bad batch (n=%d, limit %d)", n, MIMI_MAX_BATCH);
    if (ws->m != m || (size_t)n > ws->cap_n)
        return ms_err_set(err, MS_ERR_ARG, "mimi: workspace of another model or for fewer than %d streams", n);
    for (int i = 0; i < n; i++)
        if (!streams[i] || streams[i]->m != m)
            return ms_err_set(err, MS_ERR_ARG, "mimi: stream %d is missing or of another model", i);
    return MS_OK;
}

/* One split-RVQ quantizer over latent (D, n): codes[s*stride] for `levels`
 * levels; r (Dq, n) and dist (bins, n) are scratch. */
static void rvq_encode(const mimi_model *m, const mimi_rvq *q, int n, const float *latent,
                       float *r, float *dist, int *codes, int code_stride, float *scratch) {
    const int D = m->cfg.dimension, Dq = m->cfg.q_dimension, bins = m->cfg.q_bins;
    mimi_gemm_panel(Dq, n, D, q->in_proj, latent, n, r, n, 0, scratch);
    for (int l = 0; l < q->levels; l++) {
        const float *cb = q->codebooks + (size_t)l * bins * Dq;
        const float *nn = q->norms + (size_t)l * bins;
        mimi_gemm_panel(bins, n, Dq, q->cb_panel + (size_t)l * mimi_panel_size(bins, Dq), r, n, dist, n, 0, scratch);
        for (int s = 0; s < n; s++) {
            int best = 0;
            float bd = INFINITY;
            for (int j = 0; j < bins; j++) {
                float d = nn[j] - 2.f * dist[(size_t)j * n + s];
                if (d < bd) {
                    bd = d;
                    best = j;
                }
            }
            codes[(size_t)s * code_stride + l] = best;
            const float *e = cb + (size_t)best * Dq;
            for (int d = 0; d < Dq; d++) r[(size_t)d * n + s] -= e[d];
        }
    }
}

int mimi_encode_batch_ws(const mimi_model *m, mimi_ws *ws, mimi_stream *const *streams, int n, const float *pcm,
                         int *codes, ms_error *err) {
    int rc = batch_check(m, ws, streams, n, pcm, codes, err);
    if (rc) return rc;
    void **tab = ws->tab;
    const mimi_config *c = &m->cfg;
    const int F = c->frame_samples, K = c->num_codebooks;
    for (size_t i = 0; i < (size_t)n * F; i++)
        if (!isfinite(pcm[i]))
            return ms_err_set(err, MS_ERR_RANGE, "mimi: non-finite sample %zu in stream %zu", i % F, i / F);
    float **st = (float **)tab;
    unsigned char **first = (unsigned char **)(tab + n);
    mimi_tstate **ts = (mimi_tstate **)(tab + 2 * n);
    for (int s = 0; s < n; s++) {
        st[s] = streams[s]->enc_state;
        first[s] = streams[s]->enc_first;
        ts[s] = &streams[s]->enc_tr;
    }
    memcpy(ws->act0, pcm, (size_t)n * F * sizeof(float));      /* (1, n*F) */
    int T = mimi_seanet_forward(&m->enc, n, F, st, ws);          /* act0 (D, n*T) */
    mimi_transformer_forward(m, &m->enc_tr, n, T, ws->act0, ts, ws);
    const float *latent = ws->act0;
    if (c->resample_stride > 1) {
        mimi_conv_forward(&m->down, n, T, ws->act0, 0, st, first, ws->act1, 0, ws);
        latent = ws->act1;                                       /* (D, n) */
    }
    rvq_encode(m, &m->rvq_first, n, latent, ws->act2, ws->col, codes, K, ws->pack);
    if (K > 1) rvq_encode(m, &m->rvq_rest, n, latent, ws->act2, ws->col, codes + 1, K, ws->pack);
    return MS_OK;
}

/* Sum of the chosen codebook vectors of one quantizer -> sum (Dq, n). */
static void rvq_sum(const mimi_model *m, const mimi_rvq *q, int n, const int *codes, int code_stride,
                    float *sum) {
    const int Dq = m->cfg.q_dimension, bins = m->cfg.q_bins;
    memset(sum, 0, (size_t)Dq * n * sizeof(float));
    for (int l = 0; l < q->levels; l++)
        for (int s = 0; s < n; s++) {
            const float *e = q->codebooks + ((size_t)l * bins + codes[(size_t)s * code_stride + l]) * Dq;
            for (int d = 0; d < Dq; d++) sum[(size_t)d * n + s] += e[d];
        }
}

int mimi_decode_batch_ws(const mimi_model *m, mimi_ws *ws, mimi_stream *const *streams, int n, const int *codes,
                         float *pcm, ms_error *err) {
    int rc = batch_check(m, ws, streams, n, codes, pcm, err);
    if (rc) return rc;
    void **tab = ws->tab;
    const mimi_config *c = &m->cfg;
    const int F = c->frame_samples, K = c->num_codebooks, D = c->dimension, Dq = c->q_dimension;
    for (size_t i = 0; i < (size_t)n * K; i++)
        if (codes[i] < 0 || codes[i] >= c->q_bins)
            return ms_err_set(err, MS_ERR_RANGE, "mimi: code %d (stream %zu, codebook %zu) outside [0, %d)",
                              codes[i], i / K, i % K, c->q_bins);
    float **st = (float **)tab;
    mimi_tstate **ts = (mimi_tstate **)(tab + 2 * n);
    for (int s = 0; s < n; s++) {
        st[s] = streams[s]->dec_state;
        ts[s] = &streams[s]->dec_tr;
    }
    float *sum = ws->col;                                        /* (Dq, n) x 2 */
    rvq_sum(m, &m->rvq_first, n, codes, K, sum);
    mimi_gemm_panel(D, n, Dq, m->rvq_first.out_proj, sum, n, ws->act0, n, 0, ws->pack);
    if (K > 1) {
        rvq_sum(m, &m->rvq_rest, n, codes + 1, K, sum);
        mimi_gemm_panel(D, n, Dq, m->rvq_rest.out_proj, sum, n, ws->act0, n, 1, ws->pack);
    }
    int T = 1;
    if (c->resample_stride > 1) {
        mimi_conv_forward(&m->up, n, 1, ws->act0, 0, st, NULL, ws->act1, 0, ws);
        float *t = ws->act0;
        ws->act0 = ws->act1;
        ws->act1 = t;
        T = c->resample_stride;
    }
    mimi_transformer_forward(m, &m->dec_tr, n, T, ws->act0, ts, ws);
    T = mimi_seanet_forward(&m->dec, n, T, st, ws);
    MS_ASSERT(T == F);
    memcpy(pcm, ws->act0, (size_t)n * F * sizeof(float));
    return MS_OK;
}

/* The convenience forms: a workspace for the call (allocates: tools and
 * tests, not the serving path). */
static mimi_ws *call_ws(const mimi_model *m, int n, ms_error *err) {
    if (!m || n < 1 || n > MIMI_MAX_BATCH) {
        ms_err_set(err, MS_ERR_ARG, "mimi: bad batch (n=%d, limit %d)", n, MIMI_MAX_BATCH);
        return NULL;
    }
    return mimi_ws_create(m, n, err);
}

int mimi_encode_batch(const mimi_model *m, mimi_stream *const *streams, int n, const float *pcm, int *codes,
                      ms_error *err) {
    mimi_ws *ws = call_ws(m, n, err);
    if (!ws) return err ? err->code : MS_ERR_ARG;
    int rc = mimi_encode_batch_ws(m, ws, streams, n, pcm, codes, err);
    mimi_ws_free(ws);
    return rc;
}

int mimi_decode_batch(const mimi_model *m, mimi_stream *const *streams, int n, const int *codes, float *pcm,
                      ms_error *err) {
    mimi_ws *ws = call_ws(m, n, err);
    if (!ws) return err ? err->code : MS_ERR_ARG;
    int rc = mimi_decode_batch_ws(m, ws, streams, n, codes, pcm, err);
    mimi_ws_free(ws);
    return rc;
}

size_t mimi_stream_bytes(const mimi_model *m) {
    const mimi_config *c = &m->cfg;
    size_t tr = (size_t)c->num_layers * 2 * c->context * c->d_model * sizeof(float) + (size_t)c->context * sizeof(long);
    return sizeof(mimi_stream) + (m->enc_state + m->dec_state) * sizeof(float) + 1 + 2 * tr;
}
