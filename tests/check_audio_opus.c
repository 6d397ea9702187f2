/* check_audio_opus.c - Opus stream wrappers: round trips, interoperability
 * with opus-tools (opusdec reads what we write, we read what opusenc
 * writes), hostile streams. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <opus/opus.h>

#include "audio_opus.h"
#include "check_main.h"

#define PI 3.14159265358979323846

typedef struct { float *x; size_t n, cap; } pcm_t;
static int collect(void *user, const float *pcm, size_t n, ms_error *err) {
    (void)err;
    pcm_t *p = user;
    if (p->n + n > p->cap) {
        p->cap = (p->n + n) * 2;
        p->x = realloc(p->x, p->cap * sizeof(float));
    }
    memcpy(p->x + p->n, pcm, n * sizeof(float));
    p->n += n;
    return MS_OK;
}

/* A chirp from 200 Hz up by 600 Hz per second: unlike a pure sine it has
 * a single best alignment. */
static void chirp(float *x, size_t n, size_t offset) {
    for (size_t i = 0; i < n; i++) {
        double t = (double)(i + offset) / MS_SAMPLE_RATE_HZ;
        x[i] = (float)(0.5 * sin(2 * PI * (200 * t + 300 * t * t)));
    }
}

/* Encode nframes of the chirp; returns the Ogg bytes. */
static uint8_t *encode_chirp(int nframes, size_t *len, int *lookahead) {
    ms_error e = {0};
    audio_enc *enc = audio_enc_create(0x5eed, 0, OGG_OPUS_DEF_PRE_SKIP, &e);
    ck_assert_msg(enc != NULL, "%s", e.msg);
    *lookahead = audio_enc_lookahead(enc);
    uint8_t *all = malloc((size_t)nframes * AUDIO_ENC_OUT_MAX);
    size_t o = 0;
    float frame[MS_FRAME_SAMPLES];
    for (int f = 0; f < nframes; f++) {
        chirp(frame, MS_FRAME_SAMPLES, (size_t)f * MS_FRAME_SAMPLES);
        size_t n;
        ck_assert_int_eq(audio_enc_frame(enc, frame, all + o, AUDIO_ENC_OUT_MAX, &n, &e), MS_OK);
        if (f == 0) ck_assert_uint_gt(n, OGG_OPUS_HEADER_PAGES_BYTES);
        o += n;
    }
    audio_enc_free(enc);
    *len = o;
    return all;
}

/* Largest normalised correlation of y against x delayed by 0..maxlag. */
static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double best_corr(const float *x, size_t nx, const float *y, size_t ny, int maxlag, int *lag) {
    double best = -2;
    for (int l = 0; l <= maxlag; l++) {
        double sxy = 0, sxx = 0, syy = 0;
        for (size_t i = 0; i + (size_t)l < nx && i < ny; i++) {
            sxy += (double)x[i + (size_t)l] * y[i];
            sxx += (double)x[i + (size_t)l] * x[i + (size_t)l];
            syy += (double)y[i] * y[i];
        }
        double c = sxy / sqrt(sxx * syy + 1e-30);
        if (c > best) best = c, *lag = l;
    }
    return best;
}

static int decode_mode(const uint8_t *b, size_t n, size_t chunk, audio_pre_skip mode, pcm_t *out, ms_error *e) {
    audio_dec *d = audio_dec_create(NULL, mode, e);
    ck_assert_ptr_nonnull(d);
    int rc = MS_OK;
    for (size_t o = 0; o < n && rc == MS_OK; o += chunk) {
        size_t k = n - o < chunk ? n - o : chunk;
        rc = audio_dec_feed(d, b + o, k, collect, out, e);
    }
    if (rc == MS_OK) ck_assert_uint_eq(audio_dec_samples(d), out->n);
    audio_dec_free(d);
    return rc;
}

static int decode_all(const uint8_t *b, size_t n, size_t chunk, pcm_t *out, ms_error *e) {
    return decode_mode(b, n, chunk, AUDIO_PRE_SKIP_RFC, out, e);
}

START_TEST(test_roundtrip) {
    const int N = 25; /* 2 s */
    size_t len;
    int la;
    double t0 = now_s();
    uint8_t *s = encode_chirp(N, &len, &la);
    double t1 = now_s();
    pcm_t out = {0};
    ms_error e = {0};
    ck_assert_msg(decode_all(s, len, 777, &out, &e) == MS_OK, "%s", e.msg);
    double t2 = now_s();
    /* informative only (shared machine): CPU cost per 80 ms frame */
    printf("roundtrip: %d frames, %zu bytes (%.1f kbit/s); encode %.0f us/frame, decode %.0f us/frame\n",
           N, len, 8.0 * (double)len / (N * 0.08) / 1000, 1e6 * (t1 - t0) / N, 1e6 * (t2 - t1) / N);
    /* pre-skip 3840 at 48 kHz drops the first 1920 samples at 24 kHz */
    ck_assert_uint_eq(out.n, (size_t)N * MS_FRAME_SAMPLES - 1920);
    size_t nin = (size_t)N * MS_FRAME_SAMPLES;
    float *in = malloc(nin * sizeof(float));
    chirp(in, nin, 0);
    /* out[i] follows in[i + 1920 - lookahead]: the pre-skip removes 1920
     * samples, the encoder delays by its lookahead */
    int lag = -1;
    double c = best_corr(in, nin, out.x, out.n - 2500, 2500, &lag);
    printf("roundtrip: lookahead %d, best lag %d (expected %d), correlation %.4f\n", la, lag,
           1920 - la, c);
    ck_assert_msg(c > 0.9, "correlation %.4f", c);
    ck_assert_msg(abs(lag - (1920 - la)) <= 2, "lag %d, expected %d", lag, 1920 - la);
    free(in);
    free(out.x);
    free(s);
}
END_TEST

/* The default of the daemon (as the official servers, which decode with
 * sphn): the pre-skip samples are kept, so the output is the whole decoded
 * stream and follows the input by the encoder's lookahead alone; the RFC
 * mode of the same bytes is exactly the same samples less the first 1920. */
START_TEST(test_pre_skip_ignore) {
    const int N = 12;
    size_t len;
    int la;
    uint8_t *s = encode_chirp(N, &len, &la);
    pcm_t all = {0}, rfc = {0};
    ms_error e = {0};
    ck_assert_msg(decode_mode(s, len, 501, AUDIO_PRE_SKIP_IGNORE, &all, &e) == MS_OK, "%s", e.msg);
    ck_assert_msg(decode_mode(s, len, 501, AUDIO_PRE_SKIP_RFC, &rfc, &e) == MS_OK, "%s", e.msg);
    ck_assert_uint_eq(all.n, (size_t)N * MS_FRAME_SAMPLES);
    ck_assert_uint_eq(rfc.n + 1920, all.n);
    ck_assert(memcmp(all.x + 1920, rfc.x, rfc.n * sizeof(float)) == 0);
    size_t nin = (size_t)N * MS_FRAME_SAMPLES;
    float *in = malloc(nin * sizeof(float));
    chirp(in, nin, 0);
    /* all[i] follows in[i - lookahead]: compare from past the lookahead */
    int lag = -1;
    double c = best_corr(in, nin - 2500, all.x + la, all.n - la - 2500, 2500, &lag);
    ck_assert_msg(c > 0.9 && lag <= 2, "correlation %.4f lag %d", c, lag);
    free(in);
    free(all.x);
    free(rfc.x);
    free(s);
}
END_TEST

static void need(const char *prog) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "command -v %s >/dev/null 2>&1", prog);
    ck_assert_msg(system(cmd) == 0, "%s not installed (Debian package opus-tools, see tests/deps.txt)", prog);
}

START_TEST(test_opusdec_reads_our_stream) {
    need("opusdec");
    check_tmp_make();
    const int N = 25;
    size_t len;
    int la;
    uint8_t *s = encode_chirp(N, &len, &la);
    char in[128], out[128], cmd[512];
    snprintf(in, sizeof in, "%s/ours.opus", check_tmp);
    snprintf(out, sizeof out, "%s/ours.f32", check_tmp);
    check_write_file(in, s, len);
    snprintf(cmd, sizeof cmd, "opusdec --quiet --rate 24000 --float '%s' '%s'", in, out);
    ck_assert_int_eq(system(cmd), 0);
    size_t nb;
    float *ref = (float *)check_read_file(out, &nb);
    size_t nref = nb / sizeof(float);
    ck_assert_uint_eq(nref, (size_t)N * MS_FRAME_SAMPLES - 1920);
    /* our decoder and opusdec agree (opusdec decodes at 48 kHz and
     * resamples, so the samples are close, not identical): aligned, and
     * the difference small next to the signal */
    pcm_t mine = {0};
    ms_error e = {0};
    ck_assert_int_eq(decode_all(s, len, len, &mine, &e), MS_OK);
    ck_assert_uint_eq(mine.n, nref);
    int lag = -1;
    double c = best_corr(ref, nref, mine.x, nref - 50, 50, &lag);
    double se = 0, ss = 0;
    for (size_t i = 0; i < nref; i++) {
        se += ((double)ref[i] - mine.x[i]) * ((double)ref[i] - mine.x[i]);
        ss += (double)ref[i] * ref[i];
    }
    double snr = 10 * log10(ss / (se + 1e-30));
    printf("opusdec vs audio_dec: %zu samples, lag %d, correlation %.5f, SNR %.1f dB\n", nref, lag, c, snr);
    ck_assert_msg(lag == 0 && c > 0.99 && snr > 20, "lag %d corr %.5f snr %.1f", lag, c, snr);
    free(mine.x);
    free(ref);
    free(s);
    check_tmp_remove();
}
END_TEST

static void write_wav(const char *path, const int16_t *x, uint32_t frames, int channels, uint32_t rate) {
    uint8_t h[44];
    uint32_t data = frames * (uint32_t)channels * 2;
    memcpy(h, "RIFF", 4);
    uint32_t v[] = {36 + data};
    memcpy(h + 4, v, 4);
    memcpy(h + 8, "WAVEfmt ", 8);
    uint32_t fmtlen = 16, byterate = rate * (uint32_t)channels * 2;
    uint16_t fmt = 1, ch = (uint16_t)channels, align = (uint16_t)(channels * 2), bits = 16;
    memcpy(h + 16, &fmtlen, 4);
    memcpy(h + 20, &fmt, 2);
    memcpy(h + 22, &ch, 2);
    memcpy(h + 24, &rate, 4);
    memcpy(h + 28, &byterate, 4);
    memcpy(h + 32, &align, 2);
    memcpy(h + 34, &bits, 2);
    memcpy(h + 36, "data", 4);
    memcpy(h + 40, &data, 4);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    fwrite(h, 1, sizeof h, f);
    fwrite(x, 2, (size_t)frames * (size_t)channels, f);
    fclose(f);
}

static int count_pkts(void *user, const ogg_pkt *k, ms_error *err) {
    (void)err;
    int *c = user;
    if (k->granule >= 0 && k->packetno > 1) { /* last packet of a page */
        c[1] = c[0] > c[1] ? c[0] : c[1];
        c[0] = 0;
    } else {
        c[0]++;
    }
    return MS_OK;
}

START_TEST(test_we_read_opusenc) {
    need("opusenc");
    check_tmp_make();
    for (int channels = 1; channels <= 2; channels++) {
        const uint32_t n = 3 * MS_SAMPLE_RATE_HZ;
        int16_t *x = malloc(n * 2 * sizeof(int16_t));
        float *xf = malloc(n * sizeof(float));
        chirp(xf, n, 0);
        for (uint32_t i = 0; i < n; i++)
            for (int c = 0; c < channels; c++) x[i * (uint32_t)channels + (uint32_t)c] = (int16_t)lrintf(xf[i] * 32767);
        char wav[128], opus[128], cmd[512];
        snprintf(wav, sizeof wav, "%s/in%d.wav", check_tmp, channels);
        snprintf(opus, sizeof opus, "%s/in%d.opus", check_tmp, channels);
        write_wav(wav, x, n, channels, MS_SAMPLE_RATE_HZ);
        snprintf(cmd, sizeof cmd, "opusenc --quiet --max-delay 1000 '%s' '%s'", wav, opus);
        ck_assert_int_eq(system(cmd), 0);
        size_t len;
        uint8_t *s = check_read_file(opus, &len);
        /* the file really uses long pages (about 1 s: 50 packets of 20 ms) */
        int c[2] = {0, 0};
        ms_error e = {0};
        ogg_demux *dm = ogg_demux_create(NULL, &e);
        ck_assert_int_eq(ogg_demux_feed(dm, s, len, count_pkts, c, &e), MS_OK);
        ogg_demux_free(dm);
        ck_assert_int_ge(c[1], 40);
        /* decoded in arbitrary chunks: every sample back, end trimmed by the EOS granule */
        pcm_t out = {0};
        ck_assert_msg(decode_all(s, len, 1000, &out, &e) == MS_OK, "%s", e.msg);
        printf("opusenc %d ch: %zu bytes, %d packets on the longest page, %zu samples decoded\n",
               channels, len, c[1] + 1, out.n);
        ck_assert_uint_eq(out.n, n);
        int lag = -1;
        double cr = best_corr(xf, n, out.x, n - 100, 100, &lag);
        ck_assert_msg(cr > 0.95 && lag <= 2, "correlation %.4f at lag %d", cr, lag);
        free(out.x);
        free(s);
        free(x);
        free(xf);
    }
    check_tmp_remove();
}
END_TEST

/* The traffic shape of the Kyutai web client (opus-recorder): 20 ms Opus
 * frames, two per page, one page per message, the header pages inside the
 * first message; fed message by message. */
START_TEST(test_web_client_shape) {
    const int npk = 100; /* 2 s */
    const int fs = 480;  /* 20 ms at 24 kHz */
    int rc;
    OpusEncoder *enc = opus_encoder_create(MS_SAMPLE_RATE_HZ, 1, OPUS_APPLICATION_AUDIO, &rc);
    ck_assert_ptr_nonnull(enc);
    opus_int32 la;
    opus_encoder_ctl(enc, OPUS_GET_LOOKAHEAD(&la));
    ogg_opus_mux m; /* only for the header pages */
    ogg_opus_mux_init(&m, 0x77, 1, (uint16_t)(2 * la), MS_SAMPLE_RATE_HZ);
    static uint8_t msgbuf[16384];
    size_t mlen;
    ck_assert_int_eq(ogg_opus_mux_headers(&m, msgbuf, sizeof msgbuf, &mlen, NULL), MS_OK);
    float *x = malloc((size_t)npk * fs * sizeof(float));
    chirp(x, (size_t)npk * fs, 0);
    audio_dec *d = audio_dec_create(NULL, AUDIO_PRE_SKIP_RFC, NULL);
    pcm_t out = {0};
    ms_error e = {0};
    uint32_t seq = 2;
    for (int p = 0; p < npk; p += 2) {
        uint8_t body[2 * 1500], lace[16];
        size_t bl = 0, nl = 0;
        for (int k = 0; k < 2; k++) {
            opus_int32 b = opus_encode_float(enc, x + (size_t)(p + k) * fs, fs, body + bl, 1500);
            ck_assert_int_gt(b, 0);
            bl += (size_t)b;
            for (opus_int32 r = b; ; r -= 255) {
                lace[nl++] = (uint8_t)(r >= 255 ? 255 : r);
                if (r < 255) break;
            }
        }
        ogg_page_info pi = {.flags = 0, .granule = (int64_t)(p + 2) * fs * 2, .serial = 0x77, .seq = seq++};
        size_t n;
        ck_assert_int_eq(ogg_write_page(msgbuf + mlen, sizeof msgbuf - mlen, &pi, lace, nl, body, bl, &n, NULL), MS_OK);
        mlen += n;
        ck_assert_msg(audio_dec_feed(d, msgbuf, mlen, collect, &out, &e) == MS_OK, "%s", e.msg);
        mlen = 0;
    }
    /* pre-skip equal to the encoder delay: the output lines up with the input */
    ck_assert_uint_eq(out.n, (size_t)npk * fs - (size_t)la);
    int lag = -1;
    double c = best_corr(x, (size_t)npk * fs, out.x, out.n - 100, 100, &lag);
    printf("web-client shape: %zu samples, lag %d, correlation %.4f\n", out.n, lag, c);
    ck_assert_msg(c > 0.9 && lag <= 1, "correlation %.4f lag %d", c, lag);
    const ogg_opus_head *h = ogg_opus_reader_head(audio_dec_reader(d));
    ck_assert_uint_eq(h->pre_skip, 2 * la);
    free(out.x);
    free(x);
    audio_dec_free(d);
    opus_encoder_destroy(enc);
}
END_TEST

/* A valid header followed by one audio page holding pkt. */
static int feed_with_packet(const uint8_t *pkt, size_t plen, ms_error *e) {
    ogg_opus_mux m;
    ogg_opus_mux_init(&m, 3, 1, 312, 24000);
    uint8_t buf[8192];
    size_t a, b = 0;
    ck_assert_int_eq(ogg_opus_mux_headers(&m, buf, sizeof buf, &a, NULL), MS_OK);
    if (plen) ck_assert_int_eq(ogg_opus_mux_packet(&m, pkt, plen, 960, false, buf + a, sizeof buf - a, &b, NULL), MS_OK);
    else { /* the muxer refuses empty packets: write the page by hand */
        ogg_page_info pi = {.flags = 0, .granule = 960, .serial = 3, .seq = 2};
        ck_assert_int_eq(ogg_write_page(buf + a, sizeof buf - a, &pi, (const uint8_t *)"\0", 1, NULL, 0, &b, NULL), MS_OK);
    }
    pcm_t out = {0};
    int rc = decode_all(buf, a + b, 100, &out, e);
    free(out.x);
    return rc;
}

START_TEST(test_hostile) {
    ms_error e = {0};
    pcm_t out = {0};
    uint8_t junk[4000];
    srand(5);
    for (size_t i = 0; i < sizeof junk; i++) junk[i] = (uint8_t)rand();
    ck_assert_int_eq(decode_all(junk, sizeof junk, 500, &out, &e), MS_ERR_FORMAT);
    ck_assert_int_eq(decode_all((const uint8_t *)"ID3\x04garbage", 11, 11, &out, &e), MS_ERR_FORMAT);
    ck_assert_uint_eq(out.n, 0);
    /* undecodable packets: code 3 with zero frames, code 2 with a length past the end */
    ck_assert_int_eq(feed_with_packet((const uint8_t *)"\x03\x00", 2, &e), MS_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(e.msg, "undecodable"));
    ck_assert_int_eq(feed_with_packet((const uint8_t *)"\x02\xfb\x01", 3, &e), MS_ERR_FORMAT);
    ck_assert_int_eq(feed_with_packet(NULL, 0, &e), MS_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(e.msg, "empty"));
    /* a valid packet decodes */
    ck_assert_int_eq(feed_with_packet((const uint8_t *)"\xf8\xff\xfe", 3, &e), MS_OK);
    /* bad CRC in an audio page of our own stream */
    size_t len;
    int la;
    uint8_t *s = encode_chirp(3, &len, &la);
    s[len - 5] ^= 0x10;
    ck_assert_int_eq(decode_all(s, len, len, &out, &e), MS_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(e.msg, "CRC"));
    free(s);
    free(out.x);
    /* the encoder wants room for a whole frame up front */
    audio_enc *enc = audio_enc_create(1, 24000, OGG_OPUS_DEF_PRE_SKIP, &e);
    float frame[MS_FRAME_SAMPLES] = {0};
    uint8_t buf[AUDIO_ENC_OUT_MAX];
    size_t n;
    ck_assert_int_eq(audio_enc_frame(enc, frame, buf, 100, &n, &e), MS_ERR_LIMIT);
    ck_assert_int_eq(audio_enc_frame(enc, frame, buf, sizeof buf, &n, &e), MS_OK);
    ck_assert_uint_gt(n, OGG_OPUS_HEADER_PAGES_BYTES);
    ck_assert_int_eq(audio_enc_frame(enc, frame, buf, sizeof buf, &n, &e), MS_OK);
    ck_assert_uint_lt(n, 2 * ogg_packet_page_bytes(400)); /* no headers the second time */
    audio_enc_free(enc);
    ck_assert_ptr_null(audio_enc_create(1, 2000000000, 3840, &e));
    ck_assert_ptr_null(audio_enc_create(1, -1, 3840, &e));
    ck_assert_ptr_null(audio_enc_create(1, 100, 3840, &e));
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("audio_opus");
    TCase *tc = tcase_new("audio_opus");
    tcase_add_test(tc, test_roundtrip);
    tcase_add_test(tc, test_pre_skip_ignore);
    tcase_add_test(tc, test_opusdec_reads_our_stream);
    tcase_add_test(tc, test_we_read_opusenc);
    tcase_add_test(tc, test_web_client_shape);
    tcase_add_test(tc, test_hostile);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN
