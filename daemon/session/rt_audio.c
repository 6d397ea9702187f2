/* rt_audio.c - /v1/realtime audio formats (rt_audio.h). */
#include "rt_audio.h"

#include <math.h>
#include <soxr.h>
#include <string.h>

#include "frame.h"
#include "g711.h"

/* Samples converted per step (input side, at the client's rate). */
#define RT_AUDIO_CHUNK 960
/* G.711's rate and the ratio to the engine's. */
#define RT_G711_HZ 8000
#define RT_G711_RATIO (MS_SAMPLE_RATE_HZ / RT_G711_HZ)

static void *resampler(double from, double to, ms_error *err) {
    soxr_error_t e = NULL;
    soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
    soxr_quality_spec_t q = soxr_quality_spec(SOXR_MQ, 0);
    soxr_t s = soxr_create(from, to, 1, &e, &io, &q, NULL);
    if (!s || e) {
        if (s) soxr_delete(s);
        ms_err_set(err, MS_ERR_NOMEM, "resampler: %s", e ? e : "cannot be made");
        return NULL;
    }
    return s;
}

int rt_in_init(rt_in *in, rt_format fmt, ms_error *err) {
    rt_in_close(in);
    in->fmt = fmt;
    if (fmt != RT_FMT_PCM16 && !(in->soxr = resampler(RT_G711_HZ, MS_SAMPLE_RATE_HZ, err))) return MS_ERR_NOMEM;
    return MS_OK;
}

int rt_out_init(rt_out *o, rt_format fmt, ms_error *err) {
    rt_out_close(o);
    o->fmt = fmt;
    if (fmt != RT_FMT_PCM16 && !(o->soxr = resampler(MS_SAMPLE_RATE_HZ, RT_G711_HZ, err))) return MS_ERR_NOMEM;
    return MS_OK;
}

void rt_in_close(rt_in *in) {
    if (in->soxr) soxr_delete(in->soxr);
    uint64_t samples = in->samples;
    memset(in, 0, sizeof *in);
    in->samples = samples;   /* the input clock runs on across format changes */
}

void rt_out_close(rt_out *o) {
    if (o->soxr) soxr_delete(o->soxr);
    memset(o, 0, sizeof *o);
}

static float s16_to_f(int16_t v) { return (float)v / 32768.0f; }

static int16_t f_to_s16(float f) {
    float v = f * 32767.0f;
    if (v > 32767.0f) v = 32767.0f;
    if (v < -32768.0f) v = -32768.0f;
    return (int16_t)lrintf(v);
}

int rt_in_feed(rt_in *in, const uint8_t *b, size_t n, rt_pcm_sink sink, void *user) {
    float x[RT_AUDIO_CHUNK], y[RT_AUDIO_CHUNK * RT_G711_RATIO + 64];
    while (n > 0) {
        size_t k = 0;
        if (in->fmt == RT_FMT_PCM16) {
            if (in->odd && n > 0) { /* the sample split across appends */
                x[k++] = s16_to_f((int16_t)(in->odd_byte | (uint16_t)b[0] << 8));
                in->odd = 0;
                b++, n--;
            }
            while (k < RT_AUDIO_CHUNK && n >= 2) {
                x[k++] = s16_to_f((int16_t)(b[0] | (uint16_t)b[1] << 8));
                b += 2, n -= 2;
            }
            if (n == 1) {
                in->odd = 1;
                in->odd_byte = b[0];
                n = 0;
            }
            in->samples += k;
            if (k) {
                int rc = sink(user, x, k);
                if (rc) return rc;
            }
            continue;
        }
        while (k < RT_AUDIO_CHUNK && n > 0) {
            x[k++] = s16_to_f(in->fmt == RT_FMT_ULAW ? proto_ulaw_decode(*b) : proto_alaw_decode(*b));
            b++, n--;
        }
        in->samples += k;
        for (size_t off = 0; off < k;) {
            size_t done = 0, got = 0;
            if (soxr_process(in->soxr, x + off, k - off, &done, y, sizeof y / sizeof *y, &got)) return MS_ERR_FORMAT;
            if (got) {
                int rc = sink(user, y, got);
                if (rc) return rc;
            }
            if (!done && !got) break;
            off += done;
        }
    }
    return MS_OK;
}

size_t rt_out_frame(rt_out *o, const float *pcm, size_t n, uint8_t *out, size_t cap) {
    size_t w = 0;
    if (o->fmt == RT_FMT_PCM16) {
        for (size_t i = 0; i < n && w + 2 <= cap; i++) {
            int16_t v = f_to_s16(pcm[i]);
            out[w++] = (uint8_t)(v & 0xff);
            out[w++] = (uint8_t)((uint16_t)v >> 8);
        }
        return w;
    }
    float y[MS_FRAME_SAMPLES / RT_G711_RATIO + 64];
    const size_t ycap = sizeof y / sizeof *y;
    for (;;) { /* until the input is taken and the resampler has no more to give */
        size_t take = n < MS_FRAME_SAMPLES ? n : MS_FRAME_SAMPLES, done = 0, got = 0;
        if (soxr_process(o->soxr, pcm, take, &done, y, ycap, &got)) return w;
        for (size_t i = 0; i < got && w < cap; i++)
            out[w++] = o->fmt == RT_FMT_ULAW ? proto_ulaw_encode(f_to_s16(y[i])) : proto_alaw_encode(f_to_s16(y[i]));
        pcm += done;
        n -= done;
        if ((n == 0 && got < ycap) || (!done && !got)) break;
    }
    return w;
}

float rt_rms(const float *pcm, size_t n) {
    double acc = 0;
    for (size_t i = 0; i < n; i++) acc += (double)pcm[i] * pcm[i];
    return n ? (float)sqrt(acc / (double)n) : 0.0f;
}
