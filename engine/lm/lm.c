/* lm.c - loading the Moshi LM's weights (see lm.h). */
#include "lm.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

const char *lm_variant_name(lm_variant v) {
    switch (v) {
    case LM_VARIANT_KYUTAI: return "kyutai";
    case LM_VARIANT_PERSONAPLEX: return "personaplex";
    default: return "auto";
    }
}

static void *own(lm_model *m, size_t bytes) {
    if (m->n_owned == m->cap_owned) {
        int cap = m->cap_owned ? 2 * m->cap_owned : 64;
        void **o = realloc(m->owned, sizeof *o * (size_t)cap);
        if (!o) return NULL;
        m->owned = o;
        m->cap_owned = cap;
    }
    void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (p) m->owned[m->n_owned++] = p;
    return p;
}

void lm_model_free(lm_model *m) {
    if (!m) return;
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    free(m->layers);
    free(m->dep_layers);
    st_close(m->st);
    free(m);
}

/* a float tensor `name` of shape (rows, cols) as a matrix */
static int get_mat(lm_model *m, kern_mat *out, const char *name, int64_t rows, int64_t cols, ms_error *err) {
    int64_t shape[2] = {rows, cols};
    const st_tensor *t = st_get(m->st, name, 2, shape, 1, ST_F32, err);
    if (!t) return err ? err->code : MS_ERR_FORMAT;
    out->dtype = t->dtype;
    out->rows = (int)rows;
    out->cols = (int)cols;
    size_t es = st_dtype_size(t->dtype);
    if (((uintptr_t)t->data % es) != 0) {
        /* misaligned in the file (odd header length): copy this tensor */
        void *p = own(m, t->nbytes);
        if (!p) return ms_err_set(err, MS_ERR_NOMEM, "%s: tensor %s: out of memory", st_path(m->st), name);
        memcpy(p, t->data, t->nbytes);
        out->w = p;
        m->copied_bytes += t->nbytes;
    } else {
        out->w = t->data;
    }
    m->weight_bytes += t->nbytes;
    return MS_OK;
}

/* a norm scale [1, 1, dim] widened to float32 */
static int get_alpha(lm_model *m, const float **out, const char *name, int dim, ms_error *err) {
    int64_t shape[3] = {1, 1, dim};
    const st_tensor *t = st_get(m->st, name, 3, shape, 1, ST_F32, err);
    if (!t) return err ? err->code : MS_ERR_FORMAT;
    float *p = own(m, sizeof(float) * (size_t)dim);
    if (!p) return ms_err_set(err, MS_ERR_NOMEM, "%s: out of memory", name);
    st_to_f32(t, 0, (size_t)dim, p);
    *out = p;
    return MS_OK;
}

/* depformer steps stored in the checkpoint, from the first in_proj */
static int count_dep_steps(const st_file *st, const lm_config *c, int *steps, ms_error *err) {
    const char *name = "depformer.layers.0.self_attn.in_proj_weight";
    const st_tensor *t = st_find(st, name);
    if (!t) return ms_err_set(err, MS_ERR_NOTFOUND, "%s: tensor %s: missing", st_path(st), name);
    int64_t per = 3 * (int64_t)c->depformer_dim;
    if (t->ndim != 2 || t->shape[1] != c->depformer_dim || t->shape[0] % per != 0 || t->shape[0] / per < 1 ||
        t->shape[0] / per > LM_MAX_DEP_Q)
        return ms_err_set(err, MS_ERR_FORMAT,
                          "%s: tensor %s: shape does not hold whole depformer steps of 3 x %d rows x %d",
                          st_path(st), name, c->depformer_dim, c->depformer_dim);
    *steps = (int)(t->shape[0] / per);
    return MS_OK;
}

#define TRY(x) do { if ((rc = (x)) != MS_OK) goto fail; } while (0)

lm_model *lm_model_load_files(const char *config_path, const char *weights_path, lm_variant variant,
                              ms_error *err) {
    lm_model *m = calloc(1, sizeof *m);
    if (!m) {
        ms_err_set(err, MS_ERR_NOMEM, "out of memory");
        return NULL;
    }
    int rc;
    char name[256];
    lm_config *c = &m->cfg;
    if (config_path)
        TRY(lm_config_load(c, config_path, err));
    else
        lm_config_default(c);
    m->st = st_open(weights_path, err);
    if (!m->st) goto fail;
    int steps = 0;
    TRY(count_dep_steps(m->st, c, &steps, err));
    /* variant: 16 stored depformer steps = PersonaPlex, stepped with dep_q 16 */
    if (variant == LM_VARIANT_AUTO) variant = steps == LM_PERSONAPLEX_DEP_Q ? LM_VARIANT_PERSONAPLEX : LM_VARIANT_KYUTAI;
    if (variant == LM_VARIANT_PERSONAPLEX) {
        if (steps != LM_PERSONAPLEX_DEP_Q) {
            rc = ms_err_set(err, MS_ERR_UNSUPPORTED,
                            "%s: a PersonaPlex checkpoint needs %d depformer steps, this one has %d (the "
                            "official loader's step copy leaves depformer_emb.7 unfilled; refused)",
                            weights_path, LM_PERSONAPLEX_DEP_Q, steps);
            goto fail;
        }
        c->dep_q = LM_PERSONAPLEX_DEP_Q;
    }
    if (steps < c->dep_q) {
        rc = ms_err_set(err, MS_ERR_FORMAT, "%s: depformer has %d steps, the configuration asks for dep_q = %d",
                        weights_path, steps, c->dep_q);
        goto fail;
    }
    if (steps != c->dep_q) {
        rc = ms_err_set(err, MS_ERR_FORMAT, "%s: depformer has %d steps, expected dep_q = %d", weights_path,
                        steps, c->dep_q);
        goto fail;
    }
    c->variant = variant;
    TRY(lm_config_finish(c, err));
    int D = c->dim, dd = c->depformer_dim, H = c->hidden, Hd = c->dep_hidden;
    for (int i = 0; i < c->n_q; i++) {
        snprintf(name, sizeof name, "emb.%d.weight", i);
        TRY(get_mat(m, &m->emb[i], name, c->card + 1, D, err));
    }
    TRY(get_mat(m, &m->text_emb, "text_emb.weight", c->text_card + 1, D, err));
    TRY(get_mat(m, &m->text_linear, "text_linear.weight", c->text_card, D, err));
    TRY(get_alpha(m, &m->out_norm, "out_norm.alpha", D, err));
    m->layers = calloc((size_t)c->num_layers, sizeof *m->layers);
    m->dep_layers = calloc((size_t)c->depformer_num_layers, sizeof *m->dep_layers);
    if (!m->layers || !m->dep_layers) {
        rc = ms_err_set(err, MS_ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (int l = 0; l < c->num_layers; l++) {
        lm_layer_w *L = &m->layers[l];
#define P(fmt) (snprintf(name, sizeof name, "transformer.layers.%d." fmt, l), name)
        TRY(get_alpha(m, &L->norm1, P("norm1.alpha"), D, err));
        TRY(get_alpha(m, &L->norm2, P("norm2.alpha"), D, err));
        TRY(get_mat(m, &L->attn_in, P("self_attn.in_proj_weight"), 3 * D, D, err));
        TRY(get_mat(m, &L->attn_out, P("self_attn.out_proj.weight"), D, D, err));
        TRY(get_mat(m, &L->ffn_in, P("gating.linear_in.weight"), 2 * H, D, err));
        TRY(get_mat(m, &L->ffn_out, P("gating.linear_out.weight"), D, H, err));
#undef P
    }
    for (int k = 0; k < c->dep_q; k++) {
        snprintf(name, sizeof name, "depformer_in.%d.weight", k);
        TRY(get_mat(m, &m->dep_in[k], name, dd, D, err));
        snprintf(name, sizeof name, "linears.%d.weight", k);
        TRY(get_mat(m, &m->linears[k], name, c->card, dd, err));
        if (k + 1 < c->dep_q) {
            snprintf(name, sizeof name, "depformer_emb.%d.weight", k);
            TRY(get_mat(m, &m->dep_emb[k], name, c->card + 1, dd, err));
        }
    }
    TRY(get_mat(m, &m->dep_text_emb, "depformer_text_emb.weight", c->text_card + 1, dd, err));
    for (int l = 0; l < c->depformer_num_layers; l++) {
        lm_dep_layer_w *L = &m->dep_layers[l];
        kern_mat in, out;
#define P(fmt) (snprintf(name, sizeof name, "depformer.layers.%d." fmt, l), name)
        TRY(get_alpha(m, &L->norm1, P("norm1.alpha"), dd, err));
        TRY(get_alpha(m, &L->norm2, P("norm2.alpha"), dd, err));
        TRY(get_mat(m, &in, P("self_attn.in_proj_weight"), (int64_t)c->dep_q * 3 * dd, dd, err));
        TRY(get_mat(m, &out, P("self_attn.out_proj.weight"), (int64_t)c->dep_q * dd, dd, err));
        for (int k = 0; k < c->dep_q; k++) {
            L->attn_in[k] = kern_mat_rows(&in, k * 3 * dd, 3 * dd);
            L->attn_out[k] = kern_mat_rows(&out, k * dd, dd);
            snprintf(name, sizeof name, "depformer.layers.%d.gating.%d.linear_in.weight", l, k);
            TRY(get_mat(m, &L->ffn_in[k], name, 2 * Hd, dd, err));
            snprintf(name, sizeof name, "depformer.layers.%d.gating.%d.linear_out.weight", l, k);
            TRY(get_mat(m, &L->ffn_out[k], name, dd, Hd, err));
        }
#undef P
    }
    LOGI("lm_loaded", "file=%s variant=%s layers=%d dim=%d dep_q=%d weights_mb=%.1f copied_mb=%.1f", weights_path,
         lm_variant_name(c->variant), c->num_layers, c->dim, c->dep_q, m->weight_bytes / 1048576.0,
         m->copied_bytes / 1048576.0);
    return m;
fail:
    (void)rc;
    lm_model_free(m);
    return NULL;
}

lm_model *lm_model_load(const char *dir, lm_variant variant, ms_error *err) {
    char cfg[PATH_MAX], w[PATH_MAX];
    if (snprintf(cfg, sizeof cfg, "%s/config.json", dir) >= (int)sizeof cfg ||
        snprintf(w, sizeof w, "%s/model.safetensors", dir) >= (int)sizeof w) {
        ms_err_set(err, MS_ERR_ARG, "%s: path too long", dir);
        return NULL;
    }
    return lm_model_load_files(cfg, w, variant, err);
}
