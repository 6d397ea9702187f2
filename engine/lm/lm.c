/* lm.c - loading the Moshi LM's weights (see lm.h). */
#include "lm.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

const char *lm_variant_name(lm_variant v) {
    switch (v) {
    case LM_VARIANT_KYUTAI: return "kyutai";
    case LM_VARIANT_PERSONAPLEX: return "personaplex";
    default: return "auto";
    }
}

const char *lm_weights_name(lm_weights w) {
    switch (w) {
    case LM_WEIGHTS_BF16: return "bf16";
    case LM_WEIGHTS_INT8: return "int8";
    default: return "stored";
    }
}

int lm_weights_parse(const char *s, lm_weights *out) {
    static const lm_weights all[] = {LM_WEIGHTS_STORED, LM_WEIGHTS_BF16, LM_WEIGHTS_INT8};
    for (size_t i = 0; s && i < sizeof all / sizeof all[0]; i++)
        if (!strcmp(s, lm_weights_name(all[i]))) {
            *out = all[i];
            return 0;
        }
    return -1;
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

/* a float tensor `name` of shape (rows, cols) as a matrix, as stored */
static int get_mat(lm_model *m, kern_mat *out, const char *name, int64_t rows, int64_t cols, ms_error *err) {
    int64_t shape[2] = {rows, cols};
    const st_tensor *t = st_get(m->st, name, 2, shape, 1, ST_F32, err);
    if (!t) return err ? err->code : MS_ERR_FORMAT;
    *out = (kern_mat){.dtype = t->dtype, .rows = (int)rows, .cols = (int)cols};
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

/* a q8 checkpoint's int8 matrix `name` (rows, cols) and its `name`_scb
 * row absmax (rows) f32: scale = scb / 127 per row */
static int get_q8(lm_model *m, kern_mat *out, const char *name, int64_t rows, int64_t cols, ms_error *err) {
    int64_t shape[2] = {rows, cols};
    char sname[300];
    snprintf(sname, sizeof sname, "%s_scb", name);
    const st_tensor *t = st_get(m->st, name, 2, shape, 0, ST_I8, err);
    if (!t) return err ? err->code : MS_ERR_FORMAT;
    const st_tensor *sc = st_get(m->st, sname, 1, shape, 0, ST_F32, err);
    if (!sc) return err ? err->code : MS_ERR_FORMAT;
    float *s = own(m, sizeof(float) * (size_t)rows);
    if (!s) return ms_err_set(err, MS_ERR_NOMEM, "%s: tensor %s: out of memory", st_path(m->st), sname);
    st_to_f32(sc, 0, (size_t)rows, s);
    for (int64_t r = 0; r < rows; r++) {
        if (!isfinite(s[r]) || s[r] < 0)
            return ms_err_set(err, MS_ERR_FORMAT, "%s: tensor %s: row %lld: absmax %g is not a finite value >= 0",
                              st_path(m->st), sname, (long long)r, (double)s[r]);
        s[r] = s[r] / 127.0f;
    }
    *out = (kern_mat){.w = t->data, .dtype = ST_I8, .rows = (int)rows, .cols = (int)cols, .scale = s};
    m->weight_bytes += t->nbytes + sizeof(float) * (size_t)rows;
    return MS_OK;
}

/* a linear layer's matrix: from a q8 checkpoint, or as stored and then
 * converted per m->weights (INT8: quantized per row; BF16: rounded to
 * bf16; the stored bytes stay mapped and are not counted) */
static int get_lin(lm_model *m, kern_mat *out, const char *name, int64_t rows, int64_t cols, ms_error *err) {
    if (m->cfg.quantize) return get_q8(m, out, name, rows, cols, err);
    size_t before = m->weight_bytes;
    int rc = get_mat(m, out, name, rows, cols, err);
    if (rc != MS_OK) return rc;
    size_t n = (size_t)rows * (size_t)cols;
    if (m->weights == LM_WEIGHTS_INT8) {
        int8_t *q = own(m, n);
        float *s = own(m, sizeof(float) * (size_t)rows);
        if (!q || !s) return ms_err_set(err, MS_ERR_NOMEM, "%s: tensor %s: out of memory", st_path(m->st), name);
        kern_q8_quantize_rows(q, s, out->w, out->dtype, out->rows, out->cols);
        *out = (kern_mat){.w = q, .dtype = ST_I8, .rows = out->rows, .cols = out->cols, .scale = s};
        m->weight_bytes = before + n + sizeof(float) * (size_t)rows;
    } else if (m->weights == LM_WEIGHTS_BF16 && out->dtype != ST_BF16) {
        uint16_t *b = own(m, 2 * n);
        if (!b) return ms_err_set(err, MS_ERR_NOMEM, "%s: tensor %s: out of memory", st_path(m->st), name);
        const void *w = out->w;
        for (size_t i = 0; i < n; i++)
            b[i] = st_f32_to_bf16(out->dtype == ST_F16 ? st_f16_to_f32(((const uint16_t *)w)[i]) : ((const float *)w)[i]);
        out->w = b;
        out->dtype = ST_BF16;
        m->weight_bytes = before + 2 * n;
    }
    return MS_OK;
}

/* an attention projection of `mult` steps of `per` rows each: the released
 * concatenation `<pre>.<cat>` (rows mult * per), or per step
 * `<pre>.<each>.<k>.weight` (the module naming a q8 export writes) */
static int get_proj(lm_model *m, kern_mat *outs, const char *pre, const char *cat, const char *each, int mult,
                    int64_t per, int64_t cols, ms_error *err) {
    char name[300];
    snprintf(name, sizeof name, "%s.%s", pre, cat);
    if (st_find(m->st, name) || !m->cfg.quantize) {
        kern_mat all;
        int rc = get_lin(m, &all, name, (int64_t)mult * per, cols, err);
        if (rc != MS_OK) return rc;
        for (int k = 0; k < mult; k++) outs[k] = kern_mat_rows(&all, (int)(k * per), (int)per);
        return MS_OK;
    }
    for (int k = 0; k < mult; k++) {
        snprintf(name, sizeof name, "%s.%s.%d.weight", pre, each, k);
        int rc = get_lin(m, &outs[k], name, per, cols, err);
        if (rc != MS_OK) return rc;
    }
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
    if (!t && c->quantize && st_find(st, "depformer.layers.0.self_attn.in_projs.0.weight")) {
        /* a q8 export's module naming: one in_projs.<k> per step */
        int k = 0;
        char nm[128];
        do snprintf(nm, sizeof nm, "depformer.layers.0.self_attn.in_projs.%d.weight", ++k);
        while (k <= LM_MAX_DEP_Q && st_find(st, nm));
        if (k > LM_MAX_DEP_Q)
            return ms_err_set(err, MS_ERR_FORMAT, "%s: more than %d depformer steps", st_path(st), LM_MAX_DEP_Q);
        *steps = k;
        return MS_OK;
    }
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

/* allow_q8 0: a q8 checkpoint is refused (lm_model_load's callers) */
static lm_model *load_files(const char *config_path, const char *weights_path, lm_variant variant,
                            lm_weights weights, int allow_q8, ms_error *err) {
    lm_model *m = calloc(1, sizeof *m);
    if (!m) {
        ms_err_set(err, MS_ERR_NOMEM, "out of memory");
        return NULL;
    }
    int rc;
    char name[256];
    lm_config *c = &m->cfg;
    m->weights = weights;
    if (config_path)
        TRY(lm_config_load(c, config_path, err));
    else
        lm_config_default(c);
    if (c->quantize && !allow_q8) {
        rc = ms_err_set(err, MS_ERR_UNSUPPORTED,
                        "%s: \"quantize\": true (a q8 checkpoint) is read by the CPU backend only", config_path);
        goto fail;
    }
    if (c->quantize && weights == LM_WEIGHTS_BF16) {
        rc = ms_err_set(err, MS_ERR_UNSUPPORTED,
                        "%s: a q8 checkpoint (\"quantize\": true) runs in int8: weights \"stored\" or \"int8\", "
                        "not \"bf16\"", config_path);
        goto fail;
    }
    m->int8 = c->quantize || weights == LM_WEIGHTS_INT8;
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
    TRY(get_lin(m, &m->text_linear, "text_linear.weight", c->text_card, D, err));
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
        TRY(get_proj(m, &L->attn_in, P("self_attn"), "in_proj_weight", "in_projs", 1, 3 * D, D, err));
        TRY(get_proj(m, &L->attn_out, P("self_attn"), "out_proj.weight", "out_projs", 1, D, D, err));
        TRY(get_lin(m, &L->ffn_in, P("gating.linear_in.weight"), 2 * H, D, err));
        TRY(get_lin(m, &L->ffn_out, P("gating.linear_out.weight"), D, H, err));
#undef P
    }
    for (int k = 0; k < c->dep_q; k++) {
        snprintf(name, sizeof name, "depformer_in.%d.weight", k);
        TRY(get_lin(m, &m->dep_in[k], name, dd, D, err));
        snprintf(name, sizeof name, "linears.%d.weight", k);
        TRY(get_lin(m, &m->linears[k], name, c->card, dd, err));
        if (k + 1 < c->dep_q) {
            snprintf(name, sizeof name, "depformer_emb.%d.weight", k);
            TRY(get_mat(m, &m->dep_emb[k], name, c->card + 1, dd, err));
        }
    }
    TRY(get_mat(m, &m->dep_text_emb, "depformer_text_emb.weight", c->text_card + 1, dd, err));
    for (int l = 0; l < c->depformer_num_layers; l++) {
        lm_dep_layer_w *L = &m->dep_layers[l];
#define P(fmt) (snprintf(name, sizeof name, "depformer.layers.%d." fmt, l), name)
        TRY(get_alpha(m, &L->norm1, P("norm1.alpha"), dd, err));
        TRY(get_alpha(m, &L->norm2, P("norm2.alpha"), dd, err));
        TRY(get_proj(m, L->attn_in, P("self_attn"), "in_proj_weight", "in_projs", c->dep_q, 3 * dd, dd, err));
        TRY(get_proj(m, L->attn_out, P("self_attn"), "out_proj.weight", "out_projs", c->dep_q, dd, dd, err));
        for (int k = 0; k < c->dep_q; k++) {
            snprintf(name, sizeof name, "depformer.layers.%d.gating.%d.linear_in.weight", l, k);
            TRY(get_lin(m, &L->ffn_in[k], name, 2 * Hd, dd, err));
            snprintf(name, sizeof name, "depformer.layers.%d.gating.%d.linear_out.weight", l, k);
            TRY(get_lin(m, &L->ffn_out[k], name, dd, Hd, err));
        }
#undef P
    }
    LOGI("lm_loaded", "file=%s variant=%s layers=%d dim=%d dep_q=%d weights=%s%s weights_mb=%.1f copied_mb=%.1f",
         weights_path, lm_variant_name(c->variant), c->num_layers, c->dim, c->dep_q,
         m->int8 ? "int8" : lm_weights_name(weights), c->quantize ? " checkpoint=q8" : "",
         m->weight_bytes / 1048576.0, m->copied_bytes / 1048576.0);
    return m;
fail:
    (void)rc;
    lm_model_free(m);
    return NULL;
}

lm_model *lm_model_load_files(const char *config_path, const char *weights_path, lm_variant variant,
                              ms_error *err) {
    return load_files(config_path, weights_path, variant, LM_WEIGHTS_STORED, 0, err);
}

lm_model *lm_model_load_files_ex(const char *config_path, const char *weights_path, lm_variant variant,
                                 lm_weights weights, ms_error *err) {
    return load_files(config_path, weights_path, variant, weights, 1, err);
}

static lm_model *load_dir(const char *dir, lm_variant variant, lm_weights weights, int allow_q8, ms_error *err);

lm_model *lm_model_load(const char *dir, lm_variant variant, ms_error *err) {
    return load_dir(dir, variant, LM_WEIGHTS_STORED, 0, err);
}

lm_model *lm_model_load_ex(const char *dir, lm_variant variant, lm_weights weights, ms_error *err) {
    return load_dir(dir, variant, weights, 1, err);
}

/* model_dir/model.safetensors, or the q8 export's model.q8.safetensors when
 * config.json says "quantize" and only that file is there */
static lm_model *load_dir(const char *dir, lm_variant variant, lm_weights weights, int allow_q8, ms_error *err) {
    char cfg[PATH_MAX], w[PATH_MAX];
    if (snprintf(cfg, sizeof cfg, "%s/config.json", dir) >= (int)sizeof cfg ||
        snprintf(w, sizeof w, "%s/model.safetensors", dir) >= (int)sizeof w) {
        ms_err_set(err, MS_ERR_ARG, "%s: path too long", dir);
        return NULL;
    }
    if (access(w, F_OK) != 0) {
        char q8[PATH_MAX];
        if (snprintf(q8, sizeof q8, "%s/model.q8.safetensors", dir) < (int)sizeof q8 && access(q8, F_OK) == 0)
            snprintf(w, sizeof w, "%s", q8);
    }
    return load_files(cfg, w, variant, weights, allow_q8, err);
}
