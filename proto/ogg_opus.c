/* ogg_opus.c - Ogg Opus headers, stream reader and muxer (RFC 7845). */
#include "ogg_opus.h"

#include <stdlib.h>
#include <string.h>

static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static void wr32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

int ogg_opus_parse_head(const uint8_t *p, size_t n, ogg_opus_head *h, ms_error *err) {
    MS_ASSERT(h != NULL);
    if (n < 8 || memcmp(p, "OpusHead", 8) != 0)
        return ms_err_set(err, MS_ERR_FORMAT, "not an Opus stream: first packet is not OpusHead");
    if (n < OGG_OPUS_HEAD_BYTES)
        return ms_err_set(err, MS_ERR_FORMAT, "OpusHead of %zu bytes (need %u)", n, OGG_OPUS_HEAD_BYTES);
    h->version = p[8];
    h->channels = p[9];
    h->pre_skip = (uint16_t)(p[10] | p[11] << 8);
    h->input_rate = rd32(p + 12);
    h->output_gain_q8 = (int16_t)(uint16_t)(p[16] | p[17] << 8);
    h->mapping_family = p[18];
    if (h->version == 0 || h->version > 15)
        return ms_err_set(err, MS_ERR_UNSUPPORTED, "OpusHead version %u (need 1..15)", h->version);
    if (h->mapping_family != 0)
        return ms_err_set(err, MS_ERR_UNSUPPORTED, "OpusHead channel mapping family %u (need 0)",
                          h->mapping_family);
    if (h->channels < 1 || h->channels > 2)
        return ms_err_set(err, MS_ERR_UNSUPPORTED, "OpusHead: %u channels (need 1 or 2)", h->channels);
    return MS_OK;
}

int ogg_opus_check_tags(const uint8_t *p, size_t n, ms_error *err) {
    if (n < 8 || memcmp(p, "OpusTags", 8) != 0)
        return ms_err_set(err, MS_ERR_FORMAT, "Ogg Opus: second packet is not OpusTags");
    size_t off = 8;
    if (n - off < 4) return ms_err_set(err, MS_ERR_FORMAT, "OpusTags truncated (vendor length)");
    uint32_t vlen = rd32(p + off);
    off += 4;
    if (vlen > n - off) return ms_err_set(err, MS_ERR_FORMAT, "OpusTags vendor length %u past the packet", vlen);
    off += vlen;
    if (n - off < 4) return ms_err_set(err, MS_ERR_FORMAT, "OpusTags truncated (comment count)");
    uint32_t count = rd32(p + off);
    off += 4;
    if (count > OGG_OPUS_TAGS_MAX_COMMENTS)
        return ms_err_set(err, MS_ERR_LIMIT, "OpusTags: %u comments (max %u)", count,
                          OGG_OPUS_TAGS_MAX_COMMENTS);
    for (uint32_t i = 0; i < count; i++) {
        if (n - off < 4) return ms_err_set(err, MS_ERR_FORMAT, "OpusTags truncated (comment %u)", i);
        uint32_t l = rd32(p + off);
        off += 4;
        if (l > n - off) return ms_err_set(err, MS_ERR_FORMAT, "OpusTags comment %u past the packet", i);
        off += l;
    }
    return MS_OK; /* bytes after the comments are allowed (RFC 7845 5.2) */
}

void ogg_opus_write_head(uint8_t out[OGG_OPUS_HEAD_BYTES], const ogg_opus_head *h) {
    memcpy(out, "OpusHead", 8);
    out[8] = 1;
    out[9] = h->channels;
    out[10] = (uint8_t)h->pre_skip;
    out[11] = (uint8_t)(h->pre_skip >> 8);
    wr32(out + 12, h->input_rate);
    out[16] = (uint8_t)(uint16_t)h->output_gain_q8;
    out[17] = (uint8_t)((uint16_t)h->output_gain_q8 >> 8);
    out[18] = 0;
}

/* ---- reader ---------------------------------------------------------- */

enum { RD_HEAD, RD_TAGS, RD_AUDIO };

struct ogg_opus_reader {
    ogg_demux *dmx;
    int state;
    bool chain;           /* ogg_limits.chain: streams joined late or begun again */
    unsigned heads;       /* OpusHeads in force so far (ogg_opus_reader_streams) */
    ogg_opus_head head;
    ogg_opus_audio_fn fn; /* valid during a feed */
    void *user;
};

ogg_opus_reader *ogg_opus_reader_create(const ogg_limits *lim, ms_error *err) {
    ogg_opus_reader *r = calloc(1, sizeof *r);
    if (!r) {
        ms_err_set(err, MS_ERR_NOMEM, "ogg opus reader");
        return NULL;
    }
    r->chain = lim && lim->chain;
    r->dmx = ogg_demux_create(lim, err);
    if (!r->dmx) {
        free(r);
        return NULL;
    }
    return r;
}

void ogg_opus_reader_free(ogg_opus_reader *r) {
    if (!r) return;
    ogg_demux_free(r->dmx);
    free(r);
}

const ogg_opus_head *ogg_opus_reader_head(const ogg_opus_reader *r) {
    return r->state == RD_HEAD ? NULL : &r->head;
}
const ogg_demux *ogg_opus_reader_demux(const ogg_opus_reader *r) { return r->dmx; }
unsigned ogg_opus_reader_streams(const ogg_opus_reader *r) { return r->heads; }

static int on_packet(void *user, const ogg_pkt *k, ms_error *err) {
    ogg_opus_reader *r = user;
    int rc;
    /* chain: a new logical stream begins with its OpusHead again */
    if (r->chain && k->bos) r->state = RD_HEAD;
    switch (r->state) {
    case RD_HEAD:
        if (r->chain && !k->bos) {
            /* a stream joined without its headers (the official servers
             * decode such a stream as it comes): a mono head, no pre-skip,
             * no gain; the packets are what libopus says they are */
            memset(&r->head, 0, sizeof r->head);
            r->head.version = 1;
            r->head.channels = 1;
            r->head.input_rate = OGG_OPUS_DEF_INPUT_RATE;
            r->heads++;
            r->state = RD_AUDIO;
            return r->fn(r->user, &r->head, k, err);
        }
        rc = ogg_opus_parse_head(k->data, k->len, &r->head, err);
        if (rc) return rc;
        r->heads++;
        /* RFC 7845: the identification header is alone on the first page,
         * whose granule position is 0. */
        if (k->granule != 0)
            return ms_err_set(err, MS_ERR_FORMAT, "Ogg Opus: OpusHead not alone on a page with granule 0");
        if (k->eos) return ms_err_set(err, MS_ERR_FORMAT, "Ogg Opus: stream ends after OpusHead");
        r->state = RD_TAGS;
        return MS_OK;
    case RD_TAGS:
        rc = ogg_opus_check_tags(k->data, k->len, err);
        if (rc) return rc;
        r->state = RD_AUDIO;
        return MS_OK;
    default:
        return r->fn(r->user, &r->head, k, err);
    }
}

int ogg_opus_reader_feed(ogg_opus_reader *r, const uint8_t *buf, size_t len, ogg_opus_audio_fn fn,
                         void *user, ms_error *err) {
    MS_ASSERT(r != NULL && fn != NULL);
    r->fn = fn;
    r->user = user;
    int rc = ogg_demux_feed(r->dmx, buf, len, on_packet, r, err);
    r->fn = NULL;
    r->user = NULL;
    return rc;
}

/* ---- muxer ----------------------------------------------------------- */

void ogg_opus_mux_init(ogg_opus_mux *m, uint32_t serial, uint8_t channels, uint16_t pre_skip,
                       uint32_t input_rate) {
    MS_ASSERT(m != NULL && (channels == 1 || channels == 2));
    memset(m, 0, sizeof *m);
    m->serial = serial;
    m->head.version = 1;
    m->head.channels = channels;
    m->head.pre_skip = pre_skip;
    m->head.input_rate = input_rate;
}

int ogg_opus_mux_headers(ogg_opus_mux *m, uint8_t *out, size_t cap, size_t *written, ms_error *err) {
    MS_ASSERT(m != NULL && out != NULL && written != NULL);
    *written = 0;
    if (m->headers_done) return ms_err_set(err, MS_ERR_STATE, "Ogg Opus headers already written");
    if (cap < OGG_OPUS_HEADER_PAGES_BYTES)
        return ms_err_set(err, MS_ERR_LIMIT, "Ogg Opus header pages need %u bytes, have %zu",
                          (unsigned)OGG_OPUS_HEADER_PAGES_BYTES, cap);
    uint8_t head[OGG_OPUS_HEAD_BYTES];
    ogg_opus_write_head(head, &m->head);
    uint8_t tags[8 + 4 + sizeof OGG_OPUS_VENDOR - 1 + 4];
    size_t vl = sizeof OGG_OPUS_VENDOR - 1;
    memcpy(tags, "OpusTags", 8);
    wr32(tags + 8, (uint32_t)vl);
    memcpy(tags + 12, OGG_OPUS_VENDOR, vl);
    wr32(tags + 12 + vl, 0);
    ogg_page_info pi = {.flags = OGG_FLAG_BOS, .granule = 0, .serial = m->serial, .seq = 0};
    size_t a, b;
    int rc = ogg_write_packet_page(out, cap, &pi, head, sizeof head, &a, err);
    if (rc) return rc;
    pi.flags = 0;
    pi.seq = 1;
    rc = ogg_write_packet_page(out + a, cap - a, &pi, tags, sizeof tags, &b, err);
    if (rc) return rc;
    m->seq = 2;
    m->granule = 0;
    m->headers_done = true;
    *written = a + b;
    return MS_OK;
}

int ogg_opus_mux_packet(ogg_opus_mux *m, const uint8_t *pkt, size_t len, uint32_t dur_48k,
                        bool eos, uint8_t *out, size_t cap, size_t *written, ms_error *err) {
    MS_ASSERT(m != NULL && out != NULL && written != NULL);
    *written = 0;
    if (!m->headers_done || m->ended)
        return ms_err_set(err, MS_ERR_STATE, "Ogg Opus muxer: %s",
                          m->ended ? "stream already ended" : "headers not written");
    if (len == 0 || pkt == NULL) return ms_err_set(err, MS_ERR_ARG, "Ogg Opus muxer: empty packet");
    ogg_page_info pi = {.flags = eos ? OGG_FLAG_EOS : 0,
                        .granule = m->granule + dur_48k,
                        .serial = m->serial,
                        .seq = m->seq};
    int rc = ogg_write_packet_page(out, cap, &pi, pkt, len, written, err);
    if (rc) return rc;
    m->granule += dur_48k;
    m->seq++;
    m->ended = eos;
    return MS_OK;
}
