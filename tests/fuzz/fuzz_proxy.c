/* fuzz_proxy.c - libFuzzer target: the PROXY protocol header parser
 * (srv_proxy_parse, daemon/net/srv_proxy.c) and the trusted-prefix parser.
 *
 * Input: the first bytes a trusted proxy's connection sends. Beyond no
 * out-of-bounds access (ASan) and no undefined behaviour (UBSan), the
 * property srv_listen.c relies on when it reads a header in pieces: a
 * verdict on the whole input is the verdict on every longer input, every
 * shorter prefix of a complete header needs more, and a header's length
 * never exceeds what was given or the protocol's bounds. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "srv_proxy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    srv_proxy_hdr h;
    const char *why = NULL;
    int r = srv_proxy_parse(data, size, &h, &why);
    if (r == SRV_PROXY_BAD && !why) abort();
    if (r > 0) {
        if ((size_t)r > size || r > SRV_PROXY_MAX) abort();
        if (h.version != 1 && h.version != 2) abort();
        /* the header alone gives the same verdict */
        srv_proxy_hdr h2;
        if (srv_proxy_parse(data, (size_t)r, &h2, NULL) != r || memcmp(&h, &h2, sizeof h) != 0) abort();
        /* and every prefix of it needs more */
        for (size_t k = (size_t)r > 64 ? (size_t)r - 64 : 0; k < (size_t)r; k++)
            if (srv_proxy_parse(data, k, &h2, NULL) != SRV_PROXY_NEED_MORE) abort();
    } else if (r == SRV_PROXY_NEED_MORE) {
        if (size >= SRV_PROXY_MAX) abort(); /* a verdict is always reached within the bound */
        for (size_t k = 0; k < size; k++)
            if (srv_proxy_parse(data, k, &h, NULL) != SRV_PROXY_NEED_MORE) abort();
    }
    if (r != SRV_PROXY_BAD && size > 0 && !srv_proxy_looks_like(data, size)) abort();
    /* the prefix parser on the same bytes as a string */
    char s[80];
    size_t n = size < sizeof s - 1 ? size : sizeof s - 1;
    memcpy(s, data, n);
    s[n] = '\0';
    srv_cidr c;
    if (srv_cidr_parse(s, &c) == 0 && (c.bits < 0 || c.bits > 128)) abort();
    return 0;
}
