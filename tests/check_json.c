/* check_json.c - the engine's bounded JSON reader. */
#include <string.h>

#include "check_main.h"
#include "json.h"

static js_value *parse(const char *s, ms_error *e) { return js_parse(s, strlen(s), e); }

START_TEST(test_values) {
    ms_error e = {0};
    js_value *v = parse(" {\"a\": [1, -2.5e1, true, null, \"x\\u00e9\\ud83d\\ude00\"], \"b\": {}} ", &e);
    ck_assert_msg(v != NULL, "%s", e.msg);
    const js_value *a = js_get(v, "a");
    ck_assert_int_eq(a->type, JS_ARRAY);
    ck_assert_uint_eq(a->len, 5);
    ck_assert(js_at(a, 0)->is_int && js_at(a, 0)->i == 1);
    ck_assert(!js_at(a, 1)->is_int && js_at(a, 1)->num == -25.0);
    ck_assert(js_at(a, 2)->boolean);
    ck_assert_int_eq(js_at(a, 3)->type, JS_NULL);
    ck_assert_str_eq(js_at(a, 4)->str, "x\xc3\xa9\xf0\x9f\x98\x80");
    ck_assert_ptr_null(js_at(a, 5));
    ck_assert_int_eq(js_get(v, "b")->type, JS_OBJECT);
    ck_assert_ptr_null(js_get(v, "c"));
    js_free(v);
}
END_TEST

START_TEST(test_big_int) {
    ms_error e = {0};
    js_value *v = parse("[9007199254740993, 99999999999999999999]", &e);
    ck_assert_ptr_nonnull(v);
    ck_assert(js_at(v, 0)->is_int && js_at(v, 0)->i == 9007199254740993LL);
    ck_assert(!js_at(v, 1)->is_int); /* does not fit int64 */
    js_free(v);
}
END_TEST

START_TEST(test_rejects) {
    static const char *bad[] = {
        "", "{", "[1,]", "{\"a\" 1}", "{\"a\":1,}", "01", "1.", "-", ".5", "1e", "\"abc",
        "\"\\x\"", "\"\\u12\"", "\"\\ud800\"", "\"\\udc00x\"", "\"\\u0000\"", "tru", "nul",
        "[1] 2", "\"a\nb\"", "{1:2}", "1e999", "[\"\\",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ms_error e = {0};
        js_value *v = parse(bad[i], &e);
        ck_assert_msg(v == NULL, "accepted: %s", bad[i]);
        ck_assert_int_ne(e.code, MS_OK);
        ck_assert(strstr(e.msg, "json:") != NULL);
    }
}
END_TEST

START_TEST(test_depth_limit) {
    char buf[2 * (JS_MAX_DEPTH + 2) + 1];
    int d = JS_MAX_DEPTH + 1;
    memset(buf, '[', (size_t)d);
    memset(buf + d, ']', (size_t)d);
    buf[2 * d] = 0;
    ms_error e = {0};
    js_value *v = parse(buf, &e);
    ck_assert_ptr_null(v);
    ck_assert_int_eq(e.code, MS_ERR_LIMIT);
    d = JS_MAX_DEPTH;
    memset(buf, '[', (size_t)d);
    memset(buf + d, ']', (size_t)d);
    buf[2 * d] = 0;
    v = parse(buf, &e);
    ck_assert_ptr_nonnull(v);
    js_free(v);
}
END_TEST

START_TEST(test_duplicates) {
    ms_error e = {0};
    js_value *v = parse("{\"a\":{\"x\":1,\"x\":2}}", &e);
    ck_assert_ptr_nonnull(v);
    const char *k = NULL;
    ck_assert(js_has_duplicate_keys(v, &k));
    ck_assert_str_eq(k, "x");
    ck_assert_int_eq(js_get(js_get(v, "a"), "x")->i, 1);
    js_free(v);
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("json");
    TCase *tc = tcase_new("core");
    tcase_add_test(tc, test_values);
    tcase_add_test(tc, test_big_int);
    tcase_add_test(tc, test_rejects);
    tcase_add_test(tc, test_depth_limit);
    tcase_add_test(tc, test_duplicates);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN
