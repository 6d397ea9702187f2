/* scheduler.h - the engine thread: continuous batching of session frames.
 *
 * The loop thread attaches sessions to slots, pushes 1920-sample PCM frames
 * into each slot's input ring and drains each slot's output ring when the
 * engine signals (one uv_async_t for all slots; signals coalesce). The engine
 * thread owns the model: whenever at least one active slot holds a full
 * frame it steps every such slot together as one batch (under light load a
 * frame goes through at once; under heavy load batches grow by themselves).
 *
 * Slots carry a generation number: a result of a slot's previous session
 * never reaches the next session that gets the same slot.
 *
 * Thread rules: sched_create/free, attach, push, pop, detach and the
 * accessors run on the loop thread; the model callbacks run on the engine
 * thread only.
 */
#ifndef MOSHID_SCHED_H
#define MOSHID_SCHED_H

#include <stdint.h>
#include <uv.h>

#include "backend.h"
#include "err.h"

/* Per-session parameters handed to the model when a slot begins. */
typedef struct sched_params {
    lm_samp samp;                  /* sampling, resolved once from the query and the
                                      configuration's defaults (sess.c) */
    const void *persona;           /* model-specific (snapshot to restore), may be NULL */
    uint64_t session_id;           /* for logs and debug recordings */
} sched_params;

/* The model as the engine thread sees it (an adapter over LM + Mimi). */
typedef struct sched_model {
    void *ctx;
    int max_slots;                 /* slots the model holds */
    int frame_samples;             /* PCM samples per frame (1920) */
    /* begin: prepare slot for a new session (reset or restore state). */
    int (*begin)(void *ctx, int slot, const sched_params *p, ms_error *err);
    /* end: the session left; release what the slot holds. */
    void (*end)(void *ctx, int slot);
    /* step: one frame for each of n slots. pcm_in (n, frame_samples);
     * writes pcm_out (n, frame_samples), has_pcm[n] (0 while the model has
     * no audio yet) and text[n] (a token id, or -1 for none). A failure is
     * fatal for the process (the service manager restarts it). */
    int (*step)(void *ctx, int n, const int *slots, const float *pcm_in, float *pcm_out, int *has_pcm,
                int *text, ms_error *err);
} sched_model;

/* What the engine hands back to the loop for one slot. */
typedef enum { SCHED_OUT_READY, SCHED_OUT_FRAME, SCHED_OUT_ERROR } sched_out_kind;

typedef struct sched_out {
    sched_out_kind kind;
    uint32_t gen;
    uint64_t step;          /* the session's frame index (FRAME) */
    int has_pcm, text;      /* FRAME */
    double latency_ms;      /* FRAME: input frame complete -> output ready */
    float *pcm;             /* FRAME: frame_samples, owned by the ring slot */
} sched_out;

typedef struct sched_config {
    int slots;               /* sessions served at once (<= model max_slots) */
    int in_frames;           /* input ring capacity per slot, frames */
    int out_frames;          /* output ring capacity per slot, frames */
    double frame_ms;         /* 80 */
} sched_config;

typedef struct sched sched;

/* sched_create: start the engine thread. on_output runs on the loop thread
 * (through a uv_async_t on loop) after steps; it should drain every slot
 * with sched_pop. */
sched *sched_create(uv_loop_t *loop, const sched_config *cfg, const sched_model *m,
                    void (*on_output)(void *ud), void *ud, ms_error *err);
/* sched_free: stop the engine thread, close the async handle (the loop must
 * run once more for the close callback); fatal_cb never fires afterwards. */
void sched_free(sched *s);

/* sched_attach: take a free slot for a new session; *slot and *gen identify
 * it. Returns MS_ERR_BUSY when every slot is taken. A READY output follows
 * when the model has begun the slot (or ERROR). */
int sched_attach(sched *s, const sched_params *p, int *slot, uint32_t *gen);
/* sched_push: queue one input frame (frame_samples floats, copied).
 * MS_ERR_LIMIT when the slot's input ring is full (the client runs ahead). */
int sched_push(sched *s, int slot, uint32_t gen, const float *pcm);
/* sched_pop: next output of the slot, or 0 when none. The pcm pointer is
 * valid until the next sched_pop on that slot. Outputs of an older
 * generation are dropped here. */
int sched_pop(sched *s, int slot, uint32_t gen, sched_out *out);
/* sched_detach: the session is gone; the engine ends the slot and frees it
 * for reuse. */
void sched_detach(sched *s, int slot, uint32_t gen);

/* Figures for /healthz and /metrics. */
int sched_free_slots(const sched *s);
int sched_capacity(const sched *s);
/* sched_overloaded: 1 while recent steps take longer than a frame. */
int sched_overloaded(const sched *s);
/* sched_failed: 1 after a model failure (the daemon exits non-zero). */
int sched_failed(const sched *s, ms_error *err);

#endif
