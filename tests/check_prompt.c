/* check_prompt.c - the role-text wrapper (personas.md), voice names and the
 * files they map to (traversal refused), cache keys. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utime.h>

#include "check_main.h"
#include "prompt.h"

/* prompt_role_text of text, compared with want (NULL: no role phase). */
static void role(const char *text, const char *want) {
    char *out = (char *)1;
    size_t n = 99;
    ck_assert_int_eq(prompt_role_text(text, strlen(text), &out, &n), MS_OK);
    if (!want) {
        ck_assert_msg(out == NULL && n == 0, "'%s' should have no role phase", text);
        return;
    }
    ck_assert_msg(out && strcmp(out, want) == 0, "'%s' -> '%s', want '%s'", text, out ? out : "(null)", want);
    ck_assert_uint_eq(n, strlen(want));
    free(out);
}

START_TEST(test_role_text) {
    role("You are a helpful assistant.", "<system> You are a helpful assistant. <system>");
    /* white space around is stripped first (inner white space is kept) */
    role("  \t\n You are  Ada.\r\n ", "<system> You are  Ada. <system>");
    /* Unicode spaces count as Python's str.strip counts them */
    role("\xc2\xa0\xe3\x80\x80Hi\xe2\x80\x83", "<system> Hi <system>");
    /* already wrapped (after stripping): kept as it is */
    role("<system> Be brief. <system>", "<system> Be brief. <system>");
    role("  <system>Be brief.<system>  ", "<system>Be brief.<system>");
    role("<system>", "<system>");
    /* starts with the tag but does not end with it: wrapped */
    role("<system> half", "<system> <system> half <system>");
    role("half <system>", "<system> half <system> <system>");
    /* empty before stripping: no role phase; white space only is not empty */
    role("", NULL);
    role("   ", "<system>  <system>");
    /* a non-space byte that looks like one is kept */
    role("\xc2\xa1", "<system> \xc2\xa1 <system>");
    /* text with a NUL inside is taken by length */
    char *out;
    size_t n;
    ck_assert_int_eq(prompt_role_text("a\0b", 3, &out, &n), MS_OK);
    ck_assert_uint_eq(n, 3 + 18);
    ck_assert(memcmp(out, "<system> a\0b <system>", n) == 0);
    free(out);
}
END_TEST

START_TEST(test_voice_names) {
    char why[128];
    static const char *const good[] = {"NATF0.pt", "NATF0", "voice-1_b.wav", "caf\xc3\xa9.flac", "a.b.c"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        ck_assert_msg(prompt_voice_name_check(good[i], why, sizeof why) == 0, "%s: %s", good[i], why);
    static const char *const bad[] = {"", "../etc/passwd", "..", "a/b", "a\\b", "C:x", ".hidden", "a..b",
                                      "x\n", "\xff\xfe", "\xc0\xaf", "a\x7f"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        ck_assert_msg(prompt_voice_name_check(bad[i], why, sizeof why) != 0, "'%s' accepted", bad[i]);
    char longname[PROMPT_VOICE_NAME_MAX + 2];
    memset(longname, 'a', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    ck_assert_int_ne(prompt_voice_name_check(longname, why, sizeof why), 0);
    longname[PROMPT_VOICE_NAME_MAX] = '\0';
    ck_assert_int_eq(prompt_voice_name_check(longname, why, sizeof why), 0);
    ck_assert_int_eq(prompt_voice_kind_of("/v/NATF0.safetensors"), PROMPT_VOICE_SAVED);
    ck_assert_int_eq(prompt_voice_kind_of("/v/NATF0.wav"), PROMPT_VOICE_AUDIO);
    ck_assert_int_eq(prompt_voice_kind_of("safetensors"), PROMPT_VOICE_AUDIO);
}
END_TEST

static void touch(const char *dir, const char *name) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    check_write_file(p, "x", 1);
}

START_TEST(test_voice_find) {
    check_tmp_make();
    char vdir[256], p[512];
    snprintf(vdir, sizeof vdir, "%s/voices", check_tmp);
    ck_assert_int_eq(mkdir(vdir, 0755), 0);
    touch(vdir, "NATF0.safetensors");
    touch(vdir, "NATF0.wav");
    touch(vdir, "ada.flac");
    touch(vdir, "bob.ogg");
    touch(check_tmp, "secret.wav");   /* outside the voice directory */
    snprintf(p, sizeof p, "%s/dir.wav", vdir);
    ck_assert_int_eq(mkdir(p, 0755), 0);   /* not a regular file */
    ms_error e = {0};
    prompt_voice_kind k;
    char path[512], want[512];
    /* the client's extension is dropped: .pt maps to the converted file */
    ck_assert_int_eq(prompt_voice_find(vdir, "NATF0.pt", path, sizeof path, &k, &e), MS_OK);
    snprintf(want, sizeof want, "%s/NATF0.safetensors", vdir);
    ck_assert_str_eq(path, want);
    ck_assert_int_eq(k, PROMPT_VOICE_SAVED);
    ck_assert_int_eq(prompt_voice_find(vdir, "NATF0.wav", path, sizeof path, &k, &e), MS_OK);
    ck_assert_str_eq(path, want); /* the converted voice first, whatever the extension */
    ck_assert_int_eq(prompt_voice_find(vdir, "ada", path, sizeof path, &k, &e), MS_OK);
    snprintf(want, sizeof want, "%s/ada.flac", vdir);
    ck_assert_str_eq(path, want);
    ck_assert_int_eq(k, PROMPT_VOICE_AUDIO);
    ck_assert_int_eq(prompt_voice_find(vdir, "bob.pt", path, sizeof path, &k, &e), MS_OK);
    ck_assert_int_eq(k, PROMPT_VOICE_AUDIO);
    /* unknown voices, directories, traversal */
    ck_assert_int_eq(prompt_voice_find(vdir, "carol.pt", path, sizeof path, &k, &e), MS_ERR_NOTFOUND);
    ck_assert_msg(strstr(e.msg, "no voice carol"), "%s", e.msg);
    ck_assert_int_eq(prompt_voice_find(vdir, "dir.pt", path, sizeof path, &k, &e), MS_ERR_NOTFOUND);
    ck_assert_int_eq(prompt_voice_find(vdir, "../secret.wav", path, sizeof path, &k, &e), MS_ERR_ARG);
    ck_assert_int_eq(prompt_voice_find(vdir, "..", path, sizeof path, &k, &e), MS_ERR_ARG);
    ck_assert_int_eq(prompt_voice_find(vdir, "/etc/passwd", path, sizeof path, &k, &e), MS_ERR_ARG);
    ck_assert_int_eq(prompt_voice_find(vdir, ".NATF0.wav", path, sizeof path, &k, &e), MS_ERR_ARG);
    ck_assert_int_eq(prompt_voice_find(vdir, "a\\..\\b", path, sizeof path, &k, &e), MS_ERR_ARG);
    /* a path that does not fit */
    ck_assert_int_eq(prompt_voice_find(vdir, "NATF0.pt", path, 8, &k, &e), MS_ERR_LIMIT);
    check_tmp_remove();
}
END_TEST

START_TEST(test_keys) {
    check_tmp_make();
    char v[256];
    snprintf(v, sizeof v, "%s/v.wav", check_tmp);
    check_write_file(v, "abc", 3);
    int ids[] = {1, 2, 300000};
    prompt_key a, b, c;
    ms_error e = {0};
    ck_assert_int_eq(prompt_key_make(&a, "model", v, ids, 3, 6, &e), MS_OK);
    ck_assert_int_eq(prompt_key_make(&b, "model", v, ids, 3, 6, &e), MS_OK);
    ck_assert(prompt_key_equal(&a, &b));
    prompt_key_free(&b);
    /* any part differs: another key */
    ck_assert_int_eq(prompt_key_make(&b, "model", v, ids, 2, 6, &e), MS_OK);
    ck_assert(!prompt_key_equal(&a, &b));
    prompt_key_free(&b);
    ck_assert_int_eq(prompt_key_make(&b, "other", v, ids, 3, 6, &e), MS_OK);
    ck_assert(!prompt_key_equal(&a, &b));
    prompt_key_free(&b);
    ck_assert_int_eq(prompt_key_make(&b, "model", NULL, ids, 3, 6, &e), MS_OK);
    ck_assert(!prompt_key_equal(&a, &b));
    prompt_key_free(&b);
    ck_assert_int_eq(prompt_key_make(&b, "model", v, ids, 3, 5, &e), MS_OK);
    ck_assert(!prompt_key_equal(&a, &b));
    prompt_key_free(&b);
    /* the same file under another path (a symbolic link) is the same voice */
    char l[256];
    snprintf(l, sizeof l, "%s/link.wav", check_tmp);
    ck_assert_int_eq(symlink(v, l), 0);
    ck_assert_int_eq(prompt_key_make(&b, "model", l, ids, 3, 6, &e), MS_OK);
    ck_assert(prompt_key_equal(&a, &b));
    prompt_key_copy(&c, &b);
    ck_assert(prompt_key_equal(&c, &a));
    prompt_key_free(&b);
    prompt_key_free(&c);
    /* a file replaced (new size or time) is another voice */
    struct utimbuf t = {1000, 1000};
    ck_assert_int_eq(utime(v, &t), 0);
    ck_assert_int_eq(prompt_key_make(&b, "model", v, ids, 3, 6, &e), MS_OK);
    ck_assert(!prompt_key_equal(&a, &b));
    prompt_key_free(&b);
    /* a missing voice */
    unlink(v);
    ck_assert_int_eq(prompt_key_make(&b, "model", v, ids, 3, 6, &e), MS_ERR_IO);
    prompt_key_free(&a);
    check_tmp_remove();
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("prompt");
    TCase *tc = tcase_new("core");
    tcase_add_test(tc, test_role_text);
    tcase_add_test(tc, test_voice_names);
    tcase_add_test(tc, test_voice_find);
    tcase_add_test(tc, test_keys);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN
