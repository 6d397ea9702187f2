/* fuzz_ogg.c - libFuzzer target: the Ogg demuxer, the Ogg Opus reader and
 * the Opus decoder stream of the daemon (daemon/session/audio_opus.c, libopus).
 *
 * Byte 0 picks the chunk size the input is fed in (1..256 bytes, or all at
 * once) and small limits, so that page reassembly across feeds, packet
 * continuation and the limits are all exercised. Invariants checked: no
 * packet larger than the limit, no more packets per feed than the limit,
 * errors are sticky, packet numbers consecutive. With bit 0x40 of byte 0
 * the target first rewrites the CRC of every well-formed page, so that
 * mutations reach the stream checks and the Opus decoder instead of all
 * stopping at the CRC. With bit 0x04 the demuxers run chained
 * (ogg_limits.chain: streams joined late and begun again, as the daemon
 * reads client audio); packet numbers then restart at 0 with each new
 * logical stream. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "audio_opus.h"
#include "ogg.h"
#include "ogg_opus.h"

typedef struct {
    int chain;
    size_t max_len;
    uint64_t next_no;
    unsigned in_feed, per_feed;
} state;

static int on_pkt(void *user, const ogg_pkt *k, ms_error *err) {
    (void)err;
    state *s = user;
    if (s->chain && k->packetno == 0) s->next_no = 0; /* a new logical stream */
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

static int on_pcm(void *user, const float *pcm, size_t n, ms_error *err) {
    (void)err;
    uint64_t *total = user;
    if (n == 0 || n > AUDIO_MAX_PACKET_SAMPLES) abort();
    volatile float x = pcm[0] + pcm[n - 1];
    (void)x;
    *total += n;
    return MS_OK;
}

/* Recompute the CRC of each complete page found back to back in b. */
static void fix_crcs(uint8_t *b, size_t n) {
    size_t o = 0;
    while (n - o >= OGG_HEADER_BYTES && memcmp(b + o, "OggS", 4) == 0) {
        size_t nseg = b[o + 26];
        if (n - o < OGG_HEADER_BYTES + nseg) return;
        size_t total = OGG_HEADER_BYTES + nseg;
        for (size_t i = 0; i < nseg; i++) total += b[o + OGG_HEADER_BYTES + i];
        if (n - o < total) return;
        memset(b + o + 22, 0, 4);
        uint32_t c = ogg_crc32_update(0, b + o, total);
        for (int i = 0; i < 4; i++) b[o + 22 + i] = (uint8_t)(c >> (8 * i));
        o += total;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t size) {
    if (size < 1) return 0;
    uint8_t mode = in[0];
    size--;
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy) return 0;
    memcpy(copy, in + 1, size);
    if (mode & 0x40) fix_crcs(copy, size);
    const uint8_t *data = copy;
    size_t chunk = (mode & 0x80) ? size + 1 : (size_t)(mode & 0x7f) * 2 + 1;
    ogg_limits lim = {.max_packet_bytes = (mode & 1) ? 300 : 0, .max_packets_per_feed = (mode & 2) ? 5 : 0,
                      .chain = (mode & 4) != 0};
    state s = {.chain = (mode & 4) != 0, .max_len = (mode & 1) ? 300 : OGG_DEF_MAX_PACKET_BYTES,
               .per_feed = (mode & 2) ? 5 : OGG_DEF_MAX_PACKETS_PER_FEED};
    ms_error e;
    ogg_demux *d = ogg_demux_create(&lim, &e);
    ogg_opus_reader *r = ogg_opus_reader_create(&lim, &e);
    audio_dec *ad = audio_dec_create(&lim, AUDIO_PRE_SKIP_RFC, &e);
    if (!d || !r || !ad) abort();
    int failed_d = 0, failed_r = 0, failed_a = 0;
    uint64_t pcm_total = 0;
    for (size_t o = 0; o < size; o += chunk) {
        size_t n = size - o < chunk ? size - o : chunk;
        s.in_feed = 0;
        int rc = ogg_demux_feed(d, data + o, n, on_pkt, &s, &e);
        if (failed_d && rc != MS_ERR_STATE) abort(); /* sticky */
        if (rc) failed_d = 1;
        rc = ogg_opus_reader_feed(r, data + o, n, on_audio, &s, &e);
        if (failed_r && rc != MS_ERR_STATE) abort();
        if (rc) failed_r = 1;
        rc = audio_dec_feed(ad, data + o, n, on_pcm, &pcm_total, &e);
        if (failed_a && rc != MS_ERR_STATE) abort();
        if (rc) failed_a = 1;
    }
    if (pcm_total != audio_dec_samples(ad)) abort();
    audio_dec_free(ad);
    if (ogg_demux_pending_bytes(d) > OGG_PAGE_MAX_BYTES + s.max_len) abort();
    ogg_opus_reader_free(r);
    ogg_demux_free(d);
    free(copy);
    return 0;
}
