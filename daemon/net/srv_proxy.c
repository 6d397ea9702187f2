/* srv_proxy.c - the PROXY protocol header parser (srv_proxy.h). The
 * format is HAProxy's "PROXY protocol" specification, versions 1 and 2.
 */
#include "srv_proxy.h"

#include <arpa/inet.h>
#include <string.h>
#include <sys/socket.h>

static const uint8_t v2_sig[12] = {0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a};
static const char v1_sig[] = "PROXY ";
#define V1_SIG_LEN 6

/* v2 address block sizes by family (the high nibble of byte 13). */
#define V2_INET_BYTES 12
#define V2_INET6_BYTES 36
#define V2_UNIX_BYTES 216

static int bad(const char **why, const char *w) {
    if (why) *why = w;
    return SRV_PROXY_BAD;
}

static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

int srv_proxy_looks_like(const uint8_t *b, size_t n) {
    if (n == 0) return 0;
    if (memcmp(b, v1_sig, min_sz(n, V1_SIG_LEN)) == 0) return 1;
    return memcmp(b, v2_sig, min_sz(n, sizeof v2_sig)) == 0;
}

/* A decimal port: 1-5 digits, no leading zero (but "0"), at most 65535. */
static int parse_port(const char *s, size_t n, uint16_t *out) {
    if (n == 0 || n > 5 || (n > 1 && s[0] == '0')) return -1;
    unsigned v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (unsigned)(s[i] - '0');
    }
    if (v > 65535) return -1;
    *out = (uint16_t)v;
    return 0;
}

/* An address token of family af into dst (16 bytes). */
static int parse_addr(int af, const char *s, size_t n, uint8_t dst[16]) {
    char tmp[INET6_ADDRSTRLEN];
    if (n == 0 || n >= sizeof tmp) return -1;
    memcpy(tmp, s, n);
    tmp[n] = '\0';
    memset(dst, 0, 16);
    return inet_pton(af, tmp, dst) == 1 ? 0 : -1;
}

static int parse_v1(const uint8_t *b, size_t n, srv_proxy_hdr *out, const char **why) {
    size_t look = min_sz(n, SRV_PROXY_V1_MAX), end = 0;
    for (size_t i = 0; i < look; i++) {
        if (b[i] == '\n') return bad(why, "PROXY v1: a line feed without a carriage return");
        if (b[i] == '\r') {
            if (i + 1 >= n) return SRV_PROXY_NEED_MORE;
            if (b[i + 1] != '\n' || i + 1 >= SRV_PROXY_V1_MAX) return bad(why, "PROXY v1: the line does not end in CRLF");
            end = i;
            break;
        }
        if (b[i] < 0x20 || b[i] > 0x7e) return bad(why, "PROXY v1: a byte that is not printable ASCII");
    }
    if (!end) return n >= SRV_PROXY_V1_MAX ? bad(why, "PROXY v1: no CRLF within 107 bytes") : SRV_PROXY_NEED_MORE;
    /* Fields after "PROXY ", separated by single spaces. */
    const char *line = (const char *)b;
    const char *f[6];
    size_t fl[6];
    int nf = 0;
    size_t i = V1_SIG_LEN;
    while (i <= end && nf < 6) {
        size_t j = i;
        while (j < end && line[j] != ' ') j++;
        f[nf] = line + i;
        fl[nf] = j - i;
        nf++;
        i = j + 1;
        if (j == end) break;
    }
    memset(out, 0, sizeof *out);
    out->version = 1;
    if (nf >= 1 && fl[0] == 7 && memcmp(f[0], "UNKNOWN", 7) == 0) return (int)(end + 2); /* the rest is ignored */
    int af;
    if (nf >= 1 && fl[0] == 4 && memcmp(f[0], "TCP4", 4) == 0) af = AF_INET;
    else if (nf >= 1 && fl[0] == 4 && memcmp(f[0], "TCP6", 4) == 0) af = AF_INET6;
    else return bad(why, "PROXY v1: the protocol is not TCP4, TCP6 or UNKNOWN");
    if (nf != 5 || i <= end) return bad(why, "PROXY v1: not four fields after the protocol");
    if (parse_addr(af, f[1], fl[1], out->src) || parse_addr(af, f[2], fl[2], out->dst))
        return bad(why, "PROXY v1: an address that does not match the protocol");
    if (parse_port(f[3], fl[3], &out->sport) || parse_port(f[4], fl[4], &out->dport))
        return bad(why, "PROXY v1: a port that is not a number from 0 to 65535");
    out->has_addr = 1;
    out->family = af;
    return (int)(end + 2);
}

static int parse_v2(const uint8_t *b, size_t n, srv_proxy_hdr *out, const char **why) {
    if (n < 16) return SRV_PROXY_NEED_MORE;
    int ver = b[12] >> 4, cmd = b[12] & 0x0f, fam = b[13] >> 4, proto = b[13] & 0x0f;
    size_t len = (size_t)b[14] << 8 | b[15], total = 16 + len;
    if (ver != 2) return bad(why, "PROXY v2: version is not 2");
    if (cmd > 1) return bad(why, "PROXY v2: the command is neither LOCAL nor PROXY");
    if (fam > 3 || proto > 2) return bad(why, "PROXY v2: an unknown address family or transport");
    if (total > SRV_PROXY_V2_MAX) return bad(why, "PROXY v2: the header is longer than moshid accepts (2048 bytes)");
    size_t need = fam == 1 ? V2_INET_BYTES : fam == 2 ? V2_INET6_BYTES : fam == 3 ? V2_UNIX_BYTES : 0;
    if (len < need) return bad(why, "PROXY v2: the length is too short for the address family");
    if (n < total) return SRV_PROXY_NEED_MORE;
    memset(out, 0, sizeof *out);
    out->version = 2;
    /* LOCAL (a proxy's own connection, a health check): the addresses, if
     * any, are to be ignored. Only TCP over IPv4/IPv6 names a client. */
    if (cmd == 1 && proto == 1 && (fam == 1 || fam == 2)) {
        const uint8_t *a = b + 16;
        size_t al = fam == 1 ? 4 : 16;
        out->has_addr = 1;
        out->family = fam == 1 ? AF_INET : AF_INET6;
        memcpy(out->src, a, al);
        memcpy(out->dst, a + al, al);
        out->sport = (uint16_t)(a[2 * al] << 8 | a[2 * al + 1]);
        out->dport = (uint16_t)(a[2 * al + 2] << 8 | a[2 * al + 3]);
    }
    return (int)total;
}

int srv_proxy_parse(const uint8_t *b, size_t n, srv_proxy_hdr *out, const char **why) {
    if (why) *why = NULL;
    if (n == 0) return SRV_PROXY_NEED_MORE;
    if (memcmp(b, v2_sig, min_sz(n, sizeof v2_sig)) == 0) {
        if (n < sizeof v2_sig) return SRV_PROXY_NEED_MORE;
        return parse_v2(b, n, out, why);
    }
    if (memcmp(b, v1_sig, min_sz(n, V1_SIG_LEN)) == 0) {
        if (n < V1_SIG_LEN) return SRV_PROXY_NEED_MORE;
        return parse_v1(b, n, out, why);
    }
    return bad(why, "no PROXY protocol header (the first bytes are neither v1's \"PROXY \" nor v2's signature)");
}

int srv_cidr_parse(const char *s, srv_cidr *out) {
    char a[INET6_ADDRSTRLEN];
    const char *slash = strchr(s, '/');
    size_t n = slash ? (size_t)(slash - s) : strlen(s);
    if (n == 0 || n >= sizeof a) return -1;
    memcpy(a, s, n);
    a[n] = '\0';
    memset(out, 0, sizeof *out);
    int max;
    if (inet_pton(AF_INET, a, out->net + 12) == 1) {
        out->net[10] = out->net[11] = 0xff;
        max = 32;
    } else if (inet_pton(AF_INET6, a, out->net) == 1) {
        max = 128;
    } else {
        return -1;
    }
    int bits = max;
    if (slash) {
        const char *d = slash + 1;
        size_t dl = strlen(d);
        if (dl == 0 || dl > 3 || (dl > 1 && d[0] == '0')) return -1;
        bits = 0;
        for (size_t i = 0; i < dl; i++) {
            if (d[i] < '0' || d[i] > '9') return -1;
            bits = bits * 10 + (d[i] - '0');
        }
        if (bits > max) return -1;
    }
    out->bits = bits + (max == 32 ? 96 : 0);
    /* host bits must be zero: "10.0.0.1/8" is a mistake, not a network */
    for (int i = out->bits; i < 128; i++)
        if (out->net[i / 8] & (0x80 >> (i % 8))) return -1;
    return 0;
}

int srv_cidr_match(const srv_cidr *c, const uint8_t a[16]) {
    int full = c->bits / 8, rest = c->bits % 8;
    if (memcmp(c->net, a, (size_t)full) != 0) return 0;
    if (!rest) return 1;
    uint8_t mask = (uint8_t)(0xff << (8 - rest));
    return (c->net[full] & mask) == (a[full] & mask);
}
