/* check_audio_file.c - audio file reading, mixing, resampling and writing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "audio_file.h"
#include "check_main.h"

static char *tmp(const char *suffix) {
    static char path[64];
    snprintf(path, sizeof path, "/tmp/check_af_%d%s", (int)getpid(), suffix);
    return path;
}

START_TEST(test_wav_roundtrip) {
    float x[1000];
    for (int i = 0; i < 1000; i++) x[i] = (float)((i * 37) % 2001 - 1000) / 1024.f;
    x[3] = 1.5f;    /* clipped */
    x[4] = -2.f;
    ms_error e = {0};
    char *p = tmp(".wav");
    ck_assert_int_eq(af_write_wav16(p, x, 1000, 24000, &e), MS_OK);
    float *y;
    size_t n;
    ck_assert_msg(af_read_mono(p, 24000, &y, &n, &e) == MS_OK, "%s", e.msg);
    ck_assert_uint_eq(n, 1000);
    for (int i = 0; i < 1000; i++) {
        float want = x[i] > 1.f ? 1.f : x[i] < -1.f ? -1.f : x[i];
        ck_assert_msg(fabsf(y[i] - want) <= 1.5f / 32768.f, "sample %d: %g vs %g", i, y[i], want);
    }
    free(y);
    unlink(p);
}
END_TEST

START_TEST(test_resample) {
    /* a 440 Hz tone at 48 kHz -> 24 kHz: half the samples, same tone */
    size_t n = 48000;
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = 0.5f * sinf(2.f * (float)M_PI * 440.f * (float)i / 48000.f);
    ms_error e = {0};
    char *p = tmp("48.wav");
    ck_assert_int_eq(af_write_wav16(p, x, n, 48000, &e), MS_OK);
    float *y;
    size_t m;
    ck_assert_msg(af_read_mono(p, 24000, &y, &m, &e) == MS_OK, "%s", e.msg);
    ck_assert_uint_eq(m, 24000);
    double err = 0;
    for (size_t i = 2000; i < 22000; i++) {
        double want = 0.5 * sin(2 * M_PI * 440.0 * (double)i / 24000.0);
        if (fabs(y[i] - want) > err) err = fabs(y[i] - want);
    }
    ck_assert_msg(err < 2e-3, "resampled tone off by %g", err);
    free(x);
    free(y);
    unlink(p);
}
END_TEST

START_TEST(test_f32_and_refusals) {
    float x[3] = {1.f, -0.5f, 0.25f};
    ms_error e = {0};
    char *p = tmp(".f32");
    ck_assert_int_eq(af_write_f32(p, x, 3, &e), MS_OK);
    FILE *f = fopen(p, "rb");
    unsigned char b[13];
    ck_assert_uint_eq(fread(b, 1, 13, f), 12);
    fclose(f);
    ck_assert(b[0] == 0 && b[1] == 0 && b[2] == 0x80 && b[3] == 0x3f);   /* 1.0f little-endian */
    float *y;
    size_t n;
    ck_assert_int_eq(af_read_mono(p, 24000, &y, &n, &e), MS_ERR_FORMAT);  /* raw: not a file type */
    ck_assert_int_eq(af_read_mono("/nonexistent.wav", 24000, &y, &n, &e), MS_ERR_FORMAT);
    ck_assert_int_ne(af_write_wav16("/nonexistent/dir/x.wav", x, 3, 24000, &e), MS_OK);
    ck_assert_int_ne(af_write_f32("/nonexistent/dir/x.f32", x, 3, &e), MS_OK);
    unlink(p);
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("audio_file");
    TCase *tc = tcase_new("audio_file");
    tcase_add_test(tc, test_wav_roundtrip);
    tcase_add_test(tc, test_resample);
    tcase_add_test(tc, test_f32_and_refusals);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN
