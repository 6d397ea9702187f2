/* check_pp_run.c - build/moshi-run on PersonaPlex checkpoints: the variant
 * detected (and reported on stderr), greedy output byte for byte equal to
 * the reference traces of tests/fixtures/pp (live from a fresh state, and
 * after a prime from voice codes or from the saved voice, by prefill and by
 * steps), the --variant override, and bad prime options refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_lm_util.h"
#include "check_main.h"

#define PP_FIX_DIR "tests/fixtures/pp"
static const char *const pp_cases[] = {"pp_d1", "pp_d2_wrap", "pp_long_wrap"};
#define PP_NCASES 3

#include "check_run_util.h"

static void same_as(const char *what, const char *ref_path) {
    size_t n;
    char *ref = slurp(ref_path, &n);
    ck_assert_msg(ref != NULL, "%s unreadable", ref_path);
    if (strcmp(out_txt, ref) != 0) {
        const char *a = out_txt, *b = ref;
        int line = 1;
        while (*a && *a == *b) {
            if (*a == '\n') line++;
            a++;
            b++;
        }
        ck_abort_msg("%s: first difference on line %d:\n ours: %.100s\n ref:  %.100s", what, line, a, b);
    }
    free(ref);
}

/* the first n lines of the case's codes.txt, as a file in check_tmp */
static void head_codes(const char *name, int n, char *path, size_t cap) {
    char src[256];
    snprintf(src, sizeof src, PP_FIX_DIR "/%s/codes.txt", name);
    snprintf(path, cap, "%s/codes_%d.txt", check_tmp, n);
    size_t len;
    char *t = slurp(src, &len);
    ck_assert(t != NULL);
    FILE *f = fopen(path, "w");
    ck_assert(f != NULL);
    int lines = 0;
    for (size_t i = 0; i < len && lines < n; i++) {
        fputc(t[i], f);
        lines += t[i] == '\n';
    }
    fclose(f);
    free(t);
}

START_TEST(test_live) {
    const char *name = pp_cases[_i];
    char args[512], ref[256];
    snprintf(args, sizeof args, "--lm " PP_FIX_DIR "/%s --codes-in " PP_FIX_DIR "/%s/codes.txt --greedy", name, name);
    ck_assert_msg(run(args) == 0, "%s: %s", name, err_txt);
    ck_assert_msg(strstr(err_txt, "variant=personaplex"), "%s", err_txt);
    snprintf(ref, sizeof ref, PP_FIX_DIR "/%s/live.jsonl", name);
    same_as(name, ref);
    /* the override names the detected variant: same output */
    snprintf(args, sizeof args, "--lm " PP_FIX_DIR "/%s --codes-in " PP_FIX_DIR "/%s/codes.txt --greedy --variant personaplex",
             name, name);
    ck_assert_msg(run(args) == 0, "%s: %s", name, err_txt);
    same_as(name, ref);
}
END_TEST

/* lines of a file */
static int count_lines(const char *path) {
    size_t len;
    char *t = slurp(path, &len);
    ck_assert_msg(t != NULL, "%s unreadable", path);
    int n = 0;
    for (size_t i = 0; i < len; i++) n += t[i] == '\n';
    free(t);
    return n;
}

/* the prime from voice codes or the saved voice, by prefill or by steps */
START_TEST(test_primed) {
    const char *name = pp_cases[_i / 4];
    int saved = (_i / 2) % 2, steps = _i % 2;
    char codes[256], args[2048], ref[256];
    snprintf(ref, sizeof ref, PP_FIX_DIR "/%s/primed.jsonl", name);
    head_codes(name, count_lines(ref), codes, sizeof codes);   /* as many live steps as the reference */
    snprintf(args, sizeof args,
             "--lm " PP_FIX_DIR "/%s --codes-in %s --greedy --%s " PP_FIX_DIR "/%s/%s --text-ids " PP_FIX_DIR
             "/%s/text_ids.txt --silence-tokens " PP_FIX_DIR "/%s/silence.txt --sine-tokens " PP_FIX_DIR
             "/%s/sine.txt --prime-mode %s",
             name, codes, saved ? "voice-saved" : "voice-codes", name, saved ? "voice.safetensors" : "voice.txt", name,
             name, name, steps ? "steps" : "prefill");
    ck_assert_msg(run(args) == 0, "%s: %s", name, err_txt);
    ck_assert_msg(strstr(err_txt, steps ? "primed by steps" : "primed by prefill"), "%s", err_txt);
    char what[128];
    snprintf(what, sizeof what, "%s saved=%d steps=%d", name, saved, steps);
    same_as(what, ref);
}
END_TEST

/* sampling: the same seed gives the same output; another seed another */
START_TEST(test_sampled) {
    char args[512], first[1 << 16];
    snprintf(args, sizeof args, "--lm " PP_FIX_DIR "/pp_d1 --codes-in " PP_FIX_DIR "/pp_d1/codes.txt --seed 5");
    ck_assert_msg(run(args) == 0, "%s", err_txt);
    snprintf(first, sizeof first, "%s", out_txt);
    ck_assert_msg(run(args) == 0, "%s", err_txt);
    ck_assert_str_eq(out_txt, first);
    snprintf(args, sizeof args, "--lm " PP_FIX_DIR "/pp_d1 --codes-in " PP_FIX_DIR "/pp_d1/codes.txt --seed 6");
    ck_assert_msg(run(args) == 0, "%s", err_txt);
    ck_assert_str_ne(out_txt, first);
}
END_TEST

START_TEST(test_refused) {
    const char *base = "--lm " PP_FIX_DIR "/pp_d1 --codes-in " PP_FIX_DIR "/pp_d1/codes.txt --greedy";
    char args[1024];
    /* Kyutai's step on a 16-step depformer has no user streams */
    snprintf(args, sizeof args, "%s --variant kyutai", base);
    ck_assert_int_eq(run(args), 1);
    ck_assert_msg(strstr(err_txt, "no user input"), "%s", err_txt);
    ck_assert_str_eq(out_txt, "");
    /* prime options on a Kyutai checkpoint */
    ck_assert_int_eq(run("--lm " LM_FIX_DIR "/ring_f32 --codes-in " LM_FIX_DIR "/ring_f32/codes.txt --greedy "
                         "--text-ids " PP_FIX_DIR "/pp_d1/text_ids.txt"),
                     1);
    ck_assert_msg(strstr(err_txt, "PersonaPlex checkpoint"), "%s", err_txt);
    /* the released Mimi's SILENCE/SINE do not fit this model's card */
    snprintf(args, sizeof args, "%s --text-ids " PP_FIX_DIR "/pp_d1/text_ids.txt", base);
    ck_assert_int_eq(run(args), 1);
    ck_assert_msg(strstr(err_txt, "SILENCE/SINE"), "%s", err_txt);
    /* a voice file with an out-of-range code, named with its line */
    char p[256];
    snprintf(p, sizeof p, "%s/v.txt", check_tmp);
    FILE *f = fopen(p, "w");
    ck_assert(f != NULL);
    fputs("1 2 3 4 5 6 7 8\n1 2 3 4 5 6 7 800\n", f);
    fclose(f);
    snprintf(args, sizeof args, "%s --voice-codes %s --silence-tokens " PP_FIX_DIR "/pp_d1/silence.txt --sine-tokens " PP_FIX_DIR "/pp_d1/sine.txt", base, p);
    ck_assert_int_eq(run(args), 1);
    ck_assert_msg(strstr(err_txt, "v.txt:2"), "%s", err_txt);
    /* both voice sources; a bad mode; a saved voice of another model */
    snprintf(args, sizeof args, "%s --voice-codes %s --voice-saved " PP_FIX_DIR "/pp_d1/voice.safetensors", base, p);
    ck_assert_int_eq(run(args), 1);
    snprintf(args, sizeof args, "%s --prime-mode fast", base);
    ck_assert_int_eq(run(args), 2);
    snprintf(args, sizeof args, "%s --voice-saved " PP_FIX_DIR "/pp_d2_wrap/voice.safetensors", base);
    ck_assert_int_eq(run(args), 1);
    ck_assert_msg(strstr(err_txt, "embeddings"), "%s", err_txt);
    /* a user line of 7 codes */
    snprintf(p, sizeof p, "%s/c.txt", check_tmp);
    f = fopen(p, "w");
    ck_assert(f != NULL);
    fputs("1 2 3 4 5 6 7\n", f);
    fclose(f);
    snprintf(args, sizeof args, "--lm " PP_FIX_DIR "/pp_d1 --codes-in %s --greedy", p);
    ck_assert_int_eq(run(args), 1);
    ck_assert_msg(strstr(err_txt, "expected 8"), "%s", err_txt);
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("pp_run");
    TCase *tc = tcase_new("pp_run");
    tcase_add_checked_fixture(tc, check_tmp_make, check_tmp_remove);
    tcase_add_loop_test(tc, test_live, 0, PP_NCASES);
    tcase_add_loop_test(tc, test_primed, 0, 4 * PP_NCASES);
    tcase_add_test(tc, test_sampled);
    tcase_add_test(tc, test_refused);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN
