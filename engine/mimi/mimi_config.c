/* mimi_config.c - the Mimi configuration: official defaults, JSON overrides
 * with the official key names, validation of what this implementation
 * supports. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "mimi.h"

void mimi_config_default(mimi_config *c) {
    memset(c, 0, sizeof(*c));
    c->sample_rate = 24000;
    c->channels = 1;
    c->frame_rate = 12.5;
    c->dimension = 512;
    c->n_filters = 64;
    c->n_residual_layers = 1;
    c->compress = 2;
    c->dilation_base = 2;
    c->kernel_size = 7;
    c->residual_kernel_size = 3;
    c->last_kernel_size = 3;
    c->n_ratios = 4;
    c->ratios[0] = 8; c->ratios[1] = 6; c->ratios[2] = 5; c->ratios[3] = 4;
    c->q_dimension = 256;
    c->q_n_q = 32;
    c->q_bins = 2048;
    c->d_model = 512;
    c->num_heads = 8;
    c->num_layers = 8;
    c->dim_feedforward = 2048;
    c->context = 250;
    c->max_period = 10000.0;
    c->layer_scale = 1;
    c->num_codebooks = 8;
    c->hop = 960;
    c->frame_samples = 1920;
    c->resample_stride = 2;
}

/* ---- typed member readers; each names the key path in its message ---- */

static int want_int(const js_value *o, const char *sect, const char *key, int lo, int hi,
                    int *dst, ms_error *err) {
    const js_value *v = js_get(o, key);
    if (!v) return MS_OK;
    if (v->type != JS_NUMBER || !v->is_int)
        return ms_err_set(err, MS_ERR_FORMAT, "mimi config: %s%s must be an integer", sect, key);
    if (v->i < lo || v->i > hi)
        return ms_err_set(err, MS_ERR_RANGE, "mimi config: %s%s = %lld outside [%d, %d]", sect,
                          key, (long long)v->i, lo, hi);
    *dst = (int)v->i;
    return MS_OK;
}

static int want_num(const js_value *o, const char *sect, const char *key, double lo, double hi,
                    double *dst, ms_error *err) {
    const js_value *v = js_get(o, key);
    if (!v) return MS_OK;
    if (v->type != JS_NUMBER)
        return ms_err_set(err, MS_ERR_FORMAT, "mimi config: %s%s must be a number", sect, key);
    if (!(v->num >= lo && v->num <= hi))
        return ms_err_set(err, MS_ERR_RANGE, "mimi config: %s%s = %g outside [%g, %g]", sect, key,
                          v->num, lo, hi);
    *dst = v->num;
    return MS_OK;
}

/* A key whose only supported value is a given string. */
static int want_str(const js_value *o, const char *sect, const char *key, const char *only,
                    ms_error *err) {
    const js_value *v = js_get(o, key);
    if (!v) return MS_OK;
    if (v->type != JS_STRING)
        return ms_err_set(err, MS_ERR_FORMAT, "mimi config: %s%s must be a string", sect, key);
    if (strcmp(v->str, only) != 0)
        return ms_err_set(err, MS_ERR_UNSUPPORTED, "mimi config: %s%s = \"%s\" unsupported (only \"%s\")",
                          sect, key, v->str, only);
    return MS_OK;
}

/* A key whose only supported value is a given boolean. */
static int want_bool(const js_value *o, const char *sect, const char *key, int only,
                     ms_error *err) {
    const js_value *v = js_get(o, key);
    if (!v) return MS_OK;
    if (v->type != JS_BOOL)
        return ms_err_set(err, MS_ERR_FORMAT, "mimi config: %s%s must be a boolean", sect, key);
    if ((int)v->boolean != only)
        return ms_err_set(err, MS_ERR_UNSUPPORTED, "mimi config: %s%s = %s unsupported", sect, key,
                          v->boolean ? "true" : "false");
    return MS_OK;
}

/* A training-only key: any number or boolean (or null) is accepted and ignored. */
static int want_any_scalar(const js_value *o, const char *sect, const char *key, ms_error *err) {
    const js_value *v = js_get(o, key);
    if (!v || v->type == JS_NUMBER || v->type == JS_BOOL || v->type == JS_NULL) return MS_OK;
    return ms_err_set(err, MS_ERR_FORMAT, "mimi config: %s%s must be a number or boolean", sect, key);
}

/* Refuse members not in the NULL-terminated list `known`, and repeated keys. */
static int check_keys(const js_value *o, const char *sect, const char *const *known, ms_error *err) {
    if (o->type != JS_OBJECT)
        return ms_err_set(err, MS_ERR_FORMAT, "mimi config: %s must be an object",
                          sect[0] ? sect : "the top level");
    for (const js_value *m = o->child; m; m = m->next) {
        int ok = 0;
        for (const char *const *k = known; *k; k++)
            if (strcmp(*k, m->key) == 0) ok = 1;
        if (!ok)
            return ms_err_set(err, MS_ERR_UNSUPPORTED, "mimi config: unknown key %s%s", sect, m->key);
    }
    return MS_OK;
}

#define TRY(x) do { int rc_ = (x); if (rc_) return rc_; } while (0)

static int parse_seanet(mimi_config *c, const js_value *o, ms_error *err) {
    static const char *const keys[] = {
        "channels", "dimension", "causal", "n_filters", "n_residual_layers", "activation",
        "activation_params", "compress", "dilation_base", "disable_norm_outer_blocks",
        "kernel_size", "residual_kernel_size", "last_kernel_size", "norm", "norm_params",
        "pad_mode", "ratios", "true_skip", "final_activation", "trim_right_ratio", NULL};
    const char *s = "seanet.";
    TRY(check_keys(o, "seanet.", keys, err));
    int ch = c->channels;
    TRY(want_int(o, s, "channels", 1, 1, &ch, err));
    TRY(want_int(o, s, "dimension", 1, MIMI_MAX_CHANNELS, &c->dimension, err));
    TRY(want_bool(o, s, "causal", 1, err));
    TRY(want_int(o, s, "n_filters", 1, MIMI_MAX_CHANNELS, &c->n_filters, err));
    TRY(want_int(o, s, "n_residual_layers", 0, MIMI_MAX_LAYERS, &c->n_residual_layers, err));
    TRY(want_str(o, s, "activation", "ELU", err));
    const js_value *ap = js_get(o, "activation_params");
    if (ap) {
        static const char *const akeys[] = {"alpha", NULL};
        double alpha = 1.0;
        TRY(check_keys(ap, "seanet.activation_params.", akeys, err));
        TRY(want_num(ap, "seanet.activation_params.", "alpha", 1.0, 1.0, &alpha, err));
    }
    TRY(want_int(o, s, "compress", 1, MIMI_MAX_CHANNELS, &c->compress, err));
    TRY(want_int(o, s, "dilation_base", 1, MIMI_MAX_KERNEL, &c->dilation_base, err));
    int dnob = 0;
    TRY(want_int(o, s, "disable_norm_outer_blocks", 0, MIMI_MAX_RATIOS + 2, &dnob, err));
    TRY(want_int(o, s, "kernel_size", 1, MIMI_MAX_KERNEL, &c->kernel_size, err));
    TRY(want_int(o, s, "residual_kernel_size", 1, MIMI_MAX_KERNEL, &c->residual_kernel_size, err));
    TRY(want_int(o, s, "last_kernel_size", 1, MIMI_MAX_KERNEL, &c->last_kernel_size, err));
    TRY(want_str(o, s, "norm", "none", err));
    const js_value *np = js_get(o, "norm_params");
    if (np && (np->type != JS_OBJECT || np->len != 0))
        return ms_err_set(err, MS_ERR_UNSUPPORTED, "mimi config: seanet.norm_params must be {}");
    TRY(want_str(o, s, "pad_mode", "constant", err));
    TRY(want_bool(o, s, "true_skip", 1, err));
    const js_value *fa = js_get(o, "final_activation");
    if (fa && fa->type != JS_NULL)
        return ms_err_set(err, MS_ERR_UNSUPPORTED, "mimi config: seanet.final_activation must be null");
    double trr = 1.0;
    TRY(want_num(o, s, "trim_right_ratio", 1.0, 1.0, &trr, err));
    const js_value *r = js_get(o, "ratios");
    if (r) {
        if (r->type != JS_ARRAY || r->len < 1 || r->len > MIMI_MAX_RATIOS)
            return ms_err_set(err, MS_ERR_FORMAT, "mimi config: seanet.ratios must be an array of 1..%d integers",
                              MIMI_MAX_RATIOS);
        c->n_ratios = (int)r->len;
        int i = 0;
        for (const js_value *e = r->child; e; e = e->next, i++) {
            if (e->type != JS_NUMBER || !e->is_int || e->i < 1 || e->i > MIMI_MAX_KERNEL / 2)
                return ms_err_set(err, MS_ERR_RANGE, "mimi config: seanet.ratios[%d] must be an integer in [1, %d]",
                                  i, MIMI_MAX_KERNEL / 2);
            c->ratios[i] = (int)e->i;
        }
    }
    return MS_OK;
}

static int parse_quantizer(mimi_config *c, const js_value *o, int *in_dim, int *out_dim, ms_error *err) {
    static const char *const keys[] = {
        "dimension", "n_q", "bins", "input_dimension", "output_dimension", "n_q_semantic",
        "q_dropout", "no_quantization_rate", "decay", "threshold_usage_ratio",
        "replaced_usage_ratio", NULL};
    const char *s = "quantizer.";
    TRY(check_keys(o, s, keys, err));
    TRY(want_int(o, s, "dimension", 1, MIMI_MAX_CHANNELS, &c->q_dimension, err));
    TRY(want_int(o, s, "n_q", 2, MIMI_MAX_CODEBOOKS, &c->q_n_q, err));
    TRY(want_int(o, s, "bins", 1, MIMI_MAX_BINS, &c->q_bins, err));
    TRY(want_int(o, s, "input_dimension", 1, MIMI_MAX_CHANNELS, in_dim, err));
    TRY(want_int(o, s, "output_dimension", 1, MIMI_MAX_CHANNELS, out_dim, err));
    int sem = 1;
    TRY(want_int(o, s, "n_q_semantic", 1, 1, &sem, err));
    static const char *const ignored[] = {"q_dropout", "no_quantization_rate", "decay",
                                          "threshold_usage_ratio", "replaced_usage_ratio", NULL};
    for (const char *const *k = ignored; *k; k++) TRY(want_any_scalar(o, s, *k, err));
    return MS_OK;
}

static int parse_transformer(mimi_config *c, const js_value *o, int *in_dim, int *out_dim,
                             ms_error *err) {
    static const char *const keys[] = {
        "d_model", "num_heads", "num_layers", "causal", "layer_scale", "context", "conv_layout",
        "max_period", "gating", "norm", "positional_embedding", "dim_feedforward",
        "input_dimension", "output_dimensions", "kv_repeat", NULL};
    const char *s = "transformer.";
    TRY(check_keys(o, s, keys, err));
    TRY(want_int(o, s, "d_model", 1, MIMI_MAX_CHANNELS, &c->d_model, err));
    TRY(want_int(o, s, "num_heads", 1, MIMI_MAX_CHANNELS, &c->num_heads, err));
    TRY(want_int(o, s, "num_layers", 0, MIMI_MAX_LAYERS, &c->num_layers, err));
    TRY(want_bool(o, s, "causal", 1, err));
    const js_value *ls = js_get(o, "layer_scale");
    if (ls) {
        if (ls->type == JS_NULL) c->layer_scale = 0;
        else if (ls->type == JS_NUMBER) c->layer_scale = 1;
        else return ms_err_set(err, MS_ERR_FORMAT, "mimi config: transformer.layer_scale must be a number or null");
    }
    const js_value *ctx = js_get(o, "context");
    if (ctx && ctx->type == JS_NULL)
        return ms_err_set(err, MS_ERR_UNSUPPORTED, "mimi config: transformer.context = null unsupported (streaming needs a finite context)");
    TRY(want_int(o, s, "context", 1, MIMI_MAX_CONTEXT, &c->context, err));
    TRY(want_bool(o, s, "conv_layout", 1, err));
    TRY(want_num(o, s, "max_period", 1.0, 1e12, &c->max_period, err));
    TRY(want_str(o, s, "gating", "none", err));
    TRY(want_str(o, s, "norm", "layer_norm", err));
    TRY(want_str(o, s, "positional_embedding", "rope", err));
    TRY(want_int(o, s, "dim_feedforward", 1, MIMI_MAX_CHANNELS, &c->dim_feedforward, err));
    TRY(want_int(o, s, "input_dimension", 1, MIMI_MAX_CHANNELS, in_dim, err));
    int kvr = 1;
    TRY(want_int(o, s, "kv_repeat", 1, 1, &kvr, err));
    const js_value *od = js_get(o, "output_dimensions");
    if (od) {
        if (od->type != JS_ARRAY || od->len != 1 || od->child->type != JS_NUMBER || !od->child->is_int ||
            od->child->i < 1 || od->child->i > MIMI_MAX_CHANNELS)
            return ms_err_set(err, MS_ERR_UNSUPPORTED,
                              "mimi config: transformer.output_dimensions must hold exactly one dimension");
        *out_dim = (int)od->child->i;
    }
    return MS_OK;
}

/* Derived values and cross-checks once every key is read. */
static int finish(mimi_config *c, int q_in, int q_out, int t_in, int t_out, ms_error *err) {
    long hop = 1;
    for (int i = 0; i < c->n_ratios; i++) hop *= c->ratios[i];
    if (hop > MIMI_MAX_FRAME)
        return ms_err_set(err, MS_ERR_RANGE, "mimi config: product of seanet.ratios %ld too large", hop);
    c->hop = (int)hop;
    double fs = c->sample_rate / c->frame_rate;
    if (fabs(fs - floor(fs + 0.5)) > 1e-9 || fs < 1 || fs > MIMI_MAX_FRAME)
        return ms_err_set(err, MS_ERR_UNSUPPORTED,
                          "mimi config: sample_rate / frame_rate = %g is not a whole number of samples in [1, %d]",
                          fs, MIMI_MAX_FRAME);
    c->frame_samples = (int)floor(fs + 0.5);
    if (c->frame_samples % c->hop != 0)
        return ms_err_set(err, MS_ERR_UNSUPPORTED,
                          "mimi config: frame of %d samples is not a multiple of the SEANet hop %d",
                          c->frame_samples, c->hop);
    c->resample_stride = c->frame_samples / c->hop;
    if (2 * c->resample_stride > MIMI_MAX_KERNEL)
        return ms_err_set(err, MS_ERR_UNSUPPORTED, "mimi config: resampling stride %d too large",
                          c->resample_stride);
    long widest = (long)c->n_filters << c->n_ratios;
    if (widest > MIMI_MAX_CHANNELS)
        return ms_err_set(err, MS_ERR_RANGE, "mimi config: widest SEANet layer %ld channels exceeds %d",
                          widest, MIMI_MAX_CHANNELS);
    if (c->n_filters / c->compress < 1)
        return ms_err_set(err, MS_ERR_RANGE, "mimi config: seanet.compress %d leaves no channels", c->compress);
    long dil = 1;
    for (int j = 1; j < c->n_residual_layers; j++) {
        dil *= c->dilation_base;
        if ((c->residual_kernel_size - 1) * dil + 1 > 16 * MIMI_MAX_KERNEL)
            return ms_err_set(err, MS_ERR_RANGE, "mimi config: residual dilation too large");
    }
    if (c->d_model != c->dimension || t_in != c->dimension || t_out != c->dimension)
        return ms_err_set(err, MS_ERR_UNSUPPORTED,
                          "mimi config: transformer d_model/input/output dimensions (%d/%d/%d) must equal seanet.dimension %d",
                          c->d_model, t_in, t_out, c->dimension);
    if (q_in != c->dimension || q_out != c->dimension)
        return ms_err_set(err, MS_ERR_UNSUPPORTED,
                          "mimi config: quantizer input/output dimensions (%d/%d) must equal seanet.dimension %d",
                          q_in, q_out, c->dimension);
    if (c->d_model % c->num_heads != 0 || (c->d_model / c->num_heads) % 2 != 0)
        return ms_err_set(err, MS_ERR_UNSUPPORTED,
                          "mimi config: d_model %d / num_heads %d must be an even head size",
                          c->d_model, c->num_heads);
    double kv = 2.0 * 2.0 * c->num_layers * c->context * (double)c->d_model * sizeof(float);
    if (kv > MIMI_MAX_STREAM_BYTES)
        return ms_err_set(err, MS_ERR_LIMIT, "mimi config: K/V rings of %.0f MB per stream exceed %d MB",
                          kv / 1e6, MIMI_MAX_STREAM_BYTES >> 20);
    if (c->num_codebooks < 1 || c->num_codebooks > c->q_n_q)
        return ms_err_set(err, MS_ERR_RANGE, "mimi config: num_codebooks %d outside [1, quantizer.n_q = %d]",
                          c->num_codebooks, c->q_n_q);
    return MS_OK;
}

int mimi_config_parse(mimi_config *c, const char *text, size_t len, ms_error *err) {
    static const char *const keys[] = {"sample_rate", "channels", "frame_rate", "seanet",
                                       "quantizer", "transformer", "num_codebooks", NULL};
    mimi_config_default(c);
    if (len > MIMI_MAX_CONFIG_BYTES)
        return ms_err_set(err, MS_ERR_LIMIT, "mimi config: %zu bytes exceeds %d", len, MIMI_MAX_CONFIG_BYTES);
    js_value *root = js_parse(text, len, err);
    if (!root) {
        ms_err_prefix(err, "mimi config");
        return err ? err->code : MS_ERR_FORMAT;
    }
    int rc = MS_OK;
    int q_in = c->dimension, q_out = c->dimension, t_in = c->dimension, t_out = c->dimension;
    const char *dup = NULL;
    if (js_has_duplicate_keys(root, &dup)) {
        rc = ms_err_set(err, MS_ERR_FORMAT, "mimi config: key \"%s\" repeated", dup);
        goto out;
    }
    if ((rc = check_keys(root, "", keys, err))) goto out;
    if ((rc = want_int(root, "", "sample_rate", 1, 1000000, &c->sample_rate, err))) goto out;
    if ((rc = want_int(root, "", "channels", 1, 1, &c->channels, err))) goto out;
    if ((rc = want_num(root, "", "frame_rate", 1e-3, 1e6, &c->frame_rate, err))) goto out;
    if ((rc = want_int(root, "", "num_codebooks", 1, MIMI_MAX_CODEBOOKS, &c->num_codebooks, err))) goto out;
    const js_value *v;
    if ((v = js_get(root, "seanet")) && (rc = parse_seanet(c, v, err))) goto out;
    q_in = q_out = t_in = t_out = c->dimension;   /* official: these follow seanet.dimension */
    if ((v = js_get(root, "transformer"))) {
        const js_value *dm = js_get(v, "d_model");
        if (!dm) c->d_model = c->dimension;
        if ((rc = parse_transformer(c, v, &t_in, &t_out, err))) goto out;
    } else {
        c->d_model = c->dimension;
    }
    if ((v = js_get(root, "quantizer")) && (rc = parse_quantizer(c, v, &q_in, &q_out, err))) goto out;
    rc = finish(c, q_in, q_out, t_in, t_out, err);
out:
    js_free(root);
    return rc;
}

int mimi_config_load(mimi_config *c, const char *path, ms_error *err) {
    mimi_config_default(c);
    if (!path) return MS_OK;
    FILE *f = fopen(path, "rb");
    if (!f) return ms_err_set(err, MS_ERR_IO, "%s: %s", path, strerror(errno));
    char *buf = malloc(MIMI_MAX_CONFIG_BYTES + 1);
    if (!buf) {
        fclose(f);
        return ms_err_set(err, MS_ERR_NOMEM, "%s: out of memory", path);
    }
    size_t n = fread(buf, 1, MIMI_MAX_CONFIG_BYTES + 1, f);
    int bad = ferror(f);
    fclose(f);
    int rc;
    if (bad) rc = ms_err_set(err, MS_ERR_IO, "%s: read error", path);
    else if (n > MIMI_MAX_CONFIG_BYTES)
        rc = ms_err_set(err, MS_ERR_LIMIT, "%s: larger than %d bytes", path, MIMI_MAX_CONFIG_BYTES);
    else {
        rc = mimi_config_parse(c, buf, n, err);
        if (rc) ms_err_prefix(err, "%s", path);
    }
    free(buf);
    return rc;
}
