/* check_proto_msg.c - message classification/building and UTF-8 checks. */
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "msg.h"
#include "text.h"

START_TEST(test_parse_kinds) {
    proto_msg m;
    ck_assert_int_eq(proto_msg_parse(NULL, 0, 100, &m), PROTO_CLASS_EMPTY);
    ck_assert_int_eq(m.kind, -1);
    ck_assert_ptr_null(m.payload);
    for (int k = 0; k < 256; k++) {
        uint8_t b[4] = {(uint8_t)k, 'a', 'b', 'c'};
        int c = proto_msg_parse(b, sizeof b, 0, &m);
        ck_assert_int_eq(m.kind, k);
        if (k <= 6) {
            ck_assert_int_eq(c, PROTO_CLASS_OK);
            ck_assert_ptr_eq(m.payload, b + 1);
            ck_assert_uint_eq(m.payload_len, 3);
            ck_assert_str_ne(proto_msg_kind_name(k), "unknown");
        } else {
            ck_assert_int_eq(c, PROTO_CLASS_UNKNOWN);
            ck_assert_ptr_null(m.payload);
            ck_assert_str_eq(proto_msg_kind_name(k), "unknown");
        }
        ck_assert_int_eq(proto_msg_in_action(k), k == 1 ? PROTO_IN_AUDIO : PROTO_IN_IGNORE);
    }
    ck_assert_str_eq(proto_msg_kind_name(PROTO_MSG_PING), "ping");
    ck_assert_str_eq(proto_msg_kind_name(-3), "unknown");
    ck_assert_int_eq(proto_msg_in_action(-1), PROTO_IN_IGNORE);
    /* kind byte alone: empty payload, still ok */
    uint8_t one = PROTO_MSG_PING;
    ck_assert_int_eq(proto_msg_parse(&one, 1, 1, &m), PROTO_CLASS_OK);
    ck_assert_uint_eq(m.payload_len, 0);
}
END_TEST

START_TEST(test_parse_oversize) {
    uint8_t b[101];
    memset(b, 0, sizeof b);
    b[0] = PROTO_MSG_AUDIO;
    proto_msg m;
    ck_assert_int_eq(proto_msg_parse(b, 100, 100, &m), PROTO_CLASS_OK);
    ck_assert_int_eq(proto_msg_parse(b, 101, 100, &m), PROTO_CLASS_OVERSIZE);
    ck_assert_int_eq(m.kind, PROTO_MSG_AUDIO);
    ck_assert_ptr_null(m.payload);
    b[0] = 0x77; /* oversize wins over unknown: the size is the abuse */
    ck_assert_int_eq(proto_msg_parse(b, 101, 100, &m), PROTO_CLASS_OVERSIZE);
    ck_assert_int_eq(proto_msg_parse(b, 101, 0, &m), PROTO_CLASS_UNKNOWN);
    ck_assert_str_eq(proto_msg_class_name(PROTO_CLASS_OVERSIZE), "oversize");
    ck_assert_str_eq(proto_msg_class_name(99), "invalid");
}
END_TEST

START_TEST(test_handshake) {
    uint8_t buf[32];
    memset(buf, 0xEE, sizeof buf);
    size_t n = 99;
    ms_error e = {0};
    ck_assert_int_eq(proto_msg_build_handshake(buf, sizeof buf, 16, 0x04030201u, &n, &e), MS_OK);
    ck_assert_uint_eq(n, PROTO_HANDSHAKE_BYTES);
    const uint8_t want[9] = {0, 0, 0, 0, 0, 1, 2, 3, 4};
    ck_assert_mem_eq(buf + 16, want, 9);
    for (int i = 0; i < 16; i++) ck_assert_uint_eq(buf[i], 0xEE); /* headroom untouched */
    ck_assert_uint_eq(buf[25], 0xEE);
    /* exactly enough room, then one byte short */
    ck_assert_int_eq(proto_msg_build_handshake(buf, 16 + 9, 16, 7, &n, &e), MS_OK);
    ck_assert_int_eq(proto_msg_build_handshake(buf, 16 + 8, 16, 7, &n, &e), MS_ERR_LIMIT);
    ck_assert_uint_eq(n, 0);
    ck_assert_int_eq(proto_msg_build_handshake(buf, 8, 16, 7, &n, &e), MS_ERR_LIMIT);
}
END_TEST

START_TEST(test_build_roundtrip) {
    uint8_t buf[64];
    size_t n;
    ms_error e = {0};
    const char *t = " h\xC3\xA9llo"; /* " héllo" */
    ck_assert_int_eq(proto_msg_build_text(buf, sizeof buf, 4, t, strlen(t), &n, &e), MS_OK);
    proto_msg m;
    ck_assert_int_eq(proto_msg_parse(buf + 4, n, 64, &m), PROTO_CLASS_OK);
    ck_assert_int_eq(m.kind, PROTO_MSG_TEXT);
    ck_assert_uint_eq(m.payload_len, strlen(t));
    ck_assert_mem_eq(m.payload, t, strlen(t));
    /* invalid UTF-8 refused */
    ck_assert_int_eq(proto_msg_build_text(buf, sizeof buf, 0, "a\xFF", 2, &n, &e), MS_ERR_FORMAT);
    ck_assert_int_eq(proto_msg_build_metadata(buf, sizeof buf, 0, "{\"a\":1}", 7, &n, &e), MS_OK);
    ck_assert_uint_eq(buf[0], PROTO_MSG_METADATA);
    ck_assert_uint_eq(n, 8);
    /* unknown kind refused; payload in place (memmove) works */
    ck_assert_int_eq(proto_msg_build(buf, sizeof buf, 0, 7, "x", 1, &n, &e), MS_ERR_ARG);
    memcpy(buf + 9, "pages", 5);
    ck_assert_int_eq(proto_msg_build(buf, sizeof buf, 8, PROTO_MSG_AUDIO, buf + 9, 5, &n, &e), MS_OK);
    ck_assert_uint_eq(buf[8], 1);
    ck_assert_mem_eq(buf + 9, "pages", 5);
    ck_assert_int_eq(proto_msg_build(buf, sizeof buf, 0, PROTO_MSG_PING, NULL, 0, &n, &e), MS_OK);
    ck_assert_uint_eq(n, 1);
}
END_TEST

START_TEST(test_error_msg) {
    uint8_t buf[16];
    size_t n;
    ms_error e = {0};
    ck_assert_int_eq(proto_msg_build_error(buf, sizeof buf, 2, "busy", &n, &e), MS_OK);
    ck_assert_uint_eq(n, 5);
    ck_assert_mem_eq(buf + 2, "\x05" "busy", 5);
    /* truncation never cuts a character: 12 bytes of room, "€" is 3 bytes */
    ck_assert_int_eq(proto_msg_build_error(buf, 15, 2, "0123456789\xE2\x82\xAC", &n, &e), MS_OK);
    ck_assert_uint_eq(n, 11);
    ck_assert(text_utf8_valid(buf + 3, n - 1));
    /* invalid bytes replaced */
    ck_assert_int_eq(proto_msg_build_error(buf, sizeof buf, 0, "a\xC0\xAF" "b", &n, &e), MS_OK);
    ck_assert_mem_eq(buf + 1, "a??b", 4);
    ck_assert_int_eq(proto_msg_build_error(buf, 2, 2, "x", &n, &e), MS_ERR_LIMIT);
    /* long text capped at PROTO_ERROR_TEXT_MAX */
    char big[3000];
    memset(big, 'z', sizeof big - 1);
    big[sizeof big - 1] = 0;
    uint8_t out[4000];
    ck_assert_int_eq(proto_msg_build_error(out, sizeof out, 0, big, &n, &e), MS_OK);
    ck_assert_uint_eq(n, PROTO_ERROR_TEXT_MAX + 1);
}
END_TEST

/* The close reason: at most 123 bytes, valid UTF-8, cut at a character
 * boundary, and a prefix of the kind-5 text built from the same message,
 * with 2-, 3- and 4-byte characters across the boundary at every offset. */
