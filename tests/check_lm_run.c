/* check_lm_run.c - build/moshi-run driven as users run it: greedy output
 * byte for byte equal to the official traces, sampling reproducible, and
 * hostile input (missing tensor, wrong shape, codes out of range,
 * malformed lines, unreadable files, bad options, PersonaPlex) refused
 * with exit status 1 or 2 and a message that says what and where. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_main.h"
#include "json.h"
#include "st.h"
#include "check_lm_util.h"

#include "check_run_util.h"

static void write_file(const char *name, const char *text) {
    char p[256];
    snprintf(p, sizeof p, "%s/%s", check_tmp, name);
    FILE *f = fopen(p, "w");
    ck_assert(f != NULL);
    fputs(text, f);
    fclose(f);
}

START_TEST(test_greedy_traces) {
    const char *name = lm_fix_cases[_i];
    char args[512], p[256];
    snprintf(args, sizeof args, "--lm " LM_FIX_DIR "/%s --codes-in " LM_FIX_DIR "/%s/codes.txt --greedy", name, name);
    ck_assert_msg(run(args) == 0, "%s: %s", name, err_txt);
    snprintf(p, sizeof p, LM_FIX_DIR "/%s/trace.jsonl", name);
    size_t n;
    char *ref = slurp(p, &n);
    ck_assert(ref != NULL);
    /* the official trace was written by json.dumps with the same spacing */
    if (strcmp(out_txt, ref) != 0) {
        const char *a = out_txt, *b = ref;
        int line = 1;
        while (*a && *a == *b) { if (*a == '\n') line++; a++; b++; }
        ck_abort_msg("%s: first difference on line %d:\n ours: %.80s\n ref:  %.80s", name, line, a, b);
    }
    free(ref);
    /* --out writes the same to a file, nothing to stdout */
    snprintf(args, sizeof args, "--lm " LM_FIX_DIR "/%s --codes-in " LM_FIX_DIR "/%s/codes.txt --greedy --out %s/o.jsonl",
             name, name, check_tmp);
    ck_assert_int_eq(run(args), 0);
    ck_assert_str_eq(out_txt, "");
}
END_TEST

/* --weights int8, --kv int8 and both: the greedy trace byte for byte equal
 * to the official code's on fake-quantized weights and K/V
 * (tests/fixtures/lm_q8, gen_lm_q8.py); the start-up line names the
 * schemes that ran. Without the flags the same checkpoints differ from
 * those traces (the flags are what makes them match). */
START_TEST(test_q8_flags) {
    static const struct { const char *name, *flags, *says; int plain_differs; } q8[] = {
        {"w8_bf16", "--weights int8", "weights=int8 kv=f32", 1},
        {"kv8_f32", "--kv int8", "weights=f32 kv=int8", 1},
        {"w8kv8_f32", "--weights int8 --kv int8", "weights=int8 kv=int8", 1},
        {"q8_kv8", "--kv int8", "weights=int8 kv=int8", 0},   /* a q8 checkpoint runs int8 as stored */
    };
    for (size_t i = 0; i < sizeof q8 / sizeof q8[0]; i++) {
        char args[512], p[256];
        snprintf(p, sizeof p, "tests/fixtures/lm_q8/%s/trace.jsonl", q8[i].name);
        size_t n;
        char *ref = slurp(p, &n);
        ck_assert(ref != NULL);
        snprintf(args, sizeof args, "--lm tests/fixtures/lm_q8/%s --codes-in tests/fixtures/lm_q8/%s/codes.txt --greedy %s",
                 q8[i].name, q8[i].name, q8[i].flags);
        ck_assert_msg(run(args) == 0, "%s: %s", q8[i].name, err_txt);
        ck_assert_msg(strcmp(out_txt, ref) == 0, "%s %s: trace differs from the official one", q8[i].name, q8[i].flags);
        ck_assert_msg(strstr(err_txt, q8[i].says) != NULL, "%s: start-up line lacks '%s': %s", q8[i].name, q8[i].says,
                      err_txt);
        if (q8[i].plain_differs) {
            snprintf(args, sizeof args, "--lm tests/fixtures/lm_q8/%s --codes-in tests/fixtures/lm_q8/%s/codes.txt --greedy",
                     q8[i].name, q8[i].name);
            ck_assert_int_eq(run(args), 0);
            ck_assert_msg(strcmp(out_txt, ref) != 0, "%s: the float run already matches: the case tests nothing",
                          q8[i].name);
        }
        free(ref);
    }
    /* a q8 checkpoint cannot run in bf16: exit 1 with the reason */
    ck_assert_int_eq(run("--lm tests/fixtures/lm_q8/q8_kv8 --codes-in tests/fixtures/lm_q8/q8_kv8/codes.txt --greedy "
                         "--weights bf16"), 1);
    ck_assert_msg(strstr(err_txt, "bf16") != NULL, "%s", err_txt);
}
END_TEST

/* --logits-out: the logits of every step, as the official ones (1e-4) */
START_TEST(test_logits_out) {
    char args[512], path[256];
    snprintf(path, sizeof path, "%s/l.safetensors", check_tmp);
    snprintf(args, sizeof args, "--lm " LM_FIX_DIR "/hs4_f32 --codes-in " LM_FIX_DIR "/hs4_f32/codes.txt --greedy --logits-out %s", path);
    ck_assert_msg(run(args) == 0, "%s", err_txt);
    ms_error e = {0};
    st_file *ours = st_open(path, &e), *ref = st_open(LM_FIX_DIR "/hs4_f32/logits.safetensors", &e);
    ck_assert_msg(ours && ref, "%s", e.msg);
    const char *names[] = {"text_logits", "audio_logits"};
    for (int k = 0; k < 2; k++) {
        const st_tensor *a = st_find(ours, names[k]), *b = st_find(ref, names[k]);
        ck_assert(a && b && a->nel == b->nel && a->ndim == b->ndim);
        float *x = malloc(sizeof(float) * a->nel), *y = malloc(sizeof(float) * b->nel);
        st_to_f32(a, 0, a->nel, x);
        st_to_f32(b, 0, b->nel, y);
        double md = 0, mr = 0;
        for (uint64_t i = 0; i < a->nel; i++) {
            double d = x[i] - (double)y[i];
            if (d < 0) d = -d;
            if (!(d <= md)) md = d;
            if ((y[i] < 0 ? -y[i] : y[i]) > mr) mr = y[i] < 0 ? -y[i] : y[i];
        }
        ck_assert_msg(md <= 1e-4 * mr, "%s: max diff %.3g of %.3g", names[k], md, mr);
        free(x);
        free(y);
    }
    st_close(ours);
    st_close(ref);
}
END_TEST

START_TEST(test_sampling) {
    const char *a1 = "--lm " LM_FIX_DIR "/ring_f32 --codes-in " LM_FIX_DIR "/ring_f32/codes.txt --seed 5 --temp 0.8 --temp-text 0.7 --topk 10 --topk-text 5";
    ck_assert_msg(run(a1) == 0, "%s", err_txt);
    char first[sizeof out_txt];
    strcpy(first, out_txt);
    ck_assert_int_eq(run(a1), 0);
    ck_assert_str_eq(out_txt, first);   /* same seed, same output */
    ck_assert_int_eq(run("--lm " LM_FIX_DIR "/ring_f32 --codes-in " LM_FIX_DIR "/ring_f32/codes.txt --seed 6 --temp 0.8 --temp-text 0.7 --topk 10 --topk-text 5"), 0);
    ck_assert_str_ne(out_txt, first);
    /* every line one JSON object with step and out */
    int lines = 0;
    for (char *l = first, *nl; *l; l = nl + 1) {
        nl = strchr(l, '\n');
        ck_assert(nl != NULL);
        ms_error e = {0};
        js_value *j = js_parse(l, (size_t)(nl - l), &e);
        ck_assert_msg(j && j->type == JS_OBJECT, "line %d: %s", lines, e.msg);
        ck_assert_int_eq((int)js_get(j, "step")->i, lines);
        ck_assert(js_get(j, "out") != NULL);
        js_free(j);
        lines++;
    }
    ck_assert_int_eq(lines, 24);
}
END_TEST

START_TEST(test_hostile_codes) {
    static const struct { const char *codes; const char *needle; } cases[] = {
        {"1 2 3 4 5 6 7 8\n1 2 3 4 5 6 7 32\n", "c.txt:2: code 8 = 32 out of range"},
        {"1 2 3 4 5 6 7 -1\n", "c.txt:1: code 8 = -1 out of range"},
        {"1 2 3 4 5 6 7\n", "c.txt:1: 7 codes, expected 8"},
        {"1 2 3 4 5 6 7 8 9\n", "c.txt:1: more than 8 codes"},
        {"1 2 3 x 5 6 7 8\n", "c.txt:1: code 4: not an integer"},
        {"1 2 3 4 5 6 7 8\n\n", "c.txt:2: 0 codes"},
        {"1 2 3 4.5 5 6 7 8\n", "c.txt:1: code 4: not an integer"},
        {"99999999999999999999 2 3 4 5 6 7 8\n", "c.txt:1: code 1"},
    };
    char args[512];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_file("c.txt", cases[i].codes);
        snprintf(args, sizeof args, "--lm " LM_FIX_DIR "/ring_f32 --codes-in %s/c.txt --greedy", check_tmp);
        ck_assert_msg(run(args) == 1, "case %zu accepted", i);
        ck_assert_msg(strstr(err_txt, cases[i].needle), "case %zu: stderr: %s", i, err_txt);
    }
    /* a long line */
    char *big = malloc(10000);
    memset(big, '1', 9998);
    big[9998] = '\n';
    big[9999] = 0;
    write_file("c.txt", big);
    free(big);
    snprintf(args, sizeof args, "--lm " LM_FIX_DIR "/ring_f32 --codes-in %s/c.txt --greedy", check_tmp);
    ck_assert_int_eq(run(args), 1);
    ck_assert_msg(strstr(err_txt, "longer than"), "%s", err_txt);
    /* a NUL byte, and a last line without its newline (accepted) */
    {
        char pth[256];
        snprintf(pth, sizeof pth, "%s/c.txt", check_tmp);
        FILE *f = fopen(pth, "w");
        fwrite("1 2 3 4 5 6 7 8\n1 2\0003 4 5 6 7 8\n", 1, 33, f);
        fclose(f);
        snprintf(args, sizeof args, "--lm " LM_FIX_DIR "/ring_f32 --codes-in %s/c.txt --greedy", check_tmp);
        ck_assert_int_eq(run(args), 1);
        ck_assert_msg(strstr(err_txt, "c.txt:2: NUL byte"), "%s", err_txt);
        /* the fixture's first 3 frames, the last without newline: the
         * official trace's first 3 lines */
        size_t n;
        char *codes = slurp(LM_FIX_DIR "/ring_f32/codes.txt", &n), *ref = slurp(LM_FIX_DIR "/ring_f32/trace.jsonl", &n);
        ck_assert(codes && ref);
        char *e3 = codes;
        for (int k = 0; k < 3; k++) e3 = strchr(e3, '\n') + 1;
        e3[-1] = 0;
        write_file("c.txt", codes);
        char *r3 = ref;
        for (int k = 0; k < 3; k++) r3 = strchr(r3, '\n') + 1;
        *r3 = 0;
        ck_assert_int_eq(run(args), 0);
        ck_assert_str_eq(out_txt, ref);
        free(codes);
        free(ref);
    }
    /* unreadable codes file: missing, a directory */
    snprintf(args, sizeof args, "--lm " LM_FIX_DIR "/ring_f32 --codes-in %s/none.txt --greedy", check_tmp);
    ck_assert_int_eq(run(args), 1);
    ck_assert_msg(strstr(err_txt, "none.txt: cannot open"), "%s", err_txt);
    snprintf(args, sizeof args, "--lm " LM_FIX_DIR "/ring_f32 --codes-in %s --greedy", check_tmp);
    ck_assert_int_eq(run(args), 1);
    ck_assert_msg(strstr(err_txt, check_tmp), "%s", err_txt);
}
END_TEST

START_TEST(test_hostile_model) {
    static const struct { mutation mu; const char *extra; const char *needle; } cases[] = {
        {{.drop = "depformer_emb.2.weight"}, "", "tensor depformer_emb.2.weight"},
        {{.reshape = "transformer.layers.0.gating.linear_out.weight"}, "", "transformer.layers.0.gating.linear_out.weight"},
        {{.dep_steps = 16}, "--variant kyutai", "has 16 steps"},   /* 16 steps = PersonaPlex, forced to Kyutai */
        {{.dep_steps = 0}, "--variant personaplex", "PersonaPlex"},
    };
    char args[512], d[256];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(d, sizeof d, "%s/m%zu", check_tmp, i);
        ck_assert_int_eq(mkdir(d, 0700), 0);
        write_mutant(d, &cases[i].mu);
        snprintf(args, sizeof args, "--lm %s --codes-in " LM_FIX_DIR "/ring_f32/codes.txt --greedy %s", d, cases[i].extra);
        ck_assert_msg(run(args) == 1, "case %zu accepted", i);
        ck_assert_msg(strstr(err_txt, cases[i].needle), "case %zu: stderr: %s", i, err_txt);
        ck_assert_str_eq(out_txt, "");
    }
    /* a bad config.json, a missing directory */
    snprintf(d, sizeof d, "%s/m0", check_tmp);
    write_file("m0/config.json", "{\"norm\": \"layer_norm\"}");
    snprintf(args, sizeof args, "--lm %s --codes-in " LM_FIX_DIR "/ring_f32/codes.txt --greedy", d);
    ck_assert_int_eq(run(args), 1);
    ck_assert_msg(strstr(err_txt, "config.json: key \"norm\""), "%s", err_txt);
    ck_assert_int_eq(run("--lm /nonexistent --codes-in " LM_FIX_DIR "/ring_f32/codes.txt --greedy"), 1);
    ck_assert_msg(strstr(err_txt, "/nonexistent/model.safetensors"), "%s", err_txt);
    /* a truncated safetensors file */
    snprintf(d, sizeof d, "%s/m1/model.safetensors", check_tmp);
    ck_assert_int_eq(truncate(d, 5000), 0);
    snprintf(args, sizeof args, "--lm %s/m1 --codes-in " LM_FIX_DIR "/ring_f32/codes.txt --greedy", check_tmp);
    ck_assert_int_eq(run(args), 1);
    ck_assert_msg(strstr(err_txt, "model.safetensors"), "%s", err_txt);
}
END_TEST

START_TEST(test_bad_options) {
    static const char *cases[] = {
        "",
        "--lm " LM_FIX_DIR "/ring_f32",
        "--lm " LM_FIX_DIR "/ring_f32 --codes-in x --temp abc",
        "--lm " LM_FIX_DIR "/ring_f32 --codes-in x --topk -3",
        "--lm " LM_FIX_DIR "/ring_f32 --codes-in x --seed -1",
        "--lm " LM_FIX_DIR "/ring_f32 --codes-in x --greedy --seed 3",
        "--lm " LM_FIX_DIR "/ring_f32 --codes-in x --variant other",
        "--lm " LM_FIX_DIR "/ring_f32 --codes-in x --frobnicate",
        "--lm " LM_FIX_DIR "/ring_f32 --codes-in",
        "--lm " LM_FIX_DIR "/ring_f32 --codes-in x --weights int4",
        "--lm " LM_FIX_DIR "/ring_f32 --codes-in x --kv fp8",
        "--lm " LM_FIX_DIR "/ring_f32 --codes-in x --weights",
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ck_assert_msg(run(cases[i]) == 2, "case %zu: exit status", i);
        ck_assert_msg(strlen(err_txt) > 0 && strlen(out_txt) == 0, "case %zu", i);
    }
}
END_TEST

/* protobuf varint */
static size_t put_varint(unsigned char *b, size_t v) {
    size_t n = 0;
    do {
        b[n] = (unsigned char)(v & 0x7f);
        v >>= 7;
        if (v) b[n] |= 0x80;
        n++;
    } while (v);
    return n;
}

/* --tokenizer: a SentencePiece model of 48 pieces "\u2581wN" written here
 * (ModelProto field 1 = SentencePiece{piece = 1}); each step's "text" is
 * the piece of its out[0] with U+2581 as a space, "" for PAD 3 / EPAD 0 */
START_TEST(test_tokenizer) {
    char path[256];
    snprintf(path, sizeof path, "%s/t.model", check_tmp);
    FILE *f = fopen(path, "wb");
    ck_assert(f != NULL);
    for (int i = 0; i < 48; i++) {
        char piece[32];
        int pl = snprintf(piece, sizeof piece, "\xe2\x96\x81w%d", i);
        unsigned char msg[64], out[80];
        size_t m = 0, o = 0;
        msg[m++] = 0x0a;
        m += put_varint(msg + m, (size_t)pl);
        memcpy(msg + m, piece, (size_t)pl);
        m += (size_t)pl;
        out[o++] = 0x0a;
        o += put_varint(out + o, m);
        memcpy(out + o, msg, m);
        o += m;
        fwrite(out, 1, o, f);
    }
    fclose(f);
    char args[512];
    snprintf(args, sizeof args, "--lm " LM_FIX_DIR "/ring_f32 --codes-in " LM_FIX_DIR "/ring_f32/codes.txt --greedy --tokenizer %s", path);
    ck_assert_msg(run(args) == 0, "%s", err_txt);
    int lines = 0, texts = 0;
    for (char *l = out_txt, *nl; *l; l = nl + 1) {
        nl = strchr(l, '\n');
        ms_error e = {0};
        js_value *j = js_parse(l, (size_t)(nl - l), &e);
        ck_assert(j != NULL);
        const js_value *o = js_get(j, "out"), *t = js_get(j, "text");
        if (o->type == JS_NULL) {
            ck_assert_ptr_null(t);
        } else {
            int id = (int)js_at(o, 0)->i;
            char want[32];
            if (id == 0 || id == 3) want[0] = 0;
            else snprintf(want, sizeof want, " w%d", id);
            ck_assert_msg(t && !strcmp(t->str, want), "step %d: text for id %d", lines, id);
            texts++;
        }
        js_free(j);
        lines++;
    }
    ck_assert_int_eq(lines, 24);
    ck_assert_int_eq(texts, 23);
    /* an unreadable tokenizer file */
    snprintf(args, sizeof args, "--lm " LM_FIX_DIR "/ring_f32 --codes-in " LM_FIX_DIR "/ring_f32/codes.txt --tokenizer %s/none.model", check_tmp);
    ck_assert_int_eq(run(args), 1);
    ck_assert_msg(strstr(err_txt, "none.model"), "%s", err_txt);
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("lm_run");
    TCase *tc = tcase_new("core");
    tcase_add_checked_fixture(tc, check_tmp_make, check_tmp_remove);
    tcase_add_loop_test(tc, test_greedy_traces, 0, LM_FIX_NCASES);
    tcase_add_test(tc, test_logits_out);
    tcase_add_test(tc, test_sampling);
    tcase_add_test(tc, test_hostile_codes);
    tcase_add_test(tc, test_hostile_model);
    tcase_add_test(tc, test_bad_options);
    tcase_add_test(tc, test_q8_flags);
    tcase_add_test(tc, test_tokenizer);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN
