/* audio_file.h - audio files for the engine's tools: read WAV/FLAC/Ogg (any
 * format libsndfile reads), mix to mono, resample with libsoxr; write 16-bit
 * WAV or raw float32. Part of the I/O archive (libengine_io.a): the engine
 * core does not depend on it.
 */
#ifndef MOSHID_AUDIO_FILE_H
#define MOSHID_AUDIO_FILE_H

#include <stddef.h>

#include "err.h"

/* Limits on input files. */
#define AF_MAX_CHANNELS 64
#define AF_MAX_RATE 768000           /* Hz */
#define AF_MAX_SECONDS 3600          /* longest input, seconds */

/* af_read_mono: read path, average its channels, resample to rate_hz when
 * the file's rate differs (libsoxr, high quality). Integer PCM is scaled by
 * 1/32768 (16-bit; libsndfile's float normalisation). Returns MS_OK with
 * *pcm (malloc'd, caller frees) of *n samples, or an error with a message
 * (unreadable, not audio, truncated, too long, too many channels). */
int af_read_mono(const char *path, int rate_hz, float **pcm, size_t *n, ms_error *err);

/* af_write_wav16: n mono samples at rate_hz as 16-bit PCM WAV (samples
 * clipped to [-1, 1], scaled by 32767 as libsndfile does). */
int af_write_wav16(const char *path, const float *pcm, size_t n, int rate_hz, ms_error *err);

/* af_write_f32: n samples as raw little-endian float32. */
int af_write_f32(const char *path, const float *pcm, size_t n, ms_error *err);

/* af_resample: n samples from in_hz to out_hz into *out (malloc'd, *nout). */
int af_resample(const float *in, size_t n, int in_hz, int out_hz, float **out, size_t *nout,
                ms_error *err);

#endif
