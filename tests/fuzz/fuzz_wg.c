/* fuzz_wg.c - libFuzzer target: the wire guard's parser (srv_wg_feed,
 * daemon/net/srv_rx.c), which follows a connection's bytes from the request
 * headers to the frames and stops at a client frame without a mask.
 *
 * Input: 1 byte, the seed of the cut into pieces; then the byte stream.
 * The stream is fed in pieces of 1 to 64 bytes (lengths from a small
 * generator seeded by the first byte), and a reference parser written
 * separately reads the whole stream at once: where the frames begin, how
 * many frame headers come whole, where the first unmasked frame starts.
 * The guard must agree on all three (its return value locating the bad
 * header within the piece, or 0 when the header began in an earlier
 * piece) and feed nothing after stopping. ASan/UBSan watch the rest. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "srv_rx.h"

/* The reference: -1 for "no such offset". */
typedef struct ref {
    long frames_at;                /* first byte of the frames */
    long bad_at;                   /* first byte of the first unmasked frame's header */
    uint64_t headers;              /* frame headers read whole before bad_at or the end */
} ref;

static int lower(int c) { return c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c; }

static ref reference(const uint8_t *d, size_t n) {
    ref r = {-1, -1, 0};
    static const char key[] = SRV_WG_KEY;
    size_t ls = 0; /* the current line's first byte */
    int has_key = 0;
    for (size_t i = 0; i < n && r.frames_at < 0; i++) {
        if (d[i] != '\n') continue;
        /* the line d[ls..i), CRs removed */
        char l[sizeof key];
        size_t m = 0, len = 0;
        for (size_t j = ls; j < i; j++) {
            if (d[j] == '\r') continue;
            if (m < sizeof key - 1) l[m++] = (char)lower(d[j]);
            len++;
        }
        if (len == 0 && has_key) r.frames_at = (long)(i + 1);
        else if (m == sizeof key - 1 && memcmp(l, key, m) == 0) has_key = 1;
        ls = i + 1;
    }
    if (r.frames_at < 0) return r;
    size_t p = (size_t)r.frames_at;
    while (p < n) {
        if (p + 1 >= n) break; /* byte 1 not there */
        if (!(d[p + 1] & 0x80)) {
            r.bad_at = (long)p;
            break;
        }
        unsigned l7 = d[p + 1] & 0x7f;
        size_t ext = l7 == 126 ? 2 : l7 == 127 ? 8 : 0;
        size_t h = 2 + ext + 4;
        if (p + h > n) break;
        uint64_t len = l7 < 126 ? l7 : 0;
        for (size_t j = 0; j < ext; j++) len = len << 8 | d[p + 2 + j];
        r.headers++;
        if (len >= n - (p + h)) break; /* the payload runs to the end */
        p += h + (size_t)len;
    }
    return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint32_t seed = data[0] * 2654435761u + 1;
    const uint8_t *d = data + 1;
    size_t n = size - 1;
    ref r = reference(d, n);
    srv_wg g;
    memset(&g, 0, sizeof g);
    size_t at = 0;
    long bad = -1;
    while (at < n) {
        seed = seed * 1103515245u + 12345u;
        size_t piece = 1 + (seed >> 16) % 64;
        if (piece > n - at) piece = n - at;
        srv_wg_state before = g.state;
        size_t ok = srv_wg_feed(&g, d + at, piece);
        if (before == SRV_WG_UNMASKED) {
            if (ok != 0) abort(); /* stopped: nothing more is fed */
        } else if (g.state == SRV_WG_UNMASKED) {
            /* the bad header starts here, or began before this piece */
            bad = r.bad_at >= (long)at ? (long)(at + ok) : (long)ok;
            if (r.bad_at < 0) abort();
            if (r.bad_at >= (long)at && (long)(at + ok) != r.bad_at) abort();
            if (r.bad_at < (long)at && ok != 0) abort();
            if (r.bad_at + 1 < (long)at || r.bad_at + 1 >= (long)(at + piece)) abort(); /* byte 1 is in this piece */
        } else if (ok != piece) {
            abort();
        }
        at += piece;
    }
    (void)bad;
    if ((r.frames_at < 0) != (g.state == SRV_WG_HTTP)) abort();
    if ((r.bad_at >= 0) != (g.state == SRV_WG_UNMASKED)) abort();
    if (g.frames != r.headers) abort();
    return 0;
}
