/* check_pjob.c - the daemon's prime job (engine/persona/pjob.c) on the PersonaPlex
 * fixtures of tests/fixtures/pp (gen_pp.py): a prompt primed in chunks
 * (voice codes, or a saved voice replayed a few rows at a time, then the
 * forced calls a few positions at a time) and snapshotted ends in the same
 * ring, flags and offset as pp_prime by one prefill, and in the fixture's
 * reference state, with the same K/V (to rounding: chunks change the
 * batch shapes of the matrix products); the snapshot restores into
 * another slot and steps on as the reference does; bad prompts fail at
 * create. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "check_lm_util.h"
#include "check_main.h"
#include "json.h"
#include "lmgen.h"
#include "lmgen_pp.h"
#include "pjob.h"
#include "prime.h"
#include "prime_io.h"

#define PP_FIX_DIR "tests/fixtures/pp"
/* K/V of a chunked prime against one prefill: relative error bound. One
 * prefill and a chunked one sum the same products in other groupings
 * (float32): measured up to 2.5e-7 on these fixtures. */
#define PJOB_KV_TOL 1e-5

static lm_backend *open_case(const char *name, int slots) {
    char dir[256];
    snprintf(dir, sizeof dir, PP_FIX_DIR "/%s", name);
    ms_error e = {0};
    lm_backend_opts bo = {.max_slots = slots, .threads = 2, .variant = LM_VARIANT_AUTO};
    lm_backend *b = lm_backend_open(&lm_cpu_backend, dir, &bo, &e);
    ck_assert_msg(b != NULL, "%s: %s", name, e.msg);
    ck_assert_int_eq(b->cfg.variant, LM_VARIANT_PERSONAPLEX);
    return b;
}

static void load_prompt(const char *name, const lm_config *c, int saved, pp_prompt_buf *pb) {
    char v[256], s[256], x[256], si[256], t[256];
    snprintf(v, sizeof v, PP_FIX_DIR "/%s/voice.txt", name);
    snprintf(s, sizeof s, PP_FIX_DIR "/%s/voice.safetensors", name);
    snprintf(x, sizeof x, PP_FIX_DIR "/%s/silence.txt", name);
    snprintf(si, sizeof si, PP_FIX_DIR "/%s/sine.txt", name);
    snprintf(t, sizeof t, PP_FIX_DIR "/%s/text_ids.txt", name);
    pp_prompt_paths pa = {.voice_codes = saved ? NULL : v, .voice_saved = saved ? s : NULL, .text_ids = t,
                          .silence = x, .sine = si, .silence_frames = -1};
    ms_error e = {0};
    ck_assert_msg(pp_prompt_load(pb, &pa, c, &e) == MS_OK, "%s: %s", name, e.msg);
}

static void *dup_mem(const void *p, size_t n) {
    if (!p || !n) return NULL;
    void *d = malloc(n);
    ck_assert_ptr_nonnull(d);
    memcpy(d, p, n);
    return d;
}

/* The same prompt as the daemon builds it (owned copies). */
static void to_pjob(const pp_prompt_buf *pb, const lm_config *c, pjob_prompt *p) {
    memset(p, 0, sizeof *p);
    const pp_prompt *q = &pb->p;
    p->voice = dup_mem(q->voice, sizeof(int) * PP_SIDE_CODEBOOKS * (size_t)q->n_voice);
    p->n_voice = q->voice ? q->n_voice : 0;
    p->embs = dup_mem(q->voice_embs, sizeof(float) * (size_t)c->dim * (size_t)q->n_voice_embs);
    p->n_embs = q->voice_embs ? q->n_voice_embs : 0;
    p->cache = q->voice_embs ? dup_mem(q->voice_cache, sizeof(int) * PP_STREAMS * (size_t)(c->max_delay + 3)) : NULL;
    p->text = dup_mem(q->text, sizeof(int) * (size_t)q->n_text);
    p->n_text = q->n_text;
    memcpy(p->silence, q->silence, sizeof p->silence);
    memcpy(p->sine, q->sine, sizeof p->sine);
    p->silence_frames = q->silence_frames;
}

static void init_slot(lm_backend *b, lmgen_slot *g, int slot) {
    lm_samp s;
    lm_samp_defaults(&s, 0);
    lm_samp_greedy(&s);
    lmgen_init(g, &b->cfg, slot, &s);
    ms_error e = {0};
    ck_assert_int_eq(lm_backend_reset_slot(b, slot, &e), MS_OK);
}

static void same_state(const lmgen_slot *a, const lmgen_slot *r) {
    ck_assert_int_eq(a->offset, r->offset);
    ck_assert_int_eq(a->ring, r->ring);
    for (int k = 0; k < PP_STREAMS; k++)
        for (int i = 0; i < r->ring; i++) {
            ck_assert_msg(a->tokens[k][i] == r->tokens[k][i], "ring[%d][%d]: %d, reference %d", k, i, a->tokens[k][i],
                          r->tokens[k][i]);
            ck_assert_msg(a->provided[k][i] == r->provided[k][i], "provided[%d][%d]", k, i);
        }
}

/* max relative error over every layer's keys and values of two snapshots */
static double kv_rel(lm_backend *b, const lm_kv_snap *x, const lm_kv_snap *y) {
    int P = lm_backend_kv_snap_len(b, y);
    ck_assert_int_eq(lm_backend_kv_snap_len(b, x), P);
    size_t n = (size_t)P * (size_t)b->cfg.dim;
    float *a = malloc(n * sizeof(float)), *r = malloc(n * sizeof(float));
    double worst = 0;
    ms_error e = {0};
    for (int which = 0; which < 2; which++)
        for (int l = 0; l < b->cfg.num_layers; l++) {
            ck_assert_int_eq(lm_backend_kv_snap_read(b, x, l, which, a, &e), MS_OK);
            ck_assert_int_eq(lm_backend_kv_snap_read(b, y, l, which, r, &e), MS_OK);
            double err = rel_err(a, r, n);
            if (!(err <= worst)) worst = err;
        }
    free(a);
    free(r);
    return worst;
}

/* The fixture's reference state after the whole prime. */
static void check_reference(const char *name, const lmgen_slot *g) {
    char path[256];
    snprintf(path, sizeof path, PP_FIX_DIR "/%s/prime_state.json", name);
    size_t len;
    uint8_t *txt = check_read_file(path, &len);
    ms_error e = {0};
    js_value *v = js_parse((const char *)txt, len, &e);
    ck_assert_msg(v != NULL, "%s", e.msg);
    ck_assert_int_eq(g->offset, js_get(v, "offset")->i);
    const js_value *ring = js_get(v, "ring"), *prov = js_get(v, "provided");
    for (int k = 0; k < PP_STREAMS; k++)
        for (int i = 0; i < g->ring; i++) {
            ck_assert_int_eq(g->tokens[k][i], js_at(js_at(ring, k), i)->i);
            ck_assert_int_eq(g->provided[k][i], js_at(js_at(prov, k), i)->i);
        }
    js_free(v);
    free(txt);
}

/* Run job j to its end; returns the chunks it took. */
static int run_job(pjob *j) {
    ms_error e = {0};
    int done = 0, n = 0;
    while (!done) {
        ck_assert_msg(pjob_run(j, &done, &e) == MS_OK, "%s", e.msg);
        ck_assert_int_lt(++n, 100000);
    }
    return n;
}

/* One fixture, voice codes or saved voice, several chunk sizes: chunked
 * prime + snapshot = one prefill = the reference; the snapshot restored
 * steps as the reference slot does. */
static void chunked_equals_prefill(const char *name, int saved) {
    lm_backend *b = open_case(name, 3);
    pp_prompt_buf pb;
    load_prompt(name, &b->cfg, saved, &pb);
    pjob_prompt pr;
    to_pjob(&pb, &b->cfg, &pr);
    /* the reference: pp_prime by one prefill on slot 0 */
    lmgen_slot ref;
    init_slot(b, &ref, 0);
    ms_error e = {0};
    ck_assert_msg(pp_prime(b, &ref, &pb.p, PP_PRIME_PREFILL, &e) == MS_OK, "%s", e.msg);
    check_reference(name, &ref);
    pp_persona refp;
    ck_assert_msg(pp_persona_save(b, &ref, &refp, &e) == MS_OK, "%s", e.msg);
    ck_assert_int_eq(pjob_prompt_calls(&pr), ref.offset);
    static const int chunks[] = {1, 3, 16, 4096};
    for (size_t c = 0; c < sizeof chunks / sizeof *chunks; c++) {
        pjob *j = pjob_create(b, 1, &pr, chunks[c], &e);
        ck_assert_msg(j != NULL, "%s", e.msg);
        int n = run_job(j);
        /* replay rows + prefill calls in chunks, then one snapshot */
        int rows = pr.n_embs, calls = (int)(ref.offset - 1) - rows;
        int want = (rows + chunks[c] - 1) / chunks[c] + (calls + chunks[c] - 1) / chunks[c] + 1;
        ck_assert_msg(n == want || n == want + 1, "%s chunk %d: %d chunks, expected about %d", name, chunks[c], n,
                      want);
        pp_persona *p = pjob_take(j);
        ck_assert_ptr_nonnull(p);
        ck_assert_ptr_null(pjob_take(j)); /* taken once */
        same_state(&p->st, &ref);
        ck_assert_int_eq(p->pos, refp.pos);
        double err = kv_rel(b, p->kv, refp.kv);
        fprintf(stderr, "pjob %s%s chunk %d: %d chunks, K/V relative error %.2g\n", name, saved ? " (saved)" : "",
                chunks[c], n, err);
        ck_assert_msg(err <= PJOB_KV_TOL, "%s%s chunk %d: K/V relative error %.3g", name, saved ? " (saved)" : "",
                      chunks[c], err);
        /* restored into a third slot, it steps on as the reference slot */
        lmgen_slot g;
        init_slot(b, &g, 2);
        ck_assert_msg(pp_persona_load(b, p, &g, &e) == MS_OK, "%s", e.msg);
        lmgen_slot r2 = ref;
        ck_assert_msg(pp_persona_load(b, &refp, &r2, &e) == MS_OK, "%s", e.msg); /* slot 0 back to the prime */
        int user[PP_SIDE_CODEBOOKS] = {1, 2, 3, 4, 5, 6, 7, 8};
        for (int t = 0; t < 4; t++) {
            int oa[PP_OUT_TOKENS], orf[PP_OUT_TOKENS], ha = 0, hr = 0;
            lmgen_slot *ga = &g, *gr = &r2;
            ck_assert_int_eq(pp_step_users(b, &ga, 1, user, oa, &ha, NULL, NULL, &e), MS_OK);
            ck_assert_int_eq(pp_step_users(b, &gr, 1, user, orf, &hr, NULL, NULL, &e), MS_OK);
            ck_assert_int_eq(ha, hr);
            if (ha) ck_assert_msg(memcmp(oa, orf, sizeof oa) == 0, "%s chunk %d: step %d differs", name, chunks[c], t);
        }
        pp_persona_close(b, p);
        free(p);
        pjob_free(j);
    }
    pp_persona_close(b, &refp);
    pjob_prompt_free(&pr);
    pp_prompt_buf_free(&pb);
    lm_backend_close(b);
}

START_TEST(test_voice_codes) { chunked_equals_prefill("pp_d1", 0); }
END_TEST

START_TEST(test_saved_voice) { chunked_equals_prefill("pp_d1", 1); }
END_TEST

START_TEST(test_other_fixture) { chunked_equals_prefill("pp_d2_wrap", 1); }
END_TEST

START_TEST(test_bad_prompts) {
    lm_backend *b = open_case("pp_d1", 1);
    pp_prompt_buf pb;
    load_prompt("pp_d1", &b->cfg, 0, &pb);
    pjob_prompt pr;
    to_pjob(&pb, &b->cfg, &pr);
    ms_error e = {0};
    ck_assert_ptr_null(pjob_create(b, 0, &pr, 0, &e)); /* no chunk */
    pr.text[0] = b->cfg.text_card;                     /* an id out of range: refused at create */
    ck_assert_ptr_null(pjob_create(b, 0, &pr, 4, &e));
    ck_assert_msg(strstr(e.msg, "text id"), "%s", e.msg);
    pr.text[0] = 0;
    pr.voice[3] = b->cfg.card; /* a code out of range */
    ck_assert_ptr_null(pjob_create(b, 0, &pr, 4, &e));
    pr.voice[3] = 0;
    pr.silence[0] = -1;
    ck_assert_ptr_null(pjob_create(b, 0, &pr, 4, &e));
    pr.silence[0] = 0;
    /* codes and a saved voice at once */
    pr.embs = calloc((size_t)b->cfg.dim, sizeof(float));
    pr.n_embs = 1;
    ck_assert_ptr_null(pjob_create(b, 0, &pr, 4, &e));
    ck_assert_msg(strstr(e.msg, "exclude"), "%s", e.msg);
    free(pr.embs);
    pr.embs = NULL;
    pr.n_embs = 0;
    /* a job freed half way frees what it made */
    pjob *j = pjob_create(b, 0, &pr, 1, &e);
    ck_assert_ptr_nonnull(j);
    int done = 0;
    ck_assert_int_eq(pjob_run(j, &done, &e), MS_OK);
    ck_assert(!done);
    ck_assert_ptr_null(pjob_take(j));
    pjob_free(j);
    pjob_prompt_free(&pr);
    pp_prompt_buf_free(&pb);
    lm_backend_close(b);
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("pjob");
    TCase *tc = tcase_new("core");
    tcase_add_test(tc, test_voice_codes);
    tcase_add_test(tc, test_saved_voice);
    tcase_add_test(tc, test_other_fixture);
    tcase_add_test(tc, test_bad_prompts);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN
