/* check_lm_q8.c - the 8-bit schemes (issue 26) on the CPU backend: the
 * quantizers' exact rules, the int8 kernels against scalar references, and
 * greedy parity with the official moshi package run on fake-quantized
 * weights and K/V (tests/fixtures/gen_lm_q8.py, MANIFEST.json there).
 *
 * Parity: every greedy token and LMGen frame equal (the criterion);
 * logits within a tolerance (max|logit - ref| / max|ref| per head and step):
 *  - int8 weights, float32 K/V: LOGIT_TOL_W = 1e-4, as the bf16 fixtures
 *    (check_lm.c). The int8 values are the reference's exactly (same rule on
 *    the same stored values); the reference runs on q * s in float32, this
 *    backend sums q * x and multiplies by s after the row: the same products
 *    in another rounding order, measured 1.3e-6.
 *  - int8 K/V: LOGIT_TOL_KV = 1e-2. Keys and values are computed here and
 *    there with float32 rounding differences (~1e-6 relative); an element
 *    whose x / s lies that close to a rounding tie rounds to the other
 *    integer on one side (one quantum: 1/127 of its head's largest element),
 *    and the flip propagates: measured worst 4.2e-3 (w8kv8_f32), 7.5e-4
 *    (kv8_f32). Frames stay equal; what a real bug does (per-tensor scale,
 *    keys quantized before RoPE, a step reading its own key unquantized:
 *    test_schemes_change_logits bounds the last from below) moves greedy
 *    tokens within 24 steps. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "check_main.h"
#include "json.h"
#include "kern_cpu.h"
#include "lm.h"
#include "lmgen.h"
#include "samp.h"
#include "st.h"
#include "check_lm_util.h"

#define Q8_FIX_DIR "tests/fixtures/lm_q8"

/* a fixed-seed xorshift64* stream for test data */
static uint64_t rng_next(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1Dull;
}
#define LOGIT_TOL_W 1e-4
#define LOGIT_TOL_KV 1e-2

typedef struct {
    const char *name;
    lm_weights w;
    lm_kv kv;
} q8_case;

static const q8_case cases[] = {
    {"w8_bf16", LM_WEIGHTS_INT8, LM_KV_NATIVE},
    {"kv8_f32", LM_WEIGHTS_STORED, LM_KV_INT8},
    {"w8kv8_f32", LM_WEIGHTS_INT8, LM_KV_INT8},
    {"q8_kv8", LM_WEIGHTS_STORED, LM_KV_INT8},   /* Kyutai's q8 format: int8 as stored */
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

START_TEST(test_manifest) {
    char *txt;
    js_value *root = manifest_open(Q8_FIX_DIR "/MANIFEST.json", &txt);
    const js_value *cs = js_get(root, "cases");
    ck_assert_int_eq((int)cs->len, NCASES);
    for (int i = 0; i < NCASES; i++) {
        const js_value *c = js_get(cs, cases[i].name);
        ck_assert_msg(c != NULL, "case %s missing from the manifest", cases[i].name);
        ck_assert_str_eq(js_get(c, "kv")->str, cases[i].kv == LM_KV_INT8 ? "int8" : "f32");
        ck_assert_int_eq(check_manifest_files(Q8_FIX_DIR, cases[i].name, js_get(c, "files")), 5);
    }
    js_free(root);
    free(txt);
}
END_TEST

static lm_backend *open_case(const char *dir, lm_weights w, lm_kv kv, int slots) {
    ms_error e = {0};
    lm_backend_opts bo = {.max_slots = slots, .threads = 2, .variant = LM_VARIANT_AUTO, .weights = w, .kv = kv};
    lm_backend *b = lm_backend_open(&lm_cpu_backend, dir, &bo, &e);
    ck_assert_msg(b != NULL, "%s: %s", dir, e.msg);
    return b;
}

/* one case: every frame equal to the official trace, logits within LOGIT_TOL */
static void parity_case(const q8_case *qc) {
    char dir[256], path[512];
    snprintf(dir, sizeof dir, Q8_FIX_DIR "/%s", qc->name);
    ms_error e = {0};
    const double LOGIT_TOL = qc->kv == LM_KV_INT8 ? LOGIT_TOL_KV : LOGIT_TOL_W;
    lm_backend *b = open_case(dir, qc->w, qc->kv, 1);
    lm_backend_stats bs;
    lm_backend_stats_get(b, &bs);
    ck_assert_str_eq(bs.kv_scheme, qc->kv == LM_KV_INT8 ? "int8" : "f32");
    if (qc->w == LM_WEIGHTS_INT8 || !strncmp(qc->name, "q8", 2)) ck_assert_str_eq(bs.weights_scheme, "int8");
    const lm_config *c = &b->cfg;
    snprintf(path, sizeof path, "%s/logits.safetensors", dir);
    st_file *lf = st_open(path, &e);
    ck_assert_msg(lf != NULL, "%s", e.msg);
    const st_tensor *tl = st_find(lf, "text_logits"), *al = st_find(lf, "audio_logits"), *tk = st_find(lf, "tokens");
    ck_assert(tl && al && tk);
    int T = (int)tl->shape[0];
    snprintf(path, sizeof path, "%s/codes.txt", dir);
    FILE *cf = fopen(path, "r");
    snprintf(path, sizeof path, "%s/trace.jsonl", dir);
    FILE *tf = fopen(path, "r");
    ck_assert(cf && tf);
    lm_samp samp;
    lm_samp_defaults(&samp, 0);
    lm_samp_greedy(&samp);
    lmgen_slot g;
    lmgen_init(&g, c, 0, &samp);
    float *rt = malloc(sizeof(float) * c->text_card), *ra = malloc(sizeof(float) * c->dep_q * c->card);
    float *mt = malloc(sizeof(float) * c->text_card), *ma = malloc(sizeof(float) * c->dep_q * c->card);
    double worst = 0;
    for (int t = 0; t < T; t++) {
        int user[LM_MAX_NQ];
        for (int k = 0; k < c->n_user; k++) ck_assert_int_eq(fscanf(cf, "%d", &user[k]), 1);
        lm_step_slot s;
        ck_assert_int_eq(lmgen_prepare(&g, user, c->card, &s, &e), MS_OK);
        s.text_logits = mt;
        s.audio_logits = ma;
        ck_assert_msg(lm_backend_step(b, &s, 1, &e) == MS_OK, "%s", e.msg);
        st_to_f32(tl, (uint64_t)t * c->text_card, (size_t)c->text_card, rt);
        st_to_f32(al, (uint64_t)t * c->dep_q * c->card, (size_t)c->dep_q * c->card, ra);
        double et = rel_err(mt, rt, c->text_card);
        ck_assert_msg(et <= LOGIT_TOL, "%s step %d: text logits rel err %.3g > %.0e", qc->name, t, et, LOGIT_TOL);
        if (et > worst) worst = et;
        for (int k = 0; k < c->dep_q; k++) {
            double ea = rel_err(ma + k * c->card, ra + k * c->card, c->card);
            ck_assert_msg(ea <= LOGIT_TOL, "%s step %d: audio %d logits rel err %.3g", qc->name, t, k, ea);
            if (ea > worst) worst = ea;
        }
        const int32_t *tok = (const int32_t *)tk->data + (size_t)t * (1 + c->dep_q);
        ck_assert_msg(s.out_text == tok[0], "%s step %d: text token %d, official %d", qc->name, t, s.out_text, tok[0]);
        for (int k = 0; k < c->dep_q; k++)
            ck_assert_msg(s.out_audio[k] == tok[1 + k], "%s step %d: audio %d token %d, official %d", qc->name, t, k,
                          s.out_audio[k], tok[1 + k]);
        int out[1 + LM_MAX_DEP_Q];
        int has = lmgen_commit(&g, &s, out);
        char line[1024];
        ck_assert(fgets(line, sizeof line, tf) != NULL);
        js_value *j = js_parse(line, strlen(line), &e);
        ck_assert_msg(j != NULL, "%s", e.msg);
        const js_value *o = js_get(j, "out");
        ck_assert_msg(has == (o->type != JS_NULL), "%s step %d: output presence differs", qc->name, t);
        for (int k = 0; has && k <= c->dep_q; k++)
            ck_assert_msg(out[k] == js_at(o, (size_t)k)->i, "%s step %d: out[%d] = %d, official %lld", qc->name, t, k,
                          out[k], (long long)js_at(o, (size_t)k)->i);
        js_free(j);
    }
    fprintf(stderr, "parity %s (weights %s, kv %s): %d steps, worst logit rel err %.2e\n", qc->name,
            bs.weights_scheme, bs.kv_scheme, T, worst);
    free(rt); free(ra); free(mt); free(ma);
    fclose(cf);
    fclose(tf);
    st_close(lf);
    lm_backend_close(b);
}

START_TEST(test_parity) { parity_case(&cases[_i]); }
END_TEST

/* The fake-quantized reference is not the unquantized model: the 8-bit
 * runs must differ from the float32 run of the same checkpoint (else the
 * option did nothing). */
START_TEST(test_schemes_change_logits) {
    const char *dir = Q8_FIX_DIR "/w8kv8_f32";
    lm_weights ws[] = {LM_WEIGHTS_STORED, LM_WEIGHTS_INT8, LM_WEIGHTS_STORED, LM_WEIGHTS_BF16};
    lm_kv ks[] = {LM_KV_NATIVE, LM_KV_NATIVE, LM_KV_INT8, LM_KV_NATIVE};
    float *lg[4];
    for (int i = 0; i < 4; i++) {
        lm_backend *b = open_case(dir, ws[i], ks[i], 1);
        const lm_config *c = &b->cfg;
        lg[i] = malloc(sizeof(float) * c->text_card);
        lm_samp samp;
        lm_samp_defaults(&samp, 0);
        lm_samp_greedy(&samp);
        ms_error e = {0};
        for (int t = 0; t < 3; t++) {   /* step 3 reads two older positions */
            lm_step_slot s = {.slot = 0, .samp = samp, .step = (uint64_t)t, .dep_steps = 0, .text_logits = lg[i]};
            for (int q = 0; q < c->n_streams; q++) s.tokens[q] = (t * 7 + q * 3) % c->card;
            ck_assert_msg(lm_backend_step(b, &s, 1, &e) == MS_OK, "%s", e.msg);
        }
        lm_backend_close(b);
    }
    for (int i = 1; i < 4; i++) {
        double d = rel_err(lg[i], lg[0], 56);
        ck_assert_msg(d > 1e-5, "scheme %d: logits equal to float32 (%.2e): the option had no effect", i, d);
        ck_assert_msg(d < 0.1, "scheme %d: logits far from float32 (%.2e)", i, d);
    }
    for (int i = 0; i < 4; i++) free(lg[i]);
}
END_TEST

/* the quantizers' rule: division (not reciprocal), half to even, clamp,
 * zero rows, float32 absmax of bf16 values */
START_TEST(test_quantize_rule) {
    /* m = 127: s = 1 exactly; 2.5 -> 2, 3.5 -> 4, -2.5 -> -2 (half to even) */
    float w[8] = {127.0f, 2.5f, 3.5f, -2.5f, 0.49f, -127.0f, 1.5f, 0.5f};
    int8_t q[8];
    float s;
    kern_q8_quantize_rows(q, &s, w, ST_F32, 1, 8);
    ck_assert(s == 1.0f);
    int8_t want[8] = {127, 2, 4, -2, 0, -127, 2, 0};
    for (int i = 0; i < 8; i++) ck_assert_msg(q[i] == want[i], "q[%d] = %d, want %d", i, q[i], want[i]);
    /* zero row: scale 1, all zero */
    float z[4] = {0, 0, -0.0f, 0};
    kern_q8_quantize_rows(q, &s, z, ST_F32, 1, 4);
    ck_assert(s == 1.0f && q[0] == 0 && q[3] == 0);
    /* division against reciprocal: search a row where they differ and
     * check that the division's result is taken */
    uint64_t st = 12345;
    int found = 0;
    for (int trial = 0; trial < 20000 && !found; trial++) {
        float row[2];
        row[0] = 1.0f + (float)(rng_next(&st) % 1000000) / 1000.0f;   /* the max */
        float sc = row[0] / 127.0f;
        float x = sc * ((float)(rng_next(&st) % 254) - 126.5f);      /* near a tie */
        x = nextafterf(x, (rng_next(&st) & 1) ? INFINITY : -INFINITY);
        row[1] = x;
        float by_div = rintf(x / sc), by_rec = rintf(x * (1.0f / sc));
        if (by_div == by_rec) continue;
        kern_q8_quantize_rows(q, &s, row, ST_F32, 1, 2);
        ck_assert(s == sc);
        ck_assert_msg(q[1] == (int8_t)by_div, "x %.9g s %.9g: q %d, the division gives %g", x, sc, q[1], by_div);
        found = 1;
    }
    ck_assert_msg(found, "no row told division and reciprocal apart");
    /* bf16 row: absmax over the bf16 values widened */
    uint16_t b[3] = {st_f32_to_bf16(-3.0f), st_f32_to_bf16(1.5f), st_f32_to_bf16(0.75f)};
    kern_q8_quantize_rows(q, &s, b, ST_BF16, 1, 3);
    ck_assert(s == 3.0f / 127.0f);
    ck_assert_int_eq(q[0], -127);
    ck_assert_int_eq(q[1], (int8_t)rintf(1.5f / s));
    /* per head: two heads with their own scales */
    float kv[4] = {1.0f, -0.5f, 0.0f, 0.0f};
    float hs[2];
    kern_q8_quantize_heads(q, hs, kv, 2, 2);
    ck_assert(hs[0] == 1.0f / 127.0f && hs[1] == 1.0f);
    ck_assert_int_eq(q[0], 127);
    ck_assert_int_eq(q[1], (int8_t)rintf(-0.5f / hs[0]));
    ck_assert_int_eq(q[2], 0);
}
END_TEST

/* int8 matmul against a double-precision reference on q * s, several
 * shapes (tails of 8 and 32, 1..9 input rows) */
START_TEST(test_matmul_i8) {
    const int shapes[][3] = {{1, 1, 1}, {3, 37, 8}, {1, 64, 96}, {5, 33, 101}, {9, 48, 256}, {4, 70, 1000}, {2, 17, 31}};
    uint64_t st = 777;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int n = shapes[si][0], R = shapes[si][1], C = shapes[si][2];
        float *w = malloc(sizeof(float) * R * C), *x = malloc(sizeof(float) * n * C), *s = malloc(sizeof(float) * R);
        float *y = malloc(sizeof(float) * n * R);
        int8_t *q = malloc((size_t)R * C);
        for (int i = 0; i < R * C; i++) w[i] = (float)((int)(rng_next(&st) % 2001) - 1000) / 300.0f;
        for (int i = 0; i < n * C; i++) x[i] = (float)((int)(rng_next(&st) % 2001) - 1000) / 500.0f;
        kern_q8_quantize_rows(q, s, w, ST_F32, R, C);
        kern_mat m = {.w = q, .dtype = ST_I8, .rows = R, .cols = C, .scale = s};
        kern_pool *pool = kern_pool_create(2);
        kern_matmul(y, x, &m, n, pool);
        kern_pool_free(pool);
        for (int j = 0; j < n; j++)
            for (int r = 0; r < R; r++) {
                double ref = 0, mag = 0;
                for (int c = 0; c < C; c++) {
                    ref += (double)q[(size_t)r * C + c] * s[r] * x[(size_t)j * C + c];
                    mag += fabs((double)q[(size_t)r * C + c] * s[r] * x[(size_t)j * C + c]);
                }
                double got = y[(size_t)j * R + r];
                /* float32 sums of C products: error <= ~C * 2^-24 * sum|terms| */
                ck_assert_msg(fabs(got - ref) <= 1e-6 * C * mag + 1e-30, "shape %d x %d x %d row %d,%d: %g vs %g", n,
                              R, C, j, r, got, ref);
            }
        free(w); free(x); free(s); free(y); free(q);
    }
}
END_TEST

/* int8 ring attention against float attention on the dequantized ring,
 * with and without a wrap, split over a pool */
START_TEST(test_attend_q8) {
    const int heads = 4, hd = 24, D = heads * hd, ring = 7;
    uint64_t st = 99;
    float *kf = malloc(sizeof(float) * ring * D), *vf = malloc(sizeof(float) * ring * D), *q = malloc(sizeof(float) * D);
    int8_t *k8 = malloc((size_t)ring * D), *v8 = malloc((size_t)ring * D);
    float ks[7 * 4], vs[7 * 4], *kd = malloc(sizeof(float) * ring * D), *vd = malloc(sizeof(float) * ring * D);
    for (int i = 0; i < ring * D; i++) {
        kf[i] = (float)((int)(rng_next(&st) % 2001) - 1000) / 400.0f;
        vf[i] = (float)((int)(rng_next(&st) % 2001) - 1000) / 400.0f;
    }
    for (int i = 0; i < D; i++) q[i] = (float)((int)(rng_next(&st) % 2001) - 1000) / 400.0f;
    for (int r = 0; r < ring; r++) {
        kern_q8_quantize_heads(k8 + r * D, ks + r * heads, kf + r * D, heads, hd);
        kern_q8_quantize_heads(v8 + r * D, vs + r * heads, vf + r * D, heads, hd);
        for (int i = 0; i < D; i++) {
            kd[r * D + i] = k8[r * D + i] * ks[r * heads + i / hd];
            vd[r * D + i] = v8[r * D + i] * vs[r * heads + i / hd];
        }
    }
    float o8[96], of[96], scratch[2 * 7];
    kern_pool *pool = kern_pool_create(2);
    const int firsts[] = {0, 3, 5}, nks[] = {7, 6, 4};
    for (int t = 0; t < 3; t++) {
        kern_attend_ring_q8_pool(o8, q, k8, ks, v8, vs, scratch, ring, firsts[t], nks[t], heads, hd, D, heads, pool);
        kern_attend_ring(of, q, kd, vd, scratch, ring, firsts[t], nks[t], heads, hd, D);
        for (int i = 0; i < D; i++)
            ck_assert_msg(fabsf(o8[i] - of[i]) <= 1e-5f * (1 + fabsf(of[i])), "first %d: out[%d] %g vs %g", firsts[t], i,
                          o8[i], of[i]);
    }
    kern_pool_free(pool);
    free(kf); free(vf); free(q); free(k8); free(v8); free(kd); free(vd);
}
END_TEST

/* with int8 K/V, a prefill and single steps leave the same ring, and a
 * snapshot restores it bit for bit (the steps after read the same logits) */
START_TEST(test_prefill_snapshot_kv8) {
    const char *dir = Q8_FIX_DIR "/w8kv8_f32";
    lm_backend *b = open_case(dir, LM_WEIGHTS_INT8, LM_KV_INT8, 3);
    const lm_config *c = &b->cfg;
    enum { P = 5 };
    int toks[P * LM_MAX_STREAMS];
    for (int p = 0; p < P; p++)
        for (int q = 0; q < c->n_streams; q++) toks[p * c->n_streams + q] = (p * 5 + q * 11) % c->card;
    ms_error e = {0};
    ck_assert_msg(lm_backend_prefill(b, 0, 0, P, toks, NULL, &e) == MS_OK, "%s", e.msg);
    lm_samp samp;
    lm_samp_defaults(&samp, 0);
    lm_samp_greedy(&samp);
    for (int p = 0; p < P; p++) {
        lm_step_slot s = {.slot = 1, .samp = samp, .step = (uint64_t)p, .dep_steps = 0};
        memcpy(s.tokens, toks + p * c->n_streams, sizeof(int) * c->n_streams);
        ck_assert_msg(lm_backend_step(b, &s, 1, &e) == MS_OK, "%s", e.msg);
    }
    lm_kv_snap *s0, *s1;
    ck_assert_int_eq(lm_backend_kv_snapshot(b, 0, P, &s0, &e), MS_OK);
    ck_assert_int_eq(lm_backend_kv_snapshot(b, 1, P, &s1, &e), MS_OK);
    lm_snap_info info;
    lm_backend_kv_snap_info(b, s0, &info);
    /* int8 rows + one float scale per head, keys and values */
    ck_assert_uint_eq(info.bytes, 2 * (size_t)c->num_layers * P * (c->dim + c->num_heads * sizeof(float)));
    float *a = malloc(sizeof(float) * P * c->dim), *bb = malloc(sizeof(float) * P * c->dim);
    double worst = 0;
    for (int l = 0; l < c->num_layers; l++)
        for (int w = 0; w < 2; w++) {
            ck_assert_int_eq(lm_backend_kv_snap_read(b, s0, l, w, a, &e), MS_OK);
            ck_assert_int_eq(lm_backend_kv_snap_read(b, s1, l, w, bb, &e), MS_OK);
            double d = rel_err(a, bb, (size_t)P * c->dim);
            if (d > worst) worst = d;
        }
    /* prefill (rows of 5 positions in one GEMM) against steps (one row):
     * float32 sums in another order, and the rare element flipped by a
     * rounding tie (one quantum: 1/127 of its head's max) */
    ck_assert_msg(worst <= 1.0 / 127 + 1e-6, "prefill vs steps K/V rel err %.3g", worst);
    /* restore slot 0's snapshot into slot 2: a step reads the same logits */
    ck_assert_int_eq(lm_backend_kv_restore(b, 2, s0, &e), MS_OK);
    float *l0 = malloc(sizeof(float) * c->text_card), *l2 = malloc(sizeof(float) * c->text_card);
    lm_step_slot st[2] = {{.slot = 0, .samp = samp, .step = P, .dep_steps = 0, .text_logits = l0},
                          {.slot = 2, .samp = samp, .step = P, .dep_steps = 0, .text_logits = l2}};
    for (int q = 0; q < c->n_streams; q++) st[0].tokens[q] = st[1].tokens[q] = q % c->card;
    ck_assert_int_eq(lm_backend_step(b, st, 2, &e), MS_OK);
    ck_assert_msg(memcmp(l0, l2, sizeof(float) * c->text_card) == 0, "restored slot steps differently");
    lm_backend_kv_snap_free(b, s0);
    lm_backend_kv_snap_free(b, s1);
    free(a); free(bb); free(l0); free(l2);
    lm_backend_close(b);
}
END_TEST

/* what is refused, with a message: a q8 checkpoint by the float-only
 * loader (the CUDA backend's) and with weights bf16; a scheme a backend
 * does not declare; a q8 file whose _scb is missing */
START_TEST(test_refusals) {
    ms_error e = {0};
    ck_assert_ptr_null(lm_model_load(Q8_FIX_DIR "/q8_kv8", LM_VARIANT_AUTO, &e));
    ck_assert_msg(strstr(e.msg, "quantize") != NULL, "%s", e.msg);
    ck_assert_ptr_null(lm_model_load_ex(Q8_FIX_DIR "/q8_kv8", LM_VARIANT_AUTO, LM_WEIGHTS_BF16, &e));
    ck_assert_msg(strstr(e.msg, "bf16") != NULL, "%s", e.msg);
    lm_model *m = lm_model_load_ex(Q8_FIX_DIR "/q8_kv8", LM_VARIANT_AUTO, LM_WEIGHTS_STORED, &e);
    ck_assert_msg(m != NULL, "%s", e.msg);
    ck_assert(m->int8 && m->layers[0].attn_in.dtype == ST_I8 && m->linears[3].scale != NULL);
    ck_assert(m->emb[0].dtype == ST_BF16);   /* embeddings stay as stored */
    lm_model_free(m);
    lm_backend_ops ops = lm_cpu_backend;
    ops.schemes = LM_SCHEME_W_BF16;
    lm_backend_opts bo = {.max_slots = 1, .threads = 1, .weights = LM_WEIGHTS_INT8};
    ck_assert_ptr_null(lm_backend_open(&ops, Q8_FIX_DIR "/w8_bf16", &bo, &e));
    ck_assert_int_eq(e.code, MS_ERR_UNSUPPORTED);
    bo.weights = LM_WEIGHTS_STORED;
    bo.kv = LM_KV_INT8;
    ck_assert_ptr_null(lm_backend_open(&ops, Q8_FIX_DIR "/w8_bf16", &bo, &e));
    ck_assert_int_eq(e.code, MS_ERR_UNSUPPORTED);
    /* a q8 file without one _scb tensor */
    char tmpl[] = "/tmp/check_lm_q8.XXXXXX";
    char *dir = mkdtemp(tmpl);
    ck_assert(dir != NULL);
    st_file *f = st_open(Q8_FIX_DIR "/q8_kv8/model.q8.safetensors", &e);
    ck_assert_msg(f != NULL, "%s", e.msg);
    st_writer *w = st_writer_create();
    for (size_t i = 0; i < st_count(f); i++) {
        const st_tensor *t = st_at(f, i);
        if (!strcmp(t->name, "text_linear.weight_scb")) continue;
        st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data);
    }
    char path[512];
    snprintf(path, sizeof path, "%s/model.q8.safetensors", dir);
    ck_assert_int_eq(st_writer_save(w, path, &e), MS_OK);
    st_writer_free(w);
    st_close(f);
    size_t n;
    char *cfg = slurp(Q8_FIX_DIR "/q8_kv8/config.json", &n);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *o = fopen(path, "w");
    fwrite(cfg, 1, n, o);
    fclose(o);
    free(cfg);
    ck_assert_ptr_null(lm_model_load_ex(dir, LM_VARIANT_AUTO, LM_WEIGHTS_INT8, &e));
    ck_assert_msg(strstr(e.msg, "text_linear.weight_scb") != NULL, "%s", e.msg);
    unlink(path);
    snprintf(path, sizeof path, "%s/model.q8.safetensors", dir);
    unlink(path);
    rmdir(dir);
}
END_TEST

/* the weight bytes counted: int8 rows + a float scale per row */
START_TEST(test_weight_bytes) {
    ms_error e = {0};
    lm_model *a = lm_model_load_ex(Q8_FIX_DIR "/w8kv8_f32", LM_VARIANT_AUTO, LM_WEIGHTS_STORED, &e);
    lm_model *b = lm_model_load_ex(Q8_FIX_DIR "/w8kv8_f32", LM_VARIANT_AUTO, LM_WEIGHTS_INT8, &e);
    ck_assert(a && b);
    const kern_mat *m = &b->layers[1].ffn_in;
    ck_assert(m->dtype == ST_I8 && b->layers[1].ffn_out.dtype == ST_I8 && b->text_linear.dtype == ST_I8 &&
              b->dep_in[2].dtype == ST_I8 && b->dep_layers[1].attn_out[5].dtype == ST_I8 && b->text_emb.dtype == ST_F32);
    /* the f32 model's linear matrices shrink 4x (+4 bytes per row) */
    ck_assert(b->weight_bytes < a->weight_bytes);
    ck_assert(b->weight_bytes > a->weight_bytes / 4);
    lm_model_free(a);
    lm_model_free(b);
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("lm_q8");
    TCase *tc = tcase_create("q8");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_manifest);
    tcase_add_loop_test(tc, test_parity, 0, NCASES);
    tcase_add_test(tc, test_schemes_change_logits);
    tcase_add_test(tc, test_quantize_rule);
    tcase_add_test(tc, test_matmul_i8);
    tcase_add_test(tc, test_attend_q8);
    tcase_add_test(tc, test_prefill_snapshot_kv8);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_weight_bytes);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN
