/* check_ogg.c - Ogg page writer/demuxer and Ogg Opus reader/muxer.
 *
 * libogg (an independent implementation) produces reference streams for the
 * demuxer and reads back what the writer and the muxer produce. */
#include <ogg/ogg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "ogg.h"
#include "ogg_opus.h"

static uint32_t rng_state = 12345;
static uint32_t rnd(void) {
    rng_state = rng_state * 1664525u + 1013904223u;
    return rng_state >> 8;
}

/* ---- a growable byte buffer and a packet collector ---- */
typedef struct { uint8_t *b; size_t n, cap; } buf_t;
static void buf_add(buf_t *x, const void *p, size_t n) {
    if (x->n + n > x->cap) {
        x->cap = (x->n + n) * 2 + 64;
        x->b = realloc(x->b, x->cap);
    }
    memcpy(x->b + x->n, p, n);
    x->n += n;
}

#define MAXP 512
typedef struct {
    int n;
    size_t len[MAXP];
    uint8_t *data[MAXP];
    int64_t granule[MAXP];
    int bos[MAXP], eos[MAXP];
    int fail_at; /* callback returns an error at this packet index (-1: never) */
} coll_t;
static int collect(void *user, const ogg_pkt *k, ms_error *err) {
    coll_t *c = user;
    if (c->n == c->fail_at) return ms_err_set(err, MS_ERR_RANGE, "callback refuses");
    ck_assert_int_lt(c->n, MAXP);
    c->len[c->n] = k->len;
    c->data[c->n] = malloc(k->len + 1);
    memcpy(c->data[c->n], k->data, k->len);
    c->granule[c->n] = k->granule;
    c->bos[c->n] = k->bos;
    c->eos[c->n] = k->eos;
    ck_assert_uint_eq(k->packetno, (uint64_t)c->n);
    c->n++;
    return MS_OK;
}
static void coll_free(coll_t *c) {
    for (int i = 0; i < c->n; i++) free(c->data[i]);
    memset(c, 0, sizeof *c);
}

/* ---- reference stream from libogg ---- */
typedef struct {
    int n;
    size_t len[MAXP];
    int64_t granule[MAXP];
    uint8_t fill[MAXP];
} ref_t;

static void pkt_fill(uint8_t *p, size_t n, uint8_t seed) {
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(seed * 31 + i * 7);
}

/* Stream of r->n packets of the given sizes, pages cut by libogg's own
 * policy (flush every flush_every packets when > 0). */
static buf_t libogg_stream(const ref_t *r, int flush_every) {
    buf_t out = {0};
    ogg_stream_state os;
    ogg_stream_init(&os, 0x1234abcd);
    ogg_page pg;
    for (int i = 0; i < r->n; i++) {
        uint8_t *d = malloc(r->len[i] + 1);
        pkt_fill(d, r->len[i], r->fill[i]);
        ogg_packet op = {.packet = d, .bytes = (long)r->len[i], .b_o_s = i == 0, .e_o_s = i == r->n - 1,
                         .granulepos = r->granule[i], .packetno = i};
        ogg_stream_packetin(&os, &op);
        free(d);
        if (flush_every > 0 && (i + 1) % flush_every == 0) {
            while (ogg_stream_flush(&os, &pg)) {
                buf_add(&out, pg.header, (size_t)pg.header_len);
                buf_add(&out, pg.body, (size_t)pg.body_len);
            }
        } else {
            while (ogg_stream_pageout(&os, &pg)) {
                buf_add(&out, pg.header, (size_t)pg.header_len);
                buf_add(&out, pg.body, (size_t)pg.body_len);
            }
        }
    }
    while (ogg_stream_flush(&os, &pg)) {
        buf_add(&out, pg.header, (size_t)pg.header_len);
        buf_add(&out, pg.body, (size_t)pg.body_len);
    }
    ogg_stream_clear(&os);
    return out;
}

static void check_same(const ref_t *r, const coll_t *c) {
    ck_assert_int_eq(c->n, r->n);
    for (int i = 0; i < r->n; i++) {
        ck_assert_uint_eq(c->len[i], r->len[i]);
        uint8_t *d = malloc(r->len[i] + 1);
        pkt_fill(d, r->len[i], r->fill[i]);
        ck_assert_msg(memcmp(d, c->data[i], r->len[i]) == 0, "packet %d differs", i);
        free(d);
        ck_assert_int_eq(c->bos[i], i == 0);
        ck_assert_int_eq(c->eos[i], i == r->n - 1);
        /* the granule comes with the last packet that ends on a page */
        /* (libogg puts the first packet alone on a page with granule 0) */
        if (c->granule[i] != -1 && i > 0) ck_assert_int_eq(c->granule[i], r->granule[i]);
    }
    ck_assert_int_eq(c->granule[r->n - 1], r->granule[r->n - 1]);
}

/* Feed s in chunks: mode 0 whole, 1 byte by byte, 2 random sizes. */
static int feed_chunks(ogg_demux *d, const buf_t *s, int mode, coll_t *c, ms_error *e) {
    size_t off = 0;
    while (off < s->n) {
        size_t k = mode == 0 ? s->n : mode == 1 ? 1 : 1 + rnd() % 3000;
        if (k > s->n - off) k = s->n - off;
        int rc = ogg_demux_feed(d, s->b + off, k, collect, c, e);
        if (rc) return rc;
        off += k;
    }
    return MS_OK;
}

START_TEST(test_demux_vs_libogg) {
    for (int variant = 0; variant < 4; variant++) {
        ref_t r = {0};
        r.n = variant == 3 ? 5 : 120;
        int64_t g = 0;
        for (int i = 0; i < r.n; i++) {
            size_t sz;
            if (variant == 0) sz = 1 + rnd() % 300;          /* several packets per page */
            else if (variant == 1) sz = rnd() % 2 ? 255 : 510; /* exact multiples of 255 */
            else if (variant == 2) sz = rnd() % 1500;         /* zero-length ones too */
            else sz = 20000 + rnd() % 50000;                  /* packets spanning pages */
            r.len[i] = sz;
            r.fill[i] = (uint8_t)i;
            g += 960;
            r.granule[i] = g;
        }
        buf_t s = libogg_stream(&r, variant == 0 ? 7 : 0);
        for (int mode = 0; mode < 3; mode++) {
            ogg_limits lim = {.max_packet_bytes = 80000};
            ms_error e = {0};
            ogg_demux *d = ogg_demux_create(&lim, &e);
            coll_t c = {.fail_at = -1};
            int rc = feed_chunks(d, &s, mode, &c, &e);
            ck_assert_msg(rc == MS_OK, "variant %d mode %d: %s", variant, mode, e.msg);
            check_same(&r, &c);
            ck_assert(ogg_demux_eos(d));
            ck_assert_uint_eq(ogg_demux_pending_bytes(d), 0);
            ck_assert_uint_eq(ogg_demux_packets(d), (uint64_t)r.n);
            coll_free(&c);
            ogg_demux_free(d);
        }
        free(s.b);
    }
}
END_TEST

START_TEST(test_writer_vs_libogg) {
    /* our CRC equals libogg's */
    uint8_t page[OGG_PAGE_MAX_BYTES];
    uint8_t body[3000];
    pkt_fill(body, sizeof body, 9);
    size_t n;
    ms_error e = {0};
    ogg_page_info pi = {.flags = OGG_FLAG_BOS, .granule = 0x0102030405060708LL, .serial = 77, .seq = 0};
    ck_assert_int_eq(ogg_write_packet_page(page, sizeof page, &pi, body, sizeof body, &n, &e), MS_OK);
    ck_assert_uint_eq(n, ogg_packet_page_bytes(sizeof body));
    uint8_t copy[OGG_PAGE_MAX_BYTES];
    memcpy(copy, page, n);
    ogg_page op = {.header = copy, .header_len = 27 + copy[26], .body = copy + 27 + copy[26],
                   .body_len = (long)(n - 27 - copy[26])};
    ogg_page_checksum_set(&op);
    ck_assert_mem_eq(copy + 22, page + 22, 4);

    /* libogg syncs on our pages and returns the packets */
    ogg_sync_state oy;
    ogg_sync_init(&oy);
    ogg_stream_state os;
    ogg_stream_init(&os, 77);
    buf_t s = {0};
    buf_add(&s, page, n);
    for (int i = 1; i < 6; i++) {
        ogg_page_info q = {.flags = i == 5 ? OGG_FLAG_EOS : 0, .granule = i * 100, .serial = 77, .seq = (uint32_t)i};
        size_t len = (size_t)(i * 255 - (i == 2)); /* 254, 255*k: lacing edge cases */
        ck_assert_int_eq(ogg_write_packet_page(page, sizeof page, &q, body, len, &n, &e), MS_OK);
        buf_add(&s, page, n);
    }
    char *dst = ogg_sync_buffer(&oy, (long)s.n);
    memcpy(dst, s.b, s.n);
    ogg_sync_wrote(&oy, (long)s.n);
    ogg_page pg;
    int pages = 0, packets = 0;
    while (ogg_sync_pageout(&oy, &pg) == 1) {
        pages++;
        ck_assert_int_eq(ogg_stream_pagein(&os, &pg), 0);
        ogg_packet pk;
        while (ogg_stream_packetout(&os, &pk) == 1) {
            size_t want = packets == 0 ? sizeof body : (size_t)(packets * 255 - (packets == 2));
            ck_assert_int_eq(pk.bytes, (long)want);
            ck_assert_mem_eq(pk.packet, body, want);
            packets++;
        }
    }
    ck_assert_int_eq(pages, 6);
    ck_assert_int_eq(packets, 6);
    ogg_stream_clear(&os);
    ogg_sync_clear(&oy);
    free(s.b);

    /* argument errors */
    uint8_t lace[2] = {10, 5};
    ck_assert_int_eq(ogg_write_page(page, sizeof page, &pi, lace, 2, body, 14, &n, &e), MS_ERR_ARG);
    ck_assert_int_eq(ogg_write_page(page, 40, &pi, lace, 2, body, 15, &n, &e), MS_ERR_LIMIT);
    ck_assert_int_eq(ogg_write_packet_page(page, sizeof page, &pi, body, OGG_ONE_PAGE_PACKET_MAX + 1, &n, &e),
                     MS_ERR_LIMIT);
}
END_TEST

/* A small valid stream written by our page writer: pages[i] holds packet i. */
static buf_t small_stream(int npk, uint32_t serial) {
    buf_t s = {0};
    uint8_t page[2000], body[300];
    for (int i = 0; i < npk; i++) {
        pkt_fill(body, 100, (uint8_t)i);
        ogg_page_info pi = {.flags = (uint8_t)((i == 0 ? OGG_FLAG_BOS : 0) | (i == npk - 1 ? OGG_FLAG_EOS : 0)),
                            .granule = i * 960, .serial = serial, .seq = (uint32_t)i};
        size_t n;
        ck_assert_int_eq(ogg_write_packet_page(page, sizeof page, &pi, body, 100, &n, NULL), MS_OK);
        buf_add(&s, page, n);
    }
    return s;
}

static size_t last_pending; /* pending bytes after the last run() */
static int run(const uint8_t *b, size_t n, const ogg_limits *lim, ms_error *e, coll_t *c) {
    ogg_demux *d = ogg_demux_create(lim, e);
    int rc = ogg_demux_feed(d, b, n, collect, c, e);
    last_pending = ogg_demux_pending_bytes(d);
    ogg_demux_free(d);
    return rc;
}

/* Recompute the CRC of the page at p (after a deliberate edit). */
static void fix_crc(uint8_t *p) {
    size_t total = 27 + p[26];
    for (int i = 0; i < p[26]; i++) total += p[27 + i];
    memset(p + 22, 0, 4);
    uint32_t c = ogg_crc32_update(0, p, total);
    for (int i = 0; i < 4; i++) p[22 + i] = (uint8_t)(c >> (8 * i));
}

static void expect_fail(const uint8_t *b, size_t n, int code, const char *needle) {
    ms_error e = {0};
    coll_t c = {.fail_at = -1};
    int rc = run(b, n, NULL, &e, &c);
    coll_free(&c);
    ck_assert_msg(rc == code, "want %d got %d (%s)", code, rc, e.msg);
    ck_assert_msg(strstr(e.msg, needle) != NULL, "message '%s' lacks '%s'", e.msg, needle);
}

START_TEST(test_hostile) {
    size_t P = ogg_packet_page_bytes(100); /* bytes per page of small_stream */
    buf_t s = small_stream(4, 5);
    uint8_t *b = malloc(s.n);

    /* not Ogg at all */
    expect_fail((const uint8_t *)"RIFF\x24\x00\x00\x00WAVEfmt ", 16, MS_ERR_FORMAT, "not an Ogg page");
    expect_fail((const uint8_t *)"O", 1, MS_OK, ""); /* a prefix of OggS: wait for more */
    /* bad CRC: flip each byte of the second page in turn (except the CRC bytes themselves
     * which also mismatch) */
    for (size_t i = 0; i < P; i++) {
        memcpy(b, s.b, s.n);
        b[P + i] ^= 0x40;
        ms_error e = {0};
        coll_t c = {.fail_at = -1};
        int rc = run(b, s.n, NULL, &e, &c);
        /* an error, or (when a length grew) a page still waiting for bytes */
        ck_assert_msg(rc != MS_OK || last_pending > 0, "flipped byte %zu of page 1 accepted", i);
        ck_assert_int_le(c.n, 1); /* nothing from the damaged page onwards */
        coll_free(&c);
    }
    memcpy(b, s.b, s.n);
    b[P + 40] ^= 1;
    expect_fail(b, s.n, MS_ERR_FORMAT, "bad CRC");
    /* version and flags */
    memcpy(b, s.b, s.n);
    b[4] = 1;
    expect_fail(b, s.n, MS_ERR_FORMAT, "version");
    memcpy(b, s.b, s.n);
    b[5] |= 0x10;
    expect_fail(b, s.n, MS_ERR_FORMAT, "flags");
    /* no BOS */
    expect_fail(s.b + P, s.n - P, MS_ERR_FORMAT, "BOS");
    /* second BOS, serial change, sequence gap: edit page 2 and fix its CRC */
    memcpy(b, s.b, s.n);
    b[2 * P + 5] |= OGG_FLAG_BOS;
    fix_crc(b + 2 * P);
    expect_fail(b, s.n, MS_ERR_FORMAT, "second BOS");
    memcpy(b, s.b, s.n);
    b[2 * P + 14] ^= 1;
    fix_crc(b + 2 * P);
    expect_fail(b, s.n, MS_ERR_FORMAT, "serial");
    memcpy(b, s.b, s.n);
    b[2 * P + 18] = 7;
    fix_crc(b + 2 * P);
    expect_fail(b, s.n, MS_ERR_FORMAT, "gap");
    /* continued flag without a pending packet */
    memcpy(b, s.b, s.n);
    b[P + 5] |= OGG_FLAG_CONTINUED;
    fix_crc(b + P);
    expect_fail(b, s.n, MS_ERR_FORMAT, "continues");
    /* page after EOS */
    buf_t t = {0};
    buf_add(&t, s.b, s.n);
    buf_add(&t, s.b + P, P);
    expect_fail(t.b, t.n, MS_ERR_FORMAT, "after the end");
    free(t.b);

    /* truncated page: no error, bytes kept, no packet from it */
    {
        ms_error e = {0};
        coll_t c = {.fail_at = -1};
        ogg_demux *d = ogg_demux_create(NULL, &e);
        ck_assert_int_eq(ogg_demux_feed(d, s.b, P + 50, collect, &c, &e), MS_OK);
        ck_assert_int_eq(c.n, 1);
        ck_assert_uint_eq(ogg_demux_pending_bytes(d), 50);
        ck_assert(!ogg_demux_eos(d));
        coll_free(&c);
        ogg_demux_free(d);
    }
    /* sticky error */
    {
        ms_error e = {0};
        coll_t c = {.fail_at = -1};
        ogg_demux *d = ogg_demux_create(NULL, &e);
        ck_assert_int_eq(ogg_demux_feed(d, (const uint8_t *)"xxxx", 4, collect, &c, &e), MS_ERR_FORMAT);
        ck_assert_int_eq(ogg_demux_feed(d, s.b, s.n, collect, &c, &e), MS_ERR_STATE);
        ck_assert_int_eq(c.n, 0);
        ogg_demux_free(d);
    }
    /* callback error stops the feed */
    {
        ms_error e = {0};
        coll_t c = {.fail_at = 2};
        ck_assert_int_eq(run(s.b, s.n, NULL, &e, &c), MS_ERR_RANGE);
        ck_assert_int_eq(c.n, 2);
        coll_free(&c);
    }
    /* limits: packet size and packets per feed */
    {
        ms_error e = {0};
        coll_t c = {.fail_at = -1};
        ogg_limits lim = {.max_packet_bytes = 99};
        ck_assert_int_eq(run(s.b, s.n, &lim, &e, &c), MS_ERR_LIMIT);
        ck_assert_int_eq(c.n, 0);
        ogg_limits lim2 = {.max_packets_per_feed = 3};
        ck_assert_int_eq(run(s.b, s.n, &lim2, &e, &c), MS_ERR_LIMIT);
        ck_assert_int_eq(c.n, 3);
        coll_free(&c);
        c.fail_at = -1;
        /* the limit is per feed call: page by page is fine */
        ogg_demux *d = ogg_demux_create(&lim2, &e);
        for (int i = 0; i < 4; i++) ck_assert_int_eq(ogg_demux_feed(d, s.b + i * P, P, collect, &c, &e), MS_OK);
        ck_assert_int_eq(c.n, 4);
        coll_free(&c);
        ogg_demux_free(d);
    }
    free(b);
    free(s.b);
}
END_TEST

START_TEST(test_hostile_continuation) {
    /* packets spanning pages: cut, EOS inside a packet, oversize across pages */
    uint8_t page[OGG_PAGE_MAX_BYTES];
    uint8_t lace[255];
    uint8_t body[255 * 255];
    memset(lace, 255, sizeof lace);
    pkt_fill(body, sizeof body, 3);
    buf_t s = {0};
    size_t n;
    ogg_page_info pi = {.flags = OGG_FLAG_BOS, .granule = -1, .serial = 1, .seq = 0};
    ck_assert_int_eq(ogg_write_page(page, sizeof page, &pi, lace, 10, body, 2550, &n, NULL), MS_OK);
    buf_add(&s, page, n);
    size_t first = n;
    /* next page not flagged continued */
    pi = (ogg_page_info){.flags = 0, .granule = 5, .serial = 1, .seq = 1};
    uint8_t l1 = 10;
    ck_assert_int_eq(ogg_write_page(page, sizeof page, &pi, &l1, 1, body, 10, &n, NULL), MS_OK);
    buf_add(&s, page, n);
    expect_fail(s.b, s.n, MS_ERR_FORMAT, "cut off");
    /* EOS page ending in a 255 lacing value */
    s.n = first;
    pi = (ogg_page_info){.flags = OGG_FLAG_CONTINUED | OGG_FLAG_EOS, .granule = -1, .serial = 1, .seq = 1};
    ck_assert_int_eq(ogg_write_page(page, sizeof page, &pi, lace, 1, body, 255, &n, NULL), MS_OK);
    buf_add(&s, page, n);
    expect_fail(s.b, s.n, MS_ERR_FORMAT, "inside a packet");
    /* a packet growing over many full pages hits the default packet limit */
    s.n = 0;
    for (uint32_t i = 0; i < 3; i++) {
        pi = (ogg_page_info){.flags = (uint8_t)(i ? OGG_FLAG_CONTINUED : OGG_FLAG_BOS), .granule = -1, .serial = 1, .seq = i};
        ck_assert_int_eq(ogg_write_page(page, sizeof page, &pi, lace, 255, body, 255 * 255, &n, NULL), MS_OK);
        buf_add(&s, page, n);
    }
    expect_fail(s.b, s.n, MS_ERR_LIMIT, "larger than");
    free(s.b);
}
END_TEST

START_TEST(test_random_bytes) {
    uint8_t b[4096];
    for (int it = 0; it < 2000; it++) {
        size_t n = rnd() % sizeof b;
        for (size_t i = 0; i < n; i++) b[i] = (uint8_t)rnd();
        if (it % 2 && n >= 4) memcpy(b, "OggS", 4); /* get past the capture pattern */
        if (it % 4 == 1 && n >= 6) { b[4] = 0; b[5] &= 7; }
        ms_error e = {0};
        coll_t c = {.fail_at = -1};
        int rc = run(b, n, NULL, &e, &c);
        /* a random page passes the CRC with probability 2^-32 */
        ck_assert_int_eq(c.n, 0);
        ck_assert(rc == MS_OK || rc == MS_ERR_FORMAT);
        coll_free(&c);
    }
}
END_TEST

/* ---- Ogg Opus ---- */

typedef struct { int n; int64_t last_granule; int pre_skip; } audio_coll;
static int on_audio(void *user, const ogg_opus_head *h, const ogg_pkt *k, ms_error *err) {
    (void)err;
    audio_coll *a = user;
    a->n++;
    a->pre_skip = h->pre_skip;
    if (k->granule >= 0) a->last_granule = k->granule;
    return MS_OK;
}

static buf_t mux_stream(int npk) {
    ogg_opus_mux m;
    ogg_opus_mux_init(&m, 0xabcdef01u, 1, OGG_OPUS_DEF_PRE_SKIP, OGG_OPUS_DEF_INPUT_RATE);
    buf_t s = {0};
    uint8_t out[4096];
    size_t n;
    ck_assert_int_eq(ogg_opus_mux_headers(&m, out, sizeof out, &n, NULL), MS_OK);
    ck_assert_uint_eq(n, OGG_OPUS_HEADER_PAGES_BYTES);
    buf_add(&s, out, n);
    uint8_t pkt[120];
    pkt_fill(pkt, sizeof pkt, 1);
    for (int i = 0; i < npk; i++) {
        ck_assert_int_eq(ogg_opus_mux_packet(&m, pkt, sizeof pkt, 1920, i == npk - 1, out, sizeof out, &n, NULL), MS_OK);
        ck_assert_uint_eq(n, ogg_packet_page_bytes(sizeof pkt));
        buf_add(&s, out, n);
    }
    ck_assert_int_eq(ogg_opus_mux_packet(&m, pkt, sizeof pkt, 1920, false, out, sizeof out, &n, NULL), MS_ERR_STATE);
    return s;
}

START_TEST(test_opus_mux_reader) {
    buf_t s = mux_stream(10);
    /* libogg reads it: 12 pages, granules 0, 0, 1920, 3840, ... */
    ogg_sync_state oy;
    ogg_sync_init(&oy);
    char *dst = ogg_sync_buffer(&oy, (long)s.n);
    memcpy(dst, s.b, s.n);
    ogg_sync_wrote(&oy, (long)s.n);
    ogg_page pg;
    int pages = 0;
    while (ogg_sync_pageout(&oy, &pg) == 1) {
        ck_assert_int_eq(ogg_page_packets(&pg), 1);
        ck_assert_int_eq(ogg_page_granulepos(&pg), pages < 2 ? 0 : (pages - 1) * 1920);
        ck_assert_int_eq(!!ogg_page_bos(&pg), pages == 0);
        ck_assert_int_eq(!!ogg_page_eos(&pg), pages == 11);
        ck_assert_uint_eq((uint32_t)ogg_page_serialno(&pg), 0xabcdef01u);
        if (pages == 0) {
            ck_assert_int_eq(pg.body_len, 19);
            const uint8_t want[19] = {'O', 'p', 'u', 's', 'H', 'e', 'a', 'd', 1, 1, 0x00, 0x0f,
                                      0x80, 0xbb, 0, 0, 0, 0, 0}; /* 3840, 48000 */
            ck_assert_mem_eq(pg.body, want, 19);
        }
        pages++;
    }
    ck_assert_int_eq(pages, 12);
    ogg_sync_clear(&oy);

    /* our reader, in random chunks */
    ms_error e = {0};
    ogg_opus_reader *r = ogg_opus_reader_create(NULL, &e);
    ck_assert_ptr_null(ogg_opus_reader_head(r));
    audio_coll a = {0};
    size_t off = 0;
    while (off < s.n) {
        size_t k = 1 + rnd() % 200;
        if (k > s.n - off) k = s.n - off;
        ck_assert_int_eq(ogg_opus_reader_feed(r, s.b + off, k, on_audio, &a, &e), MS_OK);
        off += k;
    }
    ck_assert_int_eq(a.n, 10);
    ck_assert_int_eq(a.last_granule, 10 * 1920);
    ck_assert_int_eq(a.pre_skip, 3840);
    const ogg_opus_head *h = ogg_opus_reader_head(r);
    ck_assert_ptr_nonnull(h);
    ck_assert_uint_eq(h->channels, 1);
    ck_assert_uint_eq(h->input_rate, 48000);
    ck_assert(ogg_demux_eos(ogg_opus_reader_demux(r)));
    ogg_opus_reader_free(r);
    free(s.b);
}
END_TEST

/* Stream whose first two packets are head/tags as given, then one audio page. */
static int opus_try(const uint8_t *head, size_t hl, const uint8_t *tags, size_t tl, ms_error *e) {
    buf_t s = {0};
    uint8_t page[4096];
    size_t n;
    ogg_page_info pi = {.flags = OGG_FLAG_BOS, .granule = 0, .serial = 9, .seq = 0};
    ogg_write_packet_page(page, sizeof page, &pi, head, hl, &n, NULL);
    buf_add(&s, page, n);
    pi = (ogg_page_info){.flags = 0, .granule = 0, .serial = 9, .seq = 1};
    ogg_write_packet_page(page, sizeof page, &pi, tags, tl, &n, NULL);
    buf_add(&s, page, n);
    pi = (ogg_page_info){.flags = OGG_FLAG_EOS, .granule = 1920, .serial = 9, .seq = 2};
    ogg_write_packet_page(page, sizeof page, &pi, (const uint8_t *)"\xf8\xff\xfe", 3, &n, NULL);
    buf_add(&s, page, n);
    ogg_opus_reader *r = ogg_opus_reader_create(NULL, e);
    audio_coll a = {0};
    int rc = ogg_opus_reader_feed(r, s.b, s.n, on_audio, &a, e);
    if (rc == MS_OK) ck_assert_int_eq(a.n, 1);
    ogg_opus_reader_free(r);
    free(s.b);
    return rc;
}

START_TEST(test_opus_hostile) {
    ogg_opus_head h = {.version = 1, .channels = 1, .pre_skip = 312, .input_rate = 24000};
    uint8_t head[OGG_OPUS_HEAD_BYTES];
    ogg_opus_write_head(head, &h);
    const uint8_t tags[] = "OpusTags\x03\0\0\0abc\x01\0\0\0\x05\0\0\0k=val";
    size_t tl = sizeof tags - 1;
    ms_error e = {0};
    ck_assert_int_eq(opus_try(head, sizeof head, tags, tl, &e), MS_OK);
    /* not Opus: a Vorbis identification header */
    ck_assert_int_eq(opus_try((const uint8_t *)"\x01vorbis\0\0\0\0\x01\x44\xac\0\0", 16, tags, tl, &e), MS_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(e.msg, "OpusHead"));
    /* bad fields */
    uint8_t b[OGG_OPUS_HEAD_BYTES];
    memcpy(b, head, sizeof b); b[8] = 0;
    ck_assert_int_eq(opus_try(b, sizeof b, tags, tl, &e), MS_ERR_UNSUPPORTED);
    memcpy(b, head, sizeof b); b[8] = 16;
    ck_assert_int_eq(opus_try(b, sizeof b, tags, tl, &e), MS_ERR_UNSUPPORTED);
    memcpy(b, head, sizeof b); b[9] = 3;
    ck_assert_int_eq(opus_try(b, sizeof b, tags, tl, &e), MS_ERR_UNSUPPORTED);
    memcpy(b, head, sizeof b); b[9] = 0;
    ck_assert_int_eq(opus_try(b, sizeof b, tags, tl, &e), MS_ERR_UNSUPPORTED);
    memcpy(b, head, sizeof b); b[18] = 1;
    ck_assert_int_eq(opus_try(b, sizeof b, tags, tl, &e), MS_ERR_UNSUPPORTED);
    ck_assert_int_eq(opus_try(head, 18, tags, tl, &e), MS_ERR_FORMAT); /* short */
    /* tags: missing, truncated vendor, comment past the end, too many comments */
    ck_assert_int_eq(opus_try(head, sizeof head, (const uint8_t *)"\xf8\xff\xfe", 3, &e), MS_ERR_FORMAT);
    ck_assert_int_eq(opus_try(head, sizeof head, tags, 14, &e), MS_ERR_FORMAT);
    ck_assert_int_eq(opus_try(head, sizeof head, tags, tl - 1, &e), MS_ERR_FORMAT);
    uint8_t t2[64];
    memcpy(t2, tags, tl);
    t2[10] = 0xff; t2[11] = 0xff; /* vendor length 0xffff0003 */
    ck_assert_int_eq(opus_try(head, sizeof head, t2, tl, &e), MS_ERR_FORMAT);
    memcpy(t2, tags, tl);
    t2[18] = 0xff; /* comment count 0xff000001 */
    ck_assert_int_eq(opus_try(head, sizeof head, t2, tl, &e), MS_ERR_LIMIT);
    /* OpusHead not alone on its page */
    {
        buf_t s = {0};
        uint8_t page[4096], body[200], lace[2] = {19, 3};
        memcpy(body, head, 19);
        memcpy(body + 19, "abc", 3);
        size_t n;
        ogg_page_info pi = {.flags = OGG_FLAG_BOS, .granule = 0, .serial = 9, .seq = 0};
        ck_assert_int_eq(ogg_write_page(page, sizeof page, &pi, lace, 2, body, 22, &n, NULL), MS_OK);
        ogg_opus_reader *r = ogg_opus_reader_create(NULL, &e);
        audio_coll a = {0};
        ck_assert_int_eq(ogg_opus_reader_feed(r, page, n, on_audio, &a, &e), MS_ERR_FORMAT);
        ck_assert_ptr_nonnull(strstr(e.msg, "alone"));
        ogg_opus_reader_free(r);
        free(s.b);
    }
}
END_TEST


/* ---- ogg_limits.chain: what the official servers' reader (sphn) takes ---- */

typedef struct { int n; uint64_t packetno[64]; int bos[64]; uint8_t first[64]; size_t len[64]; } chain_coll;
static int chain_collect(void *user, const ogg_pkt *k, ms_error *err) {
    (void)err;
    chain_coll *c = user;
    ck_assert_int_lt(c->n, 64);
    c->packetno[c->n] = k->packetno;
    c->bos[c->n] = k->bos;
    c->first[c->n] = k->len ? k->data[0] : 0;
    c->len[c->n] = k->len;
    c->n++;
    return MS_OK;
}

static int chain_run(const uint8_t *b, size_t n, bool chain, chain_coll *c, unsigned *streams, ms_error *e) {
    ogg_limits lim = {.chain = chain};
    ogg_demux *d = ogg_demux_create(&lim, e);
    int rc = ogg_demux_feed(d, b, n, chain_collect, c, e);
    if (streams) *streams = ogg_demux_streams(d);
    ogg_demux_free(d);
    return rc;
}

START_TEST(test_chain_tolerance) {
    size_t P = ogg_packet_page_bytes(100);
    buf_t s = small_stream(6, 5);
    ms_error e = {0};
    chain_coll c = {0};
    unsigned streams = 0;
    /* joined without its first two pages: refused strictly, read chained */
    ck_assert_int_eq(chain_run(s.b + 2 * P, s.n - 2 * P, false, &c, NULL, &e), MS_ERR_FORMAT);
    memset(&c, 0, sizeof c);
    ck_assert_int_eq(chain_run(s.b + 2 * P, s.n - 2 * P, true, &c, &streams, &e), MS_OK);
    ck_assert_int_eq(c.n, 4);
    ck_assert_int_eq(streams, 1);
    ck_assert_int_eq(c.bos[0], 0); /* not the stream's first packet: no header expected */
    /* a second stream (new serial, its BOS page) after two pages of the first:
     * strictly an error, chained a new stream numbered from 0 */
    buf_t t = {0};
    buf_add(&t, s.b, 2 * P);
    buf_t s2 = small_stream(3, 77);
    buf_add(&t, s2.b, s2.n);
    memset(&c, 0, sizeof c);
    ck_assert_int_eq(chain_run(t.b, t.n, false, &c, NULL, &e), MS_ERR_FORMAT);
    ck_assert_msg(strstr(e.msg, "serial") != NULL, "%s", e.msg);
    memset(&c, 0, sizeof c);
    ck_assert_int_eq(chain_run(t.b, t.n, true, &c, &streams, &e), MS_OK);
    ck_assert_int_eq(c.n, 5);
    ck_assert_int_eq(streams, 2);
    ck_assert_int_eq(c.packetno[2], 0);
    ck_assert_int_eq(c.bos[2], 1);
    /* chained after EOS (RFC 3533 4): the same */
    buf_t u = {0};
    buf_add(&u, s.b, s.n);
    buf_add(&u, s2.b, s2.n);
    memset(&c, 0, sizeof c);
    ck_assert_int_eq(chain_run(u.b, u.n, true, &c, &streams, &e), MS_OK);
    ck_assert_int_eq(c.n, 9);
    ck_assert_int_eq(streams, 2);
    /* still strict inside a logical stream: a serial change without BOS, a
     * sequence gap, a bad CRC, garbage between pages */
    uint8_t *b = malloc(s.n);
    memcpy(b, s.b, s.n);
    b[P + 14] ^= 1;
    fix_crc(b + P);
    memset(&c, 0, sizeof c);
    ck_assert_int_eq(chain_run(b, s.n, true, &c, NULL, &e), MS_ERR_FORMAT);
    ck_assert_msg(strstr(e.msg, "one logical stream") != NULL, "%s", e.msg);
    memcpy(b, s.b, s.n);
    b[P + 18] += 1;
    fix_crc(b + P);
    memset(&c, 0, sizeof c);
    ck_assert_int_eq(chain_run(b, s.n, true, &c, NULL, &e), MS_ERR_FORMAT);
    ck_assert_msg(strstr(e.msg, "gap") != NULL, "%s", e.msg);
    memcpy(b, s.b, s.n);
    b[P + 40] ^= 1;
    memset(&c, 0, sizeof c);
    ck_assert_int_eq(chain_run(b, s.n, true, &c, NULL, &e), MS_ERR_FORMAT);
    ck_assert_msg(strstr(e.msg, "bad CRC") != NULL, "%s", e.msg);
    /* after EOS only a BOS page may come */
    memset(&c, 0, sizeof c);
    buf_t v = {0};
    buf_add(&v, s.b, s.n);
    buf_add(&v, s.b + P, P);
    ck_assert_int_eq(chain_run(v.b, v.n, true, &c, NULL, &e), MS_ERR_FORMAT);
    ck_assert_msg(strstr(e.msg, "after the end of stream") != NULL, "%s", e.msg);
    free(b);
    free(s.b);
    free(s2.b);
    free(t.b);
    free(u.b);
    free(v.b);
}
END_TEST

/* A stream joined on a page that continues a packet: the piece whose start
 * was not seen is dropped, the packets after it come whole. */
START_TEST(test_chain_joined_mid_packet) {
    uint8_t big[600], small_pk[50], page[2000];
    pkt_fill(big, sizeof big, 9);
    pkt_fill(small_pk, sizeof small_pk, 4);
    /* page 7 (not BOS): the last 345 bytes of a packet begun earlier, then a
     * 50-byte packet */
    uint8_t lace[3] = {255, 90, 50};
    uint8_t body[395];
    memcpy(body, big + 255, 345);
    memcpy(body + 345, small_pk, 50);
    ogg_page_info pi = {.flags = OGG_FLAG_CONTINUED, .granule = 9600, .serial = 3, .seq = 7};
    size_t n;
    ck_assert_int_eq(ogg_write_page(page, sizeof page, &pi, lace, 3, body, 395, &n, NULL), MS_OK);
    ms_error e = {0};
    chain_coll c = {0};
    ck_assert_int_eq(chain_run(page, n, true, &c, NULL, &e), MS_OK);
    ck_assert_int_eq(c.n, 1);
    ck_assert_uint_eq(c.len[0], 50);
    ck_assert_int_eq(c.first[0], small_pk[0]);
    memset(&c, 0, sizeof c);
    ck_assert_int_eq(chain_run(page, n, false, &c, NULL, &e), MS_ERR_FORMAT);
}
END_TEST

static int count_audio(void *user, const ogg_opus_head *h, const ogg_pkt *k, ms_error *err) {
    (void)k;
    (void)err;
    int *a = user;
    a[0]++;
    a[1] = h->channels;
    a[2] = h->pre_skip;
    return MS_OK;
}

/* The Opus reader on chained input: a stream joined without its headers
 * gets a default mono head; a new stream's OpusHead is taken again. */
START_TEST(test_opus_reader_chain) {
    buf_t s = mux_stream(6);
    size_t hdr = OGG_OPUS_HEADER_PAGES_BYTES, P = ogg_packet_page_bytes(120);
    ogg_limits lim = {.chain = true};
    ms_error e = {0};
    ogg_opus_reader *r = ogg_opus_reader_create(&lim, &e);
    int a[3] = {0};
    ck_assert_int_eq(ogg_opus_reader_feed(r, s.b + hdr + 2 * P, s.n - hdr - 2 * P, count_audio, a, &e), MS_OK);
    ck_assert_int_eq(a[0], 4);
    ck_assert_int_eq(a[1], 1);
    ck_assert_int_eq(a[2], 0);
    ck_assert_uint_eq(ogg_opus_reader_streams(r), 1);
    /* the client begins again: its headers, then audio */
    ck_assert_int_eq(ogg_opus_reader_feed(r, s.b, s.n, count_audio, a, &e), MS_OK);
    ck_assert_int_eq(a[0], 10);
    ck_assert_int_eq(a[2], OGG_OPUS_DEF_PRE_SKIP);
    ck_assert_uint_eq(ogg_opus_reader_streams(r), 2);
    ogg_opus_reader_free(r);
    /* strictly, the headerless stream is refused */
    r = ogg_opus_reader_create(NULL, &e);
    ck_assert_int_ne(ogg_opus_reader_feed(r, s.b + hdr + 2 * P, s.n - hdr - 2 * P, count_audio, a, &e), MS_OK);
    ogg_opus_reader_free(r);
    free(s.b);
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("ogg");
    TCase *tc = tcase_new("ogg");
    tcase_add_test(tc, test_demux_vs_libogg);
    tcase_add_test(tc, test_writer_vs_libogg);
    tcase_add_test(tc, test_hostile);
    tcase_add_test(tc, test_hostile_continuation);
    tcase_add_test(tc, test_random_bytes);
    tcase_add_test(tc, test_opus_mux_reader);
    tcase_add_test(tc, test_opus_hostile);
    tcase_add_test(tc, test_chain_tolerance);
    tcase_add_test(tc, test_chain_joined_mid_packet);
    tcase_add_test(tc, test_opus_reader_chain);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN
