/* voice.h - a PersonaPlex voice prompt as Mimi codes, and the codec's
 * SILENCE / SINE frames (shared/spec/personas.md; facts from
 * NVIDIA/personaplex moshi/models/lm.py: load_voice_prompt, normalize_audio,
 * _iterate_audio, encode_from_sphn, create_sinewave, LMGen.__init__).
 *
 * NVIDIA's voice pipeline, which this module reproduces on the CPU codec:
 *   1. read the file and resample it to the codec's rate (voice_io.h);
 *   2. measure its integrated loudness with pyloudnorm's default meter
 *      (pp_loudness_pyln) and scale every sample by
 *      10^((-24 - loudness) / 20): no clipping, no peak limiting;
 *   3. cut into frames of frame_samples (1920), the last zero-padded;
 *   4. encode the frames in order with one streaming Mimi state, fresh at
 *      the first frame and carried across frames (no reset after frame 0).
 * Files under 0.4 s (one loudness block) are refused, as pyloudnorm refuses
 * them; silent files (no 400 ms block at -70 LUFS or above) are refused
 * too: NVIDIA's pipeline would scale them by an infinite gain (NaN audio).
 *
 * SILENCE = the codes of one frame of zeros, SINE = the codes of one frame
 * of 0.5 sin(2 pi 440 t), t = i / rate, phase 0; each encoded from a fresh
 * streaming state. NVIDIA ships the released Mimi's as constants
 * (prime.h); their generator is not published: the one-frame buffers
 * LMGen builds (_zero_frame, _sine_frame) and the names _encode_zero_frame
 * and _encode_sine_frame are what the definition above rests on.
 *
 * This half needs no external library (engine core); reading files and the
 * libebur128 meter are in voice_io.h (I/O archive).
 * Threads: any; the codec is shared read-only, every call makes its own
 * streaming state.
 */
#ifndef MOSHID_VOICE_H
#define MOSHID_VOICE_H

#include <stddef.h>

#include "err.h"
#include "lmgen_pp.h"
#include "mimi.h"

/* NVIDIA's loudness target, LUFS. */
#define PP_VOICE_TARGET_LUFS (-24.0)
/* Shortest audio a loudness measure takes: one 400 ms gating block. */
#define PP_VOICE_MIN_SECONDS 0.4
/* The sine frame: frequency (Hz) and amplitude. */
#define PP_SINE_HZ 440.0
#define PP_SINE_AMPLITUDE 0.5f

/* pp_loudness_pyln: integrated loudness (LUFS) of n mono samples at
 * rate_hz as pyloudnorm's default Meter(rate).integrated_loudness measures
 * it (the meter NVIDIA normalises with): K-weighting built from the RBJ
 * cookbook (high shelf +4 dB at 1500 Hz, Q 1/sqrt 2; high pass 38 Hz, Q
 * 0.5, unity pass band), 400 ms blocks every 100 ms, round((T - 0.4) / 0.1)
 * + 1 of them (a last block past the end counts its missing samples as
 * zeros), gates at -70 LUFS and at the gated mean - 10 LU. This reads about
 * 0.08 dB below ITU BS.1770 (libebur128) on speech: the standard's high
 * pass has a pass-band gain of about +0.09 dB at 24 kHz. Returns MS_OK
 * with *lufs (-HUGE_VAL when no block passes the gates), or MS_ERR_RANGE
 * under PP_VOICE_MIN_SECONDS. */
int pp_loudness_pyln(const float *x, size_t n, int rate_hz, double *lufs, ms_error *err);

/* pp_voice_normalize: scale x (n samples, in place) from measured_lufs to
 * target_lufs: x[i] = (float)(gain * x[i]), gain = 10^((target - measured)
 * / 20) in double, as NVIDIA's pyloudnorm.normalize.loudness under NumPy 2.
 * *gain (optional) receives the gain. MS_ERR_RANGE (x untouched) when
 * measured_lufs is not finite (silence) or a scaled sample would not be. */
int pp_voice_normalize(float *x, size_t n, double measured_lufs, double target_lufs, double *gain,
                       ms_error *err);

/* pp_voice_frames: frames of frame samples that n samples make (the last
 * zero-padded): ceil(n / frame). */
size_t pp_voice_frames(size_t n, int frame);

/* pp_voice_encode: the codes of n samples (already at the codec's rate and
 * normalised), cut into mimi_frame_samples(m) frames, the last zero-padded,
 * encoded in order with one fresh streaming state. At most max_frames
 * frames (MS_ERR_LIMIT beyond; max_frames <= PP_PRIME_MAX_CALLS). Returns
 * *codes (n_frames, 8), caller frees, or an error (the codec must give 8
 * codes per frame; n = 0 gives no frames and *codes NULL). */
int pp_voice_encode(const mimi_model *m, const float *pcm, size_t n, int max_frames, int **codes,
                    int *n_frames, ms_error *err);

/* pp_sine_frame: NVIDIA's sine frame, frame samples at rate_hz:
 * dst[i] = 0.5f * (float)sin(2 pi 440 t_i), t_i = i * (d / frame) with
 * d = frame / rate_hz (numpy linspace without end point, sin in double,
 * rounded to float, then halved). */
void pp_sine_frame(float *dst, int frame, int rate_hz);

/* pp_codec_is_released: 1 when a codec configuration (mimi_model_config)
 * is the official one in every value (mimi_config_default: 24 kHz, 12.5
 * frames/s, 2048-entry codebooks, 32 levels of which 8 used, the 7B Mimi's
 * SEANet and transformers), i.e. a codec loaded without a configuration
 * override or with one that repeats the defaults; 0 otherwise. The weights
 * are not looked at: a random codec of the official shape counts as
 * released (use pp_side_tokens_encode for those). */
int pp_codec_is_released(const mimi_config *c);

/* pp_side_tokens_encode: SILENCE and SINE of codec m, by encoding one
 * frame of zeros and pp_sine_frame, each from a fresh streaming state.
 * The codec must give 8 codes per frame (MS_ERR_UNSUPPORTED otherwise). */
int pp_side_tokens_encode(const mimi_model *m, int silence[PP_SIDE_CODEBOOKS], int sine[PP_SIDE_CODEBOOKS],
                          ms_error *err);

/* pp_side_tokens: the SILENCE and SINE a PersonaPlex prompt uses with
 * codec m: the released Mimi's constants (pp_silence_tokens_mimi,
 * pp_sine_tokens_mimi) when m's configuration pp_codec_is_released, else
 * pp_side_tokens_encode. *released (optional) says which. */
int pp_side_tokens(const mimi_model *m, int silence[PP_SIDE_CODEBOOKS], int sine[PP_SIDE_CODEBOOKS], int *released,
                   ms_error *err);

#endif
