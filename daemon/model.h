/* model.h - what the daemon serves: the LM (through a backend), Mimi and the
 * tokenizer, with the per-slot LMGen bookkeeping and Mimi streams, exposed
 * to the engine thread as a sched_model.
 *
 * One frame of a batch of slots is one frame step of the backend (encode
 * the user's 1920 samples, LMGen + LM step, decode Moshi's audio; the
 * backend owns each slot's K/V and codec state and applies the variant's
 * first-frame rule). The model owns each slot's LMGen bookkeeping and one
 * lm_frame per scheduler batch buffer, so that a batch's decode can run
 * while the next batch steps.
 *
 * Threads: model_open/close and the accessors on the loop thread at start
 * and exit; the sched_model callbacks on the engine thread only.
 */
#ifndef MOSHID_MODEL_H
#define MOSHID_MODEL_H

#include "err.h"
#include "backend.h"
#include "lm_config.h"
#include "scheduler.h"

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
    const char *record_dir;    /* debug: when set, each session's input codes
                                  (session-ID.codes, moshi-run's --codes-in format)
                                  and LM outputs (session-ID.jsonl, moshi-run's
                                  output format) are written there, on the engine
                                  thread (slow: for debugging only) */
    int step_delay_ms;         /* test aid: each frame step sleeps this long on
                                  the engine thread (0: off) */
} model_opts;

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

#endif
