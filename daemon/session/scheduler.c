/* scheduler.c - the engine thread and the per-slot frame rings. See scheduler.h. */
#include "scheduler.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "log.h"
#include "metrics.h"

enum { SLOT_FREE, SLOT_BEGIN, SLOT_JOB, SLOT_ACTIVE, SLOT_DETACH, SLOT_ENDED };

/* Weight of the newest step in the step-time average used for overload. */
#define SCHED_EWMA_ALPHA 0.2
/* While live frames are waiting or in flight, a start-up or background job
 * chunk runs at most this often, ms (at once whenever the engine has no
 * live frame): live frames first, and jobs still progress under full load. */
#define SCHED_JOB_EVERY_MS MS_FRAME_MS
/* Frame latency above which a debug line is logged, ms. */
#define SCHED_SLOW_FRAME_MS 20.0

/* Batch buffers: as many as the backend takes frame steps in flight. */
#define SCHED_BUFFERS LM_MAX_INFLIGHT

typedef struct slot {
    _Atomic int state;
    _Atomic uint32_t gen;
    sched_params params;
    /* input ring: loop -> engine */
    float *in;          /* (in_frames, MS_FRAME_SAMPLES) */
    double *in_t;       /* (in_frames) time the frame was complete, ms */
    _Atomic uint64_t in_head, in_tail;
    /* output ring: engine (or the model's thread, in handover) -> loop;
     * one producer at a time: a slot's frames are handed over under
     * hand_mu, its READY or ERROR only while no batch holds it; an entry is
     * the loop's from sched_pop until sched_release advances out_tail */
    sched_out *out;     /* (out_frames) */
    float *out_pcm;     /* (out_frames, MS_FRAME_SAMPLES) */
    _Atomic uint64_t out_head, out_tail;
    _Atomic int overflow;
    int overflow_told;  /* loop thread */
    int holding;        /* loop thread: sched_pop returned an entry not yet released */
    uint64_t step;      /* the next output frame's index: handover's (under hand_mu),
                           reset by the engine at begin (no batch holds the slot) */
    /* engine thread */
    uint64_t in_taken;  /* next input frame to put in a batch (>= in_tail) */
    int inflight;       /* submitted batches holding the slot */
} slot;

struct sched {
    sched_config cfg;
    sched_model m;
    slot *slots;
    uv_async_t async;
    void (*on_output)(void *ud);
    void *ud;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* held while a batch's outputs are handed over (handover): the engine
     * thread or the model's own thread */
    pthread_mutex_t hand_mu;
    int work;            /* under mu: something changed since the engine looked */
    int stop;            /* under mu */
    _Atomic int failed;
    ms_error fail_err;   /* written by the engine before failed is set */
    _Atomic int nfree;
    _Atomic int overloaded;
    _Atomic uint64_t progress;   /* engine-thread progress counter (loops that did work) */
    _Atomic int idle;    /* 1 while the engine thread waits for work (sched_idle) */
    double ewma_ms;      /* engine thread */
    double last_done_ms; /* engine thread: when the last batch was finished */
    int next_job;        /* engine thread: round-robin start of the job scan */
    double last_job_ms;  /* engine thread: when the last job chunk ran */
    sched_batch batch[SCHED_BUFFERS];
    int frames_made;     /* batch[0 .. frames_made - 1].f sized by the model's frame_alloc */
};

static void wake_engine(sched *s) {
    pthread_mutex_lock(&s->mu);
    s->work = 1;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* The slot's producer (see slot.out): append one output to its ring; 0
 * when full. */
static int out_push(sched *s, slot *sl, const sched_out *o, const float *pcm) {
    uint64_t h = atomic_load_explicit(&sl->out_head, memory_order_relaxed);
    uint64_t t = atomic_load_explicit(&sl->out_tail, memory_order_acquire);
    if (h - t >= (uint64_t)s->cfg.out_frames) return 0;
    size_t i = (size_t)(h % (uint64_t)s->cfg.out_frames);
    sl->out[i] = *o;
    sl->out[i].pcm = sl->out_pcm + i * (size_t)MS_FRAME_SAMPLES;
    if (pcm) memcpy(sl->out_pcm + i * (size_t)MS_FRAME_SAMPLES, pcm, sizeof(float) * (size_t)MS_FRAME_SAMPLES);
    atomic_store_explicit(&sl->out_head, h + 1, memory_order_release);
    return 1;
}

static void engine_fail(sched *s, const ms_error *e) {
    s->fail_err = *e;
    atomic_store(&s->failed, 1);
    LOGE("engine_failed", "code=%s msg=\"%s\"", ms_err_name(e->code), e->msg);
    uv_async_send(&s->async);
}

/* Engine thread: the slot's session is gone and nothing holds the slot. */
static void slot_free(sched *s, int i) {
    atomic_store_explicit(&s->slots[i].state, SLOT_FREE, memory_order_release);
    atomic_fetch_add(&s->nfree, 1);
    /* (engine_main signals the loop after this work: on_output runs, and a
     * session waiting for a slot, sess.c, attaches there) */
}

/* Engine thread: a start (begin or job) failed: end the slot now, tell the
 * session; the loop's detach frees it. If the loop detached meanwhile, free
 * it here. */
static void start_failed(sched *s, int i, int from, const ms_error *e) {
    slot *sl = &s->slots[i];
    LOGW("slot_start_failed", "slot=%d msg=\"%s\"", i, e->msg);
    /* a device error is sticky (every later call on the device fails too):
     * as fatal as a failed step, though only a start saw it */
    if (e->code == MS_ERR_DEVICE) engine_fail(s, e);
    s->m.end(s->m.ctx, i);
    sched_out o = {.kind = SCHED_OUT_ERROR, .gen = atomic_load(&sl->gen)};
    out_push(s, sl, &o, NULL);
    int expect = from;
    if (!atomic_compare_exchange_strong(&sl->state, &expect, SLOT_ENDED)) slot_free(s, i); /* DETACH won */
}

/* Engine thread: the slot is ready: READY to the session, unless the loop
 * detached it meanwhile (then it is ended and freed). */
static void start_done(sched *s, int i, int from) {
    slot *sl = &s->slots[i];
    sched_out o = {.kind = SCHED_OUT_READY, .gen = atomic_load(&sl->gen)};
    int expect = from;
    if (atomic_compare_exchange_strong(&sl->state, &expect, SLOT_ACTIVE)) {
        out_push(s, sl, &o, NULL);
        return;
    }
    s->m.end(s->m.ctx, i);   /* DETACH won */
    slot_free(s, i);
}

/* Engine thread: begin and end slots as the loop asked. Returns whether
 * anything was done. */
static int engine_admin(sched *s) {
    int did = 0;
    for (int i = 0; i < s->cfg.slots; i++) {
        slot *sl = &s->slots[i];
        int st = atomic_load_explicit(&sl->state, memory_order_acquire);
        if (st == SLOT_BEGIN) {
            ms_error e = {0};
            sl->step = 0;
            sl->in_taken = atomic_load(&sl->in_tail);
            did = 1;
            if (s->m.begin(s->m.ctx, i, &sl->params, &e) != MS_OK) {
                start_failed(s, i, SLOT_BEGIN, &e);
                continue;
            }
            if (s->m.job) {
                int expect = SLOT_BEGIN;
                if (!atomic_compare_exchange_strong(&sl->state, &expect, SLOT_JOB)) {
                    s->m.end(s->m.ctx, i);   /* detached during begin */
                    slot_free(s, i);
                }
            } else {
                start_done(s, i, SLOT_BEGIN);
            }
        } else if (st == SLOT_DETACH && sl->inflight == 0) {
            s->m.end(s->m.ctx, i);
            slot_free(s, i);
            did = 1;
        }
    }
    return did;
}

/* Engine thread: one chunk of one slot's start-up job or of the model's
 * background work (round robin over the slots and the background, which
 * counts as one more), so that live sessions keep their frame rate while
 * jobs run: at most one chunk between two steps. */
static int engine_job(sched *s) {
    int n = s->cfg.slots + (s->m.bg ? 1 : 0);
    for (int k = 0; k < n; k++) {
        int i = (s->next_job + k) % n;
        if (i == s->cfg.slots) { /* the model's background work */
            if (!s->m.bg(s->m.ctx)) continue;
            s->next_job = (i + 1) % n;
            return 1;
        }
        if (!s->m.job || atomic_load_explicit(&s->slots[i].state, memory_order_acquire) != SLOT_JOB) continue;
        s->next_job = (i + 1) % n;
        ms_error e = {0};
        int done = 0;
        if (s->m.job(s->m.ctx, i, &done, &e) != MS_OK) start_failed(s, i, SLOT_JOB, &e);
        else if (done) start_done(s, i, SLOT_JOB);
        return 1;
    }
    return 0;
}

/* Engine thread: whether an active slot holds a frame not yet in a batch. */
static int frames_waiting(sched *s) {
    for (int i = 0; i < s->cfg.slots; i++) {
        slot *sl = &s->slots[i];
        if (atomic_load_explicit(&sl->state, memory_order_acquire) == SLOT_ACTIVE &&
            atomic_load_explicit(&sl->in_head, memory_order_acquire) != sl->in_taken)
            return 1;
    }
    return 0;
}

/* Engine thread: every active slot with a frame not yet in a batch. */
static void gather(sched *s, sched_batch *b) {
    int n = 0;
    for (int i = 0; i < s->cfg.slots; i++) {
        slot *sl = &s->slots[i];
        if (atomic_load_explicit(&sl->state, memory_order_acquire) != SLOT_ACTIVE) continue;
        if (atomic_load_explicit(&sl->in_head, memory_order_acquire) == sl->in_taken) continue;
        size_t k = (size_t)(sl->in_taken % (uint64_t)s->cfg.in_frames);
        memcpy(b->pcm_in + (size_t)n * MS_FRAME_SAMPLES, sl->in + k * (size_t)MS_FRAME_SAMPLES, sizeof(float) * (size_t)MS_FRAME_SAMPLES);
        b->t_in[n] = sl->in_t[k];
        b->slots[n++] = i;
        sl->in_taken++;
        sl->inflight++;
    }
    b->f.n = n;
    b->handed = 0;
}

/* sched_batch.handover: the outputs of a finished batch to the slots'
 * rings, the input frames it consumed released, the loop signalled. On the
 * model's thread that finished the batch (before the model's wait returns)
 * or on the engine thread (after it); the slots stay the batch's until the
 * engine's wait, so none is freed or re-attached meanwhile. */
static void handover(sched_batch *b) {
    sched *s = b->owner;
    pthread_mutex_lock(&s->hand_mu);
    double t1 = ms_mono_ms();
    const lm_frame *f = &b->f;
    for (int j = 0; j < f->n; j++) {
        slot *sl = &s->slots[b->slots[j]];
        sched_out o = {.kind = SCHED_OUT_FRAME, .gen = atomic_load(&sl->gen), .step = sl->step++,
                       .has_pcm = f->has_out[j], .text = f->has_out[j] ? f->out[(size_t)j * f->nout] : -1,
                       .latency_ms = t1 - b->t_in[j]};
        met_observe_frame_ms(o.latency_ms);
        if (o.latency_ms > MS_FRAME_MS) met_add(MET_late_frames_total, 1);
        if (o.latency_ms > SCHED_SLOW_FRAME_MS)
            LOGD("slow_frame", "slot=%d step=%llu latency_ms=%.1f batch=%d", b->slots[j], (unsigned long long)o.step,
                 o.latency_ms, f->n);
        /* a detached slot's outputs are dropped (its session is gone) */
        if (atomic_load_explicit(&sl->state, memory_order_acquire) == SLOT_ACTIVE &&
            !out_push(s, sl, &o, f->pcm_out + (size_t)j * MS_FRAME_SAMPLES))
            atomic_store(&sl->overflow, 1);
        atomic_fetch_add_explicit(&sl->in_tail, 1, memory_order_release);
    }
    b->handed = 1;
    pthread_mutex_unlock(&s->hand_mu);
    uv_async_send(&s->async);
}

/* Engine thread: a batch the model finished (its wait returned): its
 * outputs handed over unless the model did already, the slots no longer
 * its. t0: when it was submitted. The step time (overload, the step
 * histogram) is the engine's time for this batch: from its submit or from
 * the previous batch's end, whichever is later (batches in flight overlap:
 * their time in flight is not the engine's cost per batch). */
static void deliver(sched *s, sched_batch *b, double t0) {
    double t1 = ms_mono_ms(), dt = t1 - (t0 > s->last_done_ms ? t0 : s->last_done_ms);
    s->last_done_ms = t1;
    s->ewma_ms = s->ewma_ms == 0 ? dt : (1 - SCHED_EWMA_ALPHA) * s->ewma_ms + SCHED_EWMA_ALPHA * dt;
    atomic_store(&s->overloaded, s->ewma_ms > MS_FRAME_MS);
    met_observe_step_ms(dt);
    met_add(MET_engine_steps_total, 1);
    met_add(MET_frames_stepped_total, (uint64_t)b->f.n);
    if (!b->handed) handover(b);
    for (int j = 0; j < b->f.n; j++) s->slots[b->slots[j]].inflight--;
    b->f.n = 0;
}

/* Engine thread: finish the oldest submitted batch and hand its outputs over. */
static void finish_oldest(sched *s, int *pend, double *pend_t0, int *npend) {
    sched_batch *p = &s->batch[pend[0]];
    ms_error e = {0};
    if (s->m.wait(s->m.ctx, p, &e) != MS_OK) {
        engine_fail(s, &e);
        for (int j = 0; j < p->f.n; j++) s->slots[p->slots[j]].inflight--;
        p->f.n = 0;
    } else {
        deliver(s, p, pend_t0[0]);
    }
    for (int k = 1; k < *npend; k++) {
        pend[k - 1] = pend[k];
        pend_t0[k - 1] = pend_t0[k];
    }
    (*npend)--;
    uv_async_send(&s->async);
}

static void *engine_main(void *arg) {
    sched *s = arg;
    int pend[SCHED_BUFFERS];          /* submitted batches, oldest first */
    double pend_t0[SCHED_BUFFERS];
    int npend = 0;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        s->work = 0;
        int stop = s->stop;
        pthread_mutex_unlock(&s->mu);
        if (stop) break;

        int did = engine_admin(s);
        /* one job chunk: when no live frame waits or is in flight (it then
         * delays a frame that comes meanwhile by one chunk at most), else
         * once per SCHED_JOB_EVERY_MS so jobs progress under full load */
        double now = ms_mono_ms();
        if ((npend == 0 && !frames_waiting(s)) || now - s->last_job_ms >= SCHED_JOB_EVERY_MS) {
            if (engine_job(s)) {
                did = 1;
                s->last_job_ms = now;
            }
        }
        /* a buffer no submitted batch uses */
        int cur = 0;
        for (int used = 1; used;) {
            used = 0;
            for (int k = 0; k < npend; k++)
                if (pend[k] == cur) used = 1;
            if (used) cur++;
        }
        sched_batch *b = &s->batch[cur];
        if (!atomic_load(&s->failed)) gather(s, b);
        else b->f.n = 0;
        if (b->f.n > 0) {
            ms_error e = {0};
            double t0 = ms_mono_ms();
            if (s->m.submit(s->m.ctx, b, &e) != MS_OK) {
                engine_fail(s, &e);
                for (int j = 0; j < b->f.n; j++) s->slots[b->slots[j]].inflight--;
                b->f.n = 0;
            } else {
                pend[npend] = cur;
                pend_t0[npend++] = t0;
            }
            did = 1;
        }
        /* While the newer batches run, finish the oldest when every buffer
         * is taken, or when nothing new came (nothing to overlap it with). */
        if (npend == SCHED_BUFFERS || (npend > 0 && b->f.n == 0)) {
            finish_oldest(s, pend, pend_t0, &npend);
            did = 1;
        }
        if (did) {
            atomic_fetch_add(&s->progress, 1);
            uv_async_send(&s->async);
            continue;
        }
        /* Nothing to step and nothing in flight: the engine is keeping up,
         * whatever the average of the last steps says (it is updated only
         * by steps, so without this an overload would outlive the sessions
         * that caused it and /healthz would refuse new ones for ever). */
        atomic_store(&s->overloaded, 0);
        pthread_mutex_lock(&s->mu);
        /* idle only while it waits: set before the wait, cleared before
         * any work is looked at again (a step that never returns then
         * reads as neither idle nor progressing) */
        atomic_store(&s->idle, 1);
        while (!s->work && !s->stop) pthread_cond_wait(&s->cv, &s->mu);
        atomic_store(&s->idle, 0);
        pthread_mutex_unlock(&s->mu);
    }
    while (npend > 0) finish_oldest(s, pend, pend_t0, &npend);   /* stopping: the model keeps no batch of ours */
    return NULL;
}

static void on_async(uv_async_t *a) {
    sched *s = a->data;
    s->on_output(s->ud);
}

/* Everything sched_create allocates; safe on a partly made s. */
static void sched_release_memory(sched *s) {
    for (int i = 0; s->slots && i < s->cfg.slots; i++) {
        free(s->slots[i].in); free(s->slots[i].in_t); free(s->slots[i].out); free(s->slots[i].out_pcm);
    }
    free(s->slots);
    for (int k = 0; k < SCHED_BUFFERS; k++) {
        sched_batch *b = &s->batch[k];
        if (k < s->frames_made) s->m.frame_free(s->m.ctx, &b->f);
        free(b->slots); free(b->pcm_in); free(b->t_in);
    }
    free(s);
}

sched *sched_create(uv_loop_t *loop, const sched_config *cfg, const sched_model *m, void (*on_output)(void *ud),
                    void *ud, ms_error *err) {
    if (cfg->slots <= 0 || cfg->slots > m->max_slots || cfg->in_frames <= 0 || cfg->out_frames <= 0 || !m->begin ||
        !m->end || !m->submit || !m->wait || !m->frame_alloc || !m->frame_free) {
        ms_err_set(err, MS_ERR_ARG, "scheduler: bad configuration (slots %d of %d, rings %d/%d)", cfg->slots,
                   m->max_slots, cfg->in_frames, cfg->out_frames);
        return NULL;
    }
    sched *s = calloc(1, sizeof *s);
    if (!s) { ms_err_set(err, MS_ERR_NOMEM, "scheduler: out of memory"); return NULL; }
    s->cfg = *cfg;
    s->m = *m;
    s->on_output = on_output;
    s->ud = ud;
    size_t S = (size_t)cfg->slots;
    s->slots = calloc(S, sizeof *s->slots);
    int ok = s->slots != NULL;
    for (int k = 0; k < SCHED_BUFFERS; k++) {
        sched_batch *b = &s->batch[k];
        b->id = k;
        b->handover = handover;
        b->owner = s;
        b->slots = calloc(S, sizeof *b->slots);
        b->pcm_in = calloc(S * MS_FRAME_SAMPLES, sizeof(float));
        b->t_in = calloc(S, sizeof(double));
        ok = ok && b->slots && b->pcm_in && b->t_in;
        if (ok && m->frame_alloc(m->ctx, &b->f, cfg->slots, err) != MS_OK) {
            sched_release_memory(s);
            return NULL;
        }
        s->frames_made += ok;
        b->f.slots = b->slots;
        b->f.pcm_in = b->pcm_in;
    }
    for (size_t i = 0; ok && i < S; i++) {
        slot *sl = &s->slots[i];
        sl->in = calloc((size_t)cfg->in_frames * MS_FRAME_SAMPLES, sizeof(float));
        sl->in_t = calloc((size_t)cfg->in_frames, sizeof(double));
        sl->out = calloc((size_t)cfg->out_frames, sizeof(sched_out));
        sl->out_pcm = calloc((size_t)cfg->out_frames * MS_FRAME_SAMPLES, sizeof(float));
        ok = sl->in && sl->in_t && sl->out && sl->out_pcm;
    }
    if (!ok) {
        ms_err_set(err, MS_ERR_NOMEM, "scheduler: out of memory for %d slots", cfg->slots);
        sched_release_memory(s);
        return NULL;
    }
    s->nfree = cfg->slots;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_mutex_init(&s->hand_mu, NULL);
    if (pthread_create(&s->thread, NULL, engine_main, s) != 0) {
        ms_err_set(err, MS_ERR_NOMEM, "scheduler: cannot start the engine thread");
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
        pthread_mutex_destroy(&s->hand_mu);
        sched_release_memory(s);
        return NULL;
    }
    /* the async handle last: nothing to close on the failures above */
    uv_async_init(loop, &s->async, on_async);
    s->async.data = s;
    return s;
}

static void async_closed(uv_handle_t *h) {
    sched *s = h->data;
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->hand_mu);
    sched_release_memory(s);
}

void sched_free(sched *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    /* End the slots still held, on this thread now that the engine is gone
     * (ENDED and FREE slots hold nothing). */
    for (int i = 0; i < s->cfg.slots; i++) {
        int st = atomic_load(&s->slots[i].state);
        if (st == SLOT_JOB || st == SLOT_ACTIVE || st == SLOT_DETACH) s->m.end(s->m.ctx, i);
    }
    uv_close((uv_handle_t *)&s->async, async_closed);
}

int sched_attach(sched *s, const sched_params *p, int *slot_out, uint32_t *gen) {
    for (int i = 0; i < s->cfg.slots; i++) {
        slot *sl = &s->slots[i];
        if (atomic_load_explicit(&sl->state, memory_order_acquire) != SLOT_FREE) continue;
        /* The engine does not touch a FREE slot: reset its rings here. */
        atomic_store(&sl->in_head, 0);
        atomic_store(&sl->in_tail, 0);
        atomic_store(&sl->out_head, 0);
        atomic_store(&sl->out_tail, 0);
        atomic_store(&sl->overflow, 0);
        sl->overflow_told = 0;
        sl->holding = 0;
        sl->params = *p;
        uint32_t g = atomic_load(&sl->gen) + 1;
        atomic_store(&sl->gen, g);
        atomic_fetch_sub(&s->nfree, 1);
        atomic_store_explicit(&sl->state, SLOT_BEGIN, memory_order_release);
        *slot_out = i;
        *gen = g;
        wake_engine(s);
        return MS_OK;
    }
    return MS_ERR_BUSY;
}

int sched_push(sched *s, int i, uint32_t gen, const float *pcm) {
    slot *sl = &s->slots[i];
    if (atomic_load(&sl->gen) != gen) return MS_ERR_STATE;
    uint64_t h = atomic_load_explicit(&sl->in_head, memory_order_relaxed);
    uint64_t t = atomic_load_explicit(&sl->in_tail, memory_order_acquire);
    if (h - t >= (uint64_t)s->cfg.in_frames) return MS_ERR_LIMIT;
    size_t k = (size_t)(h % (uint64_t)s->cfg.in_frames);
    memcpy(sl->in + k * (size_t)MS_FRAME_SAMPLES, pcm, sizeof(float) * (size_t)MS_FRAME_SAMPLES);
    sl->in_t[k] = ms_mono_ms();
    atomic_store_explicit(&sl->in_head, h + 1, memory_order_release);
    wake_engine(s);
    return MS_OK;
}

int sched_backlog(const sched *s, int i, uint32_t gen, int *frames, double *oldest_ms) {
    slot *sl = &s->slots[i];
    *frames = 0;
    *oldest_ms = 0;
    if (atomic_load(&sl->gen) != gen) return MS_ERR_STATE;
    uint64_t h = atomic_load_explicit(&sl->in_head, memory_order_relaxed);   /* ours */
    uint64_t t = atomic_load_explicit(&sl->in_tail, memory_order_acquire);
    if (h == t) return MS_OK;
    *frames = (int)(h - t);
    *oldest_ms = sl->in_t[t % (uint64_t)s->cfg.in_frames];   /* written by sched_push, this thread */
    return MS_OK;
}

int sched_pop(sched *s, int i, uint32_t gen, sched_out *out) {
    slot *sl = &s->slots[i];
    if (atomic_load(&sl->gen) != gen) return 0;
    for (;;) {
        uint64_t t = atomic_load_explicit(&sl->out_tail, memory_order_relaxed);
        if (atomic_load_explicit(&sl->out_head, memory_order_acquire) == t) {
            if (atomic_load(&sl->overflow) && !sl->overflow_told) {
                sl->overflow_told = 1;
                sl->holding = 0;   /* nothing in the ring to release */
                *out = (sched_out){.kind = SCHED_OUT_ERROR, .gen = gen};
                return 1;
            }
            return 0;
        }
        *out = sl->out[t % (uint64_t)s->cfg.out_frames];
        if (out->gen == gen) {
            sl->holding = 1;
            return 1;
        }
        atomic_store_explicit(&sl->out_tail, t + 1, memory_order_release);   /* stale: drop */
    }
}

void sched_release(sched *s, int i, uint32_t gen) {
    slot *sl = &s->slots[i];
    if (atomic_load(&sl->gen) != gen || !sl->holding) return;
    sl->holding = 0;
    atomic_fetch_add_explicit(&sl->out_tail, 1, memory_order_release);
}

void sched_detach(sched *s, int i, uint32_t gen) {
    slot *sl = &s->slots[i];
    if (atomic_load(&sl->gen) != gen) return;
    int st = atomic_load(&sl->state);
    for (;;) {
        if (st == SLOT_FREE || st == SLOT_DETACH) return;
        if (st == SLOT_ENDED) {
            /* its start failed and the engine ended it: free it here */
            if (atomic_compare_exchange_weak(&sl->state, &st, SLOT_FREE)) {
                atomic_fetch_add(&s->nfree, 1);
                return;
            }
            continue;
        }
        if (atomic_compare_exchange_weak(&sl->state, &st, SLOT_DETACH)) break;
    }
    wake_engine(s);
}

void sched_wake(sched *s) { wake_engine(s); }

int sched_free_slots(const sched *s) { return atomic_load(&((sched *)s)->nfree); }

int sched_detaching(const sched *s) {
    int n = 0;
    for (int i = 0; i < s->cfg.slots; i++)
        n += atomic_load_explicit(&((sched *)s)->slots[i].state, memory_order_acquire) == SLOT_DETACH;
    return n;
}
int sched_capacity(const sched *s) { return s->cfg.slots; }
int sched_overloaded(const sched *s) { return atomic_load(&((sched *)s)->overloaded); }
uint64_t sched_progress(const sched *s) { return atomic_load(&((sched *)s)->progress); }
int sched_idle(const sched *s) { return atomic_load(&((sched *)s)->idle); }

int sched_failed(const sched *s, ms_error *err) {
    if (!atomic_load(&((sched *)s)->failed)) return 0;
    if (err) *err = s->fail_err;
    return 1;
}
