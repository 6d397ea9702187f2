/* model.h - what the daemon serves: the LM (through a backend), Mimi and the
 * tokenizer, with the per-slot LMGen bookkeeping and Mimi streams, exposed
 * to the engine thread as a sched_model.
 *
 * One frame of a batch of slots is one frame step of the backend (encode
 * the user's 1920 samples, LMGen + LM step, decode Moshi's audio; the
 * backend owns each slot's K/V and codec state and applies the variant's
 * first-frame rule). The model owns each slot's LMGen bookkeeping; the
 * scheduler's batches are the backend's frames (sched_batch embeds an
 * lm_frame, sized here by frame_alloc), so a batch goes to the backend as
 * it is, and its decode can run while the next batch steps; a backend that
 * decodes on a thread of its own hands each batch's results to the
 * sessions from there as soon as they are final (lm_frame.on_done ->
 * sched_batch.handover).
 *
 * Threads: model_open/close and the accessors on the loop thread at start
 * and exit; the sched_model callbacks on the engine thread only; the early
 * hand-over on the backend's thread.
 */
#ifndef MOSHID_MODEL_H
#define MOSHID_MODEL_H

#include "err.h"
#include "backend.h"
#include "lm_config.h"
#include "mimi.h"
#include "pjob.h"
#include "prime.h"
#include "scheduler.h"
#include "spm_enc.h"

typedef struct model_opts {
    const char *lm_dir;        /* config.json (optional) + model.safetensors */
    const char *mimi;          /* Mimi safetensors */
    const char *mimi_config;   /* Mimi JSON, NULL = official defaults */
    const char *tokenizer;     /* SentencePiece .model, NULL = no text pieces */
    const char *backend;       /* "auto", "cpu", "cuda" */
    int gpu;
    int threads;               /* CPU backend threads (<= 0: all) */
    int slots;                 /* sessions served at once */
    lm_variant variant;        /* LM_VARIANT_AUTO: from the checkpoint */
    int pipeline;              /* 1: the backend overlaps a frame's decode with
                                  the next frame's encode and LM step */
    int weights;               /* lm_weights (engine.weights) */
    int kv;                    /* lm_kv (engine.kv) */
    const char *record_dir;    /* debug: when set, each session's input codes
                                  (session-ID.codes, moshi-run's --codes-in format)
                                  and LM outputs (session-ID.jsonl, moshi-run's
                                  output format) are written there, on the engine
                                  thread (slow: for debugging only) */
    int step_delay_ms;         /* test aid: each frame step and each prime chunk
                                  sleeps this long on the engine thread (0: off) */
    int prime_slots;           /* PersonaPlex: backend slots reserved for priming
                                  personas, after the session slots (no session
                                  gets them); ignored for Kyutai checkpoints */
    int prime_chunk;           /* positions (or saved voice rows) per prime chunk */
    lm_gpu_opts cuda;          /* the GPU backend's choices (the cuda.* options) */
} model_opts;

/* A persona snapshot the model made on a prime slot (engine thread):
 * restored into a session with sched_params.persona = &snap->p. Freed with
 * model_snap_free, which hands it back to the engine thread. */
typedef struct model_snap {
    pp_persona p;
    size_t bytes;              /* what it holds (the backend's kv_snap_info) */
    int positions;
    struct model_snap *next;   /* the model's free queue */
} model_snap;

/* One prime: submitted by the loop thread, run on the engine thread in
 * chunks between live steps on prime slot prime_slot, handed back by
 * model_prime_poll. The task (and its prompt) belong to the submitter, but
 * are the engine's from submit until poll returns them. */
typedef struct model_prime {
    pjob_prompt prompt;        /* what to prime (owned by the submitter) */
    int prime_slot;            /* 0 .. model_prime_slots() - 1; one task per slot at a time */
    /* results */
    int rc;                    /* MS_OK: snap holds the persona */
    ms_error err;
    model_snap *snap;          /* the receiver's (model_snap_free) */
    int chunks;                /* engine chunks it took */
    double ms;                 /* wall time from its start to its snapshot */
    struct model_prime *next;  /* the model's queues */
} model_prime;

typedef struct model model;

model *model_open(const model_opts *o, ms_error *err);
void model_close(model *m);

/* The sched_model adapter (callbacks run on the engine thread). */
sched_model model_sched(model *m);

const lm_config *model_lm_config(const model *m);
/* model_open_stats: the backend's figures taken when it was opened (memory
 * used and free there, where, pipeline); any thread (read-only). */
const lm_backend_stats *model_open_stats(const model *m);
const char *model_variant_name(const model *m);
const char *model_backend_name(const model *m);
/* model_piece: the text piece for a sampled text token (U+2581 turned into
 * a space), or NULL when nothing is to be sent (PAD 3, EPAD 0, no
 * tokenizer, out of range). Borrowed. */
const char *model_piece(const model *m, int token);

/* Personas (PersonaPlex checkpoints; the loop thread unless said). */
/* model_prime_slots: prime slots reserved (0 for Kyutai). */
int model_prime_slots(const model *m);
/* model_prime_submit: queue task t for the engine (then sched_wake). */
void model_prime_submit(model *m, model_prime *t);
/* model_prime_poll: a finished task, or NULL (the engine signals the loop
 * after every chunk, so call it from the output callback). */
model_prime *model_prime_poll(model *m);
/* model_prime_abort: once the engine thread has stopped: every task not
 * yet polled is finished with an error, for model_prime_poll. */
void model_prime_abort(model *m);
/* model_snap_free: release a snapshot: freed on the engine thread at its
 * next background chunk (then sched_wake), or by model_close. The caller
 * guarantees no session still restores it. */
void model_snap_free(model *m, model_snap *s);
/* model_mimi: the host copy of the codec for voice files (thread-safe,
 * read-only; NULL for Kyutai). model_spm_enc: the text encoder (NULL
 * without a tokenizer or for Kyutai). model_side_tokens: the codec's
 * SILENCE and SINE frames (pp_side_tokens). model_id: names the checkpoint
 * in persona cache keys. */
const mimi_model *model_mimi(const model *m);
const spm_enc *model_spm_enc(const model *m);
void model_side_tokens(const model *m, int silence[PP_SIDE_CODEBOOKS], int sine[PP_SIDE_CODEBOOKS]);
const char *model_id(const model *m);

/* model_probe_variant: the variant of the checkpoint in lm_dir as model_open
 * would resolve it (v, or detected when LM_VARIANT_AUTO), from its
 * configuration and tensor shapes (the weights are mapped, not read). */
int model_probe_variant(const char *lm_dir, lm_variant v, lm_variant *out, ms_error *err);

#endif
