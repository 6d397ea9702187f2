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

/* ---- the wire guard: what libwebsockets 4.1 does not check ----
 *
 * srv_wg follows one connection's byte stream as it is read from the
 * socket (srv_wire.c feeds it every byte libwebsockets reads), in two
 * phases:
 *   HTTP   request lines and headers; a request with a
 *          "Sec-WebSocket-Key:" header line ends at its empty line (CRLF
 *          or a bare LF, as tolerant as a parser can be), and from the
 *          next byte on the stream is WebSocket frames. (An upgrade is the
 *          last request of a connection: srv answers every refused one
 *          with Connection: close.)
 *   FRAMES each frame header is read (2 bytes, the 2- or 8-byte extended
 *          length, the 4-byte masking key) and its payload skipped. A
 *          client frame without the MASK bit (RFC 6455 5.1) is a
 *          violation: the guard stops (SRV_WG_UNMASKED) and reports how
 *          many bytes of the fed piece came before the bad frame's header.
 * Frames a client sent before the 101 (RFC 6455 4.1 forbids it, but the
 * bytes may share a read with the headers) are checked all the same.
 * Everything else in a frame header (opcodes, RSV bits, lengths of
 * control frames) libwebsockets judges itself. Pure, no allocation. */
typedef enum srv_wg_state {
    SRV_WG_HTTP,                   /* before the upgrade request's end */
    SRV_WG_FRAMES,                 /* frames, all masked so far */
    SRV_WG_UNMASKED,               /* a client frame without the MASK bit: stopped */
} srv_wg_state;

#define SRV_WG_KEY "sec-websocket-key:"

typedef struct srv_wg {
    srv_wg_state state;
    /* HTTP */
    unsigned line;                 /* bytes of the current line, without a CR (saturating) */
    unsigned key;                  /* characters of SRV_WG_KEY matched at the line's start */
    int has_key;                   /* the current request has the key header */
    /* FRAMES */
    unsigned hdr;                  /* header bytes of the current frame read */
    unsigned hdr_need;             /* header bytes the current frame has (2 until byte 1 is read) */
    uint64_t len;                  /* the payload length being read (extended lengths) */
    uint64_t skip;                 /* payload bytes still to pass */
    uint64_t frames;               /* frame headers read whole */
} srv_wg;

/* srv_wg_feed: the next len bytes of the stream. Returns how many of them
 * came before a violation: len when there is none (or the guard stopped
 * before this piece: 0). */
size_t srv_wg_feed(srv_wg *g, const uint8_t *data, size_t len);

#endif
