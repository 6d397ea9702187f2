/* check_frame.c - the frame step (engine/lm/frame.c) on the CPU backend and
 * the demo model: what lm_frame_submit refuses, how many frames each LMGen
 * holds back before its first output (1 with Kyutai's, 2 with
 * PersonaPlex's), and that a slot reset (backend + bookkeeping) replays a
 * conversation exactly, codec included, and that steady frames allocate
 * nothing (the suite is linked with --wrap on the allocator, lm.mk). The
 * frame step against the same work done by hand, synchronous and
 * pipelined, is in check_lmgen.c. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "check_main.h"
#include "frame.h"
#include "lmgen.h"
#include "samp.h"

#define SLOTS 2
#define FRAMES 4

/* The allocator, wrapped at link time (lm.mk: -Wl,--wrap=...): calls from
 * the engine's code are counted, on every thread, while `counting` is set. */
static atomic_int counting;
static atomic_long n_allocs;
void *__real_malloc(size_t n);
void *__real_calloc(size_t k, size_t n);
void *__real_realloc(void *p, size_t n);
void *__real_aligned_alloc(size_t a, size_t n);
int __real_posix_memalign(void **p, size_t a, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t k, size_t n);
void *__wrap_realloc(void *p, size_t n);
void *__wrap_aligned_alloc(size_t a, size_t n);
int __wrap_posix_memalign(void **p, size_t a, size_t n);

static void count(void) {
    if (atomic_load(&counting)) atomic_fetch_add(&n_allocs, 1);
}
void *__wrap_malloc(size_t n) {
    count();
    return __real_malloc(n);
}
void *__wrap_calloc(size_t k, size_t n) {
    count();
    return __real_calloc(k, n);
}
void *__wrap_realloc(void *p, size_t n) {
    count();
    return __real_realloc(p, n);
}
void *__wrap_aligned_alloc(size_t a, size_t n) {
    count();
    return __real_aligned_alloc(a, n);
}
int __wrap_posix_memalign(void **p, size_t a, size_t n) {
    count();
    return __real_posix_memalign(p, a, n);
}

static lm_backend *open_demo_ex(const char *lm_rel, int pipeline) {
    const char *bd = check_build_dir();
    char lm[512], mimi[512], mcfg[512];
    snprintf(lm, sizeof lm, "%s/demo/%s", bd, lm_rel);
    snprintf(mimi, sizeof mimi, "%s/demo/mimi.safetensors", bd);
    snprintf(mcfg, sizeof mcfg, "%s/demo/mimi.json", bd);
    ms_error e = {0};
    lm_backend_opts bo = {.max_slots = SLOTS, .threads = 1, .variant = LM_VARIANT_AUTO, .mimi = mimi,
                          .mimi_config = mcfg, .pipeline = pipeline};
    lm_backend *b = lm_backend_open(&lm_cpu_backend, lm, &bo, &e);
    ck_assert_msg(b != NULL, "%s (the demo model: make demo-model)", e.msg);
    return b;
}

static lm_backend *open_demo(const char *lm_rel) { return open_demo_ex(lm_rel, 0); }

static void init_gen(lm_backend *b, lmgen_slot *g, int slot) {
    lm_samp s;
    lm_samp_defaults(&s, 5);
    lm_samp_greedy(&s);
    lmgen_init(g, &b->cfg, slot, &s);
    ms_error e = {0};
    ck_assert_int_eq(lm_backend_reset_slot(b, slot, &e), MS_OK);
}

static void fill_pcm(float *pcm, int t) {
    for (int i = 0; i < MS_FRAME_SAMPLES; i++)
        pcm[i] = 0.3f * sinf(0.004f * (float)(i + t * MS_FRAME_SAMPLES)) + 0.1f * sinf(0.05f * (float)i);
}

/* One synchronous frame of slot (its bookkeeping g) on pcm. */
static void run1(lm_backend *b, lm_frame *f, int slot, lmgen_slot *g, const float *pcm) {
    lmgen_slot *gens[1] = {g};
    f->n = 1;
    f->slots = &slot;
    f->gens = gens;
    f->pcm_in = pcm;
    ms_error e = {0};
    ck_assert_msg(lm_frame_submit(b, f, &e) == MS_OK, "%s", e.msg);
    ck_assert_msg(lm_frame_wait(b, f, &e) == MS_OK, "%s", e.msg);
}

