/* fuzz_srv.c - libFuzzer target: the server's receive path, WebSocket
 * message reassembly with its fragment and size handling (srv_rx_feed,
 * daemon/net/srv_rx.c, the function srv.c's LWS_CALLBACK_RECEIVE calls; it
 * links alone, without libwebsockets).
 *
 * Input: 2 bytes little-endian: the message limit; then pieces, each
 *   1 byte flags: bit 0 first fragment, bit 1 final frame, bit 2 a huge
 *     frame_left (2^64 - 1 - the next value: the saturating sums)
 *   4 bytes little-endian frame_left (what the frame still announces)
 *   2 bytes little-endian length, then that many payload bytes (cut at
 *     the end of the input).
 * A model of the rules in srv.h runs beside it: every verdict, message
 * and size must be what the model says, and nothing may be touched out of
 * bounds (ASan) or overflow (UBSan). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "srv_rx.h"

static uint8_t model[65536 + 65536]; /* what the current message holds (at most the limit) */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    size_t max = (size_t)data[0] | (size_t)data[1] << 8;
    size_t i = 2, mlen = 0;
    int dead = 0;
    srv_rx rx = {0};
    while (i + 7 <= size) {
        unsigned fl = data[i];
        uint64_t left = (uint64_t)data[i + 1] | (uint64_t)data[i + 2] << 8 | (uint64_t)data[i + 3] << 16 |
                        (uint64_t)data[i + 4] << 24;
        if (fl & 4) left = UINT64_MAX - left;
        size_t len = (size_t)data[i + 5] | (size_t)data[i + 6] << 8;
        i += 7;
        if (len > size - i) len = size - i;
        const uint8_t *piece = data + i;
        i += len;
        unsigned flags = (fl & 1 ? SRV_RX_FIRST : 0) | (fl & 2 ? SRV_RX_FINAL : 0);
        const uint8_t *msg = (const uint8_t *)1;
        size_t n = 12345;
        srv_rx_verdict v = srv_rx_feed(&rx, flags, left, len ? piece : NULL, len, max, &msg, &n);
        if (dead) {
            if (v != SRV_RX_IGNORED || msg || n) abort();
            continue;
        }
        if (flags & SRV_RX_FIRST) mlen = 0;
        /* the least the message is, saturating */
        uint64_t least = (uint64_t)mlen + len;
        least = left > UINT64_MAX - least ? UINT64_MAX : least + left;
        if (least > max) {
            if (v != SRV_RX_OVERSIZE || msg || n != (least > SIZE_MAX ? SIZE_MAX : (size_t)least)) abort();
            dead = 1;
            continue;
        }
        if (v == SRV_RX_NOMEM) { dead = 1; continue; }
        memcpy(model + mlen, piece, len);
        mlen += len;
        if ((flags & SRV_RX_FINAL) && left == 0) {
            if (v != SRV_RX_MESSAGE || !msg || n != mlen || (n && memcmp(msg, model, n) != 0)) abort();
            mlen = 0;
        } else if (v != SRV_RX_MORE || msg || n) {
            abort();
        }
    }
    srv_rx_free(&rx);
    if (rx.buf || rx.len || rx.cap || rx.dead) abort();
    return 0;
}
