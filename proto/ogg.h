/* ogg.h - Ogg pages (RFC 3533): CRC, page writer and a streaming demuxer
 * (pure, no I/O; written from the specification, no libogg).
 *
 * The demuxer takes arbitrary byte chunks (a WebSocket message may hold
 * several pages, a page may in principle be split across chunks) and hands
 * out complete packets through a callback. It is strict, as a server facing
 * hostile clients should be: every page must start where the previous one
 * ended (no resynchronisation over garbage), every CRC is checked, one
 * logical stream only (one BOS page, one serial number), page sequence
 * numbers consecutive, continuation flags consistent, nothing after EOS.
 * Lengths come from the lacing values and are bounded: a page can never be
 * larger than OGG_PAGE_MAX_BYTES by construction, packets are limited by
 * ogg_limits.max_packet_bytes, the packets one feed call may deliver by
 * ogg_limits.max_packets_per_feed. The first error is sticky: every later
 * feed fails with MS_ERR_STATE.
 *
 * ogg_limits.chain relaxes the stream structure as far as the official
 * servers' reader (sphn 0.2.1) goes, and no further: a stream may start
 * without its BOS page (its first pages went to an earlier connection: a
 * client that reconnects and keeps its encoder), and a BOS page may come
 * again (a client that re-created its encoder, or chained streams, RFC
 * 3533 4): the demuxer then starts a new logical stream, its serial and
 * sequence numbers and packet numbering anew. Everything else stays
 * strict: CRCs, no garbage between pages, one serial and consecutive
 * sequence numbers within a logical stream, nothing after EOS but a BOS
 * page.
 *
 * Names avoid libogg's (ogg_page, ogg_packet, ogg_sync_*, ogg_stream_*) so
 * that tests can link both.
 */
#ifndef MOSHID_PROTO_OGG_H
#define MOSHID_PROTO_OGG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define OGG_HEADER_BYTES 27u           /* fixed part of a page header */
#define OGG_MAX_SEGMENTS 255u          /* lacing values per page */
#define OGG_PAGE_MAX_BYTES (27u + 255u + 255u * 255u) /* 65307 */
/* Largest packet ogg_write_packet_page can put on one page. */
#define OGG_ONE_PAGE_PACKET_MAX (254u * 255u + 254u) /* 65024 */

/* Header type flags. */
#define OGG_FLAG_CONTINUED 0x01u
#define OGG_FLAG_BOS 0x02u
#define OGG_FLAG_EOS 0x04u

/* Default limits (see ogg_limits). */
#define OGG_DEF_MAX_PACKET_BYTES (64u * 1024u)
#define OGG_DEF_MAX_PACKETS_PER_FEED 4096u

/* ogg_crc32_update: the Ogg CRC-32 (polynomial 0x04C11DB7, no reflection,
 * initial value 0, no final xor) of n bytes at p continued from crc. */
uint32_t ogg_crc32_update(uint32_t crc, const uint8_t *p, size_t n);

/* Fields of a page header the writer needs. */
typedef struct ogg_page_info {
    uint8_t flags;    /* OGG_FLAG_* */
    int64_t granule;  /* granule position, -1 when no packet ends on the page */
    uint32_t serial;  /* logical stream serial number */
    uint32_t seq;     /* page sequence number */
} ogg_page_info;

/* ogg_write_page: write one page (header, nseg lacing values, body) into
 * out (cap bytes) with its CRC. The lacing values must sum to body_len.
 * Sets *written. Errors: MS_ERR_ARG (nseg > 255, lacing/body mismatch),
 * MS_ERR_LIMIT (cap too small). */
int ogg_write_page(uint8_t *out, size_t cap, const ogg_page_info *h, const uint8_t *lacing,
                   size_t nseg, const uint8_t *body, size_t body_len, size_t *written,
                   ms_error *err);

/* ogg_packet_page_bytes: size of a page holding exactly one packet of len
 * bytes (len <= OGG_ONE_PAGE_PACKET_MAX). */
static inline size_t ogg_packet_page_bytes(size_t len) {
    return OGG_HEADER_BYTES + len / 255u + 1u + len;
}

/* ogg_write_packet_page: one page holding exactly one whole packet of len
 * bytes (len <= OGG_ONE_PAGE_PACKET_MAX, else MS_ERR_LIMIT). */
int ogg_write_packet_page(uint8_t *out, size_t cap, const ogg_page_info *h, const uint8_t *pkt,
                          size_t len, size_t *written, ms_error *err);

/* Demuxer limits; zero fields take the defaults. */
typedef struct ogg_limits {
    size_t max_packet_bytes;       /* larger packets are an error (MS_ERR_LIMIT) */
    unsigned max_packets_per_feed; /* more packets in one feed call: MS_ERR_LIMIT */
    bool chain;                    /* tolerate a missing start and new BOS pages (above) */
} ogg_limits;

/* A packet handed out by the demuxer. data is valid only during the
 * callback (it points into the caller's chunk or the demuxer's buffers). */
typedef struct ogg_pkt {
    const uint8_t *data;
    size_t len;
    int64_t granule;   /* the page's granule if this is the last packet that
                          ends on its page, else -1 (as in RFC 3533) */
    uint64_t packetno; /* 0-based index in the stream */
    uint32_t serial;
    uint32_t pageno;   /* sequence number of the page where the packet ends */
    bool bos;          /* first packet of a logical stream that began with its BOS page
                          (false for a stream joined without it, ogg_limits.chain) */
    bool eos;          /* last packet of the stream (ends on the EOS page) */
} ogg_pkt;

/* Packet callback: return MS_OK to continue, or an error code (with err
 * set) to stop the feed; that error becomes the demuxer's sticky error. */
typedef int (*ogg_pkt_fn)(void *user, const ogg_pkt *pkt, ms_error *err);

typedef struct ogg_demux ogg_demux;

/* ogg_demux_create: a demuxer for one logical stream (lim may be NULL for
 * the defaults). Returns NULL with err set when out of memory. */
ogg_demux *ogg_demux_create(const ogg_limits *lim, ms_error *err);
void ogg_demux_free(ogg_demux *d);

/* ogg_demux_feed: consume len bytes at buf (borrowed for the call) and call
 * fn for each packet completed, in order. Bytes of an incomplete page are
 * kept for the next call. Returns MS_OK, or the first error: MS_ERR_FORMAT
 * (not Ogg, bad CRC, broken stream structure), MS_ERR_LIMIT, the callback's
 * code, MS_ERR_STATE after an earlier error. Single-threaded per demuxer. */
int ogg_demux_feed(ogg_demux *d, const uint8_t *buf, size_t len, ogg_pkt_fn fn, void *user,
                   ms_error *err);

/* ogg_demux_pending_bytes: bytes held for an incomplete page or packet
 * (nonzero at the end of input means the stream was truncated). */
size_t ogg_demux_pending_bytes(const ogg_demux *d);
/* ogg_demux_eos: whether the EOS page has been read. */
bool ogg_demux_eos(const ogg_demux *d);
/* ogg_demux_streams: logical streams begun so far (each BOS page, and a
 * stream joined without one, ogg_limits.chain). */
unsigned ogg_demux_streams(const ogg_demux *d);
/* Pages and packets read so far. */
uint64_t ogg_demux_pages(const ogg_demux *d);
uint64_t ogg_demux_packets(const ogg_demux *d);

#endif