START_TEST(test_close_reason) {
    char r[PROTO_CLOSE_REASON_MAX + 1];
    ck_assert_uint_eq(proto_msg_close_reason(r, "busy"), 4);
    ck_assert_str_eq(r, "busy");
    ck_assert_uint_eq(proto_msg_close_reason(r, ""), 0);
    static const char *const chars[] = {"\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80"};
    for (size_t c = 0; c < 3; c++) {
        size_t cl = strlen(chars[c]);
        for (size_t pad = 0; pad < 8; pad++) {
            /* pad ASCII bytes, then the character repeated past the limit */
            char text[400];
            size_t n = 0;
            for (size_t i = 0; i < pad; i++) text[n++] = 'a';
            while (n + cl < sizeof text - 1) {
                memcpy(text + n, chars[c], cl);
                n += cl;
            }
            text[n] = 0;
            size_t rl = proto_msg_close_reason(r, text);
            ck_assert_uint_le(rl, PROTO_CLOSE_REASON_MAX);
            ck_assert_uint_gt(rl, PROTO_CLOSE_REASON_MAX - cl); /* nothing more would fit */
            ck_assert_uint_eq(strlen(r), rl);
            ck_assert_msg(text_utf8_valid(r, rl), "char %zu pad %zu: cut inside a character", c, pad);
            ck_assert_uint_eq((rl - pad) % cl, 0);
            ck_assert_mem_eq(r, text, rl);
            uint8_t msg[PROTO_ERROR_TEXT_MAX + 8];
            size_t ml = 0;
            ck_assert_int_eq(proto_msg_build_error(msg, sizeof msg, 0, text, &ml, NULL), MS_OK);
            ck_assert_uint_ge(ml - 1, rl);
            ck_assert_mem_eq(msg + 1, r, rl);
        }
    }
    /* exactly 123 ASCII bytes pass whole; 124 lose the last */
    char t[130];
    memset(t, 'x', sizeof t);
    t[123] = 0;
    ck_assert_uint_eq(proto_msg_close_reason(r, t), 123);
    t[123] = 'y';
    t[124] = 0;
    ck_assert_uint_eq(proto_msg_close_reason(r, t), 123);
    ck_assert_int_eq(r[122], 'x');
    /* invalid bytes become '?' as in the kind-5 text */
    ck_assert_uint_eq(proto_msg_close_reason(r, "a\xC0\xAF" "b\xE2\x82"), 6); /* a truncated sequence: each byte */
    ck_assert_str_eq(r, "a??b??");
}
END_TEST

START_TEST(test_utf8) {
    static const struct { const char *s; int ok; } cases[] = {
        {"", 1}, {"plain", 1}, {"\xC3\xA9", 1}, {"\xE2\x96\x81", 1}, {"\xF0\x9F\x98\x80", 1},
        {"\xF4\x8F\xBF\xBF", 1}, {"\xEF\xBF\xBF", 1},
        {"\xC0\x80", 0},         /* overlong NUL */
        {"\xC1\xBF", 0},         /* overlong */
        {"\xE0\x80\xAF", 0},     /* overlong */
        {"\xED\xA0\x80", 0},     /* surrogate */
        {"\xF4\x90\x80\x80", 0}, /* > U+10FFFF */
        {"\xF5\x80\x80\x80", 0}, {"\x80", 0}, {"\xC3", 0}, {"\xE2\x96", 0}, {"a\xFF", 0},
        {"\xC3\x28", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        ck_assert_msg(text_utf8_valid(cases[i].s, strlen(cases[i].s)) == cases[i].ok, "case %zu", i);
}
END_TEST

START_TEST(test_random) {
    srand(1234);
    uint8_t b[64];
    proto_msg m;
    for (int it = 0; it < 20000; it++) {
        size_t len = (size_t)(rand() % 64);
        for (size_t i = 0; i < len; i++) b[i] = (uint8_t)rand();
        int c = proto_msg_parse(b, len, 48, &m);
        ck_assert(c >= 0 && c < PROTO_CLASS__COUNT);
        if (c == PROTO_CLASS_OK) ck_assert_uint_eq(m.payload_len + 1, len);
        (void)text_utf8_valid(b, len);
    }
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("proto_msg");
    TCase *tc = tcase_new("msg");
    tcase_add_test(tc, test_parse_kinds);
    tcase_add_test(tc, test_parse_oversize);
    tcase_add_test(tc, test_handshake);
    tcase_add_test(tc, test_build_roundtrip);
    tcase_add_test(tc, test_error_msg);
    tcase_add_test(tc, test_close_reason);
    tcase_add_test(tc, test_utf8);
    tcase_add_test(tc, test_random);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN
