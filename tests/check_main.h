/* check_main.h - the main() every Check suite shares.
 *
 * A suite file defines `static Suite *make_suite(void)` and then includes
 * this header at its end with CHECK_MAIN. Fork mode is forced (a crashing
 * test fails alone), every test case gets a timeout (CHECK_TIMEOUT_S, or
 * the CK_DEFAULT_TIMEOUT environment variable), and the runner prints its
 * summary line last ("100%: Checks: N, Failures: 0, Errors: 0").
 */
#ifndef MOSHID_CHECK_MAIN_H
#define MOSHID_CHECK_MAIN_H

#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef CHECK_TIMEOUT_S
#define CHECK_TIMEOUT_S 60
#endif

/* Path of the build directory ($BUILD, default "build") for tests that run
 * programs or read generated files. */
static inline const char *check_build_dir(void) {
    const char *b = getenv("BUILD");
    return b && b[0] ? b : "build";
}

#define CHECK_MAIN                                                     \
    int main(void) {                                                   \
        Suite *s = make_suite();                                       \
        SRunner *sr = srunner_create(s);                               \
        srunner_set_fork_status(sr, CK_FORK);                          \
        srunner_run_all(sr, CK_NORMAL);                                \
        int failed = srunner_ntests_failed(sr);                        \
        srunner_free(sr);                                              \
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;              \
    }

/* check_tmp: a fresh temporary directory for one test (check_tmp_make),
 * removed with everything in it by check_tmp_remove. */
static char check_tmp[64] __attribute__((unused));

static inline void check_tmp_make(void) {
    strcpy(check_tmp, "/tmp/moshid_check_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(check_tmp));
}

static inline void check_tmp_remove(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", check_tmp);
    ck_assert_int_eq(system(cmd), 0);
}

/* check_write_file: write n bytes at b to path (a fresh file). */
static inline void check_write_file(const char *path, const void *b, size_t n) {
    unlink(path); /* a fresh file: ext4 flushes files truncated and rewritten on close (slow) */
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    if (n) ck_assert_uint_eq(fwrite(b, 1, n, f), n);
    fclose(f);
}

/* check_read_file: the whole file, NUL-terminated; *n its size. Caller frees. */
static inline uint8_t *check_read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long l = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)l + 1);
    ck_assert_uint_eq(fread(b, 1, (size_t)l, f), (size_t)l);
    b[l] = 0;
    fclose(f);
    *n = (size_t)l;
    return b;
}

/* tcase_new: a test case with the standard timeout. */
static inline TCase *tcase_new(const char *name) {
    TCase *tc = tcase_create(name);
    tcase_set_timeout(tc, CHECK_TIMEOUT_S);
    return tc;
}

#endif
