/* check_scheduler.c - the engine thread with a stand-in model: ordering,
 * batching, slot generations, admission, input overrun, model failure. */
#include <pthread.h>
#include <semaphore.h>
#include <string.h>
#include <uv.h>

#include "check_main.h"
#include "metrics.h"
#include "scheduler.h"

#define F 16
#define SLOTS 3

/* The stand-in model: out = 2*in + slot, text = per-slot step count. */
typedef struct {
    int steps[SLOTS];
    int begun[SLOTS], ended[SLOTS];
    int max_batch;
    int fail_at;          /* fail the step with this global index (-1 never) */
    int nstep;
    int gate;             /* when set, each step waits on sem */
    sem_t sem;
} fake;

static int f_begin(void *ctx, int slot, const sched_params *p, ms_error *err) {
    fake *f = ctx;
    (void)err;
    f->begun[slot]++;
    f->steps[slot] = (int)p->samp.seed; /* lets a test tell sessions apart */
    return MS_OK;
}
static void f_end(void *ctx, int slot) { ((fake *)ctx)->ended[slot]++; }
static int f_step(void *ctx, int n, const int *slots, const float *in, float *out, int *has, int *text, ms_error *err) {
    fake *f = ctx;
    if (f->gate) sem_wait(&f->sem);
    if (f->nstep++ == f->fail_at) return ms_err_set(err, MS_ERR_DEVICE, "stand-in failure");
    if (n > f->max_batch) f->max_batch = n;
    for (int j = 0; j < n; j++) {
        for (int k = 0; k < F; k++) out[j * F + k] = 2 * in[j * F + k] + (float)slots[j];
        has[j] = 1;
        text[j] = f->steps[slots[j]]++;
    }
    return MS_OK;
}

static uv_loop_t loop;
static uv_timer_t tick;
static int outputs;
static void on_out(void *ud) { (void)ud; outputs++; }
static void on_tick(uv_timer_t *t) { (void)t; }

static sched *make(fake *f, int in_frames) {
    memset(f, 0, sizeof *f);
    f->fail_at = -1;
    sem_init(&f->sem, 0, 0);
    uv_loop_init(&loop);
    uv_timer_init(&loop, &tick);
    uv_timer_start(&tick, on_tick, 5, 5);
    sched_model m = {f, SLOTS, F, f_begin, f_end, f_step};
    sched_config c = {SLOTS, in_frames, 8, 80.0};
    ms_error e = {0};
    sched *s = sched_create(&loop, &c, &m, on_out, NULL, &e);
    ck_assert_msg(s != NULL, "%s", e.msg);
    return s;
}

static void finish(sched *s) {
    sched_free(s);
    uv_close((uv_handle_t *)&tick, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
}

/* Pop the next output of (slot, gen), running the loop up to 5 s. */
static int next_out(sched *s, int slot, uint32_t gen, sched_out *o) {
    for (int i = 0; i < 1000; i++) {
        if (sched_pop(s, slot, gen, o)) return 1;
        uv_run(&loop, UV_RUN_ONCE);
    }
    return 0;
}

static void frame(float *pcm, float base) {
    for (int k = 0; k < F; k++) pcm[k] = base + (float)k;
}

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
    float pcm[F];
    for (int i = 0; i < 5; i++) {
        frame(pcm, (float)i * 100);
        ck_assert_int_eq(sched_push(s, slot, gen, pcm), MS_OK);
    }
    for (int i = 0; i < 5; i++) {
        ck_assert(next_out(s, slot, gen, &o));
        ck_assert_int_eq(o.kind, SCHED_OUT_FRAME);
        ck_assert_uint_eq(o.step, (uint64_t)i);
        ck_assert_int_eq(o.text, 100 + i);
        for (int k = 0; k < F; k++) ck_assert(o.pcm[k] == 2 * ((float)i * 100 + (float)k) + (float)slot);
        ck_assert(o.latency_ms >= 0);
    }
    ck_assert(!sched_pop(s, slot, gen, &o));
    sched_detach(s, slot, gen);
    finish(s);
    ck_assert_int_eq(f.begun[slot], 1);
    ck_assert_int_eq(f.ended[slot], 1);
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
    float pcm[F];
    frame(pcm, 1);
    ck_assert_int_eq(sched_push(s, slot[1], gen[1], pcm), MS_OK);
    sched_detach(s, slot[1], gen[1]);
    sem_post(&f.sem);
    for (int i = 0; i < 1000 && sched_free_slots(s) == 0; i++) uv_run(&loop, UV_RUN_ONCE);
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
    ck_assert_int_eq(sched_push(s, slot[1], gen[1], pcm), MS_ERR_STATE);
    ck_assert(!sched_pop(s, ns, gen[1], &o));
    frame(pcm, 3);
    ck_assert_int_eq(sched_push(s, ns, ng, pcm), MS_OK);
    ck_assert(next_out(s, ns, ng, &o));
    ck_assert_int_eq(o.text, 7); /* first step of the new session */
    finish(s);
}
END_TEST

START_TEST(test_batching_and_overrun) {
    fake f;
    sched *s = make(&f, 2);
    sched_params p = {0};
    int slot[SLOTS];
    uint32_t gen[SLOTS];
    sched_out o;
    for (int i = 0; i < SLOTS; i++) {
        ck_assert_int_eq(sched_attach(s, &p, &slot[i], &gen[i]), MS_OK);
        ck_assert(next_out(s, slot[i], gen[i], &o));
    }
    f.gate = 1;
    float pcm[F];
    frame(pcm, 0);
    /* first step blocks inside the model with slot 0's frame */
    ck_assert_int_eq(sched_push(s, slot[0], gen[0], pcm), MS_OK);
    for (int i = 0; i < SLOTS; i++) {
        ck_assert_int_eq(sched_push(s, slot[i], gen[i], pcm), MS_OK);
    }
    /* slot 0 now holds 2 frames (ring of 2, the in-step frame counts until done) */
    ck_assert_int_eq(sched_push(s, slot[0], gen[0], pcm), MS_ERR_LIMIT);
    for (int i = 0; i < 4; i++) sem_post(&f.sem);
    int got = 0;
    for (int i = 0; i < 2000 && got < SLOTS + 1; i++) {
        for (int j = 0; j < SLOTS; j++)
            while (sched_pop(s, slot[j], gen[j], &o)) got++;
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
    for (int i = 0; i < 1000 && !sched_failed(s, &e); i++) uv_run(&loop, UV_RUN_ONCE);
    ck_assert(sched_failed(s, &e));
    ck_assert_int_eq(e.code, MS_ERR_DEVICE);
    ck_assert_str_eq(e.msg, "stand-in failure");
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
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN
