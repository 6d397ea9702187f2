/* audio_file.c - reading (libsndfile), resampling (libsoxr) and writing audio. */
#include <errno.h>
#include <math.h>
#include <sndfile.h>
#include <soxr.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audio_file.h"

int af_resample(const float *in, size_t n, int in_hz, int out_hz, float **out, size_t *nout,
                ms_error *err) {
    *out = NULL;
    *nout = 0;
    if (in_hz <= 0 || out_hz <= 0) return ms_err_set(err, MS_ERR_ARG, "resample: bad rates %d -> %d", in_hz, out_hz);
    size_t cap = (size_t)ceil((double)n * out_hz / in_hz) + 16;
    float *o = malloc(cap * sizeof(float));
    if (!o) return ms_err_set(err, MS_ERR_NOMEM, "resample: out of memory");
    soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
    soxr_quality_spec_t q = soxr_quality_spec(SOXR_HQ, 0);
    size_t done = 0;
    soxr_error_t e = soxr_oneshot(in_hz, out_hz, 1, in, n, NULL, o, cap, &done, &io, &q, NULL);
    if (e) {
        free(o);
        return ms_err_set(err, MS_ERR_FORMAT, "resample %d -> %d Hz: %s", in_hz, out_hz, e);
    }
    *out = o;
    *nout = done;
    return MS_OK;
}

/* A data chunk shorter than its header says (a cut-off file): libsndfile
 * reads what is there and notes "data : N (should be M)" in its log. Sizes
 * of 0 and 0xFFFFFFFF are what live writers leave and are accepted. */
static int truncated(SNDFILE *f) {
    char log[8192];
    log[0] = 0;
    sf_command(f, SFC_GET_LOG_INFO, log, sizeof(log));
    for (const char *p = log; (p = strstr(p, "data : ")) != NULL; p++) {
        unsigned long long said;
        long long real;
        if (sscanf(p, "data : %llu (should be %lld)", &said, &real) == 2 && real >= 0 &&
            (unsigned long long)real < said && said != 0xFFFFFFFFULL && said != 0x7FFFFFFFULL)
            return 1;
    }
    return 0;
}

int af_read_mono(const char *path, int rate_hz, float **pcm, size_t *n, ms_error *err) {
    *pcm = NULL;
    *n = 0;
    SF_INFO info;
    memset(&info, 0, sizeof(info));
    SNDFILE *f = sf_open(path, SFM_READ, &info);
    if (!f) return ms_err_set(err, MS_ERR_FORMAT, "%s: not a readable audio file (%s)", path, sf_strerror(NULL));
    int rc = MS_OK;
    float *buf = NULL, *mono = NULL;
    if (truncated(f)) {
        rc = ms_err_set(err, MS_ERR_FORMAT, "%s: truncated (the data chunk is shorter than its header says)", path);
        goto out;
    }
    if (info.channels < 1 || info.channels > AF_MAX_CHANNELS) {
        rc = ms_err_set(err, MS_ERR_UNSUPPORTED, "%s: %d channels (limit %d)", path, info.channels, AF_MAX_CHANNELS);
        goto out;
    }
    if (info.samplerate < 1 || info.samplerate > AF_MAX_RATE) {
        rc = ms_err_set(err, MS_ERR_UNSUPPORTED, "%s: sample rate %d Hz unsupported", path, info.samplerate);
        goto out;
    }
    if (info.frames < 0 || info.frames > (sf_count_t)info.samplerate * AF_MAX_SECONDS) {
        rc = ms_err_set(err, MS_ERR_LIMIT, "%s: longer than %d s", path, AF_MAX_SECONDS);
        goto out;
    }
    size_t frames = (size_t)info.frames;
    buf = malloc((frames ? frames : 1) * (size_t)info.channels * sizeof(float));
    mono = malloc((frames ? frames : 1) * sizeof(float));
    if (!buf || !mono) {
        rc = ms_err_set(err, MS_ERR_NOMEM, "%s: out of memory", path);
        goto out;
    }
    sf_count_t got = sf_readf_float(f, buf, (sf_count_t)frames);
    if (got != (sf_count_t)frames || sf_error(f) != SF_ERR_NO_ERROR) {
        rc = ms_err_set(err, MS_ERR_FORMAT, "%s: truncated or unreadable (%lld of %zu frames: %s)", path,
                        (long long)got, frames, sf_strerror(f));
        goto out;
    }
    for (size_t i = 0; i < frames; i++) {
        float s = 0.f;
        for (int c = 0; c < info.channels; c++) s += buf[i * info.channels + c];
        mono[i] = info.channels == 1 ? s : s / (float)info.channels;
        if (!isfinite(mono[i])) {
            rc = ms_err_set(err, MS_ERR_FORMAT, "%s: non-finite sample at %zu", path, i);
            goto out;
        }
    }
    if (info.samplerate != rate_hz && frames > 0) {
        float *r;
        size_t nr;
        rc = af_resample(mono, frames, info.samplerate, rate_hz, &r, &nr, err);
        if (rc) {
            ms_err_prefix(err, "%s", path);
            goto out;
        }
        free(mono);
        mono = r;
        frames = nr;
    }
    *pcm = mono;
    *n = frames;
    mono = NULL;
out:
    free(buf);
    free(mono);
    sf_close(f);
    return rc;
}

int af_write_wav16(const char *path, const float *pcm, size_t n, int rate_hz, ms_error *err) {
    SF_INFO info;
    memset(&info, 0, sizeof(info));
    info.samplerate = rate_hz;
    info.channels = 1;
    info.format = SF_FORMAT_WAV | SF_FORMAT_PCM_16;
    SNDFILE *f = sf_open(path, SFM_WRITE, &info);
    if (!f) return ms_err_set(err, MS_ERR_IO, "%s: cannot write (%s)", path, sf_strerror(NULL));
    sf_command(f, SFC_SET_CLIPPING, NULL, SF_TRUE);
    sf_count_t w = sf_writef_float(f, pcm, (sf_count_t)n);
    int bad = w != (sf_count_t)n;
    if (sf_close(f) != 0) bad = 1;
    if (bad) return ms_err_set(err, MS_ERR_IO, "%s: write failed", path);
    return MS_OK;
}

int af_write_f32(const char *path, const float *pcm, size_t n, ms_error *err) {
    FILE *f = fopen(path, "wb");
    if (!f) return ms_err_set(err, MS_ERR_IO, "%s: %s", path, strerror(errno));
    int bad = 0;
    for (size_t i = 0; i < n && !bad; i++) {
        uint32_t u;
        memcpy(&u, &pcm[i], 4);
        unsigned char b[4] = {(unsigned char)u, (unsigned char)(u >> 8), (unsigned char)(u >> 16),
                              (unsigned char)(u >> 24)};
        bad = fwrite(b, 1, 4, f) != 4;
    }
    if (fclose(f) != 0) bad = 1;
    if (bad) return ms_err_set(err, MS_ERR_IO, "%s: write failed", path);
    return MS_OK;
}
