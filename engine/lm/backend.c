/* backend.c - the dispatcher: argument checks in front of a backend table. */
#include "backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lm.h"
#include "samp.h"

void lm_samp_defaults(lm_samp *s, uint64_t seed) {
    s->text_temp = (float)SAMP_TEXT_TEMP;
    s->text_topk = SAMP_TEXT_TOPK;
    s->audio_temp = (float)SAMP_AUDIO_TEMP;
    s->audio_topk = SAMP_AUDIO_TOPK;
    s->seed = seed;
    s->audio_seed = seed;
}

void lm_samp_greedy(lm_samp *s) {
    s->text_temp = 0;
    s->audio_temp = 0;
}

/* One override: the value named off gives 0, on gives 1, else keep. */
static void env_choice(const char *name, const char *off, const char *on, int *v) {
    const char *e = getenv(name);
    if (!e) return;
    if (!strcmp(e, off)) *v = 0;
    else if (!strcmp(e, on)) *v = 1;
}

void lm_gpu_opts_get(const lm_gpu_opts *in, lm_gpu_opts *out) {
    if (in) *out = *in;
    else memset(out, 0, sizeof *out);
    env_choice("MOSHID_CU_MIMI", "gpu", "cpu", &out->codec_host);
    env_choice("MOSHID_CU_GRAPHS", "1", "0", &out->graphs_off);
    env_choice("MOSHID_CU_MIMI_GRAPHS", "1", "0", &out->codec_graphs_off);
    env_choice("MOSHID_CU_DEP_CHAIN", "1", "0", &out->dep_chain_off);
    const char *gm = getenv("MOSHID_CU_GEMM_MIN_ROWS");
    if (gm) {
        char *end;
        long n = strtol(gm, &end, 10);
        if (end != gm && !*end && n >= 1 && n <= LM_MAX_SLOTS + 1) out->gemm_min_rows = (int)n;
    }
}

const char *lm_kv_name(lm_kv k) { return k == LM_KV_INT8 ? "int8" : "native"; }

int lm_kv_parse(const char *s, lm_kv *out) {
    if (!s) return -1;
    if (!strcmp(s, "int8")) *out = LM_KV_INT8;
    else if (!strcmp(s, "native") || !strcmp(s, "f32") || !strcmp(s, "bf16")) *out = LM_KV_NATIVE;
    else return -1;
    return 0;
}

lm_backend *lm_backend_open(const lm_backend_ops *ops, const char *model_dir, const lm_backend_opts *opts,
                            ms_error *err) {
    if (!ops || !ops->open || !ops->close || !ops->config || !model_dir || !opts) {
        ms_err_set(err, MS_ERR_ARG, "backend open: missing argument or entry");
        return NULL;
    }
    if (opts->max_slots < 1 || opts->max_slots > LM_MAX_SLOTS) {
        ms_err_set(err, MS_ERR_RANGE, "backend open: max_slots %d out of range (1..%d)", opts->max_slots,
                   LM_MAX_SLOTS);
        return NULL;
    }
    if (opts->weights < LM_WEIGHTS_STORED || opts->weights > LM_WEIGHTS_INT8 || opts->kv < LM_KV_NATIVE ||
        opts->kv > LM_KV_INT8) {
        ms_err_set(err, MS_ERR_RANGE, "backend open: weights %d / kv %d out of range", opts->weights, opts->kv);
        return NULL;
    }
    unsigned need = (opts->weights == LM_WEIGHTS_BF16 ? LM_SCHEME_W_BF16 : 0) |
                    (opts->weights == LM_WEIGHTS_INT8 ? LM_SCHEME_W_INT8 : 0) |
                    (opts->kv == LM_KV_INT8 ? LM_SCHEME_KV_INT8 : 0);
    if (need & ~ops->schemes) {
        ms_err_set(err, MS_ERR_UNSUPPORTED, "backend %s: weights %s, kv %s: not implemented by this backend",
                   ops->name ? ops->name : "?", lm_weights_name((lm_weights)opts->weights), lm_kv_name((lm_kv)opts->kv));
        return NULL;
    }
    if (!ops->frame_submit != !ops->frame_wait || !ops->frame_submit != !ops->frame_stages) {
        ms_err_set(err, MS_ERR_ARG, "backend %s: frame_stages, frame_submit and frame_wait come together",
                   ops->name ? ops->name : "?");
        return NULL;
    }
    lm_backend *b = calloc(1, sizeof *b);
    if (!b) {
        ms_err_set(err, MS_ERR_NOMEM, "out of memory");
        return NULL;
    }
    b->ops = ops;
    b->max_slots = opts->max_slots;
    if (ops->open(&b->ctx, model_dir, opts, err) != MS_OK) {
        free(b);
        return NULL;
    }
    b->cfg = *ops->config(b->ctx);
    b->ncb = ops->codec_books ? ops->codec_books(b->ctx) : 0;
    /* Kyutai's LMGen reads n_q - dep_q user streams; PersonaPlex's step
     * always reads the user's 8 codebooks (its streams 9..16). */
    b->n_user = b->cfg.variant == LM_VARIANT_PERSONAPLEX ? PP_SIDE_CODEBOOKS : b->cfg.n_user;
    b->enc_frames = calloc((size_t)b->max_slots, sizeof *b->enc_frames);
    b->step_req = calloc((size_t)b->max_slots, sizeof *b->step_req);
    b->step_rows = calloc((size_t)b->max_slots, sizeof *b->step_rows);
    if (!b->enc_frames || !b->step_req || !b->step_rows) {
        ms_err_set(err, MS_ERR_NOMEM, "out of memory");
        lm_backend_close(b);
        return NULL;
    }
    /* the LM reads n_user codes of each encoded frame; the decoder reads the
     * first ncb of the dep_q generated codebooks */
    if (b->ncb && (b->ncb < b->n_user || b->ncb > b->cfg.dep_q || b->n_user < 1)) {
        ms_err_set(err, MS_ERR_UNSUPPORTED,
                   "backend: Mimi gives %d codebooks; the LM reads %d user streams and generates %d", b->ncb,
                   b->n_user, b->cfg.dep_q);
        lm_backend_close(b);
        return NULL;
    }
    return b;
}

void lm_backend_close(lm_backend *b) {
    if (!b) return;
    if (b->ctx) b->ops->close(b->ctx);
    free(b->enc_frames);
    free(b->step_req);
    free(b->step_rows);
    free(b);
}

static int check_slot(const lm_backend *b, int slot, ms_error *err) {
    if (slot < 0 || slot >= b->max_slots)
        return ms_err_set(err, MS_ERR_RANGE, "slot %d out of range (0..%d)", slot, b->max_slots - 1);
    return MS_OK;
}

#define NEED_ENTRY(e) \
    do { if (!b->ops->e) return ms_err_set(err, MS_ERR_UNSUPPORTED, "backend %s: no " #e, b->ops->name); } while (0)

int lm_backend_reset_slot(lm_backend *b, int slot, ms_error *err) {
    NEED_ENTRY(reset_slot);
    if (check_slot(b, slot, err)) return err ? err->code : MS_ERR_RANGE;
    int rc = b->ops->reset_slot(b->ctx, slot, err);
    if (rc == MS_OK && b->ncb) rc = lm_backend_codec_reset(b, slot, LM_CODEC_BOTH, err);
    return rc;
}

int lm_backend_codec_reset(lm_backend *b, int slot, int which, ms_error *err) {
    NEED_ENTRY(codec_reset);
    if (check_slot(b, slot, err)) return err ? err->code : MS_ERR_RANGE;
    if (which < LM_CODEC_ENCODER || which > LM_CODEC_BOTH)
        return ms_err_set(err, MS_ERR_ARG, "codec_reset: which %d", which);
    if (!b->ncb) return ms_err_set(err, MS_ERR_STATE, "backend %s: opened without a codec", b->ops->name);
    int rc = b->ops->codec_reset(b->ctx, slot, which, err);
    if (rc == MS_OK && (which & LM_CODEC_ENCODER)) b->enc_frames[slot] = 0;
    return rc;
}

int64_t lm_backend_pos(lm_backend *b, int slot) {
    MS_ASSERT(slot >= 0 && slot < b->max_slots && b->ops->pos);
    return b->ops->pos(b->ctx, slot);
}

static int check_tokens(const lm_config *c, const int *tok, int n, const char *what, int idx, ms_error *err) {
    for (int s = 0; s < n; s++) {
        int hi = s == 0 ? c->text_card : c->card;   /* the initial token is card / text_card */
        if (tok[s] < -1 || tok[s] > hi)
            return ms_err_set(err, MS_ERR_RANGE, "step slot #%d: %s stream %d: token %d out of range (-1..%d)", idx,
                              what, s, tok[s], hi);
    }
    return MS_OK;
}

int lm_backend_step(lm_backend *b, lm_step_slot *slots, int n, ms_error *err) {
    NEED_ENTRY(step);
    const lm_config *c = &b->cfg;
    if (n < 0 || n > b->max_slots || (n > 0 && !slots))
        return ms_err_set(err, MS_ERR_ARG, "step: %d slots (max %d)", n, b->max_slots);
    uint8_t seen[LM_MAX_SLOTS] = {0};
    for (int i = 0; i < n; i++) {
        lm_step_slot *s = &slots[i];
        if (check_slot(b, s->slot, err)) return err ? err->code : MS_ERR_RANGE;
        if (seen[s->slot]) return ms_err_set(err, MS_ERR_ARG, "step: slot %d given twice", s->slot);
        seen[s->slot] = 1;
        if (check_tokens(c, s->tokens, c->n_streams, "input", i, err)) return err ? err->code : MS_ERR_RANGE;
        if ((s->target == NULL) != (s->provided == NULL))
            return ms_err_set(err, MS_ERR_ARG, "step slot #%d: target and provided go together", i);
        if (s->target) {
            for (int k = 0; k <= c->dep_q; k++)
                if (s->provided[k] && (s->target[k] < 0 || s->target[k] > (k == 0 ? c->text_card : c->card)))
                    return ms_err_set(err, MS_ERR_RANGE, "step slot #%d: target %d: token %d out of range", i, k,
                                      s->target[k]);
        }
        if (s->dep_steps < -1 || s->dep_steps > c->dep_q)
            return ms_err_set(err, MS_ERR_RANGE, "step slot #%d: dep_steps %d out of range (-1..%d)", i, s->dep_steps,
                              c->dep_q);
        if (!isfinite(s->samp.text_temp) || !isfinite(s->samp.audio_temp))
            return ms_err_set(err, MS_ERR_RANGE, "step slot #%d: temperature not finite", i);
    }
    return b->ops->step(b->ctx, slots, n, err);
}

int lm_backend_prefill(lm_backend *b, int slot, int64_t pos0, int P, const int *tokens, const float *embs,
                       ms_error *err) {
    NEED_ENTRY(prefill);
    if (check_slot(b, slot, err)) return err ? err->code : MS_ERR_RANGE;
    if (P < 1) return ms_err_set(err, MS_ERR_ARG, "prefill: %d positions", P);
    if ((tokens == NULL) == (embs == NULL))
        return ms_err_set(err, MS_ERR_ARG, "prefill: give exactly one of tokens and embeddings");
    if (pos0 != b->ops->pos(b->ctx, slot))
        return ms_err_set(err, MS_ERR_STATE, "prefill: pos0 %lld is not slot %d's next position %lld",
                          (long long)pos0, slot, (long long)b->ops->pos(b->ctx, slot));
    if (tokens)
        for (int p = 0; p < P; p++)
            if (check_tokens(&b->cfg, tokens + (size_t)p * b->cfg.n_streams, b->cfg.n_streams, "prefill", p, err))
                return err ? err->code : MS_ERR_RANGE;
    return b->ops->prefill(b->ctx, slot, pos0, P, tokens, embs, err);
}

int lm_backend_kv_snapshot(lm_backend *b, int slot, int P, lm_kv_snap **out, ms_error *err) {
    NEED_ENTRY(kv_snapshot);
    if (check_slot(b, slot, err)) return err ? err->code : MS_ERR_RANGE;
    if (!out) return ms_err_set(err, MS_ERR_ARG, "kv_snapshot: no output");
    int64_t pos = b->ops->pos(b->ctx, slot);
    if (pos > b->cfg.context)
        return ms_err_set(err, MS_ERR_STATE,
                          "kv_snapshot: slot %d is at position %lld, past its K/V ring of %d: positions 0.. are "
                          "overwritten",
                          slot, (long long)pos, b->cfg.context);
    if (P < 0 || P > pos)
        return ms_err_set(err, MS_ERR_RANGE, "kv_snapshot: %d positions, slot %d holds %lld (context %d)", P, slot,
                          (long long)pos, b->cfg.context);
    return b->ops->kv_snapshot(b->ctx, slot, P, out, err);
}

int lm_backend_kv_restore_layers(lm_backend *b, int slot, const lm_kv_snap *snap, int l0, int l1, ms_error *err) {
    NEED_ENTRY(kv_restore);
    if (check_slot(b, slot, err)) return err ? err->code : MS_ERR_RANGE;
    if (!snap) return ms_err_set(err, MS_ERR_ARG, "kv_restore: no snapshot");
    if (l0 < 0 || l1 <= l0 || l1 > b->cfg.num_layers)
        return ms_err_set(err, MS_ERR_RANGE, "kv_restore: layers [%d, %d) of %d", l0, l1, b->cfg.num_layers);
    return b->ops->kv_restore(b->ctx, slot, snap, l0, l1, err);
}

int lm_backend_kv_restore(lm_backend *b, int slot, const lm_kv_snap *snap, ms_error *err) {
    return lm_backend_kv_restore_layers(b, slot, snap, 0, b->cfg.num_layers, err);
}

int lm_backend_kv_snap_info(lm_backend *b, const lm_kv_snap *snap, lm_snap_info *info) {
    memset(info, 0, sizeof *info);
    if (!snap || !b->ops->kv_snap_info) return MS_ERR_UNSUPPORTED;
    return b->ops->kv_snap_info(b->ctx, snap, info);
}

int lm_backend_kv_snap_len(lm_backend *b, const lm_kv_snap *snap) {
    return snap && b->ops->kv_snap_len ? b->ops->kv_snap_len(b->ctx, snap) : -1;
}

int lm_backend_kv_snap_read(lm_backend *b, const lm_kv_snap *snap, int layer, int which, float *dst, ms_error *err) {
    NEED_ENTRY(kv_snap_read);
    if (!snap || !dst || layer < 0 || layer >= b->cfg.num_layers || (which != 0 && which != 1))
        return ms_err_set(err, MS_ERR_ARG, "kv_snap_read: bad arguments (layer %d, which %d)", layer, which);
    return b->ops->kv_snap_read(b->ctx, snap, layer, which, dst, err);
}

void lm_backend_kv_snap_free(lm_backend *b, lm_kv_snap *snap) {
    if (snap && b->ops->kv_snap_free) b->ops->kv_snap_free(b->ctx, snap);
}

/* Slots of a batch call: in range, distinct. */
static int check_slots(const lm_backend *b, const int *slots, int n, const char *what, ms_error *err) {
    if (n < 0 || n > b->max_slots || (n && !slots))
        return ms_err_set(err, MS_ERR_ARG, "%s: %d slots (max %d)", what, n, b->max_slots);
    uint8_t seen[LM_MAX_SLOTS] = {0};
    for (int i = 0; i < n; i++) {
        if (check_slot(b, slots[i], err)) return err ? err->code : MS_ERR_RANGE;
        if (seen[slots[i]]) return ms_err_set(err, MS_ERR_ARG, "%s: slot %d given twice", what, slots[i]);
        seen[slots[i]] = 1;
    }
    return MS_OK;
}

/* The checks of a codec call: a codec, slots, buffers. Returns MS_OK, or
 * the error; *skip = 1 for an empty batch. */
static int check_codec_call(const lm_backend *b, const int *slots, int n, const void *in, const void *out,
                            const char *what, int *skip, ms_error *err) {
    *skip = 1;
    if (!b->ncb) return ms_err_set(err, MS_ERR_STATE, "backend %s: opened without a codec", b->ops->name);
    if (check_slots(b, slots, n, what, err)) return err ? err->code : MS_ERR_ARG;
    if (n == 0) return MS_OK;
    if (!in || !out) return ms_err_set(err, MS_ERR_ARG, "%s: bad arguments", what);
    *skip = 0;
    return MS_OK;
}

int lm_backend_mimi_encode(lm_backend *b, const int *slots, int n, const float *pcm, int *codes, ms_error *err) {
    NEED_ENTRY(mimi_encode);
    int skip, rc = check_codec_call(b, slots, n, pcm, codes, "mimi_encode", &skip, err);
    if (rc || skip) return rc;
    rc = b->ops->mimi_encode(b->ctx, slots, n, pcm, codes, err);
    if (rc) return rc;
    for (int i = 0; i < n; i++)
        if (b->enc_frames[slots[i]]++ == 0 && b->cfg.variant == LM_VARIANT_KYUTAI &&
            (rc = b->ops->codec_reset(b->ctx, slots[i], LM_CODEC_ENCODER, err)))
            return rc;
    return MS_OK;
}

int lm_backend_mimi_decode(lm_backend *b, const int *slots, int n, const int *codes, float *pcm, ms_error *err) {
    NEED_ENTRY(mimi_decode);
    int skip, rc = check_codec_call(b, slots, n, codes, pcm, "mimi_decode", &skip, err);
    if (rc || skip) return rc;
    return b->ops->mimi_decode(b->ctx, slots, n, codes, pcm, err);
}

int lm_backend_stats_get(lm_backend *b, lm_backend_stats *st) {
    memset(st, 0, sizeof *st);
    if (!b->ops->stats) return MS_ERR_UNSUPPORTED;
    return b->ops->stats(b->ctx, st);
}
