/* check_srv_limit.c - the front end's connection accounting
 * (daemon/net/srv_limit.c): the client address table's key. The limits
 * themselves are driven over real sockets in
 * tests/integration/test_srv_defects.py; what those cannot reach from
 * one loopback address is tested here: IPv6 clients are counted by /64
 * (a host holds a whole /64, so per-address limits would not bind one). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

#include "check_main.h"
#include "srv_int.h"

static void key6(const char *addr, uint8_t key[16]) {
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons(1234)};
    ck_assert_int_eq(inet_pton(AF_INET6, addr, &a.sin6_addr), 1);
    ck_assert_int_eq(srv_lim_key((const struct sockaddr *)&a, key), 0);
}

static void key4(const char *addr, uint8_t key[16]) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(1234)};
    ck_assert_int_eq(inet_pton(AF_INET, addr, &a.sin_addr), 1);
    ck_assert_int_eq(srv_lim_key((const struct sockaddr *)&a, key), 0);
}

START_TEST(test_ipv6_by_prefix) {
    uint8_t a[16], b[16], c[16];
    /* two addresses of one /64 (a host's SLAAC and temporary addresses): one key */
    key6("2001:db8:1:2:aaaa:bbbb:cccc:dddd", a);
    key6("2001:db8:1:2::1", b);
    ck_assert_mem_eq(a, b, 16);
    static const uint8_t want[16] = {0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 2};
    ck_assert_mem_eq(a, want, 16);
    /* the next /64: another key */
    key6("2001:db8:1:3::1", c);
    ck_assert_mem_ne(a, c, 16);
    /* ::1 and the IPv6 loopback's neighbours share ::/64 */
    key6("::1", a);
    key6("::2", b);
    ck_assert_mem_eq(a, b, 16);
}
END_TEST

START_TEST(test_ipv4_whole) {
    uint8_t a[16], b[16], m[16];
    key4("127.0.0.1", a);
    key4("127.0.0.2", b);
    ck_assert_mem_ne(a, b, 16);
    static const uint8_t want[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};
    ck_assert_mem_eq(a, want, 16);
    /* an IPv4 client of a dual-stack listener (IPv4-mapped IPv6): the same
     * key as over IPv4, whole, not cut to a /64 (which would put every
     * IPv4 client in one) */
    key6("::ffff:127.0.0.1", m);
    ck_assert_mem_eq(m, a, 16);
    key6("::ffff:127.0.0.2", m);
    ck_assert_mem_eq(m, b, 16);
}
END_TEST

START_TEST(test_other_family) {
    struct sockaddr sa = {.sa_family = AF_UNIX};
    uint8_t k[16];
    ck_assert_int_eq(srv_lim_key(&sa, k), -1);
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("srv_limit");
    TCase *tc = tcase_new("core");
    tcase_add_test(tc, test_ipv6_by_prefix);
    tcase_add_test(tc, test_ipv4_whole);
    tcase_add_test(tc, test_other_family);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN
