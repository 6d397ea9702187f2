/* check_scheduler.c - the engine thread with a stand-in model: ordering,
 * batching, slot generations, admission, input overrun, model failure,
 * detach during a slow begin, a failed begin ended once, the output ring's
 * entry lifetime (pop + release), the pipeline (submit t + 1 before wait t),
 * the early hand-over (a batch's outputs handed over from the model's own
 * thread while the engine steps the next), start-up jobs interleaved with live steps, the input backlog the loop
 * reads (sched_backlog) and the overload flag. Tests wait for events
 * (semaphores, loop iterations with a bound), never for time. */
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#include "check_main.h"
#include "metrics.h"
#include "scheduler.h"

#define F MS_FRAME_SAMPLES
#define SLOTS 3
#define LOG_MAX 256

/* The stand-in model: out = 2*in + slot, text = per-slot step count. */
typedef struct {
    int steps[SLOTS];
    _Atomic int begun[SLOTS], ended[SLOTS];
    int max_batch;
    int fail_at;          /* fail the submit with this global index (-1 never) */
    int nstep;
    _Atomic int nwait;
    int gate;             /* when set, each submit posts gate_in, then waits on sem */
    sem_t sem, gate_in;
    int begin_gate;       /* when set, begin posts begin_in, then waits on begin_sem */
    sem_t begin_in, begin_sem;
    int begin_fail;       /* begin returns an error */
    int end_gate;         /* when set, end posts end_in, then waits on end_sem */
    sem_t end_in, end_sem;
    int use_job;          /* begin leaves a job; done once job_release is set */
    _Atomic int job_release, job_chunks;
    _Atomic int steps_during_job;  /* submits between the first chunk and the job's end */
    int slow_ms;          /* each submit sleeps this long (a model slower than real time) */
    int wait_gate_at;     /* the wait with this index (0-based) blocks on wait_sem first (-1 never) */
    sem_t wait_sem;
    char log[LOG_MAX];    /* S<batch id> / W<batch id> in engine order */
    int nlog;
    int early;            /* hand each batch over from a thread of the model's, started by submit */
    pthread_t hand[LM_MAX_INFLIGHT];   /* by batch id: the thread handing it over, joined by wait */
    int hand_on[LM_MAX_INFLIGHT];
    _Atomic int submits_done;          /* submits returned */
} fake;

static void logc(fake *f, char a, int b) {
    if (f->nlog + 2 < LOG_MAX) {
        f->log[f->nlog++] = a;
        f->log[f->nlog++] = (char)('0' + b);
        f->log[f->nlog] = 0;
    }
}

static int f_begin(void *ctx, int slot, const sched_params *p, ms_error *err) {
    fake *f = ctx;
    f->begun[slot]++;
    f->steps[slot] = (int)p->samp.seed; /* lets a test tell sessions apart */
    if (f->begin_gate) {
        sem_post(&f->begin_in);
        sem_wait(&f->begin_sem);
    }
    if (f->begin_fail) return ms_err_set(err, MS_ERR_NOMEM, "stand-in begin failure");
    return MS_OK;
}
static int f_job(void *ctx, int slot, int *done, ms_error *err) {
    fake *f = ctx;
    (void)slot;
    (void)err;
    f->job_chunks++;
    *done = atomic_load(&f->job_release);
    return MS_OK;
}
static void f_end(void *ctx, int slot) {
    fake *f = ctx;
    if (f->end_gate) {
        sem_post(&f->end_in);
        sem_wait(&f->end_sem);
    }
    f->ended[slot]++;
}
/* The stand-in's frames: out holds the text only (nout 1). */
static int f_frame_alloc(void *ctx, lm_frame *fr, int max_n, ms_error *err) {
    (void)ctx;
    memset(fr, 0, sizeof *fr);
    fr->nout = 1;
    fr->out = calloc((size_t)max_n, sizeof(int));
    fr->has_out = calloc((size_t)max_n, sizeof(int));
    fr->pcm_out = calloc((size_t)max_n * F, sizeof(float));
    if (!fr->out || !fr->has_out || !fr->pcm_out) return ms_err_set(err, MS_ERR_NOMEM, "stand-in: out of memory");
    return MS_OK;
}
static void f_frame_free(void *ctx, lm_frame *fr) {
    (void)ctx;
    free(fr->out);
    free(fr->has_out);
    free(fr->pcm_out);
}
static void *hand_main(void *arg) {
    sched_batch *b = arg;
    b->handover(b);
    return NULL;
}

static int f_submit(void *ctx, sched_batch *b, ms_error *err) {
    fake *f = ctx;
    if (f->gate) {
        sem_post(&f->gate_in);
        sem_wait(&f->sem);
    }
    if (f->nstep++ == f->fail_at) return ms_err_set(err, MS_ERR_DEVICE, "stand-in failure");
    if (f->slow_ms > 0) { /* the model's cost: a lower bound on the step time, not a wait for an event */
        struct timespec d = {0, (long)f->slow_ms * 1000000L};
        nanosleep(&d, NULL);
    }
    logc(f, 'S', b->id);
    if (f->use_job && f->job_chunks > 0 && !atomic_load(&f->job_release)) f->steps_during_job++;
    lm_frame *fr = &b->f;
    if (fr->n > f->max_batch) f->max_batch = fr->n;
    for (int j = 0; j < fr->n; j++) {
        for (int k = 0; k < F; k++) fr->pcm_out[j * F + k] = 2 * fr->pcm_in[j * F + k] + (float)fr->slots[j];
        fr->has_out[j] = 1;
        fr->out[j] = f->steps[fr->slots[j]]++;
    }
    if (f->early) {
        ck_assert_int_eq(pthread_create(&f->hand[b->id], NULL, hand_main, b), 0);
        f->hand_on[b->id] = 1;
    }
    f->submits_done++;
    return MS_OK;
}
static int f_wait(void *ctx, sched_batch *b, ms_error *err) {
    fake *f = ctx;
    (void)err;
    if (f->nwait == f->wait_gate_at) sem_wait(&f->wait_sem);
    if (f->hand_on[b->id]) { /* the hand-over is done before wait returns */
        pthread_join(f->hand[b->id], NULL);
        f->hand_on[b->id] = 0;
        ck_assert(b->handed);
    }
    logc(f, 'W', b->id);
    f->nwait++;
    return MS_OK;
}

static uv_loop_t loop;
static uv_timer_t tick;
static int outputs;
static void on_out(void *ud) { (void)ud; outputs++; }
static void on_tick(uv_timer_t *t) { (void)t; }

static sched *make_ex(fake *f, int in_frames, int out_frames, int job) {
    memset(f, 0, sizeof *f);
    f->fail_at = -1;
    f->wait_gate_at = -1;
    f->use_job = job;
    sem_init(&f->wait_sem, 0, 0);
    sem_init(&f->sem, 0, 0);
    sem_init(&f->gate_in, 0, 0);
    sem_init(&f->begin_in, 0, 0);
    sem_init(&f->begin_sem, 0, 0);
    sem_init(&f->end_in, 0, 0);
    sem_init(&f->end_sem, 0, 0);
    uv_loop_init(&loop);
    uv_timer_init(&loop, &tick);
    uv_timer_start(&tick, on_tick, 5, 5);
    sched_model m = {.ctx = f, .max_slots = SLOTS, .begin = f_begin, .job = job ? f_job : NULL, .end = f_end,
                     .frame_alloc = f_frame_alloc, .frame_free = f_frame_free, .submit = f_submit, .wait = f_wait};
    sched_config c = {SLOTS, in_frames, out_frames};
    ms_error e = {0};
    sched *s = sched_create(&loop, &c, &m, on_out, NULL, &e);
    ck_assert_msg(s != NULL, "%s", e.msg);
    return s;
}

static sched *make(fake *f, int in_frames) { return make_ex(f, in_frames, 8, 0); }

