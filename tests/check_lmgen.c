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
    /* restored in layer chunks (as an engine job does): the position moves
     * with the last layer only */
    for (int l = 0; l < c->num_layers; l++) {
        ck_assert_msg(lm_backend_kv_restore_layers(b, 2, snap, l, l + 1, &e) == MS_OK, "%s", e.msg);
        ck_assert_int_eq((int)lm_backend_pos(b, 2), l + 1 < c->num_layers ? 3 : 6);
    }
    ck_assert_int_eq(lm_backend_kv_restore_layers(b, 2, snap, 1, 1, &e), MS_ERR_RANGE);
    ck_assert_int_eq(lm_backend_kv_restore_layers(b, 2, snap, 0, c->num_layers + 1, &e), MS_ERR_RANGE);
    lm_snap_info info;
    ck_assert_int_eq(lm_backend_kv_snap_info(b, snap, &info), MS_OK);
    ck_assert_int_eq(info.positions, 6);
    ck_assert_uint_eq(info.bytes, 2 * (size_t)c->num_layers * 6 * c->dim * sizeof(float));
    ck_assert_int_eq(info.where, LM_MEM_HOST);
    lm_backend_stats bst;
    ck_assert_int_eq(lm_backend_stats_get(b, &bst), MS_OK);
    ck_assert_uint_eq(bst.snap_bytes, info.bytes);
    ck_assert_uint_ge(bst.mem_used, bst.weight_bytes + bst.kv_bytes + bst.snap_bytes);
    ck_assert_uint_gt(bst.mem_free, 0);
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
    /* the ring has wrapped: rows 0..1 hold positions 8..9, so no prefix of
     * the slot can be snapshotted any more (not even 4 positions) */
    ck_assert_int_eq(lm_backend_kv_snapshot(b, 1, 10, &snap, &e), MS_ERR_STATE);
    ck_assert_int_eq(lm_backend_kv_snapshot(b, 1, 4, &snap, &e), MS_ERR_STATE);
    ck_assert_msg(strstr(e.msg, "overwritten") != NULL, "%s", e.msg);
    /* exactly a full ring still can */
    ck_assert_int_eq(lm_backend_reset_slot(b, 1, &e), MS_OK);
    ck_assert_int_eq(lm_backend_prefill(b, 1, 0, c->context, many, NULL, &e), MS_OK);
    ck_assert_msg(lm_backend_kv_snapshot(b, 1, c->context, &snap, &e) == MS_OK, "%s", e.msg);
    lm_backend_kv_snap_free(b, snap);
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
    /* a backend opened without a codec has no Mimi or frame step */
    int sl0 = 0, cd[8];
    float pcm1[MS_FRAME_SAMPLES] = {0};
    ck_assert_int_eq(lm_backend_mimi_encode(b, &sl0, 1, pcm1, cd, &e), MS_ERR_STATE);
    lm_frame fr;
    ck_assert_int_eq(lm_frame_alloc(b, &fr, 1, &e), MS_ERR_STATE);
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


/* ---- the frame step: codec + LM behind the backend ---- */

static const char *demo_dir(char *buf, size_t n, const char *rel_path) {
    const char *bd = getenv("BUILD");
    snprintf(buf, n, "%s/demo/%s", bd && bd[0] ? bd : "build", rel_path);
    return buf;
}

static lm_backend *open_codec(int slots, int pipeline, const char *mimi, const char *mimi_cfg, ms_error *e) {
    char lm[512];
    lm_backend_opts bo = {.max_slots = slots, .threads = 1, .variant = LM_VARIANT_AUTO, .mimi = mimi,
                          .mimi_config = mimi_cfg, .pipeline = pipeline};
    return lm_backend_open(&lm_cpu_backend, demo_dir(lm, sizeof lm, "kyutai/lm"), &bo, e);
}

#define FS_SLOTS 3
#define FS_FRAMES 12

/* The frame step, synchronous and pipelined (submit t, then wait for
 * t - 2: three frames in flight, a slot in consecutive frames), against the same work
 * done by hand: the codec called directly on streams of its own (with
 * Kyutai's first-frame rule: the encoder reset after frame 0) and the LM
 * through lmgen_step_batch on a backend without a codec. Every token and
 * every decoded sample must be equal: the same code runs on the same batch
 * shapes, in the same order. */
START_TEST(test_frame_step) {
    ms_error e = {0};
    char mimi[512], mcfg[512];
    demo_dir(mimi, sizeof mimi, "mimi.safetensors");
    demo_dir(mcfg, sizeof mcfg, "mimi.json");
    lm_backend *bs = open_codec(FS_SLOTS, 0, mimi, mcfg, &e);
    ck_assert_msg(bs != NULL, "%s (the demo model: make demo-model)", e.msg);
    lm_backend *bp = open_codec(FS_SLOTS, 1, mimi, mcfg, &e);
    ck_assert_msg(bp != NULL, "%s", e.msg);
    lm_backend *br = open_codec(FS_SLOTS, 0, NULL, NULL, &e);
    ck_assert_msg(br != NULL, "%s", e.msg);
    lm_backend_stats st;
    ck_assert_int_eq(lm_backend_stats_get(bp, &st), MS_OK);
    ck_assert_int_eq(st.pipeline, 1);
    ck_assert_uint_gt(st.codec_bytes, 0);
    ck_assert_int_eq(lm_backend_stats_get(bs, &st), MS_OK);
    ck_assert_int_eq(st.pipeline, 0);
    const lm_config *c = &bs->cfg;
    const int ncb = bs->ncb, nu = bs->n_user, nout = 1 + c->dep_q, F = MS_FRAME_SAMPLES;
    ck_assert_int_eq(ncb, 8);
    mimi_model *mm = NULL;
    ck_assert_int_eq(mimi_model_load(&mm, mimi, mcfg, &e), MS_OK);
    mimi_stream *ms[FS_SLOTS];
    for (int i = 0; i < FS_SLOTS; i++) ms[i] = mimi_stream_create(mm, &e);

    lm_samp samp;
    lm_samp_defaults(&samp, 11);   /* sampled, not greedy: the seeds make it deterministic */
    lmgen_slot gs[FS_SLOTS], gp[FS_SLOTS], gr[FS_SLOTS];
    lmgen_slot *ps[FS_SLOTS], *pp[LM_MAX_INFLIGHT][FS_SLOTS], *pr[FS_SLOTS];
    /* slots 2, 0 (and 1 from frame 3 on): order and membership change */
    int slots_all[FS_SLOTS] = {2, 0, 1};
    for (int i = 0; i < FS_SLOTS; i++) {
        samp.seed = 100 + (uint64_t)i;
        samp.audio_seed = 200 + (uint64_t)i;
        lmgen_init(&gs[i], c, i, &samp);
        lmgen_init(&gp[i], c, i, &samp);
        lmgen_init(&gr[i], c, i, &samp);
        ck_assert_int_eq(lm_backend_reset_slot(bs, i, &e), MS_OK);
        ck_assert_int_eq(lm_backend_reset_slot(bp, i, &e), MS_OK);
        ck_assert_int_eq(lm_backend_reset_slot(br, i, &e), MS_OK);
    }
    lm_frame fs, fp[LM_MAX_INFLIGHT];
    ck_assert_int_eq(lm_frame_alloc(bs, &fs, FS_SLOTS, &e), MS_OK);
    for (int k = 0; k < LM_MAX_INFLIGHT; k++) ck_assert_int_eq(lm_frame_alloc(bp, &fp[k], FS_SLOTS, &e), MS_OK);
    float *pcm = calloc((size_t)FS_FRAMES * FS_SLOTS * F, sizeof(float));
    float *ref_pcm = calloc((size_t)FS_SLOTS * F, sizeof(float));
    int *ref_codes = calloc((size_t)FS_SLOTS * ncb, sizeof(int)), *ref_user = calloc((size_t)FS_SLOTS * nu, sizeof(int));
    static int ref_out_all[FS_FRAMES][FS_SLOTS * (1 + LM_MAX_DEP_Q)], ref_has_all[FS_FRAMES][FS_SLOTS];
    float *ref_pcm_all = calloc((size_t)FS_FRAMES * FS_SLOTS * F, sizeof(float));
    int ns_of[FS_FRAMES];
    int dec_rows = 0;
    uint32_t rs = 9;
    for (int t = 0; t < FS_FRAMES; t++) {
        int n = t < 3 ? 2 : 3;
        ns_of[t] = n;
        for (int j = 0; j < n; j++)
            for (int k = 0; k < F; k++)
                pcm[((size_t)t * FS_SLOTS + j) * F + k] =
                    0.4f * sinf(0.003f * (float)(k + t * F) * (float)(1 + slots_all[j])) +
                    0.05f * ((float)(lcg(&rs) >> 8) / 16777216.0f - 0.5f);
    }
    for (int t = 0; t < FS_FRAMES; t++) {
        int n = ns_of[t];
        const float *in = pcm + (size_t)t * FS_SLOTS * F;
        int *ref_out = ref_out_all[t], *ref_has = ref_has_all[t];
        /* by hand */
        mimi_stream *tab[FS_SLOTS];
        for (int j = 0; j < n; j++) { tab[j] = ms[slots_all[j]]; pr[j] = &gr[slots_all[j]]; ps[j] = &gs[slots_all[j]]; }
        ck_assert_int_eq(mimi_encode_batch(mm, tab, n, in, ref_codes, &e), MS_OK);
        for (int j = 0; j < n; j++) {
            memcpy(ref_user + j * nu, ref_codes + j * ncb, sizeof(int) * (size_t)nu);
            if (t == 0 || (t == 3 && j == 2)) mimi_stream_reset_encoder(ms[slots_all[j]]);   /* first frame */
        }
        ck_assert_int_eq(lmgen_step_batch(br, pr, n, ref_user, ref_out, ref_has, NULL, NULL, &e), MS_OK);
        int nd = 0, dslots[FS_SLOTS], dcodes[FS_SLOTS * 8];
        mimi_stream *dtab[FS_SLOTS];
        for (int j = 0; j < n; j++)
            if (ref_has[j]) {
                memcpy(dcodes + nd * ncb, ref_out + j * nout + 1, sizeof(int) * (size_t)ncb);
                dslots[nd] = j;
                dtab[nd++] = ms[slots_all[j]];
            }
        float dpcm[FS_SLOTS * MS_FRAME_SAMPLES];
        if (nd) ck_assert_int_eq(mimi_decode_batch(mm, dtab, nd, dcodes, dpcm, &e), MS_OK);
        for (int d = 0; d < nd; d++) memcpy(ref_pcm + (size_t)dslots[d] * F, dpcm + (size_t)d * F, sizeof(float) * F);
        /* synchronous frame step */
        fs.n = n; fs.slots = slots_all; fs.gens = ps; fs.pcm_in = in;
        ck_assert_msg(lm_frame_submit(bs, &fs, &e) == MS_OK, "%s", e.msg);
        ck_assert_int_eq(lm_frame_wait(bs, &fs, &e), MS_OK);
        for (int j = 0; j < n; j++) {
            ck_assert_int_eq(fs.has_out[j], ref_has[j]);
            ck_assert_mem_eq(fs.codes + j * nu, ref_user + j * nu, sizeof(int) * (size_t)nu);
            if (!ref_has[j]) continue;
            ck_assert_mem_eq(fs.out + j * nout, ref_out + j * nout, sizeof(int) * (size_t)nout);
            ck_assert_mem_eq(fs.pcm_out + (size_t)j * F, ref_pcm + (size_t)j * F, sizeof(float) * F);
            dec_rows++;
        }
        memcpy(ref_pcm_all + (size_t)t * FS_SLOTS * F, ref_pcm, sizeof(float) * FS_SLOTS * F);
        /* pipelined: submit t, then wait for t - (LM_MAX_INFLIGHT - 1): every
         * buffer in flight at once, as the scheduler keeps them under load */
        const int K = LM_MAX_INFLIGHT;
        lm_frame *f = &fp[t % K];
        for (int j = 0; j < n; j++) pp[t % K][j] = &gp[slots_all[j]];
        f->n = n; f->slots = slots_all; f->gens = pp[t % K]; f->pcm_in = in;
        ck_assert_msg(lm_frame_submit(bp, f, &e) == MS_OK, "%s", e.msg);
        if (t == K - 1) {   /* one frame more than LM_MAX_INFLIGHT is refused */
            lm_frame extra = fs;
            ck_assert_int_eq(lm_frame_submit(bp, &extra, &e), MS_ERR_STATE);
        }
        for (int u = t - (K - 1); u <= t; u++) {   /* the oldest now; all of them after the last submit */
            if (u < 0 || (u > t - (K - 1) && t < FS_FRAMES - 1)) continue;
            lm_frame *g = &fp[u % K];
            ck_assert_int_eq(lm_frame_wait(bp, g, &e), MS_OK);
            for (int j = 0; j < ns_of[u]; j++) {
                ck_assert_int_eq(g->has_out[j], ref_has_all[u][j]);
                if (!ref_has_all[u][j]) continue;
                ck_assert_mem_eq(g->out + j * nout, ref_out_all[u] + j * nout, sizeof(int) * (size_t)nout);
                ck_assert_mem_eq(g->pcm_out + (size_t)j * F, ref_pcm_all + ((size_t)u * FS_SLOTS + j) * F,
                                 sizeof(float) * F);
            }
        }
    }
    ck_assert_int_gt(dec_rows, FS_FRAMES);   /* audio did come out */
    ck_assert_int_eq(lm_frame_wait(bp, &fp[0], &e), MS_ERR_STATE);   /* nothing in flight */
    /* the dispatcher's checks */
    int dup[2] = {1, 1};
    lmgen_slot *dg[2] = {&gs[1], &gs[1]};
    fs.n = 2; fs.slots = dup; fs.gens = dg;
    ck_assert_int_eq(lm_frame_submit(bs, &fs, &e), MS_ERR_ARG);
    int wrong[1] = {0};
    lmgen_slot *wg[1] = {&gs[1]};
    fs.n = 1; fs.slots = wrong; fs.gens = wg;
    ck_assert_int_eq(lm_frame_submit(bs, &fs, &e), MS_ERR_ARG);
    int oor[1] = {FS_SLOTS};
    fs.slots = oor;
    ck_assert_int_eq(lm_frame_submit(bs, &fs, &e), MS_ERR_ARG);
    ck_assert_int_eq(lm_backend_mimi_encode(bs, dup, 2, pcm, ref_codes, &e), MS_ERR_ARG);
    lm_frame_free(&fs);
    for (int k = 0; k < LM_MAX_INFLIGHT; k++) lm_frame_free(&fp[k]);
    free(pcm); free(ref_pcm); free(ref_pcm_all); free(ref_codes); free(ref_user);
    for (int i = 0; i < FS_SLOTS; i++) mimi_stream_free(ms[i]);
    mimi_model_free(mm);
    lm_backend_close(bs); lm_backend_close(bp); lm_backend_close(br);
}
END_TEST

/* A codec whose frame is not 1920 samples at 24 kHz is refused at open,
 * with a message (its frames would not fit the daemon's rings). */
START_TEST(test_frame_geometry) {
    ms_error e = {0};
    lm_backend *b = open_codec(1, 0, "tests/fixtures/mimi/sr16k.safetensors", "tests/fixtures/mimi/sr16k.json", &e);
    ck_assert_ptr_null(b);
    ck_assert_int_eq(e.code, MS_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(e.msg, "1920") && strstr(e.msg, "24000"), "%s", e.msg);
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
    tcase_add_test(tc, test_frame_step);
    tcase_add_test(tc, test_frame_geometry);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN
