/* check_query.c - /api/chat query parameters: values, ranges, hostile strings. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "query.h"

static int P(proto_query *q, const char *s, ms_error *e) { return proto_query_parse(q, s, strlen(s), e); }

START_TEST(test_kyutai_web_client) {
    /* the query string the Kyutai web client sends by default */
    const char *s = "?text_temperature=0.7&text_topk=25&audio_temperature=0.8&audio_topk=250"
                    "&pad_mult=0&repetition_penalty_context=64&repetition_penalty=1.0"
                    "&text_seed=123456&audio_seed=654321&email=&worker_addr=";
    proto_query q;
    ms_error e = {0};
    ck_assert_msg(P(&q, s, &e) == MS_OK, "%s", e.msg);
    ck_assert(q.text_temperature == 0.7);
    ck_assert(q.audio_temperature == 0.8);
    ck_assert_int_eq(q.text_topk, 25);
    ck_assert_int_eq(q.audio_topk, 250);
    ck_assert_int_eq(proto_query_text_seed(&q), 123456);
    ck_assert_int_eq(proto_query_audio_seed(&q), 654321);
    ck_assert_uint_eq(q.ignored, 2);
    ck_assert(proto_query_has(&q, PROTO_Q_PAD_MULT));
    ck_assert(!proto_query_has(&q, PROTO_Q_MAX_STEPS));
    proto_query_limits lim = {.text_card = 32000, .audio_card = 2048, .max_steps_cap = 3000};
    ck_assert_int_eq(proto_query_finish(&q, &lim, &e), MS_OK);
}
END_TEST

START_TEST(test_personaplex_client) {
    const char *s = "voice_prompt=NATF2.pt&text_prompt=You+enjoy+having+a+good+conversation.%20"
                    "Caf%C3%A9%21&seed=-1";
    proto_query q;
    ms_error e = {0};
    ck_assert_msg(P(&q, s, &e) == MS_OK, "%s", e.msg);
    ck_assert_str_eq(q.voice_prompt, "NATF2.pt");
    ck_assert_str_eq(q.text_prompt, "You enjoy having a good conversation. Caf\xC3\xA9!");
    ck_assert_uint_eq(q.text_prompt_len, strlen(q.text_prompt));
    ck_assert_int_eq(proto_query_text_seed(&q), PROTO_SEED_RANDOM);
    ck_assert_int_eq(proto_query_audio_seed(&q), PROTO_SEED_RANDOM);
    /* seed maps to both unless a specific one is given */
    ck_assert_int_eq(P(&q, "seed=42&audio_seed=7", &e), MS_OK);
    ck_assert_int_eq(proto_query_text_seed(&q), 42);
    ck_assert_int_eq(proto_query_audio_seed(&q), 7);
    ck_assert_int_eq(P(&q, "", &e), MS_OK);
    ck_assert_int_eq(proto_query_text_seed(&q), PROTO_SEED_RANDOM);
    ck_assert_uint_eq(q.present, 0);
    ck_assert_int_eq(P(&q, "persona=teacher_1&text_prompt=", &e), MS_OK);
    ck_assert_str_eq(q.persona, "teacher_1");
    ck_assert_uint_eq(q.text_prompt_len, 0);
}
END_TEST

START_TEST(test_ranges) {
    static const struct { const char *q; int rc; const char *needle; } cases[] = {
        {"text_temperature=0", MS_OK, ""},
        {"text_temperature=5", MS_OK, ""},
        {"text_temperature=5.0001", MS_ERR_RANGE, "[0, 5]"},
        {"audio_temperature=-0.1", MS_ERR_RANGE, "audio_temperature"},
        {"text_temperature=nan", MS_ERR_FORMAT, "not a number"},
        {"text_temperature=inf", MS_ERR_FORMAT, "not a number"},
        {"text_temperature=1e999", MS_ERR_FORMAT, "not a number"},
        {"text_temperature=0x1p1", MS_ERR_FORMAT, "not a number"},
        {"text_temperature=", MS_ERR_FORMAT, "not a number"},
        {"text_temperature", MS_ERR_FORMAT, "not a number"},
        {"text_temperature=1.5e0", MS_OK, ""},
        {"text_topk=0", MS_ERR_RANGE, "text_topk"},
        {"text_topk=1", MS_OK, ""},
        {"audio_topk=2.5", MS_ERR_FORMAT, "integer"},
        {"audio_topk=99999999999999999999", MS_ERR_FORMAT, "integer"},
        {"text_seed=-2", MS_ERR_RANGE, "-1 (random)"},
        {"text_seed=9223372036854775807", MS_OK, ""},
        {"text_seed=9223372036854775808", MS_ERR_FORMAT, "integer"},
        {"seed=1.0", MS_ERR_FORMAT, "integer"},
        {"seed=+5", MS_ERR_FORMAT, "integer"},
        {"seed=-", MS_ERR_FORMAT, "integer"},
        {"max_steps=0", MS_ERR_RANGE, "max_steps"},
        {"max_steps=4500", MS_OK, ""},
        {"pad_mult=0.0", MS_OK, ""},
        {"pad_mult=0.5", MS_ERR_UNSUPPORTED, "not implemented"},
        {"repetition_penalty=1", MS_OK, ""},
        {"repetition_penalty=1.1", MS_ERR_UNSUPPORTED, "neutral value 1.0"},
        {"repetition_penalty_context=64", MS_OK, ""},
        {"repetition_penalty_context=32", MS_ERR_UNSUPPORTED, "not implemented"},
        {"voice_prompt=../etc/passwd", MS_ERR_FORMAT, "plain file name"},
        {"voice_prompt=..", MS_ERR_FORMAT, "'..'"},
        {"voice_prompt=a..b.wav", MS_ERR_FORMAT, "'..'"},
        {"voice_prompt=.hidden", MS_ERR_FORMAT, "'.'"},
        {"voice_prompt=a%2Fb", MS_ERR_FORMAT, "plain file name"},
        {"voice_prompt=a%5Cb", MS_ERR_FORMAT, "plain file name"},
        {"voice_prompt=c%3Ax", MS_ERR_FORMAT, "plain file name"},
        {"voice_prompt=a%00b", MS_ERR_FORMAT, "plain file name"},
        {"voice_prompt=", MS_ERR_FORMAT, "empty"},
        {"voice_prompt=%FF.wav", MS_ERR_FORMAT, "UTF-8"},
        {"voice_prompt=voix%C3%A9.wav", MS_OK, ""},
        {"persona=a/b", MS_ERR_FORMAT, "persona"},
        {"persona=.x", MS_ERR_FORMAT, "persona"},
        {"text_prompt=a%0Ab", MS_OK, ""},
        {"text_prompt=a%01b", MS_ERR_FORMAT, "control"},
        {"text_prompt=%C3", MS_ERR_FORMAT, "UTF-8"},
        {"text_prompt=%zz", MS_ERR_FORMAT, "escape"},
        {"text_prompt=abc%4", MS_ERR_FORMAT, "escape"},
        {"text_topk=5&text_topk=6", MS_ERR_FORMAT, "twice"},
        {"foo=1&foo=2&bar", MS_OK, ""},
        {"a%zz=1", MS_OK, ""}, /* undecodable unknown key: ignored */
        {"text%5Ftopk=7", MS_OK, ""}, /* keys are decoded too */
        {"&&&text_topk=7&&", MS_OK, ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        proto_query q;
        ms_error e = {0};
        int rc = P(&q, cases[i].q, &e);
        ck_assert_msg(rc == cases[i].rc, "'%s': want %d got %d (%s)", cases[i].q, cases[i].rc, rc, e.msg);
        ck_assert_msg(strstr(e.msg, cases[i].needle), "'%s': message '%s' lacks '%s'", cases[i].q, e.msg,
                      cases[i].needle);
    }
    proto_query q;
    ck_assert_int_eq(P(&q, "text%5Ftopk=7", NULL), MS_OK);
    ck_assert_int_eq(q.text_topk, 7);
    /* top-k up to PROTO_TOPK_MAX (the largest card), one more refused */
    char qs[64];
    snprintf(qs, sizeof qs, "audio_topk=%d", PROTO_TOPK_MAX);
    ck_assert_int_eq(P(&q, qs, NULL), MS_OK);
    ck_assert_int_eq(q.audio_topk, PROTO_TOPK_MAX);
    snprintf(qs, sizeof qs, "audio_topk=%d", PROTO_TOPK_MAX + 1);
    ck_assert_int_eq(P(&q, qs, NULL), MS_ERR_RANGE);
}
END_TEST

START_TEST(test_finish) {
    proto_query q;
    ms_error e = {0};
    proto_query_limits lim = {.text_card = 32000, .audio_card = 2048, .max_steps_cap = 3000};
    ck_assert_int_eq(P(&q, "audio_topk=2049", &e), MS_OK);
    ck_assert_int_eq(proto_query_finish(&q, &lim, &e), MS_ERR_RANGE);
    ck_assert_ptr_nonnull(strstr(e.msg, "[1, 2048]"));
    ck_assert_int_eq(P(&q, "text_topk=32001", &e), MS_OK);
    ck_assert_int_eq(proto_query_finish(&q, &lim, &e), MS_ERR_RANGE);
    ck_assert_int_eq(P(&q, "max_steps=4500", &e), MS_OK);
    ck_assert_int_eq(proto_query_finish(&q, &lim, &e), MS_OK);
    ck_assert_int_eq(q.max_steps, 3000);
    ck_assert(q.max_steps_capped);
    ck_assert_int_eq(P(&q, "max_steps=100", &e), MS_OK);
    ck_assert_int_eq(proto_query_finish(&q, &lim, &e), MS_OK);
    ck_assert_int_eq(q.max_steps, 100);
    ck_assert(!q.max_steps_capped);
    /* no configured limit (limits.max_steps = 0): the query's value alone */
    lim.max_steps_cap = 0;
    ck_assert_int_eq(P(&q, "max_steps=4500", &e), MS_OK);
    ck_assert_int_eq(proto_query_finish(&q, &lim, &e), MS_OK);
    ck_assert_int_eq(q.max_steps, 4500);
    ck_assert(!q.max_steps_capped);
}
END_TEST

START_TEST(test_limits) {
    proto_query q;
    ms_error e = {0};
    /* text_prompt at the limit and one byte over */
    size_t n = PROTO_TEXT_PROMPT_MAX;
    char *s = malloc(n + 64);
    strcpy(s, "text_prompt=");
    memset(s + 12, 'a', n);
    s[12 + n] = 0;
    ck_assert_int_eq(P(&q, s, &e), MS_OK);
    ck_assert_uint_eq(q.text_prompt_len, n);
    strcpy(s + 12 + n, "b");
    ck_assert_int_eq(P(&q, s, &e), MS_ERR_LIMIT);
    free(s);
    /* too many parameters */
    char many[2000] = "";
    for (int i = 0; i < 70; i++) strcat(many, "x=1&");
    ck_assert_int_eq(P(&q, many, &e), MS_ERR_LIMIT);
    /* whole string too long */
    char *big = malloc(PROTO_QUERY_MAX_BYTES + 2);
    memset(big, 'x', PROTO_QUERY_MAX_BYTES + 1);
    big[PROTO_QUERY_MAX_BYTES + 1] = 0;
    ck_assert_int_eq(P(&q, big, &e), MS_ERR_LIMIT);
    free(big);
    /* a long voice name */
    char v[300] = "voice_prompt=";
    memset(v + 13, 'v', 200);
    v[213] = 0;
    ck_assert_int_eq(P(&q, v, &e), MS_ERR_LIMIT);
    /* hostile values never reach error messages unfiltered */
    ck_assert_int_eq(P(&q, "text_topk=%1B%5B2J", &e), MS_ERR_FORMAT);
    for (const char *c = e.msg; *c; c++) ck_assert(*c >= 0x20 && *c < 0x7f);
    ck_assert_str_eq(proto_query_param_name(PROTO_Q_SEED), "seed");
    ck_assert_str_eq(proto_query_param_name(99), "?");
}
END_TEST

START_TEST(test_set_decoded) {
    proto_query q;
    ms_error e = {0};
    proto_query_init(&q);
    ck_assert_int_eq(proto_query_set(&q, "text_prompt", 11, "100% sure+", 10, &e), MS_OK);
    ck_assert_str_eq(q.text_prompt, "100% sure+"); /* no second decoding */
    ck_assert_int_eq(proto_query_set(&q, "zzz", 3, "1", 1, &e), MS_OK);
    ck_assert_uint_eq(q.ignored, 1);
    ck_assert_int_eq(proto_query_set(&q, "text_prompt", 11, "x", 1, &e), MS_ERR_FORMAT);
}
END_TEST

START_TEST(test_random) {
    srand(99);
    char s[512];
    const char alpha[] = "=&%+?./_-0123456789abcdefxyzAF\xC3\xA9\x01 ";
    static const char *keys[] = {"text_temperature=", "text_topk=", "seed=", "voice_prompt=", "text_prompt="};
    for (int it = 0; it < 20000; it++) {
        size_t n = (size_t)(rand() % 200), o = 0;
        if (rand() % 2) {
            const char *k = keys[rand() % 5];
            memcpy(s, k, strlen(k));
            o = strlen(k);
        }
        for (; o < n; o++) s[o] = alpha[rand() % (sizeof alpha - 1)];
        proto_query q;
        ms_error e = {0};
        int rc = proto_query_parse(&q, s, o, &e);
        ck_assert(rc == MS_OK || e.msg[0]);
        if (rc == MS_OK && proto_query_has(&q, PROTO_Q_TEXT_TEMPERATURE))
            ck_assert(q.text_temperature >= 0 && q.text_temperature <= 5);
    }
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("query");
    TCase *tc = tcase_new("query");
    tcase_add_test(tc, test_kyutai_web_client);
    tcase_add_test(tc, test_personaplex_client);
    tcase_add_test(tc, test_ranges);
    tcase_add_test(tc, test_finish);
    tcase_add_test(tc, test_limits);
    tcase_add_test(tc, test_set_decoded);
    tcase_add_test(tc, test_random);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN
