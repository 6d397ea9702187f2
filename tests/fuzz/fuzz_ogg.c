/* fuzz_ogg.c - libFuzzer target: the Ogg demuxer and the Ogg Opus reader.
 *
 * Byte 0 picks the chunk size the input is fed in (1..256 bytes, or all at
 * once) and small limits, so that page reassembly across feeds, packet
 * continuation and the limits are all exercised. Invariants checked: no
 * packet larger than the limit, no more packets per feed than the limit,
 * errors are sticky, packet numbers consecutive. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ogg.h"
#include "ogg_opus.h"

typedef struct {
    size_t max_len;
    uint64_t next_no;
    unsigned in_feed, per_feed;
} state;

static int on_pkt(void *user, const ogg_pkt *k, ms_error *err) {
    (void)err;
    state *s = user;
    if (k->len > s->max_len || k->packetno != s->next_no || ++s->in_feed > s->per_feed) abort();
    if (k->len) {
        volatile uint8_t x = k->data[0] ^ k->data[k->len - 1]; /* readable */
        (void)x;
    }
    s->next_no++;
    return MS_OK;
}

static int on_audio(void *user, const ogg_opus_head *h, const ogg_pkt *k, ms_error *err) {
    (void)err;
    state *s = user;
    if (h->channels < 1 || h->channels > 2 || k->len > s->max_len) abort();
    return MS_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint8_t mode = data[0];
    data++, size--;
    size_t chunk = (mode & 0x80) ? size + 1 : (size_t)(mode & 0x7f) * 2 + 1;
    ogg_limits lim = {.max_packet_bytes = (mode & 1) ? 300 : 0, .max_packets_per_feed = (mode & 2) ? 5 : 0};
    state s = {.max_len = (mode & 1) ? 300 : OGG_DEF_MAX_PACKET_BYTES,
               .per_feed = (mode & 2) ? 5 : OGG_DEF_MAX_PACKETS_PER_FEED};
    ms_error e;
    ogg_demux *d = ogg_demux_create(&lim, &e);
    ogg_opus_reader *r = ogg_opus_reader_create(&lim, &e);
    if (!d || !r) abort();
    int failed_d = 0, failed_r = 0;
    for (size_t o = 0; o < size; o += chunk) {
        size_t n = size - o < chunk ? size - o : chunk;
        s.in_feed = 0;
        int rc = ogg_demux_feed(d, data + o, n, on_pkt, &s, &e);
        if (failed_d && rc != MS_ERR_STATE) abort(); /* sticky */
        if (rc) failed_d = 1;
        rc = ogg_opus_reader_feed(r, data + o, n, on_audio, &s, &e);
        if (failed_r && rc != MS_ERR_STATE) abort();
        if (rc) failed_r = 1;
    }
    if (ogg_demux_pending_bytes(d) > OGG_PAGE_MAX_BYTES + s.max_len) abort();
    ogg_opus_reader_free(r);
    ogg_demux_free(d);
    return 0;
}
