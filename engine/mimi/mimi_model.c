/* mimi_model.c - building a Mimi model from a configuration and the official
 * safetensors: the layer list of both SEANet stacks, every tensor checked by
 * name and shape and converted to float32, weights re-laid out for the GEMMs,
 * codebooks normalised, workspace sizes planned. */
#include <math.h>
#include <sys/mman.h>
#include <stdio.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"
#include "mimi_int.h"
#include "st.h"

typedef struct loader {
    mimi_model *m;
    st_file *f;          /* NULL: random weights from rng */
    uint64_t rng;
    ms_error *err;
    int rc;
} loader;

/* Uniform in [-1, 1) from a 64-bit xorshift* state. */
static float rnd(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    uint64_t v = *s * 0x2545F4914F6CDD1DULL;
    return (float)((v >> 40) * (1.0 / (1 << 23)) - 1.0);
}

/* Random weights for benchmarks and the demo: scaled by fan-in, norms
 * around 1, small biases and layer scales, unit cluster usage. */
static void fill_random(loader *L, const char *name, int ndim, const int64_t *shape, float *p, size_t n) {
    size_t len = strlen(name);
#define ENDS(sfx) (len >= strlen(sfx) && strcmp(name + len - strlen(sfx), sfx) == 0)
    float base = 0.f, scale;
    if (ENDS("cluster_usage")) base = 1.f, scale = 0.f;
    else if (ENDS(".bias")) scale = 0.01f;
    else if (ENDS(".scale")) base = 0.1f, scale = 0.05f;
    else if (ndim == 1) base = 1.f, scale = 0.1f;
    else {
        size_t fan = 1;
        for (int i = 1; i < ndim; i++) fan *= (size_t)shape[i];
        if (ENDS("embedding_sum") || (ndim == 3 && shape[1] == 1)) fan = 1;
        scale = (float)sqrt(3.0 / (double)fan);
    }
#undef ENDS
    for (size_t i = 0; i < n; i++) p[i] = base + scale * rnd(&L->rng);
}

float *mimi_alloc_floats(size_t n) {
    size_t bytes = (n ? n : 1) * sizeof(float);
    if (bytes < MIMI_HUGE_MIN) return malloc(bytes);
    /* 2 MB aligned and rounded, and asked for transparent huge pages: the
     * weights are streamed every frame, and 4 KB pages cost a quarter of
     * the bandwidth (TLB misses, prefetchers stopping at page ends) */
    size_t rounded = (bytes + MIMI_HUGE_PAGE - 1) / MIMI_HUGE_PAGE * MIMI_HUGE_PAGE;
    float *p = aligned_alloc(MIMI_HUGE_PAGE, rounded);
    if (p) (void)madvise(p, rounded, MADV_HUGEPAGE);   /* a hint: failure is harmless */
    return p;
}

static float *keep(loader *L, float *p) {
    mimi_model *m = L->m;
    if (!p) return NULL;
    if (m->nallocs == m->cap_allocs) {
        size_t cap = m->cap_allocs ? 2 * m->cap_allocs : 64;
        float **a = realloc(m->allocs, cap * sizeof(*a));
        if (!a) {
            free(p);
            return NULL;
        }
        m->allocs = a;
        m->cap_allocs = cap;
    }
    m->allocs[m->nallocs++] = p;
    return p;
}

static float *alloc_floats(loader *L, size_t n) {
    if (L->rc) return NULL;
    float *p = keep(L, mimi_alloc_floats(n));
    if (!p) L->rc = ms_err_set(L->err, MS_ERR_NOMEM, "mimi: out of memory (%zu floats)", n);
    return p;
}

/* Swap the model-owned buffer `old` for `new` (old freed). */
static void replace_alloc(mimi_model *m, float *old, float *new) {
    for (size_t i = 0; i < m->nallocs; i++)
        if (m->allocs[i] == old) {
            free(old);
            m->allocs[i] = new;
            return;
        }
    MS_ASSERT(0);
}

/* w (M, K) row-major, model-owned -> the panel layout (w freed). */
static float *to_panel(loader *L, float *w, int M, int K) {
    if (!w || L->rc) return NULL;
    float *p = mimi_alloc_floats(mimi_panel_size(M, K));
    if (!p) {
        L->rc = ms_err_set(L->err, MS_ERR_NOMEM, "mimi: out of memory");
        return NULL;
    }
    mimi_panel_pack(M, K, w, K, p);
    replace_alloc(L->m, w, p);
    return p;
}

/* Tensor `name` with the given shape, as newly allocated float32 (owned by
 * the model). NULL with L->rc set when missing, misshapen or not finite. */
static float *tensor(loader *L, const char *name, int ndim, const int64_t *shape) {
    if (L->rc) return NULL;
    if (!L->f) {
        size_t n = 1;
        for (int i = 0; i < ndim; i++) n *= (size_t)shape[i];
        float *p = alloc_floats(L, n);
        if (p) fill_random(L, name, ndim, shape, p, n);
        return p;
    }
    const st_tensor *t = st_get(L->f, name, ndim, shape, 1, ST_F32, L->err);
    if (!t) {
        L->rc = L->err ? L->err->code : MS_ERR_FORMAT;
        return NULL;
    }
    float *p = alloc_floats(L, t->nel);
    if (!p) return NULL;
    if (st_to_f32(t, 0, t->nel, p) != MS_OK) {
        L->rc = ms_err_set(L->err, MS_ERR_FORMAT, "%s: tensor %s: cannot convert", st_path(L->f), name);
        return NULL;
    }
    for (uint64_t i = 0; i < t->nel; i++)
        if (!isfinite(p[i])) {
            L->rc = ms_err_set(L->err, MS_ERR_FORMAT, "%s: tensor %s: non-finite value at %llu",
                               st_path(L->f), name, (unsigned long long)i);
            return NULL;
        }
    return p;
}

/* A plain conv `prefix.weight` [cout, cin, k] (+ bias [cout]). */
static void load_conv(loader *L, mimi_conv *c, const char *prefix, int cin, int cout, int k,
                      int stride, int dil, int bias) {
    char name[256];
    memset(c, 0, sizeof(*c));
    c->cin = cin; c->cout = cout; c->k = k; c->stride = stride; c->dil = dil;
    c->pad = (k - 1) * dil + 1 - stride;
    snprintf(name, sizeof(name), "%s.weight", prefix);
    c->w = tensor(L, name, 3, (const int64_t[]){cout, cin, k});
    if (bias) {
        snprintf(name, sizeof(name), "%s.bias", prefix);
        c->b = tensor(L, name, 1, (const int64_t[]){cout});
    }
}

/* A transposed conv: torch layout [cin, cout, k] -> (cout*k, cin). */
static void load_convtr(loader *L, mimi_conv *c, const char *prefix, int cin, int cout, int k,
                        int stride, int bias) {
    char name[256];
    memset(c, 0, sizeof(*c));
    c->cin = cin; c->cout = cout; c->k = k; c->stride = stride; c->dil = 1;
    c->transposed = 1;
    c->pad = k - stride;
    snprintf(name, sizeof(name), "%s.weight", prefix);
    float *w = tensor(L, name, 3, (const int64_t[]){cin, cout, k});
    if (w) {
        c->w = alloc_floats(L, (size_t)cin * cout * k);
        if (c->w)
            for (int ci = 0; ci < cin; ci++)
                for (int co = 0; co < cout; co++)
                    for (int kk = 0; kk < k; kk++)
                        c->w[((size_t)co * k + kk) * cin + ci] = w[((size_t)ci * cout + co) * k + kk];
    }
    if (bias) {
        snprintf(name, sizeof(name), "%s.bias", prefix);
        c->b = tensor(L, name, 1, (const int64_t[]){cout});
    }
}

static void load_resblock(loader *L, mimi_seanet_op *op, const char *side, int idx, int dim, int j) {
    const mimi_config *c = &L->m->cfg;
    char p[160];
    int hidden = dim / c->compress, dil = 1;
    for (int q = 0; q < j; q++) dil *= c->dilation_base;
    op->resblock = 1;
    op->elu_in = 1;
    snprintf(p, sizeof(p), "%s.model.%d.block.1.conv.conv", side, idx);
    load_conv(L, &op->a, p, dim, hidden, c->residual_kernel_size, 1, dil, 1);
    snprintf(p, sizeof(p), "%s.model.%d.block.3.conv.conv", side, idx);
    load_conv(L, &op->b, p, hidden, dim, 1, 1, 1, 1);
}

static int load_seanets(loader *L) {
    mimi_model *m = L->m;
    const mimi_config *c = &m->cfg;
    int nops = 2 + c->n_ratios * (1 + c->n_residual_layers);
    m->enc.ops = calloc((size_t)nops, sizeof(mimi_seanet_op));
    m->dec.ops = calloc((size_t)nops, sizeof(mimi_seanet_op));
    if (!m->enc.ops || !m->dec.ops) return L->rc = ms_err_set(L->err, MS_ERR_NOMEM, "mimi: out of memory");
    char p[160];
    /* encoder: conv, then per ratio (reversed): residual blocks, ELU + strided conv; ELU + conv */
    int idx = 0, k = 0, mult = 1, nf = c->n_filters;
    load_conv(L, &m->enc.ops[k++].a, "encoder.model.0.conv.conv", c->channels, nf, c->kernel_size, 1, 1, 1);
    idx++;
    for (int i = c->n_ratios - 1; i >= 0; i--) {
        int r = c->ratios[i];
        for (int j = 0; j < c->n_residual_layers; j++) load_resblock(L, &m->enc.ops[k++], "encoder", idx++, mult * nf, j);
        idx++;  /* ELU */
        snprintf(p, sizeof(p), "encoder.model.%d.conv.conv", idx++);
        m->enc.ops[k].elu_in = 1;
        load_conv(L, &m->enc.ops[k++].a, p, mult * nf, 2 * mult * nf, 2 * r, r, 1, 1);
        mult *= 2;
    }
    idx++;
    snprintf(p, sizeof(p), "encoder.model.%d.conv.conv", idx);
    m->enc.ops[k].elu_in = 1;
    load_conv(L, &m->enc.ops[k++].a, p, mult * nf, c->dimension, c->last_kernel_size, 1, 1, 1);
    m->enc.nops = k;
    /* decoder: conv, then per ratio: ELU + transposed conv, residual blocks; ELU + conv */
    idx = 0; k = 0;
    load_conv(L, &m->dec.ops[k++].a, "decoder.model.0.conv.conv", c->dimension, mult * nf, c->kernel_size, 1, 1, 1);
    idx++;
    for (int i = 0; i < c->n_ratios; i++) {
        int r = c->ratios[i];
        idx++;
        snprintf(p, sizeof(p), "decoder.model.%d.convtr.convtr", idx++);
        m->dec.ops[k].elu_in = 1;
        load_convtr(L, &m->dec.ops[k++].a, p, mult * nf, mult * nf / 2, 2 * r, r, 1);
        for (int j = 0; j < c->n_residual_layers; j++) load_resblock(L, &m->dec.ops[k++], "decoder", idx++, mult * nf / 2, j);
        mult /= 2;
    }
    idx++;
    snprintf(p, sizeof(p), "decoder.model.%d.conv.conv", idx);
    m->dec.ops[k].elu_in = 1;
    load_conv(L, &m->dec.ops[k++].a, p, nf, c->channels, c->last_kernel_size, 1, 1, 1);
    m->dec.nops = k;
    return L->rc;
}

static int load_transformer(loader *L, mimi_transformer *tr, const char *side) {
    const mimi_config *c = &L->m->cfg;
    const int64_t D = c->d_model, F = c->dim_feedforward;
    tr->nlayers = c->num_layers;
    tr->layers = calloc((size_t)(c->num_layers ? c->num_layers : 1), sizeof(mimi_tlayer));
    if (!tr->layers) return L->rc = ms_err_set(L->err, MS_ERR_NOMEM, "mimi: out of memory");
    char p[200];
#define T1(field, suffix, ...)                                                           \
    do {                                                                                 \
        snprintf(p, sizeof(p), "%s_transformer.transformer.layers.%d.%s", side, l, suffix); \
        ly->field = tensor(L, p, __VA_ARGS__);                                           \
    } while (0)
    for (int l = 0; l < c->num_layers; l++) {
        mimi_tlayer *ly = &tr->layers[l];
        T1(norm1_w, "norm1.weight", 1, (const int64_t[]){D});
        T1(norm1_b, "norm1.bias", 1, (const int64_t[]){D});
        T1(norm2_w, "norm2.weight", 1, (const int64_t[]){D});
        T1(norm2_b, "norm2.bias", 1, (const int64_t[]){D});
        /* released checkpoints: in_proj_weight / out_proj.weight; the
         * package's own state_dict: in_projs.0.weight / out_projs.0.weight */
        snprintf(p, sizeof(p), "%s_transformer.transformer.layers.%d.self_attn.in_projs.0.weight", side, l);
        if (!L->f || !st_find(L->f, p)) T1(in_proj, "self_attn.in_proj_weight", 2, (const int64_t[]){3 * D, D});
        else T1(in_proj, "self_attn.in_projs.0.weight", 2, (const int64_t[]){3 * D, D});
        snprintf(p, sizeof(p), "%s_transformer.transformer.layers.%d.self_attn.out_projs.0.weight", side, l);
        if (!L->f || !st_find(L->f, p)) T1(out_proj, "self_attn.out_proj.weight", 2, (const int64_t[]){D, D});
        else T1(out_proj, "self_attn.out_projs.0.weight", 2, (const int64_t[]){D, D});
        T1(linear1, "linear1.weight", 2, (const int64_t[]){F, D});
        T1(linear2, "linear2.weight", 2, (const int64_t[]){D, F});
        ly->in_proj = to_panel(L, ly->in_proj, 3 * (int)D, (int)D);
        ly->out_proj = to_panel(L, ly->out_proj, (int)D, (int)D);
        ly->linear1 = to_panel(L, ly->linear1, (int)F, (int)D);
        ly->linear2 = to_panel(L, ly->linear2, (int)D, (int)F);
        if (c->layer_scale) {
            T1(ls1, "layer_scale_1.scale", 1, (const int64_t[]){D});
            T1(ls2, "layer_scale_2.scale", 1, (const int64_t[]){D});
        }
    }
#undef T1
    return L->rc;
}

static int load_rvq(loader *L, mimi_rvq *q, const char *name, int levels) {
    const mimi_config *c = &L->m->cfg;
    const int64_t D = c->dimension, Dq = c->q_dimension, bins = c->q_bins;
    char p[200];
    q->levels = levels;
    snprintf(p, sizeof(p), "quantizer.%s.input_proj.weight", name);
    q->in_proj = tensor(L, p, 3, (const int64_t[]){Dq, D, 1});
    snprintf(p, sizeof(p), "quantizer.%s.output_proj.weight", name);
    q->out_proj = tensor(L, p, 3, (const int64_t[]){D, Dq, 1});
    q->in_proj = to_panel(L, q->in_proj, (int)Dq, (int)D);
    q->out_proj = to_panel(L, q->out_proj, (int)D, (int)Dq);
    q->codebooks = alloc_floats(L, (size_t)levels * bins * Dq);
    q->cb_panel = alloc_floats(L, (size_t)levels * mimi_panel_size((int)bins, (int)Dq));
    q->norms = alloc_floats(L, (size_t)levels * bins);
    for (int l = 0; l < levels && !L->rc; l++) {
        snprintf(p, sizeof(p), "quantizer.%s.vq.layers.%d._codebook.embedding_sum", name, l);
        float *sum = tensor(L, p, 2, (const int64_t[]){bins, Dq});
        snprintf(p, sizeof(p), "quantizer.%s.vq.layers.%d._codebook.cluster_usage", name, l);
        float *use = tensor(L, p, 1, (const int64_t[]){bins});
        if (L->rc) break;
        for (int64_t j = 0; j < bins; j++) {
            float u = use[j] > 1e-5f ? use[j] : 1e-5f;   /* clamp(min=epsilon) */
            float *e = q->codebooks + ((size_t)l * bins + j) * Dq;
            float nn = 0.f;
            for (int64_t d = 0; d < Dq; d++) {
                e[d] = sum[j * Dq + d] / u;
                nn += e[d] * e[d];
            }
            if (!isfinite(nn)) return L->rc = ms_err_set(L->err, MS_ERR_FORMAT, "%s: codebook %s level %d entry %lld not finite",
                                                       L->f ? st_path(L->f) : "random", name, l, (long long)j);
            q->norms[(size_t)l * bins + j] = nn;
        }
        mimi_panel_pack((int)bins, (int)Dq, q->codebooks + (size_t)l * bins * Dq, (int)Dq,
                        q->cb_panel + (size_t)l * mimi_panel_size((int)bins, (int)Dq));
    }
    return L->rc;
}

/* Layers whose GEMM has at least this many columns for one stream keep
 * their weights pre-packed for the blocked kernel (no packing per call). */
#define MIMI_PREPACK_MIN_N 8

/* Replace c->w by its packed form when the GEMM is wide enough. */
static int prepack(mimi_model *m, mimi_conv *c, int gemm_n) {
    if (c->depthwise || !c->w) return MS_OK;
    int M = c->transposed ? c->cout * c->k : c->cout, K = c->transposed ? c->cin : c->cin * c->k;
    if (M == 1 && !c->transposed) return MS_OK;   /* one output channel: row-major, axpy path */
    int blocked = gemm_n >= MIMI_PREPACK_MIN_N;
    float *p = mimi_alloc_floats(blocked ? mimi_gemm_packed_size(M, K) : mimi_panel_size(M, K));
    if (!p) return MS_ERR_NOMEM;
    if (blocked) mimi_gemm_pack_a(M, K, c->w, K, p);
    else mimi_panel_pack(M, K, c->w, K, p);
    replace_alloc(m, c->w, p);
    c->w = NULL;
    if (blocked) c->wp = p;
    else c->wpanel = p;
    return MS_OK;
}

/* Assign state offsets (floats) and grow the workspace plan for one conv
 * called with T steps per stream. */
static void plan_conv(mimi_model *m, mimi_conv *c, size_t *state, int T) {
    c->state_off = *state;
    *state += (size_t)(c->transposed ? c->cout : c->cin) * c->pad;
    int To = mimi_conv_out_len(c, T);
    size_t act = (size_t)c->cin * T > (size_t)c->cout * To ? (size_t)c->cin * T : (size_t)c->cout * To;
    size_t col, xb;
    if (c->transposed) {
        col = (size_t)c->cout * c->k * T;
        xb = (size_t)c->cin * T + To + c->pad;
    } else {
        col = (size_t)c->cin * c->k * To;
        if ((size_t)c->cin * T > col) col = (size_t)c->cin * T;
        xb = (size_t)c->cin * (c->pad + T);
    }
    if (act > m->ws_act) m->ws_act = act;
    if (col > m->ws_col) m->ws_col = col;
    if (xb > m->ws_xb) m->ws_xb = xb;
    if (prepack(m, c, c->transposed ? T : To)) m->plan_rc = MS_ERR_NOMEM;
}

static int plan_seanet(mimi_model *m, mimi_seanet *net, size_t *state, int T) {
    for (int i = 0; i < net->nops; i++) {
        mimi_seanet_op *op = &net->ops[i];
        plan_conv(m, &op->a, state, T);
        if (op->resblock) plan_conv(m, &op->b, state, T);
        else T = mimi_conv_out_len(&op->a, T);
    }
    return T;
}

static void plan(mimi_model *m) {
    const mimi_config *c = &m->cfg;
    int T = plan_seanet(m, &m->enc, &m->enc_state, c->frame_samples);
    MS_ASSERT(T == c->resample_stride);
    if (c->resample_stride > 1) plan_conv(m, &m->down, &m->enc_state, T);
    if (c->resample_stride > 1) plan_conv(m, &m->up, &m->dec_state, 1);
    T = plan_seanet(m, &m->dec, &m->dec_state, c->resample_stride);
    MS_ASSERT(T == c->frame_samples);
    size_t Tt = (size_t)c->resample_stride;
    size_t big = (size_t)(3 * c->d_model > c->dim_feedforward ? 3 * c->d_model : c->dim_feedforward) * Tt;
    if (big > m->ws_col) m->ws_col = big;
    if ((size_t)c->q_bins > m->ws_col) m->ws_col = c->q_bins;
    if ((size_t)2 * c->q_dimension > m->ws_col) m->ws_col = 2 * (size_t)c->q_dimension;
    size_t act = (size_t)c->d_model * Tt;
    if ((size_t)c->q_dimension > act) act = c->q_dimension;
    if ((size_t)c->frame_samples > act) act = c->frame_samples;
    if (act > m->ws_act) m->ws_act = act;
}

/* Build the model from path's tensors, or random ones when path is NULL. */
static int build(mimi_model **out, const char *path, uint64_t seed, const mimi_config *cfg, ms_error *err) {
    *out = NULL;
    mimi_model *m = calloc(1, sizeof(*m));
    if (!m) return ms_err_set(err, MS_ERR_NOMEM, "mimi: out of memory");
    m->cfg = *cfg;
    loader L = {.m = m, .err = err, .rng = seed * 0x9E3779B97F4A7C15ULL + 0x1234567ULL};
    if (path) {
        L.f = st_open(path, err);
        if (!L.f) {
            free(m);
            return err ? err->code : MS_ERR_IO;
        }
    }
    const mimi_config *c = &m->cfg;
    if (!load_seanets(&L) && !load_transformer(&L, &m->enc_tr, "encoder") &&
        !load_transformer(&L, &m->dec_tr, "decoder")) {
        int s = c->resample_stride;
        if (s > 1) {
            load_conv(&L, &m->down, "downsample.conv.conv.conv", c->dimension, c->dimension, 2 * s, s, 1, 0);
            m->down.replicate = 1;
            /* depthwise transposed conv: weight [D, 1, 2s], kept as (D, 2s) */
            mimi_conv *u = &m->up;
            u->cin = u->cout = c->dimension; u->k = 2 * s; u->stride = s; u->dil = 1;
            u->transposed = u->depthwise = 1;
            u->pad = s;
            u->w = tensor(&L, "upsample.convtr.convtr.convtr.weight", 3,
                          (const int64_t[]){c->dimension, 1, 2 * s});
        }
        if (!L.rc) load_rvq(&L, &m->rvq_first, "rvq_first", 1);
        if (!L.rc) load_rvq(&L, &m->rvq_rest, "rvq_rest", c->num_codebooks - 1);
    }
    if (!L.rc) {
        int hd = c->d_model / c->num_heads;
        m->rope_freq = alloc_floats(&L, (size_t)hd / 2);
        if (m->rope_freq) {
            float step = (float)(-log(c->max_period) * 2.0 / hd);
            for (int i = 0; i < hd / 2; i++) m->rope_freq[i] = expf((float)i * step);
        }
    }
    if (L.f) st_close(L.f);
    if (L.rc) {
        mimi_model_free(m);
        return L.rc;
    }
    plan(m);
    if (m->plan_rc) {
        mimi_model_free(m);
        return ms_err_set(err, MS_ERR_NOMEM, "mimi: out of memory packing weights");
    }
    *out = m;
    return MS_OK;
}

int mimi_model_load_cfg(mimi_model **out, const char *path, const mimi_config *cfg, ms_error *err) {
    if (!path) {
        *out = NULL;
        return ms_err_set(err, MS_ERR_ARG, "mimi: no weights file given");
    }
    return build(out, path, 0, cfg, err);
}

int mimi_model_random(mimi_model **out, const mimi_config *cfg, uint64_t seed, ms_error *err) {
    return build(out, NULL, seed, cfg, err);
}

int mimi_model_load(mimi_model **out, const char *path, const char *config_json_path, ms_error *err) {
    mimi_config cfg;
    *out = NULL;
    int rc = mimi_config_load(&cfg, config_json_path, err);
    if (rc) return rc;
    return mimi_model_load_cfg(out, path, &cfg, err);
}

void mimi_model_free(mimi_model *m) {
    if (!m) return;
    for (size_t i = 0; i < m->nallocs; i++) free(m->allocs[i]);
    free(m->allocs);
    free(m->enc.ops);
    free(m->dec.ops);
    free(m->enc_tr.layers);
    free(m->dec_tr.layers);
    free(m);
}

const mimi_config *mimi_model_config(const mimi_model *m) { return &m->cfg; }
int mimi_num_codebooks(const mimi_model *m) { return m->cfg.num_codebooks; }
int mimi_frame_samples(const mimi_model *m) { return m->cfg.frame_samples; }
int mimi_sample_rate(const mimi_model *m) { return m->cfg.sample_rate; }
int mimi_cardinality(const mimi_model *m) { return m->cfg.q_bins; }

size_t mimi_model_bytes(const mimi_model *m) {
    size_t n = sizeof *m;
    for (size_t i = 0; i < m->nallocs; i++) n += malloc_usable_size(m->allocs[i]);
    return n;
}

int mimi_model_check_serving(const mimi_model *m, ms_error *err) {
    const mimi_config *c = &m->cfg;
    if (c->frame_samples != MS_FRAME_SAMPLES || c->sample_rate != MS_SAMPLE_RATE_HZ)
        return ms_err_set(err, MS_ERR_UNSUPPORTED,
                          "mimi: frames of %d samples at %d Hz; moshid serves frames of %d samples at %d Hz (%.0f ms)",
                          c->frame_samples, c->sample_rate, MS_FRAME_SAMPLES, MS_SAMPLE_RATE_HZ, MS_FRAME_MS);
    return MS_OK;
}
