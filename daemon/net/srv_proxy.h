/* srv_proxy.h - the PROXY protocol header (versions 1 and 2, as HAProxy's
 * send-proxy and send-proxy-v2 write it): the line or block a proxy sends
 * before the client's bytes to say who the client is.
 *
 *   v1  "PROXY TCP4|TCP6|UNKNOWN <src> <dst> <sport> <dport>\r\n", at most
 *       107 bytes with the CRLF; UNKNOWN may carry anything up to the CRLF.
 *   v2  the 12-byte signature, a version/command byte (0x2_: LOCAL 0,
 *       PROXY 1), a family/transport byte, a 16-bit big-endian length of
 *       what follows: the addresses (12 bytes for INET, 36 for INET6, 216
 *       for UNIX) and then TLVs, which are skipped unread.
 *
 * Pure: no sockets, no allocation, no state between calls; the fuzz
 * target fuzz_proxy drives it. Any thread.
 */
#ifndef MOSHID_SRV_PROXY_H
#define MOSHID_SRV_PROXY_H

#include <stddef.h>
#include <stdint.h>

/* Longest v1 header, CRLF included (the protocol's own bound). */
#define SRV_PROXY_V1_MAX 107
/* Longest v2 header accepted, bytes: the 16 fixed bytes plus addresses
 * and TLVs. The protocol allows 16 + 65535; HAProxy's own headers carry a
 * few optional TLVs (a unique id, TLS facts) and fit well under this. A
 * longer one is refused. */
#define SRV_PROXY_V2_MAX 2048
/* The most bytes a caller needs to look at to get a verdict. */
#define SRV_PROXY_MAX (SRV_PROXY_V2_MAX > SRV_PROXY_V1_MAX ? SRV_PROXY_V2_MAX : SRV_PROXY_V1_MAX)

typedef struct srv_proxy_hdr {
    int version;                   /* 1 or 2 */
    /* has_addr 1: the client's address and port below (TCP over IPv4 or
     * IPv6). 0: the header says nothing usable about the client (v1
     * UNKNOWN, v2 LOCAL such as a health check, v2 UNSPEC/UNIX/UDP): the
     * connection's own peer (the proxy) stands. */
    int has_addr;
    int family;                    /* AF_INET or AF_INET6 when has_addr */
    uint8_t src[16];               /* network order; the first 4 bytes for IPv4 */
    uint8_t dst[16];
    uint16_t sport, dport;
} srv_proxy_hdr;

enum {
    SRV_PROXY_NEED_MORE = 0,       /* a prefix of a header: read more (up to SRV_PROXY_MAX) */
    SRV_PROXY_BAD = -1,            /* not a header, or a malformed one: refuse the connection */
};

/* srv_proxy_parse: look at the first n bytes a connection sent (b,
 * borrowed). Returns the header's length in bytes (> 0; *out filled), or
 * SRV_PROXY_NEED_MORE, or SRV_PROXY_BAD (why: a static one-line reason,
 * when why is not NULL). The bytes after the header are the client's. */
int srv_proxy_parse(const uint8_t *b, size_t n, srv_proxy_hdr *out, const char **why);

/* srv_proxy_looks_like: 1 when b (n bytes, n >= 1) starts like a PROXY
 * header of either version (so that one from an address not trusted to
 * send it can be refused by name), else 0. */
int srv_proxy_looks_like(const uint8_t *b, size_t n);

/* Most entries of server.proxy_protocol_from. */
#define SRV_MAX_PROXY_FROM 32

/* An address prefix (server.proxy_protocol_from): IPv4 is kept as
 * ::ffff:a.b.c.d with 96 added to its prefix length. */
typedef struct srv_cidr {
    uint8_t net[16];
    int bits;                      /* 0-128 */
} srv_cidr;

/* srv_cidr_parse: "a.b.c.d", "a.b.c.d/n" (n 0-32), an IPv6 literal or
 * "ipv6/n" (n 0-128). Bits past the prefix must be zero. 0, or -1. */
int srv_cidr_parse(const char *s, srv_cidr *out);
/* srv_cidr_match: 1 when a (16 bytes, IPv4 as ::ffff:a.b.c.d) is in c. */
int srv_cidr_match(const srv_cidr *c, const uint8_t a[16]);

#endif
