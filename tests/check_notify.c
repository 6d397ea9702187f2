/* check_notify.c - the sd_notify datagrams (daemon/service/notify.h) as a service
 * manager receives them: a test NOTIFY_SOCKET (an AF_UNIX datagram socket
 * bound here, by path and in the abstract namespace) gets exactly the
 * bytes each call documents; nothing is sent and 0 returned without one;
 * the watchdog period follows WATCHDOG_USEC / WATCHDOG_PID. */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "check_main.h"
#include "notify.h"

/* Longest datagram a test reads, bytes. */
#define RECV_MAX 4096
/* Longest wait for a datagram that should come, ms. */
#define RECV_WAIT_MS 2000

static int sock_fd = -1;

/* Bind a datagram socket at check_tmp/notify (abstract: "@moshid-check-PID"
 * instead) and point NOTIFY_SOCKET at it. */
static void sock_open(int abstract) {
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    char name[sizeof a.sun_path];
    socklen_t len;
    if (abstract) {
        snprintf(name, sizeof name, "@moshid-check-%d", (int)getpid());
        memcpy(a.sun_path + 1, name + 1, strlen(name) - 1); /* sun_path[0] = 0: abstract */
        len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(name));
    } else {
        check_tmp_make();
        snprintf(name, sizeof name, "%s/notify", check_tmp);
        memcpy(a.sun_path, name, strlen(name) + 1);
        len = (socklen_t)sizeof a;
    }
    sock_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(sock_fd, 0);
    ck_assert_msg(bind(sock_fd, (struct sockaddr *)&a, len) == 0, "bind %s: %s", name, strerror(errno));
    ck_assert_int_eq(setenv("NOTIFY_SOCKET", name, 1), 0);
}

static void sock_close(void) {
    if (sock_fd >= 0) close(sock_fd);
    sock_fd = -1;
    unsetenv("NOTIFY_SOCKET");
    if (check_tmp[0]) check_tmp_remove();
    check_tmp[0] = '\0';
}

/* The next datagram, NUL-terminated, into buf (RECV_MAX + 1 bytes); its
 * length, or -1 when none came within wait_ms. */
static ssize_t recv_msg(char *buf, int wait_ms) {
    struct pollfd p = {.fd = sock_fd, .events = POLLIN};
    if (poll(&p, 1, wait_ms) != 1) return -1;
    ssize_t n = recv(sock_fd, buf, RECV_MAX, 0);
    ck_assert_int_ge(n, 0);
    buf[n] = '\0';
    return n;
}

/* Expect the call's return value 1 and exactly want on the socket. */
static void expect_msg(int rc, const char *want) {
    char buf[RECV_MAX + 1];
    ck_assert_int_eq(rc, 1);
    ssize_t n = recv_msg(buf, RECV_WAIT_MS);
    ck_assert_msg(n >= 0, "no datagram; want '%s'", want);
    ck_assert_msg((size_t)n == strlen(want) && memcmp(buf, want, (size_t)n) == 0, "got '%s' (%zd bytes), want '%s'",
                  buf, n, want);
}

static uint64_t mono_usec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void each_datagram(int abstract) {
    sock_open(abstract);
    expect_msg(notify_ready(NULL), "READY=1");
    expect_msg(notify_ready("serving on port 8998, 8 sessions"), "READY=1\nSTATUS=serving on port 8998, 8 sessions");
    expect_msg(notify_stopping(), "STOPPING=1");
    expect_msg(notify_status("loading %s (%d%%)", "model.safetensors", 42), "STATUS=loading model.safetensors (42%)");
    expect_msg(notify_watchdog(), "WATCHDOG=1");
    expect_msg(notify_extend_timeout(30000000), "EXTEND_TIMEOUT_USEC=30000000");
    expect_msg(notify_extend_timeout(UINT64_MAX), "EXTEND_TIMEOUT_USEC=18446744073709551615");

    /* RELOADING=1 with the monotonic clock of the call, microseconds */
    char buf[RECV_MAX + 1];
    uint64_t t0 = mono_usec();
    ck_assert_int_eq(notify_reloading(), 1);
    uint64_t t1 = mono_usec();
    ck_assert_int_gt(recv_msg(buf, RECV_WAIT_MS), 0);
    uint64_t t = 0;
    int used = 0;
    ck_assert_msg(sscanf(buf, "RELOADING=1\nMONOTONIC_USEC=%" SCNu64 "%n", &t, &used) == 1 && buf[used] == '\0',
                  "got '%s'", buf);
    ck_assert_msg(t >= t0 && t <= t1, "MONOTONIC_USEC=%" PRIu64 " outside [%" PRIu64 ", %" PRIu64 "]", t, t0, t1);
    /* nothing more was sent */
    ck_assert_int_eq(recv_msg(buf, 50), -1);
    sock_close();
}

START_TEST(test_datagrams_path) { each_datagram(0); }
END_TEST

START_TEST(test_datagrams_abstract) { each_datagram(1); }
END_TEST

/* STATUS= is one line of at most NOTIFY_STATUS_MAX bytes: a newline cannot
 * smuggle in a field (READY=1), and a cut never splits a UTF-8 sequence. */
START_TEST(test_status_one_line) {
    sock_open(0);
    expect_msg(notify_status("bad\nREADY=1\r\tend"), "STATUS=bad READY=1  end");
    expect_msg(notify_ready("two\nlines"), "READY=1\nSTATUS=two lines");
    /* NOTIFY_STATUS_MAX - 1 ASCII bytes, then a 2-byte sequence that does not fit */
    char text[NOTIFY_STATUS_MAX + 8], want[NOTIFY_STATUS_MAX + 32];
    memset(text, 'a', NOTIFY_STATUS_MAX - 1);
    strcpy(text + NOTIFY_STATUS_MAX - 1, "\xc3\xa9zz");
    snprintf(want, sizeof want, "STATUS=%.*s", NOTIFY_STATUS_MAX - 1, text);
    expect_msg(notify_status("%s", text), want);
    /* exactly NOTIFY_STATUS_MAX bytes fit; the one after is cut */
    memset(text, 'b', NOTIFY_STATUS_MAX + 1);
    text[NOTIFY_STATUS_MAX + 1] = '\0';
    snprintf(want, sizeof want, "READY=1\nSTATUS=%.*s", NOTIFY_STATUS_MAX, text);
    expect_msg(notify_ready(text), want);
    sock_close();
}
END_TEST

/* No NOTIFY_SOCKET (not under systemd): every call returns 0, sends nothing. */
START_TEST(test_no_socket) {
    sock_open(0);
    unsetenv("NOTIFY_SOCKET");
    ck_assert_int_eq(notify_ready("x"), 0);
    ck_assert_int_eq(notify_reloading(), 0);
    ck_assert_int_eq(notify_stopping(), 0);
    ck_assert_int_eq(notify_status("y"), 0);
    ck_assert_int_eq(notify_watchdog(), 0);
    ck_assert_int_eq(notify_extend_timeout(1), 0);
    char buf[RECV_MAX + 1];
    ck_assert_int_eq(recv_msg(buf, 50), -1);
    sock_close();
}
END_TEST

/* A NOTIFY_SOCKET nobody listens on: an error the caller can log, no crash. */
START_TEST(test_dead_socket) {
    check_tmp_make();
    char name[128];
    snprintf(name, sizeof name, "%s/nobody", check_tmp);
    setenv("NOTIFY_SOCKET", name, 1);
    ck_assert_int_lt(notify_ready(NULL), 0);
    ck_assert_int_lt(notify_watchdog(), 0);
    unsetenv("NOTIFY_SOCKET");
    check_tmp_remove();
    check_tmp[0] = '\0';
}
END_TEST

/* The ping period: half of WATCHDOG_USEC, only for the process named by
 * WATCHDOG_PID (when that is set). */
START_TEST(test_watchdog_usec) {
    char pid[32];
    unsetenv("WATCHDOG_USEC");
    unsetenv("WATCHDOG_PID");
    ck_assert_uint_eq(notify_watchdog_usec(), 0);
    setenv("WATCHDOG_USEC", "20000000", 1);
    ck_assert_uint_eq(notify_watchdog_usec(), 10000000);
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    setenv("WATCHDOG_PID", pid, 1);
    ck_assert_uint_eq(notify_watchdog_usec(), 10000000);
    snprintf(pid, sizeof pid, "%d", (int)getpid() + 1);
    setenv("WATCHDOG_PID", pid, 1);
    ck_assert_uint_eq(notify_watchdog_usec(), 0);
    unsetenv("WATCHDOG_PID");
    setenv("WATCHDOG_USEC", "not a number", 1);
    ck_assert_uint_eq(notify_watchdog_usec(), 0);
    unsetenv("WATCHDOG_USEC");
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("notify");
    TCase *tc = tcase_new("notify");
    tcase_add_test(tc, test_datagrams_path);
    tcase_add_test(tc, test_datagrams_abstract);
    tcase_add_test(tc, test_status_one_line);
    tcase_add_test(tc, test_no_socket);
    tcase_add_test(tc, test_dead_socket);
    tcase_add_test(tc, test_watchdog_usec);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN
