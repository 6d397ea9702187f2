/* check_srv_proxy.c - the PROXY protocol header parser and the trusted
 * prefixes (daemon/net/srv_proxy.c). The headers here are written byte by
 * byte from HAProxy's specification (proxy-protocol.txt, versions 1 and
 * 2); the daemon reading them from a real HAProxy is
 * tests/integration/test_haproxy.py, and from hand-made ones
 * tests/integration/test_listen.py. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

#include "check_main.h"
#include "srv_proxy.h"

static int parse_str(const char *s, srv_proxy_hdr *h) { return srv_proxy_parse((const uint8_t *)s, strlen(s), h, NULL); }

START_TEST(test_v1_tcp4) {
    const char *l = "PROXY TCP4 192.0.2.7 198.51.100.1 56324 443\r\nGET / HTTP/1.1\r\n";
    srv_proxy_hdr h;
    int n = parse_str(l, &h);
    ck_assert_int_eq(n, (int)(strstr(l, "\r\n") - l + 2)); /* the header only: the request stays */
    ck_assert_int_eq(h.version, 1);
    ck_assert_int_eq(h.has_addr, 1);
    ck_assert_int_eq(h.family, AF_INET);
    uint8_t want[4] = {192, 0, 2, 7}, dst[4] = {198, 51, 100, 1};
    ck_assert_mem_eq(h.src, want, 4);
    ck_assert_mem_eq(h.dst, dst, 4);
    ck_assert_int_eq(h.sport, 56324);
    ck_assert_int_eq(h.dport, 443);
}
END_TEST

START_TEST(test_v1_tcp6_and_unknown) {
    srv_proxy_hdr h;
    ck_assert_int_gt(parse_str("PROXY TCP6 2001:db8::1 ::1 65535 0\r\n", &h), 0);
    ck_assert_int_eq(h.family, AF_INET6);
    ck_assert_int_eq(h.src[0], 0x20);
    ck_assert_int_eq(h.src[15], 1);
    ck_assert_int_eq(h.sport, 65535);
    ck_assert_int_eq(h.dport, 0);
    /* UNKNOWN: the rest of the line is ignored, the proxy's address stands */
    ck_assert_int_eq(parse_str("PROXY UNKNOWN\r\n", &h), 15);
    ck_assert_int_eq(h.has_addr, 0);
    ck_assert_int_eq(parse_str("PROXY UNKNOWN ffff:f...f ffff:f...f 65535 65535\r\n", &h), 49);
    ck_assert_int_eq(h.has_addr, 0);
}
END_TEST

START_TEST(test_v1_prefixes_need_more) {
    const char *l = "PROXY TCP4 192.0.2.7 198.51.100.1 56324 443\r\n";
    srv_proxy_hdr h;
    for (size_t k = 1; k < strlen(l); k++)
        ck_assert_msg(srv_proxy_parse((const uint8_t *)l, k, &h, NULL) == SRV_PROXY_NEED_MORE, "prefix %zu", k);
}
END_TEST

START_TEST(test_v1_malformed) {
    static const char *const bad[] = {
        "PROXY TCP4 192.0.2.7 198.51.100.1 56324 443\n",       /* LF alone */
        "PROXY TCP4 192.0.2.7 198.51.100.1 56324 443\rX",      /* CR not followed by LF */
        "PROXY TCP4 192.0.2.7  198.51.100.1 56324 443\r\n",    /* two spaces */
        "PROXY TCP4 192.0.2.7 198.51.100.1 56324\r\n",         /* a port missing */
        "PROXY TCP4 192.0.2.7 198.51.100.1 56324 443 9\r\n",   /* one field too many */
        "PROXY TCP4 2001:db8::1 198.51.100.1 1 2\r\n",         /* IPv6 under TCP4 */
        "PROXY TCP6 192.0.2.7 ::1 1 2\r\n",                    /* IPv4 under TCP6 */
        "PROXY TCP4 192.0.2.7 198.51.100.1 65536 443\r\n",     /* port too large */
        "PROXY TCP4 192.0.2.7 198.51.100.1 080 443\r\n",       /* leading zero */
        "PROXY TCP4 192.0.2.7 198.51.100.1 -1 443\r\n",
        "PROXY UDP4 192.0.2.7 198.51.100.1 1 2\r\n",           /* no such protocol */
        "PROXY \r\n",
        "PROXY TCP4 192.0.2.7 198.51.100.1 1 2\x01\r\n",       /* control byte */
        "GET / HTTP/1.1\r\n",                                  /* no header at all */
        "POST / HTTP/1.1\r\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        srv_proxy_hdr h;
        const char *why = NULL;
        int r = srv_proxy_parse((const uint8_t *)bad[i], strlen(bad[i]), &h, &why);
        ck_assert_msg(r == SRV_PROXY_BAD, "accepted: %s", bad[i]);
        ck_assert_ptr_nonnull(why);
    }
    /* 107 bytes without a CRLF: over the protocol's bound */
    char longl[200];
    memset(longl, 'A', sizeof longl);
    memcpy(longl, "PROXY UNKNOWN ", 14);
    ck_assert_int_eq(srv_proxy_parse((const uint8_t *)longl, SRV_PROXY_V1_MAX - 1, &(srv_proxy_hdr){0}, NULL),
                     SRV_PROXY_NEED_MORE);
    ck_assert_int_eq(srv_proxy_parse((const uint8_t *)longl, SRV_PROXY_V1_MAX, &(srv_proxy_hdr){0}, NULL), SRV_PROXY_BAD);
    /* the CRLF as bytes 106-107 is the longest line allowed */
    memcpy(longl + SRV_PROXY_V1_MAX - 2, "\r\n", 2);
    ck_assert_int_eq(srv_proxy_parse((const uint8_t *)longl, sizeof longl, &(srv_proxy_hdr){0}, NULL), SRV_PROXY_V1_MAX);
    memcpy(longl + SRV_PROXY_V1_MAX - 2, "A\r\n", 3);
    ck_assert_int_eq(srv_proxy_parse((const uint8_t *)longl, sizeof longl, &(srv_proxy_hdr){0}, NULL), SRV_PROXY_BAD);
}
END_TEST