static void finish(sched *s) {
    sched_free(s);
    uv_close((uv_handle_t *)&tick, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
}

/* Pop (and release) the next output of (slot, gen), running the loop up to
 * 1000 iterations (the tick timer bounds each at 5 ms). */
static int next_out(sched *s, int slot, uint32_t gen, sched_out *o) {
    for (int i = 0; i < 1000; i++) {
        if (sched_pop(s, slot, gen, o)) {
            sched_release(s, slot, gen);
            return 1;
        }
        uv_run(&loop, UV_RUN_ONCE);
    }
    return 0;
}

/* The same without releasing: the caller reads the entry, then releases. */
static int next_held(sched *s, int slot, uint32_t gen, sched_out *o) {
    for (int i = 0; i < 1000; i++) {
        if (sched_pop(s, slot, gen, o)) return 1;
        uv_run(&loop, UV_RUN_ONCE);
    }
    return 0;
}

/* Run the loop until cond holds (bounded). */
#define RUN_UNTIL(cond) \
    do { for (int i_ = 0; i_ < 2000 && !(cond); i_++) uv_run(&loop, UV_RUN_ONCE); } while (0)

static void frame(float *pcm, float base) {
    for (int k = 0; k < F; k++) pcm[k] = base + (float)(k % 97);
}

static float pcm_buf[F];

START_TEST(test_order) {
    fake f;
    sched *s = make(&f, 8);
    sched_params p = {.samp.seed = 100};
    int slot;
    uint32_t gen;
    ck_assert_int_eq(sched_attach(s, &p, &slot, &gen), MS_OK);
    sched_out o;
    ck_assert(next_out(s, slot, gen, &o));
    ck_assert_int_eq(o.kind, SCHED_OUT_READY);
    for (int i = 0; i < 5; i++) {
        frame(pcm_buf, (float)i * 100);
        ck_assert_int_eq(sched_push(s, slot, gen, pcm_buf), MS_OK);
    }
    for (int i = 0; i < 5; i++) {
        ck_assert(next_held(s, slot, gen, &o));
        ck_assert_int_eq(o.kind, SCHED_OUT_FRAME);
        ck_assert_uint_eq(o.step, (uint64_t)i);
        ck_assert_int_eq(o.text, 100 + i);
        for (int k = 0; k < F; k++) ck_assert(o.pcm[k] == 2 * ((float)i * 100 + (float)(k % 97)) + (float)slot);
        ck_assert(o.latency_ms >= 0);
        sched_release(s, slot, gen);
    }
    ck_assert(!sched_pop(s, slot, gen, &o));
    sched_detach(s, slot, gen);
    RUN_UNTIL(sched_free_slots(s) == SLOTS);
    finish(s);
    ck_assert_int_eq(f.begun[slot], 1);
    ck_assert_int_eq(f.ended[slot], 1);
}
END_TEST

/* Attach a session to every slot and take each one's READY. */
static void attach_all(sched *s, int *slot, uint32_t *gen) {
    sched_params p = {0};
    sched_out o;
    for (int i = 0; i < SLOTS; i++) {
        ck_assert_int_eq(sched_attach(s, &p, &slot[i], &gen[i]), MS_OK);
        ck_assert(next_out(s, slot[i], gen[i], &o));
        ck_assert_int_eq(o.kind, SCHED_OUT_READY);
    }
}

/* A slot detached but not yet ended counts in sched_detaching (a new
 * session then waits for it, sess.c), and its freeing runs on_output with
 * no other output pending (the signal a waiting session attaches on). */
START_TEST(test_detaching_then_freed_signals) {
    fake f;
    sched *s = make(&f, 8);
    sched_params p = {0};
    int slot[SLOTS];
    uint32_t gen[SLOTS];
    attach_all(s, slot, gen);
    ck_assert_int_eq(sched_detaching(s), 0);
    f.end_gate = 1;
    sched_detach(s, slot[2], gen[2]);
    sem_wait(&f.end_in); /* the engine is in end(): the slot is not free yet */
    ck_assert_int_eq(sched_detaching(s), 1);
    ck_assert_int_eq(sched_free_slots(s), 0);
    int ns;
    uint32_t ng;
    ck_assert_int_eq(sched_attach(s, &p, &ns, &ng), MS_ERR_BUSY);
    for (int i = 0; i < 20; i++) uv_run(&loop, UV_RUN_NOWAIT); /* what was signalled before */
    int before = outputs;
    sem_post(&f.end_sem);
    RUN_UNTIL(outputs > before);
    ck_assert_int_gt(outputs, before);
    ck_assert_int_eq(sched_detaching(s), 0);
    ck_assert_int_eq(sched_free_slots(s), 1);
    f.end_gate = 0;
    ck_assert_int_eq(sched_attach(s, &p, &ns, &ng), MS_OK);
    ck_assert_int_eq(ns, slot[2]);
    finish(s);
}
END_TEST

START_TEST(test_admission_and_generations) {
    fake f;
    sched *s = make(&f, 8);
    sched_params p = {0};
    int slot[SLOTS + 1];
    uint32_t gen[SLOTS + 1];
    for (int i = 0; i < SLOTS; i++) ck_assert_int_eq(sched_attach(s, &p, &slot[i], &gen[i]), MS_OK);
    ck_assert_int_eq(sched_attach(s, &p, &slot[SLOTS], &gen[SLOTS]), MS_ERR_BUSY);
    ck_assert_int_eq(sched_free_slots(s), 0);
    /* leave slot 1 with a frame queued; the next session on it never sees it */
    sched_out o;
    ck_assert(next_out(s, slot[1], gen[1], &o));
    f.gate = 1;
    frame(pcm_buf, 1);
    ck_assert_int_eq(sched_push(s, slot[1], gen[1], pcm_buf), MS_OK);
    sched_detach(s, slot[1], gen[1]);
    sem_post(&f.sem);
    RUN_UNTIL(sched_free_slots(s) == 1);
    ck_assert_int_eq(sched_free_slots(s), 1);
    f.gate = 0;
    sem_post(&f.sem);
    p.samp.seed = 7;
    int ns;
    uint32_t ng;
    ck_assert_int_eq(sched_attach(s, &p, &ns, &ng), MS_OK);
    ck_assert_int_eq(ns, slot[1]);
    ck_assert_uint_ne(ng, gen[1]);
    ck_assert(next_out(s, ns, ng, &o));
    ck_assert_int_eq(o.kind, SCHED_OUT_READY);
    ck_assert_uint_eq(o.gen, ng);
    /* the old generation can neither push nor read */
    ck_assert_int_eq(sched_push(s, slot[1], gen[1], pcm_buf), MS_ERR_STATE);
    ck_assert(!sched_pop(s, ns, gen[1], &o));
    frame(pcm_buf, 3);
    ck_assert_int_eq(sched_push(s, ns, ng, pcm_buf), MS_OK);
    ck_assert(next_out(s, ns, ng, &o));
    ck_assert_int_eq(o.text, 7); /* first step of the new session */
    finish(s);
}
END_TEST

START_TEST(test_batching_and_overrun) {
    fake f;
    sched *s = make(&f, 2);
    int slot[SLOTS];
    uint32_t gen[SLOTS];
    sched_out o;
    attach_all(s, slot, gen);
    f.gate = 1;
    frame(pcm_buf, 0);
    /* first step blocks inside the model with slot 0's frame: wait until
     * the engine is in it (it may still be gathering when the other frames
     * come, and would then take them into that first batch) */
    ck_assert_int_eq(sched_push(s, slot[0], gen[0], pcm_buf), MS_OK);
    sem_wait(&f.gate_in);
    for (int i = 0; i < SLOTS; i++) ck_assert_int_eq(sched_push(s, slot[i], gen[i], pcm_buf), MS_OK);
    /* slot 0 now holds 2 frames (ring of 2, the in-step frame counts until done) */
    ck_assert_int_eq(sched_push(s, slot[0], gen[0], pcm_buf), MS_ERR_LIMIT);
    for (int i = 0; i < 4; i++) sem_post(&f.sem);
    int got = 0;
    for (int i = 0; i < 2000 && got < SLOTS + 1; i++) {
        for (int j = 0; j < SLOTS; j++)
            while (sched_pop(s, slot[j], gen[j], &o)) {
                sched_release(s, slot[j], gen[j]);
                got++;
            }
        if (got < SLOTS + 1) uv_run(&loop, UV_RUN_ONCE);
    }
    ck_assert_int_eq(got, SLOTS + 1);
    ck_assert_int_eq(f.max_batch, SLOTS); /* the queued frames went through as one batch */
    finish(s);
}
END_TEST

START_TEST(test_failure) {
    fake f;
    sched *s = make(&f, 4);
    f.fail_at = 0;
    sched_params p = {0};
    int slot;
    uint32_t gen;
    sched_out o;
    ck_assert_int_eq(sched_attach(s, &p, &slot, &gen), MS_OK);
    ck_assert(next_out(s, slot, gen, &o));
    float pcm[F] = {0};
    ck_assert_int_eq(sched_push(s, slot, gen, pcm), MS_OK);
    ms_error e = {0};
    RUN_UNTIL(sched_failed(s, &e));
    ck_assert(sched_failed(s, &e));
    ck_assert_int_eq(e.code, MS_ERR_DEVICE);
    ck_assert_str_eq(e.msg, "stand-in failure");
    finish(s);
}
END_TEST

/* A detach that arrives while the engine is inside a slow begin: the slot
 * is ended once and freed (not stored ACTIVE over the DETACH and leaked),
 * and the next attach gets it. */
START_TEST(test_detach_during_begin) {
    fake f;
    sched *s = make(&f, 4);
    f.begin_gate = 1;
    sched_params p = {.samp.seed = 1};
    int slot;
    uint32_t gen;
    ck_assert_int_eq(sched_attach(s, &p, &slot, &gen), MS_OK);
    sem_wait(&f.begin_in);               /* the engine is inside begin */
    sched_detach(s, slot, gen);
    f.begin_gate = 0;
    sem_post(&f.begin_sem);
    RUN_UNTIL(sched_free_slots(s) == SLOTS);
    ck_assert_int_eq(sched_free_slots(s), SLOTS);
    ck_assert_int_eq(f.begun[slot], 1);
    ck_assert_int_eq(f.ended[slot], 1);
    sched_out o;
    ck_assert(!sched_pop(s, slot, gen, &o));   /* no READY for the gone session */
    int slots[SLOTS];
    uint32_t gens[SLOTS];
    for (int i = 0; i < SLOTS; i++) {
        ck_assert_int_eq(sched_attach(s, &p, &slots[i], &gens[i]), MS_OK);
        ck_assert(next_out(s, slots[i], gens[i], &o));
        ck_assert_int_eq(o.kind, SCHED_OUT_READY);
    }
    finish(s);
}
END_TEST

/* A failed begin ends the slot exactly once; the session is told; its
 * detach frees the slot. */
START_TEST(test_failed_begin_ends_once) {
    fake f;
    sched *s = make(&f, 4);
    f.begin_fail = 1;
    sched_params p = {0};
    int slot;
    uint32_t gen;
    ck_assert_int_eq(sched_attach(s, &p, &slot, &gen), MS_OK);
    sched_out o;
    ck_assert(next_out(s, slot, gen, &o));
    ck_assert_int_eq(o.kind, SCHED_OUT_ERROR);
    ck_assert_int_eq(f.ended[slot], 1);
    ck_assert_int_eq(sched_free_slots(s), SLOTS - 1);
    sched_detach(s, slot, gen);
    RUN_UNTIL(sched_free_slots(s) == SLOTS);
    ck_assert_int_eq(sched_free_slots(s), SLOTS);
    for (int i = 0; i < 50; i++) uv_run(&loop, UV_RUN_NOWAIT);
    ck_assert_int_eq(f.ended[slot], 1);
    f.begin_fail = 0;
    ck_assert_int_eq(sched_attach(s, &p, &slot, &gen), MS_OK);
    ck_assert(next_out(s, slot, gen, &o));
    ck_assert_int_eq(o.kind, SCHED_OUT_READY);
    finish(s);
    ck_assert_int_eq(f.begun[slot], 2);
    ck_assert_int_eq(f.ended[slot], 2);
}
END_TEST

/* With the output ring full, the entry the loop holds
 * (popped, not yet released) is never written over by the engine. */
START_TEST(test_output_ring_full) {
    fake f;
    const int OUT = 8;
    sched *s = make_ex(&f, 16, OUT, 0);
    sched_params p = {.samp.seed = 0};
    int slot;
    uint32_t gen;
    sched_out o;
    ck_assert_int_eq(sched_attach(s, &p, &slot, &gen), MS_OK);
    ck_assert(next_out(s, slot, gen, &o));   /* READY, released */
    for (int i = 0; i < OUT; i++) {
        frame(pcm_buf, (float)i * 10);
        ck_assert_int_eq(sched_push(s, slot, gen, pcm_buf), MS_OK);
    }
    RUN_UNTIL(atomic_load(&f.nwait) == OUT);
    ck_assert_int_eq(f.nwait, OUT);          /* the ring holds OUT frames now */
    ck_assert(sched_pop(s, slot, gen, &o));  /* frame 0, held */
    ck_assert_uint_eq(o.step, 0);
    const float *held = o.pcm;
    frame(pcm_buf, 5000);                    /* one more frame: its output has nowhere to go */
    ck_assert_int_eq(sched_push(s, slot, gen, pcm_buf), MS_OK);
    RUN_UNTIL(atomic_load(&f.nwait) == OUT + 1);
    ck_assert_int_eq(f.nwait, OUT + 1);
    for (int k = 0; k < F; k++) ck_assert_msg(held[k] == 2 * (float)(k % 97) + (float)slot, "sample %d", k);
    sched_release(s, slot, gen);
    for (int i = 1; i < OUT; i++) {
        ck_assert(sched_pop(s, slot, gen, &o));
        ck_assert_int_eq(o.kind, SCHED_OUT_FRAME);
        ck_assert_uint_eq(o.step, (uint64_t)i);
        for (int k = 0; k < F; k++) ck_assert(o.pcm[k] == 2 * ((float)i * 10 + (float)(k % 97)) + (float)slot);
        sched_release(s, slot, gen);
    }
    /* the output that found the ring full is reported, not written */
    ck_assert(sched_pop(s, slot, gen, &o));
    ck_assert_int_eq(o.kind, SCHED_OUT_ERROR);
    sched_release(s, slot, gen);
    ck_assert(!sched_pop(s, slot, gen, &o));
    finish(s);
}
END_TEST

/* The pipeline: later batches are submitted before the oldest is waited
 * for; batches take the free buffers; outputs keep their order. */
START_TEST(test_pipeline_order) {
    fake f;
    sched *s = make(&f, 8);
    sched_params p = {.samp.seed = 40};
    int slot;
    uint32_t gen;
    sched_out o;
    ck_assert_int_eq(sched_attach(s, &p, &slot, &gen), MS_OK);
    ck_assert(next_out(s, slot, gen, &o));
    f.gate = 1;
    for (int i = 0; i < 4; i++) {
        frame(pcm_buf, (float)i);
        ck_assert_int_eq(sched_push(s, slot, gen, pcm_buf), MS_OK);
    }
    for (int i = 0; i < 4; i++) sem_post(&f.sem);
    for (int i = 0; i < 4; i++) {
        ck_assert(next_out(s, slot, gen, &o));
        ck_assert_uint_eq(o.step, (uint64_t)i);
        ck_assert_int_eq(o.text, 40 + i);
    }
    /* three batches in flight, the oldest finished when every buffer is
     * taken, buffer 0 reused for the fourth, the rest finished when
     * nothing new comes */
    ck_assert_str_eq(f.log, "S0S1S2W0S0W1W2W0");
    finish(s);
}
END_TEST

/* The early hand-over: a model that finishes batches on a thread of its
 * own hands each over from there (sched_batch.handover): frame 0 reaches
 * the session while the engine is still inside frame 1's step (its submit,
 * held here), in order, and once (the engine does not push it again after
 * the wait). */
START_TEST(test_early_handover) {
    fake f;
    sched *s = make(&f, 8);
    sched_params p = {.samp.seed = 20};
    int slot;
    uint32_t gen;
    sched_out o;
    ck_assert_int_eq(sched_attach(s, &p, &slot, &gen), MS_OK);
    ck_assert(next_out(s, slot, gen, &o));
    ck_assert_int_eq(o.kind, SCHED_OUT_READY);
    f.early = 1;
    f.gate = 1;
    for (int i = 0; i < 3; i++) {
        frame(pcm_buf, (float)i);
        ck_assert_int_eq(sched_push(s, slot, gen, pcm_buf), MS_OK);
    }
    for (int i = 0; i < 3; i++) {
        sem_wait(&f.gate_in);   /* the engine is in frame i's step */
        if (i > 0) {
            /* frame i - 1 is delivered while frame i's step has not completed */
            ck_assert_msg(next_held(s, slot, gen, &o), "frame %d not delivered during frame %d's step", i - 1, i);
            ck_assert_int_eq(atomic_load(&f.submits_done), i);
            ck_assert_int_eq(o.kind, SCHED_OUT_FRAME);
            ck_assert_uint_eq(o.step, (uint64_t)(i - 1));
            ck_assert_int_eq(o.text, 20 + i - 1);
            ck_assert(o.has_pcm);
            ck_assert(o.pcm[5] == 2 * ((float)(i - 1) + 5) + (float)slot);
            sched_release(s, slot, gen);
        }
        sem_post(&f.sem);
    }
    ck_assert(next_out(s, slot, gen, &o));
    ck_assert_uint_eq(o.step, 2);
    ck_assert_int_eq(o.text, 22);
    RUN_UNTIL(sched_idle(s) && atomic_load(&f.nwait) == 3);
    ck_assert_int_eq(atomic_load(&f.nwait), 3);
    ck_assert(!sched_pop(s, slot, gen, &o));   /* each frame once */
    int frames = -1;
    double oldest = -1;
    ck_assert_int_eq(sched_backlog(s, slot, gen, &frames, &oldest), MS_OK);
    ck_assert_int_eq(frames, 0);   /* every input frame released */
    ck_assert_str_eq(f.log, "S0S1S2W0W1W2");
    finish(s);
}
END_TEST

/* A start-up job runs in chunks between steps: a live session is served
 * while another slot's job is under way; the job's slot is READY when the
 * job says done; a detach during a job ends the slot once. */
START_TEST(test_job_interleaves) {
    fake f;
    sched *s = make_ex(&f, 8, 8, 1);
    atomic_store(&f.job_release, 1);
    sched_params p = {.samp.seed = 0};
    int a, b, c;
    uint32_t ga, gb, gc;
    sched_out o;
    ck_assert_int_eq(sched_attach(s, &p, &a, &ga), MS_OK);
    ck_assert(next_out(s, a, ga, &o));
    ck_assert_int_eq(o.kind, SCHED_OUT_READY);
    atomic_store(&f.job_release, 0);
    ck_assert_int_eq(sched_attach(s, &p, &b, &gb), MS_OK);
    RUN_UNTIL(atomic_load(&f.job_chunks) > 1);
    for (int i = 0; i < 4; i++) {
        frame(pcm_buf, (float)i);
        ck_assert_int_eq(sched_push(s, a, ga, pcm_buf), MS_OK);
        ck_assert(next_out(s, a, ga, &o));
        ck_assert_int_eq(o.kind, SCHED_OUT_FRAME);
    }
    ck_assert(!sched_pop(s, b, gb, &o));     /* b is still in its job */
    ck_assert_int_ge(f.steps_during_job, 4);
    atomic_store(&f.job_release, 1);
    ck_assert(next_out(s, b, gb, &o));
    ck_assert_int_eq(o.kind, SCHED_OUT_READY);
    /* detach during a job */
    atomic_store(&f.job_release, 0);
    int before = f.job_chunks;
    ck_assert_int_eq(sched_attach(s, &p, &c, &gc), MS_OK);
    RUN_UNTIL(atomic_load(&f.job_chunks) > before + 1);
    sched_detach(s, c, gc);
    RUN_UNTIL(sched_free_slots(s) == 1);
    ck_assert_int_eq(sched_free_slots(s), 1);
    ck_assert_int_eq(f.ended[c], 1);
    finish(s);
}
END_TEST

static double mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* The input backlog the loop reads to tell a slow engine from a client's
 * burst: frames pushed and not yet delivered (a frame inside a step
 * counts), and when the oldest of them was pushed. */
START_TEST(test_backlog) {
    fake f;
    sched *s = make(&f, 4);
    sched_params p = {0};
    int slot, n = -1;
    uint32_t gen;
    double oldest = -1;
    sched_out o;
    ck_assert_int_eq(sched_attach(s, &p, &slot, &gen), MS_OK);
    ck_assert(next_out(s, slot, gen, &o));
    ck_assert_int_eq(sched_backlog(s, slot, gen, &n, &oldest), MS_OK);
    ck_assert_int_eq(n, 0);
    ck_assert(oldest == 0);
    f.gate = 1;                              /* the engine holds the first frame inside its step */
    frame(pcm_buf, 0);
    double t0 = mono_ms();
    ck_assert_int_eq(sched_push(s, slot, gen, pcm_buf), MS_OK);
    double t1 = mono_ms();
    for (int i = 1; i < 4; i++) ck_assert_int_eq(sched_push(s, slot, gen, pcm_buf), MS_OK);
    ck_assert_int_eq(sched_push(s, slot, gen, pcm_buf), MS_ERR_LIMIT);
    ck_assert_int_eq(sched_backlog(s, slot, gen, &n, &oldest), MS_OK);
    ck_assert_int_eq(n, 4);
    ck_assert_msg(oldest >= t0 && oldest <= t1, "oldest %.3f not in [%.3f, %.3f]", oldest, t0, t1);
    ck_assert_int_eq(sched_backlog(s, slot, gen + 1, &n, &oldest), MS_ERR_STATE);
    ck_assert_int_eq(n, 0);
    for (int i = 0; i < 4; i++) sem_post(&f.sem);
    for (int i = 0; i < 4; i++) ck_assert(next_out(s, slot, gen, &o));
    ck_assert_int_eq(sched_backlog(s, slot, gen, &n, &oldest), MS_OK);
    ck_assert_int_eq(n, 0);
    ck_assert(oldest == 0);
    finish(s);
}
END_TEST

/* Steps slower than a frame set the overload flag; it clears once the
 * engine runs out of work (it must not stay set with no session left:
 * /healthz would refuse sessions for ever). */
START_TEST(test_overload_flag) {
    fake f;
    sched *s = make(&f, 8);
    sched_params p = {0};
    int slot;
    uint32_t gen;
    sched_out o;
    ck_assert_int_eq(sched_attach(s, &p, &slot, &gen), MS_OK);
    ck_assert(next_out(s, slot, gen, &o));
    ck_assert(!sched_overloaded(s));
    f.slow_ms = 100;                         /* > one 80 ms frame per step */
    f.gate = 1;                              /* both frames are queued before the first step runs */
    f.wait_gate_at = 1;                      /* the engine stops in the second frame's wait */
    frame(pcm_buf, 0);
    ck_assert_int_eq(sched_push(s, slot, gen, pcm_buf), MS_OK);
    ck_assert_int_eq(sched_push(s, slot, gen, pcm_buf), MS_OK);
    sem_post(&f.sem);
    sem_post(&f.sem);
    ck_assert(next_out(s, slot, gen, &o));   /* the first frame, its step >= 100 ms */
    ck_assert_uint_eq(o.step, 0);
    ck_assert(sched_overloaded(s));          /* the engine is held in the second wait: not idle */
    sem_post(&f.wait_sem);
    ck_assert(next_out(s, slot, gen, &o));
    RUN_UNTIL(!sched_overloaded(s));         /* nothing left to do: not behind */
    ck_assert(!sched_overloaded(s));
    finish(s);
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("scheduler");
    TCase *tc = tcase_new("core");
    tcase_add_test(tc, test_order);
    tcase_add_test(tc, test_admission_and_generations);
    tcase_add_test(tc, test_batching_and_overrun);
    tcase_add_test(tc, test_failure);
    tcase_add_test(tc, test_detach_during_begin);
    tcase_add_test(tc, test_failed_begin_ends_once);
    tcase_add_test(tc, test_output_ring_full);
    tcase_add_test(tc, test_pipeline_order);
    tcase_add_test(tc, test_early_handover);
    tcase_add_test(tc, test_job_interleaves);
    tcase_add_test(tc, test_backlog);
    tcase_add_test(tc, test_overload_flag);
    tcase_add_test(tc, test_detaching_then_freed_signals);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN
