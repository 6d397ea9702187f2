/* check_srv_listen.c - the listening sockets (daemon/net/srv_listen.c):
 * server.listen resolved and bound on loopback, what the front end reads
 * back (port, loopback-only flag, the text of the bound addresses), and
 * the refusals (every interface listed with others, a port in use). No
 * connection is made: the accept path is driven over real sockets by
 * tests/integration/test_listen.py. */
#include <errno.h>
#include <stdio.h>
#include <netdb.h>
#include <string.h>

#include "check_main.h"
#include "srv_int.h"

static srv *new_srv(const char *const *listen, int n, int port) {
    srv *s = calloc(1, sizeof *s);
    ck_assert_ptr_nonnull(s);
    s->cfg.listen = listen;
    s->cfg.nlisten = n;
    s->cfg.port = port;
    return s;
}

static void free_srv(srv *s) {
    srv_listen_free_fds(s);
    free(s);
}

/* No address configured: 127.0.0.1 alone, on an ephemeral port. */
START_TEST(test_default_loopback) {
    srv *s = new_srv(NULL, 0, 0);
    ms_error e = {0};
    ck_assert_msg(srv_listen_bind(s, &e) == MS_OK, "%s", e.msg);
    ck_assert_int_eq(s->nls, 1);
    ck_assert_int_gt(s->port, 0);
    ck_assert_int_eq(s->loopback_only, 1);
    char want[64];
    snprintf(want, sizeof want, "127.0.0.1:%d", s->port);
    ck_assert_str_eq(s->bound_text, want);
    free_srv(s);
}
END_TEST

/* A host name is resolved; "localhost" gives loopback addresses only, all on
 * the one port the first socket got. */
START_TEST(test_hostname_resolved) {
    static const char *const l[] = {"localhost"};
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo("localhost", NULL, &hints, &res) != 0) {
        printf("test_hostname_resolved: skipped: \"localhost\" does not resolve on this machine (no /etc/hosts?)\n");
        return;
    }
    freeaddrinfo(res);
    srv *s = new_srv(l, 1, 0);
    ms_error e = {0};
    ck_assert_msg(srv_listen_bind(s, &e) == MS_OK, "%s", e.msg);
    ck_assert_int_ge(s->nls, 1);
    ck_assert_int_eq(s->loopback_only, 1);
    char port[16];
    snprintf(port, sizeof port, ":%d", s->port);
    ck_assert_msg(strstr(s->bound_text, port) != NULL, "%s lacks %s", s->bound_text, port);
    free_srv(s);
}
END_TEST

/* Two literals: one socket each, in the order given, on the same port. */
START_TEST(test_two_literals_one_port) {
    static const char *const l[] = {"127.0.0.1", "127.0.0.2"};
    srv *s = new_srv(l, 2, 0);
    ms_error e = {0};
    ck_assert_msg(srv_listen_bind(s, &e) == MS_OK, "%s", e.msg);
    ck_assert_int_eq(s->nls, 2);
    char want[64];
    snprintf(want, sizeof want, "127.0.0.1:%d,127.0.0.2:%d", s->port, s->port);
    ck_assert_str_eq(s->bound_text, want);
    ck_assert_int_eq(s->loopback_only, 1);
    free_srv(s);
}
END_TEST

/* "*" (every interface) is not loopback-only, and cannot be listed with
 * another address. */
START_TEST(test_every_interface) {
    static const char *const star[] = {"*"}, *const mixed[] = {"127.0.0.1", "*"};
    srv *s = new_srv(star, 1, 0);
    ms_error e = {0};
    ck_assert_msg(srv_listen_bind(s, &e) == MS_OK, "%s", e.msg);
    ck_assert_int_eq(s->loopback_only, 0);
    free_srv(s);
    s = new_srv(mixed, 2, 0);
    ck_assert_int_eq(srv_listen_bind(s, &e), MS_ERR_ARG);
    ck_assert_msg(strstr(e.msg, "every interface") != NULL, "%s", e.msg);
    ck_assert_int_eq(s->nls, 0);
    free_srv(s);
}
END_TEST

/* A port another socket holds: an error naming the address, nothing left
 * open. */
START_TEST(test_port_in_use) {
    srv *a = new_srv(NULL, 0, 0);
    ms_error e = {0};
    ck_assert_msg(srv_listen_bind(a, &e) == MS_OK, "%s", e.msg);
    srv *b = new_srv(NULL, 0, a->port);
    ck_assert_int_ne(srv_listen_bind(b, &e), MS_OK);
    ck_assert_msg(strstr(e.msg, "127.0.0.1") != NULL, "%s", e.msg);
    ck_assert_int_eq(b->nls, 0);
    free_srv(b);
    free_srv(a);
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("srv_listen");
    TCase *tc = tcase_create("bind");
    tcase_add_test(tc, test_default_loopback);
    tcase_add_test(tc, test_hostname_resolved);
    tcase_add_test(tc, test_two_literals_one_port);
    tcase_add_test(tc, test_every_interface);
    tcase_add_test(tc, test_port_in_use);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN
