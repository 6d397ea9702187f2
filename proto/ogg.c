/* ogg.c - Ogg page CRC, writer and strict streaming demuxer (RFC 3533). */
#include "ogg.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- CRC ------------------------------------------------------------- */

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t r = i << 24;
        for (int b = 0; b < 8; b++) r = (r & 0x80000000u) ? (r << 1) ^ 0x04C11DB7u : r << 1;
        crc_table[i] = r;
    }
}

uint32_t ogg_crc32_update(uint32_t crc, const uint8_t *p, size_t n) {
    pthread_once(&crc_once, crc_init);
    for (size_t i = 0; i < n; i++) crc = (crc << 8) ^ crc_table[(crc >> 24) ^ p[i]];
    return crc;
}

/* CRC of a whole page, the checksum field (bytes 22..25) taken as zero. */
static uint32_t page_crc(const uint8_t *p, size_t n) {
    static const uint8_t zero[4] = {0};
    uint32_t c = ogg_crc32_update(0, p, 22);
    c = ogg_crc32_update(c, zero, 4);
    return ogg_crc32_update(c, p + 26, n - 26);
}

static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static void wr32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* ---- writer ---------------------------------------------------------- */

int ogg_write_page(uint8_t *out, size_t cap, const ogg_page_info *h, const uint8_t *lacing,
                   size_t nseg, const uint8_t *body, size_t body_len, size_t *written,
                   ms_error *err) {
    MS_ASSERT(out != NULL && h != NULL && written != NULL);
    MS_ASSERT(lacing != NULL || nseg == 0);
    MS_ASSERT(body != NULL || body_len == 0);
    *written = 0;
    if (nseg > OGG_MAX_SEGMENTS)
        return ms_err_set(err, MS_ERR_ARG, "ogg page: %zu segments (max 255)", nseg);
    if (h->flags & ~7u) return ms_err_set(err, MS_ERR_ARG, "ogg page: bad flags 0x%x", h->flags);
    size_t sum = 0;
    for (size_t i = 0; i < nseg; i++) sum += lacing[i];
    if (sum != body_len)
        return ms_err_set(err, MS_ERR_ARG, "ogg page: lacing sums to %zu, body has %zu bytes",
                          sum, body_len);
    size_t total = OGG_HEADER_BYTES + nseg + body_len;
    if (total > cap)
        return ms_err_set(err, MS_ERR_LIMIT, "ogg page of %zu bytes does not fit in %zu", total, cap);
    memcpy(out, "OggS", 4);
    out[4] = 0;
    out[5] = h->flags;
    uint64_t g = (uint64_t)h->granule;
    wr32(out + 6, (uint32_t)g);
    wr32(out + 10, (uint32_t)(g >> 32));
    wr32(out + 14, h->serial);
    wr32(out + 18, h->seq);
    wr32(out + 22, 0);
    out[26] = (uint8_t)nseg;
    if (nseg) memcpy(out + OGG_HEADER_BYTES, lacing, nseg);
    if (body_len) memcpy(out + OGG_HEADER_BYTES + nseg, body, body_len);
    wr32(out + 22, page_crc(out, total));
    *written = total;
    return MS_OK;
}

int ogg_write_packet_page(uint8_t *out, size_t cap, const ogg_page_info *h, const uint8_t *pkt,
                          size_t len, size_t *written, ms_error *err) {
    if (len > OGG_ONE_PAGE_PACKET_MAX) {
        *written = 0;
        return ms_err_set(err, MS_ERR_LIMIT, "ogg packet of %zu bytes does not fit on one page", len);
    }
    uint8_t lacing[OGG_MAX_SEGMENTS];
    size_t nseg = len / 255 + 1;
    memset(lacing, 255, nseg - 1);
    lacing[nseg - 1] = (uint8_t)(len % 255);
    return ogg_write_page(out, cap, h, lacing, nseg, pkt, len, written, err);
}

/* ---- demuxer --------------------------------------------------------- */

struct ogg_demux {
    ogg_limits lim;
    uint8_t page[OGG_PAGE_MAX_BYTES]; /* bytes of a page split across feeds */
    size_t plen;
    uint8_t *pkt;      /* bytes of a packet continued across pages */
    size_t pkt_len, pkt_cap;
    bool pending;      /* a packet continues on the next page */
    bool started, eos, failed;
    bool headless;     /* chain: the current logical stream was joined without its BOS page */
    bool skip_cont;    /* chain: drop the rest of a packet whose start was not seen */
    unsigned streams;
    uint32_t serial, next_seq;
    uint64_t packetno, pages;
    unsigned fed;      /* packets delivered in the current feed */
};

ogg_demux *ogg_demux_create(const ogg_limits *lim, ms_error *err) {
    ogg_demux *d = calloc(1, sizeof *d);
    if (!d) {
        ms_err_set(err, MS_ERR_NOMEM, "ogg demuxer");
        return NULL;
    }
    if (lim) d->lim = *lim;
    if (!d->lim.max_packet_bytes) d->lim.max_packet_bytes = OGG_DEF_MAX_PACKET_BYTES;
    if (!d->lim.max_packets_per_feed) d->lim.max_packets_per_feed = OGG_DEF_MAX_PACKETS_PER_FEED;
    return d;
}

void ogg_demux_free(ogg_demux *d) {
    if (!d) return;
    free(d->pkt);
    free(d);
}

size_t ogg_demux_pending_bytes(const ogg_demux *d) { return d->plen + (d->pending ? d->pkt_len : 0); }
bool ogg_demux_eos(const ogg_demux *d) { return d->eos; }
uint64_t ogg_demux_pages(const ogg_demux *d) { return d->pages; }
unsigned ogg_demux_streams(const ogg_demux *d) { return d->streams; }
uint64_t ogg_demux_packets(const ogg_demux *d) { return d->packetno; }

/* Check the have bytes of a page start at p as far as they go; *total is
 * the page size once the header and lacing values are complete, else 0. */
static int page_need(const uint8_t *p, size_t have, size_t *total, ms_error *err) {
    static const char cap[4] = {'O', 'g', 'g', 'S'};
    *total = 0;
    size_t n = have < 4 ? have : 4;
    if (memcmp(p, cap, n) != 0) return ms_err_set(err, MS_ERR_FORMAT, "not an Ogg page (no OggS capture pattern)");
    if (have > 4 && p[4] != 0) return ms_err_set(err, MS_ERR_FORMAT, "ogg page: unknown version %u", p[4]);
    if (have > 5 && (p[5] & ~7u)) return ms_err_set(err, MS_ERR_FORMAT, "ogg page: bad header flags 0x%02x", p[5]);
    if (have < OGG_HEADER_BYTES) return MS_OK;
    size_t nseg = p[26];
    if (have < OGG_HEADER_BYTES + nseg) return MS_OK;
    size_t body = 0;
    for (size_t i = 0; i < nseg; i++) body += p[OGG_HEADER_BYTES + i];
    *total = OGG_HEADER_BYTES + nseg + body;
    return MS_OK;
}

/* Append n bytes to the continued-packet buffer, within the packet limit. */
static int pkt_append(ogg_demux *d, const uint8_t *s, size_t n, ms_error *err) {
    if (n > d->lim.max_packet_bytes - d->pkt_len)
        return ms_err_set(err, MS_ERR_LIMIT, "ogg packet larger than %zu bytes", d->lim.max_packet_bytes);
    if (d->pkt_len + n > d->pkt_cap) {
        size_t c = d->pkt_cap ? d->pkt_cap : 4096;
        while (c < d->pkt_len + n) c *= 2;
        if (c > d->lim.max_packet_bytes) c = d->lim.max_packet_bytes;
        uint8_t *q = realloc(d->pkt, c);
        if (!q) return ms_err_set(err, MS_ERR_NOMEM, "ogg packet buffer of %zu bytes", c);
        d->pkt = q;
        d->pkt_cap = c;
    }
    if (n) memcpy(d->pkt + d->pkt_len, s, n);
    d->pkt_len += n;
    return MS_OK;
}

/* Validate one complete page (total bytes at p) and deliver its packets. */
static int process_page(ogg_demux *d, const uint8_t *p, size_t total, ogg_pkt_fn fn, void *user,
                        ms_error *err) {
    uint8_t flags = p[5];
    uint64_t g = (uint64_t)rd32(p + 6) | (uint64_t)rd32(p + 10) << 32;
    int64_t granule = (int64_t)g;
    uint32_t serial = rd32(p + 14), seq = rd32(p + 18);
    if (rd32(p + 22) != page_crc(p, total))
        return ms_err_set(err, MS_ERR_FORMAT, "ogg page %u: bad CRC", seq);
    if (!d->started) {
        if (!(flags & OGG_FLAG_BOS)) {
            if (!d->lim.chain) return ms_err_set(err, MS_ERR_FORMAT, "ogg stream does not start with a BOS page");
            d->headless = true; /* its start went elsewhere: join it here */
            d->skip_cont = (flags & OGG_FLAG_CONTINUED) != 0;
        }
        d->started = true;
        d->serial = serial;
        d->streams++;
    } else if ((flags & OGG_FLAG_BOS) && d->lim.chain) {
        /* a new logical stream: chained after EOS, or a client that began
         * again; a packet the old one left unfinished is dropped */
        d->serial = serial;
        d->eos = false;
        d->pending = false;
        d->pkt_len = 0;
        d->packetno = 0;
        d->headless = false;
        d->skip_cont = false;
        d->streams++;
    } else {
        if (d->eos) return ms_err_set(err, MS_ERR_FORMAT, "ogg page %u after the end of stream", seq);
        if (serial != d->serial)
            return ms_err_set(err, MS_ERR_FORMAT,
                              "ogg page %u: serial %08x, stream is %08x (one logical stream only)",
                              seq, serial, d->serial);
        if (flags & OGG_FLAG_BOS)
            return ms_err_set(err, MS_ERR_FORMAT, "ogg page %u: second BOS page", seq);
        if (seq != d->next_seq)
            return ms_err_set(err, MS_ERR_FORMAT, "ogg page sequence %u, expected %u (gap)", seq,
                              d->next_seq);
    }
    if ((flags & OGG_FLAG_CONTINUED) && !d->pending && !d->skip_cont)
        return ms_err_set(err, MS_ERR_FORMAT, "ogg page %u continues a packet that does not exist", seq);
    if (!(flags & OGG_FLAG_CONTINUED) && d->pending)
        return ms_err_set(err, MS_ERR_FORMAT, "ogg page %u: previous packet was cut off", seq);
    d->next_seq = seq + 1;
    d->pages++;

    size_t nseg = p[26];
    const uint8_t *lace = p + OGG_HEADER_BYTES, *body = lace + nseg;
    /* index of the last segment that ends a packet: that packet gets the granule */
    int last_end = -1;
    for (size_t i = 0; i < nseg; i++)
        if (lace[i] < 255) last_end = (int)i;
    if ((flags & OGG_FLAG_EOS) && nseg > 0 && lace[nseg - 1] == 255)
        return ms_err_set(err, MS_ERR_FORMAT, "ogg page %u: stream ends inside a packet", seq);
    size_t off = 0, start = 0;
    for (size_t i = 0; i < nseg; i++) {
        off += lace[i];
        if (lace[i] == 255) continue;
        if (d->skip_cont) { /* the end of a packet whose start was not seen */
            d->skip_cont = false;
            start = off;
            continue;
        }
        /* a packet ends at segment i: bytes [start, off) of the body */
        ogg_pkt k = {0};
        size_t n = off - start;
        if (d->pending) {
            int rc = pkt_append(d, body + start, n, err);
            if (rc) return rc;
            k.data = d->pkt;
            k.len = d->pkt_len;
            d->pending = false;
            d->pkt_len = 0;
        } else {
            if (n > d->lim.max_packet_bytes)
                return ms_err_set(err, MS_ERR_LIMIT, "ogg packet of %zu bytes (max %zu)", n,
                                  d->lim.max_packet_bytes);
            k.data = body + start;
            k.len = n;
        }
        if (++d->fed > d->lim.max_packets_per_feed)
            return ms_err_set(err, MS_ERR_LIMIT, "more than %u ogg packets in one message",
                              d->lim.max_packets_per_feed);
        k.granule = (int)i == last_end ? granule : -1;
        k.packetno = d->packetno;
        k.serial = serial;
        k.pageno = seq;
        k.bos = d->packetno == 0 && !d->headless;
        k.eos = (flags & OGG_FLAG_EOS) && (int)i == last_end;
        d->packetno++;
        start = off;
        int rc = fn(user, &k, err);
        if (rc) return rc;
    }
    if (nseg > 0 && lace[nseg - 1] == 255 && !d->skip_cont) { /* the last packet continues */
        int rc = pkt_append(d, body + start, off - start, err);
        if (rc) return rc;
        d->pending = true;
    }
    if (flags & OGG_FLAG_EOS) d->eos = true;
    return MS_OK;
}

static int feed(ogg_demux *d, const uint8_t *buf, size_t len, ogg_pkt_fn fn, void *user,
                ms_error *err) {
    size_t total;
    while (len > 0) {
        if (d->plen == 0) {
            int rc = page_need(buf, len, &total, err);
            if (rc) return rc;
            if (total && len >= total) { /* a whole page in the chunk: no copy */
                rc = process_page(d, buf, total, fn, user, err);
                if (rc) return rc;
                buf += total;
                len -= total;
                continue;
            }
            /* incomplete: len < total <= OGG_PAGE_MAX_BYTES, or header incomplete */
            memcpy(d->page, buf, len);
            d->plen = len;
            return MS_OK;
        }
        int rc = page_need(d->page, d->plen, &total, err);
        if (rc) return rc;
        size_t want;
        if (total) want = total - d->plen;
        else if (d->plen < OGG_HEADER_BYTES) want = OGG_HEADER_BYTES - d->plen;
        else want = OGG_HEADER_BYTES + d->page[26] - d->plen;
        size_t take = len < want ? len : want;
        memcpy(d->page + d->plen, buf, take);
        d->plen += take;
        buf += take;
        len -= take;
        rc = page_need(d->page, d->plen, &total, err);
        if (rc) return rc;
        if (total && d->plen == total) {
            d->plen = 0;
            rc = process_page(d, d->page, total, fn, user, err);
            if (rc) return rc;
        }
    }
    return MS_OK;
}

int ogg_demux_feed(ogg_demux *d, const uint8_t *buf, size_t len, ogg_pkt_fn fn, void *user,
                   ms_error *err) {
    MS_ASSERT(d != NULL && fn != NULL);
    MS_ASSERT(buf != NULL || len == 0);
    if (d->failed) return ms_err_set(err, MS_ERR_STATE, "ogg stream already failed");
    d->fed = 0;
    int rc = feed(d, buf, len, fn, user, err);
    if (rc) d->failed = true;
    return rc;
}
