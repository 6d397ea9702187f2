/* scheduler.c - the engine thread and the per-slot frame rings. See scheduler.h. */
#include "scheduler.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "metrics.h"

enum { SLOT_FREE, SLOT_BEGIN, SLOT_ACTIVE, SLOT_DETACH };

/* Weight of the newest step in the step-time average used for overload. */
#define SCHED_EWMA_ALPHA 0.2

typedef struct slot {
    _Atomic int state;
    _Atomic uint32_t gen;
    sched_params params;
    /* input ring: loop -> engine */
    float *in;          /* (in_frames, F) */
    double *in_t;       /* (in_frames) time the frame was complete, ms */
    _Atomic uint64_t in_head, in_tail;
    /* output ring: engine -> loop */
    sched_out *out;     /* (out_frames) */
    float *out_pcm;     /* (out_frames, F) */
    _Atomic uint64_t out_head, out_tail;
    _Atomic int overflow;
    int overflow_told;  /* loop thread */
    uint64_t step;      /* engine thread */
} slot;

struct sched {
    sched_config cfg;
    sched_model m;
    int F;
    slot *slots;
    uv_async_t async;
    void (*on_output)(void *ud);
    void *ud;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int work;            /* under mu: something changed since the engine looked */
    int stop;            /* under mu */
    _Atomic int failed;
    ms_error fail_err;   /* written by the engine before failed is set */
    _Atomic int nfree;
    _Atomic int overloaded;
    double ewma_ms;      /* engine thread */
    /* engine-thread batch buffers */
    int *batch;          /* (slots) */
    float *pcm_in, *pcm_out; /* (slots, F) */
    int *has_pcm, *text; /* (slots) */
    double *t_in;        /* (slots) */
};

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void wake_engine(sched *s) {
    pthread_mutex_lock(&s->mu);
    s->work = 1;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* Engine thread: append one output to the slot's ring; 0 when full. */
static int out_push(sched *s, slot *sl, const sched_out *o, const float *pcm) {
    uint64_t h = atomic_load_explicit(&sl->out_head, memory_order_relaxed);
    uint64_t t = atomic_load_explicit(&sl->out_tail, memory_order_acquire);
    if (h - t >= (uint64_t)s->cfg.out_frames) return 0;
    size_t i = (size_t)(h % (uint64_t)s->cfg.out_frames);
    sl->out[i] = *o;
    sl->out[i].pcm = sl->out_pcm + i * (size_t)s->F;
    if (pcm) memcpy(sl->out[i].pcm, pcm, sizeof(float) * (size_t)s->F);
    atomic_store_explicit(&sl->out_head, h + 1, memory_order_release);
    return 1;
}

static void engine_fail(sched *s, const ms_error *e) {
    s->fail_err = *e;
    atomic_store(&s->failed, 1);
    LOGE("engine_failed", "code=%s msg=\"%s\"", ms_err_name(e->code), e->msg);
    uv_async_send(&s->async);
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
            sched_out o = {.kind = SCHED_OUT_READY, .gen = atomic_load(&sl->gen)};
            if (s->m.begin(s->m.ctx, i, &sl->params, &e) != MS_OK) {
                LOGW("slot_begin_failed", "slot=%d msg=\"%s\"", i, e.msg);
                o.kind = SCHED_OUT_ERROR;
            }
            sl->step = 0;
            out_push(s, sl, &o, NULL);
            atomic_store_explicit(&sl->state, o.kind == SCHED_OUT_READY ? SLOT_ACTIVE : SLOT_DETACH,
                                  memory_order_release);
            if (o.kind != SCHED_OUT_READY) s->m.end(s->m.ctx, i);
            did = 1;
        } else if (st == SLOT_DETACH) {
            s->m.end(s->m.ctx, i);
            atomic_store_explicit(&sl->state, SLOT_FREE, memory_order_release);
            atomic_fetch_add(&s->nfree, 1);
            did = 1;
        }
    }
    return did;
}

static void *engine_main(void *arg) {
    sched *s = arg;
    const int F = s->F;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        s->work = 0;
        int stop = s->stop;
        pthread_mutex_unlock(&s->mu);
        if (stop) break;

        int did = engine_admin(s);
        /* Gather every active slot holding a full frame. */
        int n = 0;
        for (int i = 0; i < s->cfg.slots; i++) {
            slot *sl = &s->slots[i];
            if (atomic_load_explicit(&sl->state, memory_order_acquire) != SLOT_ACTIVE) continue;
            uint64_t t = atomic_load_explicit(&sl->in_tail, memory_order_relaxed);
            if (atomic_load_explicit(&sl->in_head, memory_order_acquire) == t) continue;
            size_t k = (size_t)(t % (uint64_t)s->cfg.in_frames);
            memcpy(s->pcm_in + (size_t)n * F, sl->in + k * (size_t)F, sizeof(float) * (size_t)F);
            s->t_in[n] = sl->in_t[k];
            s->batch[n++] = i;
        }
        if (n == 0) {
            if (did) { uv_async_send(&s->async); continue; }
            pthread_mutex_lock(&s->mu);
            while (!s->work && !s->stop) pthread_cond_wait(&s->cv, &s->mu);
            pthread_mutex_unlock(&s->mu);
            continue;
        }
        if (atomic_load(&s->failed)) { /* keep serving nothing after a failure */
            for (int j = 0; j < n; j++) atomic_fetch_add(&s->slots[s->batch[j]].in_tail, 1);
            continue;
        }
        double t0 = now_ms();
        ms_error e = {0};
        if (s->m.step(s->m.ctx, n, s->batch, s->pcm_in, s->pcm_out, s->has_pcm, s->text, &e) != MS_OK) {
            engine_fail(s, &e);
            continue;
        }
        double t1 = now_ms(), dt = t1 - t0;
        s->ewma_ms = s->ewma_ms == 0 ? dt : (1 - SCHED_EWMA_ALPHA) * s->ewma_ms + SCHED_EWMA_ALPHA * dt;
        atomic_store(&s->overloaded, s->ewma_ms > s->cfg.frame_ms);
        met_observe_step_ms(dt);
        met_add(MET_engine_steps_total, 1);
        met_add(MET_frames_stepped_total, (uint64_t)n);
        for (int j = 0; j < n; j++) {
            slot *sl = &s->slots[s->batch[j]];
            sched_out o = {.kind = SCHED_OUT_FRAME, .gen = atomic_load(&sl->gen), .step = sl->step++,
                           .has_pcm = s->has_pcm[j], .text = s->text[j], .latency_ms = t1 - s->t_in[j]};
            met_observe_frame_ms(o.latency_ms);
            if (o.latency_ms > s->cfg.frame_ms) met_add(MET_late_frames_total, 1);
            if (o.latency_ms > 20)
                LOGD("slow_frame", "slot=%d step=%llu latency_ms=%.1f step_ms=%.1f batch=%d queued=%llu t_in=%.1f t0=%.1f",
                     s->batch[j], (unsigned long long)o.step, o.latency_ms, dt, n,
                     (unsigned long long)(atomic_load(&sl->in_head) - atomic_load(&sl->in_tail)), s->t_in[j], t0);
            if (!out_push(s, sl, &o, s->pcm_out + (size_t)j * F)) atomic_store(&sl->overflow, 1);
            atomic_fetch_add_explicit(&sl->in_tail, 1, memory_order_release);
        }
        uv_async_send(&s->async);
    }
    return NULL;
}

static void on_async(uv_async_t *a) {
    sched *s = a->data;
    s->on_output(s->ud);
}

