/* cu_mimi.c - the Mimi codec on the device (cu_mimi.h): weights uploaded
 * from the CPU model, per-slot state slabs, and the encode and decode of a
 * batch as the CPU codec's sequence of layers (engine/mimi/mimi.c), each
 * layer one or two launches of cuda/cu_mimi_kern.cu.
 *
 * Weights: the CPU model keeps most matrices re-packed for its GEMM (panel
 * or blocked layouts, the plain row-major array freed). Rather than know
 * those layouts here, each matrix is read back through the CPU's own
 * product with identity columns: A . I = A exactly (every sum has one
 * non-zero term, x * 1 and + 0 are exact), so the upload is the CPU's
 * weights bit for bit whatever its packing. It costs M * K * K
 * multiply-adds on the CPU at open (a few seconds for the official Mimi;
 * 18 s with the random model's generation on the emulator's 2-core host).
 *
 * Device layout (all float32):
 *  - weights: one cudaMalloc per tensor, freed at close;
 *  - conv state slabs: enc (max_slots, enc_state) and dec (max_slots,
 *    dec_state), the CPU's per-stream offsets (mimi_conv.state_off) inside;
 *  - K/V slabs: enc and dec, per slot (layers, 2, context, d_model), as the
 *    CPU's mimi_tstate.kv; a ring row's position is implied by the slot's
 *    step count (cu_mimi_kern.cu's header), kept on the host with the
 *    downsample's first-frame flag;
 *  - workspaces act0, act1, act2, col, xb for max_slots items, sized by
 *    walking the layers (plan below);
 *  - an upload block per call (slot indices, step counts, first flags,
 *    then the PCM or the codes), pinned on the host, one copy each way.
 *
 * Graphs: at open, one CUDA graph per batch-size bucket (1, 2, 4, ... then
 * max_slots) for the encode and one for the decode, captured over those
 * fixed buffers; a call of n items fills its upload block, pads the rows
 * [n, B) of its bucket onto a scratch slot (slot max_slots of every slab,
 * zero input, step 0; their results are never read, and each item's
 * arithmetic does not depend on the others, so padding changes no real
 * row's bits; only the first padding row stores the scratch slot's state,
 * the kernels' rule in cu_mimi_kern.cu's header) and replays the graph: per call one upload, one D2D copy of
 * the PCM (encode), one replay, one download. MOSHID_CU_MIMI_GRAPHS=0
 * enqueues the same launches per call instead.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cu_check.h"
#include "cu_kern.h"
#include "cu_mimi.h"
#include "mimi_int.h"

/* Identity columns per CPU product when reading weights back. */
#define CU_MIMI_PROBE_COLS 64
/* Batch-size buckets (1, 2, 4, ... below max_slots, then max_slots). */
#define CU_MIMI_MAX_BUCKETS 16

typedef struct gconv {
    const mimi_conv *c;
    float *w, *b;
} gconv;

typedef struct gop {
    gconv a, b;
} gop;

typedef struct glayer {
    float *n1w, *n1b, *n2w, *n2b, *in, *out, *l1, *l2, *ls1, *ls2;
} glayer;

typedef struct grvq {
    int levels;
    float *in, *out, *cb, *norms;
} grvq;

/* Byte offsets in an upload block. */
typedef struct up_layout {
    size_t slot, first, off, payload, total;
} up_layout;

/* One side of the codec (encode, decode): its own stream and workspaces,
 * so a decode may run on the device while the next encode and LM step do.
 * Decode calls may be in flight CU_MIMI_TICKETS deep (submit, then
 * finish): each ticket has its own upload/download block and event. */
typedef struct side {
    cudaStream_t st;
    float *act0, *act1, *act2, *col, *xb;
    unsigned char *dup[CU_MIMI_TICKETS], *hup[CU_MIMI_TICKETS];
    cudaEvent_t done[CU_MIMI_TICKETS];
    int busy[CU_MIMI_TICKETS];    /* submitted, not finished */
    int n[CU_MIMI_TICKETS];       /* items of the ticket's decode */
} side;

struct cu_mimi {
    const mimi_model *m;
    int nslots;
    int device;                   /* current at open; made current by every entry (gm_bind) */
    side es, ds;                  /* encode, decode */
    gop *enc, *dec;
    glayer *enc_tr, *dec_tr;
    gconv down, up;
    grvq q[2];                    /* rvq_first, rvq_rest */
    float *freq;
    float *enc_state, *dec_state; /* (nslots, m->enc_state / dec_state) */
    float *enc_kv, *dec_kv;       /* (nslots, kv_slot) */
    size_t kv_slot;
    int64_t *enc_steps, *dec_steps;   /* host: steps since reset */
    unsigned char *first;         /* host: downsample not yet initialised */
    unsigned char *mark;          /* host: (nslots) distinctness check */
    size_t ws_act, ws_col, ws_xb; /* floats per item */
    up_layout lay;
    /* CUDA graphs, one per bucket and side, over the buffers above (fixed
     * addresses); a call of n items replays its bucket's graph with the
     * rows past n padded onto the scratch slot (slot nslots) */
    int nbuckets, bucket[CU_MIMI_MAX_BUCKETS], graphs;
    cudaGraphExec_t eg[CU_MIMI_MAX_BUCKETS], dg[CU_MIMI_MAX_BUCKETS];
    float *dec_out[CU_MIMI_MAX_BUCKETS];   /* where each bucket's decode leaves its PCM */
    void **allocs;
    size_t nallocs, cap;
    size_t bytes;
};

static size_t al16(size_t n) { return (n + 15) & ~(size_t)15; }

static int capture(cu_mimi *g, ms_error *err);
static int decode_enqueue(cu_mimi *g, int n, float **pcm_out, ms_error *err);

static int dmalloc(cu_mimi *g, float **p, size_t nfloats, ms_error *err) {
    if (g->nallocs == g->cap) {
        size_t nc = g->cap ? 2 * g->cap : 64;
        void **na = realloc(g->allocs, nc * sizeof *na);
        if (!na) return ms_err_set(err, MS_ERR_NOMEM, "cuda mimi: out of host memory");
        g->allocs = na;
        g->cap = nc;
    }
    size_t b = (nfloats ? nfloats : 1) * sizeof(float);
    CU_CHECK(err, cudaMalloc((void **)p, b));
    g->allocs[g->nallocs++] = *p;
    g->bytes += b;
    return MS_OK;
}

/* On the encode stream, which open waits for before anything runs: a
 * cudaMemcpy from pageable memory returns once the source is staged, its
 * copy to the device possibly still pending on the legacy stream, which the
 * codec's non-blocking streams do not wait for. */
static int upload(cu_mimi *g, float **dst, const float *src, size_t n, ms_error *err) {
    int rc = dmalloc(g, dst, n, err);
    if (rc) return rc;
    CU_CHECK(err, cudaMemcpyAsync(*dst, src, n * sizeof(float), cudaMemcpyHostToDevice, g->es.st));
    return MS_OK;
}

/* The dense (M, K) row-major matrix behind one of the CPU's forms: w
 * itself, or the pre-packed (wp) or panel (wpanel) layout read back by
 * products with identity columns (see the header). */
static int upload_matrix(cu_mimi *g, float **dst, const float *w, const float *wp, const float *wpanel, int M, int K,
                         ms_error *err) {
    if (w) return upload(g, dst, w, (size_t)M * K, err);
    const int NB = CU_MIMI_PROBE_COLS;
    float *dense = malloc((size_t)M * K * sizeof(float));
    float *I = calloc((size_t)K * NB, sizeof(float));
    float *C = malloc((size_t)M * NB * sizeof(float));
    float *scratch = aligned_alloc(64, MIMI_GEMM_SCRATCH * sizeof(float));
    int rc = MS_OK;
    if (!dense || !I || !C || !scratch) {
        rc = ms_err_set(err, MS_ERR_NOMEM, "cuda mimi: out of host memory reading weights");
        goto out;
    }
    for (int j0 = 0; j0 < K; j0 += NB) {
        int nb = K - j0 < NB ? K - j0 : NB;
        memset(I, 0, (size_t)K * nb * sizeof(float));
        for (int j = 0; j < nb; j++) I[(size_t)(j0 + j) * nb + j] = 1.f;
        if (wp) mimi_gemm_prepacked(M, nb, K, wp, I, nb, C, nb, 0, scratch);
        else mimi_gemm_panel(M, nb, K, wpanel, I, nb, C, nb, 0, scratch);
        for (int i = 0; i < M; i++) memcpy(dense + (size_t)i * K + j0, C + (size_t)i * nb, (size_t)nb * sizeof(float));
    }
    rc = upload(g, dst, dense, (size_t)M * K, err);
out:
    free(dense);
    free(I);
    free(C);
    free(scratch);
    return rc;
}

static int upload_conv(cu_mimi *g, gconv *d, const mimi_conv *c, ms_error *err) {
    d->c = c;
    int M, K;
    if (c->depthwise) {
        M = c->cout;
        K = c->k;
    } else if (c->transposed) {
        M = c->cout * c->k;
        K = c->cin;
    } else {
        M = c->cout;
        K = c->cin * c->k;
    }
    int rc = upload_matrix(g, &d->w, c->w, c->wp, c->wpanel, M, K, err);
    if (!rc && c->b) rc = upload(g, &d->b, c->b, (size_t)c->cout, err);
    return rc;
}

static int upload_seanet(cu_mimi *g, gop **out, const mimi_seanet *net, ms_error *err) {
    *out = calloc((size_t)(net->nops ? net->nops : 1), sizeof **out);
    if (!*out) return ms_err_set(err, MS_ERR_NOMEM, "cuda mimi: out of host memory");
    for (int i = 0; i < net->nops; i++) {
        int rc = upload_conv(g, &(*out)[i].a, &net->ops[i].a, err);
        if (!rc && net->ops[i].resblock) rc = upload_conv(g, &(*out)[i].b, &net->ops[i].b, err);
        if (rc) return rc;
    }
    return MS_OK;
}

static int upload_transformer(cu_mimi *g, glayer **out, const mimi_transformer *tr, ms_error *err) {
    const mimi_config *c = &g->m->cfg;
    const int D = c->d_model, F = c->dim_feedforward;
    *out = calloc((size_t)(tr->nlayers ? tr->nlayers : 1), sizeof **out);
    if (!*out) return ms_err_set(err, MS_ERR_NOMEM, "cuda mimi: out of host memory");
    for (int l = 0; l < tr->nlayers; l++) {
        const mimi_tlayer *L = &tr->layers[l];
        glayer *d = &(*out)[l];
        int rc = upload(g, &d->n1w, L->norm1_w, D, err);
        if (!rc) rc = upload(g, &d->n1b, L->norm1_b, D, err);
        if (!rc) rc = upload(g, &d->n2w, L->norm2_w, D, err);
        if (!rc) rc = upload(g, &d->n2b, L->norm2_b, D, err);
        if (!rc) rc = upload_matrix(g, &d->in, NULL, NULL, L->in_proj, 3 * D, D, err);
        if (!rc) rc = upload_matrix(g, &d->out, NULL, NULL, L->out_proj, D, D, err);
        if (!rc) rc = upload_matrix(g, &d->l1, NULL, NULL, L->linear1, F, D, err);
        if (!rc) rc = upload_matrix(g, &d->l2, NULL, NULL, L->linear2, D, F, err);
        if (!rc && L->ls1) rc = upload(g, &d->ls1, L->ls1, D, err);
        if (!rc && L->ls2) rc = upload(g, &d->ls2, L->ls2, D, err);
        if (rc) return rc;
    }
    return MS_OK;
}

static int upload_rvq(cu_mimi *g, grvq *d, const mimi_rvq *q, ms_error *err) {
    const mimi_config *c = &g->m->cfg;
    const int D = c->dimension, Dq = c->q_dimension, bins = c->q_bins;
    d->levels = q->levels;
    int rc = upload_matrix(g, &d->in, NULL, NULL, q->in_proj, Dq, D, err);
    if (!rc) rc = upload_matrix(g, &d->out, NULL, NULL, q->out_proj, D, Dq, err);
    if (!rc) rc = upload(g, &d->cb, q->codebooks, (size_t)q->levels * bins * Dq, err);
    if (!rc) rc = upload(g, &d->norms, q->norms, (size_t)q->levels * bins, err);
    return rc;
}

/* ---- workspace plan: floats per item of each buffer ---------------------- */

static void grow(size_t *v, size_t n) {
    if (n > *v) *v = n;
}

static int plan_conv(cu_mimi *g, const mimi_conv *c, int T) {
    int To = mimi_conv_out_len(c, T);
    grow(&g->ws_act, (size_t)c->cin * T);
    grow(&g->ws_act, (size_t)c->cout * To);
    if (c->transposed) {
        grow(&g->ws_xb, (size_t)c->cin * T);
        grow(&g->ws_col, (size_t)c->cout * (To + c->pad));
    } else {
        grow(&g->ws_xb, (size_t)c->cin * (c->pad + T));
    }
    return To;
}

static int plan_seanet(cu_mimi *g, const mimi_seanet *net, int T) {
    for (int i = 0; i < net->nops; i++) {
        int To = plan_conv(g, &net->ops[i].a, T);
        if (net->ops[i].resblock) plan_conv(g, &net->ops[i].b, T);
        else T = To;
    }
    return T;
}

static void plan(cu_mimi *g) {
    const mimi_model *m = g->m;
    const mimi_config *c = &m->cfg;
    int T = plan_seanet(g, &m->enc, c->frame_samples);
    if (c->resample_stride > 1) {
        plan_conv(g, &m->down, T);
        plan_conv(g, &m->up, 1);
    }
    plan_seanet(g, &m->dec, c->resample_stride);
    size_t Tt = (size_t)c->resample_stride;
    size_t big = (size_t)(3 * c->d_model > c->dim_feedforward ? 3 * c->d_model : c->dim_feedforward);
    grow(&g->ws_col, big * Tt);
    grow(&g->ws_col, (size_t)c->q_dimension);
    grow(&g->ws_act, (size_t)c->d_model * Tt);
    grow(&g->ws_act, (size_t)c->q_dimension);
    grow(&g->ws_act, (size_t)c->dimension);
    grow(&g->ws_act, (size_t)c->frame_samples);
}

/* ---- open / close --------------------------------------------------------- */

/* gm_bind: make g's device current on the calling thread (the current
 * device is per host thread; the caller may not be the thread that opened
 * g). */
#define GM_BIND(g, err) CU_CHECK(err, cudaSetDevice((g)->device))

void cu_mimi_close(cu_mimi *g) {
    if (!g) return;
    if (cudaSetDevice(g->device) != cudaSuccess) cudaGetLastError();
    side *sd[2] = {&g->es, &g->ds};
    for (int k = 0; k < 2; k++)
        if (sd[k]->st) cudaStreamSynchronize(sd[k]->st);
    for (size_t i = 0; i < g->nallocs; i++) cudaFree(g->allocs[i]);
    free(g->allocs);
    for (int i = 0; i < g->nbuckets; i++) {
        if (g->eg[i]) cudaGraphExecDestroy(g->eg[i]);
        if (g->dg[i]) cudaGraphExecDestroy(g->dg[i]);
    }
    for (int k = 0; k < 2; k++) {
        for (int t = 0; t < CU_MIMI_TICKETS; t++) {
            if (sd[k]->dup[t]) cudaFree(sd[k]->dup[t]);
            if (sd[k]->hup[t]) cudaFreeHost(sd[k]->hup[t]);
            if (sd[k]->done[t]) cudaEventDestroy(sd[k]->done[t]);
        }
        if (sd[k]->st) cudaStreamDestroy(sd[k]->st);
    }
    free(g->enc);
    free(g->dec);
    free(g->enc_tr);
    free(g->dec_tr);
    free(g->enc_steps);
    free(g->dec_steps);
    free(g->first);
    free(g->mark);
    free(g);
}

size_t cu_mimi_bytes(const cu_mimi *g) { return g->bytes; }
int cu_mimi_graphs(const cu_mimi *g) { return g->graphs; }

int cu_mimi_open(cu_mimi **out, const mimi_model *m, int max_slots, ms_error *err) {
    return cu_mimi_open_with(out, m, max_slots, NULL, err);
}

int cu_mimi_open_with(cu_mimi **out, const mimi_model *m, int max_slots, const lm_gpu_opts *gpu, ms_error *err) {
    *out = NULL;
    if (!m || max_slots < 1 || max_slots > MIMI_MAX_BATCH)
        return ms_err_set(err, MS_ERR_ARG, "cuda mimi: %d slots (limit %d)", max_slots, MIMI_MAX_BATCH);
    const mimi_config *c = &m->cfg;
    if (c->resample_stride > c->context)
        return ms_err_set(err, MS_ERR_UNSUPPORTED, "cuda mimi: %d transformer steps per frame exceed the context %d",
                          c->resample_stride, c->context);
    cu_mimi *g = calloc(1, sizeof *g);
    if (!g) return ms_err_set(err, MS_ERR_NOMEM, "cuda mimi: out of host memory");
    g->m = m;
    g->nslots = max_slots;
    if (cudaGetDevice(&g->device) != cudaSuccess) {
        free(g);
        return ms_err_set(err, MS_ERR_DEVICE, "cuda mimi: cudaGetDevice: %s", cudaGetErrorString(cudaGetLastError()));
    }
    int rc = MS_ERR_NOMEM;
    g->enc_steps = calloc((size_t)max_slots, sizeof *g->enc_steps);
    g->dec_steps = calloc((size_t)max_slots, sizeof *g->dec_steps);
    g->first = malloc((size_t)max_slots);
    g->mark = calloc((size_t)max_slots, 1);
    if (!g->enc_steps || !g->dec_steps || !g->first || !g->mark) {
        ms_err_set(err, MS_ERR_NOMEM, "cuda mimi: out of host memory");
        goto fail;
    }
    memset(g->first, 1, (size_t)max_slots);
    side *sd[2] = {&g->es, &g->ds};
    for (int k = 0; k < 2; k++) {
        CU_CHECK_GOTO(err, cudaStreamCreateWithFlags(&sd[k]->st, cudaStreamNonBlocking), fail);
        for (int t = 0; t < CU_MIMI_TICKETS; t++)
            CU_CHECK_GOTO(err, cudaEventCreateWithFlags(&sd[k]->done[t], cudaEventDisableTiming), fail);
    }
    if ((rc = upload_seanet(g, &g->enc, &m->enc, err)) || (rc = upload_seanet(g, &g->dec, &m->dec, err)) ||
        (rc = upload_transformer(g, &g->enc_tr, &m->enc_tr, err)) ||
        (rc = upload_transformer(g, &g->dec_tr, &m->dec_tr, err)))
        goto fail;
    if (c->resample_stride > 1 &&
        ((rc = upload_conv(g, &g->down, &m->down, err)) || (rc = upload_conv(g, &g->up, &m->up, err))))
        goto fail;
    if ((rc = upload_rvq(g, &g->q[0], &m->rvq_first, err))) goto fail;
    if (c->num_codebooks > 1 && (rc = upload_rvq(g, &g->q[1], &m->rvq_rest, err))) goto fail;
    if ((rc = upload(g, &g->freq, m->rope_freq, (size_t)(c->d_model / c->num_heads / 2), err))) goto fail;
    /* state: zero (the fresh state; ring rows are never read before they
     * are written, the zeroing only keeps the slab defined) */
    const size_t ns = (size_t)max_slots, nss = ns + 1;   /* + the scratch slot of the padding rows */
    g->kv_slot = (size_t)c->num_layers * 2 * c->context * c->d_model;
    if ((rc = dmalloc(g, &g->enc_state, nss * m->enc_state, err)) ||
        (rc = dmalloc(g, &g->dec_state, nss * m->dec_state, err)) ||
        (rc = dmalloc(g, &g->enc_kv, nss * g->kv_slot, err)) || (rc = dmalloc(g, &g->dec_kv, nss * g->kv_slot, err)))
        goto fail;
    rc = MS_ERR_DEVICE;
    CU_CHECK_GOTO(err, cudaMemsetAsync(g->enc_state, 0, nss * m->enc_state * sizeof(float), g->es.st), fail);
    CU_CHECK_GOTO(err, cudaMemsetAsync(g->dec_state, 0, nss * m->dec_state * sizeof(float), g->ds.st), fail);
    CU_CHECK_GOTO(err, cudaMemsetAsync(g->enc_kv, 0, nss * g->kv_slot * sizeof(float), g->es.st), fail);
    CU_CHECK_GOTO(err, cudaMemsetAsync(g->dec_kv, 0, nss * g->kv_slot * sizeof(float), g->ds.st), fail);
    plan(g);
    for (int k = 0; k < 2; k++) {
        side *w = sd[k];
        if ((rc = dmalloc(g, &w->act0, ns * g->ws_act, err)) || (rc = dmalloc(g, &w->act1, ns * g->ws_act, err)) ||
            (rc = dmalloc(g, &w->act2, ns * g->ws_act, err)) || (rc = dmalloc(g, &w->col, ns * g->ws_col, err)) ||
            (rc = dmalloc(g, &w->xb, ns * g->ws_xb, err)))
            goto fail;
    }
    size_t o = 0;
    g->lay.slot = o; o = al16(o + sizeof(int32_t) * ns);
    g->lay.first = o; o = al16(o + sizeof(int32_t) * ns);
    g->lay.off = o; o = al16(o + sizeof(int64_t) * ns);
    g->lay.payload = o;
    size_t pay = (size_t)c->frame_samples * sizeof(float);
    if ((size_t)c->num_codebooks * sizeof(int32_t) > pay) pay = (size_t)c->num_codebooks * sizeof(int32_t);
    o = al16(o + pay * ns);
    g->lay.total = o;
    rc = MS_ERR_DEVICE;
    for (int k = 0; k < 2; k++) {
        /* one device block per side (the decode's tickets share it: its one
         * stream runs them in order), a pinned host block per ticket (the
         * host fills the next while the last may still be copied) */
        CU_CHECK_GOTO(err, cudaMalloc((void **)&sd[k]->dup[0], g->lay.total), fail);
        g->bytes += g->lay.total;
        for (int t = 0; t < (k ? CU_MIMI_TICKETS : 1); t++)
            CU_CHECK_GOTO(err, cudaMallocHost((void **)&sd[k]->hup[t], g->lay.total), fail);
    }
    for (int k = 0; k < 2; k++) CU_CHECK_GOTO(err, cudaStreamSynchronize(sd[k]->st), fail);
    /* buckets and graphs; codec_graphs_off (cuda.codec_graphs false,
     * or MOSHID_CU_MIMI_GRAPHS=0) enqueues every call's launches instead (the
     * tests compare both) */
    for (int b = 1; b < max_slots && g->nbuckets < CU_MIMI_MAX_BUCKETS - 1; b *= 2) g->bucket[g->nbuckets++] = b;
    g->bucket[g->nbuckets++] = max_slots;
    lm_gpu_opts go;
    lm_gpu_opts_get(gpu, &go);
    if (!go.codec_graphs_off && (rc = capture(g, err)) != MS_OK) goto fail;
    *out = g;
    return MS_OK;
fail:
    if (rc == MS_OK) rc = MS_ERR_DEVICE;
    cu_mimi_close(g);
    cudaGetLastError();   /* a failed allocation is answered here, not by this thread's next launch */
    return rc;
}

int cu_mimi_reset(cu_mimi *g, int slot, int which, ms_error *err) {
    const mimi_model *m = g->m;
    if (slot < 0 || slot >= g->nslots) return ms_err_set(err, MS_ERR_ARG, "cuda mimi: slot %d of %d", slot, g->nslots);
    GM_BIND(g, err);
    if ((which & 1) && m->enc_state)
        CU_CHECK(err, cudaMemsetAsync(g->enc_state + (size_t)slot * m->enc_state, 0, m->enc_state * sizeof(float), g->es.st));
    if ((which & 2) && m->dec_state)
        CU_CHECK(err, cudaMemsetAsync(g->dec_state + (size_t)slot * m->dec_state, 0, m->dec_state * sizeof(float), g->ds.st));
    if (which & 1) {
        g->enc_steps[slot] = 0;
        g->first[slot] = 1;
    }
    if (which & 2) g->dec_steps[slot] = 0;
    return MS_OK;
}

/* ---- the layers --------------------------------------------------------------- */

/* Device views of the call's per-item arrays. */
typedef struct call {
    side *w;                      /* the stream and workspaces */
    int n;
    const int32_t *slot, *first;
    const int64_t *off;
    float *state;
    size_t state_stride;
} call;

#define KTRY(x) CU_CHECK(err, x)

/* One causal conv (or transposed conv) over the call's items: y from x
 * (T steps each), as mimi_conv_forward. first: the replicate flags (the
 * downsample only). */
static int conv(const call *k, const gconv *d, int T, const float *x, int elu, float *y, int accumulate,
                const int32_t *first, ms_error *err) {
    const mimi_conv *c = d->c;
    if (c->transposed) {
        const float *X = x;
        if (elu) {
            KTRY(cu_mimi_elu(k->w->xb, x, (size_t)c->cin * k->n * T, k->w->st));
            X = k->w->xb;
        }
        KTRY(cu_mimi_convtr(y, k->w->col, k->state, k->state_stride, c->state_off, X, d->w, d->b, k->slot, k->n, c->cin,
                            c->cout, c->k, c->stride, T, c->depthwise, accumulate, k->w->st));
        return MS_OK;
    }
    KTRY(cu_mimi_conv_stage(k->w->xb, k->state, k->state_stride, c->state_off, x, k->slot, c->replicate ? first : NULL,
                            k->n, c->cin, T, c->pad, elu, k->w->st));
    const cu_mimi_keep keep = {k->state, k->state_stride, c->state_off, k->slot, c->pad};
    KTRY(cu_mimi_conv(y, k->w->xb, d->w, d->b, k->n, c->cin, c->cout, c->k, c->stride, c->dil, c->pad + T,
                      T / c->stride, accumulate, &keep, k->w->st));
    return MS_OK;
}

/* mimi_seanet_forward: x in *a0, result left in *a0 (buffers swapped). */
static int seanet(const call *k, const mimi_seanet *net, const gop *ops, int *T, float **a0, float **a1,
                  ms_error *err) {
    for (int i = 0; i < net->nops; i++) {
        const mimi_seanet_op *op = &net->ops[i];
        int rc;
        if (op->resblock) {
            if ((rc = conv(k, &ops[i].a, *T, *a0, 1, *a1, 0, NULL, err))) return rc;
            if ((rc = conv(k, &ops[i].b, *T, *a1, 1, *a0, 1, NULL, err))) return rc;
        } else {
            if ((rc = conv(k, &ops[i].a, *T, *a0, op->elu_in, *a1, 0, NULL, err))) return rc;
            *T = mimi_conv_out_len(&op->a, *T);
            float *t = *a0;
            *a0 = *a1;
            *a1 = t;
        }
    }
    return MS_OK;
}

/* mimi_transformer_forward on x (D, n*T) in place. */
static int transformer(cu_mimi *g, const call *k, const glayer *layers, int nlayers, float *kv, int T, float *x,
                       float *h, float *att, ms_error *err) {
    const mimi_config *c = &g->m->cfg;
    const int D = c->d_model, F = c->dim_feedforward, H = c->num_heads, ctx = c->context, N = k->n * T;
    float *big = k->w->col;
    for (int li = 0; li < nlayers; li++) {
        const glayer *L = &layers[li];
        KTRY(cu_mimi_layer_norm(h, x, L->n1w, L->n1b, D, N, k->w->st));
        KTRY(cu_mimi_gemm(big, L->in, h, 3 * D, N, D, 0, k->w->st));
        KTRY(cu_mimi_rope_store(big, kv, g->kv_slot, k->slot, k->off, g->freq, li, k->n, T, D, H, ctx, k->w->st));
        KTRY(cu_mimi_attend(att, big, kv, g->kv_slot, k->slot, k->off, li, k->n, T, D, H, ctx, k->w->st));
        KTRY(cu_mimi_gemm(h, L->out, att, D, N, D, 0, k->w->st));
        KTRY(cu_mimi_add_scaled(x, h, L->ls1, D, N, k->w->st));
        KTRY(cu_mimi_layer_norm(h, x, L->n2w, L->n2b, D, N, k->w->st));
        KTRY(cu_mimi_gemm(big, L->l1, h, F, N, D, 0, k->w->st));
        KTRY(cu_mimi_gelu(big, (size_t)F * N, k->w->st));
        KTRY(cu_mimi_gemm(att, L->l2, big, D, N, F, 0, k->w->st));
        KTRY(cu_mimi_add_scaled(x, att, L->ls2, D, N, k->w->st));
    }
    return MS_OK;
}

/* Checks shared by encode and decode; fills the upload block's per-item
 * arrays. */
static int begin(cu_mimi *g, unsigned char *hup, const int *slots, int n, const int64_t *steps, int enc,
                 ms_error *err) {
    if (!slots || n < 1 || n > g->nslots)
        return ms_err_set(err, MS_ERR_ARG, "cuda mimi: batch of %d (limit %d)", n, g->nslots);
    int rc = MS_OK;
    int i = 0;
    for (; i < n; i++) {
        if (slots[i] < 0 || slots[i] >= g->nslots || g->mark[slots[i]]) {
            rc = ms_err_set(err, MS_ERR_ARG, "cuda mimi: slot %d (item %d) out of range or repeated", slots[i], i);
            break;
        }
        g->mark[slots[i]] = 1;
    }
    for (int j = 0; j < i; j++) g->mark[slots[j]] = 0;
    if (rc) return rc;
    int32_t *hs = (int32_t *)(hup + g->lay.slot), *hf = (int32_t *)(hup + g->lay.first);
    int64_t *ho = (int64_t *)(hup + g->lay.off);
    for (int j = 0; j < n; j++) {
        hs[j] = slots[j];
        hf[j] = enc ? g->first[slots[j]] : 0;
        ho[j] = steps[slots[j]];
    }
    return MS_OK;
}

/* The bucket of n items, and its padding rows [n, B) in the host block:
 * the scratch slot, step 0, no first frame, a zero payload (finite
 * samples, code 0). Their results are never read; the kernels store the
 * scratch slot's state for the first of them only (a repeated slot). */
static void pad_rows(cu_mimi *g, unsigned char *hup, int n, int B, size_t row_bytes) {
    int32_t *hs = (int32_t *)(hup + g->lay.slot), *hf = (int32_t *)(hup + g->lay.first);
    int64_t *ho = (int64_t *)(hup + g->lay.off);
    for (int j = n; j < B; j++) {
        hs[j] = g->nslots;
        hf[j] = 0;
        ho[j] = 0;
    }
    memset(hup + g->lay.payload + (size_t)n * row_bytes, 0, (size_t)(B - n) * row_bytes);
}

static int pad(cu_mimi *g, unsigned char *hup, int n, size_t row_bytes) {
    int bi = 0;
    while (g->bucket[bi] < n) bi++;
    pad_rows(g, hup, n, g->bucket[bi], row_bytes);
    return bi;
}

static call call_of(cu_mimi *g, side *w, unsigned char *dup, int n, float *state, size_t stride) {
    return (call){.w = w, .n = n, .slot = (const int32_t *)(dup + g->lay.slot),
                  .first = (const int32_t *)(dup + g->lay.first), .off = (const int64_t *)(dup + g->lay.off),
                  .state = state, .state_stride = stride};
}

static int encode_enqueue(cu_mimi *g, int n, ms_error *err) {
    const mimi_model *m = g->m;
    const mimi_config *c = &m->cfg;
    const int F = c->frame_samples, K = c->num_codebooks, D = c->dimension, Dq = c->q_dimension;
    (void)F;
    side *w = &g->es;
    unsigned char *dup = w->dup[0];
    call k = call_of(g, w, dup, n, g->enc_state, m->enc_state);
    float *a0 = w->act0, *a1 = w->act1;   /* the caller copied the PCM into act0 */
    int T = F, rc;
    if ((rc = seanet(&k, &m->enc, g->enc, &T, &a0, &a1, err))) return rc;
    if ((rc = transformer(g, &k, g->enc_tr, m->enc_tr.nlayers, g->enc_kv, T, a0, a1, w->act2, err))) return rc;
    const float *latent = a0;
    if (c->resample_stride > 1) {
        if ((rc = conv(&k, &g->down, T, a0, 0, a1, 0, k.first, err))) return rc;
        latent = a1;
    }
    int32_t *codes = (int32_t *)(dup + g->lay.payload);   /* the PCM is consumed: codes overwrite it */
    for (int qi = 0; qi < (K > 1 ? 2 : 1); qi++) {
        const grvq *q = &g->q[qi];
        KTRY(cu_mimi_gemm(w->act2, q->in, latent, Dq, n, D, 0, w->st));
        for (int l = 0; l < q->levels; l++)
            KTRY(cu_mimi_rvq_level(codes + qi + l, K, w->act2, q->cb + (size_t)l * c->q_bins * Dq,
                                   q->norms + (size_t)l * c->q_bins, n, Dq, c->q_bins, w->st));
    }
    return MS_OK;
}

