/* check_pp.c - PersonaPlex's step and priming on the CPU backend against
 * the fixtures of tests/fixtures/gen_pp.py (the official LMModel stepped
 * by a reference of PersonaPlex's bookkeeping, with NVIDIA's attention
 * window): greedy live traces frame for frame (logits within 1e-4), far
 * from the same steps with moshi 0.2.13's window past the ring's wrap,
 * sub-steps 8..15 skipped with unchanged outputs (greedy and sampled),
 * prime by prefill == prime by steps (K/V within 1e-5, ring, flags,
 * offset, next tokens), saved-voice replay, persona snapshots, batches of
 * slots, hostile input, and build/moshi-run; persona restores bit-identical
 * to priming (every logit, sampled), the provided flags a snapshot must
 * carry, and restores that leave the other slots alone.
 * Over 800 lines: one suite for PersonaPlex's step, its priming and its
 * snapshots, which share the fixtures and the helpers here. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend.h"
#include "check_lm_util.h"
#include "check_main.h"
#include "json.h"
#include "lmgen.h"
#include "lmgen_pp.h"
#include "job.h"
#include "prime.h"
#include "prime_io.h"
#include "st.h"

#define PP_FIX_DIR "tests/fixtures/pp"
static const char *const pp_cases[] = {"pp_d1", "pp_d2_wrap", "pp_long_wrap"};
#define PP_NCASES 3
#define MAXT 64
/* float32 CPU against float32 PyTorch: summation order only */
#define LOGIT_TOL 1e-4
/* batched (prefill) and single-row products sum in another order */
#define KV_TOL 1e-5
/* the other window (moshi 0.2.13's, one row more) must be this far from
 * ours where they differ: 10x the parity tolerance, so a backend with the
 * wrong window cannot pass test_live_parity (measured: sub-step 15 8.8e-3
 * and up on every call, text logits past the wrap 1.3 and 1.5) */
#define WINDOW_DIFF 1e-3

typedef struct {
    int n;
    int has[MAXT];
    int out[MAXT][PP_OUT_TOKENS];
} trace;

static void load_trace(const char *name, const char *file, trace *t) {
    char path[256];
    snprintf(path, sizeof path, PP_FIX_DIR "/%s/%s", name, file);
    size_t len;
    char *txt = slurp(path, &len);
    ck_assert_msg(txt != NULL, "%s unreadable", path);
    memset(t, 0, sizeof *t);
    ms_error e = {0};
    for (char *line = strtok(txt, "\n"); line; line = strtok(NULL, "\n")) {
        ck_assert(t->n < MAXT);
        js_value *v = js_parse(line, strlen(line), &e);
        ck_assert_msg(v != NULL, "%s: %s", path, e.msg);
        ck_assert_int_eq((int)js_get(v, "step")->i, t->n);
        const js_value *o = js_get(v, "out");
        if (o->type == JS_ARRAY) {
            ck_assert_int_eq((int)o->len, PP_OUT_TOKENS);
            t->has[t->n] = 1;
            for (int k = 0; k < PP_OUT_TOKENS; k++) t->out[t->n][k] = (int)js_at(o, k)->i;
        }
        t->n++;
        js_free(v);
    }
    free(txt);
}

static void cmp_trace(const char *what, const trace *got, const trace *ref) {
    ck_assert_msg(got->n == ref->n, "%s: %d steps, reference %d", what, got->n, ref->n);
    for (int t = 0; t < ref->n; t++) {
        ck_assert_msg(got->has[t] == ref->has[t], "%s step %d: output %s, reference %s", what, t,
                      got->has[t] ? "a frame" : "null", ref->has[t] ? "a frame" : "null");
        for (int k = 0; ref->has[t] && k < PP_OUT_TOKENS; k++)
            ck_assert_msg(got->out[t][k] == ref->out[t][k], "%s step %d token %d: %d, reference %d", what, t, k,
                          got->out[t][k], ref->out[t][k]);
    }
}

static lm_backend *open_case(const char *name, int slots) {
    char dir[256];
    snprintf(dir, sizeof dir, PP_FIX_DIR "/%s", name);
    ms_error e = {0};
    lm_backend_opts bo = {.max_slots = slots, .threads = 2, .variant = LM_VARIANT_AUTO};
    lm_backend *b = lm_backend_open(&lm_cpu_backend, dir, &bo, &e);
    ck_assert_msg(b != NULL, "%s: %s", name, e.msg);
    ck_assert_int_eq(b->cfg.variant, LM_VARIANT_PERSONAPLEX);   /* detected: 16 depformer steps */
    return b;
}

static int *load_codes(const char *name, int *T) {
    char path[256];
    snprintf(path, sizeof path, PP_FIX_DIR "/%s/codes.txt", name);
    int *v, n;
    ms_error e = {0};
    ck_assert_msg(pp_read_ints(path, 0, 1 << 20, 1 << 16, &v, &n, &e) == MS_OK, "%s", e.msg);
    *T = n / PP_SIDE_CODEBOOKS;
    return v;
}

/* the fixture's prompt: voice codes, or the saved voice when saved */
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

static void init_slot(lm_backend *b, lmgen_slot *g, int slot, int greedy, uint64_t seed) {
    lm_samp s;
    lm_samp_defaults(&s, seed);
    if (greedy) lm_samp_greedy(&s);
    lmgen_init(g, &b->cfg, slot, &s);
    ms_error e = {0};
    ck_assert_int_eq(lm_backend_reset_slot(b, slot, &e), MS_OK);
}

/* live steps of slot g; logits (T, text_card) / (T, 16, card) optional */
static void run_live(lm_backend *b, lmgen_slot *g, const int *codes, int T, trace *got, float *tl, float *al) {
    const lm_config *c = &b->cfg;
    ms_error e = {0};
    got->n = T;
    for (int t = 0; t < T; t++) {
        int rc = pp_step_users(b, &g, 1, codes + t * PP_SIDE_CODEBOOKS, got->out[t], &got->has[t],
                               tl ? tl + (size_t)t * c->text_card : NULL,
                               al ? al + (size_t)t * c->dep_q * c->card : NULL, &e);
        ck_assert_msg(rc == MS_OK, "step %d: %s", t, e.msg);
    }
}

START_TEST(test_manifest) {
    char *txt;
    js_value *root = manifest_open(PP_FIX_DIR "/MANIFEST.json", &txt);
    const js_value *cases = js_get(root, "cases");
    ck_assert_int_eq((int)cases->len, PP_NCASES);
    int nfiles = 0;
    for (int i = 0; i < PP_NCASES; i++) {
        const js_value *cs = js_get(cases, pp_cases[i]);
        ck_assert_msg(cs != NULL, "case %s missing from the manifest", pp_cases[i]);
        ck_assert_int_eq((int)js_get(js_get(cs, "config"), "dep_q")->i, 16);
        nfiles += check_manifest_files(PP_FIX_DIR, pp_cases[i], js_get(cs, "files"));
    }
    ck_assert_int_eq(nfiles, 14 * PP_NCASES);
    js_free(root);
    free(txt);
}
END_TEST

/* live greedy steps from a fresh slot: every frame, every logit; run with
 * all 16 sub-steps too: the same frames, and the logits of 8..15 */
