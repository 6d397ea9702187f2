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
     * pointer with a size (issue 16's empty first message). */
    *msg = r->buf ? r->buf : empty;
    *size = r->len;
    r->len = 0;
    return SRV_RX_MESSAGE;
}

void srv_rx_free(srv_rx *r) {
    free(r->buf);
    memset(r, 0, sizeof *r);
}
