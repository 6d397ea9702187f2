/* check_cpu_backend.c - the CPU backend's own contract
 * (engine/cpu/cpu_backend.c) through the dispatcher: a slot reset brings
 * the slot back to a fresh one (K/V, position, codec state) and leaves the
 * other slots alone; the statistics count what was done; the codec reset
 * restores the encoder. Models: the ring_f32 fixture (LM only) and the demo
 * model (LM + Mimi, make demo-model). Batching, prefill and snapshots are in
 * check_lmgen.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "check_main.h"
#include "frame.h"
#include "samp.h"

#define FIX "tests/fixtures/lm/ring_f32"
#define STEPS 5

static lm_backend *open_fix(int slots) {
    ms_error e = {0};
    lm_backend_opts bo = {.max_slots = slots, .threads = 1, .variant = LM_VARIANT_AUTO};
    lm_backend *b = lm_backend_open(&lm_cpu_backend, FIX, &bo, &e);
    ck_assert_msg(b != NULL, "%s", e.msg);
    return b;
}

static uint32_t lcg(uint32_t *s) { return *s = *s * 1664525u + 1013904223u; }

/* STEPS rows of input tokens, fixed by seed. */
static void tokens(const lm_config *c, uint32_t seed, int tok[STEPS][LM_MAX_STREAMS]) {
    for (int p = 0; p < STEPS; p++)
        for (int k = 0; k < c->n_streams; k++)
            tok[p][k] = (int)((lcg(&seed) >> 8) % (uint32_t)(k == 0 ? c->text_card : c->card));
}

static lm_step_slot greedy(int slot, const int *tok, const lm_config *c) {
    lm_step_slot r;
    memset(&r, 0, sizeof r);
    r.slot = slot;
    memcpy(r.tokens, tok, sizeof(int) * (size_t)c->n_streams);
    lm_samp_defaults(&r.samp, 0);
    lm_samp_greedy(&r.samp);
    r.dep_steps = -1;
    return r;
}

/* One step of slot with tok; its text and audio tokens to out (1 + dep_q). */
static void step(lm_backend *b, int slot, const int *tok, int *out) {
    ms_error e = {0};
    lm_step_slot r = greedy(slot, tok, &b->cfg);
    ck_assert_msg(lm_backend_step(b, &r, 1, &e) == MS_OK, "%s", e.msg);
    out[0] = r.out_text;
    memcpy(out + 1, r.out_audio, sizeof(int) * (size_t)b->cfg.dep_q);
}

/* After a reset the slot answers the same inputs with the same tokens as
 * the first time, from position 0. */
START_TEST(test_reset_replays) {
    lm_backend *b = open_fix(2);
    const lm_config *c = &b->cfg;
    int tok[STEPS][LM_MAX_STREAMS], first[STEPS][1 + LM_MAX_DEP_Q], again[STEPS][1 + LM_MAX_DEP_Q];
    tokens(c, 7, tok);
    for (int p = 0; p < STEPS; p++) step(b, 0, tok[p], first[p]);
    ck_assert_int_eq((int)lm_backend_pos(b, 0), STEPS);
    ms_error e = {0};
    ck_assert_int_eq(lm_backend_reset_slot(b, 0, &e), MS_OK);
    ck_assert_int_eq((int)lm_backend_pos(b, 0), 0);
    for (int p = 0; p < STEPS; p++) step(b, 0, tok[p], again[p]);
    for (int p = 0; p < STEPS; p++)
        ck_assert_msg(memcmp(first[p], again[p], sizeof(int) * (size_t)(1 + c->dep_q)) == 0,
                      "step %d differs after the reset (text %d, then %d)", p, first[p][0], again[p][0]);
    ck_assert_int_eq(lm_backend_reset_slot(b, 2, &e), MS_ERR_RANGE);
    lm_backend_close(b);
}
END_TEST

/* Resetting slot 0 mid-conversation does not touch slot 1: its position and
 * its next tokens are those of a backend where nothing was reset. */
START_TEST(test_reset_isolated) {
    lm_backend *b = open_fix(2), *ref = open_fix(2);
    const lm_config *c = &b->cfg;
    int tok[STEPS][LM_MAX_STREAMS], o[1 + LM_MAX_DEP_Q], r[1 + LM_MAX_DEP_Q];
    tokens(c, 11, tok);
    ms_error e = {0};
    for (int p = 0; p < STEPS; p++) {
        step(b, 0, tok[p], o);
        step(b, 1, tok[p], o);
        step(ref, 1, tok[p], r);
        ck_assert_mem_eq(o, r, sizeof(int) * (size_t)(1 + c->dep_q));
        if (p == 2) {
            ck_assert_int_eq(lm_backend_reset_slot(b, 0, &e), MS_OK);
            ck_assert_int_eq((int)lm_backend_pos(b, 0), 0);
            ck_assert_int_eq((int)lm_backend_pos(b, 1), 3);
        }
    }
    ck_assert_int_eq((int)lm_backend_pos(b, 0), STEPS - 3);
    ck_assert_int_eq((int)lm_backend_pos(b, 1), STEPS);
    lm_backend_close(b);
    lm_backend_close(ref);
}
END_TEST

/* The statistics count slot-steps and calls, and describe the backend. */
START_TEST(test_stats) {
    lm_backend *b = open_fix(2);
    const lm_config *c = &b->cfg;
    int tok[STEPS][LM_MAX_STREAMS];
    tokens(c, 3, tok);
    lm_backend_stats st;
    ck_assert_int_eq(lm_backend_stats_get(b, &st), MS_OK);
    ck_assert_uint_eq(st.steps, 0);
    ck_assert_uint_eq(st.step_calls, 0);
    ms_error e = {0};
    for (int p = 0; p < 3; p++) {
        lm_step_slot r[2] = {greedy(0, tok[p], c), greedy(1, tok[p], c)};
        ck_assert_msg(lm_backend_step(b, r, 2, &e) == MS_OK, "%s", e.msg);
    }
    ck_assert_int_eq(lm_backend_stats_get(b, &st), MS_OK);
    ck_assert_uint_eq(st.steps, 6);
    ck_assert_uint_eq(st.step_calls, 3);
    ck_assert(st.step_seconds > 0);
    ck_assert_uint_eq(st.frames, 0);
    ck_assert_int_eq(st.threads, 1);
    ck_assert_int_eq(st.pipeline, 0);
    ck_assert_int_eq(st.where, LM_MEM_HOST);
    ck_assert_str_eq(st.weights_scheme, "f32");
    ck_assert_str_eq(st.kv_scheme, "f32");
    ck_assert_uint_gt(st.kv_bytes, 0);
    ck_assert_uint_eq(st.codec_bytes, 0);   /* opened without a codec */
    ck_assert_uint_ge(st.mem_used, st.weight_bytes + st.kv_bytes);
    lm_backend_close(b);
}
END_TEST

/* The encoder reset brings the slot's Mimi encoder back to fresh: the same
 * audio encodes to the same codes as the first time. */
START_TEST(test_codec_reset) {
    const char *bd = check_build_dir();
    char lm[512], mimi[512], mcfg[512];
    snprintf(lm, sizeof lm, "%s/demo/kyutai/lm", bd);
    snprintf(mimi, sizeof mimi, "%s/demo/mimi.safetensors", bd);
    snprintf(mcfg, sizeof mcfg, "%s/demo/mimi.json", bd);
    ms_error e = {0};
    lm_backend_opts bo = {.max_slots = 1, .threads = 1, .variant = LM_VARIANT_AUTO, .mimi = mimi,
                          .mimi_config = mcfg};
    lm_backend *b = lm_backend_open(&lm_cpu_backend, lm, &bo, &e);
    ck_assert_msg(b != NULL, "%s (the demo model: make demo-model)", e.msg);
    ck_assert(b->ncb > 0 && b->ncb <= 16);
    static float pcm[2][MS_FRAME_SAMPLES];
    for (int i = 0; i < MS_FRAME_SAMPLES; i++) {
        pcm[0][i] = 0.3f * sinf(0.01f * (float)i);
        pcm[1][i] = 0.3f * sinf(0.013f * (float)i + 1.0f);
    }
    int slot = 0, a[2][16], r[2][16];
    for (int f = 0; f < 2; f++) ck_assert_int_eq(lm_backend_mimi_encode(b, &slot, 1, pcm[f], a[f], &e), MS_OK);
    ck_assert_int_eq(lm_backend_codec_reset(b, 0, LM_CODEC_ENCODER, &e), MS_OK);
    for (int f = 0; f < 2; f++) ck_assert_int_eq(lm_backend_mimi_encode(b, &slot, 1, pcm[f], r[f], &e), MS_OK);
    for (int f = 0; f < 2; f++) ck_assert_mem_eq(a[f], r[f], sizeof(int) * (size_t)b->ncb);
    ck_assert_int_ne(lm_backend_codec_reset(b, 1, LM_CODEC_ENCODER, &e), MS_OK);   /* no such slot */
    lm_backend_stats st;
    ck_assert_int_eq(lm_backend_stats_get(b, &st), MS_OK);
    ck_assert_uint_gt(st.codec_bytes, 0);
    lm_backend_close(b);
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("cpu_backend");
    TCase *tc = tcase_create("slots");
    tcase_add_test(tc, test_reset_replays);
    tcase_add_test(tc, test_reset_isolated);
    tcase_add_test(tc, test_stats);
    tcase_add_test(tc, test_codec_reset);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN
