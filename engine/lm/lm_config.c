/* lm_config.c - config.json of the Moshi LM (see lm_config.h). */
#include "lm_config.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "log.h"

static const int default_delays[17] = {0, 0, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1};

void lm_config_default(lm_config *c) {
    memset(c, 0, sizeof *c);
    c->dim = 4096;
    c->num_heads = 32;
    c->num_layers = 32;
    c->hidden_scale = 4.125;
    c->context = 3000;
    c->max_period = 10000;
    c->n_q = 16;
    c->dep_q = 8;
    c->card = 2048;
    c->text_card = 32000;
    memcpy(c->delays, default_delays, sizeof default_delays);
    c->existing_text_padding_id = LM_TEXT_PAD_ID;
    c->depformer_dim = 1024;
    c->depformer_num_heads = 16;
    c->depformer_num_layers = 6;
    c->depformer_dim_feedforward = (int)(4.125 * 1024);
    c->variant = LM_VARIANT_AUTO;
    ms_error e;
    int rc = lm_config_finish(c, &e);
    MS_ASSERT(rc == MS_OK);
}

int lm_gated_hidden(int dim, int dim_feedforward) {
    return dim_feedforward == 4 * dim ? (21 * dim) / 8 : (2 * dim_feedforward) / 3;
}

int lm_config_finish(lm_config *c, ms_error *err) {
#define NEED(cond, ...) do { if (!(cond)) return ms_err_set(err, MS_ERR_RANGE, __VA_ARGS__); } while (0)
    NEED(c->dim > 0 && c->dim <= LM_MAX_DIM, "dim %d out of range", c->dim);
    NEED(c->num_heads > 0 && c->num_heads <= LM_MAX_HEADS && c->dim % c->num_heads == 0,
         "num_heads %d does not divide dim %d", c->num_heads, c->dim);
    NEED((c->dim / c->num_heads) % 2 == 0, "head size %d is odd (RoPE needs pairs)", c->dim / c->num_heads);
    NEED(c->num_layers > 0 && c->num_layers <= LM_MAX_LAYERS, "num_layers %d out of range", c->num_layers);
    NEED(c->hidden_scale > 0 && c->hidden_scale <= 64, "hidden_scale %g out of range", c->hidden_scale);
    NEED(c->context > 0 && c->context <= LM_MAX_CONTEXT, "context %d out of range", c->context);
    NEED(c->max_period > 1, "max_period %g out of range", c->max_period);
    NEED(c->n_q > 0 && c->n_q <= LM_MAX_NQ, "n_q %d out of range (1..%d)", c->n_q, LM_MAX_NQ);
    NEED(c->dep_q > 0 && c->dep_q <= LM_MAX_DEP_Q && c->dep_q <= c->n_q,
         "dep_q %d out of range (1..min(n_q, %d))", c->dep_q, LM_MAX_DEP_Q);
    NEED(c->card > 1 && c->card <= LM_MAX_CARD, "card %d out of range", c->card);
    NEED(c->text_card > 1 && c->text_card <= LM_MAX_CARD, "text_card %d out of range", c->text_card);
    NEED(c->existing_text_padding_id >= 0 && c->existing_text_padding_id < c->text_card,
         "existing_text_padding_id %d out of range", c->existing_text_padding_id);
    NEED(c->depformer_dim > 0 && c->depformer_dim <= LM_MAX_DIM, "depformer_dim %d out of range", c->depformer_dim);
    NEED(c->depformer_num_heads > 0 && c->depformer_num_heads <= LM_MAX_HEADS &&
         c->depformer_dim % c->depformer_num_heads == 0,
         "depformer_num_heads %d does not divide depformer_dim %d", c->depformer_num_heads, c->depformer_dim);
    NEED(c->depformer_num_layers > 0 && c->depformer_num_layers <= LM_MAX_LAYERS,
         "depformer_num_layers %d out of range", c->depformer_num_layers);
    NEED(c->depformer_dim_feedforward > 0 && c->depformer_dim_feedforward <= 64 * LM_MAX_DIM,
         "depformer_dim_feedforward %d out of range", c->depformer_dim_feedforward);
    c->n_streams = 1 + c->n_q;
    c->n_user = c->n_q - c->dep_q;
    c->head_dim = c->dim / c->num_heads;
    c->dep_head_dim = c->depformer_dim / c->depformer_num_heads;
    double ff = c->hidden_scale * c->dim;
    NEED(ff >= 3 && ff < 64.0 * LM_MAX_DIM, "hidden_scale * dim = %g out of range", ff);
    c->hidden = lm_gated_hidden(c->dim, (int)ff);
    c->dep_hidden = lm_gated_hidden(c->depformer_dim, c->depformer_dim_feedforward);
    NEED(c->hidden > 0 && c->dep_hidden > 0, "feed-forward width rounds to 0");
    c->max_delay = 0;
    for (int s = 0; s < c->n_streams; s++) {
        NEED(c->delays[s] >= 0 && c->delays[s] <= LM_MAX_DELAY, "delays[%d] = %d out of range (0..%d)", s,
             c->delays[s], LM_MAX_DELAY);
        if (c->delays[s] > c->max_delay) c->max_delay = c->delays[s];
    }
    /* PersonaPlex attends over one row fewer than its rings hold (lm_config.h) */
    int pp = c->variant == LM_VARIANT_PERSONAPLEX;
    NEED(!pp || c->context >= 2, "context %d: PersonaPlex attends over context - 1 positions", c->context);
    c->window = pp ? c->context - 1 : c->context;
    c->dep_window = pp ? c->dep_q - 1 : c->dep_q;
#undef NEED
    return MS_OK;
}

/* How a config.json key is treated. */
enum { K_INT, K_BOOL, K_NUM, K_DELAYS, K_INT_OR_NULL, K_IGNORE, K_REQ_STR, K_REQ_BOOL, K_REQ_NULL, K_REQ_NULL_OR_INT };

/* What an absent key means: the official LMModel constructor default
 * applies (the loader passes config.json as its keyword arguments). */
enum { A_OK, A_REFUSE, A_REQUIRED };

typedef struct {
    const char *key;
    int kind;
    size_t off;          /* K_INT, K_NUM, K_INT_OR_NULL */
    const char *want;    /* K_REQ_STR: the only value implemented; K_REQ_BOOL: "true"/"false" */
    int absent;          /* A_OK: the official default is what moshid computes (or the
                            field's base value below is that default); A_REFUSE: the
                            default is not implemented; A_REQUIRED: no usable default */
    const char *dflt;    /* the official default, for messages */
} key_rule;

#define OFF(f) offsetof(lm_config, f)
static const key_rule rules[] = {
    {"dim", K_INT, OFF(dim), NULL, A_OK, NULL},
    {"num_heads", K_INT, OFF(num_heads), NULL, A_OK, NULL},
    {"num_layers", K_INT, OFF(num_layers), NULL, A_REQUIRED, "(none: LMModel needs it)"},
    {"hidden_scale", K_NUM, OFF(hidden_scale), NULL, A_OK, NULL},
    {"context", K_INT, OFF(context), NULL, A_REQUIRED, "None: unbounded, no streaming K/V"},
    {"max_period", K_NUM, OFF(max_period), NULL, A_OK, NULL},
    {"n_q", K_INT, OFF(n_q), NULL, A_OK, NULL},
    {"dep_q", K_INT, OFF(dep_q), NULL, A_OK, NULL},
    {"card", K_INT, OFF(card), NULL, A_OK, NULL},
    {"text_card", K_INT, OFF(text_card), NULL, A_OK, NULL},
    {"delays", K_DELAYS, 0, NULL, A_REQUIRED, "[0]"},
    {"existing_text_padding_id", K_INT, OFF(existing_text_padding_id), NULL, A_OK, NULL},
    {"depformer_dim", K_INT, OFF(depformer_dim), NULL, A_OK, NULL},
    {"depformer_num_heads", K_INT, OFF(depformer_num_heads), NULL, A_OK, NULL},
    {"depformer_num_layers", K_INT, OFF(depformer_num_layers), NULL, A_OK, NULL},
    {"depformer_dim_feedforward", K_INT_OR_NULL, OFF(depformer_dim_feedforward), NULL, A_OK, NULL},
    /* what moshid computes: any other value is refused */
    {"gating", K_REQ_STR, 0, "silu", A_REFUSE, "\"none\""},
    {"depformer_gating", K_REQ_STR, 0, "silu", A_OK, NULL},
    {"norm", K_REQ_STR, 0, "rms_norm_f32", A_REFUSE, "\"layer_norm\""},
    {"positional_embedding", K_REQ_STR, 0, "rope", A_REFUSE, "\"sin\""},
    {"depformer_pos_emb", K_REQ_STR, 0, "none", A_REFUSE, "\"sin\""},
    {"causal", K_REQ_BOOL, 0, "true", A_OK, NULL},
    {"depformer_multi_linear", K_REQ_BOOL, 0, "true", A_REFUSE, "false"},
    {"depformer_weights_per_step", K_REQ_BOOL, 0, "true", A_REFUSE, "false"},
    {"norm_emb", K_REQ_BOOL, 0, "false", A_OK, NULL},
    {"bias_proj", K_REQ_BOOL, 0, "false", A_OK, NULL},
    {"demux_second_text_stream", K_REQ_BOOL, 0, "false", A_OK, NULL},
    {"demux_second_stream", K_REQ_BOOL, 0, "false", A_OK, NULL},
    {"quantize", K_BOOL, OFF(quantize), NULL, A_OK, NULL},   /* true: Kyutai's q8 format (lm.h) */
    {"lora", K_REQ_BOOL, 0, "false", A_OK, NULL},
    {"cross_attention", K_REQ_BOOL, 0, "false", A_OK, NULL},
    {"layer_scale", K_REQ_NULL, 0, NULL, A_OK, NULL},
    {"depformer_layer_scale", K_REQ_NULL, 0, NULL, A_OK, NULL},
    {"depformer_weights_per_step_schedule", K_REQ_NULL, 0, NULL, A_OK, NULL},
    {"depformer_low_rank_embeddings", K_REQ_NULL, 0, NULL, A_OK, NULL},
    {"depformer_norm", K_REQ_NULL, 0, NULL, A_OK, NULL},
    {"conditioners", K_REQ_NULL, 0, NULL, A_OK, NULL},
    {"fuser", K_REQ_NULL, 0, NULL, A_OK, NULL},
    {"text_card_out", K_REQ_NULL_OR_INT, 0, NULL, A_OK, NULL},
    {"kv_repeat", K_REQ_NULL_OR_INT, 0, NULL, A_OK, NULL},
    /* loader keys and options with no effect on the step */
    {"moshi_name", K_IGNORE, 0, NULL, A_OK, NULL},
    {"mimi_name", K_IGNORE, 0, NULL, A_OK, NULL},
    {"tokenizer_name", K_IGNORE, 0, NULL, A_OK, NULL},
    {"mimi_config_name", K_IGNORE, 0, NULL, A_OK, NULL},
    {"tts_config", K_IGNORE, 0, NULL, A_OK, NULL},
    {"stt_config", K_IGNORE, 0, NULL, A_OK, NULL},
    {"model_id", K_IGNORE, 0, NULL, A_OK, NULL},
    {"model_type", K_IGNORE, 0, NULL, A_OK, NULL},
    {"lm_gen_config", K_IGNORE, 0, NULL, A_OK, NULL},
    {"lora_name", K_IGNORE, 0, NULL, A_OK, NULL},
    {"lora_rank", K_IGNORE, 0, NULL, A_OK, NULL},
    {"lora_scaling", K_IGNORE, 0, NULL, A_OK, NULL},
    {"existing_text_end_padding_id", K_IGNORE, 0, NULL, A_OK, NULL},
    {"extra_heads_num_heads", K_IGNORE, 0, NULL, A_OK, NULL},
    {"extra_heads_dim", K_IGNORE, 0, NULL, A_OK, NULL},
    {"depformer_context", K_IGNORE, 0, NULL, A_OK, NULL},       /* the official code overrides it with None */
    {"depformer_max_period", K_IGNORE, 0, NULL, A_OK, NULL},    /* no positional embedding in the depformer */
    {"depformer_causal", K_IGNORE, 0, NULL, A_OK, NULL},        /* deprecated, popped by the loader */
    {"gradient_checkpointing", K_IGNORE, 0, NULL, A_OK, NULL},
};
#undef OFF

static int get_int(const js_value *v, const char *name, const char *key, int *out, ms_error *err) {
    if (v->type != JS_NUMBER || !v->is_int || v->i < -2147483647 || v->i > 2147483647)
        return ms_err_set(err, MS_ERR_FORMAT, "%s: key \"%s\": expected an integer", name, key);
    *out = (int)v->i;
    return MS_OK;
}

/* apply_rule: MS_OK or an error code; *ndelays set for "delays" */
static int apply_rule(lm_config *c, const key_rule *r, const js_value *v, const char *name, int *ndelays,
                      ms_error *err) {
    char *base = (char *)c;
    switch (r->kind) {
    case K_INT:
        return get_int(v, name, r->key, (int *)(base + r->off), err);
    case K_INT_OR_NULL:
        if (v->type == JS_NULL) return MS_OK;   /* official default: int(hidden_scale * depformer_dim) */
        if (v->type == JS_ARRAY)
            return ms_err_set(err, MS_ERR_UNSUPPORTED, "%s: key \"%s\": per-step widths are not implemented",
                              name, r->key);
        return get_int(v, name, r->key, (int *)(base + r->off), err);
    case K_BOOL:
        if (v->type != JS_BOOL)
            return ms_err_set(err, MS_ERR_FORMAT, "%s: key \"%s\": expected true or false", name, r->key);
        *(int *)(base + r->off) = v->boolean != 0;
        return MS_OK;
    case K_NUM:
        if (v->type != JS_NUMBER)
            return ms_err_set(err, MS_ERR_FORMAT, "%s: key \"%s\": expected a number", name, r->key);
        *(double *)(base + r->off) = v->num;
        return MS_OK;
    case K_DELAYS:
        if (v->type != JS_ARRAY || v->len < 1 || v->len > LM_MAX_STREAMS)
            return ms_err_set(err, MS_ERR_FORMAT, "%s: key \"delays\": expected an array of 1..%d integers", name,
                              LM_MAX_STREAMS);
        for (size_t i = 0; i < v->len; i++) {
            int rc = get_int(js_at(v, i), name, "delays", &c->delays[i], err);
            if (rc != MS_OK) return rc;
        }
        *ndelays = (int)v->len;   /* checked against n_q by the caller */
        return MS_OK;
    case K_REQ_STR:
        if (v->type != JS_STRING || strcmp(v->str, r->want) != 0)
            return ms_err_set(err, MS_ERR_UNSUPPORTED, "%s: key \"%s\": only \"%s\" is implemented", name, r->key,
                              r->want);
        return MS_OK;
    case K_REQ_BOOL:
        if (v->type != JS_BOOL || v->boolean != (strcmp(r->want, "true") == 0))
            return ms_err_set(err, MS_ERR_UNSUPPORTED, "%s: key \"%s\": only %s is implemented", name, r->key,
                              r->want);
        return MS_OK;
    case K_REQ_NULL:
        if (v->type != JS_NULL && !(v->type == JS_OBJECT && v->len == 0) && !(v->type == JS_ARRAY && v->len == 0))
            return ms_err_set(err, MS_ERR_UNSUPPORTED, "%s: key \"%s\": not implemented (only null)", name, r->key);
        return MS_OK;
    case K_REQ_NULL_OR_INT: {
        if (v->type == JS_NULL) return MS_OK;
        int x = 0;
        if (get_int(v, name, r->key, &x, err)) return err ? err->code : MS_ERR_FORMAT;
        int ok = strcmp(r->key, "kv_repeat") == 0 ? x == 1 : x == c->text_card;
        if (!ok)
            return ms_err_set(err, MS_ERR_UNSUPPORTED, "%s: key \"%s\" = %d is not implemented", name, r->key, x);
        return MS_OK;
    }
    default:
        return MS_OK;
    }
}

/* the official LMModel / StreamingTransformer constructor defaults of the
 * fields moshid reads (moshi 0.2.13) */
static void lmmodel_defaults(lm_config *c) {
    memset(c, 0, sizeof *c);
    c->dim = 128;
    c->num_heads = 8;
    c->hidden_scale = 4;
    c->max_period = 10000;
    c->n_q = 8;
    c->dep_q = 8;
    c->card = 1024;
    c->text_card = 32000;
    c->existing_text_padding_id = LM_TEXT_PAD_ID;
    c->depformer_dim = 256;
    c->depformer_num_heads = -1;    /* absent: the main transformer's */
    c->depformer_num_layers = -1;
    c->variant = LM_VARIANT_AUTO;
}

int lm_config_parse(lm_config *c, const char *text, size_t len, const char *name, ms_error *err) {
    lmmodel_defaults(c);
    uint8_t seen[sizeof rules / sizeof rules[0]] = {0};
    js_value *root = js_parse(text, len, err);
    if (!root) {
        ms_err_prefix(err, "%s", name);
        return err ? err->code : MS_ERR_FORMAT;
    }
    int rc = MS_OK, ndelays = 0, ff_given = 0;
    const char *dup;
    if (root->type != JS_OBJECT) {
        rc = ms_err_set(err, MS_ERR_FORMAT, "%s: expected a JSON object", name);
        goto out;
    }
    if (js_has_duplicate_keys(root, &dup)) {
        rc = ms_err_set(err, MS_ERR_FORMAT, "%s: key \"%s\" appears twice", name, dup);
        goto out;
    }
    /* text_card first: text_card_out is checked against it */
    const js_value *tc = js_get(root, "text_card");
    if (tc && (rc = get_int(tc, name, "text_card", &c->text_card, err)) != MS_OK) goto out;
    for (const js_value *m = root->child; m; m = m->next) {
        const key_rule *r = NULL;
        for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
            if (strcmp(rules[i].key, m->key) == 0) {
                r = &rules[i];
                seen[i] = 1;
            }
        if (!r) {
            LOGW("lm_config_unknown_key", "file=%s key=%s note=ignored", name, m->key);
            continue;
        }
        int x = apply_rule(c, r, m, name, &ndelays, err);
        if (x != MS_OK) {
            rc = x;
            goto out;
        }
        if (r->kind == K_INT_OR_NULL) ff_given = m->type != JS_NULL;
    }
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
        if (seen[i] || rules[i].absent == A_OK) continue;
        if (rules[i].absent == A_REQUIRED)
            rc = ms_err_set(err, MS_ERR_FORMAT, "%s: key \"%s\" missing (official default %s)",
                            name, rules[i].key, rules[i].dflt);
        else
            rc = ms_err_set(err, MS_ERR_UNSUPPORTED, "%s: key \"%s\" missing: the official default %s is not "
                            "implemented", name, rules[i].key, rules[i].dflt);
        goto out;
    }
    /* the depformer inherits the main transformer's heads and layers */
    if (c->depformer_num_heads == -1) c->depformer_num_heads = c->num_heads;
    if (c->depformer_num_layers == -1) c->depformer_num_layers = c->num_layers;
    if (!ff_given) {
        /* the official default: int(hidden_scale * depformer_dim) */
        c->depformer_dim_feedforward = (int)(c->hidden_scale * c->depformer_dim);
    }
    if (c->n_q < 1 || c->n_q > LM_MAX_NQ) {
        rc = ms_err_set(err, MS_ERR_RANGE, "%s: n_q %d out of range (1..%d)", name, c->n_q, LM_MAX_NQ);
        goto out;
    }
    if (ndelays != c->n_q + 1) {
        rc = ms_err_set(err, MS_ERR_FORMAT, "%s: key \"delays\": %d entries, expected n_q + 1 = %d", name, ndelays,
                        c->n_q + 1);
        goto out;
    }
    if ((rc = lm_config_finish(c, err)) != MS_OK) ms_err_prefix(err, "%s", name);
out:
    js_free(root);
    return rc;
}

int lm_config_load(lm_config *c, const char *path, ms_error *err) {
    lm_config_default(c);
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT) return MS_OK;
        return ms_err_set(err, MS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    }
    char *buf = malloc(LM_MAX_CONFIG_BYTES + 1);
    if (!buf) {
        fclose(f);
        return ms_err_set(err, MS_ERR_NOMEM, "%s: out of memory", path);
    }
    size_t n = fread(buf, 1, LM_MAX_CONFIG_BYTES + 1, f);
    int bad = ferror(f);
    fclose(f);
    int rc;
    if (bad)
        rc = ms_err_set(err, MS_ERR_IO, "%s: read error", path);
    else if (n > LM_MAX_CONFIG_BYTES)
        rc = ms_err_set(err, MS_ERR_LIMIT, "%s: larger than %d bytes", path, LM_MAX_CONFIG_BYTES);
    else
        rc = lm_config_parse(c, buf, n, path, err);
    free(buf);
    return rc;
}
