/* check_lmgen.c - the backend interface on the CPU backend: a batch of
 * independent slots, prefill (tokens and embeddings, across the ring wrap)
 * against step-by-step, K/V snapshot and restore, partial depformer and
 * forced targets, and the dispatcher's argument checks. Model: the
 * ring_f32 fixture (context 8). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "check_lm_util.h"
#include "check_main.h"
#include "lm.h"
#include "lmgen.h"
#include "mimi.h"
#include "samp.h"

#define FIX LM_FIX_DIR "/ring_f32"
/* batched and single-row products sum in another order: 1e-5 relative */
#define SAME_TOL 1e-5

static lm_backend *open_b(int slots) {
    ms_error e = {0};
    lm_backend_opts bo = {.max_slots = slots, .threads = 2, .variant = LM_VARIANT_AUTO};
    lm_backend *b = lm_backend_open(&lm_cpu_backend, FIX, &bo, &e);
    ck_assert_msg(b != NULL, "%s", e.msg);
    return b;
}

static double rel(const float *a, const float *r, int n) {
    double md = 0, mr = 0;
    for (int i = 0; i < n; i++) {
        double d = fabs((double)a[i] - r[i]);
        if (!(d <= md)) md = d;
        if (fabs(r[i]) > mr) mr = fabs(r[i]);
    }
    return md / (mr > 0 ? mr : 1);
}

/* deterministic pseudo-random tokens */
static uint32_t lcg(uint32_t *s) { return *s = *s * 1664525u + 1013904223u; }

static void rand_tokens(const lm_config *c, int *tok, uint32_t *s) {
    tok[0] = (int)(lcg(s) >> 8) % (c->text_card + 1);
    for (int q = 0; q < c->n_q; q++) tok[1 + q] = (int)(lcg(s) >> 8) % (c->card + 1);
}

static lm_step_slot greedy_req(int slot, const int *tok, const lm_config *c) {
    lm_step_slot s;
    memset(&s, 0, sizeof s);
    s.slot = slot;
    memcpy(s.tokens, tok, sizeof(int) * c->n_streams);
    lm_samp_defaults(&s.samp, 5);
    lm_samp_greedy(&s.samp);
    s.dep_steps = -1;
    return s;
}

START_TEST(test_batch_independent) {
    lm_backend *b = open_b(3), *one = open_b(1);
    const lm_config *c = &b->cfg;
    lm_samp samp;
    lm_samp_defaults(&samp, 11);   /* sampling on: the keyed noise must not depend on the batch either */
    lmgen_slot g[3], h;
    lmgen_slot *gp[3] = {&g[0], &g[1], &g[2]};
    for (int i = 0; i < 3; i++) lmgen_init(&g[i], c, i, &samp);
    int out[3 * (1 + LM_MAX_DEP_Q)], has[3];
    int outs[3][20][1 + LM_MAX_DEP_Q];
    float tl[3 * 48];
    static float tls[3][20][48];
    uint32_t seed = 99;
    int user[3][20][LM_MAX_NQ];
    for (int i = 0; i < 3; i++)
        for (int t = 0; t < 20; t++)
            for (int k = 0; k < c->n_user; k++) user[i][t][k] = (int)(lcg(&seed) >> 8) % c->card;
    ms_error e = {0};
    for (int t = 0; t < 20; t++) {
        int u[3 * LM_MAX_NQ];
        for (int i = 0; i < 3; i++) memcpy(u + i * c->n_user, user[i][t], sizeof(int) * c->n_user);
        ck_assert_msg(lmgen_step_batch(b, gp, 3, u, out, has, tl, NULL, &e) == MS_OK, "%s", e.msg);
        for (int i = 0; i < 3; i++) {
            memcpy(outs[i][t], out + i * (1 + c->dep_q), sizeof(int) * (1 + c->dep_q));
            memcpy(tls[i][t], tl + i * c->text_card, sizeof(float) * c->text_card);
            ck_assert_int_eq(has[i], t > 0);
        }
    }
    /* each slot alone gives the same frames */
    for (int i = 0; i < 3; i++) {
        lmgen_init(&h, c, 0, &samp);
        lmgen_slot *hp = &h;
        ck_assert_int_eq(lm_backend_reset_slot(one, 0, &e), MS_OK);
        for (int t = 0; t < 20; t++) {
            int o1[1 + LM_MAX_DEP_Q], h1;
            float t1[48];
            ck_assert_int_eq(lmgen_step_batch(one, &hp, 1, user[i][t], o1, &h1, t1, NULL, &e), MS_OK);
            ck_assert_msg(rel(t1, tls[i][t], c->text_card) < SAME_TOL, "slot %d step %d logits", i, t);
            if (h1)
                for (int k = 0; k <= c->dep_q; k++)
                    ck_assert_msg(o1[k] == outs[i][t][k], "slot %d step %d out[%d]: %d alone, %d batched", i, t, k,
                                  o1[k], outs[i][t][k]);
        }
    }
    lm_backend_close(b);
    lm_backend_close(one);
}
END_TEST

/* prefill of P positions then one step == P + 1 steps (P past the ring
 * size 8, and past the 64-position prefill chunk) */
static void prefill_case(int P, int use_embs) {
    lm_backend *b = open_b(2);
    const lm_config *c = &b->cfg;
    int *tok = malloc(sizeof(int) * (size_t)(P + 1) * c->n_streams);
    uint32_t s = 7;
    for (int p = 0; p <= P; p++) rand_tokens(c, tok + p * c->n_streams, &s);
    ms_error e = {0};
    float ta[48], tb[48], aa[8 * 32], ab[8 * 32];
    lm_step_slot r;
    for (int p = 0; p <= P; p++) {
        r = greedy_req(0, tok + p * c->n_streams, c);
        r.text_logits = ta;
        r.audio_logits = aa;
        ck_assert_int_eq(lm_backend_step(b, &r, 1, &e), MS_OK);
    }
    int ta_tok = r.out_text;
    if (use_embs) {
        ms_error e2 = {0};
        lm_model *m = lm_model_load(FIX, LM_VARIANT_AUTO, &e2);
        ck_assert_msg(m != NULL, "%s", e2.msg);
        float *emb = calloc((size_t)P * c->dim, sizeof(float));
        for (int p = 0; p < P; p++) {
            const int *t = tok + p * c->n_streams;
            for (int q = 0; q < c->n_q; q++) kern_embed_add(emb + (size_t)p * c->dim, &m->emb[q], t[1 + q]);
            kern_embed_add(emb + (size_t)p * c->dim, &m->text_emb, t[0]);
        }
        ck_assert_msg(lm_backend_prefill(b, 1, 0, P, NULL, emb, &e) == MS_OK, "%s", e.msg);
        free(emb);
        lm_model_free(m);
    } else {
        ck_assert_msg(lm_backend_prefill(b, 1, 0, P, tok, NULL, &e) == MS_OK, "%s", e.msg);
    }
    ck_assert_int_eq((int)lm_backend_pos(b, 1), P);
    r = greedy_req(1, tok + P * c->n_streams, c);
    r.text_logits = tb;
    r.audio_logits = ab;
    ck_assert_int_eq(lm_backend_step(b, &r, 1, &e), MS_OK);
    double et = rel(tb, ta, c->text_card), ea = rel(ab, aa, c->dep_q * c->card);
    ck_assert_msg(et < SAME_TOL && ea < SAME_TOL, "P=%d embs=%d: rel err text %.2e audio %.2e", P, use_embs, et, ea);
    ck_assert_int_eq(r.out_text, ta_tok);
    /* a prefill that does not start at the slot's next position is refused */
    ck_assert_int_eq(lm_backend_prefill(b, 1, 0, 1, tok, NULL, &e), MS_ERR_STATE);
    free(tok);
    lm_backend_close(b);
}

START_TEST(test_prefill) {
    prefill_case(5, 0);
    prefill_case(20, 0);
    prefill_case(70, 0);
    prefill_case(20, 1);
}
END_TEST

START_TEST(test_snapshot) {
    lm_backend *b = open_b(3);
    const lm_config *c = &b->cfg;
    int tok[7 * LM_MAX_STREAMS];
    uint32_t s = 3;
    for (int p = 0; p < 7; p++) rand_tokens(c, tok + p * c->n_streams, &s);
    ms_error e = {0};
    ck_assert_int_eq(lm_backend_prefill(b, 0, 0, 6, tok, NULL, &e), MS_OK);
    lm_kv_snap *snap = NULL;
    ck_assert_int_eq(lm_backend_kv_snapshot(b, 0, 9, &snap, &e), MS_ERR_RANGE);   /* past the slot */
    ck_assert_msg(lm_backend_kv_snapshot(b, 0, 6, &snap, &e) == MS_OK, "%s", e.msg);
    /* slot 2 holds something else first */
    ck_assert_int_eq(lm_backend_prefill(b, 2, 0, 3, tok + 3 * c->n_streams, NULL, &e), MS_OK);
    ck_assert_msg(lm_backend_kv_restore(b, 2, snap, &e) == MS_OK, "%s", e.msg);
    ck_assert_int_eq((int)lm_backend_pos(b, 2), 6);
    float t0[48], t2[48];
    lm_step_slot r0 = greedy_req(0, tok + 6 * c->n_streams, c), r2 = greedy_req(2, tok + 6 * c->n_streams, c);
    r0.text_logits = t0;
    r2.text_logits = t2;
    ck_assert_int_eq(lm_backend_step(b, &r0, 1, &e), MS_OK);
    ck_assert_int_eq(lm_backend_step(b, &r2, 1, &e), MS_OK);
    ck_assert_mem_eq(t0, t2, sizeof(float) * c->text_card);
    ck_assert_int_eq(r0.out_text, r2.out_text);
    lm_backend_kv_snap_free(b, snap);
    /* more positions than the ring holds cannot be snapshotted */
    ck_assert_int_eq(lm_backend_reset_slot(b, 1, &e), MS_OK);
    int many[10 * LM_MAX_STREAMS];
    for (int p = 0; p < 10; p++) rand_tokens(c, many + p * c->n_streams, &s);
    ck_assert_int_eq(lm_backend_prefill(b, 1, 0, 10, many, NULL, &e), MS_OK);
    ck_assert_int_eq(lm_backend_kv_snapshot(b, 1, 10, &snap, &e), MS_ERR_RANGE);
    lm_backend_close(b);
}
END_TEST

/* a whole-slot snapshot (K/V of [0, offset) + the bookkeeping) taken after
 * 6 live steps continues in another slot exactly as the original */
START_TEST(test_slot_snapshot) {
    lm_backend *b = open_b(2);
    const lm_config *c = &b->cfg;
    lm_samp samp;
    lm_samp_defaults(&samp, 21);
    lmgen_slot g0, g1;
    lmgen_init(&g0, c, 0, &samp);
    lmgen_init(&g1, c, 1, &samp);
    lmgen_slot *p0 = &g0, *p1 = &g1;
    int user[LM_MAX_NQ], out0[1 + LM_MAX_DEP_Q], out1[1 + LM_MAX_DEP_Q], h0, h1;
    uint32_t s = 8;
    ms_error e = {0};
    for (int t = 0; t < 6; t++) {
        for (int k = 0; k < c->n_user; k++) user[k] = (int)(lcg(&s) >> 8) % c->card;
        ck_assert_int_eq(lmgen_step_batch(b, &p0, 1, user, out0, &h0, NULL, NULL, &e), MS_OK);
    }
    lmgen_slot saved = g0;
    lm_kv_snap *kv;
    ck_assert_int_eq((int)lm_backend_pos(b, 0), (int)g0.offset);
    ck_assert_msg(lm_backend_kv_snapshot(b, 0, (int)g0.offset, &kv, &e) == MS_OK, "%s", e.msg);
    ck_assert_int_eq(lm_backend_kv_restore(b, 1, kv, &e), MS_OK);
    lmgen_restore(&g1, &saved);
    ck_assert_int_eq(g1.slot, 1);
    for (int t = 6; t < 20; t++) {   /* past the ring size 8 */
        for (int k = 0; k < c->n_user; k++) user[k] = (int)(lcg(&s) >> 8) % c->card;
        ck_assert_int_eq(lmgen_step_batch(b, &p0, 1, user, out0, &h0, NULL, NULL, &e), MS_OK);
        ck_assert_int_eq(lmgen_step_batch(b, &p1, 1, user, out1, &h1, NULL, NULL, &e), MS_OK);
        ck_assert_int_eq(h0, h1);
        ck_assert_mem_eq(out0, out1, sizeof(int) * (1 + c->dep_q));
    }
    lm_backend_kv_snap_free(b, kv);
    lm_backend_close(b);
}
END_TEST

START_TEST(test_depformer_options) {
    lm_backend *b = open_b(2);
    const lm_config *c = &b->cfg;
    int tok[LM_MAX_STREAMS];
    uint32_t s = 5;
    rand_tokens(c, tok, &s);
    ms_error e = {0};
    float a_full[8 * 32], a_part[8 * 32], a_forced[8 * 32];
    lm_step_slot f = greedy_req(0, tok, c), p = greedy_req(1, tok, c);
    f.audio_logits = a_full;
    p.audio_logits = a_part;
    p.dep_steps = 3;
    lm_step_slot both[2] = {f, p};
    ck_assert_int_eq(lm_backend_step(b, both, 2, &e), MS_OK);
    for (int k = 0; k < 3; k++) ck_assert_int_eq(both[1].out_audio[k], both[0].out_audio[k]);
    for (int k = 3; k < c->dep_q; k++) ck_assert_int_eq(both[1].out_audio[k], -1);
    ck_assert(rel(a_part, a_full, 3 * c->card) < SAME_TOL);
    /* forced targets: sub-step 0 sees target text, so its logits change;
     * providing the sampled values themselves changes nothing */
    int target[1 + LM_MAX_DEP_Q] = {0};
    uint8_t prov[1 + LM_MAX_DEP_Q] = {0};
    ck_assert_int_eq(lm_backend_reset_slot(b, 0, &e), MS_OK);
    ck_assert_int_eq(lm_backend_reset_slot(b, 1, &e), MS_OK);
    target[0] = (both[0].out_text + 1) % c->text_card;
    prov[0] = 1;
    lm_step_slot g = greedy_req(0, tok, c);
    g.target = target;
    g.provided = prov;
    g.audio_logits = a_forced;
    ck_assert_int_eq(lm_backend_step(b, &g, 1, &e), MS_OK);
    ck_assert_int_eq(g.out_text, both[0].out_text);
    ck_assert(rel(a_forced, a_full, c->card) > 1e-3);
    for (int k = 0; k <= c->dep_q; k++) {
        target[k] = k == 0 ? both[0].out_text : both[0].out_audio[k - 1];
        prov[k] = 1;
    }
    lm_step_slot h = greedy_req(1, tok, c);
    h.target = target;
    h.provided = prov;
    h.audio_logits = a_forced;
    ck_assert_int_eq(lm_backend_step(b, &h, 1, &e), MS_OK);
    ck_assert(rel(a_forced, a_full, c->dep_q * c->card) < SAME_TOL);
    lm_backend_close(b);
}
END_TEST

START_TEST(test_dispatcher) {
    lm_backend *b = open_b(2);
    const lm_config *c = &b->cfg;
    int tok[LM_MAX_STREAMS];
    uint32_t s = 1;
    rand_tokens(c, tok, &s);
    ms_error e = {0};
    lm_step_slot r[2] = {greedy_req(0, tok, c), greedy_req(0, tok, c)};
    ck_assert_int_eq(lm_backend_step(b, r, 2, &e), MS_ERR_ARG);   /* slot twice */
    r[1].slot = 2;
    ck_assert_int_eq(lm_backend_step(b, r, 2, &e), MS_ERR_RANGE);
    r[1].slot = 1;
    r[1].tokens[3] = c->card + 1;
    ck_assert_int_eq(lm_backend_step(b, r, 2, &e), MS_ERR_RANGE);
    ck_assert(strstr(e.msg, "stream 3"));
    r[1].tokens[3] = -2;   /* ungenerated is never fed */
    ck_assert_int_eq(lm_backend_step(b, r, 2, &e), MS_ERR_RANGE);
    r[1].tokens[3] = 0;
    r[1].tokens[0] = c->text_card + 1;
    ck_assert_int_eq(lm_backend_step(b, r, 2, &e), MS_ERR_RANGE);
    r[1].tokens[0] = -1;   /* embeds to zero: allowed */
    r[1].dep_steps = c->dep_q + 1;
    ck_assert_int_eq(lm_backend_step(b, r, 2, &e), MS_ERR_RANGE);
    r[1].dep_steps = -1;
    r[1].samp.text_temp = NAN;
    ck_assert_int_eq(lm_backend_step(b, r, 2, &e), MS_ERR_RANGE);
    r[1].samp.text_temp = 0;
    ck_assert_int_eq(lm_backend_step(b, r, 2, &e), MS_OK);
    ck_assert_int_eq(lm_backend_reset_slot(b, -1, &e), MS_ERR_RANGE);
    /* Mimi through the backend table: the CPU entries run engine/mimi.h on
     * the streams' model; one batch may not mix models */
    mimi_model *mm = NULL, *mm2 = NULL;
    ck_assert_int_eq(mimi_model_load(&mm, "tests/fixtures/mimi/tiny.safetensors", "tests/fixtures/mimi/tiny.json", &e),
                     MS_OK);
    ck_assert_int_eq(mimi_model_load(&mm2, "tests/fixtures/mimi/tiny.safetensors", "tests/fixtures/mimi/tiny.json", &e),
                     MS_OK);
    int F = mimi_frame_samples(mm), ncb = mimi_num_codebooks(mm);
    ck_assert_int_le(ncb, 32);
    mimi_stream *ms[2] = {mimi_stream_create(mm, &e), mimi_stream_create(mm, &e)};
    mimi_stream *direct = mimi_stream_create(mm, &e), *other = mimi_stream_create(mm2, &e);
    float *pcm = calloc((size_t)(2 * F), sizeof(float)), *back = calloc((size_t)(2 * F), sizeof(float));
    float *back_direct = calloc((size_t)F, sizeof(float));
    int codes[2 * 32], codes_direct[32];
    for (int i = 0; i < 2 * F; i++) pcm[i] = 0.3f * sinf(0.01f * (float)i * (1 + i / F));
    ck_assert_int_eq(lm_backend_mimi_encode(b, ms, 2, pcm, codes, &e), MS_OK);
    ck_assert_int_eq(mimi_encode_batch(mm, &direct, 1, pcm + F, codes_direct, &e), MS_OK);
    ck_assert_mem_eq(codes + ncb, codes_direct, sizeof(int) * (size_t)ncb);
    ck_assert_int_eq(lm_backend_mimi_decode(b, ms, 2, codes, back, &e), MS_OK);
    ck_assert_int_eq(mimi_decode_batch(mm, &direct, 1, codes + ncb, back_direct, &e), MS_OK);
    ck_assert_mem_eq(back + F, back_direct, sizeof(float) * (size_t)F);
    mimi_stream *mixed[2] = {ms[0], other};
    ck_assert_int_eq(lm_backend_mimi_encode(b, mixed, 2, pcm, codes, &e), MS_ERR_ARG);
    ck_assert_int_eq(lm_backend_mimi_encode(b, NULL, 0, pcm, codes, &e), MS_OK);
    free(pcm); free(back); free(back_direct);
    mimi_stream_free(ms[0]); mimi_stream_free(ms[1]); mimi_stream_free(direct); mimi_stream_free(other);
    mimi_model_free(mm); mimi_model_free(mm2);
    lm_backend_stats st;
    ck_assert_int_eq(lm_backend_stats_get(b, &st), MS_OK);
    ck_assert_uint_eq(st.steps, 2);
    ck_assert_uint_gt(st.kv_bytes, 0);
    /* user codes out of range are refused by the bookkeeping */
    lm_samp samp;
    lm_samp_defaults(&samp, 0);
    lmgen_slot g;
    lmgen_init(&g, c, 0, &samp);
    lmgen_slot *gp = &g;
    int user[LM_MAX_NQ] = {0}, out[1 + LM_MAX_DEP_Q], has;
    user[2] = c->card;
    ck_assert_int_eq(lmgen_step_batch(b, &gp, 1, user, out, &has, NULL, NULL, &e), MS_ERR_RANGE);
    ck_assert_int_eq(g.offset, 0);
    lm_backend_close(b);
    lm_backend_opts bo = {.max_slots = 0};
    ck_assert_ptr_null(lm_backend_open(&lm_cpu_backend, FIX, &bo, &e));
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("lmgen");
    TCase *tc = tcase_new("core");
    tcase_add_test(tc, test_batch_independent);
    tcase_add_test(tc, test_prefill);
    tcase_add_test(tc, test_snapshot);
    tcase_add_test(tc, test_slot_snapshot);
    tcase_add_test(tc, test_depformer_options);
    tcase_add_test(tc, test_dispatcher);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN
