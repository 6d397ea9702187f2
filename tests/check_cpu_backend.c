/* check_cpu_backend.c - the CPU backend's own contract
 * (engine/cpu/cpu_backend.c) through the dispatcher: a slot reset brings
 * the slot back to a fresh one (K/V, position, codec state) and leaves the
 * other slots alone; the statistics count what was done; the codec reset
 * restores the encoder; the pipeline's early hand-over (lm_frame.on_done)
 * gives a frame's results before the next frame's LM step, the same results
 * as the synchronous frame step. Models: the ring_f32 fixture (LM only) and
 * the demo model (LM + Mimi, make demo-model). Batching, prefill and
 * snapshots are in check_lmgen.c. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "check_main.h"
#include "frame.h"
#include "lmgen.h"
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

/* ---- the early hand-over ---- */

#define HO_SLOTS 2
#define HO_FRAMES 6
#define HO_NF 3   /* frame buffers, as many as frames in flight */

/* What on_done saw, by frame index (copied in the callback: the results as
 * they were handed over). */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int t_of[HO_NF];                   /* frame buffer -> frame index (set before its submit) */
    int ndone, done[HO_FRAMES];        /* under mu */
    int has_out[HO_FRAMES][HO_SLOTS];
    int out[HO_FRAMES][HO_SLOTS][1 + LM_MAX_DEP_Q];
    float pcm[HO_FRAMES][HO_SLOTS][MS_FRAME_SAMPLES];
    lm_frame *fr;                      /* (HO_NF) */
    int nout;
} ho_log;

static void ho_on_done(void *ud, const lm_frame *f) {
    ho_log *h = ud;
    int t = h->t_of[f - h->fr];
    for (int j = 0; j < f->n; j++) {
        h->has_out[t][j] = f->has_out[j];
        memcpy(h->out[t][j], f->out + (size_t)j * h->nout, sizeof(int) * (size_t)h->nout);
        if (f->has_out[j]) memcpy(h->pcm[t][j], f->pcm_out + (size_t)j * MS_FRAME_SAMPLES, sizeof h->pcm[t][j]);
    }
    pthread_mutex_lock(&h->mu);
    h->done[t]++;
    h->ndone++;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

/* Wait until frame t was handed over; 0 if that has not happened within
 * a bound far above any frame's work (the failure this test looks for is
 * a hand-over that never comes before the next step). */
static int ho_wait(ho_log *h, int t) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 20;
    pthread_mutex_lock(&h->mu);
    int rc = 0;
    while (!h->done[t] && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&h->cv, &h->mu, &until);
    int ok = h->done[t] > 0;
    pthread_mutex_unlock(&h->mu);
    return ok;
}

static void ho_pcm(float *pcm, int t, int j) {
    for (int i = 0; i < MS_FRAME_SAMPLES; i++)
        pcm[i] = 0.3f * sinf(0.004f * (float)(i + t * MS_FRAME_SAMPLES) + (float)j) + 0.1f * sinf(0.05f * (float)i);
}

/* HO_FRAMES frames of two greedy slots through the frame step, pipelined
 * or not, with on_done set; the results after each wait to res/res_pcm.
 * Pipelined, frame t + 1 is submitted (which runs frame t's LM step) and
 * then frame t must be handed over while frame t + 1's LM step has not run
 * (it runs only in the next submit or wait, which come after). */
static void ho_run(int pipeline, ho_log *h, int res[HO_FRAMES][HO_SLOTS][1 + LM_MAX_DEP_Q],
                   int res_has[HO_FRAMES][HO_SLOTS], float (*res_pcm)[HO_SLOTS][MS_FRAME_SAMPLES]) {
    const char *bd = check_build_dir();
    char lm[512], mimi[512], mcfg[512];
    snprintf(lm, sizeof lm, "%s/demo/kyutai/lm", bd);
    snprintf(mimi, sizeof mimi, "%s/demo/mimi.safetensors", bd);
    snprintf(mcfg, sizeof mcfg, "%s/demo/mimi.json", bd);
    ms_error e = {0};
    lm_backend_opts bo = {.max_slots = HO_SLOTS, .threads = 1, .variant = LM_VARIANT_AUTO, .mimi = mimi,
                          .mimi_config = mcfg, .pipeline = pipeline};
    lm_backend *b = lm_backend_open(&lm_cpu_backend, lm, &bo, &e);
    ck_assert_msg(b != NULL, "%s (the demo model: make demo-model)", e.msg);
    lm_backend_stats st;
    ck_assert_int_eq(lm_backend_stats_get(b, &st), MS_OK);
    ck_assert_int_eq(st.pipeline, pipeline);
    static lm_frame fr[HO_NF];
    static float pcm[HO_NF][HO_SLOTS * MS_FRAME_SAMPLES];
    static lmgen_slot g[HO_SLOTS];
    lmgen_slot *gens[HO_SLOTS] = {&g[0], &g[1]};
    int slots[HO_SLOTS] = {0, 1};
    memset(h, 0, sizeof *h);
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    h->fr = fr;
    h->nout = 1 + b->cfg.dep_q;
    for (int j = 0; j < HO_SLOTS; j++) {
        lm_samp sp;
        lm_samp_defaults(&sp, 9);
        lm_samp_greedy(&sp);
        lmgen_init(&g[j], &b->cfg, j, &sp);
        ck_assert_int_eq(lm_backend_reset_slot(b, j, &e), MS_OK);
    }
    for (int k = 0; k < HO_NF; k++) {
        ck_assert_int_eq(lm_frame_alloc(b, &fr[k], HO_SLOTS, &e), MS_OK);
        fr[k].n = HO_SLOTS;
        fr[k].slots = slots;
        fr[k].gens = gens;
        fr[k].pcm_in = pcm[k];
        fr[k].on_done = ho_on_done;
        fr[k].on_done_ud = h;
    }
    for (int t = 0; t <= HO_FRAMES; t++) {
        if (t < HO_FRAMES) {   /* submit t: runs frame t - 1's LM step when pipelined */
            lm_frame *f = &fr[t % HO_NF];
            h->t_of[t % HO_NF] = t;
            for (int j = 0; j < HO_SLOTS; j++) ho_pcm(pcm[t % HO_NF] + (size_t)j * MS_FRAME_SAMPLES, t, j);
            ck_assert_msg(lm_frame_submit(b, f, &e) == MS_OK, "%s", e.msg);
        }
        if (t == 0) continue;
        int w = t - 1;   /* wait for frame t - 1 */
        if (pipeline && t < HO_FRAMES) {
            ck_assert_msg(ho_wait(h, w), "frame %d not handed over before frame %d's LM step", w, t);
            /* frame t's LM step has not run: the slots are at position t */
            ck_assert_int_eq((int)lm_backend_pos(b, 0), t);
            ck_assert_int_eq((int)lm_backend_pos(b, 1), t);
        }
        lm_frame *f = &fr[w % HO_NF];
        ck_assert_msg(lm_frame_wait(b, f, &e) == MS_OK, "%s", e.msg);
        for (int j = 0; j < HO_SLOTS; j++) {
            res_has[w][j] = f->has_out[j];
            memcpy(res[w][j], f->out + (size_t)j * h->nout, sizeof(int) * (size_t)h->nout);
            memcpy(res_pcm[w][j], f->pcm_out + (size_t)j * MS_FRAME_SAMPLES, sizeof res_pcm[w][j]);
        }
    }
    for (int k = 0; k < HO_NF; k++) lm_frame_free(&fr[k]);
    lm_backend_close(b);
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
}

/* Pipelined: every frame handed over once, from the codec thread, before
 * the next frame's LM step, with the results its wait then returns, which
 * are those of the synchronous frame step (greedy: bit for bit);
 * synchronous: on_done is never called (the results are read after
 * frame_wait). */
START_TEST(test_early_handover) {
    static ho_log hs, hp;
    static int rs[HO_FRAMES][HO_SLOTS][1 + LM_MAX_DEP_Q], rp[HO_FRAMES][HO_SLOTS][1 + LM_MAX_DEP_Q];
    static int hs_has[HO_FRAMES][HO_SLOTS], hp_has[HO_FRAMES][HO_SLOTS];
    static float ps[HO_FRAMES][HO_SLOTS][MS_FRAME_SAMPLES], pp[HO_FRAMES][HO_SLOTS][MS_FRAME_SAMPLES];
    ho_run(0, &hs, rs, hs_has, ps);
    ck_assert_int_eq(hs.ndone, 0);
    ho_run(1, &hp, rp, hp_has, pp);
    ck_assert_int_eq(hp.ndone, HO_FRAMES);
    int outs = 0;
    for (int t = 0; t < HO_FRAMES; t++) {
        ck_assert_int_eq(hp.done[t], 1);
        for (int j = 0; j < HO_SLOTS; j++) {
            /* handed over = waited for (the hand-over saw final results) */
            ck_assert_int_eq(hp.has_out[t][j], hp_has[t][j]);
            ck_assert_msg(memcmp(hp.out[t][j], rp[t][j], sizeof(int) * (size_t)hp.nout) == 0,
                          "frame %d slot %d: tokens handed over differ from the waited ones", t, j);
            /* pipelined = synchronous */
            ck_assert_int_eq(hp_has[t][j], hs_has[t][j]);
            if (!hs_has[t][j]) continue;
            outs++;
            ck_assert_msg(memcmp(rp[t][j], rs[t][j], sizeof(int) * (size_t)hp.nout) == 0,
                          "frame %d slot %d: text %d pipelined, %d synchronous", t, j, rp[t][j][0], rs[t][j][0]);
            ck_assert_msg(memcmp(hp.pcm[t][j], ps[t][j], sizeof ps[t][j]) == 0,
                          "frame %d slot %d: audio handed over differs from the synchronous step's", t, j);
            ck_assert_msg(memcmp(pp[t][j], ps[t][j], sizeof ps[t][j]) == 0, "frame %d slot %d: audio", t, j);
        }
    }
    ck_assert_int_eq(outs, (HO_FRAMES - 1) * HO_SLOTS);   /* Kyutai's: every frame but the first speaks */
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
    TCase *tp = tcase_new("pipeline");
    tcase_add_test(tp, test_early_handover);
    suite_add_tcase(s, tp);
    return s;
}

CHECK_MAIN