START_TEST(test_live_parity) {
    const char *name = pp_cases[_i];
    lm_backend *b = open_case(name, 1);
    const lm_config *c = &b->cfg;
    int T;
    int *codes = load_codes(name, &T);
    trace ref, got;
    load_trace(name, "live.jsonl", &ref);
    ck_assert_int_eq(ref.n, T);
    size_t ntl = (size_t)T * c->text_card, nal = (size_t)T * c->dep_q * c->card;
    float *tl = malloc(sizeof(float) * ntl), *al = malloc(sizeof(float) * nal);
    char path[256];
    snprintf(path, sizeof path, PP_FIX_DIR "/%s/live_logits.safetensors", name);
    ms_error e = {0};
    st_file *f = st_open(path, &e);
    ck_assert_msg(f != NULL, "%s", e.msg);
    int64_t s1[2] = {T, c->text_card}, s2[3] = {T, c->dep_q, c->card};
    const st_tensor *rt = st_get(f, "text_logits", 2, s1, 0, ST_F32, &e), *ra = st_get(f, "audio_logits", 3, s2, 0, ST_F32, &e);
    ck_assert_msg(rt && ra, "%s", e.msg);
    float *rtl = malloc(sizeof(float) * ntl), *ral = malloc(sizeof(float) * nal);
    st_to_f32(rt, 0, ntl, rtl);
    st_to_f32(ra, 0, nal, ral);
    for (int full = 0; full < 2; full++) {
        lmgen_slot g;
        init_slot(b, &g, 0, 1, 0);
        if (full) g.dep_steps = c->dep_q;
        run_live(b, &g, codes, T, &got, tl, al);
        cmp_trace(full ? "live (16 sub-steps)" : "live", &got, &ref);
        for (int t = 0; t < T; t++) {
            const float *a = tl + (size_t)t * c->text_card, *r = rtl + (size_t)t * c->text_card;
            ck_assert_msg(isnan(a[0]) == isnan(r[0]), "%s step %d: model call mismatch", name, t);
            if (isnan(r[0])) continue;   /* the first call makes no model call */
            double et = rel_err(a, r, (size_t)c->text_card);
            ck_assert_msg(et <= LOGIT_TOL, "%s step %d: text logits rel err %.3g", name, t, et);
            for (int k = 0; k < c->dep_q; k++) {
                const float *aa = al + ((size_t)t * c->dep_q + k) * c->card, *ra2 = ral + ((size_t)t * c->dep_q + k) * c->card;
                if (!full && k >= PP_SIDE_CODEBOOKS) {
                    ck_assert_msg(isnan(aa[0]), "%s step %d: sub-step %d ran in live serving", name, t, k);
                    continue;
                }
                /* offsets t <= delay: the target is the forced initial
                 * token, nothing of that sub-step is kept */
                if (!full && t <= c->delays[1 + k]) {
                    ck_assert_msg(isnan(aa[0]), "%s step %d: sub-step %d ran", name, t, k);
                    continue;
                }
                double ea = rel_err(aa, ra2, (size_t)c->card);
                ck_assert_msg(ea <= LOGIT_TOL, "%s step %d sub-step %d: logits rel err %.3g", name, t, k, ea);
            }
        }
    }
    st_close(f);
    free(rtl);
    free(ral);
    free(tl);
    free(al);
    free(codes);
    lm_backend_close(b);
}
END_TEST

/* the second reference (kyutai_ring.safetensors: the live steps with moshi
 * 0.2.13's window, context and dep_q rows instead of context - 1 and
 * dep_q - 1): equal to ours while no query has lost a row (call t, position
 * t - 1 < context - 1), at least WINDOW_DIFF away from ours on some call
 * past the wrap, and at depformer sub-step 15 (the last of a full ring of
 * 16) on every call. */
START_TEST(test_window_differs) {
    const char *name = pp_cases[_i];
    lm_backend *b = open_case(name, 1);
    const lm_config *c = &b->cfg;
    ck_assert_int_eq(c->window, c->context - 1);
    ck_assert_int_eq(c->dep_window, c->dep_q - 1);
    int T;
    int *codes = load_codes(name, &T);
    size_t ntl = (size_t)T * c->text_card, nal = (size_t)T * c->dep_q * c->card;
    float *tl = malloc(sizeof(float) * ntl), *al = malloc(sizeof(float) * nal);
    float *ktl = malloc(sizeof(float) * ntl), *kal = malloc(sizeof(float) * (size_t)T * c->card);
    char path[256];
    snprintf(path, sizeof path, PP_FIX_DIR "/%s/kyutai_ring.safetensors", name);
    ms_error e = {0};
    st_file *f = st_open(path, &e);
    ck_assert_msg(f != NULL, "%s", e.msg);
    int64_t s1[2] = {T, c->text_card}, s2[2] = {T, c->card};
    const st_tensor *rt = st_get(f, "text_logits", 2, s1, 0, ST_F32, &e);
    const st_tensor *ra = st_get(f, "last_audio_logits", 2, s2, 0, ST_F32, &e);
    ck_assert_msg(rt && ra, "%s", e.msg);
    st_to_f32(rt, 0, ntl, ktl);
    st_to_f32(ra, 0, (size_t)T * c->card, kal);
    lmgen_slot g;
    init_slot(b, &g, 0, 1, 0);
    g.dep_steps = c->dep_q;
    trace got;
    run_live(b, &g, codes, T, &got, tl, al);
    double before = 0, after = 0, last = INFINITY;
    for (int t = 1; t < T; t++) {   /* call 0 makes no model call */
        double et = rel_err(tl + (size_t)t * c->text_card, ktl + (size_t)t * c->text_card, (size_t)c->text_card);
        if (t < c->context) before = fmax(before, et);
        else after = fmax(after, et);
        const float *a15 = al + ((size_t)t * c->dep_q + c->dep_q - 1) * c->card;
        last = fmin(last, rel_err(a15, kal + (size_t)t * c->card, (size_t)c->card));
    }
    if (getenv("CHECK_PP_VERBOSE"))
        fprintf(stderr, "%s: against 0.2.13's window: text %.3g before the wrap, %.3g after; sub-step 15 >= %.3g\n",
                name, before, after, last);
    ck_assert_msg(before <= LOGIT_TOL, "%s: text logits %.3g from 0.2.13's window before the wrap", name, before);
    if (T > c->context)
        ck_assert_msg(after >= WINDOW_DIFF, "%s: text logits only %.3g from 0.2.13's window past the wrap", name, after);
    ck_assert_msg(last >= WINDOW_DIFF, "%s: sub-step 15 only %.3g from 0.2.13's window", name, last);
    st_close(f);
    free(tl);
    free(al);
    free(ktl);
    free(kal);
    free(codes);
    lm_backend_close(b);
}
END_TEST

/* sampling: skipping sub-steps 8..15 changes no output token either (the
 * noise is keyed per stream), after a prime too */
START_TEST(test_skip_substeps_sampled) {
    const char *name = pp_cases[_i];
    lm_backend *b = open_case(name, 2);
    const lm_config *c = &b->cfg;
    int T;
    int *codes = load_codes(name, &T);
    pp_prompt_buf pb;
    load_prompt(name, c, 0, &pb);
    trace t8, t16;
    lmgen_slot g8, g16;
    ms_error e = {0};
    init_slot(b, &g8, 0, 0, 1234);
    init_slot(b, &g16, 1, 0, 1234);
    g16.dep_steps = c->dep_q;
    ck_assert_msg(pp_prime(b, &g8, &pb.p, PP_PRIME_STEPS, &e) == MS_OK, "%s", e.msg);
    ck_assert_msg(pp_prime(b, &g16, &pb.p, PP_PRIME_STEPS, &e) == MS_OK, "%s", e.msg);
    run_live(b, &g8, codes, T, &t8, NULL, NULL);
    run_live(b, &g16, codes, T, &t16, NULL, NULL);
    cmp_trace("sampled, 8 vs 16 sub-steps", &t8, &t16);
    pp_prompt_buf_free(&pb);
    free(codes);
    lm_backend_close(b);
}
END_TEST

