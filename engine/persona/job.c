/* job.c - priming, restore and snapshot in chunks (see job.h). */
#include "job.h"

#include <stdlib.h>
#include <string.h>

typedef enum { JOB_PRIME, JOB_RESTORE, JOB_SNAPSHOT } job_kind;

struct pp_job {
    job_kind kind;
    lm_backend *b;
    lmgen_slot *g;              /* PRIME, RESTORE: the slot's bookkeeping */
    const lmgen_slot *gs;       /* SNAPSHOT */
    int chunk;
    int chunks;
    int done, failed;
    /* PRIME */
    int *inputs;                /* (m, PP_STREAMS) model calls' inputs */
    int m, next;                /* calls, next call to prefill */
    int64_t pos0;               /* the slot's position before the prime */
    lmgen_slot after;           /* the bookkeeping after the prime */
    /* RESTORE */
    const pp_persona *p;
    int layer;                  /* next layer to copy */
    /* SNAPSHOT */
    pp_persona *out;
};

static pp_job *job_new(lm_backend *b, job_kind kind, int chunk, ms_error *err) {
    if (chunk < 1) {
        ms_err_set(err, MS_ERR_ARG, "job: chunk of %d", chunk);
        return NULL;
    }
    pp_job *j = calloc(1, sizeof *j);
    if (!j) {
        ms_err_set(err, MS_ERR_NOMEM, "job: out of memory");
        return NULL;
    }
    j->kind = kind;
    j->b = b;
    j->chunk = chunk;
    return j;
}

pp_job *pp_job_prime(lm_backend *b, lmgen_slot *g, const pp_prompt *p, int chunk, ms_error *err) {
    if (p->voice_embs) {
        ms_err_set(err, MS_ERR_UNSUPPORTED, "job: saved voice embeddings replay with pp_prime, not as a job");
        return NULL;
    }
    int *rows = NULL, P = 0;
    if (pp_prime_frames(&b->cfg, p, &rows, &P, err) != MS_OK) return NULL;
    pp_job *j = job_new(b, JOB_PRIME, chunk, err);
    if (!j) {
        free(rows);
        return NULL;
    }
    j->g = g;
    j->pos0 = lm_backend_pos(b, g->slot);
    int rc = pp_prime_plan(b, g, rows, P, &j->inputs, &j->m, &j->after, err);
    free(rows);
    if (rc != MS_OK) {
        pp_job_free(j);
        return NULL;
    }
    return j;
}

pp_job *pp_job_restore(lm_backend *b, const pp_persona *p, lmgen_slot *g, int chunk, ms_error *err) {
    if (!p->kv || p->st.variant != LM_VARIANT_PERSONAPLEX || p->st.ring != g->ring || g->variant != p->st.variant) {
        ms_err_set(err, MS_ERR_ARG, "persona: not a PersonaPlex snapshot of this model");
        return NULL;
    }
    pp_job *j = job_new(b, JOB_RESTORE, chunk, err);
    if (!j) return NULL;
    j->g = g;
    j->p = p;
    return j;
}

pp_job *pp_job_snapshot(lm_backend *b, const lmgen_slot *g, pp_persona *out, ms_error *err) {
    pp_job *j = job_new(b, JOB_SNAPSHOT, 1, err);
    if (!j) return NULL;
    j->gs = g;
    j->out = out;
    return j;
}

int pp_job_run(pp_job *j, int *done, ms_error *err) {
    *done = j->done;
    if (j->done) return MS_OK;
    if (j->failed) return ms_err_set(err, MS_ERR_STATE, "job: failed before");
    int rc = MS_OK;
    j->chunks++;
    switch (j->kind) {
    case JOB_PRIME: {
        int n = j->m - j->next < j->chunk ? j->m - j->next : j->chunk;
        if (n > 0)
            rc = lm_backend_prefill(j->b, j->g->slot, j->pos0 + j->next, n,
                                    j->inputs + (size_t)j->next * PP_STREAMS, NULL, err);
        if (rc == MS_OK) {
            j->next += n;
            if (j->next == j->m) {
                *j->g = j->after;
                j->done = 1;
            }
        }
        break;
    }
    case JOB_RESTORE: {
        int L = j->b->cfg.num_layers;
        int l1 = j->layer + j->chunk < L ? j->layer + j->chunk : L;
        rc = lm_backend_kv_restore_layers(j->b, j->g->slot, j->p->kv, j->layer, l1, err);
        if (rc == MS_OK) {
            j->layer = l1;
            if (l1 == L) {
                lmgen_restore(j->g, &j->p->st);   /* keeps g's slot, sampling, dep_steps */
                j->done = 1;
            }
        }
        break;
    }
    case JOB_SNAPSHOT:
        rc = pp_persona_save(j->b, j->gs, j->out, err);
        if (rc == MS_OK) j->done = 1;
        break;
    }
    if (rc != MS_OK) j->failed = 1;
    *done = j->done;
    return rc;
}

int pp_job_chunks(const pp_job *j) { return j->chunks; }

void pp_job_free(pp_job *j) {
    if (!j) return;
    free(j->inputs);
    free(j);
}
