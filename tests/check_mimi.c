/* check_mimi.c - Mimi parity against the official implementation (fixtures
 * from tests/fixtures/gen_mimi.py), batches, resets, hostile weights and codes.
 *
 * Parity criteria: every code equal to the reference's streaming
 * encode; decoded audio with the reference's sample count and
 * max|delta| <= 1e-4 * rms(reference) over the whole signal.
 * MIMI_FIXTURES (default tests/fixtures/mimi) and MIMI_MODELS (default
 * "tiny dil sr16k") select the fixtures; `make parity-big` points them at the
 * real-dimension ones. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_main.h"
#include "mimi.h"
#include "st.h"

#define TOL_REL 1e-4

static const char *fixdir(void) {
    const char *d = getenv("MIMI_FIXTURES");
    return d && d[0] ? d : "tests/fixtures/mimi";
}

typedef struct ref {
    int frames, K, frame;
    float *pcm;        /* (frames*frame) */
    int *codes;        /* (frames, K) */
    int *codes_reset;  /* (frames, K) */
    float *decoded;    /* (frames*frame) */
    size_t ndecoded;
} ref;

static float *read_f32(st_file *f, const char *name, size_t *n) {
    const st_tensor *t = st_find(f, name);
    ck_assert_msg(t != NULL, "reference tensor %s missing", name);
    float *p = malloc(t->nel * sizeof(float));
    ck_assert_int_eq(st_to_f32(t, 0, t->nel, p), MS_OK);
    *n = t->nel;
    return p;
}

static int *read_i32(st_file *f, const char *name, int *rows, int *cols) {
    const st_tensor *t = st_find(f, name);
    ck_assert_msg(t != NULL && t->dtype == ST_I32 && t->ndim == 2, "reference tensor %s", name);
    int *p = malloc(t->nbytes);
    memcpy(p, t->data, t->nbytes);
    *rows = (int)t->shape[0];
    *cols = (int)t->shape[1];
    return p;
}

static mimi_model *load_model(const char *name, ref *r) {
    char wpath[512], cpath[512], rpath[512];
    snprintf(wpath, sizeof wpath, "%s/%s.safetensors", fixdir(), name);
    snprintf(cpath, sizeof cpath, "%s/%s.json", fixdir(), name);
    snprintf(rpath, sizeof rpath, "%s/%s_ref.safetensors", fixdir(), name);
    ms_error e = {0};
    mimi_model *m = NULL;
    int rc = mimi_model_load(&m, wpath, cpath, &e);
    ck_assert_msg(rc == MS_OK, "%s: %s", name, e.msg);
    st_file *f = st_open(rpath, &e);
    ck_assert_msg(f != NULL, "%s", e.msg);
    size_t n;
    int rows, cols, r2, c2;
    r->pcm = read_f32(f, "pcm", &n);
    r->decoded = read_f32(f, "decoded", &r->ndecoded);
    r->codes = read_i32(f, "codes", &rows, &cols);
    r->codes_reset = read_i32(f, "codes_reset", &r2, &c2);
    st_close(f);
    r->frames = rows;
    r->K = cols;
    r->frame = mimi_frame_samples(m);
    ck_assert_int_eq(cols, mimi_num_codebooks(m));
    ck_assert_int_eq((size_t)rows * r->frame, n);
    ck_assert_int_eq(r->ndecoded, n);
    return m;
}

static void free_ref(ref *r) {
    free(r->pcm);
    free(r->codes);
    free(r->codes_reset);
    free(r->decoded);
}

static int count_mismatch(const char *what, const int *got, const int *want, int frames, int K) {
    int bad = 0;
    for (int i = 0; i < frames * K; i++)
        if (got[i] != want[i]) {
            if (!bad)
                fprintf(stderr, "%s: first code mismatch at frame %d codebook %d: got %d want %d\n", what,
                        i / K, i % K, got[i], want[i]);
            bad++;
        }
    return bad;
}

/* max|a-b| against TOL_REL * rms(b); prints the first sample beyond it. */
static void check_audio(const char *what, const float *got, const float *want, size_t n) {
    double ss = 0, mx = 0;
    for (size_t i = 0; i < n; i++) ss += (double)want[i] * want[i];
    double rms = sqrt(ss / n), tol = TOL_REL * rms;
    size_t first = n;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (d > mx) mx = d;
        if (d > tol && first == n) first = i;
    }
    fprintf(stderr, "%s: max|delta| = %.3g, rms(ref) = %.4g, ratio %.3g (limit %g)\n", what, mx, rms,
            mx / rms, TOL_REL);
    ck_assert_msg(first == n, "%s: sample %zu: got %.8g want %.8g (max|delta| %.3g > %.3g)", what, first,
                  got[first < n ? first : 0], want[first < n ? first : 0], mx, tol);
}

static void parity_one(const char *name) {
    ref r;
    mimi_model *m = load_model(name, &r);
    ms_error e = {0};
    mimi_stream *s = mimi_stream_create(m, &e);
    ck_assert_ptr_nonnull(s);
    int K = r.K, F = r.frame;
    int *codes = calloc((size_t)r.frames * K, sizeof(int));
    for (int f = 0; f < r.frames; f++)
        ck_assert_int_eq(mimi_encode_batch(m, &s, 1, r.pcm + (size_t)f * F, codes + (size_t)f * K, &e), MS_OK);
    char what[128];
    snprintf(what, sizeof what, "%s encode", name);
    int bad = count_mismatch(what, codes, r.codes, r.frames, K);
    ck_assert_msg(bad == 0, "%s: %d of %d codes differ", what, bad, r.frames * K);

    /* the Kyutai server's pattern: reset the encoder after the first frame */
    mimi_stream_reset_encoder(s);
    for (int f = 0; f < r.frames; f++) {
        ck_assert_int_eq(mimi_encode_batch(m, &s, 1, r.pcm + (size_t)f * F, codes + (size_t)f * K, &e), MS_OK);
        if (f == 0) mimi_stream_reset_encoder(s);
    }
    snprintf(what, sizeof what, "%s encode with reset", name);
    bad = count_mismatch(what, codes, r.codes_reset, r.frames, K);
    ck_assert_msg(bad == 0, "%s: %d of %d codes differ", what, bad, r.frames * K);

    float *pcm = malloc(r.ndecoded * sizeof(float));
    for (int f = 0; f < r.frames; f++)
        ck_assert_int_eq(mimi_decode_batch(m, &s, 1, r.codes + (size_t)f * K, pcm + (size_t)f * F, &e), MS_OK);
    snprintf(what, sizeof what, "%s decode", name);
    check_audio(what, pcm, r.decoded, r.ndecoded);

    /* after a decoder reset the same codes give the same audio again */
    mimi_stream_reset_decoder(s);
    for (int f = 0; f < r.frames; f++)
        ck_assert_int_eq(mimi_decode_batch(m, &s, 1, r.codes + (size_t)f * K, pcm + (size_t)f * F, &e), MS_OK);
    snprintf(what, sizeof what, "%s decode after reset", name);
    check_audio(what, pcm, r.decoded, r.ndecoded);
    free(pcm);
    free(codes);
    mimi_stream_free(s);
    mimi_model_free(m);
    free_ref(&r);
}

/* Stream 1 of a batch of NB gets the reference input; its neighbours get
 * other signals and codes; stream 1 must still match the reference. With 5
 * streams the 25 Hz layers (2 steps a frame) take the blocked GEMM and the
 * 12.5 Hz ones the small-N kernel. */
#define NB 5
static void batch_one(const char *name) {
    ref r;
    mimi_model *m = load_model(name, &r);
    ms_error e = {0};
    mimi_stream *st[NB];
    for (int i = 0; i < NB; i++) st[i] = mimi_stream_create(m, &e);
    int K = r.K, F = r.frame, bins = mimi_cardinality(m);
    int *codes = calloc((size_t)r.frames * K, sizeof(int));
    float *in = malloc((size_t)NB * F * sizeof(float));
    int cb[NB * MIMI_MAX_CODEBOOKS];
    for (int f = 0; f < r.frames; f++) {
        const float *x = r.pcm + (size_t)f * F;
        for (int i = 0; i < F; i++) {
            in[i] = 0.5f * x[F - 1 - i];
            in[F + i] = x[i];
            for (int q = 2; q < NB; q++) in[q * F + i] = 0.3f * sinf(0.01f * q * (float)(i + f * F));
        }
        ck_assert_int_eq(mimi_encode_batch(m, st, NB, in, cb, &e), MS_OK);
        memcpy(codes + (size_t)f * K, cb + K, (size_t)K * sizeof(int));
    }
    char what[128];
    snprintf(what, sizeof what, "%s batch encode", name);
    int bad = count_mismatch(what, codes, r.codes, r.frames, K);
    ck_assert_msg(bad == 0, "%s: %d codes differ", what, bad);
    float *pcm = malloc(r.ndecoded * sizeof(float));
    float *out = malloc((size_t)NB * F * sizeof(float));
    for (int f = 0; f < r.frames; f++) {
        for (int k = 0; k < K; k++) {
            int c = r.codes[(size_t)f * K + k];
            cb[k] = (c + 1) % bins;
            cb[K + k] = c;
            for (int q = 2; q < NB; q++) cb[q * K + k] = (c * 7 + 3 * q) % bins;
        }
        ck_assert_int_eq(mimi_decode_batch(m, st, NB, cb, out, &e), MS_OK);
        memcpy(pcm + (size_t)f * F, out + F, (size_t)F * sizeof(float));
    }
    snprintf(what, sizeof what, "%s batch decode", name);
    check_audio(what, pcm, r.decoded, r.ndecoded);
    free(out);
    free(pcm);
    free(in);
    free(codes);
    for (int i = 0; i < NB; i++) mimi_stream_free(st[i]);
    mimi_model_free(m);
    free_ref(&r);
}

/* Run fn for each model name in MIMI_MODELS (default: the committed ones). */
static void for_models(void (*fn)(const char *)) {
    const char *env = getenv("MIMI_MODELS");
    char buf[256];
    snprintf(buf, sizeof buf, "%s", env && env[0] ? env : "tiny dil sr16k");
    for (char *save = NULL, *t = strtok_r(buf, " ,", &save); t; t = strtok_r(NULL, " ,", &save)) fn(t);
}

START_TEST(test_parity) { for_models(parity_one); }
END_TEST

START_TEST(test_batch) { for_models(batch_one); }
END_TEST

START_TEST(test_hostile_codes_and_pcm) {
    ref r;
    mimi_model *m = load_model("tiny", &r);
    ms_error e = {0};
    mimi_stream *s = mimi_stream_create(m, &e);
    int K = r.K, F = r.frame;
    int codes[MIMI_MAX_CODEBOOKS];
    float *pcm = calloc((size_t)F, sizeof(float));
    memcpy(codes, r.codes, (size_t)K * sizeof(int));
    codes[K - 1] = mimi_cardinality(m);
    ck_assert_int_eq(mimi_decode_batch(m, &s, 1, codes, pcm, &e), MS_ERR_RANGE);
    ck_assert_ptr_nonnull(strstr(e.msg, "outside"));
    codes[K - 1] = -1;
    ck_assert_int_eq(mimi_decode_batch(m, &s, 1, codes, pcm, &e), MS_ERR_RANGE);
    pcm[5] = NAN;
    ck_assert_int_eq(mimi_encode_batch(m, &s, 1, pcm, codes, &e), MS_ERR_RANGE);
    pcm[5] = INFINITY;
    ck_assert_int_eq(mimi_encode_batch(m, &s, 1, pcm, codes, &e), MS_ERR_RANGE);
    ck_assert_int_eq(mimi_encode_batch(m, &s, 0, pcm, codes, &e), MS_ERR_ARG);
    ck_assert_int_eq(mimi_encode_batch(m, NULL, 1, pcm, codes, &e), MS_ERR_ARG);
    /* a refused call advanced nothing: parity still holds from here */
    int *got = calloc((size_t)r.frames * K, sizeof(int));
    for (int f = 0; f < r.frames; f++)
        ck_assert_int_eq(mimi_encode_batch(m, &s, 1, r.pcm + (size_t)f * F, got + (size_t)f * K, &e), MS_OK);
    ck_assert_int_eq(count_mismatch("after refusals", got, r.codes, r.frames, K), 0);
    free(got);
    free(pcm);
    mimi_stream_free(s);
    mimi_model_free(m);
    free_ref(&r);
}
END_TEST

/* Write a copy of the tiny weights without tensor `skip` (reshape 0), with
 * it reshaped to one dimension (1), or with a NaN in it (2). */
static void write_variant(const char *path, const char *skip, int reshape) {
    char wpath[512];
    snprintf(wpath, sizeof wpath, "%s/tiny.safetensors", fixdir());
    ms_error e = {0};
    float *poisoned = NULL;
    st_file *f = st_open(wpath, &e);
    ck_assert_ptr_nonnull(f);
    st_writer *w = st_writer_create();
    for (size_t i = 0; i < st_count(f); i++) {
        const st_tensor *t = st_at(f, i);
        if (strcmp(t->name, skip) == 0 && reshape == 2) {   /* poison: first element NaN */
            ck_assert_int_eq(t->dtype, ST_F32);
            float *copy = malloc(t->nbytes);
            memcpy(copy, t->data, t->nbytes);
            copy[0] = NAN;
            ck_assert_int_eq(st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, copy), MS_OK);
            poisoned = copy;
            continue;
        }
        if (strcmp(t->name, skip) == 0) {
            if (!reshape) continue;
            int64_t n = (int64_t)t->nel;
            ck_assert_int_eq(st_writer_add(w, t->name, t->dtype, 1, &n, t->data), MS_OK);
            continue;
        }
        ck_assert_int_eq(st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data), MS_OK);
    }
    ck_assert_int_eq(st_writer_save(w, path, &e), MS_OK);
    st_writer_free(w);
    st_close(f);
    free(poisoned);
}

START_TEST(test_hostile_weights) {
    char cpath[512], path[] = "/tmp/check_mimi_XXXXXX";
    snprintf(cpath, sizeof cpath, "%s/tiny.json", fixdir());
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    static const char *names[] = {"encoder.model.3.conv.conv.weight",
                                  "decoder_transformer.transformer.layers.1.linear2.weight",
                                  "quantizer.rvq_rest.vq.layers.6._codebook.embedding_sum",
                                  "upsample.convtr.convtr.convtr.weight"};
    for (int reshape = 0; reshape < 3; reshape++)
        for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
            write_variant(path, names[i], reshape);
            mimi_model *m = NULL;
            ms_error e = {0};
            int rc = mimi_model_load(&m, path, cpath, &e);
            ck_assert_msg(rc != MS_OK && m == NULL, "%s accepted", names[i]);
            ck_assert_msg(strstr(e.msg, names[i]) != NULL, "message does not name %s: %s", names[i], e.msg);
        }
    /* a codebook level beyond num_codebooks is not needed */
    write_variant(path, "quantizer.rvq_rest.vq.layers.8._codebook.embedding_sum", 0);
    mimi_model *m = NULL;
    ms_error e = {0};
    ck_assert_msg(mimi_model_load(&m, path, cpath, &e) == MS_OK, "%s", e.msg);
    mimi_model_free(m);
    /* the default (real) configuration does not fit the tiny weights */
    ck_assert_int_ne(mimi_model_load(&m, path, NULL, &e), MS_OK);
    ck_assert_ptr_nonnull(strstr(e.msg, "encoder.model.0.conv.conv.weight"));
    ck_assert_int_ne(mimi_model_load(&m, "/nonexistent/x.safetensors", NULL, &e), MS_OK);
    unlink(path);
}
END_TEST

/* The tiny weights stored as bf16 / f16 load (converted to float32) and
 * decode the reference codes to audio close to the reference: the rounding
 * of the weights (8 / 11 significant bits) is all that differs. */
START_TEST(test_half_weights) {
    static const st_dtype dts[2] = {ST_BF16, ST_F16};
    static const double tol[2] = {0.2, 0.05};   /* max|delta| / rms: measured 0.079 and 0.0097 */
    ref r;
    mimi_model *m0 = load_model("tiny", &r);
    mimi_model_free(m0);
    char wpath[512], cpath[512], path[] = "/tmp/check_mimi_half_XXXXXX";
    snprintf(wpath, sizeof wpath, "%s/tiny.safetensors", fixdir());
    snprintf(cpath, sizeof cpath, "%s/tiny.json", fixdir());
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    for (int d = 0; d < 2; d++) {
        ms_error e = {0};
        st_file *f = st_open(wpath, &e);
        ck_assert_ptr_nonnull(f);
        st_writer *w = st_writer_create();
        uint16_t **bufs = calloc(st_count(f), sizeof(*bufs));
        for (size_t i = 0; i < st_count(f); i++) {
            const st_tensor *t = st_at(f, i);
            float *x = malloc(t->nel * sizeof(float) + 1);
            ck_assert_int_eq(st_to_f32(t, 0, t->nel, x), MS_OK);
            bufs[i] = malloc(t->nel * 2 + 1);
            for (uint64_t j = 0; j < t->nel; j++)
                bufs[i][j] = dts[d] == ST_BF16 ? st_f32_to_bf16(x[j]) : st_f32_to_f16(x[j]);
            free(x);
            ck_assert_int_eq(st_writer_add(w, t->name, dts[d], t->ndim, t->shape, bufs[i]), MS_OK);
        }
        ck_assert_int_eq(st_writer_save(w, path, &e), MS_OK);
        st_writer_free(w);
        for (size_t i = 0; i < st_count(f); i++) free(bufs[i]);
        free(bufs);
        st_close(f);
        mimi_model *m = NULL;
        ck_assert_msg(mimi_model_load(&m, path, cpath, &e) == MS_OK, "%s", e.msg);
        mimi_stream *s = mimi_stream_create(m, &e);
        float *pcm = malloc(r.ndecoded * sizeof(float));
        for (int fr = 0; fr < r.frames; fr++)
            ck_assert_int_eq(mimi_decode_batch(m, &s, 1, r.codes + (size_t)fr * r.K, pcm + (size_t)fr * r.frame, &e),
                             MS_OK);
        double ss = 0, mx = 0;
        for (size_t i = 0; i < r.ndecoded; i++) {
            ss += (double)r.decoded[i] * r.decoded[i];
            double dd = fabs((double)pcm[i] - r.decoded[i]);
            if (!(dd <= mx)) mx = dd;   /* NaN propagates to a failure */
        }
        double rel = mx / sqrt(ss / r.ndecoded);
        fprintf(stderr, "tiny %s weights decode: max|delta| / rms = %.3g (limit %g)\n", st_dtype_name(dts[d]), rel, tol[d]);
        ck_assert_msg(rel <= tol[d], "%s weights: %g", st_dtype_name(dts[d]), rel);
        free(pcm);
        mimi_stream_free(s);
        mimi_model_free(m);
    }
    unlink(path);
    free_ref(&r);
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("mimi");
    TCase *tc = tcase_new("parity");
    tcase_add_test(tc, test_parity);
    tcase_add_test(tc, test_batch);
    suite_add_tcase(s, tc);
    tc = tcase_new("hostile");
    tcase_add_test(tc, test_hostile_codes_and_pcm);
    tcase_add_test(tc, test_hostile_weights);
    tcase_add_test(tc, test_half_weights);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN
