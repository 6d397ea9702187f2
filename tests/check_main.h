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
#include <stdlib.h>

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

/* tcase_new: a test case with the standard timeout. */
static inline TCase *tcase_new(const char *name) {
    TCase *tc = tcase_create(name);
    tcase_set_timeout(tc, CHECK_TIMEOUT_S);
    return tc;
}

#endif
