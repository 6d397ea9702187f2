/* srv_rx.c - WebSocket message reassembly. See srv_rx.h. */
#include "srv_rx.h"

#include <stdlib.h>
#include <string.h>

/* First allocation of a message buffer, bytes (then doubled as needed,
 * never beyond the limit). */
#define SRV_RX_FIRST_CAP 4096

/* The capacity for need bytes: doubling from the current one (or
 * SRV_RX_FIRST_CAP), at most max (need <= max: the caller checked). The
 * doubling stops before it could wrap around. */
static size_t grow_to(size_t cap, size_t need, size_t max) {
    size_t nc = cap ? cap : SRV_RX_FIRST_CAP;
    while (nc < need) {
        if (nc > max / 2) return max;
        nc *= 2;
    }
    return nc < max ? nc : max;
}

srv_rx_verdict srv_rx_feed(srv_rx *r, unsigned flags, uint64_t frame_left, const uint8_t *data, size_t len,
                           size_t max, const uint8_t **msg, size_t *size) {
    static const uint8_t empty[1] = {0};
    *msg = NULL;
    *size = 0;
    if (r->dead) return SRV_RX_IGNORED;
    if (flags & SRV_RX_FIRST) r->len = 0; /* a new message (libwebsockets enforces the framing; defensive) */
    /* The least the message is: what came, this piece, what the frame
     * announces (saturating: a frame may announce up to 2^63 - 1 bytes). */
    uint64_t least = (uint64_t)r->len + len;
    if (least < len || frame_left > UINT64_MAX - least) least = UINT64_MAX;
    else least += frame_left;
    if (least > max) {
        r->dead = 1;
        *size = least > SIZE_MAX ? SIZE_MAX : (size_t)least;
        return SRV_RX_OVERSIZE;
    }
    /* From here r->len + len <= max: no sum below can wrap. */
    if (len) {
        if (r->len + len > r->cap) {
            size_t nc = grow_to(r->cap, r->len + len, max);
            uint8_t *n = realloc(r->buf, nc);
            if (!n) {
                r->dead = 1;
                return SRV_RX_NOMEM;
            }
            r->buf = n;
            r->cap = nc;
        }
        memcpy(r->buf + r->len, data, len);
        r->len += len;
    }
    if (!(flags & SRV_RX_FINAL) || frame_left) return SRV_RX_MORE;
    /* An empty message before any payload has no buffer: never a NULL
     * pointer with a size (an empty first message). */
    *msg = r->buf ? r->buf : empty;
    *size = r->len;
    r->len = 0;
    return SRV_RX_MESSAGE;
}

void srv_rx_free(srv_rx *r) {
    free(r->buf);
    memset(r, 0, sizeof *r);
}

/* ---- the wire guard ---- */

static size_t wg_http(srv_wg *g, const uint8_t *d, size_t len) {
    static const char key[] = SRV_WG_KEY;
    size_t i = 0;
    while (i < len) {
        uint8_t c = d[i++];
        if (c == '\n') {
            if (g->line == 0) {
                /* An empty line: the end of a request's headers (or a
                 * blank line before one, which the key never precedes). */
                if (g->has_key) {
                    g->state = SRV_WG_FRAMES;
                    g->hdr = 0;
                    g->hdr_need = 2;
                    g->skip = 0;
                    return i;
                }
            } else if (g->key == sizeof key - 1) {
                g->has_key = 1;
            }
            g->line = 0;
            g->key = 0;
            continue;
        }
        if (c == '\r') continue; /* CRLF and bare LF end lines alike */
        if (g->line == g->key && g->key < sizeof key - 1) {
            uint8_t lc = c >= 'A' && c <= 'Z' ? (uint8_t)(c - 'A' + 'a') : c;
            if (lc == (uint8_t)key[g->key]) g->key++;
        }
        if (g->line < 0xffffffu) g->line++;
    }
    return i;
}

/* Frame headers: byte 0 (FIN, RSV, opcode: libwebsockets' to judge), byte
 * 1 (MASK, the 7-bit length), 0, 2 or 8 bytes of extended length (network
 * order), the 4-byte masking key; then the payload is passed over. */
static size_t wg_frames(srv_wg *g, const uint8_t *d, size_t len) {
    size_t i = 0, start = 0; /* start: where the current header began in this piece */
    while (i < len) {
        if (g->skip) {
            uint64_t n = len - i < g->skip ? len - i : g->skip;
            g->skip -= n;
            i += (size_t)n;
            continue;
        }
        uint8_t c = d[i];
        if (g->hdr == 0) start = i;
        if (g->hdr == 1) {
            if (!(c & 0x80)) {
                g->state = SRV_WG_UNMASKED;
                return start; /* 0 when the header began in an earlier piece */
            }
            unsigned l7 = c & 0x7f;
            g->len = l7 < 126 ? l7 : 0;
            g->hdr_need = 2 + (l7 == 126 ? 2 : l7 == 127 ? 8 : 0) + 4;
        } else if (g->hdr >= 2 && g->hdr < g->hdr_need - 4) {
            g->len = g->len << 8 | c; /* 8 bytes at most: no overflow */
        }
        i++;
        if (++g->hdr == g->hdr_need) {
            g->skip = g->len;
            g->hdr = 0;
            g->hdr_need = 2;
            g->frames++;
        }
    }
    return len;
}

size_t srv_wg_feed(srv_wg *g, const uint8_t *data, size_t len) {
    if (g->state == SRV_WG_UNMASKED) return 0;
    size_t done = 0;
    if (g->state == SRV_WG_HTTP) done = wg_http(g, data, len);
    if (g->state == SRV_WG_FRAMES && done < len) {
        size_t ok = wg_frames(g, data + done, len - done);
        done += ok;
        if (g->state == SRV_WG_UNMASKED) return done;
    }
    return len;
}
