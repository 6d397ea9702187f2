/* rt_audio.h - the audio formats of /v1/realtime (docs/realtime.md) to
 * and from the engine's 24 kHz float PCM: pcm16 (16-bit little-endian,
 * 24 kHz, mono) as it is, G.711 mu-law and A-law at 8 kHz through
 * libsoxr, streaming (one resampler per direction and session, so that
 * chunk edges leave no clicks). Loop thread.
 */
#ifndef MOSHID_RT_AUDIO_H
#define MOSHID_RT_AUDIO_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "rt_event.h"

/* Input: client bytes -> 24 kHz float. */
typedef struct rt_in {
    rt_format fmt;
    void *soxr;                /* soxr_t, 8 -> 24 kHz (G.711 only) */
    int odd;                   /* pcm16: a byte of a sample split across appends is kept */
    uint8_t odd_byte;
    uint64_t samples;          /* input samples taken so far, at the format's rate */
} rt_in;

/* Output: 24 kHz float frames -> client bytes. */
typedef struct rt_out {
    rt_format fmt;
    void *soxr;                /* soxr_t, 24 -> 8 kHz (G.711 only) */
} rt_out;

/* The sink rt_in_feed hands 24 kHz samples to: MS_OK to go on. */
typedef int (*rt_pcm_sink)(void *user, const float *pcm, size_t n);

/* rt_in_init / rt_out_init: for fmt (a previous state is closed first).
 * MS_OK, or an error (the resampler could not be made). */
int rt_in_init(rt_in *in, rt_format fmt, ms_error *err);
int rt_out_init(rt_out *out, rt_format fmt, ms_error *err);
void rt_in_close(rt_in *in);
void rt_out_close(rt_out *out);

/* rt_in_feed: n bytes of client audio -> sink, in chunks. The sink's
 * first error is returned. */
int rt_in_feed(rt_in *in, const uint8_t *b, size_t n, rt_pcm_sink sink, void *user);

/* rt_out_frame: n samples (24 kHz) -> bytes in the output format at out
 * (cap bytes: 2 n for pcm16, n / 3 + 64 for G.711 is enough). Returns
 * the bytes written (a resampler may hold a few samples back). */
size_t rt_out_frame(rt_out *o, const float *pcm, size_t n, uint8_t *out, size_t cap);

/* rt_rms: root mean square of n samples. */
float rt_rms(const float *pcm, size_t n);

#endif
