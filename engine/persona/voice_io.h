/* voice_io.h - a PersonaPlex voice prompt file (WAV/FLAC/Ogg, any format
 * libsndfile reads) to Mimi codes, as NVIDIA's load_voice_prompt does
 * (voice.h has the pipeline and its facts). Part of the I/O archive
 * (libengine_io.a: libsndfile, libsoxr, libebur128); link $(VOICE_LIBS).
 *
 * A voice file is input: its length is checked against the caller's bound
 * before it is decoded (from the header) and after (the samples read), and
 * every failure is an error code with a message naming the file.
 * Threads: any (see voice.h).
 */
#ifndef MOSHID_VOICE_IO_H
#define MOSHID_VOICE_IO_H

#include <stddef.h>

#include "voice.h"

/* Default and largest bound on a voice's length, seconds. */
#define PP_VOICE_MAX_SECONDS_DEFAULT 30.0
#define PP_VOICE_MAX_SECONDS_LIMIT 600.0

/* The loudness meter the voice is normalised with. */
typedef enum {
    PP_METER_PYLN = 0,   /* pyloudnorm's default meter: NVIDIA's, its codes (pp_loudness_pyln) */
    PP_METER_BS1770 = 1, /* ITU BS.1770-4 by libebur128: about 0.08 dB louder on speech */
} pp_meter;

typedef struct pp_voice_opts {
    double max_seconds;  /* longest voice accepted, s: (0, PP_VOICE_MAX_SECONDS_LIMIT] */
    double target_lufs;  /* PP_VOICE_TARGET_LUFS; finite, in [-70, 0] */
    pp_meter meter;      /* PP_METER_PYLN */
} pp_voice_opts;

/* What pp_voice_from_audio measured (for a log line). */
typedef struct pp_voice_info {
    size_t samples;      /* at the codec's rate, before padding */
    double lufs;         /* measured by the chosen meter, before the gain */
    double gain;         /* linear gain applied */
} pp_voice_info;

/* pp_voice_opts_init: PP_VOICE_MAX_SECONDS_DEFAULT, -24 LUFS, PP_METER_PYLN. */
void pp_voice_opts_init(pp_voice_opts *o);

/* pp_loudness_bs1770: integrated loudness (LUFS) of n mono samples at
 * rate_hz by libebur128 (EBUR128_MODE_I: whole 400 ms blocks every 100 ms,
 * the ITU filters). Same contract as pp_loudness_pyln: MS_ERR_RANGE under
 * PP_VOICE_MIN_SECONDS, -HUGE_VAL when no block passes the gates. */
int pp_loudness_bs1770(const float *x, size_t n, int rate_hz, double *lufs, ms_error *err);

/* pp_voice_read: path read as mono at m's sample rate (af_read_mono:
 * channels averaged, libsoxr resampling), bounded by o->max_seconds,
 * measured with o->meter and scaled to o->target_lufs. Returns *pcm (*n
 * samples, caller frees) and optionally *info, or an error: MS_ERR_FORMAT
 * (not audio, truncated), MS_ERR_UNSUPPORTED (channels, rate), MS_ERR_LIMIT
 * (too long), MS_ERR_RANGE (under 0.4 s, silent), MS_ERR_ARG (options). */
int pp_voice_read(const mimi_model *m, const char *path, const pp_voice_opts *o, float **pcm, size_t *n,
                  pp_voice_info *info, ms_error *err);

/* pp_voice_from_audio: pp_voice_read, then pp_voice_encode: *codes
 * (*n_frames, 8) agent codes for pp_prompt.voice (caller frees). */
int pp_voice_from_audio(const mimi_model *m, const char *path, const pp_voice_opts *o, int **codes, int *n_frames,
                        pp_voice_info *info, ms_error *err);

#endif
