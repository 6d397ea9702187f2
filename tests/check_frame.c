/* check_frame.c - the frame step (engine/lm/frame.c) on the CPU backend and
 * the demo model: what lm_frame_submit refuses, how many frames each LMGen
 * holds back before its first output (1 with Kyutai's, 2 with
 * PersonaPlex's), and that a slot reset (backend + bookkeeping) replays a
 * conversation exactly, codec included. The frame step against the same
 * work done by hand, synchronous and pipelined, is in check_lmgen.c. */
#include <math.h>
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

static lm_backend *open_demo(const char *lm_rel) {
    const char *bd = check_build_dir();
    char lm[512], mimi[512], mcfg[512];
    snprintf(lm, sizeof lm, "%s/demo/%s", bd, lm_rel);
    snprintf(mimi, sizeof mimi, "%s/demo/mimi.safetensors", bd);
    snprintf(mcfg, sizeof mcfg, "%s/demo/mimi.json", bd);
    ms_error e = {0};
    lm_backend_opts bo = {.max_slots = SLOTS, .threads = 1, .variant = LM_VARIANT_AUTO, .mimi = mimi,
                          .mimi_config = mcfg};
    lm_backend *b = lm_backend_open(&lm_cpu_backend, lm, &bo, &e);
    ck_assert_msg(b != NULL, "%s (the demo model: make demo-model)", e.msg);
    return b;
}

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

static Suite *make_suite(void) {
    Suite *s = suite_create("frame");
    TCase *tc = tcase_create("frame");
    tcase_add_test(tc, test_submit_checks);
    tcase_add_test(tc, test_lag_kyutai);
    tcase_add_test(tc, test_lag_personaplex);
    tcase_add_test(tc, test_reset_replays);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN
