/* check_model.c - the model front (daemon/session/model.c) as the engine
 * thread drives it through its sched_model: begin, job, frame_alloc,
 * submit, wait, end, on the demo model (make demo-model) and the CPU
 * backend, Kyutai- and PersonaPlex-shaped. A batch of several slots (rows
 * in any order, a slot missing from a frame) gives every token, flag and
 * sample that the same frames run directly on the engine give (a backend
 * of its own, lmgen, lm_frame_submit), synchronous and pipelined (two
 * batches in flight, as the scheduler keeps them); a session ended and
 * begun again starts afresh; a begin that fails (a persona that is not a
 * snapshot of this model) is ended and leaves the slot as good as new. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "check_main.h"
#include "frame.h"
#include "lmgen.h"
#include "model.h"
#include "prime.h"
#include "scheduler.h"

#define SLOTS 3
#define T 6
#define NOUT_MAX (1 + LM_MAX_DEP_Q)

/* The frames of the scenario: the rows' slots, in batch order. */
static const int rows_n[T] = {3, 3, 2, 3, 1, 3};
static const int rows[T][SLOTS] = {{0, 1, 2}, {0, 1, 2}, {2, 0, 0}, {1, 2, 0}, {1, 0, 0}, {0, 1, 2}};

/* What one frame of one row gave. */
typedef struct {
    int has;
    int out[NOUT_MAX];
    float pcm[MS_FRAME_SAMPLES];
} row_out;

static row_out ref[T][SLOTS];

static void paths(const char *lm_rel, char *lm, char *mimi, char *mcfg, char *tok) {
    const char *bd = check_build_dir();
    snprintf(lm, 512, "%s/demo/%s", bd, lm_rel);
    snprintf(mimi, 512, "%s/demo/mimi.safetensors", bd);
    snprintf(mcfg, 512, "%s/demo/mimi.json", bd);
    snprintf(tok, 512, "%s/demo/tokenizer.model", bd);
}

static void samp_of(int slot, lm_samp *s) { lm_samp_defaults(s, 100 + (uint64_t)slot); }

/* the user's audio of slot at frame t */
static void fill_pcm(float *pcm, int slot, int t) {
    for (int i = 0; i < MS_FRAME_SAMPLES; i++)
        pcm[i] = 0.3f * sinf(0.004f * (float)(i + t * MS_FRAME_SAMPLES) * (float)(slot + 1)) +
                 0.1f * sinf(0.05f * (float)i + (float)slot);
}

/* The scenario run directly on the engine: ref[t][row]. */
static void run_reference(const char *lm_rel) {
    char lm[512], mimi[512], mcfg[512], tok[512];
    paths(lm_rel, lm, mimi, mcfg, tok);
    ms_error e = {0};
    lm_backend_opts bo = {.max_slots = SLOTS, .threads = 1, .variant = LM_VARIANT_AUTO, .mimi = mimi,
                          .mimi_config = mcfg};
    lm_backend *b = lm_backend_open(&lm_cpu_backend, lm, &bo, &e);
    ck_assert_msg(b != NULL, "%s (the demo model: make demo-model)", e.msg);
    lmgen_slot g[SLOTS];
    for (int s = 0; s < SLOTS; s++) {
        lm_samp sp;
        samp_of(s, &sp);
        lmgen_init(&g[s], &b->cfg, s, &sp);
        ck_assert_int_eq(lm_backend_reset_slot(b, s, &e), MS_OK);
    }
    lm_frame f;
    ck_assert_int_eq(lm_frame_alloc(b, &f, SLOTS, &e), MS_OK);
    static float pcm[SLOTS * MS_FRAME_SAMPLES];
    lmgen_slot *gens[SLOTS];
    for (int t = 0; t < T; t++) {
        for (int j = 0; j < rows_n[t]; j++) {
            fill_pcm(pcm + (size_t)j * MS_FRAME_SAMPLES, rows[t][j], t);
            gens[j] = &g[rows[t][j]];
        }
        f.n = rows_n[t];
        f.slots = rows[t];
        f.gens = gens;
        f.pcm_in = pcm;
        ck_assert_msg(lm_frame_submit(b, &f, &e) == MS_OK, "%s", e.msg);
        ck_assert_msg(lm_frame_wait(b, &f, &e) == MS_OK, "%s", e.msg);
        for (int j = 0; j < f.n; j++) {
            ref[t][j].has = f.has_out[j];
            memcpy(ref[t][j].out, f.out + (size_t)j * f.nout, sizeof(int) * (size_t)f.nout);
            memcpy(ref[t][j].pcm, f.pcm_out + (size_t)j * MS_FRAME_SAMPLES, sizeof ref[t][j].pcm);
        }
    }
    lm_frame_free(&f);
    lm_backend_close(b);
}

static model *open_model(const char *lm_rel, int pipeline) {
    static char lm[512], mimi[512], mcfg[512], tok[512];
    paths(lm_rel, lm, mimi, mcfg, tok);
    model_opts o = {.lm_dir = lm, .mimi = mimi, .mimi_config = mcfg, .tokenizer = tok, .backend = "cpu",
                    .threads = 1, .slots = SLOTS, .variant = LM_VARIANT_AUTO, .pipeline = pipeline};
    ms_error e = {0};
    model *m = model_open(&o, &e);
    ck_assert_msg(m != NULL, "%s (the demo model: make demo-model)", e.msg);
    return m;
}

/* begin + the start-up job to its end, as the engine does */
static void begin_slot(const sched_model *sm, int slot) {
    sched_params p = {.persona = NULL, .session_id = 1 + (uint64_t)slot};
    samp_of(slot, &p.samp);
    ms_error e = {0};
    ck_assert_msg(sm->begin(sm->ctx, slot, &p, &e) == MS_OK, "%s", e.msg);
    int done = 0;
    for (int k = 0; k < 100 && !done; k++) ck_assert_msg(sm->job(sm->ctx, slot, &done, &e) == MS_OK, "%s", e.msg);
    ck_assert(done);
}

typedef struct {
    sched_batch b[2];
    int slots[2][SLOTS];
    float pcm[2][SLOTS * MS_FRAME_SAMPLES];
} batches;

static void batches_make(const sched_model *sm, batches *bs) {
    ms_error e = {0};
    for (int k = 0; k < 2; k++) {
        sched_batch *b = &bs->b[k];
        memset(b, 0, sizeof *b);
        ck_assert_msg(sm->frame_alloc(sm->ctx, &b->f, SLOTS, &e) == MS_OK, "%s", e.msg);
        b->id = k;
        b->slots = bs->slots[k];
        b->pcm_in = bs->pcm[k];
        b->f.slots = b->slots;
        b->f.pcm_in = b->pcm_in;
    }
}

static void batches_free(const sched_model *sm, batches *bs) {
    for (int k = 0; k < 2; k++) sm->frame_free(sm->ctx, &bs->b[k].f);
}

static void check_rows(const sched_batch *b, int t, const char *what) {
    const lm_frame *f = &b->f;
    ck_assert_int_eq(f->n, rows_n[t]);
    for (int j = 0; j < f->n; j++) {
        ck_assert_msg(f->has_out[j] == ref[t][j].has, "%s frame %d row %d: has_out %d, engine %d", what, t, j,
                      f->has_out[j], ref[t][j].has);
        if (!f->has_out[j]) continue;
        ck_assert_msg(memcmp(f->out + (size_t)j * f->nout, ref[t][j].out, sizeof(int) * (size_t)f->nout) == 0,
                      "%s frame %d row %d (slot %d): tokens differ from the engine's", what, t, j, f->slots[j]);
        ck_assert_msg(memcmp(f->pcm_out + (size_t)j * MS_FRAME_SAMPLES, ref[t][j].pcm, sizeof ref[t][j].pcm) == 0,
                      "%s frame %d row %d (slot %d): audio differs from the engine's", what, t, j, f->slots[j]);
    }
}

/* The scenario through the model front: `inflight` batches submitted at
 * once (1: submit, wait; 2: submit t, then wait t - 1). */
