/* srv_rx.h - WebSocket message reassembly for the front end (srv.h): the
 * pieces of payload libwebsockets hands over, joined into whole messages
 * with a size verdict as early as the frame headers allow. Pure: no
 * socket, no libwebsockets, no libuv; srv.c's LWS_CALLBACK_RECEIVE and the
 * fuzz target tests/fuzz/fuzz_srv.c drive the same code.
 *
 * srv_rx_feed takes each piece (a frame may come in several pieces): flags
 * say whether this piece belongs to the message's final frame
 * (SRV_RX_FINAL, lws_is_final_fragment) and starts a message (SRV_RX_FIRST,
 * lws_is_first_fragment); frame_left is what the current frame still
 * announces after this piece (lws_remaining_packet_payload). The message
 * is complete at a piece of the final frame with frame_left 0. The size
 * verdict comes at once: as soon as the bytes received plus what the
 * current frame announces exceed max, SRV_RX_OVERSIZE with *size that sum
 * (a lower bound of the message's size, saturated at SIZE_MAX), not at the
 * message's end.
 *
 * Threading: an srv_rx belongs to one connection, used on one thread.
 */
#ifndef MOSHID_SRV_RX_H
#define MOSHID_SRV_RX_H

#include <stddef.h>
#include <stdint.h>

typedef struct srv_rx {
    uint8_t *buf;
    size_t len, cap;               /* bytes of the message so far, allocated */
    int dead;                      /* an OVERSIZE or NOMEM verdict was given: every later piece is ignored */
} srv_rx;

#define SRV_RX_FIRST 1u
#define SRV_RX_FINAL 2u

typedef enum srv_rx_verdict {
    SRV_RX_MORE,                   /* keep feeding */
    SRV_RX_MESSAGE,                /* *msg, *size: the complete message (valid until the next feed) */
    SRV_RX_OVERSIZE,               /* over max; *size: the least the message is, bytes */
    SRV_RX_NOMEM,                  /* no memory for the message */
    SRV_RX_IGNORED,                /* after OVERSIZE or NOMEM */
} srv_rx_verdict;

/* srv_rx_feed: one piece, data[0..len) (data may be NULL when len is 0),
 * borrowed for the call; max: the largest message accepted, bytes. *msg
 * and *size are set for every verdict (NULL / 0 unless MESSAGE or
 * OVERSIZE); an empty message is a valid non-NULL pointer with size 0. */
srv_rx_verdict srv_rx_feed(srv_rx *r, unsigned flags, uint64_t frame_left, const uint8_t *data, size_t len,
                           size_t max, const uint8_t **msg, size_t *size);
/* srv_rx_free: the buffer is freed and r is all zero again. */
void srv_rx_free(srv_rx *r);

#endif
