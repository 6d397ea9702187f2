/* check_log.c - the key=value line logger: the level is checked before the
 * arguments are evaluated or formatted; one line per event; lines from
 * several threads never interleave. */
#include <pthread.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check_main.h"
#include "log.h"

/* Redirect fd 2 to a temporary file; capture_end returns what was written
 * (caller frees) and restores fd 2. Each test runs in its own process. */
static int saved_fd = -1;
static FILE *cap;

static void capture_begin(void) {
    cap = tmpfile();
    ck_assert_ptr_nonnull(cap);
    saved_fd = dup(2);
    ck_assert_int_ge(dup2(fileno(cap), 2), 0);
}

static char *capture_end(void) {
    dup2(saved_fd, 2);
    close(saved_fd);
    long n = ftell(cap);
    fseek(cap, 0, SEEK_END);
    n = ftell(cap);
    char *buf = calloc((size_t)n + 1, 1);
    rewind(cap);
    ck_assert_int_eq(fread(buf, 1, (size_t)n, cap), (size_t)n);
    fclose(cap);
    return buf;
}

static int calls;
static int side_effect(void) { return ++calls; }

START_TEST(test_level_before_format) {
    ms_log_level = MS_LOG_WARN;
    calls = 0;
    capture_begin();
    LOGD("dbg", "n=%d", side_effect());
    LOGI("inf", "n=%d", side_effect());
    ck_assert_int_eq(calls, 0); /* arguments below the level are not evaluated */
    LOGW("wrn", "n=%d", side_effect());
    LOGE("err", "n=%d", side_effect());
    char *out = capture_end();
    ck_assert_int_eq(calls, 2);
    ck_assert_ptr_null(strstr(out, "event=dbg"));
    ck_assert_ptr_null(strstr(out, "event=inf"));
    ck_assert_ptr_nonnull(strstr(out, "level=warn event=wrn n=1\n"));
    ck_assert_ptr_nonnull(strstr(out, "level=error event=err n=2\n"));
    free(out);

    ms_log_level = MS_LOG_OFF;
    capture_begin();
    LOGE("err", "n=%d", side_effect());
    out = capture_end();
    ck_assert_int_eq(calls, 2);
    ck_assert_str_eq(out, "");
    free(out);
}
END_TEST

START_TEST(test_line_format) {
    ms_log_level = MS_LOG_DEBUG;
    capture_begin();
    LOGI("listen", "addr=%s port=%d", "0.0.0.0", 8998);
    LOGD("tick", "%s", "");
    char *out = capture_end();
    regex_t re;
    ck_assert_int_eq(regcomp(&re,
                             "^ts=[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z "
                             "level=info event=listen addr=0\\.0\\.0\\.0 port=8998\n"
                             "ts=[^ ]+ level=debug event=tick ?\n$",
                             REG_EXTENDED),
                     0);
    ck_assert_msg(regexec(&re, out, 0, NULL, 0) == 0, "got: %s", out);
    regfree(&re);
    free(out);
}
END_TEST

START_TEST(test_long_line) {
    ms_log_level = MS_LOG_INFO;
    char big[5000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    capture_begin();
    LOGI("big", "v=%s", big);
    LOGI("after", "k=1");
    char *out = capture_end();
    char *nl = strchr(out, '\n');
    ck_assert_ptr_nonnull(nl);
    size_t first = (size_t)(nl - out) + 1;
    ck_assert_uint_le(first, 2048);          /* one line, cut */
    ck_assert(memcmp(nl - 3, "...", 3) == 0); /* and marked as cut */
    ck_assert_ptr_nonnull(strstr(nl + 1, "event=after k=1\n"));
    free(out);
}
END_TEST

START_TEST(test_level_names) {
    for (int l = MS_LOG_DEBUG; l <= MS_LOG_OFF; l++) ck_assert_int_eq(ms_log_parse_level(ms_log_level_name(l)), l);
    ck_assert_str_eq(ms_log_level_name(MS_LOG_WARN), "warn");
    ck_assert_int_eq(ms_log_parse_level("WARN"), -1);
    ck_assert_int_eq(ms_log_parse_level("verbose"), -1);
    ck_assert_int_eq(ms_log_parse_level(NULL), -1);
    ck_assert_str_eq(ms_log_level_name(99), "unknown");
    ck_assert_str_eq(ms_log_level_name(-1), "unknown");
}
END_TEST

/* Set $JOURNAL_STREAM to the capture file's "dev:ino" (+ ino_delta: a
 * stream that is not fd 2). The logger decides once per process, and each
 * test runs in a process of its own (CK_FORK). */
static void journal_stream_is_capture(long ino_delta) {
    struct stat st;
    ck_assert_int_eq(fstat(fileno(cap), &st), 0);
    char v[64];
    snprintf(v, sizeof v, "%llu:%llu", (unsigned long long)st.st_dev, (unsigned long long)st.st_ino + ino_delta);
    ck_assert_int_eq(setenv("JOURNAL_STREAM", v, 1), 0);
}

START_TEST(test_journal_priority_prefix) {
    ms_log_level = MS_LOG_DEBUG;
    capture_begin();
    journal_stream_is_capture(0);
    LOGD("d", "%s", "");
    LOGI("i", "k=1");
    LOGW("w", "k=2");
    LOGE("e", "k=3");
    char *out = capture_end();
    regex_t re;
    ck_assert_int_eq(regcomp(&re,
                             "^<7>ts=[^ ]+ level=debug event=d ?\n<6>ts=[^ ]+ level=info event=i k=1\n"
                             "<4>ts=[^ ]+ level=warn event=w k=2\n<3>ts=[^ ]+ level=error event=e k=3\n$",
                             REG_EXTENDED),
                     0);
    ck_assert_msg(regexec(&re, out, 0, NULL, 0) == 0, "got: %s", out);
    regfree(&re);
    free(out);
}
END_TEST

START_TEST(test_journal_other_stream_no_prefix) {
    ms_log_level = MS_LOG_INFO;
    capture_begin();
    journal_stream_is_capture(1);   /* stderr was redirected away from the journal */
    LOGW("w", "k=2");
    char *out = capture_end();
    ck_assert_msg(strncmp(out, "ts=", 3) == 0, "got: %s", out);
    free(out);
}
END_TEST

#define THREADS 4
#define LINES 500

static void *writer(void *arg) {
    int id = (int)(long)arg;
    for (int i = 0; i < LINES; i++) LOGI("thread", "id=%d i=%d pad=%0200d", id, i, 0);
    return NULL;
}

START_TEST(test_threads_no_interleave) {
    ms_log_level = MS_LOG_INFO;
    capture_begin();
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, writer, (void *)i);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    char *out = capture_end();
    regex_t re;
    ck_assert_int_eq(regcomp(&re, "^ts=[^ ]+ level=info event=thread id=[0-3] i=[0-9]+ pad=0{200}$",
                             REG_EXTENDED | REG_NOSUB), 0);
    int n = 0;
    for (char *save = NULL, *line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save), n++)
        ck_assert_msg(regexec(&re, line, 0, NULL, 0) == 0, "mixed line: %s", line);
    ck_assert_int_eq(n, THREADS * LINES);
    regfree(&re);
    free(out);
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("log");
    TCase *tc = tcase_new("core");
    tcase_add_test(tc, test_level_before_format);
    tcase_add_test(tc, test_line_format);
    tcase_add_test(tc, test_long_line);
    tcase_add_test(tc, test_level_names);
    tcase_add_test(tc, test_threads_no_interleave);
    tcase_add_test(tc, test_journal_priority_prefix);
    tcase_add_test(tc, test_journal_other_stream_no_prefix);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN
