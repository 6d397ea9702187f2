/* ogg_opus.h - Ogg Opus streams (RFC 7845) on top of ogg.h (pure, no I/O,
 * no libopus): the OpusHead/OpusTags headers, a reader that checks the
 * stream structure and hands out audio packets, and the muxer that writes
 * the stream moshid sends (header pages, then one Opus packet per page).
 */
#ifndef MOSHID_PROTO_OGG_OPUS_H
#define MOSHID_PROTO_OGG_OPUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "ogg.h"

#define OGG_OPUS_HEAD_BYTES 19u       /* OpusHead, channel mapping family 0 */
#define OGG_OPUS_TAGS_MAX_COMMENTS 1024u
/* What the Kyutai servers write and moshid's muxer writes by default. */
#define OGG_OPUS_DEF_PRE_SKIP 3840u   /* 48 kHz samples (80 ms) */
#define OGG_OPUS_DEF_INPUT_RATE 48000u

/* The OpusHead fields (RFC 7845 section 5.1). */
typedef struct ogg_opus_head {
    uint8_t version;        /* 1..15 accepted (major version 0) */
    uint8_t channels;       /* 1 or 2 */
    uint16_t pre_skip;      /* 48 kHz samples to drop at the start */
    uint32_t input_rate;    /* Hz, informative only */
    int16_t output_gain_q8; /* dB in Q7.8 */
    uint8_t mapping_family; /* 0 only */
} ogg_opus_head;

/* ogg_opus_parse_head: parse and check an OpusHead packet (n bytes at p).
 * Errors (MS_ERR_FORMAT / MS_ERR_UNSUPPORTED) name the field. */
int ogg_opus_parse_head(const uint8_t *p, size_t n, ogg_opus_head *h, ms_error *err);

/* ogg_opus_check_tags: check an OpusTags packet: magic, vendor string and
 * every comment length within the packet, at most
 * OGG_OPUS_TAGS_MAX_COMMENTS comments. */
int ogg_opus_check_tags(const uint8_t *p, size_t n, ms_error *err);

/* ogg_opus_write_head: the 19-byte OpusHead packet (version 1, family 0). */
void ogg_opus_write_head(uint8_t out[OGG_OPUS_HEAD_BYTES], const ogg_opus_head *h);

/* ---- reader ---------------------------------------------------------- */

/* Audio packet callback: pkt is an Opus packet (data valid during the call),
 * head the stream's parsed OpusHead. Return MS_OK or an error code (err set)
 * that stops the feed and fails the reader. */
typedef int (*ogg_opus_audio_fn)(void *user, const ogg_opus_head *head, const ogg_pkt *pkt,
                                 ms_error *err);

typedef struct ogg_opus_reader ogg_opus_reader;

/* ogg_opus_reader_create: reader for one Ogg Opus stream (lim: see
 * ogg_limits, NULL for defaults). NULL with err set when out of memory. */
ogg_opus_reader *ogg_opus_reader_create(const ogg_limits *lim, ms_error *err);
void ogg_opus_reader_free(ogg_opus_reader *r);

/* ogg_opus_reader_feed: consume len bytes (borrowed for the call). Checks
 * that the first packet is an OpusHead alone on the first page, the second
 * an OpusTags, then calls fn for each audio packet. Errors as
 * ogg_demux_feed, plus MS_ERR_FORMAT/MS_ERR_UNSUPPORTED for a stream that
 * is not Opus; sticky. */
int ogg_opus_reader_feed(ogg_opus_reader *r, const uint8_t *buf, size_t len, ogg_opus_audio_fn fn,
                         void *user, ms_error *err);

/* ogg_opus_reader_streams: OpusHeads taken so far: 1 for a plain stream;
 * with ogg_limits.chain one more for each new logical stream (its own
 * OpusHead, or a default mono head for a stream joined without its
 * headers). A change tells the caller to reset its decoder. */
unsigned ogg_opus_reader_streams(const ogg_opus_reader *r);
/* ogg_opus_reader_head: the parsed OpusHead, NULL before it arrived. */
const ogg_opus_head *ogg_opus_reader_head(const ogg_opus_reader *r);
/* ogg_opus_reader_demux: the underlying demuxer (counters, eos, pending). */
const ogg_demux *ogg_opus_reader_demux(const ogg_opus_reader *r);

/* ---- muxer ----------------------------------------------------------- */

/* Muxer state; embedded by its owner (ogg_opus_mux_init, nothing to free). */
typedef struct ogg_opus_mux {
    ogg_opus_head head;
    uint32_t serial;
    uint32_t seq;      /* next page sequence number */
    int64_t granule;   /* 48 kHz samples written so far, pre-skip included */
    bool headers_done;
    bool ended;
} ogg_opus_mux;

/* Vendor string written in OpusTags. */
#define OGG_OPUS_VENDOR "moshid"
/* Size of the two header pages ogg_opus_mux_headers writes. */
#define OGG_OPUS_HEADER_PAGES_BYTES \
    (2u * (OGG_HEADER_BYTES + 1u) + OGG_OPUS_HEAD_BYTES + 8u + 4u + (sizeof OGG_OPUS_VENDOR - 1u) + 4u)

/* ogg_opus_mux_init: a muxer for stream serial, channels 1 or 2, the given
 * pre-skip (48 kHz samples) and informative input rate (Hz). */
void ogg_opus_mux_init(ogg_opus_mux *m, uint32_t serial, uint8_t channels, uint16_t pre_skip,
                       uint32_t input_rate);

/* ogg_opus_mux_headers: write the OpusHead page (BOS, granule 0) and the
 * OpusTags page (granule 0) into out; exactly OGG_OPUS_HEADER_PAGES_BYTES.
 * MS_ERR_STATE when already written, MS_ERR_LIMIT when cap is too small. */
int ogg_opus_mux_headers(ogg_opus_mux *m, uint8_t *out, size_t cap, size_t *written, ms_error *err);

/* ogg_opus_mux_packet: write one page holding one Opus packet (len bytes,
 * 1..OGG_ONE_PAGE_PACKET_MAX) of dur_48k samples at 48 kHz; its granule is
 * the running total. eos marks the last page. The page takes
 * ogg_packet_page_bytes(len) bytes. MS_ERR_STATE before the headers or
 * after eos. */
int ogg_opus_mux_packet(ogg_opus_mux *m, const uint8_t *pkt, size_t len, uint32_t dur_48k,
                        bool eos, uint8_t *out, size_t cap, size_t *written, ms_error *err);

#endif
