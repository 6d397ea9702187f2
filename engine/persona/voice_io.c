/* voice_io.c - voice prompt files to Mimi codes (see voice_io.h). */
#include "voice_io.h"

#include <ebur128.h>
#include <math.h>
#include <sndfile.h>
#include <stdlib.h>
#include <string.h>

#include "audio_file.h"
#include "prime.h"

void pp_voice_opts_init(pp_voice_opts *o) {
    o->max_seconds = PP_VOICE_MAX_SECONDS_DEFAULT;
    o->target_lufs = PP_VOICE_TARGET_LUFS;
    o->meter = PP_METER_PYLN;
}

int pp_loudness_bs1770(const float *x, size_t n, int rate_hz, double *lufs, ms_error *err) {
    *lufs = -HUGE_VAL;
    if (rate_hz <= 0) return ms_err_set(err, MS_ERR_ARG, "loudness: bad rate %d Hz", rate_hz);
    if ((double)n < PP_VOICE_MIN_SECONDS * rate_hz)
        return ms_err_set(err, MS_ERR_RANGE, "loudness: %zu samples at %d Hz, shorter than one %.1f s block", n,
                          rate_hz, PP_VOICE_MIN_SECONDS);
    ebur128_state *st = ebur128_init(1, (unsigned long)rate_hz, EBUR128_MODE_I);
    if (!st) return ms_err_set(err, MS_ERR_NOMEM, "loudness: libebur128 init failed");
    int rc = MS_OK;
    if (ebur128_add_frames_float(st, x, n) != EBUR128_SUCCESS || ebur128_loudness_global(st, lufs) != EBUR128_SUCCESS)
        rc = ms_err_set(err, MS_ERR_NOMEM, "loudness: libebur128 failed");
    ebur128_destroy(&st);
    return rc;
}

/* The header's length, when libsndfile can open the file: refuse a voice
 * that is too long before decoding it. Unreadable files are left to
 * af_read_mono (its messages). */
static int check_header_length(const char *path, double max_s, ms_error *err) {
    SF_INFO info;
    memset(&info, 0, sizeof info);
    SNDFILE *f = sf_open(path, SFM_READ, &info);
    if (!f) return MS_OK;
    int rc = MS_OK;
    if (info.samplerate > 0 && info.frames > 0 && (double)info.frames > max_s * info.samplerate)
        rc = ms_err_set(err, MS_ERR_LIMIT, "%s: %.1f s of audio, a voice takes at most %.1f s", path,
                        (double)info.frames / info.samplerate, max_s);
    sf_close(f);
    return rc;
}

int pp_voice_read(const mimi_model *m, const char *path, const pp_voice_opts *o, float **pcm, size_t *n,
                  pp_voice_info *info, ms_error *err) {
    *pcm = NULL;
    *n = 0;
    if (!(o->max_seconds > 0 && o->max_seconds <= PP_VOICE_MAX_SECONDS_LIMIT))
        return ms_err_set(err, MS_ERR_ARG, "voice: max_seconds %g outside (0, %g]", o->max_seconds,
                          PP_VOICE_MAX_SECONDS_LIMIT);
    if (!(o->target_lufs >= -70.0 && o->target_lufs <= 0.0))
        return ms_err_set(err, MS_ERR_ARG, "voice: target %g LUFS outside [-70, 0]", o->target_lufs);
    if (o->meter != PP_METER_PYLN && o->meter != PP_METER_BS1770)
        return ms_err_set(err, MS_ERR_ARG, "voice: unknown loudness meter %d", (int)o->meter);
    int rc = check_header_length(path, o->max_seconds, err);
    if (rc) return rc;
    const int rate = mimi_sample_rate(m);
    float *x;
    size_t len;
    if ((rc = af_read_mono(path, rate, &x, &len, err))) return rc;
    double lufs = 0, gain = 1;
    if ((double)len > o->max_seconds * rate) {
        rc = ms_err_set(err, MS_ERR_LIMIT, "%s: %.1f s of audio, a voice takes at most %.1f s", path,
                        (double)len / rate, o->max_seconds);
        goto fail;
    }
    rc = o->meter == PP_METER_PYLN ? pp_loudness_pyln(x, len, rate, &lufs, err)
                                   : pp_loudness_bs1770(x, len, rate, &lufs, err);
    if (!rc) rc = pp_voice_normalize(x, len, lufs, o->target_lufs, &gain, err);
    if (rc) {
        ms_err_prefix(err, "%s", path);
        goto fail;
    }
    if (info) {
        info->samples = len;
        info->lufs = lufs;
        info->gain = gain;
    }
    *pcm = x;
    *n = len;
    return MS_OK;
fail:
    free(x);
    return rc;
}

int pp_voice_from_audio(const mimi_model *m, const char *path, const pp_voice_opts *o, int **codes, int *n_frames,
                        pp_voice_info *info, ms_error *err) {
    *codes = NULL;
    *n_frames = 0;
    float *x;
    size_t len;
    int rc = pp_voice_read(m, path, o, &x, &len, info, err);
    if (rc) return rc;
    rc = pp_voice_encode(m, x, len, PP_PRIME_MAX_CALLS, codes, n_frames, err);
    if (rc) ms_err_prefix(err, "%s", path);
    free(x);
    return rc;
}