sched *sched_create(uv_loop_t *loop, const sched_config *cfg, const sched_model *m, void (*on_output)(void *ud),
                    void *ud, ms_error *err) {
    if (cfg->slots <= 0 || cfg->slots > m->max_slots || cfg->in_frames <= 0 || cfg->out_frames <= 0 ||
        m->frame_samples <= 0) {
        ms_err_set(err, MS_ERR_ARG, "scheduler: bad configuration (slots %d of %d, rings %d/%d)", cfg->slots,
                   m->max_slots, cfg->in_frames, cfg->out_frames);
        return NULL;
    }
    sched *s = calloc(1, sizeof *s);
    if (!s) { ms_err_set(err, MS_ERR_NOMEM, "scheduler: out of memory"); return NULL; }
    s->cfg = *cfg;
    s->m = *m;
    s->F = m->frame_samples;
    s->on_output = on_output;
    s->ud = ud;
    size_t F = (size_t)s->F, S = (size_t)cfg->slots;
    s->slots = calloc(S, sizeof *s->slots);
    s->batch = calloc(S, sizeof *s->batch);
    s->pcm_in = calloc(S * F, sizeof(float));
    s->pcm_out = calloc(S * F, sizeof(float));
    s->has_pcm = calloc(S, sizeof(int));
    s->text = calloc(S, sizeof(int));
    s->t_in = calloc(S, sizeof(double));
    int ok = s->slots && s->batch && s->pcm_in && s->pcm_out && s->has_pcm && s->text && s->t_in;
    for (size_t i = 0; ok && i < S; i++) {
        slot *sl = &s->slots[i];
        sl->in = calloc((size_t)cfg->in_frames * F, sizeof(float));
        sl->in_t = calloc((size_t)cfg->in_frames, sizeof(double));
        sl->out = calloc((size_t)cfg->out_frames, sizeof(sched_out));
        sl->out_pcm = calloc((size_t)cfg->out_frames * F, sizeof(float));
        ok = sl->in && sl->in_t && sl->out && sl->out_pcm;
    }
    s->nfree = cfg->slots;
    if (!ok) {
        ms_err_set(err, MS_ERR_NOMEM, "scheduler: out of memory for %d slots", cfg->slots);
        goto fail;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    uv_async_init(loop, &s->async, on_async);
    s->async.data = s;
    if (pthread_create(&s->thread, NULL, engine_main, s) != 0) {
        ms_err_set(err, MS_ERR_NOMEM, "scheduler: cannot start the engine thread");
        uv_close((uv_handle_t *)&s->async, NULL); /* s leaks until the loop closes it: rare, at start-up */
        return NULL;
    }
    return s;
fail:
    for (size_t i = 0; s->slots && i < S; i++) {
        free(s->slots[i].in); free(s->slots[i].in_t); free(s->slots[i].out); free(s->slots[i].out_pcm);
    }
    free(s->slots); free(s->batch); free(s->pcm_in); free(s->pcm_out); free(s->has_pcm); free(s->text); free(s->t_in);
    free(s);
    return NULL;
}

static void async_closed(uv_handle_t *h) {
    sched *s = h->data;
    for (int i = 0; i < s->cfg.slots; i++) {
        free(s->slots[i].in); free(s->slots[i].in_t); free(s->slots[i].out); free(s->slots[i].out_pcm);
    }
    free(s->slots); free(s->batch); free(s->pcm_in); free(s->pcm_out); free(s->has_pcm); free(s->text); free(s->t_in);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

void sched_free(sched *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    /* End the slots still held, on this thread now that the engine is gone. */
    for (int i = 0; i < s->cfg.slots; i++) {
        int st = atomic_load(&s->slots[i].state);
        if (st == SLOT_ACTIVE || st == SLOT_DETACH) s->m.end(s->m.ctx, i);
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
        sl->params = *p;
        uint32_t g = atomic_load(&sl->gen) + 1;
        atomic_store(&sl->gen, g);
        atomic_store_explicit(&sl->state, SLOT_BEGIN, memory_order_release);
        atomic_fetch_sub(&s->nfree, 1);
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
    memcpy(sl->in + k * (size_t)s->F, pcm, sizeof(float) * (size_t)s->F);
    sl->in_t[k] = now_ms();
    atomic_store_explicit(&sl->in_head, h + 1, memory_order_release);
    wake_engine(s);
    return MS_OK;
}

int sched_pop(sched *s, int i, uint32_t gen, sched_out *out) {
    slot *sl = &s->slots[i];
    for (;;) {
        uint64_t t = atomic_load_explicit(&sl->out_tail, memory_order_relaxed);
        if (atomic_load_explicit(&sl->out_head, memory_order_acquire) == t) {
            if (atomic_load(&sl->overflow) && !sl->overflow_told && atomic_load(&sl->gen) == gen) {
                sl->overflow_told = 1;
                *out = (sched_out){.kind = SCHED_OUT_ERROR, .gen = gen};
                return 1;
            }
            return 0;
        }
        *out = sl->out[t % (uint64_t)s->cfg.out_frames];
        atomic_store_explicit(&sl->out_tail, t + 1, memory_order_release);
        if (out->gen == gen) return 1;
    }
}

void sched_detach(sched *s, int i, uint32_t gen) {
    slot *sl = &s->slots[i];
    if (atomic_load(&sl->gen) != gen) return;
    int st = atomic_load(&sl->state);
    /* BEGIN: the engine will begin it, see DETACH next round and end it. */
    if (st == SLOT_FREE || st == SLOT_DETACH) return;
    int expect = st;
    while (!atomic_compare_exchange_weak(&sl->state, &expect, SLOT_DETACH)) {
        if (expect == SLOT_FREE || expect == SLOT_DETACH) return;
    }
    wake_engine(s);
}

int sched_free_slots(const sched *s) { return atomic_load(&((sched *)s)->nfree); }
int sched_capacity(const sched *s) { return s->cfg.slots; }
int sched_overloaded(const sched *s) { return atomic_load(&((sched *)s)->overloaded); }

int sched_failed(const sched *s, ms_error *err) {
    if (!atomic_load(&((sched *)s)->failed)) return 0;
    if (err) *err = s->fail_err;
    return 1;
}
