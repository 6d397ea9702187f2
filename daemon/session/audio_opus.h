/* audio_opus.h - Opus audio streams of a session (libopus + proto/ogg):
 * Ogg Opus bytes from a client -> 24 kHz mono float PCM, and 24 kHz mono
 * float PCM frames -> the Ogg Opus bytes moshid sends (40 ms packets, one
 * per page, header pages first, as the Kyutai servers do).
 *
 * Each stream object belongs to one session and is used by one thread at a
 * time (the loop thread, or an audio worker if the daemon moves it there).
 */
#ifndef MOSHID_AUDIO_OPUS_H
#define MOSHID_AUDIO_OPUS_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "frame.h"
#include "ogg.h"
#include "ogg_opus.h"

#define AUDIO_PACKET_SAMPLES 960      /* one Opus packet moshid sends: 40 ms */
#define AUDIO_MAX_PACKET_SAMPLES 2880 /* longest Opus packet: 120 ms at 24 kHz */
#define AUDIO_ENC_MIN_BITRATE 6000    /* bit/s accepted by audio_enc_create */
#define AUDIO_ENC_MAX_BITRATE 510000
#define AUDIO_ENC_MAX_PACKET_BYTES 4000 /* libopus's recommended packet buffer */
/* Largest output of one audio_enc_frame call, bytes. */
#define AUDIO_ENC_OUT_MAX \
    (OGG_OPUS_HEADER_PAGES_BYTES + 2u * (OGG_HEADER_BYTES + AUDIO_ENC_MAX_PACKET_BYTES / 255u + 1u + AUDIO_ENC_MAX_PACKET_BYTES))

/* ---- decoder --------------------------------------------------------- */

/* PCM callback: n samples of 24 kHz mono float PCM (borrowed for the call).
 * Return MS_OK, or an error code (err set) to stop the feed. */
typedef int (*audio_pcm_fn)(void *user, const float *pcm, size_t n, ms_error *err);

typedef struct audio_dec audio_dec;

/* What the decoder does with the OpusHead pre-skip. The official servers
 * decode with sphn, which ignores it, so the first pre-skip samples (80 ms
 * of encoder start-up from the official client) reach Mimi and every frame
 * sits where those servers put it; RFC 7845 drops them. */
typedef enum {
    AUDIO_PRE_SKIP_IGNORE = 0, /* keep every decoded sample (the official servers) */
    AUDIO_PRE_SKIP_RFC = 1     /* drop pre_skip / 2 samples at 24 kHz (RFC 7845 section 4.2) */
} audio_pre_skip;

/* audio_dec_create: a decoder for one incoming Ogg Opus stream (lim: Ogg
 * limits, NULL for the defaults; pre_skip: see audio_pre_skip). NULL with
 * err set on failure. */
audio_dec *audio_dec_create(const ogg_limits *lim, audio_pre_skip pre_skip, ms_error *err);
void audio_dec_free(audio_dec *d);

/* audio_dec_feed: consume len bytes of the stream (borrowed for the call)
 * and call fn with the PCM of each audio packet (the pre-skip removed in
 * AUDIO_PRE_SKIP_RFC mode), output gain applied, the end trimmed by the
 * EOS granule position. Errors are
 * sticky: MS_ERR_FORMAT/MS_ERR_UNSUPPORTED/MS_ERR_LIMIT from the Ogg Opus
 * reader (not Ogg, bad CRC, not Opus, ...), MS_ERR_FORMAT for an
 * undecodable Opus packet, or fn's code. */
int audio_dec_feed(audio_dec *d, const uint8_t *buf, size_t len, audio_pcm_fn fn, void *user,
                   ms_error *err);

/* audio_dec_samples: 24 kHz samples delivered so far. */
uint64_t audio_dec_samples(const audio_dec *d);
/* audio_dec_reader: the Ogg Opus reader (head, demuxer counters). */
const ogg_opus_reader *audio_dec_reader(const audio_dec *d);

/* ---- encoder --------------------------------------------------------- */

typedef struct audio_enc audio_enc;

/* audio_enc_create: an encoder for one outgoing stream: Ogg serial number
 * serial, bitrate_bps (0: libopus's default, else within
 * [AUDIO_ENC_MIN_BITRATE, AUDIO_ENC_MAX_BITRATE]), pre_skip_48k written in
 * OpusHead (OGG_OPUS_DEF_PRE_SKIP = 3840 is what the Kyutai servers write;
 * it drops the first 80 ms at the client). NULL with err set on failure. */
audio_enc *audio_enc_create(uint32_t serial, int bitrate_bps, uint16_t pre_skip_48k, ms_error *err);
void audio_enc_free(audio_enc *e);

/* audio_enc_frame: encode MS_FRAME_SAMPLES samples of 24 kHz mono float
 * PCM (borrowed) as two 40 ms Opus packets and write their Ogg pages into
 * out (cap >= AUDIO_ENC_OUT_MAX, else MS_ERR_LIMIT), preceded on the first
 * call by the OpusHead and OpusTags pages. Sets *out_len. An encoder error
 * (MS_ERR_STATE) leaves the stream unusable. */
int audio_enc_frame(audio_enc *e, const float *pcm, uint8_t *out, size_t cap, size_t *out_len,
                    ms_error *err);

/* audio_enc_lookahead: the encoder's algorithmic delay, 24 kHz samples. */
int audio_enc_lookahead(const audio_enc *e);

#endif
