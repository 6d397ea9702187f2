/* audio_opus.c - Ogg Opus <-> 24 kHz mono PCM for sessions (libopus). */
#include "audio_opus.h"

#include <opus/opus.h> /* Debian: /usr/include/opus/opus.h; no extra -I needed */
#include <stdbool.h>
#include <stdlib.h>

/* ---- decoder --------------------------------------------------------- */

struct audio_dec {
    ogg_opus_reader *rd;
    OpusDecoder *dec;       /* created when the OpusHead is known */
    audio_pre_skip mode;
    int skip;               /* 24 kHz samples of pre-skip still to drop */
    unsigned stream;        /* the reader's stream the decoder is set up for */
    uint64_t pos48;         /* 48 kHz samples decoded, pre-skip included */
    uint64_t out;           /* samples delivered */
    audio_pcm_fn fn;        /* valid during a feed */
    void *user;
    float pcm[AUDIO_MAX_PACKET_SAMPLES];
};

audio_dec *audio_dec_create(const ogg_limits *lim, audio_pre_skip pre_skip, ms_error *err) {
    audio_dec *d = calloc(1, sizeof *d);
    if (!d) {
        ms_err_set(err, MS_ERR_NOMEM, "audio decoder");
        return NULL;
    }
    d->mode = pre_skip;
    d->rd = ogg_opus_reader_create(lim, err);
    if (!d->rd) {
        free(d);
        return NULL;
    }
    return d;
}

void audio_dec_free(audio_dec *d) {
    if (!d) return;
    if (d->dec) opus_decoder_destroy(d->dec);
    ogg_opus_reader_free(d->rd);
    free(d);
}

uint64_t audio_dec_samples(const audio_dec *d) { return d->out; }
const ogg_opus_reader *audio_dec_reader(const audio_dec *d) { return d->rd; }

static int on_audio(void *user, const ogg_opus_head *h, const ogg_pkt *k, ms_error *err) {
    audio_dec *d = user;
    unsigned stream = ogg_opus_reader_streams(d->rd);
    if (!d->dec || stream != d->stream) {
        /* the first stream, or a new one (a client that began its stream
         * again): a decoder in the state a new stream expects */
        if (!d->dec) {
            int e;
            /* one output channel: libopus downmixes stereo packets */
            d->dec = opus_decoder_create(MS_SAMPLE_RATE_HZ, 1, &e);
            if (!d->dec) return ms_err_set(err, MS_ERR_NOMEM, "opus decoder: %s", opus_strerror(e));
        } else {
            opus_decoder_ctl(d->dec, OPUS_RESET_STATE);
        }
        opus_decoder_ctl(d->dec, OPUS_SET_GAIN(h->output_gain_q8));
        d->skip = d->mode == AUDIO_PRE_SKIP_RFC ? h->pre_skip / 2 : 0;
        d->pos48 = 0;
        d->stream = stream;
    }
    if (k->len == 0)
        return ms_err_set(err, MS_ERR_FORMAT, "empty Opus packet %llu", (unsigned long long)k->packetno);
    int ns = opus_packet_get_nb_samples(k->data, (opus_int32)k->len, MS_SAMPLE_RATE_HZ);
    if (ns <= 0 || ns > AUDIO_MAX_PACKET_SAMPLES)
        return ms_err_set(err, MS_ERR_FORMAT, "undecodable Opus packet %llu: %s",
                          (unsigned long long)k->packetno, ns < 0 ? opus_strerror(ns) : "bad duration");
    int n = opus_decode_float(d->dec, k->data, (opus_int32)k->len, d->pcm, AUDIO_MAX_PACKET_SAMPLES, 0);
    if (n < 0)
        return ms_err_set(err, MS_ERR_FORMAT, "undecodable Opus packet %llu: %s",
                          (unsigned long long)k->packetno, opus_strerror(n));
    d->pos48 += 2u * (uint64_t)n;
    /* end trimming: the EOS granule is the stream's length in 48 kHz samples */
    if (k->eos && k->granule >= 0 && d->pos48 > (uint64_t)k->granule) {
        uint64_t extra = (d->pos48 - (uint64_t)k->granule) / 2;
        n = extra >= (uint64_t)n ? 0 : n - (int)extra;
    }
    int start = 0;
    if (d->skip > 0) {
        start = d->skip < n ? d->skip : n;
        d->skip -= start;
    }
    if (n - start > 0) {
        d->out += (uint64_t)(n - start);
        return d->fn(d->user, d->pcm + start, (size_t)(n - start), err);
    }
    return MS_OK;
}

int audio_dec_feed(audio_dec *d, const uint8_t *buf, size_t len, audio_pcm_fn fn, void *user,
                   ms_error *err) {
    MS_ASSERT(d != NULL && fn != NULL);
    d->fn = fn;
    d->user = user;
    int rc = ogg_opus_reader_feed(d->rd, buf, len, on_audio, d, err);
    d->fn = NULL;
    d->user = NULL;
    return rc;
}

/* ---- encoder --------------------------------------------------------- */

struct audio_enc {
    OpusEncoder *enc;
    ogg_opus_mux mux;
    int lookahead;
    uint8_t pkt[AUDIO_ENC_MAX_PACKET_BYTES];
};

audio_enc *audio_enc_create(uint32_t serial, int bitrate_bps, uint16_t pre_skip_48k, ms_error *err) {
    audio_enc *e = calloc(1, sizeof *e);
    if (!e) {
        ms_err_set(err, MS_ERR_NOMEM, "audio encoder");
        return NULL;
    }
    if (bitrate_bps != 0 && (bitrate_bps < AUDIO_ENC_MIN_BITRATE || bitrate_bps > AUDIO_ENC_MAX_BITRATE)) {
        ms_err_set(err, MS_ERR_RANGE, "opus bitrate %d bit/s outside [%d, %d]", bitrate_bps,
                   AUDIO_ENC_MIN_BITRATE, AUDIO_ENC_MAX_BITRATE);
        free(e);
        return NULL;
    }
    int rc;
    e->enc = opus_encoder_create(MS_SAMPLE_RATE_HZ, 1, OPUS_APPLICATION_VOIP, &rc);
    if (!e->enc) {
        ms_err_set(err, MS_ERR_NOMEM, "opus encoder: %s", opus_strerror(rc));
        free(e);
        return NULL;
    }
    if (bitrate_bps > 0 && opus_encoder_ctl(e->enc, OPUS_SET_BITRATE(bitrate_bps)) != OPUS_OK) {
        ms_err_set(err, MS_ERR_RANGE, "opus encoder: bitrate %d bit/s refused", bitrate_bps);
        audio_enc_free(e);
        return NULL;
    }
    opus_int32 la = 0;
    opus_encoder_ctl(e->enc, OPUS_GET_LOOKAHEAD(&la));
    e->lookahead = (int)la;
    ogg_opus_mux_init(&e->mux, serial, 1, pre_skip_48k, OGG_OPUS_DEF_INPUT_RATE);
    return e;
}

void audio_enc_free(audio_enc *e) {
    if (!e) return;
    if (e->enc) opus_encoder_destroy(e->enc);
    free(e);
}

int audio_enc_lookahead(const audio_enc *e) { return e->lookahead; }

int audio_enc_frame(audio_enc *e, const float *pcm, uint8_t *out, size_t cap, size_t *out_len,
                    ms_error *err) {
    MS_ASSERT(e != NULL && pcm != NULL && out != NULL && out_len != NULL);
    *out_len = 0;
    if (cap < AUDIO_ENC_OUT_MAX) /* checked first so that no state changes */
        return ms_err_set(err, MS_ERR_LIMIT, "audio encoder output needs %u bytes, have %zu",
                          (unsigned)AUDIO_ENC_OUT_MAX, cap);
    size_t o = 0, n;
    if (!e->mux.headers_done) {
        int rc = ogg_opus_mux_headers(&e->mux, out, cap, &n, err);
        if (rc) return rc;
        o += n;
    }
    for (int p = 0; p < MS_FRAME_SAMPLES / AUDIO_PACKET_SAMPLES; p++) {
        opus_int32 b = opus_encode_float(e->enc, pcm + p * AUDIO_PACKET_SAMPLES, AUDIO_PACKET_SAMPLES,
                                         e->pkt, (opus_int32)sizeof e->pkt);
        if (b < 0) return ms_err_set(err, MS_ERR_STATE, "opus encode: %s", opus_strerror(b));
        int rc = ogg_opus_mux_packet(&e->mux, e->pkt, (size_t)b, 2 * AUDIO_PACKET_SAMPLES, false,
                                     out + o, cap - o, &n, err);
        if (rc) return rc;
        o += n;
    }
    *out_len = o;
    return MS_OK;
}