static const uint8_t SIG[12] = {0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a};

/* A v2 header: cmd, family byte, addresses (alen bytes), tlv bytes. */
static size_t v2(uint8_t *out, uint8_t verc, uint8_t fam, const uint8_t *addr, size_t alen, size_t tlv) {
    memcpy(out, SIG, 12);
    out[12] = verc;
    out[13] = fam;
    size_t len = alen + tlv;
    out[14] = (uint8_t)(len >> 8);
    out[15] = (uint8_t)len;
    if (alen) memcpy(out + 16, addr, alen);
    memset(out + 16 + alen, 0xee, tlv);
    return 16 + len;
}

START_TEST(test_v2_inet_inet6) {
    uint8_t b[600];
    const uint8_t a4[12] = {203, 0, 113, 9, 127, 0, 0, 1, 0xdc, 0x05, 0x23, 0x26};
    size_t n = v2(b, 0x21, 0x11, a4, sizeof a4, 0);
    memcpy(b + n, "GET", 3); /* the client's bytes follow */
    srv_proxy_hdr h;
    ck_assert_int_eq(srv_proxy_parse(b, n + 3, &h, NULL), (int)n);
    ck_assert_int_eq(h.version, 2);
    ck_assert_int_eq(h.has_addr, 1);
    ck_assert_int_eq(h.family, AF_INET);
    ck_assert_mem_eq(h.src, a4, 4);
    ck_assert_int_eq(h.sport, 0xdc05);
    ck_assert_int_eq(h.dport, 0x2326);
    for (size_t k = 1; k < n; k++) ck_assert_int_eq(srv_proxy_parse(b, k, &h, NULL), SRV_PROXY_NEED_MORE);
    uint8_t a6[36] = {0x20, 0x01, 0x0d, 0xb8};
    a6[15] = 5;
    a6[32] = 0x01;
    a6[33] = 0x02;
    /* TLVs after the addresses (HAProxy's unique id, TLS facts) are skipped */
    n = v2(b, 0x21, 0x21, a6, sizeof a6, 100);
    ck_assert_int_eq(srv_proxy_parse(b, n, &h, NULL), (int)n);
    ck_assert_int_eq(h.family, AF_INET6);
    ck_assert_mem_eq(h.src, a6, 16);
    ck_assert_int_eq(h.sport, 0x0102);
}
END_TEST

START_TEST(test_v2_local_and_others) {
    uint8_t b[600];
    srv_proxy_hdr h;
    const uint8_t a4[12] = {1, 2, 3, 4, 5, 6, 7, 8, 0, 1, 0, 2};
    /* LOCAL (health checks): addresses ignored */
    size_t n = v2(b, 0x20, 0x11, a4, 12, 0);
    ck_assert_int_eq(srv_proxy_parse(b, n, &h, NULL), (int)n);
    ck_assert_int_eq(h.has_addr, 0);
    n = v2(b, 0x20, 0x00, NULL, 0, 0);
    ck_assert_int_eq(srv_proxy_parse(b, n, &h, NULL), 16);
    ck_assert_int_eq(h.has_addr, 0);
    /* PROXY over UDP, or UNIX sockets: no client address to use */
    n = v2(b, 0x21, 0x12, a4, 12, 0);
    ck_assert_int_eq(srv_proxy_parse(b, n, &h, NULL), (int)n);
    ck_assert_int_eq(h.has_addr, 0);
    uint8_t un[216] = {0};
    n = v2(b, 0x21, 0x31, un, sizeof un, 0);
    ck_assert_int_eq(srv_proxy_parse(b, n, &h, NULL), (int)n);
    ck_assert_int_eq(h.has_addr, 0);
}
END_TEST

START_TEST(test_v2_malformed) {
    uint8_t b[SRV_PROXY_V2_MAX + 64];
    const uint8_t a4[12] = {0};
    srv_proxy_hdr h;
    size_t n = v2(b, 0x11, 0x11, a4, 12, 0); /* version 1 in a v2 block */
    ck_assert_int_eq(srv_proxy_parse(b, n, &h, NULL), SRV_PROXY_BAD);
    n = v2(b, 0x22, 0x11, a4, 12, 0); /* command 2 */
    ck_assert_int_eq(srv_proxy_parse(b, n, &h, NULL), SRV_PROXY_BAD);
    n = v2(b, 0x21, 0x41, a4, 12, 0); /* family 4 */
    ck_assert_int_eq(srv_proxy_parse(b, n, &h, NULL), SRV_PROXY_BAD);
    n = v2(b, 0x21, 0x13, a4, 12, 0); /* transport 3 */
    ck_assert_int_eq(srv_proxy_parse(b, n, &h, NULL), SRV_PROXY_BAD);
    n = v2(b, 0x21, 0x21, a4, 12, 0); /* INET6 with 12 bytes */
    ck_assert_int_eq(srv_proxy_parse(b, 16, &h, NULL), SRV_PROXY_BAD); /* judged from the fixed part */
    /* the longest accepted, and one byte more */
    n = v2(b, 0x21, 0x11, a4, 12, SRV_PROXY_V2_MAX - 16 - 12);
    ck_assert_int_eq(srv_proxy_parse(b, n, &h, NULL), SRV_PROXY_V2_MAX);
    n = v2(b, 0x21, 0x11, a4, 12, SRV_PROXY_V2_MAX - 16 - 12 + 1);
    ck_assert_int_eq(srv_proxy_parse(b, 16, &h, NULL), SRV_PROXY_BAD);
    /* a broken signature */
    n = v2(b, 0x21, 0x11, a4, 12, 0);
    b[5] ^= 1;
    ck_assert_int_eq(srv_proxy_parse(b, n, &h, NULL), SRV_PROXY_BAD);
}
END_TEST

START_TEST(test_looks_like) {
    ck_assert_int_eq(srv_proxy_looks_like((const uint8_t *)"PROXY TCP4", 10), 1);
    ck_assert_int_eq(srv_proxy_looks_like(SIG, 12), 1);
    ck_assert_int_eq(srv_proxy_looks_like((const uint8_t *)"GET / HTTP/1.1", 14), 0);
    ck_assert_int_eq(srv_proxy_looks_like((const uint8_t *)"POST /", 6), 0);
    ck_assert_int_eq(srv_proxy_looks_like((const uint8_t *)"\x16\x03\x01", 3), 0); /* a TLS ClientHello */
}
END_TEST

static int in(const char *cidr, const char *addr) {
    srv_cidr c;
    ck_assert_msg(srv_cidr_parse(cidr, &c) == 0, "parse %s", cidr);
    uint8_t a[16] = {0};
    if (strchr(addr, ':')) {
        ck_assert_int_eq(inet_pton(AF_INET6, addr, a), 1);
    } else {
        a[10] = a[11] = 0xff;
        ck_assert_int_eq(inet_pton(AF_INET, addr, a + 12), 1);
    }
    return srv_cidr_match(&c, a);
}

START_TEST(test_cidr) {
    ck_assert_int_eq(in("127.0.0.1", "127.0.0.1"), 1);
    ck_assert_int_eq(in("127.0.0.1", "127.0.0.2"), 0);
    ck_assert_int_eq(in("10.0.0.0/8", "10.200.3.4"), 1);
    ck_assert_int_eq(in("10.0.0.0/8", "11.0.0.1"), 0);
    ck_assert_int_eq(in("192.168.4.0/23", "192.168.5.255"), 1);
    ck_assert_int_eq(in("192.168.4.0/23", "192.168.6.0"), 0);
    ck_assert_int_eq(in("0.0.0.0/0", "203.0.113.1"), 1);
    ck_assert_int_eq(in("0.0.0.0/0", "2001:db8::1"), 0); /* IPv4 prefixes hold IPv4 only */
    ck_assert_int_eq(in("::1", "::1"), 1);
    ck_assert_int_eq(in("fd00::/8", "fdaa::1"), 1);
    ck_assert_int_eq(in("fd00::/8", "fe80::1"), 0);
    ck_assert_int_eq(in("::/0", "2001:db8::1"), 1);
    srv_cidr c;
    static const char *const bad[] = {"", "/8", "10.0.0.1/8", "10.0.0.0/33", "10.0.0.0/", "10.0.0.0/08",
                                      "::1/129", "fd00::1/8", "example.com", "10.0.0.0/8x", "1.2.3"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(srv_cidr_parse(bad[i], &c) == -1, "accepted %s", bad[i]);
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("srv_proxy");
    TCase *tc = tcase_new("core");
    tcase_add_test(tc, test_v1_tcp4);
    tcase_add_test(tc, test_v1_tcp6_and_unknown);
    tcase_add_test(tc, test_v1_prefixes_need_more);
    tcase_add_test(tc, test_v1_malformed);
    tcase_add_test(tc, test_v2_inet_inet6);
    tcase_add_test(tc, test_v2_local_and_others);
    tcase_add_test(tc, test_v2_malformed);
    tcase_add_test(tc, test_looks_like);
    tcase_add_test(tc, test_cidr);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN
