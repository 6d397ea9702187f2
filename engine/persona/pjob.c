/* pjob.c - a persona prime in chunks, then its snapshot (see pjob.h). */
#include "pjob.h"

#include <stdlib.h>
#include <string.h>

#include "job.h"
#include "lmgen.h"

typedef enum { PJ_REPLAY, PJ_PRIME, PJ_SNAPSHOT, PJ_DONE, PJ_FAILED } pjob_phase;

struct pjob {
    lm_backend *b;
    const pjob_prompt *p;
    int chunk, chunks;
    pjob_phase phase;
    lmgen_slot g;          /* the prime slot's bookkeeping */
    int row;               /* PJ_REPLAY: next saved row */
    pp_job *job;           /* PJ_PRIME, PJ_SNAPSHOT */
    pp_persona *snap;      /* PJ_SNAPSHOT: filled by the job; then the result */
};

void pjob_prompt_free(pjob_prompt *p) {
    free(p->voice);
    free(p->embs);
    free(p->cache);
    free(p->text);
    p->voice = p->cache = p->text = NULL;
    p->embs = NULL;
    p->n_voice = p->n_embs = p->n_text = 0;
}

int64_t pjob_prompt_calls(const pjob_prompt *p) {
    int64_t voice = p->embs ? (int64_t)p->n_embs + (p->n_embs > 0) : p->n_voice;
    return voice + 2 * (int64_t)p->silence_frames + p->n_text;
}

/* The pp_prompt of the token phases (the voice codes, if any, silence,
 * text, silence); a saved voice is replayed before it. */
static void token_prompt(const pjob_prompt *p, pp_prompt *pp) {
    pp_prompt_init(pp);
    pp->voice = p->embs ? NULL : p->voice;
    pp->n_voice = p->embs ? 0 : p->n_voice;
    pp->text = p->text;
    pp->n_text = p->n_text;
    pp->silence = p->silence;
    pp->sine = p->sine;
    pp->silence_frames = p->silence_frames;
}

pjob *pjob_create(lm_backend *b, int slot, const pjob_prompt *p, int chunk, ms_error *err) {
    if (chunk < 1) {
        ms_err_set(err, MS_ERR_ARG, "prime: chunk of %d", chunk);
        return NULL;
    }
    if (p->embs && p->voice) {
        ms_err_set(err, MS_ERR_ARG, "prime: voice codes and a saved voice exclude each other");
        return NULL;
    }
    pjob *j = calloc(1, sizeof *j);
    if (!j) {
        ms_err_set(err, MS_ERR_NOMEM, "prime: out of memory");
        return NULL;
    }
    j->b = b;
    j->p = p;
    j->chunk = chunk;
    lm_samp samp;
    lm_samp_defaults(&samp, 0); /* nothing sampled is kept while priming */
    lmgen_init(&j->g, &b->cfg, slot, &samp);
    if (lm_backend_reset_slot(b, slot, err) != MS_OK) {
        free(j);
        return NULL;
    }
    /* check the token phases now (codes and ids in range), so a bad prompt
     * fails before any chunk */
    pp_prompt pp;
    token_prompt(p, &pp);
    int *rows = NULL, P = 0;
    if (pp_prime_frames(&b->cfg, &pp, &rows, &P, err) != MS_OK) {
        free(j);
        return NULL;
    }
    free(rows);
    j->phase = p->embs && p->n_embs > 0 ? PJ_REPLAY : PJ_PRIME;
    return j;
}

int pjob_run(pjob *j, int *done, ms_error *err) {
    *done = j->phase == PJ_DONE;
    if (j->phase == PJ_DONE) return MS_OK;
    if (j->phase == PJ_FAILED) return ms_err_set(err, MS_ERR_STATE, "prime: failed before");
    j->chunks++;
    int rc = MS_OK, d = 0;
    switch (j->phase) {
    case PJ_REPLAY: {
        const pjob_prompt *p = j->p;
        int n = p->n_embs - j->row < j->chunk ? p->n_embs - j->row : j->chunk;
        rc = pp_replay_embeddings(j->b, &j->g, p->embs + (size_t)j->row * j->b->cfg.dim, n, p->cache,
                                  PP_PRIME_PREFILL, err);
        if (rc == MS_OK && (j->row += n) == p->n_embs) j->phase = PJ_PRIME;
        break;
    }
    case PJ_PRIME:
        if (!j->job) {
            pp_prompt pp;
            token_prompt(j->p, &pp);
            if (!(j->job = pp_job_prime(j->b, &j->g, &pp, j->chunk, err))) {
                rc = err ? err->code : MS_ERR_ARG;
                break;
            }
        }
        rc = pp_job_run(j->job, &d, err);
        if (rc == MS_OK && d) {
            pp_job_free(j->job);
            j->job = NULL;
            if (!(j->snap = calloc(1, sizeof *j->snap))) {
                rc = ms_err_set(err, MS_ERR_NOMEM, "prime: out of memory");
                break;
            }
            if (!(j->job = pp_job_snapshot(j->b, &j->g, j->snap, err))) {
                rc = err ? err->code : MS_ERR_NOMEM;
                break;
            }
            j->phase = PJ_SNAPSHOT;
        }
        break;
    case PJ_SNAPSHOT:
        rc = pp_job_run(j->job, &d, err);
        if (rc == MS_OK && d) {
            pp_job_free(j->job);
            j->job = NULL;
            j->phase = PJ_DONE;
        }
        break;
    case PJ_DONE:
    case PJ_FAILED: break;
    }
    if (rc != MS_OK) j->phase = PJ_FAILED;
    *done = j->phase == PJ_DONE;
    return rc;
}

pp_persona *pjob_take(pjob *j) {
    if (j->phase != PJ_DONE) return NULL;
    pp_persona *s = j->snap;
    j->snap = NULL;
    return s;
}

int pjob_chunks(const pjob *j) { return j->chunks; }

void pjob_free(pjob *j) {
    if (!j) return;
    pp_job_free(j->job);
    if (j->snap) {
        pp_persona_close(j->b, j->snap);   /* harmless on an unfilled one (kv NULL) */
        free(j->snap);
    }
    free(j);
}
