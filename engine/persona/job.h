/* job.h - long slot work as engine jobs: priming, persona restore and
 * persona snapshot, cut into chunks the engine thread interleaves with live
 * frame steps, so that a session that starts does not stall the others.
 *
 * A chunk is bounded: a prime chunk prefills at most `chunk` positions, a
 * restore chunk copies at most `chunk` layers of K/V; the caller sizes
 * `chunk` so that one costs about a frame period at most on its backend
 * (docs/benchmarks.md has the CPU figures). A snapshot is one chunk (one
 * copy of the primed range, made at start-up or for an on-demand prompt).
 *
 * The job borrows the backend, the bookkeeping g and the persona or prompt
 * for its life; the slot is the job's until pp_job_run reports done (no
 * step of that slot in between). A failed or abandoned job leaves the slot
 * to be reset (lm_backend_reset_slot + lmgen_reset).
 * Threads: the engine thread.
 */
#ifndef MOSHID_JOB_H
#define MOSHID_JOB_H

#include "prime.h"

/* Default chunk sizes (CPU, demo-sized models: well under a frame). */
#define PP_JOB_PRIME_POSITIONS 16
#define PP_JOB_RESTORE_LAYERS 4

typedef struct pp_job pp_job;

/* pp_job_prime: priming of prompt p (voice codes and/or role text; not
 * saved voice embeddings: those replay with pp_prime) on slot g by prefill,
 * chunk positions per chunk. The prompt is copied: p need not outlive the
 * call. NULL with err set on a bad prompt or slot. */
pp_job *pp_job_prime(lm_backend *b, lmgen_slot *g, const pp_prompt *p, int chunk, ms_error *err);
/* pp_job_restore: persona p into slot g, chunk layers per chunk; g's slot,
 * sampling and dep_steps are kept (pp_persona_load in chunks). */
pp_job *pp_job_restore(lm_backend *b, const pp_persona *p, lmgen_slot *g, int chunk, ms_error *err);
/* pp_job_snapshot: slot g saved into *out (pp_persona_save) as one chunk. */
pp_job *pp_job_snapshot(lm_backend *b, const lmgen_slot *g, pp_persona *out, ms_error *err);

/* pp_job_run: one chunk; *done = 1 when the job is complete (then further
 * calls do nothing). An error ends the job (done stays 0). */
int pp_job_run(pp_job *j, int *done, ms_error *err);
/* pp_job_chunks: chunks run so far. */
int pp_job_chunks(const pp_job *j);
void pp_job_free(pp_job *j);

#endif
