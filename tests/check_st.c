/* check_st.c - safetensors reader and writer, good and hostile files. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_main.h"
#include "st.h"

/* Build a file image from a header string and n data bytes (0x11 filler). */
static uint8_t *image(const char *hdr, size_t ndata, size_t *len) {
    size_t hl = strlen(hdr);
    *len = 8 + hl + ndata;
    uint8_t *b = malloc(*len);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(b + 8, hdr, hl);
    memset(b + 8 + hl, 0x11, ndata);
    return b;
}

static int open_img(const char *hdr, size_t ndata, ms_error *e) {
    size_t len;
    uint8_t *b = image(hdr, ndata, &len);
    st_file *f = st_open_mem(b, len, "t.safetensors", e);
    int ok = f != NULL;
    st_close(f);
    free(b);
    return ok;
}

START_TEST(test_roundtrip) {
    char path[] = "/tmp/check_st_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    float a[6] = {1, 2, 3, 4, 5, -6.5f};
    uint16_t b[3] = {st_f32_to_bf16(1.5f), st_f32_to_bf16(-2.0f), st_f32_to_bf16(0.1f)};
    int64_t sa[2] = {2, 3}, sb[1] = {3};
    st_writer *w = st_writer_create();
    ck_assert_int_eq(st_writer_add(w, "layer.a", ST_F32, 2, sa, a), MS_OK);
    ck_assert_int_eq(st_writer_add(w, "b\"q", ST_BF16, 1, sb, b), MS_OK);
    ck_assert_int_eq(st_writer_add(w, "empty", ST_I64, 1, (int64_t[]){0}, NULL), MS_OK);
    ms_error e = {0};
    ck_assert_int_eq(st_writer_save(w, path, &e), MS_OK);
    st_writer_free(w);

    st_file *f = st_open(path, &e);
    ck_assert_msg(f != NULL, "%s", e.msg);
    ck_assert_uint_eq(st_count(f), 3);
    const st_tensor *t = st_get(f, "layer.a", 2, sa, 1, ST_F32, &e);
    ck_assert_ptr_nonnull(t);
    float out[6];
    ck_assert_int_eq(st_to_f32(t, 0, 6, out), MS_OK);
    ck_assert_mem_eq(out, a, sizeof a);
    t = st_find(f, "b\"q");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->dtype, ST_BF16);
    ck_assert_int_eq(st_to_f32(t, 1, 2, out), MS_OK);
    ck_assert(out[0] == -2.0f);
    ck_assert(out[1] == st_bf16_to_f32(st_f32_to_bf16(0.1f)));
    ck_assert_int_ne(st_to_f32(t, 2, 2, out), MS_OK);
    /* wrong shape and missing tensors name the file and the tensor */
    ck_assert_ptr_null(st_get(f, "layer.a", 2, (int64_t[]){3, 2}, 1, ST_F32, &e));
    ck_assert(strstr(e.msg, "layer.a") && strstr(e.msg, path));
    ck_assert_ptr_null(st_get(f, "nope", 1, NULL, 1, ST_F32, &e));
    ck_assert_int_eq(e.code, MS_ERR_NOTFOUND);
    ck_assert_ptr_null(st_get(f, "empty", 1, NULL, 1, ST_F32, &e));
    st_close(f);
    unlink(path);
}
END_TEST

START_TEST(test_hostile) {
    static const struct { const char *hdr; size_t ndata; int code; } cases[] = {
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, MS_OK},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, MS_ERR_RANGE},   /* truncated */
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,12]}}", 12, MS_ERR_FORMAT}, /* size mismatch */
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, MS_ERR_FORMAT},  /* end < begin */
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, MS_ERR_FORMAT}, /* overlap */
        {"{\"a\":{\"dtype\":\"F8\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2, MS_ERR_UNSUPPORTED},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, MS_ERR_FORMAT},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,8]}}", 8, MS_ERR_RANGE},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, MS_ERR_FORMAT},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, MS_ERR_FORMAT},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", 8, MS_ERR_FORMAT},
        {"{\"a\":{\"dtype\":\"F32\",\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, MS_ERR_FORMAT},
        {"{\"a\":[1]}", 0, MS_ERR_FORMAT},
        {"[1,2]", 0, MS_ERR_FORMAT},
        {"{\"a\":", 0, MS_ERR_FORMAT},                                                          /* bad JSON */
        {"{\"__metadata__\":{\"k\":\"v\"}}", 0, MS_OK},
        {"{\"__metadata__\":{\"k\":1}}", 0, MS_ERR_FORMAT},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        ms_error e = {0};
        int ok = open_img(cases[i].hdr, cases[i].ndata, &e);
        if (cases[i].code == MS_OK) ck_assert_msg(ok, "case %zu refused: %s", i, e.msg);
        else {
            ck_assert_msg(!ok, "case %zu accepted", i);
            ck_assert_msg(e.code == cases[i].code, "case %zu: %s (%s)", i, ms_err_name(e.code), e.msg);
            ck_assert(strstr(e.msg, "t.safetensors") != NULL);
        }
    }
}
END_TEST

/* More header shapes: each refused for its own reason, or accepted where the
 * format allows it (empty tensors sharing an offset, 8 dimensions, BOOL). */
START_TEST(test_hostile_more) {
    static const struct { const char *hdr; size_t ndata; int code; } cases[] = {
        {"{\"a\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, MS_ERR_UNSUPPORTED}, /* case */
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, MS_ERR_FORMAT},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[18446744073709551615],\"data_offsets\":[0,4]}}", 4, MS_ERR_FORMAT},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4.0]}}", 4, MS_ERR_FORMAT},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,4]}}", 4, MS_ERR_FORMAT},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, MS_ERR_LIMIT},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, MS_OK},
        {"{\"a\\u0000b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, MS_ERR_FORMAT},
        {"{\"__metadata__\":{},\"__metadata__\":{}}", 0, MS_ERR_FORMAT},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":\"1\",\"data_offsets\":[0,4]}}", 4, MS_ERR_FORMAT},
        {"{\"a\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, MS_ERR_FORMAT},
        {"", 0, MS_ERR_FORMAT},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}", 0, MS_OK},
        {"{\"a\":{\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[0,3]}}", 3, MS_OK},
        {"  {}  ", 0, MS_OK},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        ms_error e = {0};
        int ok = open_img(cases[i].hdr, cases[i].ndata, &e);
        if (cases[i].code == MS_OK) ck_assert_msg(ok, "case %zu refused: %s", i, e.msg);
        else {
            ck_assert_msg(!ok, "case %zu accepted", i);
            ck_assert_msg(e.code == cases[i].code, "case %zu: %s (%s)", i, ms_err_name(e.code), e.msg);
            ck_assert(strstr(e.msg, "t.safetensors") != NULL);
        }
    }
    /* a name longer than ST_MAX_NAME */
    char *hdr = malloc(ST_MAX_NAME + 128);
    memset(hdr, 'n', ST_MAX_NAME + 128);
    hdr[0] = '{';
    hdr[1] = '"';
    snprintf(hdr + 2 + ST_MAX_NAME + 1, 100, "\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}");
    ms_error e = {0};
    ck_assert(!open_img(hdr, 1, &e));
    ck_assert_msg(e.code == MS_ERR_LIMIT, "%s", e.msg);
    free(hdr);
}
END_TEST

START_TEST(test_huge_header) {
    uint8_t b[16] = {0};
    uint64_t hl = ST_MAX_HEADER + 1;
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(hl >> (8 * i));
    ms_error e = {0};
    ck_assert_ptr_null(st_open_mem(b, sizeof b, "h", &e));
    ck_assert_int_eq(e.code, MS_ERR_LIMIT);
    hl = 1000; /* larger than the file */
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(hl >> (8 * i));
    ck_assert_ptr_null(st_open_mem(b, sizeof b, "h", &e));
    ck_assert_int_eq(e.code, MS_ERR_FORMAT);
    ck_assert_ptr_null(st_open_mem(b, 5, "h", &e));
    ck_assert_ptr_null(st_open("/nonexistent/x.safetensors", &e));
    ck_assert_int_eq(e.code, MS_ERR_IO);
}
END_TEST

START_TEST(test_half_conversions) {
    /* f16: exact values, subnormals, rounding, inf/nan */
    ck_assert(st_f16_to_f32(0x3c00) == 1.0f);
    ck_assert(st_f16_to_f32(0xc000) == -2.0f);
    ck_assert(st_f16_to_f32(0x0001) == 5.9604644775390625e-08f);
    ck_assert(st_f16_to_f32(0x7bff) == 65504.0f);
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = st_f16_to_f32((uint16_t)h);
        if (f != f) continue;
        ck_assert_msg(st_f32_to_f16(f) == h, "f16 %04x", h);
    }
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = st_bf16_to_f32((uint16_t)h);
        if (f != f) continue;
        ck_assert_msg(st_f32_to_bf16(f) == h, "bf16 %04x", h);
    }
    ck_assert_uint_eq(st_f32_to_bf16(1.00390625f), 0x3f80); /* tie -> even */
    ck_assert_uint_eq(st_f32_to_bf16(1.01171875f), 0x3f82); /* tie -> even (up) */
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("st");
    TCase *tc = tcase_new("core");
    tcase_add_test(tc, test_roundtrip);
    tcase_add_test(tc, test_hostile);
    tcase_add_test(tc, test_hostile_more);
    tcase_add_test(tc, test_huge_header);
    tcase_add_test(tc, test_half_conversions);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN
