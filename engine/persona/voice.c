/* voice.c - voice prompt audio to Mimi codes, the codec's SILENCE / SINE
 * frames (see voice.h). */
#include "voice.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "prime.h"

/* pyloudnorm's Meter defaults (BS.1770-4 gating). */
#define PYLN_BLOCK_S 0.4          /* gating block, s */
#define PYLN_STEP 0.25            /* 1 - overlap 0.75: block hop as a share of a block */
#define PYLN_ABS_GATE (-70.0)     /* LUFS */
#define PYLN_REL_GATE (-10.0)     /* LU below the absolute-gated mean */
#define PYLN_OFFSET (-0.691)      /* loudness of a block: -0.691 + 10 log10(mean square) */

/* One biquad, coefficients normalised by a0 (a[0] = 1). */
typedef struct biquad {
    double b[3], a[3];
} biquad;

/* The RBJ cookbook high shelf (shelf = 1, gain_db) or high pass (shelf =
 * 0) at fc Hz with quality q, as pyloudnorm's IIRfilter designs them. */
static biquad rbj_design(int shelf, double gain_db, double q, double fc, double rate) {
    double A = pow(10.0, gain_db / 40.0);
    double w0 = 2.0 * M_PI * (fc / rate);
    double alpha = sin(w0) / (2.0 * q), c = cos(w0);
    double b0, b1, b2, a0, a1, a2;
    if (shelf) {
        double s = 2.0 * sqrt(A) * alpha;
        b0 = A * ((A + 1) + (A - 1) * c + s);
        b1 = -2 * A * ((A - 1) + (A + 1) * c);
        b2 = A * ((A + 1) + (A - 1) * c - s);
        a0 = (A + 1) - (A - 1) * c + s;
        a1 = 2 * ((A - 1) - (A + 1) * c);
        a2 = (A + 1) - (A - 1) * c - s;
    } else {
        b0 = (1 + c) / 2;
        b1 = -(1 + c);
        b2 = (1 + c) / 2;
        a0 = 1 + alpha;
        a1 = -2 * c;
        a2 = 1 - alpha;
    }
    biquad f = {{b0 / a0, b1 / a0, b2 / a0}, {1.0, a1 / a0, a2 / a0}};
    return f;
}

/* y = f(x), n samples, in place, direct form II transposed from rest (as
 * scipy.signal.lfilter). */
static void biquad_run(const biquad *f, double *x, size_t n) {
    double z0 = 0, z1 = 0;
    for (size_t i = 0; i < n; i++) {
        double in = x[i], y = z0 + f->b[0] * in;
        z0 = z1 + in * f->b[1] - y * f->a[1];
        z1 = in * f->b[2] - y * f->a[2];
        x[i] = y;
    }
}

static double block_lufs(double z) { return PYLN_OFFSET + 10.0 * log10(z); }

int pp_loudness_pyln(const float *x, size_t n, int rate_hz, double *lufs, ms_error *err) {
    *lufs = -HUGE_VAL;
    if (rate_hz <= 0) return ms_err_set(err, MS_ERR_ARG, "loudness: bad rate %d Hz", rate_hz);
    const double rate = rate_hz;
    if ((double)n < PYLN_BLOCK_S * rate)
        return ms_err_set(err, MS_ERR_RANGE, "loudness: %zu samples at %d Hz, shorter than one %.1f s block", n,
                          rate_hz, PYLN_BLOCK_S);
    double *k = malloc(n * sizeof(double));
    if (!k) return ms_err_set(err, MS_ERR_NOMEM, "loudness: out of memory");
    for (size_t i = 0; i < n; i++) k[i] = x[i];
    biquad shelf = rbj_design(1, 4.0, 1.0 / sqrt(2.0), 1500.0, rate);
    biquad hp = rbj_design(0, 0.0, 0.5, 38.0, rate);
    biquad_run(&shelf, k, n);
    biquad_run(&hp, k, n);

    /* block j covers [int(0.4 * 0.25 j * rate), int(0.4 * (0.25 j + 1) * rate)),
     * cut at the end, always divided by a whole block */
    double T = (double)n / rate;
    long nb = (long)rint((T - PYLN_BLOCK_S) / (PYLN_BLOCK_S * PYLN_STEP)) + 1;
    double *z = malloc((size_t)nb * sizeof(double));
    if (!z) {
        free(k);
        return ms_err_set(err, MS_ERR_NOMEM, "loudness: out of memory");
    }
    const double inv = 1.0 / (PYLN_BLOCK_S * rate);
    for (long j = 0; j < nb; j++) {
        size_t lo = (size_t)(PYLN_BLOCK_S * ((double)j * PYLN_STEP) * rate);
        size_t hi = (size_t)(PYLN_BLOCK_S * ((double)j * PYLN_STEP + 1.0) * rate);
        if (hi > n) hi = n;
        double s = 0;
        for (size_t i = lo; i < hi; i++) s += k[i] * k[i];
        z[j] = inv * s;
    }
    free(k);

    /* absolute gate, then relative gate on the absolute-gated mean */
    double sum = 0;
    long cnt = 0;
    for (long j = 0; j < nb; j++)
        if (block_lufs(z[j]) >= PYLN_ABS_GATE) sum += z[j], cnt++;
    if (cnt) {
        double rel = block_lufs(sum / cnt) + PYLN_REL_GATE;
        double sum2 = 0;
        long cnt2 = 0;
        for (long j = 0; j < nb; j++) {
            double l = block_lufs(z[j]);
            if (l > rel && l > PYLN_ABS_GATE) sum2 += z[j], cnt2++;
        }
        if (cnt2) *lufs = block_lufs(sum2 / cnt2);
    }
    free(z);
    return MS_OK;
}

int pp_voice_normalize(float *x, size_t n, double measured_lufs, double target_lufs, double *gain,
                       ms_error *err) {
    if (!isfinite(measured_lufs))
        return ms_err_set(err, MS_ERR_RANGE, "voice: silent (no 400 ms block at %.0f LUFS or above)", PYLN_ABS_GATE);
    if (!isfinite(target_lufs)) return ms_err_set(err, MS_ERR_ARG, "voice: bad loudness target");
    double g = pow(10.0, (target_lufs - measured_lufs) / 20.0);
    for (size_t i = 0; i < n; i++)
        if (!isfinite((float)(g * x[i])))
            return ms_err_set(err, MS_ERR_RANGE, "voice: sample %zu out of range after a gain of %g", i, g);
    for (size_t i = 0; i < n; i++) x[i] = (float)(g * x[i]);
    if (gain) *gain = g;
    return MS_OK;
}

size_t pp_voice_frames(size_t n, int frame) {
    MS_ASSERT(frame > 0);
    return n / (size_t)frame + (n % (size_t)frame != 0);
}

static int check_codec(const mimi_model *m, ms_error *err) {
    if (mimi_num_codebooks(m) != PP_SIDE_CODEBOOKS)
        return ms_err_set(err, MS_ERR_UNSUPPORTED, "voice: the codec gives %d codes per frame, PersonaPlex takes %d",
                          mimi_num_codebooks(m), PP_SIDE_CODEBOOKS);
    return MS_OK;
}

/* encode n_frames frames of pcm (n samples, zero-padded to whole frames)
 * with one fresh stream into codes (n_frames, 8) */
static int encode_frames(const mimi_model *m, const float *pcm, size_t n, size_t n_frames, int *codes,
                         ms_error *err) {
    const int F = mimi_frame_samples(m);
    float *buf = malloc((size_t)F * sizeof(float));
    mimi_stream *s = NULL;
    mimi_ws *ws = NULL;
    int rc = MS_OK;
    if (!buf || !(s = mimi_stream_create(m, NULL)) || !(ws = mimi_ws_create(m, 1, NULL))) {
        rc = ms_err_set(err, MS_ERR_NOMEM, "voice: out of memory for the codec state");
        goto out;
    }
    for (size_t f = 0; f < n_frames && !rc; f++) {
        size_t at = f * (size_t)F, take = n - at < (size_t)F ? n - at : (size_t)F;
        memcpy(buf, pcm + at, take * sizeof(float));
        memset(buf + take, 0, ((size_t)F - take) * sizeof(float));
        rc = mimi_encode_batch_ws(m, ws, &s, 1, buf, codes + f * PP_SIDE_CODEBOOKS, err);
        if (rc) ms_err_prefix(err, "voice: frame %zu", f);
    }
out:
    mimi_ws_free(ws);
    mimi_stream_free(s);
    free(buf);
    return rc;
}

int pp_voice_encode(const mimi_model *m, const float *pcm, size_t n, int max_frames, int **codes,
                    int *n_frames, ms_error *err) {
    *codes = NULL;
    *n_frames = 0;
    int rc = check_codec(m, err);
    if (rc) return rc;
    if (max_frames < 0 || max_frames > PP_PRIME_MAX_CALLS)
        return ms_err_set(err, MS_ERR_ARG, "voice: max_frames %d outside [0, %d]", max_frames, PP_PRIME_MAX_CALLS);
    size_t nf = pp_voice_frames(n, mimi_frame_samples(m));
    if (nf > (size_t)max_frames)
        return ms_err_set(err, MS_ERR_LIMIT, "voice: %zu frames, at most %d", nf, max_frames);
    if (!nf) return MS_OK;
    int *c = malloc(nf * PP_SIDE_CODEBOOKS * sizeof(int));
    if (!c) return ms_err_set(err, MS_ERR_NOMEM, "voice: out of memory");
    if ((rc = encode_frames(m, pcm, n, nf, c, err))) {
        free(c);
        return rc;
    }
    *codes = c;
    *n_frames = (int)nf;
    return MS_OK;
}

void pp_sine_frame(float *dst, int frame, int rate_hz) {
    MS_ASSERT(frame > 0 && rate_hz > 0);
    double d = (double)frame / rate_hz;
    int num = (int)((double)rate_hz * d);   /* numpy: int(sample_rate * duration) points */
    double step = d / (num > 0 ? num : frame);
    for (int i = 0; i < frame; i++)
        dst[i] = PP_SINE_AMPLITUDE * (float)sin(2.0 * M_PI * PP_SINE_HZ * ((double)i * step));
}

int pp_codec_is_released(const mimi_config *c) {
    mimi_config d;
    mimi_config_default(&d);
#define SAME(f) (c->f == d.f)
    if (!(SAME(sample_rate) && SAME(channels) && SAME(frame_rate) && SAME(dimension) && SAME(n_filters) &&
          SAME(n_residual_layers) && SAME(compress) && SAME(dilation_base) && SAME(kernel_size) &&
          SAME(residual_kernel_size) && SAME(last_kernel_size) && SAME(n_ratios) && SAME(q_dimension) &&
          SAME(q_n_q) && SAME(q_bins) && SAME(d_model) && SAME(num_heads) && SAME(num_layers) &&
          SAME(dim_feedforward) && SAME(context) && SAME(max_period) && SAME(layer_scale) && SAME(num_codebooks) &&
          SAME(hop) && SAME(frame_samples) && SAME(resample_stride)))
        return 0;
#undef SAME
    for (int i = 0; i < d.n_ratios; i++)
        if (c->ratios[i] != d.ratios[i]) return 0;
    return 1;
}

int pp_side_tokens_encode(const mimi_model *m, int silence[PP_SIDE_CODEBOOKS], int sine[PP_SIDE_CODEBOOKS],
                          ms_error *err) {
    int rc = check_codec(m, err);
    if (rc) return rc;
    const int F = mimi_frame_samples(m);
    float *frame = calloc((size_t)F, sizeof(float));
    if (!frame) return ms_err_set(err, MS_ERR_NOMEM, "voice: out of memory");
    rc = encode_frames(m, frame, (size_t)F, 1, silence, err);
    if (!rc) {
        pp_sine_frame(frame, F, mimi_sample_rate(m));
        rc = encode_frames(m, frame, (size_t)F, 1, sine, err);
    }
    free(frame);
    return rc;
}

int pp_side_tokens(const mimi_model *m, int silence[PP_SIDE_CODEBOOKS], int sine[PP_SIDE_CODEBOOKS], int *released,
                   ms_error *err) {
    int rel = pp_codec_is_released(mimi_model_config(m));
    if (released) *released = rel;
    if (!rel) return pp_side_tokens_encode(m, silence, sine, err);
    memcpy(silence, pp_silence_tokens_mimi, sizeof(int) * PP_SIDE_CODEBOOKS);
    memcpy(sine, pp_sine_tokens_mimi, sizeof(int) * PP_SIDE_CODEBOOKS);
    return MS_OK;
}
