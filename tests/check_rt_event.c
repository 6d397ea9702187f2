/* check_rt_event.c - /v1/realtime's pure pieces: the client events
 * (proto/rt_event.c), base64, G.711, the JSON writer, and the audio
 * formats through libsoxr (daemon/session/rt_audio.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "b64.h"
#include "check_main.h"
#include "g711.h"
#include "jw.h"
#include "rt_audio.h"
#include "rt_event.h"

static int parse(const char *s, rt_event *ev, rt_err *err) { return rt_event_parse(s, strlen(s), ev, err); }

START_TEST(test_g711) {
    /* the reference values of ITU-T G.711 (G.191's g711.c) */
    ck_assert_uint_eq(proto_ulaw_encode(0), 0xff);
    ck_assert_uint_eq(proto_ulaw_encode(32767), 0x80);
    ck_assert_uint_eq(proto_ulaw_encode(-32768), 0x00);
    ck_assert_int_eq(proto_ulaw_decode(0x80), 32124);
    ck_assert_int_eq(proto_ulaw_decode(0x00), -32124);
    ck_assert_uint_eq(proto_alaw_encode(0), 0xd5);
    ck_assert_int_eq(proto_alaw_decode(0xd5), 8);
    ck_assert_int_eq(proto_alaw_decode(0x55), -8);
    /* every code decodes to a value that encodes back to it (mu-law's
     * negative zero 0x7f excepted: it decodes to 0, which is 0xff) */
    for (int c = 0; c < 256; c++) {
        ck_assert_msg(proto_alaw_encode(proto_alaw_decode((uint8_t)c)) == c, "A-law code %02x", c);
        if (c != 0x7f) ck_assert_msg(proto_ulaw_encode(proto_ulaw_decode((uint8_t)c)) == c, "mu-law code %02x", c);
    }
    /* the error stays within half a step of the segment (1/16 of the value + 1 step) */
    for (int x = -32768; x < 32768; x += 13) {
        int ea = abs(proto_alaw_decode(proto_alaw_encode((int16_t)x)) - x);
        int eu = abs(proto_ulaw_decode(proto_ulaw_encode((int16_t)x)) - x);
        ck_assert_msg(ea <= abs(x) / 32 + 16 && eu <= abs(x) / 32 + 132, "x=%d alaw err %d ulaw err %d", x, ea, eu);
    }
}
END_TEST

START_TEST(test_b64) {
    /* RFC 4648 section 10 */
    static const char *const plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
    static const char *const enc[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
    for (int i = 0; i < 7; i++) {
        char out[16];
        uint8_t back[16];
        ck_assert_uint_eq(proto_b64_encode((const uint8_t *)plain[i], strlen(plain[i]), out), strlen(enc[i]));
        ck_assert_str_eq(out, enc[i]);
        long n = proto_b64_decode(enc[i], strlen(enc[i]), back, sizeof back, NULL);
        ck_assert_int_eq(n, (long)strlen(plain[i]));
        ck_assert(memcmp(back, plain[i], (size_t)n) == 0);
    }
    static const char *const bad[] = {"Zg=", "Zg", "Z===", "Zg=a", "Zm9v\n", "Zm 9", "Zm9v====", "=Zm9", "Zm-_"};
    uint8_t b[16];
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        ck_assert_msg(proto_b64_decode(bad[i], strlen(bad[i]), b, sizeof b, NULL) < 0, "accepted \"%s\"", bad[i]);
    size_t at = 0;
    ck_assert_int_lt(proto_b64_decode("Zm9v!m9v", 8, b, sizeof b, &at), 0);
    ck_assert_uint_eq(at, 4);
    ck_assert_int_lt(proto_b64_decode("Zm9vYmFy", 8, b, 5, NULL), 0); /* no room */
}
END_TEST

START_TEST(test_jw) {
    jw w;
    jw_init(&w, 1 << 10);
    jw_str(&w, "a\"b\\c\n\x01\xc3\xa9\xff", 10);
    size_t n = 0;
    char *s = jw_take(&w, &n);
    ck_assert_ptr_nonnull(s);
    ck_assert_str_eq(s, "\"a\\\"b\\\\c\\n\\u0001\xc3\xa9\xef\xbf\xbd\"");
    free(s);
    jw_init(&w, 16);
    JW_LIT(&w, "0123456789");
    jw_str(&w, "0123456789", 10); /* over the cap: the writer fails, nothing is half sent */
    ck_assert_ptr_null(jw_take(&w, &n));
}
END_TEST

START_TEST(test_session_update_ga) {
    rt_event ev;
    rt_err err;
    const char *s =
        "{\"type\":\"session.update\",\"event_id\":\"e1\",\"session\":{\"type\":\"realtime\",\"model\":\"gpt-realtime\","
        "\"instructions\":\"Be brief.\",\"output_modalities\":[\"audio\"],\"audio\":{\"input\":{\"format\":{\"type\":"
        "\"audio/pcmu\"},\"turn_detection\":{\"type\":\"server_vad\",\"threshold\":0.6,\"silence_duration_ms\":400}},"
        "\"output\":{\"format\":{\"type\":\"audio/pcm\",\"rate\":24000},\"voice\":\"marin\"}}}}";
    ck_assert_int_eq(parse(s, &ev, &err), MS_OK);
    ck_assert_int_eq(ev.type, RT_EV_SESSION_UPDATE);
    ck_assert_str_eq(ev.event_id, "e1");
    const rt_session_cfg *c = &ev.cfg;
    ck_assert(c->set & RT_SET_IN_FMT && c->set & RT_SET_OUT_FMT && c->set & RT_SET_VOICE && c->set & RT_SET_MODEL);
    ck_assert_int_eq(c->in_fmt, RT_FMT_ULAW);
    ck_assert_int_eq(c->out_fmt, RT_FMT_PCM16);
    ck_assert_str_eq(c->voice, "marin");
    ck_assert_str_eq(c->model, "gpt-realtime");
    ck_assert_uint_eq(c->instructions_len, 9);
    ck_assert_int_eq(c->td.type, RT_TD_SERVER_VAD);
    ck_assert(fabs(c->td.threshold - 0.6) < 1e-9);
    ck_assert_int_eq(c->td.silence_duration_ms, 400);
    ck_assert_int_eq(c->td.prefix_padding_ms, -1);
    ck_assert_int_eq(c->text_only, 0);
    rt_event_free(&ev);
}
END_TEST

START_TEST(test_session_update_beta) {
    rt_event ev;
    rt_err err;
    const char *s = "{\"type\":\"session.update\",\"session\":{\"modalities\":[\"text\"],\"input_audio_format\":"
                    "\"g711_alaw\",\"output_audio_format\":\"g711_ulaw\",\"voice\":\"NATF0.pt\",\"turn_detection\":null,"
                    "\"temperature\":0.7}}";
    ck_assert_int_eq(parse(s, &ev, &err), MS_OK);
    ck_assert_int_eq(ev.cfg.in_fmt, RT_FMT_ALAW);
    ck_assert_int_eq(ev.cfg.out_fmt, RT_FMT_ULAW);
    ck_assert_int_eq(ev.cfg.text_only, 1);
    ck_assert(ev.cfg.set & RT_SET_TURN_DETECTION);
    ck_assert_int_eq(ev.cfg.td.type, RT_TD_NONE);
    ck_assert(ev.cfg.set & RT_SET_TEMPERATURE);
    rt_event_free(&ev);
}
END_TEST

START_TEST(test_refusals) {
    static const struct { const char *text, *code, *param; } cases[] = {
        {"", "invalid_json", ""},
        {"{", "invalid_json", ""},
        {"null", "invalid_json", ""},
        {"{\"type\":7}", "missing_required_parameter", "type"},
        {"{\"type\":\"nope\"}", "invalid_event", "type"},
        {"{\"type\":\"session.update\"}", "missing_required_parameter", "session"},
        {"{\"type\":\"session.update\",\"session\":{\"input_audio_format\":\"opus\"}}", "invalid_value",
         "session.input_audio_format"},
        {"{\"type\":\"session.update\",\"session\":{\"audio\":{\"output\":{\"format\":{\"type\":\"audio/pcmu\",\"rate\":"
         "24000}}}}}", "invalid_value", "session.audio.output.format"},
        {"{\"type\":\"session.update\",\"session\":{\"turn_detection\":{\"type\":\"magic\"}}}", "invalid_value",
         "session.turn_detection.type"},
        {"{\"type\":\"session.update\",\"session\":{\"output_modalities\":[]}}", "invalid_value",
         "session.output_modalities"},
        {"{\"type\":\"session.update\",\"session\":{\"voice\":3}}", "invalid_type", "session.voice"},
        {"{\"type\":\"input_audio_buffer.append\"}", "missing_required_parameter", "audio"},
        {"{\"type\":\"conversation.item.truncate\"}", "missing_required_parameter", "item_id"},
        {"{\"type\":\"conversation.item.truncate\",\"item_id\":\"i\",\"audio_end_ms\":-1}", "invalid_value",
         "audio_end_ms"},
        {"{\"type\":\"response.cancel\",\"event_id\":5}", "invalid_type", "event_id"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        rt_event ev;
        rt_err err;
        ck_assert_msg(parse(cases[i].text, &ev, &err) != MS_OK, "accepted %s", cases[i].text);
        ck_assert_msg(strcmp(err.code, cases[i].code) == 0 && strcmp(err.param, cases[i].param) == 0,
                      "%s: code %s param %s (%s)", cases[i].text, err.code, err.param, err.message);
        ck_assert_str_eq(err.type, "invalid_request_error");
        ck_assert(err.message[0]);
        rt_event_free(&ev);
    }
    /* bounded: too many values, too deep, an id too long */
    size_t n = 3 * RT_EVENT_MAX_NODES;
    char *big = malloc(n + 3);
    big[0] = '[';
    for (size_t i = 1; i + 1 < n; i += 2) big[i] = '0', big[i + 1] = ',';
    big[n - 1] = '0';
    big[n] = ']';
    big[n + 1] = '\0';
    rt_event ev;
    rt_err err;
    ck_assert_int_eq(parse(big, &ev, &err), MS_ERR_LIMIT);
    rt_event_free(&ev);
    free(big);
    char id[RT_ID_MAX + 64];
    snprintf(id, sizeof id, "{\"type\":\"input_audio_buffer.clear\",\"event_id\":\"%0*d\"}", RT_ID_MAX + 1, 0);
    ck_assert_int_ne(parse(id, &ev, &err), MS_OK);
    ck_assert_str_eq(err.code, "string_above_max_length");
    rt_event_free(&ev);
}
END_TEST

START_TEST(test_items) {
    rt_event ev;
    rt_err err;
    ck_assert_int_eq(parse("{\"type\":\"conversation.item.create\",\"item\":{\"type\":\"message\",\"role\":\"system\","
                           "\"content\":[{\"type\":\"input_text\",\"text\":\"Be a pirate.\"}]}}", &ev, &err), MS_OK);
    ck_assert_int_eq(ev.item_kind, RT_ITEM_SYSTEM_TEXT);
    ck_assert_uint_eq(ev.text_len, 12);
    rt_event_free(&ev);
    ck_assert_int_eq(parse("{\"type\":\"conversation.item.create\",\"item\":{\"id\":\"x\",\"type\":\"message\",\"role\":"
                           "\"user\",\"content\":[{\"type\":\"input_audio\",\"audio\":\"AAAA\"}]}}", &ev, &err), MS_OK);
    ck_assert_int_eq(ev.item_kind, RT_ITEM_USER_AUDIO);
    ck_assert_str_eq(ev.id, "x");
    ck_assert_uint_eq(ev.audio_len, 4);
    rt_event_free(&ev);
    ck_assert_int_eq(parse("{\"type\":\"conversation.item.create\",\"item\":{\"type\":\"function_call\"}}", &ev, &err),
                     MS_OK);
    ck_assert_int_eq(ev.item_kind, RT_ITEM_OTHER);
    ck_assert_str_eq(ev.item_type, "function_call");
    rt_event_free(&ev);
}
END_TEST

typedef struct { float *buf; size_t n, cap; } sink_t;

static int to_buf(void *user, const float *pcm, size_t n) {
    sink_t *k = user;
    for (size_t i = 0; i < n && k->n < k->cap; i++) k->buf[k->n++] = pcm[i];
    return MS_OK;
}

START_TEST(test_audio_formats) {
    /* 1 s of a 440 Hz tone at 8 kHz in mu-law -> 24 kHz (three times the
     * samples, less the resampler's delay), the tone's level kept */
    enum { IN = 8000 };
    uint8_t u[IN];
    for (int i = 0; i < IN; i++) u[i] = proto_ulaw_encode((int16_t)lrint(16000 * sin(2 * M_PI * 440 * i / 8000.0)));
    rt_in in = {0};
    ms_error e = {0};
    ck_assert_int_eq(rt_in_init(&in, RT_FMT_ULAW, &e), MS_OK);
    float out[3 * IN + 256];
    sink_t k = {out, 0, sizeof out / sizeof *out};
    for (int off = 0; off < IN; off += 333) /* odd chunks */
        ck_assert_int_eq(rt_in_feed(&in, u + off, (size_t)(IN - off < 333 ? IN - off : 333), to_buf, &k), MS_OK);
    ck_assert_msg(k.n > 3 * IN - 600 && k.n <= 3 * IN, "%zu samples", k.n);
    float rms = rt_rms(out + 4000, 12000);
    ck_assert_msg(fabsf(rms - 16000 / 32768.0f / sqrtf(2)) < 0.02f, "rms %f", rms);
    rt_in_close(&in);
    /* pcm16 with a sample split across appends */
    ck_assert_int_eq(rt_in_init(&in, RT_FMT_PCM16, &e), MS_OK);
    uint8_t p[5] = {0x00, 0x40, 0x00, 0xc0, 0x00};
    k.n = 0;
    rt_in_feed(&in, p, 3, to_buf, &k);
    rt_in_feed(&in, p + 3, 1, to_buf, &k);
    ck_assert_uint_eq(k.n, 2);
    ck_assert(out[0] == 0.5f && out[1] == -0.5f);
    rt_in_close(&in);
    /* 24 kHz frames -> A-law at 8 kHz: 640 bytes a frame on average; the
     * resampler hands its output on in blocks (up to two frames' worth at
     * once) and holds back less than its delay */
    rt_out o = {0};
    ck_assert_int_eq(rt_out_init(&o, RT_FMT_ALAW, &e), MS_OK);
    float f[1920];
    size_t total = 0;
    uint8_t b[4096];
    for (int fr = 0; fr < 25; fr++) {
        for (int i = 0; i < 1920; i++) f[i] = 0.3f * (float)sin(2 * M_PI * 300 * (fr * 1920 + i) / 24000.0);
        size_t got = rt_out_frame(&o, f, 1920, b, sizeof b);
        ck_assert_msg(got <= 2 * 640 + 64, "frame %d: %zu bytes", fr, got);
        total += got;
    }
    ck_assert_msg(total > 25 * 640 - 1000 && total <= 25 * 640, "total %zu", total);
    rt_out_close(&o);
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("rt_event");
    TCase *tc = tcase_new("rt_event");
    tcase_add_test(tc, test_g711);
    tcase_add_test(tc, test_b64);
    tcase_add_test(tc, test_jw);
    tcase_add_test(tc, test_session_update_ga);
    tcase_add_test(tc, test_session_update_beta);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_items);
    tcase_add_test(tc, test_audio_formats);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN
