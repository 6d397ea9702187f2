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
 * Pipelining: the engine submits each batch as soon as it is gathered and
 * finishes the oldest submitted one (waits for it, pushes its outputs) when
 * every batch buffer is taken or when nothing new came: the model works on
 * the newer batches meanwhile (LM_MAX_INFLIGHT buffers). A model that
 * finishes batches on a thread of its own hands their outputs over from
 * there as soon as they are final (sched_batch.handover), ahead of the
 * engine's wait. A slot's life: FREE -> BEGIN (attached by the loop) -> JOB (the
 * model's start-up work, in chunks between steps) -> ACTIVE -> DETACH (the
 * loop detached it; the engine ends it once no submitted batch holds it) ->
 * FREE. A start that fails ends the slot at once (ENDED) and the loop's
 * detach frees it. Every change the two threads race on is a
 * compare-and-swap.
 *
 * Thread rules: sched_create/free, attach, push, pop, detach and the
 * accessors run on the loop thread; the model callbacks run on the engine
 * thread only (frame_alloc and frame_free: in sched_create and
 * sched_free); sched_batch.handover on the model's thread that finished
 * the batch, or the engine thread.
 */
#ifndef MOSHID_SCHED_H
#define MOSHID_SCHED_H

#include <stdint.h>
#include <uv.h>

#include "backend.h"
#include "err.h"
#include "frame.h"

/* Per-session parameters handed to the model when a slot begins. */
typedef struct sched_params {
    lm_samp samp;                  /* sampling, resolved once from the query and the
                                      configuration's defaults (sess.c) */
    const void *persona;           /* model-specific (snapshot to restore), may be NULL */
    uint64_t session_id;           /* for logs and debug recordings */
} sched_params;

/* One batch of the engine: the engine's frame (lm_frame, backend.h) and
 * the scheduler's own arrays around it. The scheduler holds LM_MAX_INFLIGHT
 * of them (the outputs of one are pushed while the others are in the
 * model); the model sizes each frame once (frame_alloc) and has it from
 * submit until wait returns. */
typedef struct sched_batch {
    lm_frame f;                    /* f.n rows; f.slots = slots, f.pcm_in = pcm_in; after
                                      wait f.has_out, f.out (text at out[j * nout]) and
                                      f.pcm_out; f.gens is the model's */
    int id;                        /* 0 .. LM_MAX_INFLIGHT - 1 */
    int *slots;                    /* (slots) the rows' slots */
    float *pcm_in;                 /* (slots, MS_FRAME_SAMPLES) the rows' input */
    double *t_in;                  /* (slots) when each input frame was complete, ms */
    /* The early hand-over: handover(b) (the scheduler's) gives the
     * results to the sessions. A model whose frame's results are final
     * before its wait returns, on a thread of its own, may call it there,
     * once per submitted batch, before its wait returns; for a batch it did
     * not hand over, the engine thread does after wait. */
    void (*handover)(struct sched_batch *b);
    void *owner;                   /* scheduler's: for handover */
    int handed;                    /* scheduler's: set by handover, read after wait */
} sched_batch;

/* The model as the engine thread sees it (an adapter over the backend).
 * Every callback runs on the engine thread. */
typedef struct sched_model {
    void *ctx;
    int max_slots;                 /* slots the model holds */
    /* begin: start a new session on slot: short work only (reset). Long work
     * (a persona's restore, priming) is left to job. */
    int (*begin)(void *ctx, int slot, const sched_params *p, ms_error *err);
    /* job: one bounded chunk (about a frame period at most) of the slot's
     * start-up work; *done = 1 when the slot is ready to step. NULL: begin
     * leaves nothing to do. The engine interleaves chunks with steps. */
    int (*job)(void *ctx, int slot, int *done, ms_error *err);
    /* bg: one bounded chunk (as job) of the model's own work that belongs
     * to no session slot (priming personas on slots the scheduler does not
     * hand out, freeing snapshots); returns 1 when it did something, 0 when
     * it has nothing to do. The engine takes slot job chunks and bg chunks
     * in turn, one per iteration between steps. NULL: none. The loop
     * thread calls sched_wake after giving the model such work. */
    int (*bg)(void *ctx);
    /* end: the session left (or its start failed); release what the slot
     * holds. Called once per begin, never while the slot is in a submitted
     * batch. */
    void (*end)(void *ctx, int slot);
    /* frame_alloc: size f's arrays for batches of up to max_n slots (at
     * sched_create, loop thread); frame_free: release them (sched_free). */
    int (*frame_alloc)(void *ctx, lm_frame *f, int max_n, ms_error *err);
    void (*frame_free)(void *ctx, lm_frame *f);
    /* submit: start the frame b->f (one frame for each of its slots); wait: finish the oldest
     * submitted batch (waits come in submit order; at most LM_MAX_INFLIGHT
     * batches are submitted and not waited; a slot may be in several). A
     * failure is fatal for the process (the service manager restarts it). */
    int (*submit)(void *ctx, sched_batch *b, ms_error *err);
    int (*wait)(void *ctx, sched_batch *b, ms_error *err);
} sched_model;

/* What the engine hands back to the loop for one slot. */
typedef enum { SCHED_OUT_READY, SCHED_OUT_FRAME, SCHED_OUT_ERROR } sched_out_kind;

typedef struct sched_out {
    sched_out_kind kind;
    uint32_t gen;
    uint64_t step;          /* the session's frame index (FRAME) */
    int has_pcm, text;      /* FRAME */
    double latency_ms;      /* FRAME: input frame complete -> output ready */
    const float *pcm;       /* FRAME: MS_FRAME_SAMPLES, owned by the ring entry */
} sched_out;

typedef struct sched_config {
    int slots;               /* sessions served at once (<= model max_slots) */
    int in_frames;           /* input ring capacity per slot, frames */
    int out_frames;          /* output ring capacity per slot, frames */
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
/* sched_push: queue one input frame (MS_FRAME_SAMPLES floats, copied).
 * MS_ERR_LIMIT when the slot's input ring is full (the client runs ahead). */
int sched_push(sched *s, int slot, uint32_t gen, const float *pcm);
/* sched_backlog: the slot's input the engine has not finished: *frames
 * pushed whose output has not been delivered yet (queued or in a step),
 * and *oldest_ms, when the oldest of them was pushed (CLOCK_MONOTONIC ms,
 * the clock of ms_mono_ms; 0 when there is none). Loop thread (it reads the
 * push times it wrote). MS_ERR_STATE when gen is not the slot's session. */
int sched_backlog(const sched *s, int slot, uint32_t gen, int *frames, double *oldest_ms);
/* sched_pop: the slot's oldest unreleased output, or 0 when none; the
 * entry (its pcm included) stays the caller's, and the engine does not
 * write over it, until sched_release. Outputs of an older generation are
 * dropped here. sched_release: done with the entry sched_pop returned (the
 * next sched_pop returns the next one). */
int sched_pop(sched *s, int slot, uint32_t gen, sched_out *out);
void sched_release(sched *s, int slot, uint32_t gen);
/* sched_detach: the session is gone; the engine ends the slot and frees it
 * for reuse (at once when the engine is idle, else once no submitted batch
 * holds the slot: within a step or two); on_output runs after it is free. */
void sched_detach(sched *s, int slot, uint32_t gen);
/* sched_detaching: slots detached and not yet free (each is free within a
 * step or two). */
int sched_detaching(const sched *s);

/* sched_wake: the model has work for bg: make the engine look (loop
 * thread, or any thread). */
void sched_wake(sched *s);

/* Figures for /healthz and /metrics. */
int sched_free_slots(const sched *s);
int sched_capacity(const sched *s);
/* sched_overloaded: 1 while recent steps take longer than a frame (a
 * moving average over steps), 0 again as soon as the engine runs out of
 * work (an idle engine is not behind). */
int sched_overloaded(const sched *s);
/* sched_progress: a counter the engine thread advances each time it does
 * something (a step, a job chunk, a begin or an end); unchanged while it is
 * idle or stuck (any thread). */
uint64_t sched_progress(const sched *s);
/* sched_idle: 1 while the engine thread waits for work (nothing queued,
 * nothing in flight), 0 while it looks at or does work (a step that never
 * returns reads 0 for ever). With sched_progress: the engine is healthy
 * when the counter moved or it is idle (the watchdog, app.c). Any
 * thread; a 1 may be stale by the time work arrives, never while a step
 * runs. */
int sched_idle(const sched *s);
/* sched_failed: 1 after a model failure (the daemon exits non-zero). */
int sched_failed(const sched *s, ms_error *err);

#endif