/* The dispatcher refuses a frame it cannot run, before the backend sees it. */
START_TEST(test_submit_checks) {
    lm_backend *b = open_demo("kyutai/lm");
    lm_frame f;
    ms_error e = {0};
    ck_assert_int_eq(lm_frame_alloc(b, &f, SLOTS, &e), MS_OK);
    lmgen_slot g0, g1;
    init_gen(b, &g0, 0);
    init_gen(b, &g1, 1);
    static float pcm[SLOTS * MS_FRAME_SAMPLES];
    lmgen_slot *gens[SLOTS] = {&g0, &g1};
    int twice[SLOTS] = {0, 0}, far[SLOTS] = {0, SLOTS}, swapped[SLOTS] = {1, 0};
    f.gens = gens;
    f.pcm_in = pcm;
    f.n = SLOTS;
    f.slots = twice;
    ck_assert_int_eq(lm_frame_submit(b, &f, &e), MS_ERR_ARG);   /* a slot twice */
    f.slots = far;
    ck_assert_int_eq(lm_frame_submit(b, &f, &e), MS_ERR_ARG);   /* past max_slots */
    f.slots = swapped;
    ck_assert_int_eq(lm_frame_submit(b, &f, &e), MS_ERR_ARG);   /* another slot's bookkeeping */
    ck_assert_msg(strstr(e.msg, "row 0") != NULL, "%s", e.msg);
    f.n = SLOTS + 1;
    ck_assert_int_eq(lm_frame_submit(b, &f, &e), MS_ERR_ARG);
    ck_assert_int_eq(lm_frame_wait(b, &f, &e), MS_ERR_STATE);  /* nothing in flight */
    /* nothing was run: both slots are still at position 0 */
    ck_assert_int_eq((int)lm_backend_pos(b, 0), 0);
    ck_assert_int_eq((int)lm_backend_pos(b, 1), 0);
    /* an empty frame is valid */
    f.n = 0;
    ck_assert_int_eq(lm_frame_submit(b, &f, &e), MS_OK);
    ck_assert_int_eq(lm_frame_wait(b, &f, &e), MS_OK);
    lm_frame_free(&f);
    lm_backend_close(b);
}
END_TEST

/* Frames before the first output: has_out is 0 for the first `lag` frames
 * and 1 from then on; a frame with output carries text and dep_q codes. */
static void check_lag(const char *lm_rel, int lag) {
    lm_backend *b = open_demo(lm_rel);
    lm_frame f;
    ms_error e = {0};
    ck_assert_int_eq(lm_frame_alloc(b, &f, SLOTS, &e), MS_OK);
    lmgen_slot g;
    init_gen(b, &g, 1);
    static float pcm[MS_FRAME_SAMPLES];
    for (int t = 0; t < FRAMES; t++) {
        fill_pcm(pcm, t);
        run1(b, &f, 1, &g, pcm);
        ck_assert_msg(f.has_out[0] == (t >= lag), "%s frame %d: has_out %d", lm_rel, t, f.has_out[0]);
        if (f.has_out[0])
            for (int k = 1; k <= b->cfg.dep_q; k++)
                ck_assert_msg(f.out[k] >= 0 && f.out[k] < b->cfg.card, "code %d: %d", k, f.out[k]);
    }
    ck_assert_int_eq((int)lm_backend_pos(b, 0), 0);   /* the other slot did not move */
    lm_backend_stats st;
    ck_assert_int_eq(lm_backend_stats_get(b, &st), MS_OK);
    ck_assert_uint_eq(st.frames, FRAMES);
    lm_frame_free(&f);
    lm_backend_close(b);
}

START_TEST(test_lag_kyutai) { check_lag("kyutai/lm", 1); }
END_TEST

START_TEST(test_lag_personaplex) { check_lag("lm", 2); }
END_TEST

/* A conversation, a reset of the slot and its bookkeeping, the same
 * conversation again: every token, code and sample the same. */
START_TEST(test_reset_replays) {
    lm_backend *b = open_demo("kyutai/lm");
    lm_frame f;
    ms_error e = {0};
    ck_assert_int_eq(lm_frame_alloc(b, &f, SLOTS, &e), MS_OK);
    const int nout = 1 + b->cfg.dep_q;
    static int out[FRAMES][1 + LM_MAX_DEP_Q], codes[FRAMES][LM_MAX_DEP_Q];
    static float pcm[MS_FRAME_SAMPLES], pcm_out[FRAMES][MS_FRAME_SAMPLES];
    lmgen_slot g;
    for (int pass = 0; pass < 2; pass++) {
        init_gen(b, &g, 0);
        for (int t = 0; t < FRAMES; t++) {
            fill_pcm(pcm, t);
            run1(b, &f, 0, &g, pcm);
            if (pass == 0) {
                memcpy(out[t], f.out, sizeof(int) * (size_t)nout);
                memcpy(codes[t], f.codes, sizeof(int) * (size_t)b->n_user);
                memcpy(pcm_out[t], f.pcm_out, sizeof pcm_out[t]);
                continue;
            }
            ck_assert_msg(memcmp(codes[t], f.codes, sizeof(int) * (size_t)b->n_user) == 0, "frame %d: user codes", t);
            if (!f.has_out[0]) continue;
            ck_assert_msg(memcmp(out[t], f.out, sizeof(int) * (size_t)nout) == 0, "frame %d: tokens", t);
            ck_assert_msg(memcmp(pcm_out[t], f.pcm_out, sizeof pcm_out[t]) == 0, "frame %d: audio", t);
        }
    }
    lm_frame_free(&f);
    lm_backend_close(b);
}
END_TEST

/* Steady frames allocate nothing: after WARM frames of both slots (every
 * LMGen past its lag), STEADY more, with `inflight` frames in flight, make
 * no call to the allocator from the engine's code on any thread. */
static void check_no_alloc(const char *lm_rel, int pipeline, int inflight) {
    enum { WARM = 4, STEADY = 8 };
    lm_backend *b = open_demo_ex(lm_rel, pipeline);
    lm_frame f[LM_MAX_INFLIGHT];
    ms_error e = {0};
    for (int k = 0; k < inflight; k++) ck_assert_int_eq(lm_frame_alloc(b, &f[k], SLOTS, &e), MS_OK);
    lmgen_slot g[SLOTS];
    lmgen_slot *gens[SLOTS] = {&g[0], &g[1]};
    int slots[SLOTS] = {0, 1};
    for (int i = 0; i < SLOTS; i++) init_gen(b, &g[i], i);
    static float pcm[LM_MAX_INFLIGHT][SLOTS * MS_FRAME_SAMPLES];
    /* no ck_assert while counting (Check allocates): failures are kept */
    long before = 0;
    int bad = -1, rc = MS_OK, outs = 0;
    for (int t = 0; t < WARM + STEADY + inflight - 1 && rc == MS_OK; t++) {
        if (t == WARM) {
            before = atomic_load(&n_allocs);
            atomic_store(&counting, 1);
        }
        /* `inflight` frames submitted: submit t, then wait t - inflight + 1 */
        if (t < WARM + STEADY) {
            lm_frame *cur = &f[t % inflight];
            for (int i = 0; i < SLOTS; i++) fill_pcm(pcm[t % inflight] + (size_t)i * MS_FRAME_SAMPLES, t + i);
            cur->n = SLOTS;
            cur->slots = slots;
            cur->gens = gens;
            cur->pcm_in = pcm[t % inflight];
            if ((rc = lm_frame_submit(b, cur, &e)) != MS_OK) bad = t;
        }
        int w = t - (inflight - 1);
        if (rc == MS_OK && w >= 0) {
            if ((rc = lm_frame_wait(b, &f[w % inflight], &e)) != MS_OK) bad = w;
            else if (w >= WARM) outs += f[w % inflight].has_out[0] + f[w % inflight].has_out[1];
        }
    }
    atomic_store(&counting, 0);
    long got = atomic_load(&n_allocs) - before;
    ck_assert_msg(rc == MS_OK, "frame %d: %s", bad, e.msg);
    ck_assert_int_eq(outs, SLOTS * STEADY);   /* every steady frame had output */
    ck_assert_msg(got == 0, "%s, pipeline %d: %ld allocations over %d steady frames", lm_rel, pipeline, got, STEADY);
    for (int k = 0; k < inflight; k++) lm_frame_free(&f[k]);
    lm_backend_close(b);
}

START_TEST(test_no_alloc_kyutai) { check_no_alloc("kyutai/lm", 0, 1); }
END_TEST

START_TEST(test_no_alloc_personaplex) { check_no_alloc("lm", 0, 1); }
END_TEST

START_TEST(test_no_alloc_pipelined) {
    check_no_alloc("kyutai/lm", 1, 2);
    check_no_alloc("lm", 1, LM_MAX_INFLIGHT);
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("frame");
    TCase *tc = tcase_create("frame");
    tcase_add_test(tc, test_submit_checks);
    tcase_add_test(tc, test_lag_kyutai);
    tcase_add_test(tc, test_lag_personaplex);
    tcase_add_test(tc, test_reset_replays);
    tcase_add_test(tc, test_no_alloc_kyutai);
    tcase_add_test(tc, test_no_alloc_personaplex);
    tcase_add_test(tc, test_no_alloc_pipelined);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN
