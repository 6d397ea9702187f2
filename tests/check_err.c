/* check_err.c - the error table, error reports and the always-on assertion. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_main.h"
#include "err.h"

START_TEST(test_table) {
    ck_assert_int_eq(MS_OK, 0);
    for (int i = 0; i < MS_ERR__COUNT; i++) {
        ck_assert(ms_strerror(i)[0] != '\0');
        ck_assert(strncmp(ms_err_name(i), "MS_", 3) == 0);
        for (int j = 0; j < i; j++) {
            ck_assert_str_ne(ms_strerror(i), ms_strerror(j));
            ck_assert_str_ne(ms_err_name(i), ms_err_name(j));
        }
    }
    ck_assert_str_eq(ms_err_name(MS_ERR_FORMAT), "MS_ERR_FORMAT");
    ck_assert_str_eq(ms_strerror(MS_ERR_NOMEM), "out of memory");
    ck_assert_str_eq(ms_strerror(MS_ERR__COUNT), "unknown error");
    ck_assert_str_eq(ms_strerror(-1), "unknown error");
    ck_assert_str_eq(ms_err_name(-5), "MS_ERR_UNKNOWN");
}
END_TEST

START_TEST(test_set_prefix_clear) {
    ms_error e = {0};
    ck_assert_int_eq(ms_err_set(&e, MS_ERR_RANGE, "tensor %s: %d > %d", "w", 5, 4), MS_ERR_RANGE);
    ck_assert_int_eq(e.code, MS_ERR_RANGE);
    ck_assert_str_eq(e.msg, "tensor w: 5 > 4");
    ms_err_prefix(&e, "%s", "model.safetensors");
    ck_assert_str_eq(e.msg, "model.safetensors: tensor w: 5 > 4");
    ms_err_prefix(&e, "load");
    ck_assert_str_eq(e.msg, "load: model.safetensors: tensor w: 5 > 4");
    ck_assert_int_eq(e.code, MS_ERR_RANGE); /* prefixing keeps the code */
    ms_err_clear(&e);
    ck_assert_int_eq(e.code, MS_OK);
    ck_assert_str_eq(e.msg, "");
    /* NULL reports are allowed everywhere */
    ck_assert_int_eq(ms_err_set(NULL, MS_ERR_IO, "x"), MS_ERR_IO);
    ms_err_prefix(NULL, "x");
    ms_err_clear(NULL);
}
END_TEST

START_TEST(test_truncation) {
    ms_error e = {0};
    char big[3 * MS_ERR_MSG_MAX];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    ms_err_set(&e, MS_ERR_FORMAT, "%s", big);
    ck_assert_uint_eq(strlen(e.msg), MS_ERR_MSG_MAX - 1);
    /* a long prefix on a long message stays terminated and starts right */
    big[MS_ERR_MSG_MAX] = '\0';
    memset(big, 'p', MS_ERR_MSG_MAX);
    ms_err_prefix(&e, "%s", big);
    ck_assert_uint_eq(strlen(e.msg), MS_ERR_MSG_MAX - 1);
    ck_assert(e.msg[0] == 'p');
    ms_err_set(&e, MS_ERR_FORMAT, "tail");
    ms_err_prefix(&e, "%s", big);
    ck_assert_uint_eq(strlen(e.msg), MS_ERR_MSG_MAX - 1);
}
END_TEST

START_TEST(test_assert) {
    int k = 0;
    MS_ASSERT(k++ == 0); /* evaluated once, passes */
    ck_assert_int_eq(k, 1);
    /* a failing assertion aborts with one line naming the expression and
     * the place, also in optimised builds */
    char path[] = "/tmp/check_err_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        dup2(fd, 2);
        signal(SIGABRT, SIG_DFL);
        MS_ASSERT(k + 1 == 3);
        _exit(0);
    }
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
    char buf[512] = "";
    ck_assert(pread(fd, buf, sizeof buf - 1, 0) > 0);
    close(fd);
    unlink(path);
    ck_assert_msg(strstr(buf, "level=fatal event=assert expr=\"k + 1 == 3\" file=tests/check_err.c line="), "%s",
                  buf);
    ck_assert_msg(strstr(buf, "func=test_assert"), "%s", buf);
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("err");
    TCase *tc = tcase_new("core");
    tcase_add_test(tc, test_table);
    tcase_add_test(tc, test_set_prefix_clear);
    tcase_add_test(tc, test_truncation);
    tcase_add_test(tc, test_assert);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN
