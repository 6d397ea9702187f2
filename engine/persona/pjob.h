/* pjob.h - one persona prime as an engine job: a prompt (voice codes or a
 * saved voice, role text ids, the codec's SILENCE/SINE) primed on a slot
 * of its own in bounded chunks, then snapshotted (pp_persona) for the
 * cache. Chunks: the saved voice's rows replayed `chunk` at a time
 * (pp_replay_embeddings on consecutive row ranges: the bookkeeping of the
 * dummies and the final ring copy make the same state as one replay), the
 * forced calls prefilled `chunk` positions at a time (pp_job_prime), then
 * the snapshot (pp_job_snapshot, one copy).
 *
 * Threads: pjob_prompt_free anywhere; everything else on the engine thread
 * (it calls the backend). The prompt is borrowed for the job's life.
 */
#ifndef MOSHID_PJOB_H
#define MOSHID_PJOB_H

#include "backend.h"
#include "lmgen_pp.h"
#include "prime.h"

/* A prompt's data, owned (pjob_prompt_free). */
typedef struct pjob_prompt {
    int *voice;                       /* (n_voice, 8) agent codes, or NULL */
    int n_voice;
    float *embs;                      /* (n_embs, dim) saved voice rows, or NULL */
    int n_embs;
    int *cache;                       /* (17, max_delay + 3) the saved ring, with embs */
    int *text;                        /* (n_text) role text ids, or NULL */
    int n_text;
    int silence[PP_SIDE_CODEBOOKS];   /* the codec's SILENCE and SINE frames */
    int sine[PP_SIDE_CODEBOOKS];
    int silence_frames;               /* phases 2 and 4 */
} pjob_prompt;

void pjob_prompt_free(pjob_prompt *p);
/* pjob_prompt_calls: calls of PersonaPlex's step the prompt makes (voice
 * frames, or saved rows + 1, silences, text): its positions are one fewer. */
int64_t pjob_prompt_calls(const pjob_prompt *p);

typedef struct pjob pjob;

/* pjob_create: a job priming p on backend slot `slot` (reset first),
 * `chunk` rows or positions per chunk. NULL with err set on a bad prompt. */
pjob *pjob_create(lm_backend *b, int slot, const pjob_prompt *p, int chunk, ms_error *err);
/* pjob_run: one chunk; *done = 1 once the snapshot is made. An error ends
 * the job. */
int pjob_run(pjob *j, int *done, ms_error *err);
/* pjob_take: the snapshot of a done job (the caller owns it: pp_persona_close
 * on the engine thread, then free). NULL before done or when taken. */
pp_persona *pjob_take(pjob *j);
int pjob_chunks(const pjob *j);
/* pjob_free: the job, and its snapshot if not taken. */
void pjob_free(pjob *j);

#endif
