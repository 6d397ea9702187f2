/* mimi_codec.c - build/mimi-codec: audio file <-> Mimi codes, streaming frame
 * by frame from a fresh state (as the server does).
 *
 *   mimi-codec encode --mimi FILE.safetensors [--config FILE.json] IN.wav OUT.txt
 *   mimi-codec decode --mimi FILE.safetensors [--config FILE.json] IN.txt OUT.{wav,f32}
 *
 * encode: any file libsndfile reads (WAV/FLAC/Ogg), mixed to mono and
 * resampled to the model's rate; 16-bit PCM is scaled by 1/32768; the last
 * partial frame is padded with zeros. Writes one line per frame: the codes
 * (semantic first) separated by single spaces.
 * decode: one line per frame of exactly num_codebooks integers in
 * [0, cardinality); writes 16-bit WAV (.wav) or raw little-endian float32
 * (.f32) at the model's rate.
 * Any bad input exits 1 with a message on stderr; usage errors exit 2.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audio_file.h"
#include "mimi.h"

#define CODEC_MAX_LINE 4096          /* bytes per line of codes */
#define CODEC_MAX_FRAMES (12 * 3600 * 13)   /* about an hour at 12.5 Hz */

static int usage(void) {
    fprintf(stderr,
            "usage: mimi-codec encode --mimi FILE.safetensors [--config FILE.json] IN.wav OUT.txt\n"
            "       mimi-codec decode --mimi FILE.safetensors [--config FILE.json] IN.txt OUT.wav|OUT.f32\n");
    return 2;
}

static int fail(const ms_error *e) {
    fprintf(stderr, "mimi-codec: %s\n", e->msg);
    return 1;
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static int encode(const mimi_model *m, const char *in, const char *out, ms_error *e) {
    float *pcm = NULL;
    size_t n = 0;
    int rc = af_read_mono(in, mimi_sample_rate(m), &pcm, &n, e);
    if (rc) return rc;
    if (n == 0) {
        free(pcm);
        return ms_err_set(e, MS_ERR_FORMAT, "%s: no audio samples", in);
    }
    const size_t F = (size_t)mimi_frame_samples(m);
    const int K = mimi_num_codebooks(m);
    size_t frames = (n + F - 1) / F;
    float *frame = calloc(F, sizeof(float));
    mimi_stream *s = mimi_stream_create(m, e);
    FILE *f = fopen(out, "w");
    if (!frame || !s || !f) {
        if (!f && s && frame) rc = ms_err_set(e, MS_ERR_IO, "%s: %s", out, strerror(errno));
        else if (!rc) rc = ms_err_set(e, MS_ERR_NOMEM, "out of memory");
        goto done;
    }
    int codes[MIMI_MAX_CODEBOOKS];
    for (size_t i = 0; i < frames && !rc; i++) {
        size_t take = n - i * F < F ? n - i * F : F;
        memset(frame, 0, F * sizeof(float));
        memcpy(frame, pcm + i * F, take * sizeof(float));
        rc = mimi_encode_batch(m, &s, 1, frame, codes, e);
        for (int k = 0; k < K && !rc; k++)
            if (fprintf(f, k ? " %d" : "%d", codes[k]) < 0) rc = ms_err_set(e, MS_ERR_IO, "%s: write failed", out);
        if (!rc && fputc('\n', f) == EOF) rc = ms_err_set(e, MS_ERR_IO, "%s: write failed", out);
    }
done:
    if (f && fclose(f) != 0 && !rc) rc = ms_err_set(e, MS_ERR_IO, "%s: write failed", out);
    mimi_stream_free(s);
    free(frame);
    free(pcm);
    return rc;
}

/* Parse one line of exactly K codes in [0, bins). */
static int parse_line(const char *line, size_t lineno, int K, int bins, int *codes, ms_error *e) {
    const char *p = line;
    for (int k = 0; k < K; k++) {
        while (*p == ' ' || *p == '\t') p++;
        if (!isdigit((unsigned char)*p) && *p != '-')
            return ms_err_set(e, MS_ERR_FORMAT, "line %zu: expected %d integer codes, found %d", lineno, K, k);
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || (*end && *end != ' ' && *end != '\t' && *end != '\n' && *end != '\r'))
            return ms_err_set(e, MS_ERR_FORMAT, "line %zu: code number %d is not an integer", lineno, k + 1);
        if (v < 0 || v >= bins)
            return ms_err_set(e, MS_ERR_RANGE, "line %zu: code %ld outside [0, %d)", lineno, v, bins);
        codes[k] = (int)v;
        p = end;
    }
    while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n') p++;
    if (*p) return ms_err_set(e, MS_ERR_FORMAT, "line %zu: more than %d codes", lineno, K);
    return MS_OK;
}