static void check_state(const char *name, const lmgen_slot *g) {
    char path[256];
    snprintf(path, sizeof path, PP_FIX_DIR "/%s/prime_state.json", name);
    size_t len;
    char *txt = slurp(path, &len);
    ck_assert(txt != NULL);
    ms_error e = {0};
    js_value *v = js_parse(txt, len, &e);
    ck_assert_msg(v != NULL, "%s", e.msg);
    ck_assert_int_eq(g->offset, js_get(v, "offset")->i);
    const js_value *ring = js_get(v, "ring"), *prov = js_get(v, "provided");
    ck_assert_int_eq((int)ring->len, PP_STREAMS);
    for (int k = 0; k < PP_STREAMS; k++) {
        ck_assert_int_eq((int)js_at(ring, k)->len, g->ring);
        for (int i = 0; i < g->ring; i++) {
            ck_assert_msg(g->tokens[k][i] == js_at(js_at(ring, k), i)->i, "%s: ring[%d][%d] = %d, reference %lld",
                          name, k, i, g->tokens[k][i], (long long)js_at(js_at(ring, k), i)->i);
            ck_assert_msg(g->provided[k][i] == js_at(js_at(prov, k), i)->i, "%s: provided[%d][%d]", name, k, i);
        }
    }
    js_free(v);
    free(txt);
}

static void same_state(const lmgen_slot *a, const lmgen_slot *r) {
    ck_assert_int_eq(a->offset, r->offset);
    ck_assert_int_eq(a->ring, r->ring);
    for (int k = 0; k < PP_STREAMS; k++)
        for (int i = 0; i < r->ring; i++) {
            ck_assert_int_eq(a->tokens[k][i], r->tokens[k][i]);
            ck_assert_int_eq(a->provided[k][i], r->provided[k][i]);
        }
}

/* K/V of two slots over their positions: max |a - b| / max |b| */
static double kv_rel(lm_backend *b, int sa, int sr) {
    ms_error e = {0};
    int P = (int)lm_backend_pos(b, sr);
    ck_assert_int_eq((int)lm_backend_pos(b, sa), P);
    lm_kv_snap *x = NULL, *y = NULL;
    ck_assert_msg(lm_backend_kv_snapshot(b, sa, P, &x, &e) == MS_OK, "%s", e.msg);
    ck_assert_msg(lm_backend_kv_snapshot(b, sr, P, &y, &e) == MS_OK, "%s", e.msg);
    ck_assert(lm_backend_kv_snap_len(b, x) == P && lm_backend_kv_snap_len(b, y) == P);
    /* all layers, keys then values, read through the backend interface */
    size_t per = (size_t)P * (size_t)b->cfg.dim, n = per * (size_t)b->cfg.num_layers;
    double worst = 0;
    float *a = malloc(n * sizeof(float)), *r = malloc(n * sizeof(float));
    for (int which = 0; which < 2; which++) {
        for (int l = 0; l < b->cfg.num_layers; l++) {
            ck_assert_int_eq(lm_backend_kv_snap_read(b, x, l, which, a + (size_t)l * per, &e), MS_OK);
            ck_assert_int_eq(lm_backend_kv_snap_read(b, y, l, which, r + (size_t)l * per, &e), MS_OK);
        }
        double mr = 0;
        for (size_t i = 0; i < n; i++) mr = fmax(mr, fabs(r[i]));
        ck_assert_msg(mr > 0, "the %s read back are all zero", which ? "values" : "keys");
        double err = rel_err(a, r, n);
        if (!(err <= worst)) worst = err;
    }
    ck_assert_int_eq(lm_backend_kv_snap_read(b, x, b->cfg.num_layers, 0, a, &e), MS_ERR_ARG);
    free(a);
    free(r);
    lm_backend_kv_snap_free(b, x);
    lm_backend_kv_snap_free(b, y);
    return worst;
}

/* the full prime by single steps (slot 0) and by one prefill (slot 1):
 * state equal to the reference's, K/V within 1e-5, the live steps after it
 * (both slots in one batch) equal to the reference trace */
START_TEST(test_prime_prefill_vs_steps) {
    const char *name = pp_cases[_i];
    lm_backend *b = open_case(name, 2);
    const lm_config *c = &b->cfg;
    pp_prompt_buf pb;
    load_prompt(name, c, 0, &pb);
    lmgen_slot gs, gp;
    init_slot(b, &gs, 0, 1, 0);
    init_slot(b, &gp, 1, 1, 0);
    ms_error e = {0};
    ck_assert_msg(pp_prime(b, &gs, &pb.p, PP_PRIME_STEPS, &e) == MS_OK, "%s", e.msg);
    lm_backend_stats st0, st1;
    lm_backend_stats_get(b, &st0);
    ck_assert_msg(pp_prime(b, &gp, &pb.p, PP_PRIME_PREFILL, &e) == MS_OK, "%s", e.msg);
    lm_backend_stats_get(b, &st1);
    ck_assert_int_eq(st1.step_calls, st0.step_calls);   /* no step: one prefill */
    int P = pb.p.n_voice + 2 * pb.p.silence_frames + pb.p.n_text;
    ck_assert_int_eq((int)(st1.prefill_positions - st0.prefill_positions), P - 1);
    ck_assert_int_eq((int)lm_backend_pos(b, 1), P - 1);
    same_state(&gp, &gs);
    check_state(name, &gp);
    double kv = kv_rel(b, 1, 0);
    ck_assert_msg(kv <= KV_TOL, "%s: K/V rel err %.3g", name, kv);
    if (getenv("CHECK_PP_VERBOSE")) fprintf(stderr, "%s: prefill vs steps: K/V max rel err %.3g\n", name, kv);
    /* the next live steps, both slots in one call */
    int T;
    int *codes = load_codes(name, &T);
    trace ref, got[2];
    load_trace(name, "primed.jsonl", &ref);
    lmgen_slot *gg[2] = {&gs, &gp};
    for (int t = 0; t < ref.n; t++) {
        int u[2 * PP_SIDE_CODEBOOKS], out[2 * PP_OUT_TOKENS], has[2];
        memcpy(u, codes + t * PP_SIDE_CODEBOOKS, sizeof(int) * PP_SIDE_CODEBOOKS);
        memcpy(u + PP_SIDE_CODEBOOKS, codes + t * PP_SIDE_CODEBOOKS, sizeof(int) * PP_SIDE_CODEBOOKS);
        ck_assert_msg(pp_step_users(b, gg, 2, u, out, has, NULL, NULL, &e) == MS_OK, "%s", e.msg);
        for (int s = 0; s < 2; s++) {
            got[s].has[t] = has[s];
            memcpy(got[s].out[t], out + s * PP_OUT_TOKENS, sizeof(int) * PP_OUT_TOKENS);
        }
    }
    got[0].n = got[1].n = ref.n;
    cmp_trace("primed by steps", &got[0], &ref);
    cmp_trace("primed by prefill", &got[1], &ref);
    pp_prompt_buf_free(&pb);
    free(codes);
    lm_backend_close(b);
}
END_TEST

/* the saved voice replayed (one prefill, or row by row) then the rest of
 * the prime: the reference state and trace; and K/V equal to the
 * prime from voice codes */
START_TEST(test_replay) {
    const char *name = pp_cases[_i];
    lm_backend *b = open_case(name, 3);
    const lm_config *c = &b->cfg;
    pp_prompt_buf ps, pv;
    load_prompt(name, c, 1, &ps);
    load_prompt(name, c, 0, &pv);
    ck_assert_int_eq(ps.p.n_voice_embs, pv.p.n_voice - 1);
    int T;
    int *codes = load_codes(name, &T);
    trace ref, got;
    load_trace(name, "primed.jsonl", &ref);
    ms_error e = {0};
    lmgen_slot gv;
    init_slot(b, &gv, 2, 1, 0);
    ck_assert_msg(pp_prime(b, &gv, &pv.p, PP_PRIME_STEPS, &e) == MS_OK, "%s", e.msg);
    for (int mode = 0; mode < 2; mode++) {
        lmgen_slot g;
        init_slot(b, &g, mode, 1, 0);
        ck_assert_msg(pp_prime(b, &g, &ps.p, (pp_prime_mode)mode, &e) == MS_OK, "%s", e.msg);
        check_state(name, &g);
        double kv = kv_rel(b, mode, 2);
        ck_assert_msg(kv <= KV_TOL, "%s mode %d: K/V rel err %.3g against the voice codes", name, mode, kv);
        run_live(b, &g, codes, ref.n, &got, NULL, NULL);
        cmp_trace(mode ? "replay by prefill" : "replay by rows", &got, &ref);
    }
    pp_prompt_buf_free(&ps);
    pp_prompt_buf_free(&pv);
    free(codes);
    lm_backend_close(b);
}
END_TEST

/* a persona primed once, restored into other slots (one of them busy
 * before), stepped together with a fresh slot in one batch */
START_TEST(test_persona) {
    const char *name = pp_cases[_i];
    lm_backend *b = open_case(name, 3);
    const lm_config *c = &b->cfg;
    pp_prompt_buf pb;
    load_prompt(name, c, 0, &pb);
    int T;
    int *codes = load_codes(name, &T);
    trace ref, ref_live;
    load_trace(name, "primed.jsonl", &ref);
    load_trace(name, "live.jsonl", &ref_live);
    ms_error e = {0};
    lmgen_slot g0, g1, g2;
    init_slot(b, &g0, 0, 1, 0);
    ck_assert_msg(pp_prime(b, &g0, &pb.p, PP_PRIME_PREFILL, &e) == MS_OK, "%s", e.msg);
    pp_persona per;
    ck_assert_msg(pp_persona_save(b, &g0, &per, &e) == MS_OK, "%s", e.msg);
    init_slot(b, &g1, 1, 1, 0);
    trace junk;
    run_live(b, &g1, codes + 3 * PP_SIDE_CODEBOOKS, 5, &junk, NULL, NULL);   /* slot 1 busy first */
    ck_assert_msg(pp_persona_load(b, &per, &g1, &e) == MS_OK, "%s", e.msg);
    ck_assert_int_eq(g1.slot, 1);
    init_slot(b, &g2, 2, 1, 0);
    lmgen_slot *gg[2] = {&g1, &g2};
    trace got1 = {.n = ref.n}, got2 = {.n = ref.n};
    for (int t = 0; t < ref.n; t++) {
        int u[2 * PP_SIDE_CODEBOOKS], out[2 * PP_OUT_TOKENS], has[2];
        memcpy(u, codes + t * PP_SIDE_CODEBOOKS, sizeof(int) * PP_SIDE_CODEBOOKS);
        memcpy(u + PP_SIDE_CODEBOOKS, codes + t * PP_SIDE_CODEBOOKS, sizeof(int) * PP_SIDE_CODEBOOKS);
        ck_assert_msg(pp_step_users(b, gg, 2, u, out, has, NULL, NULL, &e) == MS_OK, "%s", e.msg);
        got1.has[t] = has[0];
        got2.has[t] = has[1];
        memcpy(got1.out[t], out, sizeof(int) * PP_OUT_TOKENS);
        memcpy(got2.out[t], out + PP_OUT_TOKENS, sizeof(int) * PP_OUT_TOKENS);
    }
    cmp_trace("persona restored", &got1, &ref);
    trace live16 = ref_live;
    live16.n = ref.n;
    cmp_trace("fresh slot beside it", &got2, &live16);
    /* again into the slot it came from, after its own live steps */
    run_live(b, &g0, codes, 4, &junk, NULL, NULL);
    ck_assert_msg(pp_persona_load(b, &per, &g0, &e) == MS_OK, "%s", e.msg);
    run_live(b, &g0, codes, ref.n, &got1, NULL, NULL);
    cmp_trace("persona restored twice", &got1, &ref);
    pp_persona_close(b, &per);
    pp_prompt_buf_free(&pb);
    free(codes);
    lm_backend_close(b);
}
END_TEST


/* Engine jobs: the prime by prefill in chunks of 5 positions while a fresh
 * slot steps live between the chunks: the primed state and K/V equal the
 * one-piece prefill's, the live slot's trace is the reference's (the job
 * disturbed nothing); then the persona snapshotted by a job and restored by
 * a job one layer per chunk into a busy slot continues as the reference. */
START_TEST(test_jobs) {
    const char *name = pp_cases[_i];
    lm_backend *b = open_case(name, 3);
    const lm_config *c = &b->cfg;
    pp_prompt_buf pb;
    load_prompt(name, c, 0, &pb);
    int T;
    int *codes = load_codes(name, &T);
    trace ref, ref_live;
    load_trace(name, "primed.jsonl", &ref);
    load_trace(name, "live.jsonl", &ref_live);
    ms_error e = {0};
    lmgen_slot g0, g1, g2;
    init_slot(b, &g0, 0, 1, 0);
    init_slot(b, &g1, 1, 1, 0);
    init_slot(b, &g2, 2, 1, 0);
    ck_assert_msg(pp_prime(b, &g1, &pb.p, PP_PRIME_PREFILL, &e) == MS_OK, "%s", e.msg);
    pp_job *j = pp_job_prime(b, &g0, &pb.p, 5, &e);
    ck_assert_msg(j != NULL, "%s", e.msg);
    trace live = {.n = 0};
    int done = 0, t = 0;
    lmgen_slot *g2p = &g2;
    while (!done) {
        ck_assert_msg(pp_job_run(j, &done, &e) == MS_OK, "%s", e.msg);
        if (t < ref_live.n) {   /* one live step of slot 2 between chunks */
            int out[PP_OUT_TOKENS], has;
            ck_assert_int_eq(pp_step_users(b, &g2p, 1, codes + t * PP_SIDE_CODEBOOKS, out, &has, NULL, NULL, &e), MS_OK);
            live.has[t] = has;
            memcpy(live.out[t], out, sizeof out);
            live.n = ++t;
        }
    }
    int P = pb.p.n_voice + 2 * pb.p.silence_frames + pb.p.n_text;
    ck_assert_int_eq(pp_job_chunks(j), (P - 1 + 4) / 5);
    pp_job_free(j);
    same_state(&g0, &g1);
    check_state(name, &g0);
    double kv = kv_rel(b, 0, 1);
    ck_assert_msg(kv <= KV_TOL, "%s: chunked prefill K/V rel err %.3g", name, kv);
    trace lr = ref_live;
    lr.n = live.n;
    cmp_trace("live beside a prime job", &live, &lr);
    /* snapshot job, then restore job (1 layer a chunk) into busy slot 2 */
    pp_persona per;
    j = pp_job_snapshot(b, &g0, &per, &e);
    ck_assert_ptr_nonnull(j);
    ck_assert_int_eq(pp_job_run(j, &done, &e), MS_OK);
    ck_assert(done);
    pp_job_free(j);
    j = pp_job_restore(b, &per, &g2, 1, &e);
    ck_assert_ptr_nonnull(j);
    done = 0;
    while (!done) ck_assert_msg(pp_job_run(j, &done, &e) == MS_OK, "%s", e.msg);
    ck_assert_int_eq(pp_job_chunks(j), c->num_layers);
    pp_job_free(j);
    ck_assert_int_eq(g2.slot, 2);
    trace got;
    run_live(b, &g2, codes, ref.n, &got, NULL, NULL);
    cmp_trace("persona restored by a job", &got, &ref);
    /* refused: a bad chunk, a persona of the wrong kind */
    ck_assert_ptr_null(pp_job_prime(b, &g0, &pb.p, 0, &e));
    pp_persona bad = per;
    bad.kv = NULL;
    ck_assert_ptr_null(pp_job_restore(b, &bad, &g2, 1, &e));
    pp_persona_close(b, &per);
    pp_prompt_buf_free(&pb);
    free(codes);
    lm_backend_close(b);
}
END_TEST

/* ---- persona snapshots: exact restores ----
 * On the CPU backend a restore is a copy, so a restored slot must continue
 * bit for bit as the slot that was primed: the tests below compare tokens
 * and every logit byte (memcmp), with sampling on (the rng noise is keyed
 * per (seed, offset, stream, index), not per slot). */

/* live steps compared after a restore; sampling seeds */
#define EXACT_STEPS 12
#define EXACT_SEED 4242
#define OTHER_SEED 77

/* n live steps of one slot: frames and every logit */
typedef struct {
    trace t;
    float *tl;   /* (n, text_card) */
    float *al;   /* (n, dep_q, card); NaN rows for skipped sub-steps */
} rec;

static void rec_alloc(const lm_config *c, int n, rec *r) {
    memset(r, 0, sizeof *r);
    ck_assert(n <= MAXT);
    r->t.n = n;
    r->tl = malloc(sizeof(float) * (size_t)n * c->text_card);
    r->al = malloc(sizeof(float) * (size_t)n * c->dep_q * c->card);
    ck_assert(r->tl && r->al);
}

static void rec_free(rec *r) {
    free(r->tl);
    free(r->al);
}

/* one live step of slot g alone (a batch of 1, so that no batching changes
 * the rounding), user codes frame `frame` of the T given (cycled), into
 * step t of r */
static void rec_step(lm_backend *b, lmgen_slot *g, const int *codes, int T, int frame, rec *r, int t) {
    const lm_config *c = &b->cfg;
    ms_error e = {0};
    int rc = pp_step_users(b, &g, 1, codes + (frame % T) * PP_SIDE_CODEBOOKS, r->t.out[t], &r->t.has[t],
                           r->tl + (size_t)t * c->text_card, r->al + (size_t)t * c->dep_q * c->card, &e);
    ck_assert_msg(rc == MS_OK, "slot %d step %d: %s", g->slot, t, e.msg);
}

static void rec_live(lm_backend *b, lmgen_slot *g, const int *codes, int T, rec *r) {
    for (int t = 0; t < r->t.n; t++) rec_step(b, g, codes, T, t, r, t);
}

/* first byte-level mismatch of two float rows, or -1 */
static long first_diff(const float *a, const float *r, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(a + i, r + i, sizeof(float)) != 0) return (long)i;
    return -1;
}

/* a == r bit for bit: frames, text logits, audio logits (the NaN rows of
 * skipped sub-steps included) */
static void rec_same(const char *what, const lm_config *c, const rec *a, const rec *r) {
    cmp_trace(what, &a->t, &r->t);
    for (int t = 0; t < r->t.n; t++) {
        size_t nt = (size_t)c->text_card, na = (size_t)c->dep_q * c->card;
        long i = first_diff(a->tl + t * nt, r->tl + t * nt, nt);
        ck_assert_msg(i < 0, "%s step %d: text logit %ld = %.9g, reference %.9g", what, t, i, a->tl[t * nt + i],
                      r->tl[t * nt + i]);
        i = first_diff(a->al + t * na, r->al + t * na, na);
        ck_assert_msg(i < 0, "%s step %d: sub-step %ld logit %ld = %.9g, reference %.9g", what, t, i / c->card,
                      i % c->card, a->al[t * na + i], r->al[t * na + i]);
    }
}

/* another session on slot `slot`: its own seed, the saved voice replayed
 * by rows and the rest of the prompt by steps, then context + 3 live steps
 * (its K/V ring wraps: every row, the position and the ring differ from
 * the persona's); then g is set up for a new session (seed EXACT_SEED)
 * without resetting the backend slot, as a restore finds it */
static void other_session(lm_backend *b, lmgen_slot *g, int slot, const char *name, const int *codes, int T) {
    const lm_config *c = &b->cfg;
    pp_prompt_buf ps;
    load_prompt(name, c, 1, &ps);
    init_slot(b, g, slot, 0, OTHER_SEED);
    ms_error e = {0};
    ck_assert_msg(pp_prime(b, g, &ps.p, PP_PRIME_STEPS, &e) == MS_OK, "%s", e.msg);
    pp_prompt_buf_free(&ps);
    for (int t = 0; t < c->context + 3; t++) {
        int out[PP_OUT_TOKENS], has;
        ck_assert_msg(pp_step_users(b, &g, 1, codes + ((T - 1 - t % T) * PP_SIDE_CODEBOOKS), out, &has, NULL, NULL,
                                    &e) == MS_OK, "%s", e.msg);
    }
    ck_assert(lm_backend_pos(b, slot) > c->context);
    lm_samp s;
    lm_samp_defaults(&s, EXACT_SEED);
    lmgen_init(g, c, slot, &s);
}

/* restore by pp_job_restore, chunk layers per chunk */
static void job_restore(lm_backend *b, const pp_persona *per, lmgen_slot *g, int chunk) {
    ms_error e = {0};
    pp_job *j = pp_job_restore(b, per, g, chunk, &e);
    ck_assert_msg(j != NULL, "%s", e.msg);
    int done = 0;
    while (!done) ck_assert_msg(pp_job_run(j, &done, &e) == MS_OK, "%s", e.msg);
    ck_assert_int_eq(pp_job_chunks(j), (b->cfg.num_layers + chunk - 1) / chunk);
    pp_job_free(j);
}

/* (a) A persona primed on slot 0 (by steps, then by prefill), saved, and
 * slot 0 stepped EXACT_STEPS live, sampled: the reference. Restored
 *   1. by pp_persona_load into fresh slot 1,
 *   2. by pp_job_restore (one layer a chunk) into slot 2 after another
 *      session that wrapped its K/V ring (other_session),
 *   3. by pp_job_restore (all layers in one chunk) back into slot 0 after
 *      its own live steps, and by pp_persona_load into slot 1 again after
 *      its live steps,
 * each then stepped EXACT_STEPS: state (ring, flags, offset) equal to the
 * saved one, position equal, frames and every logit bit-identical to the
 * reference. And slots 1 and 2 primed from scratch give the reference too
 * (priming does not depend on the slot), so a restore is "that slot primed
 * from scratch". */
START_TEST(test_persona_exact) {
    const char *name = pp_cases[_i];
    lm_backend *b = open_case(name, 3);
    const lm_config *c = &b->cfg;
    pp_prompt_buf pb;
    load_prompt(name, c, 0, &pb);
    int T;
    int *codes = load_codes(name, &T);
    ms_error e = {0};
    for (int mode = 0; mode < 2; mode++) {
        lmgen_slot g[3];
        init_slot(b, &g[0], 0, 0, EXACT_SEED);
        ck_assert_msg(pp_prime(b, &g[0], &pb.p, (pp_prime_mode)mode, &e) == MS_OK, "%s", e.msg);
        pp_persona per;
        ck_assert_msg(pp_persona_save(b, &g[0], &per, &e) == MS_OK, "%s", e.msg);
        ck_assert_int_eq(per.pos, lm_backend_pos(b, 0));
        rec ref, got;
        rec_alloc(c, EXACT_STEPS, &ref);
        rec_alloc(c, EXACT_STEPS, &got);
        rec_live(b, &g[0], codes, T, &ref);
        ck_assert(ref.t.has[0]);   /* the first live call returns a frame */
        char what[96];
        /* 1: a fresh slot */
        init_slot(b, &g[1], 1, 0, EXACT_SEED);
        ck_assert_msg(pp_persona_load(b, &per, &g[1], &e) == MS_OK, "%s", e.msg);
        ck_assert_int_eq(g[1].slot, 1);
        same_state(&g[1], &per.st);
        ck_assert_int_eq(lm_backend_pos(b, 1), per.pos);
        rec_live(b, &g[1], codes, T, &got);
        snprintf(what, sizeof what, "%s mode %d: loaded into a fresh slot", name, mode);
        rec_same(what, c, &got, &ref);
        /* 2: a slot that held another session, by a job */
        other_session(b, &g[2], 2, name, codes, T);
        job_restore(b, &per, &g[2], 1);
        same_state(&g[2], &per.st);
        ck_assert_int_eq(lm_backend_pos(b, 2), per.pos);
        ck_assert(g[2].samp.seed == EXACT_SEED);   /* the new session's sampling kept */
        rec_live(b, &g[2], codes, T, &got);
        snprintf(what, sizeof what, "%s mode %d: job into a slot after another session", name, mode);
        rec_same(what, c, &got, &ref);
        /* 3: back into the source slot and again into slot 1, both busy */
        job_restore(b, &per, &g[0], c->num_layers);
        rec_live(b, &g[0], codes, T, &got);
        snprintf(what, sizeof what, "%s mode %d: job back into its own slot", name, mode);
        rec_same(what, c, &got, &ref);
        ck_assert_msg(pp_persona_load(b, &per, &g[1], &e) == MS_OK, "%s", e.msg);
        rec_live(b, &g[1], codes, T, &got);
        snprintf(what, sizeof what, "%s mode %d: loaded twice into slot 1", name, mode);
        rec_same(what, c, &got, &ref);
        /* the reference is what priming slots 1 and 2 from scratch gives */
        for (int s = 1; s < 3; s++) {
            init_slot(b, &g[s], s, 0, EXACT_SEED);
            ck_assert_msg(pp_prime(b, &g[s], &pb.p, (pp_prime_mode)mode, &e) == MS_OK, "%s", e.msg);
            rec_live(b, &g[s], codes, T, &got);
            snprintf(what, sizeof what, "%s mode %d: slot %d primed from scratch", name, mode, s);
            rec_same(what, c, &got, &ref);
        }
        rec_free(&ref);
        rec_free(&got);
        pp_persona_close(b, &per);
    }
    pp_prompt_buf_free(&pb);
    free(codes);
    lm_backend_close(b);
}
END_TEST

/* (b) The provided flags are part of the snapshot. The premise first: the
 * saved ring's next target slot (offset % R) holds the forced SILENCE
 * token, flagged provided, in every agent stream of delay >= 1 (the last
 * priming call wrote them), and stream 1 (delay 0) is not flagged there.
 * Then the first live frame, all 16 sub-steps run (dep_steps = dep_q, so
 * every sub-step's logits exist on both sides), sampled: restored as saved
 * it is bit-identical to the primed slot's; restored and then stripped of
 * every flag, the temporal step is unchanged (text logits identical: flags
 * do not enter the model input) but the depformer is not: sub-steps before
 * the first flagged stream identical, some later sub-step's logits differ,
 * and the frame's tokens differ (the agent streams of the largest delay
 * come out of the target slot: SILENCE with the flags, samples without). */
START_TEST(test_persona_flags) {
    const char *name = pp_cases[_i];
    lm_backend *b = open_case(name, 3);
    const lm_config *c = &b->cfg;
    pp_prompt_buf pb;
    load_prompt(name, c, 0, &pb);
    int T;
    int *codes = load_codes(name, &T);
    ms_error e = {0};
    lmgen_slot g[3];
    init_slot(b, &g[0], 0, 0, EXACT_SEED);
    ck_assert_msg(pp_prime(b, &g[0], &pb.p, PP_PRIME_PREFILL, &e) == MS_OK, "%s", e.msg);
    pp_persona per;
    ck_assert_msg(pp_persona_save(b, &g[0], &per, &e) == MS_OK, "%s", e.msg);
    int tgt = (int)(per.st.offset % per.st.ring), first_flag = 0;
    for (int k = 1; k <= PP_SIDE_CODEBOOKS; k++) {
        int want = c->delays[k] >= 1;
        ck_assert_msg(per.st.provided[k][tgt] == want, "%s: stream %d flag %d at the next target", name, k,
                      per.st.provided[k][tgt]);
        if (want) ck_assert_int_eq(per.st.tokens[k][tgt], pb.p.silence[k - 1]);
        if (want && !first_flag) first_flag = k;
    }
    ck_assert_int_gt(first_flag, 0);
    rec ref, with, without;
    rec_alloc(c, 1, &ref);
    rec_alloc(c, 1, &with);
    rec_alloc(c, 1, &without);
    g[0].dep_steps = c->dep_q;
    rec_live(b, &g[0], codes, T, &ref);
    for (int s = 1; s < 3; s++) {
        init_slot(b, &g[s], s, 0, EXACT_SEED);
        g[s].dep_steps = c->dep_q;
        ck_assert_msg(pp_persona_load(b, &per, &g[s], &e) == MS_OK, "%s", e.msg);
    }
    memset(g[2].provided, 0, sizeof g[2].provided);   /* the flags dropped */
    rec_live(b, &g[1], codes, T, &with);
    rec_live(b, &g[2], codes, T, &without);
    rec_same("restored with its flags", c, &with, &ref);
    ck_assert(without.t.has[0]);
    ck_assert_msg(memcmp(without.tl, ref.tl, sizeof(float) * c->text_card) == 0, "%s: text logits changed", name);
    size_t nc = (size_t)c->card;
    ck_assert_msg(memcmp(without.al, ref.al, sizeof(float) * nc * first_flag) == 0,
                  "%s: sub-steps before %d changed", name, first_flag);
    long d = first_diff(without.al + nc * first_flag, ref.al + nc * first_flag, nc * (c->dep_q - first_flag));
    ck_assert_msg(d >= 0, "%s: no flag dropped changed the depformer's logits", name);
    int ntok = 0;
    for (int k = 0; k < PP_OUT_TOKENS; k++) ntok += without.t.out[0][k] != ref.t.out[0][k];
    ck_assert_msg(ntok > 0, "%s: the first frame's tokens are the same without the flags", name);
    if (getenv("CHECK_PP_VERBOSE"))
        fprintf(stderr, "%s: flags dropped: first differing sub-step %ld, %d of %d tokens of the first frame differ\n",
                name, first_flag + d / c->card, ntok, PP_OUT_TOKENS);
    rec_free(&ref);
    rec_free(&with);
    rec_free(&without);
    pp_persona_close(b, &per);
    pp_prompt_buf_free(&pb);
    free(codes);
    lm_backend_close(b);
}
END_TEST

/* (c) A restore touches only its own slot. Slot 1 (between slots 0 and 2
 * in the backend's memory), primed and stepped live, sampled, 2 * T steps
 * alone: the reference. Again from scratch with, after its 2nd step, the
 * persona loaded into slot 0 (pp_persona_load), then a job restoring it
 * into slot 2 one layer a chunk with one step of slot 1 between chunks,
 * then slots 0 and 2 stepped live between slot 1's steps: slot 1's frames
 * and logits bit-identical to the reference (its rows of positions the
 * restores wrote elsewhere are still in its attention window then). */
START_TEST(test_restore_isolated) {
    const char *name = pp_cases[_i];
    lm_backend *b = open_case(name, 3);
    const lm_config *c = &b->cfg;
    pp_prompt_buf pb, ps;
    load_prompt(name, c, 0, &pb);
    load_prompt(name, c, 1, &ps);
    int T;
    int *codes = load_codes(name, &T);
    int N = 2 * T < MAXT ? 2 * T : MAXT;
    ms_error e = {0};
    lmgen_slot g[3];
    /* the persona: another prompt (the saved voice), another seed */
    init_slot(b, &g[0], 0, 0, OTHER_SEED);
    ck_assert_msg(pp_prime(b, &g[0], &ps.p, PP_PRIME_PREFILL, &e) == MS_OK, "%s", e.msg);
    pp_persona per;
    ck_assert_msg(pp_persona_save(b, &g[0], &per, &e) == MS_OK, "%s", e.msg);
    rec ref, got, junk;
    rec_alloc(c, N, &ref);
    rec_alloc(c, N, &got);
    rec_alloc(c, MAXT, &junk);
    for (int run = 0; run < 2; run++) {
        rec *r = run ? &got : &ref;
        init_slot(b, &g[1], 1, 0, EXACT_SEED);
        ck_assert_msg(pp_prime(b, &g[1], &pb.p, PP_PRIME_PREFILL, &e) == MS_OK, "%s", e.msg);
        pp_job *j = NULL;
        int done = 0, others = 0;
        for (int t = 0; t < N; t++) {
            if (run && t == 2) {
                init_slot(b, &g[0], 0, 0, OTHER_SEED);
                ck_assert_msg(pp_persona_load(b, &per, &g[0], &e) == MS_OK, "%s", e.msg);
                init_slot(b, &g[2], 2, 0, OTHER_SEED);
                j = pp_job_restore(b, &per, &g[2], 1, &e);
                ck_assert_msg(j != NULL, "%s", e.msg);
            }
            if (j && !done) {
                ck_assert_msg(pp_job_run(j, &done, &e) == MS_OK, "%s", e.msg);
            } else if (j && others < MAXT) {   /* slots 0 and 2 live, in their own calls */
                rec_step(b, &g[0], codes, T, others, &junk, others);
                rec_step(b, &g[2], codes, T, others, &junk, others);
                others++;
            }
            rec_step(b, &g[1], codes, T, t, r, t);
        }
        if (run) {
            ck_assert(done && others > 0);
            pp_job_free(j);
        }
    }
    char what[96];
    snprintf(what, sizeof what, "%s: slot 1 beside restores into slots 0 and 2", name);
    rec_same(what, c, &got, &ref);
    rec_free(&ref);
    rec_free(&got);
    rec_free(&junk);
    pp_persona_close(b, &per);
    pp_prompt_buf_free(&pb);
    pp_prompt_buf_free(&ps);
    free(codes);
    lm_backend_close(b);
}
END_TEST

/* the daemon's entry (lmgen_step_batch) steps PersonaPlex slots their way:
 * two fresh slots in one batch, each the reference live trace */
START_TEST(test_lmgen_dispatch) {
    const char *name = pp_cases[_i];
    lm_backend *b = open_case(name, 2);
    int T;
    int *codes = load_codes(name, &T);
    trace ref, got[2];
    load_trace(name, "live.jsonl", &ref);
    lmgen_slot g0, g1;
    init_slot(b, &g0, 0, 1, 0);
    init_slot(b, &g1, 1, 1, 0);
    lmgen_slot *gg[2] = {&g1, &g0};
    ms_error e = {0};
    for (int t = 0; t < T; t++) {
        int u[2 * PP_SIDE_CODEBOOKS], out[2 * PP_OUT_TOKENS], has[2];
        memcpy(u, codes + t * PP_SIDE_CODEBOOKS, sizeof(int) * PP_SIDE_CODEBOOKS);
        memcpy(u + PP_SIDE_CODEBOOKS, codes + t * PP_SIDE_CODEBOOKS, sizeof(int) * PP_SIDE_CODEBOOKS);
        ck_assert_msg(lmgen_step_batch(b, gg, 2, u, out, has, NULL, NULL, &e) == MS_OK, "%s", e.msg);
        for (int s = 0; s < 2; s++) {
            got[s].has[t] = has[s];
            memcpy(got[s].out[t], out + s * PP_OUT_TOKENS, sizeof(int) * PP_OUT_TOKENS);
        }
    }
    got[0].n = got[1].n = T;
    cmp_trace("lmgen_step_batch slot 1", &got[0], &ref);
    cmp_trace("lmgen_step_batch slot 0", &got[1], &ref);
    free(codes);
    lm_backend_close(b);
}
END_TEST


static void write_tmp(const char *file, const char *text, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s", check_tmp, file);
    FILE *f = fopen(path, "w");
    ck_assert(f != NULL);
    fputs(text, f);
    fclose(f);
}

START_TEST(test_hostile) {
    check_tmp_make();
    ms_error e = {0};
    /* a Kyutai model cannot be stepped PersonaPlex's way */
    lm_config kc;
    ck_assert_int_eq(lm_config_load(&kc, LM_FIX_DIR "/ring_f32/config.json", &e), MS_OK);
    ck_assert_int_eq(pp_check_config(&kc, &e), MS_ERR_UNSUPPORTED);
    /* PersonaPlex's window is context - 1 positions: a context of 1 is refused */
    kc.variant = LM_VARIANT_PERSONAPLEX;
    kc.context = 1;
    ck_assert_int_eq(lm_config_finish(&kc, &e), MS_ERR_RANGE);
    kc.context = 2;
    ck_assert_int_eq(lm_config_finish(&kc, &e), MS_OK);
    ck_assert_int_eq(kc.window, 1);
    lm_backend *b = open_case("pp_d1", 2);
    const lm_config *c = &b->cfg;
    lmgen_slot g;
    init_slot(b, &g, 0, 1, 0);
    int user[PP_SIDE_CODEBOOKS] = {1, 2, 3, 4, 5, 6, 7, c->card}, out[PP_OUT_TOKENS], has;
    lmgen_slot before = g;
    ck_assert_int_eq(pp_step_users(b, (lmgen_slot *[]){&g}, 1, user, out, &has, NULL, NULL, &e), MS_ERR_RANGE);
    ck_assert_msg(strstr(e.msg, "user code 7"), "%s", e.msg);
    same_state(&g, &before);
    pp_input in = {.user = user, .agent = NULL, .text = c->text_card};
    user[7] = 0;
    ck_assert_int_eq(pp_step_batch(b, (lmgen_slot *[]){&g}, 1, &in, out, &has, NULL, NULL, &e), MS_ERR_RANGE);
    lmgen_slot twin = g;   /* the same backend slot twice in one call */
    ck_assert_int_eq(pp_step_users(b, (lmgen_slot *[]){&g, &twin}, 2, (int[16]){0}, (int[34]){0}, (int[2]){0}, NULL,
                                   NULL, &e),
                     MS_ERR_ARG);
    g.dep_steps = 5;
    ck_assert_int_eq(pp_step_users(b, (lmgen_slot *[]){&g}, 1, user, out, &has, NULL, NULL, &e), MS_ERR_RANGE);
    g.dep_steps = -1;
    /* two live steps, then a prime by prefill would keep samples: refused */
    ck_assert_int_eq(pp_step_users(b, (lmgen_slot *[]){&g}, 1, user, out, &has, NULL, NULL, &e), MS_OK);
    ck_assert_int_eq(pp_step_users(b, (lmgen_slot *[]){&g}, 1, user, out, &has, NULL, NULL, &e), MS_OK);
    pp_prompt p;
    pp_prompt_init(&p);
    int sil[PP_SIDE_CODEBOOKS] = {0}, sine[PP_SIDE_CODEBOOKS] = {1, 1, 1, 1, 1, 1, 1, 1};
    p.silence = sil;
    p.sine = sine;
    before = g;
    ck_assert_int_eq(pp_prime(b, &g, &p, PP_PRIME_PREFILL, &e), MS_ERR_STATE);
    same_state(&g, &before);
    ck_assert_int_eq((int)lm_backend_pos(b, 0), 1);
    /* by steps it is allowed (the reference does it) */
    ck_assert_msg(pp_prime(b, &g, &p, PP_PRIME_STEPS, &e) == MS_OK, "%s", e.msg);
    /* the released Mimi's tokens do not fit a card of 32 */
    pp_prompt_init(&p);
    ck_assert_int_eq(pp_prime(b, &g, &p, PP_PRIME_STEPS, &e), MS_ERR_RANGE);
    /* backend slot and bookkeeping out of step */
    ck_assert_int_eq(lm_backend_reset_slot(b, 0, &e), MS_OK);
    ck_assert_int_eq(pp_step_users(b, (lmgen_slot *[]){&g}, 1, user, out, &has, NULL, NULL, &e), MS_ERR_STATE);
    p.silence = sil;
    p.sine = sine;
    ck_assert_int_eq(pp_prime(b, &g, &p, PP_PRIME_PREFILL, &e), MS_ERR_STATE);
    /* too many calls; a text id out of range */
    init_slot(b, &g, 0, 1, 0);
    p.voice = sil;
    p.n_voice = PP_PRIME_MAX_CALLS;
    ck_assert_int_eq(pp_prime(b, &g, &p, PP_PRIME_PREFILL, &e), MS_ERR_LIMIT);
    p.voice = NULL;
    p.n_voice = 0;
    int txt[2] = {3, c->text_card};
    p.text = txt;
    p.n_text = 2;
    ck_assert_int_eq(pp_prime(b, &g, &p, PP_PRIME_PREFILL, &e), MS_ERR_RANGE);
    /* saved voice: non-finite rows, ring values out of range */
    int cache[PP_STREAMS * 4];
    for (int i = 0; i < PP_STREAMS * 4; i++) cache[i] = 0;
    float *emb = calloc((size_t)2 * c->dim, sizeof(float));
    emb[c->dim + 3] = NAN;
    ck_assert_int_eq(pp_replay_embeddings(b, &g, emb, 2, cache, PP_PRIME_PREFILL, &e), MS_ERR_FORMAT);
    emb[c->dim + 3] = 0;
    cache[4 * 5 + 1] = c->card + 1;
    ck_assert_int_eq(pp_replay_embeddings(b, &g, emb, 2, cache, PP_PRIME_PREFILL, &e), MS_ERR_RANGE);
    ck_assert_int_eq(g.offset, 0);
    free(emb);
    /* prompt files */
    pp_prompt_buf pb;
    pp_prompt_paths pa = {.silence_frames = -1};
    char path[256];
    write_tmp("v1.txt", "1 2 3 4 5 6 7 8\n1 2 3\n", path, sizeof path);
    pa.voice_codes = path;
    ck_assert_int_eq(pp_prompt_load(&pb, &pa, c, &e), MS_ERR_FORMAT);
    pp_prompt_buf_free(&pb);
    write_tmp("v2.txt", "1 2 3 4 5 6 7 99\n", path, sizeof path);
    ck_assert_int_eq(pp_prompt_load(&pb, &pa, c, &e), MS_ERR_RANGE);
    ck_assert_msg(strstr(e.msg, "v2.txt:1"), "%s", e.msg);
    pp_prompt_buf_free(&pb);
    write_tmp("v3.txt", "1 2 x\n", path, sizeof path);
    ck_assert_int_eq(pp_prompt_load(&pb, &pa, c, &e), MS_ERR_FORMAT);
    pp_prompt_buf_free(&pb);
    pa.voice_codes = NULL;
    write_tmp("s.txt", "1 2 3 4 5 6 7 8 9\n", path, sizeof path);
    pa.silence = path;
    ck_assert_int_eq(pp_prompt_load(&pb, &pa, c, &e), MS_ERR_LIMIT);
    pp_prompt_buf_free(&pb);
    pa.silence = NULL;
    pa.voice_saved = PP_FIX_DIR "/pp_d2_wrap/voice.safetensors";   /* another model's width */
    ck_assert_int_ne(pp_prompt_load(&pb, &pa, c, &e), MS_OK);
    pp_prompt_buf_free(&pb);
    pa.voice_saved = "/nonexistent.safetensors";
    ck_assert_int_eq(pp_prompt_load(&pb, &pa, c, &e), MS_ERR_IO);
    pp_prompt_buf_free(&pb);
    lm_backend_close(b);
    check_tmp_remove();
}
END_TEST



static Suite *make_suite(void) {
    Suite *s = suite_create("pp");
    TCase *tc = tcase_new("pp");
    tcase_add_test(tc, test_manifest);
    tcase_add_loop_test(tc, test_live_parity, 0, PP_NCASES);
    tcase_add_loop_test(tc, test_window_differs, 0, PP_NCASES);
    tcase_add_loop_test(tc, test_skip_substeps_sampled, 0, PP_NCASES);
    tcase_add_loop_test(tc, test_prime_prefill_vs_steps, 0, PP_NCASES);
    tcase_add_loop_test(tc, test_replay, 0, PP_NCASES);
    tcase_add_loop_test(tc, test_persona, 0, PP_NCASES);
    tcase_add_loop_test(tc, test_lmgen_dispatch, 0, PP_NCASES);
    tcase_add_loop_test(tc, test_jobs, 0, PP_NCASES);
    tcase_add_loop_test(tc, test_persona_exact, 0, PP_NCASES);
    tcase_add_loop_test(tc, test_persona_flags, 0, PP_NCASES);
    tcase_add_loop_test(tc, test_restore_isolated, 0, PP_NCASES);
    tcase_add_test(tc, test_hostile);

    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN
