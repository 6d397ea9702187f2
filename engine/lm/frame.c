/* frame.c - the frame step over the backend interface: encode the user's
 * audio, LMGen + LM step, decode Moshi's audio, for a batch of slots (see
 * lm_frame in backend.h). Host code shared by every backend: a backend with
 * frame entries is handed the three stages once (lm_frame_stages) and runs
 * them on its own schedule (the CPU backend's pipeline: encode and decode
 * on its codec thread, the LM step on the engine thread); without them
 * lm_frame_submit runs the stages itself. */
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "lmgen.h"

int lm_frame_alloc(lm_backend *b, lm_frame *f, int max_n, ms_error *err) {
    memset(f, 0, sizeof *f);
    if (max_n < 1 || max_n > b->max_slots)
        return ms_err_set(err, MS_ERR_ARG, "frame: %d slots (max %d)", max_n, b->max_slots);
    if (!b->ncb) return ms_err_set(err, MS_ERR_STATE, "frame: backend %s was opened without a codec", b->ops->name);
    size_t N = (size_t)max_n, ncb = (size_t)b->ncb, nout = 1 + (size_t)b->cfg.dep_q;
    f->nout = (int)nout;
    f->codes = calloc(N * (size_t)b->n_user, sizeof(int));
    f->out = calloc(N * nout, sizeof(int));
    f->has_out = calloc(N, sizeof(int));
    f->pcm_out = calloc(N * MS_FRAME_SAMPLES, sizeof(float));
    f->enc_codes = calloc(N * ncb, sizeof(int));
    f->dec_slots = calloc(N, sizeof(int));
    f->dec_codes = calloc(N * ncb, sizeof(int));
    f->dec_pcm = calloc(N * MS_FRAME_SAMPLES, sizeof(float));
    if (!f->codes || !f->out || !f->has_out || !f->pcm_out || !f->enc_codes || !f->dec_slots || !f->dec_codes ||
        !f->dec_pcm) {
        lm_frame_free(f);
        return ms_err_set(err, MS_ERR_NOMEM, "frame: out of memory for %d slots", max_n);
    }
    return MS_OK;
}

void lm_frame_free(lm_frame *f) {
    free(f->codes);
    free(f->out);
    free(f->has_out);
    free(f->pcm_out);
    free(f->enc_codes);
    free(f->dec_slots);
    free(f->dec_codes);
    free(f->dec_pcm);
    memset(f, 0, sizeof *f);
}

static int run_encode(void *vb, lm_frame *f, ms_error *err) {
    lm_backend *b = vb;
    const int n = f->n, ncb = b->ncb, nu = b->n_user;
    if (n == 0) return MS_OK;
    int rc = lm_backend_mimi_encode(b, f->slots, n, f->pcm_in, f->enc_codes, err);
    if (rc) return rc;
    /* the bookkeeping reads the first n_user codes of each row */
    for (int j = 0; j < n; j++) memcpy(f->codes + (size_t)j * nu, f->enc_codes + (size_t)j * ncb, sizeof(int) * (size_t)nu);
    return MS_OK;
}

static int run_step(void *vb, lm_frame *f, ms_error *err) {
    lm_backend *b = vb;
    const int n = f->n, ncb = b->ncb, nout = 1 + b->cfg.dep_q;
    f->n_dec = 0;
    if (n == 0) return MS_OK;
    int rc = lmgen_step_batch(b, f->gens, n, f->codes, f->out, f->has_out, NULL, NULL, err);
    if (rc) return rc;
    /* Moshi's audio: the first ncb of the dep_q generated codebooks */
    int nd = 0;
    for (int j = 0; j < n; j++) {
        if (!f->has_out[j]) continue;
        memcpy(f->dec_codes + (size_t)nd * ncb, f->out + (size_t)j * nout + 1, sizeof(int) * (size_t)ncb);
        f->dec_slots[nd++] = f->slots[j];
    }
    f->n_dec = nd;
    return MS_OK;
}

static int run_decode(void *vb, lm_frame *f, ms_error *err) {
    lm_backend *b = vb;
    if (f->n_dec == 0) return MS_OK;
    int rc = lm_backend_mimi_decode(b, f->dec_slots, f->n_dec, f->dec_codes, f->dec_pcm, err);
    if (rc) return rc;
    for (int j = 0, d = 0; j < f->n; j++)
        if (f->has_out[j])
            memcpy(f->pcm_out + (size_t)j * MS_FRAME_SAMPLES, f->dec_pcm + (size_t)d++ * MS_FRAME_SAMPLES,
                   sizeof(float) * MS_FRAME_SAMPLES);
    return MS_OK;
}

/* the whole frame step, synchronous (a backend without frame entries) */
static int run_all(lm_backend *b, lm_frame *f, ms_error *err) {
    int rc = run_encode(b, f, err);
    if (rc == MS_OK) rc = run_step(b, f, err);
    return rc ? rc : run_decode(b, f, err);
}

int lm_frame_submit(lm_backend *b, lm_frame *f, ms_error *err) {
    if (!f || f->n < 0 || f->n > b->max_slots || (f->n && (!f->slots || !f->gens || !f->pcm_in)) || !f->has_out)
        return ms_err_set(err, MS_ERR_ARG, "frame_submit: bad frame");
    if (!b->ncb) return ms_err_set(err, MS_ERR_STATE, "frame_submit: backend %s has no codec", b->ops->name);
    if (b->inflight >= LM_MAX_INFLIGHT)
        return ms_err_set(err, MS_ERR_STATE, "frame_submit: %d frames in flight already", b->inflight);
    uint8_t seen[LM_MAX_SLOTS] = {0};
    for (int i = 0; i < f->n; i++) {
        int s = f->slots[i];
        if (s < 0 || s >= b->max_slots || seen[s] || !f->gens[i] || f->gens[i]->slot != s)
            return ms_err_set(err, MS_ERR_ARG, "frame_submit: row %d: slot %d out of range, repeated or not its "
                              "bookkeeping's", i, s);
        seen[s] = 1;
    }
    f->rc = MS_OK;
    if (!b->ops->frame_submit) {
        int rc = run_all(b, f, err);
        if (rc == MS_OK) b->inflight++;
        return rc;
    }
    if (!b->stages_given) {
        const lm_frame_stages st = {.encode = run_encode, .step = run_step, .decode = run_decode, .ctx = b};
        b->ops->frame_stages(b->ctx, &st);
        b->stages_given = 1;
    }
    int rc = b->ops->frame_submit(b->ctx, f, err);
    if (rc == MS_OK) b->inflight++;
    return rc;
}

int lm_frame_wait(lm_backend *b, lm_frame *f, ms_error *err) {
    if (b->inflight <= 0) return ms_err_set(err, MS_ERR_STATE, "frame_wait: nothing in flight");
    b->inflight--;
    return b->ops->frame_submit ? b->ops->frame_wait(b->ctx, f, err) : MS_OK;
}