static int decode(const mimi_model *m, const char *in, const char *out, ms_error *e) {
    int as_wav = ends_with(out, ".wav"), as_f32 = ends_with(out, ".f32");
    if (!as_wav && !as_f32) return ms_err_set(e, MS_ERR_ARG, "%s: output must end in .wav or .f32", out);
    FILE *f = fopen(in, "r");
    if (!f) return ms_err_set(e, MS_ERR_IO, "%s: %s", in, strerror(errno));
    const int K = mimi_num_codebooks(m), bins = mimi_cardinality(m);
    const size_t F = (size_t)mimi_frame_samples(m);
    int rc = MS_OK;
    size_t frames = 0, cap = 0, lineno = 0;
    int *all = NULL;
    char line[CODEC_MAX_LINE + 2];
    while (fgets(line, sizeof line, f)) {
        lineno++;
        size_t len = strlen(line);
        if (len > CODEC_MAX_LINE || (len == sizeof line - 1 && line[len - 1] != '\n')) {
            rc = ms_err_set(e, MS_ERR_LIMIT, "%s: line %zu longer than %d bytes", in, lineno, CODEC_MAX_LINE);
            break;
        }
        if (strlen(line) != len || memchr(line, '\0', len)) {
            rc = ms_err_set(e, MS_ERR_FORMAT, "%s: line %zu holds a NUL byte", in, lineno);
            break;
        }
        if (frames == CODEC_MAX_FRAMES) {
            rc = ms_err_set(e, MS_ERR_LIMIT, "%s: more than %d frames", in, CODEC_MAX_FRAMES);
            break;
        }
        if (frames == cap) {
            cap = cap ? 2 * cap : 256;
            int *a = realloc(all, cap * K * sizeof(int));
            if (!a) {
                rc = ms_err_set(e, MS_ERR_NOMEM, "out of memory");
                break;
            }
            all = a;
        }
        rc = parse_line(line, lineno, K, bins, all + frames * K, e);
        if (rc) {
            ms_err_prefix(e, "%s", in);
            break;
        }
        frames++;
    }
    if (!rc && ferror(f)) rc = ms_err_set(e, MS_ERR_IO, "%s: read error", in);
    fclose(f);
    if (!rc && frames == 0) rc = ms_err_set(e, MS_ERR_FORMAT, "%s: no frames of codes", in);
    float *pcm = NULL;
    mimi_stream *s = NULL;
    if (!rc) {
        pcm = malloc(frames * F * sizeof(float));
        s = mimi_stream_create(m, e);
        if (!pcm || !s) rc = pcm ? (e->code ? e->code : MS_ERR_NOMEM) : ms_err_set(e, MS_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < frames && !rc; i++) rc = mimi_decode_batch(m, &s, 1, all + i * K, pcm + i * F, e);
    if (!rc) rc = as_wav ? af_write_wav16(out, pcm, frames * F, mimi_sample_rate(m), e)
                         : af_write_f32(out, pcm, frames * F, e);
    mimi_stream_free(s);
    free(pcm);
    free(all);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 2) return usage();
    const char *cmd = argv[1], *weights = NULL, *config = NULL, *pos[2] = {NULL, NULL};
    int npos = 0;
    if (strcmp(cmd, "encode") != 0 && strcmp(cmd, "decode") != 0) return usage();
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--mimi") == 0 && i + 1 < argc) weights = argv[++i];
        else if (strcmp(argv[i], "--config") == 0 && i + 1 < argc) config = argv[++i];
        else if (argv[i][0] == '-' && argv[i][1] == '-') return usage();
        else if (npos < 2) pos[npos++] = argv[i];
        else return usage();
    }
    if (!weights || npos != 2) return usage();
    ms_error e = {0};
    mimi_model *m = NULL;
    if (mimi_model_load(&m, weights, config, &e)) return fail(&e);
    int rc = strcmp(cmd, "encode") == 0 ? encode(m, pos[0], pos[1], &e) : decode(m, pos[0], pos[1], &e);
    mimi_model_free(m);
    if (rc) {
        if (!e.msg[0]) ms_err_set(&e, rc, "%s", ms_strerror(rc));
        return fail(&e);
    }
    return 0;
}