/* A warm-up: bucket B's launches of one side run once on padding rows
 * (the scratch slot), outside any capture, so that every kernel has been
 * loaded and run before it is captured (CUDA loads a kernel lazily, at its
 * first launch, by default). */
static int warm_up(cu_mimi *g, int k, int B, ms_error *err) {
    const mimi_config *c = &g->m->cfg;
    side *w = k ? &g->ds : &g->es;
    const size_t row = k ? (size_t)c->num_codebooks * sizeof(int32_t) : (size_t)c->frame_samples * sizeof(float);
    unsigned char *hup = w->hup[0], *dup = w->dup[0];
    pad_rows(g, hup, 0, B, row);
    CU_CHECK(err, cudaMemcpyAsync(dup, hup, g->lay.payload + (size_t)B * row, cudaMemcpyHostToDevice, w->st));
    int rc;
    if (k) {
        float *out = NULL;
        rc = decode_enqueue(g, B, &out, err);
    } else {
        CU_CHECK(err, cudaMemcpyAsync(w->act0, dup + g->lay.payload, (size_t)B * row, cudaMemcpyDeviceToDevice, w->st));
        rc = encode_enqueue(g, B, err);
    }
    if (rc) return rc;
    CU_CHECK(err, cudaStreamSynchronize(w->st));
    return MS_OK;
}

/* One graph per bucket and side, captured at open after a warm-up run of
 * the same launches (nothing runs while capturing; the launches read the
 * upload blocks and workspaces at their fixed addresses). */
static int capture(cu_mimi *g, ms_error *err) {
    for (int i = 0; i < g->nbuckets; i++) {
        for (int k = 0; k < 2; k++) {
            cudaStream_t st = k ? g->ds.st : g->es.st;
            cudaGraph_t graph = NULL;
            int wrc = warm_up(g, k, g->bucket[i], err);
            if (wrc) return wrc;
            CU_CHECK(err, cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
            int rc = k ? decode_enqueue(g, g->bucket[i], &g->dec_out[i], err) : encode_enqueue(g, g->bucket[i], err);
            cudaError_t e = cudaStreamEndCapture(st, &graph);
            if (rc != MS_OK) {
                if (graph) cudaGraphDestroy(graph);
                return rc;
            }
            CU_CHECK(err, e);
            e = cudaGraphInstantiate(k ? &g->dg[i] : &g->eg[i], graph, 0);
            cudaGraphDestroy(graph);
            CU_CHECK(err, e);
        }
    }
    g->graphs = 1;
    return MS_OK;
}

int cu_mimi_encode(cu_mimi *g, const int *slots, int n, const float *pcm, int *codes, ms_error *err) {
    const mimi_config *c = &g->m->cfg;
    const int F = c->frame_samples, K = c->num_codebooks;
    if (!pcm || !codes) return ms_err_set(err, MS_ERR_ARG, "cuda mimi: no pcm or codes");
    GM_BIND(g, err);
    side *w = &g->es;
    unsigned char *hup = w->hup[0], *dup = w->dup[0];
    int rc = begin(g, hup, slots, n, g->enc_steps, 1, err);
    if (rc) return rc;
    for (size_t i = 0; i < (size_t)n * F; i++)
        if (!isfinite(pcm[i]))
            return ms_err_set(err, MS_ERR_RANGE, "mimi: non-finite sample %zu in stream %zu", i % F, i / F);
    memcpy(hup + g->lay.payload, pcm, (size_t)n * F * sizeof(float));
    const int bi = pad(g, hup, n, (size_t)F * sizeof(float)), B = g->bucket[bi];
    CU_CHECK(err, cudaMemcpyAsync(dup, hup, g->lay.payload + (size_t)B * F * sizeof(float), cudaMemcpyHostToDevice,
                                  w->st));
    CU_CHECK(err, cudaMemcpyAsync(w->act0, dup + g->lay.payload, (size_t)B * F * sizeof(float),
                                  cudaMemcpyDeviceToDevice, w->st));
    if (g->graphs) CU_CHECK(err, cudaGraphLaunch(g->eg[bi], w->st));
    else if ((rc = encode_enqueue(g, B, err))) return rc;
    /* the codes come back into the same pinned block: the stream orders the
     * download after the upload */
    CU_CHECK(err, cudaMemcpyAsync(hup + g->lay.payload, dup + g->lay.payload, (size_t)n * K * sizeof(int32_t),
                                  cudaMemcpyDeviceToHost, w->st));
    CU_CHECK(err, cudaEventRecord(w->done[0], w->st));
    CU_CHECK(err, cudaEventSynchronize(w->done[0]));
    const int32_t *hc = (const int32_t *)(hup + g->lay.payload);
    for (size_t i = 0; i < (size_t)n * K; i++) codes[i] = hc[i];
    for (int i = 0; i < n; i++) {
        g->enc_steps[slots[i]] += c->resample_stride;
        g->first[slots[i]] = 0;
    }
    return MS_OK;
}

static int decode_enqueue(cu_mimi *g, int n, float **pcm_out, ms_error *err) {
    const mimi_model *m = g->m;
    const mimi_config *c = &m->cfg;
    const int K = c->num_codebooks, D = c->dimension, Dq = c->q_dimension;
    side *w = &g->ds;
    unsigned char *dup = w->dup[0];
    call k = call_of(g, w, dup, n, g->dec_state, m->dec_state);
    const int32_t *codes = (const int32_t *)(dup + g->lay.payload);
    float *a0 = w->act0, *a1 = w->act1;
    for (int qi = 0; qi < (K > 1 ? 2 : 1); qi++) {
        const grvq *q = &g->q[qi];
        KTRY(cu_mimi_rvq_sum(w->col, codes + qi, K, q->cb, q->levels, n, Dq, c->q_bins, w->st));
        KTRY(cu_mimi_gemm(a0, q->out, w->col, D, n, Dq, qi, w->st));
    }
    int T = 1, rc;
    if (c->resample_stride > 1) {
        if ((rc = conv(&k, &g->up, 1, a0, 0, a1, 0, NULL, err))) return rc;
        float *t = a0;
        a0 = a1;
        a1 = t;
        T = c->resample_stride;
    }
    if ((rc = transformer(g, &k, g->dec_tr, m->dec_tr.nlayers, g->dec_kv, T, a0, a1, w->act2, err))) return rc;
    if ((rc = seanet(&k, &m->dec, g->dec, &T, &a0, &a1, err))) return rc;
    if (T != c->frame_samples) return ms_err_set(err, MS_ERR_STATE, "cuda mimi: decoder gave %d samples", T);
    *pcm_out = a0;   /* (n, frame): the last layer's output */
    return MS_OK;
}

int cu_mimi_decode_submit(cu_mimi *g, const int *slots, int n, const int *codes, int *ticket, ms_error *err) {
    const mimi_config *c = &g->m->cfg;
    const int F = c->frame_samples, K = c->num_codebooks;
    side *w = &g->ds;
    if (!codes || !ticket) return ms_err_set(err, MS_ERR_ARG, "cuda mimi: no codes or ticket");
    GM_BIND(g, err);
    int t = 0;
    while (t < CU_MIMI_TICKETS && w->busy[t]) t++;
    if (t == CU_MIMI_TICKETS)
        return ms_err_set(err, MS_ERR_STATE, "cuda mimi: %d decodes in flight already", CU_MIMI_TICKETS);
    unsigned char *hup = w->hup[t], *dup = w->dup[0];
    int rc = begin(g, hup, slots, n, g->dec_steps, 0, err);
    if (rc) return rc;
    for (size_t i = 0; i < (size_t)n * K; i++)
        if (codes[i] < 0 || codes[i] >= c->q_bins)
            return ms_err_set(err, MS_ERR_RANGE, "mimi: code %d (stream %zu, codebook %zu) outside [0, %d)", codes[i],
                              i / K, i % K, c->q_bins);
    int32_t *hc = (int32_t *)(hup + g->lay.payload);
    for (size_t i = 0; i < (size_t)n * K; i++) hc[i] = codes[i];
    const int bi = pad(g, hup, n, (size_t)K * sizeof(int32_t)), B = g->bucket[bi];
    CU_CHECK(err, cudaMemcpyAsync(dup, hup, g->lay.payload + (size_t)B * K * sizeof(int32_t), cudaMemcpyHostToDevice,
                                  w->st));
    float *dpcm = g->dec_out[bi];
    if (g->graphs) CU_CHECK_GOTO(err, cudaGraphLaunch(g->dg[bi], w->st), drain);
    else if ((rc = decode_enqueue(g, B, &dpcm, err))) goto drain;
    CU_CHECK_GOTO(err, cudaMemcpyAsync(hup + g->lay.payload, dpcm, (size_t)n * F * sizeof(float),
                                       cudaMemcpyDeviceToHost, w->st), drain);
    CU_CHECK_GOTO(err, cudaEventRecord(w->done[t], w->st), drain);
    for (int i = 0; i < n; i++) g->dec_steps[slots[i]] += c->resample_stride;
    w->busy[t] = 1;
    w->n[t] = n;
    *ticket = t;
    return MS_OK;
drain:   /* the upload may still read hup[t]: wait before the ticket is free again */
    if (cudaStreamSynchronize(w->st) != cudaSuccess) cudaGetLastError();
    return rc ? rc : err ? err->code : MS_ERR_DEVICE;
}

int cu_mimi_decode_finish(cu_mimi *g, int ticket, float *pcm, ms_error *err) {
    side *w = &g->ds;
    if (ticket < 0 || ticket >= CU_MIMI_TICKETS || !w->busy[ticket])
        return ms_err_set(err, MS_ERR_ARG, "cuda mimi: decode ticket %d not in flight", ticket);
    /* the ticket stays in flight until its event has completed: its pinned
     * block is still the target of the PCM copy until then */
    GM_BIND(g, err);
    CU_CHECK(err, cudaEventSynchronize(w->done[ticket]));
    w->busy[ticket] = 0;
    if (pcm)
        memcpy(pcm, w->hup[ticket] + g->lay.payload, (size_t)w->n[ticket] * g->m->cfg.frame_samples * sizeof(float));
    return MS_OK;
}

int cu_mimi_decode(cu_mimi *g, const int *slots, int n, const int *codes, float *pcm, ms_error *err) {
    if (!pcm) return ms_err_set(err, MS_ERR_ARG, "cuda mimi: no pcm");
    int t, rc = cu_mimi_decode_submit(g, slots, n, codes, &t, err);
    return rc ? rc : cu_mimi_decode_finish(g, t, pcm, err);
}