static void run_model(const sched_model *sm, batches *bs, int inflight, const char *what) {
    ms_error e = {0};
    for (int t = 0; t < T + inflight - 1; t++) {
        if (t < T) {
            sched_batch *b = &bs->b[t % 2];
            for (int j = 0; j < rows_n[t]; j++) {
                b->slots[j] = rows[t][j];
                fill_pcm(b->pcm_in + (size_t)j * MS_FRAME_SAMPLES, rows[t][j], t);
            }
            b->f.n = rows_n[t];
            ck_assert_msg(sm->submit(sm->ctx, b, &e) == MS_OK, "%s", e.msg);
        }
        int w = t - (inflight - 1);
        if (w >= 0) {
            ck_assert_msg(sm->wait(sm->ctx, &bs->b[w % 2], &e) == MS_OK, "%s", e.msg);
            check_rows(&bs->b[w % 2], w, what);
        }
    }
}

static void check_batch(const char *lm_rel, int pipeline) {
    run_reference(lm_rel);
    model *m = open_model(lm_rel, pipeline);
    sched_model sm = model_sched(m);
    ck_assert_int_eq(sm.max_slots, SLOTS);
    static batches bs;
    batches_make(&sm, &bs);
    for (int s = 0; s < SLOTS; s++) begin_slot(&sm, s);
    run_model(&sm, &bs, pipeline ? 2 : 1, pipeline ? "pipelined" : "synchronous");
    /* every session ends; new ones on the same slots start afresh */
    for (int s = 0; s < SLOTS; s++) sm.end(sm.ctx, s);
    for (int s = 0; s < SLOTS; s++) begin_slot(&sm, s);
    run_model(&sm, &bs, pipeline ? 2 : 1, "after end and begin");
    for (int s = 0; s < SLOTS; s++) sm.end(sm.ctx, s);
    batches_free(&sm, &bs);
    model_close(m);
}

START_TEST(test_batch_kyutai) { check_batch("kyutai/lm", 0); }
END_TEST

START_TEST(test_batch_kyutai_pipelined) { check_batch("kyutai/lm", 1); }
END_TEST

START_TEST(test_batch_personaplex) { check_batch("lm", 0); }
END_TEST

START_TEST(test_batch_personaplex_pipelined) { check_batch("lm", 1); }
END_TEST

/* A begin that fails (a persona that is no snapshot: its restore job
 * cannot be made) answers the error; the engine then ends the slot (as the
 * scheduler does), and the next session there runs as on a fresh slot. */
static void check_failed_begin(const char *lm_rel) {
    run_reference(lm_rel);
    model *m = open_model(lm_rel, 0);
    sched_model sm = model_sched(m);
    static batches bs;
    batches_make(&sm, &bs);
    pp_persona bogus;
    memset(&bogus, 0, sizeof bogus);
    sched_params p = {.persona = &bogus, .session_id = 9};
    samp_of(1, &p.samp);
    ms_error e = {0};
    ck_assert_int_eq(sm.begin(sm.ctx, 1, &p, &e), MS_ERR_ARG);
    ck_assert_msg(strstr(e.msg, "persona") != NULL, "%s", e.msg);
    sm.end(sm.ctx, 1);
    /* nothing left of it: the job is gone (done at once), and the slot
     * steps as the engine's fresh slot does */
    for (int s = 0; s < SLOTS; s++) begin_slot(&sm, s);
    run_model(&sm, &bs, 1, "after a failed begin");
    for (int s = 0; s < SLOTS; s++) sm.end(sm.ctx, s);
    batches_free(&sm, &bs);
    model_close(m);
}

START_TEST(test_failed_begin_kyutai) { check_failed_begin("kyutai/lm"); }
END_TEST

START_TEST(test_failed_begin_personaplex) { check_failed_begin("lm"); }
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("model");
    TCase *tc = tcase_create("model");
    tcase_add_test(tc, test_batch_kyutai);
    tcase_add_test(tc, test_batch_kyutai_pipelined);
    tcase_add_test(tc, test_batch_personaplex);
    tcase_add_test(tc, test_batch_personaplex_pipelined);
    tcase_add_test(tc, test_failed_begin_kyutai);
    tcase_add_test(tc, test_failed_begin_personaplex);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN
