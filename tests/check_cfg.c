/* check_cfg.c - the configuration table and its walker: types, bounds,
 * unknown and duplicate keys, files, dump -> load, reload. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "app.h"
#include "audio_opus.h"
#include "lm.h"
#include "cfg_int.h"
#include "check_main.h"
#include "log.h"
#include "query.h"

static int load(cfg *c, const char *json, ms_error *e) {
    return cfg_load_buf(c, json, strlen(json), "t.json", NULL, e);
}

/* Expect json to be refused with code and a message holding each of the
 * NULL-terminated fragments. */
static void refused(const char *json, int code, const char *frag1, const char *frag2) {
    cfg c;
    ms_error e = {0};
    int rc = load(&c, json, &e);
    ck_assert_msg(rc != MS_OK, "accepted: %s", json);
    ck_assert_msg(rc == code, "%s: got %s (%s)", json, ms_err_name(rc), e.msg);
    ck_assert_msg(strncmp(e.msg, "t.json: ", 8) == 0, "no file name: %s", e.msg);
    ck_assert_msg(!frag1 || strstr(e.msg, frag1), "%s: message '%s' lacks '%s'", json, e.msg, frag1);
    ck_assert_msg(!frag2 || strstr(e.msg, frag2), "%s: message '%s' lacks '%s'", json, e.msg, frag2);
    cfg_close(&c); /* harmless after a failure */
}

START_TEST(test_table_coherent) {
    /* paths unique with one dot, defaults inside bounds and valid, sections
     * contiguous (the dump and the docs group by section) */
    for (size_t i = 0; i < cfg_noptions; i++) {
        const cfg_option *o = &cfg_options[i];
        const char *dot = strchr(o->path, '.');
        ck_assert_msg(dot && !strchr(dot + 1, '.'), "%s", o->path);
        ck_assert_msg(o->doc && o->doc[0], "%s has no doc", o->path);
        for (size_t j = 0; j < i; j++) {
            ck_assert_str_ne(o->path, cfg_options[j].path);
            size_t sl = (size_t)(dot - o->path);
            if (strncmp(cfg_options[j].path, o->path, sl + 1) == 0)
                for (size_t k = j + 1; k < i; k++)
                    ck_assert_msg(strncmp(cfg_options[k].path, o->path, sl + 1) == 0, "section of %s split",
                                  o->path);
        }
        char why[256];
        switch (o->type) {
        case CFG_INT: ck_assert(o->imin <= o->idef && o->idef <= o->imax); break;
        case CFG_DOUBLE: ck_assert(o->dmin <= o->ddef && o->ddef <= o->dmax); break;
        case CFG_ENUM: ck_assert(o->names && o->idef >= 0 && o->names[o->idef]); break;
        case CFG_STRING:
            ck_assert(o->sdef && strlen(o->sdef) <= o->max_len);
            if (o->sdef[0] && o->check) ck_assert_msg(o->check(o->sdef, why, sizeof why) == 0, "%s", why);
            break;
        case CFG_STRLIST:
            for (int k = 0; o->ldef && o->ldef[k]; k++)
                if (o->check) ck_assert_msg(o->check(o->ldef[k], why, sizeof why) == 0, "%s", why);
            break;
        case CFG_BOOL: break;
        case CFG_CUSTOM:
            ck_assert(o->custom && o->custom->init && o->custom->load && o->custom->to_json && o->custom->equal);
            break;
        }
    }
}
END_TEST

START_TEST(test_defaults) {
    cfg c, d;
    ms_error e = {0};
    cfg_init(&d);
    ck_assert_int_eq(load(&c, "{}", &e), MS_OK);
    ck_assert(cfg_equal(&c, &d));
    ck_assert_int_eq(c.server.listen.n, 1);
    ck_assert_str_eq(c.server.listen.v[0], "127.0.0.1");
    ck_assert_int_eq(c.server.proxy_protocol_from.n, 0);
    ck_assert_int_eq(c.server.port, 8998);
    ck_assert_int_eq(c.server.allowed_origins.n, 2);
    ck_assert_str_eq(c.server.allowed_origins.v[0], "same-origin");
    ck_assert_str_eq(c.server.allowed_origins.v[1], "localhost");
    ck_assert_str_eq(c.auth.tokens_file, "");
    ck_assert(c.server.metrics);
    ck_assert_str_eq(c.model.lm_dir, "");
    ck_assert_int_eq(c.engine.backend, CFG_BACKEND_AUTO);
    ck_assert(c.sampling.text_temperature == 0.7 && c.sampling.audio_temperature == 0.8);
    ck_assert_int_eq(c.sampling.text_topk, 25);
    ck_assert_int_eq(c.sampling.audio_topk, 250);
    ck_assert(c.limits.input_buffer_s >= 3.0); /* opusenc writes 1 s pages */
    ck_assert(c.limits.output_queue_s == 2.0);
    ck_assert_int_eq(c.limits.max_header_bytes, 16384);
    ck_assert_int_eq(c.limits.max_steps, 0);
    ck_assert_int_eq(c.limits.close_timeout_s, 5);
    ck_assert_int_eq(c.log.level, MS_LOG_INFO);
    cfg_close(&c);
    cfg_close(&c); /* twice is harmless */
    cfg_close(&d);
}
END_TEST

START_TEST(test_every_type) {
    cfg c;
    ms_error e = {0};
    const char *json =
        "{\"server\": {\"listen\": \"::\", \"port\": 0, \"allowed_origins\": [\"https://a.example:8443\", "
        "\"http://[::1]:80\", \"*\"], \"metrics\": false, \"static_dir\": \"/srv/www\"},\n"
        " \"model\": {\"variant\": \"personaplex\", \"lm_dir\": \"rel/lm\"},\n"
        " \"engine\": {\"backend\": \"cuda\", \"gpu\": 3},\n"
        " \"sampling\": {\"text_temperature\": 0, \"audio_topk\": 1e3},\n"
        " \"limits\": {\"input_buffer_s\": 3.5, \"max_header_bytes\": 65535},\n"
        " \"log\": {\"level\": \"debug\"}}";
    ck_assert_msg(load(&c, json, &e) == MS_OK, "%s", e.msg);
    ck_assert_int_eq(c.server.listen.n, 1); /* a string: a list of one */
    ck_assert_str_eq(c.server.listen.v[0], "::");
    ck_assert_int_eq(c.server.port, 0);
    ck_assert_int_eq(c.server.allowed_origins.n, 3);
    ck_assert_str_eq(c.server.allowed_origins.v[1], "http://[::1]:80");
    ck_assert(!c.server.metrics);
    ck_assert_str_eq(c.server.static_dir, "/srv/www");
    ck_assert_str_eq(c.model.lm_dir, "rel/lm"); /* no base dir: unchanged */
    ck_assert_int_eq(c.model.variant, CFG_VARIANT_PERSONAPLEX);
    ck_assert_int_eq(c.engine.backend, CFG_BACKEND_CUDA);
    ck_assert_int_eq(c.engine.gpu, 3);
    ck_assert(c.sampling.text_temperature == 0.0);
    ck_assert_int_eq(c.sampling.audio_topk, 1000);
    ck_assert(c.limits.input_buffer_s == 3.5);
    ck_assert_int_eq(c.limits.max_header_bytes, 65535);
    ck_assert_int_eq(c.log.level, MS_LOG_DEBUG);
    ck_assert_int_eq(c.sessions.max, 8); /* untouched options keep defaults */
    cfg_close(&c);

    /* base_dir applies to relative paths only */
    const char *rel = "{\"model\":{\"lm_dir\":\"lm\",\"mimi\":\"/abs/m\"}}";
    ck_assert_msg(cfg_load_buf(&c, rel, strlen(rel), "x", "/etc/moshid", &e) == MS_OK, "%s", e.msg);
    ck_assert_str_eq(c.model.lm_dir, "/etc/moshid/lm");
    ck_assert_str_eq(c.model.mimi, "/abs/m");
    cfg_close(&c);
}
END_TEST

START_TEST(test_bad_types) {
    refused("{\"server\":{\"port\":\"8998\"}}", MS_ERR_FORMAT, "server.port", "expected an integer, got a string");
    refused("{\"server\":{\"port\":80.5}}", MS_ERR_FORMAT, "server.port", "expected an integer");
    refused("{\"server\":{\"port\":null}}", MS_ERR_FORMAT, "server.port", "got null");
    refused("{\"sampling\":{\"text_temperature\":\"hot\"}}", MS_ERR_FORMAT, "sampling.text_temperature",
            "expected a number");
    refused("{\"server\":{\"metrics\":1}}", MS_ERR_FORMAT, "server.metrics", "expected true or false");
    refused("{\"engine\":{\"backend\":\"gpu\"}}", MS_ERR_ARG, "engine.backend", "not one of auto, cpu, cuda");
    refused("{\"engine\":{\"backend\":2}}", MS_ERR_FORMAT, "engine.backend", "expected a string");
    refused("{\"log\":{\"level\":\"INFO\"}}", MS_ERR_ARG, "log.level", "debug, info, warn, error");
    refused("{\"model\":{\"mimi\":[\"a\"]}}", MS_ERR_FORMAT, "model.mimi", "got an array");
    refused("{\"model\":{\"mimi\":\"a\\nb\"}}", MS_ERR_FORMAT, "model.mimi", "control character");
    refused("{\"server\":{\"allowed_origins\":\"*\"}}", MS_ERR_FORMAT, "server.allowed_origins",
            "expected an array of strings");
    refused("{\"server\":{\"allowed_origins\":[\"*\",7]}}", MS_ERR_FORMAT, "server.allowed_origins[1]",
            "expected a string");
    refused("{\"server\":{\"allowed_origins\":[\"https://a.b/\"]}}", MS_ERR_ARG, "server.allowed_origins[0]",
            "not a valid origin");
    refused("{\"server\":{\"listen\":\"bad host!\"}}", MS_ERR_ARG, "server.listen", "not an IPv4/IPv6");
    refused("{\"server\":{\"listen\":[\"::1\",\"bad host!\"]}}", MS_ERR_ARG, "server.listen[1]", "not an IPv4/IPv6");
    refused("{\"server\":{\"listen\":7}}", MS_ERR_FORMAT, "server.listen", "expected an array of strings or a string");
    refused("{\"server\":{\"proxy_protocol_from\":[\"10.0.0.1/8\"]}}", MS_ERR_ARG, "server.proxy_protocol_from[0]",
            "not an IPv4/IPv6 address or prefix");
    refused("{\"server\":{\"proxy_protocol_from\":\"example.com\"}}", MS_ERR_ARG, "server.proxy_protocol_from",
            "not an IPv4/IPv6 address or prefix");
    refused("{\"server\":5}", MS_ERR_FORMAT, "server: expected an object", NULL);
    refused("[1]", MS_ERR_FORMAT, "expected a JSON object at the top", NULL);
}
END_TEST

START_TEST(test_bounds) {
    refused("{\"server\":{\"port\":65536}}", MS_ERR_RANGE, "server.port", "out of range [0, 65535]");
    refused("{\"server\":{\"port\":-1}}", MS_ERR_RANGE, "server.port", NULL);
    refused("{\"server\":{\"port\":1e300}}", MS_ERR_RANGE, "server.port", NULL);
    refused("{\"sessions\":{\"max\":0}}", MS_ERR_RANGE, "sessions.max", "[1, 1024]");
    refused("{\"sampling\":{\"audio_temperature\":5.01}}", MS_ERR_RANGE, "sampling.audio_temperature", NULL);
    refused("{\"sampling\":{\"audio_temperature\":1e999}}", MS_ERR_RANGE, "sampling.audio_temperature", "finite");
    refused("{\"limits\":{\"input_buffer_s\":0.1}}", MS_ERR_RANGE, "limits.input_buffer_s", NULL);
    refused("{\"limits\":{\"max_header_bytes\":65536}}", MS_ERR_RANGE, "limits.max_header_bytes", NULL);
    refused("{\"limits\":{\"close_timeout_s\":0}}", MS_ERR_RANGE, "limits.close_timeout_s", NULL);
    /* top-k: up to PROTO_TOPK_MAX, as a query's and a persona's */
    refused("{\"sampling\":{\"text_topk\":1048577}}", MS_ERR_RANGE, "sampling.text_topk", "[0, 1048576]");
    refused("{\"personas\":{\"list\":[{\"name\":\"a\",\"audio_topk\":1048577}]}}", MS_ERR_RANGE, "audio_topk",
            NULL);
    {
        cfg t;
        ms_error te = {0};
        ck_assert_int_eq(PROTO_TOPK_MAX, 1048576);
        ck_assert_msg(load(&t, "{\"sampling\":{\"audio_topk\":1048576},\"personas\":{\"list\":[{\"name\":\"a\","
                               "\"text_topk\":1048576}]}}", &te) == MS_OK, "%s", te.msg);
        cfg_close(&t);
    }
    /* the ends of each range are accepted */
    cfg c;
    ms_error e = {0};
    ck_assert_int_eq(load(&c, "{\"server\":{\"port\":65535},\"sessions\":{\"max\":1},"
                              "\"sampling\":{\"audio_temperature\":5}}", &e), MS_OK);
    cfg_close(&c);
    /* strings and lists have length limits */
    char big[5000 + 64];
    int n = snprintf(big, sizeof big, "{\"model\":{\"mimi\":\"");
    memset(big + n, 'a', 4096);
    strcpy(big + n + 4096, "\"}}");
    refused(big, MS_ERR_RANGE, "model.mimi", "longer than the limit of 4095");
    char list[2048];
    n = snprintf(list, sizeof list, "{\"server\":{\"allowed_origins\":[");
    for (int i = 0; i <= CFG_MAX_LIST; i++) n += snprintf(list + n, sizeof list - (size_t)n, "%s\"*\"", i ? "," : "");
    snprintf(list + n, sizeof list - (size_t)n, "]}}");
    refused(list, MS_ERR_LIMIT, "server.allowed_origins", "more than the limit of 64");
}
END_TEST

START_TEST(test_unknown_and_duplicate) {
    refused("{\"server\":{\"prot\":1}}", MS_ERR_NOTFOUND, "server.prot: unknown option", "did you mean server.port?");
    refused("{\"server\":{\"zzzzzzzz\":1}}", MS_ERR_NOTFOUND, "server.zzzzzzzz: unknown option", NULL);
    refused("{\"sever\":{}}", MS_ERR_NOTFOUND, "sever: unknown section", NULL);
    refused("{\"port\":8998}", MS_ERR_NOTFOUND, "port: unknown section", "did you mean server.port?");
    refused("{\"server\":{\"port\":1,\"port\":2}}", MS_ERR_FORMAT, "server.port: duplicate key", NULL);
    refused("{\"log\":{},\"log\":{}}", MS_ERR_FORMAT, "log: duplicate key", NULL);
    /* a hostile key is shown cut and without control bytes */
    refused("{\"server\":{\"a\\u0001bcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz\":1}}",
            MS_ERR_NOTFOUND, "server.a?bcd", "...: unknown option");
}
END_TEST

START_TEST(test_bad_json) {
    refused("{\"server\":{\"port\":8998,}}", MS_ERR_FORMAT, "1:", "malformed JSON");
    refused("{\n  \"server\": {\n    \"port\": 8998\n  \n", MS_ERR_FORMAT, "malformed JSON", NULL);
    refused("", MS_ERR_FORMAT, "malformed JSON", NULL);
    refused("{} {}", MS_ERR_FORMAT, "malformed JSON", NULL);
    refused("{\"model\":{\"mimi\":\"a\\u0000b\"}}", MS_ERR_FORMAT, "1:20", "\\u0000");
    /* the line and column point at the error */
    cfg c;
    ms_error e = {0};
    ck_assert_int_ne(load(&c, "{\n\"log\": {\"level\": info}}", &e), MS_OK);
    ck_assert_msg(strstr(e.msg, "t.json: 2:"), "%s", e.msg);
    /* a NUL byte inside the text */
    ck_assert_int_eq(cfg_load_buf(&c, "{}\0{}", 5, "t.json", NULL, &e), MS_ERR_FORMAT);
    ck_assert(strstr(e.msg, "NUL byte at offset 2"));
    /* size limit */
    char *huge = malloc(CFG_MAX_FILE_BYTES + 2);
    memset(huge, ' ', CFG_MAX_FILE_BYTES + 1);
    huge[0] = '{';
    huge[CFG_MAX_FILE_BYTES] = '}';
    ck_assert_int_eq(cfg_load_buf(&c, huge, CFG_MAX_FILE_BYTES + 1, "t.json", NULL, &e), MS_ERR_LIMIT);
    ck_assert_int_eq(cfg_load_buf(&c, huge, CFG_MAX_FILE_BYTES, "t.json", NULL, &e), MS_ERR_FORMAT);
    huge[CFG_MAX_FILE_BYTES - 1] = '}';
    ck_assert_msg(cfg_load_buf(&c, huge, CFG_MAX_FILE_BYTES, "t.json", NULL, &e) == MS_OK, "%s", e.msg);
    cfg_close(&c);
    free(huge);
    /* deep nesting is refused, not a crash */
    size_t depth = 100000;
    char *deep = malloc(2 * depth + 32);
    size_t n = (size_t)sprintf(deep, "{\"server\":");
    memset(deep + n, '[', depth);
    memset(deep + n + depth, ']', depth);
    strcpy(deep + n + 2 * depth, "}");
    ck_assert_int_eq(load(&c, deep, &e), MS_ERR_FORMAT);
    free(deep);
}
END_TEST

START_TEST(test_cross_check) {
    refused("{\"server\":{\"tls_cert\":\"/c.pem\"}}", MS_ERR_ARG, "server.tls_cert, server.tls_key",
            "server.tls_key is empty");
    refused("{\"server\":{\"tls_key\":\"/k.pem\"}}", MS_ERR_ARG, "server.tls_cert is empty", NULL);
    /* every interface is one socket: listed with others it would collide */
    refused("{\"server\":{\"listen\":[\"*\",\"127.0.0.1\"]}}", MS_ERR_ARG, "server.listen: \"*\"",
            "cannot be listed with other addresses");
    refused("{\"server\":{\"listen\":[\"::1\",\"\"]}}", MS_ERR_ARG, "server.listen: \"\"", NULL);
    cfg c;
    ms_error e = {0};
    ck_assert_int_eq(load(&c, "{\"server\":{\"tls_cert\":\"/c\",\"tls_key\":\"/k\"}}", &e), MS_OK);
    cfg_close(&c);
    ck_assert_msg(load(&c, "{\"server\":{\"listen\":[\"127.0.0.1\",\"::1\",\"localhost\"],"
                           "\"proxy_protocol_from\":[\"127.0.0.2\",\"fd00::/8\"]}}", &e) == MS_OK, "%s", e.msg);
    ck_assert_int_eq(c.server.listen.n, 3);
    ck_assert_int_eq(c.server.proxy_protocol_from.n, 2);
    cfg_close(&c);
}
END_TEST

/* A configuration that sets every option to a value other than its
 * default (strings with quotes and non-ASCII to exercise the dump). */
static const char *all_set =
    "{\"server\":{\"listen\":[\"host-1.example\",\"::1\"],\"proxy_protocol_from\":[\"10.0.0.0/8\"],\"port\":9000,\"tls_cert\":\"/c \\\"q\\\".pem\",\"tls_key\":\"/k\","
    "\"static_dir\":\"/www/\xc3\xa9t\xc3\xa9\",\"allowed_origins\":[],\"metrics\":false,"
    "\"handshake_timeout_ms\":1000,\"max_connections\":40,\"max_connections_per_ip\":3,\"max_pending_handshakes\":9,"
    "\"max_pending_per_ip\":2,\"conn_rate_per_ip\":0.5,\"conn_burst_per_ip\":7},"
    "\"auth\":{\"tokens_file\":\"/tokens\",\"protect_http\":true},"
    "\"model\":{\"lm_dir\":\"/lm\",\"mimi\":\"/m\",\"mimi_config\":\"/mc\",\"tokenizer\":\"/t\",\"variant\":\"kyutai\"},"
    "\"engine\":{\"backend\":\"cpu\",\"gpu\":1,\"threads\":2,\"pipeline\":false,\"weights\":\"int8\",\"kv\":\"int8\"},\"sessions\":{\"max\":3},"
    "\"sampling\":{\"text_temperature\":0.1,\"text_topk\":1,\"audio_temperature\":1.2345678901234567,\"audio_topk\":7},"
    "\"limits\":{\"max_message_bytes\":5000,\"input_buffer_s\":3,\"output_queue_s\":0.5,\"idle_timeout_s\":0,"
    "\"close_timeout_s\":9,\"max_steps\":100,\"max_header_bytes\":8192,\"send_buffer_bytes\":8192},\"audio\":{\"input_pre_skip\":\"rfc\"},"
    "\"realtime\":{\"max_append_bytes\":1000,\"max_events_per_s\":0,\"response_silence_ms\":400,\"max_response_s\":5},"
    "\"personas\":{\"voices_dir\":\"/voices\",\"on_demand\":false,\"cache_bytes\":4096,\"max_prompt_tokens\":9,"
    "\"max_voice_s\":2.5,\"max_concurrent_primes\":2,\"prime_chunk_positions\":4,"
    "\"list\":[{\"name\":\"ada\",\"description\":\"d \\\"q\\\" \xc3\xa9\",\"voice\":\"/v/ada.wav\",\"text\":\"You are\\nAda.\","
    "\"text_temperature\":0.30000000000000004,\"audio_topk\":5},{\"name\":\"b-2.x\",\"text_ids\":[1,2,3],"
    "\"text_topk\":0,\"audio_temperature\":0}]},"
    "\"log\":{\"level\":\"error\"},"
    "\"debug\":{\"record_dir\":\"/rec\",\"step_delay_ms\":5},"
    "\"cuda\":{\"codec\":\"host\",\"gemm_min_rows\":4,\"graphs\":false,\"codec_graphs\":false}}";

START_TEST(test_dump_roundtrip) {
    cfg a, b, d;
    ms_error e = {0};
    ck_assert_msg(load(&a, all_set, &e) == MS_OK, "%s", e.msg);
    cfg_init(&d);
    { /* every option of all_set differs from its default */
        cfg t;
        cfg_reload_report rep;
        cfg_init(&t);
        cfg_apply_reload(&t, &a, &rep);
        ck_assert_int_eq(rep.n_changed + rep.n_refused, (int)cfg_noptions);
        cfg_close(&t);
    }
    char *txt = cfg_dump(&a);
    ck_assert_ptr_nonnull(txt);
    for (size_t i = 0; i < cfg_noptions; i++) /* every leaf name appears */
        ck_assert_msg(strstr(txt, strchr(cfg_options[i].path, '.') + 1), "%s", cfg_options[i].path);
    ck_assert_msg(load(&b, txt, &e) == MS_OK, "%s\n%s", e.msg, txt);
    ck_assert(cfg_equal(&a, &b));
    ck_assert(b.sampling.audio_temperature == 1.2345678901234567);
    ck_assert_str_eq(b.server.tls_cert, "/c \"q\".pem");
    ck_assert_int_eq(b.server.allowed_origins.n, 0);
    ck_assert(!cfg_equal(&a, &d));
    cfg_close(&b);
    free(txt);
    /* doubles come back bit-exact, also where 15 digits are not enough */
    static const double hard[] = {0.30000000000000004, 0.7000000000000001, 4.999999999999999, 1e-300, 0.1};
    for (size_t i = 0; i < sizeof hard / sizeof *hard; i++) {
        a.sampling.audio_temperature = hard[i];
        txt = cfg_dump(&a);
        ck_assert_msg(load(&b, txt, &e) == MS_OK, "%s", e.msg);
        ck_assert_msg(b.sampling.audio_temperature == hard[i], "%.17g came back as %.17g", hard[i],
                      b.sampling.audio_temperature);
        cfg_close(&b);
        free(txt);
    }
    /* defaults dump and reload too */
    txt = cfg_dump(&d);
    ck_assert_int_eq(load(&b, txt, &e), MS_OK);
    ck_assert(cfg_equal(&b, &d));
    free(txt);
    cfg_close(&a);
    cfg_close(&b);
    cfg_close(&d);
}
END_TEST

/* Bytes of the app_opts field an option writes (cfg_option.to). */
static size_t to_size(const cfg_option *o) {
    switch (o->to) {
    case CFG_TO_INT: return sizeof(int);
    case CFG_TO_UNSIGNED: return sizeof(unsigned);
    case CFG_TO_SIZE: return sizeof(size_t);
    case CFG_TO_I64: return sizeof(int64_t);
    case CFG_TO_DOUBLE: return sizeof(double);
    default: return sizeof(void *);
    }
}

/* A string field of o in app_opts x ("(null)" for NULL). */
static const char *app_str(const app_opts *x, size_t at) {
    const char *s = *(const char *const *)((const char *)x + at - 1);
    return s ? s : "(null)";
}

START_TEST(test_to_app) {
    /* every option but log.level (ms_log_level) names its app_opts field;
     * the fields do not overlap; with every option away from its default
     * (all_set) each field differs from the defaults' */
    cfg a, d;
    ms_error e = {0};
    ck_assert_msg(load(&a, all_set, &e) == MS_OK, "%s", e.msg);
    cfg_init(&d);
    app_opts oa, od;
    memset(&oa, 0, sizeof oa);
    memset(&od, 0, sizeof od);
    cfg_to_app(&a, &oa, false);
    cfg_to_app(&d, &od, false);
    unsigned char used[sizeof(app_opts)] = {0};
    for (size_t i = 0; i < cfg_noptions; i++) {
        const cfg_option *o = &cfg_options[i];
        if (o->to == CFG_TO_NONE) {
            ck_assert_msg(!strcmp(o->path, "log.level"), "%s reaches no app_opts field", o->path);
            ck_assert(o->at[0] == 0 && o->at[1] == 0);
            continue;
        }
        ck_assert_msg(o->at[0] > 0, "%s has no field", o->path);
        for (int k = 0; k < 2 && o->at[k]; k++) {
            size_t sz = o->to == CFG_TO_LIST && k == 1 ? sizeof(int) : to_size(o);
            ck_assert_msg(o->at[k] - 1 + sz <= sizeof(app_opts), "%s", o->path);
            for (size_t b = 0; b < sz; b++) {
                ck_assert_msg(!used[o->at[k] - 1 + b], "%s overlaps another option's field", o->path);
                used[o->at[k] - 1 + b] = 1;
            }
            const char *pa = (const char *)&oa + o->at[k] - 1, *pd = (const char *)&od + o->at[k] - 1;
            int differs;
            if (o->to == CFG_TO_STR || o->to == CFG_TO_STR_OR_NULL || o->to == CFG_TO_NAME)
                differs = strcmp(app_str(&oa, o->at[k]), app_str(&od, o->at[k])) != 0;
            else if (o->to == CFG_TO_LIST)
                differs = k == 1 ? *(const int *)pa != *(const int *)pd
                                 : *(const void *const *)pa != *(const void *const *)pd;
            else if (o->to == CFG_TO_PTR)
                differs = *(const void *const *)pa == CFG_CFIELD(&a, o, void) &&
                          *(const void *const *)pd == CFG_CFIELD(&d, o, void);
            else differs = memcmp(pa, pd, sz) != 0;
            ck_assert_msg(differs, "%s: app_opts field %d is the same as with the defaults", o->path, k);
        }
    }
    /* the conversions */
    ck_assert_int_eq(oa.srv.port, 9000);
    ck_assert_int_eq(oa.srv.nlisten, 2);
    ck_assert_str_eq(oa.srv.listen[1], "::1");
    ck_assert_int_eq(oa.norigins, 0);
    ck_assert_int_eq(od.norigins, 2);
    ck_assert_str_eq(od.origins[0], "same-origin");
    ck_assert_uint_eq(oa.srv.max_pending, 9);
    ck_assert(oa.srv.conn_rate_per_ip == 0.5);
    ck_assert_uint_eq(oa.srv.max_message_bytes, 5000);
    ck_assert_ptr_null(od.srv.static_dir);          /* "" = none (main.c finds the page) */
    ck_assert_ptr_null(od.model.tokenizer);
    ck_assert_str_eq(od.srv.tls_cert, "");          /* kept as "" */
    ck_assert_str_eq(od.model.backend, "auto");
    ck_assert_str_eq(oa.model.backend, "cpu");
    ck_assert_int_eq(od.model.variant, LM_VARIANT_AUTO);
    ck_assert_int_eq(oa.model.variant, LM_VARIANT_KYUTAI);
    ck_assert_int_eq(oa.model.weights, LM_WEIGHTS_INT8);
    ck_assert_int_eq(oa.input_pre_skip, AUDIO_PRE_SKIP_RFC);
    ck_assert_int_eq(od.input_pre_skip, AUDIO_PRE_SKIP_IGNORE);
    ck_assert(oa.idle_timeout_s == 0.0 && od.idle_timeout_s == 60.0);
    ck_assert_int_eq(oa.model.slots, 3);
    ck_assert_int_eq(oa.model.prime_slots, 2);
    ck_assert_int_eq(oa.personas.max_concurrent_primes, 2);
    ck_assert_str_eq(oa.model.record_dir, "/rec");
    ck_assert_str_eq(oa.personas.record_dir, "/rec");
    ck_assert_ptr_null(od.personas.record_dir);
    ck_assert_ptr_eq(oa.personas.list, &a.personas.list);
    ck_assert_int_eq(oa.personas.list->n, 2);
    /* cuda.*: lm_gpu_opts, all zero by default */
    ck_assert(od.model.cuda.codec_host == 0 && od.model.cuda.gemm_min_rows == 0 && od.model.cuda.graphs_off == 0 &&
              od.model.cuda.codec_graphs_off == 0);
    ck_assert(oa.model.cuda.codec_host == 1 && oa.model.cuda.gemm_min_rows == 4 && oa.model.cuda.graphs_off == 1 &&
              oa.model.cuda.codec_graphs_off == 1);
    ck_assert_int_eq(oa.realtime.response_silence_ms, 400);

    /* reload_only: the reloadable options alone; the others keep what o had */
    app_opts r = od;
    cfg_to_app(&a, &r, true);
    for (size_t i = 0; i < cfg_noptions; i++) {
        const cfg_option *o = &cfg_options[i];
        if (!o->at[0]) continue;
        size_t sz = to_size(o);
        const app_opts *want = (o->flags & CFG_F_RELOAD) ? &oa : &od;
        ck_assert_msg(memcmp((const char *)&r + o->at[0] - 1, (const char *)want + o->at[0] - 1, sz) == 0,
                      "%s after a reload", o->path);
    }
    ck_assert_int_eq(r.text_topk, 1);         /* reloadable */
    ck_assert_int_eq(r.srv.port, 8998);       /* needs a restart */
    ck_assert_int_eq(r.model.slots, 8);
    cfg_close(&a);
    cfg_close(&d);
}
END_TEST

START_TEST(test_cuda_options) {
    cfg c;
    ms_error e = {0};
    ck_assert_int_eq(load(&c, "{}", &e), MS_OK);
    ck_assert_int_eq(c.cuda.codec, 0);
    ck_assert_int_eq(c.cuda.gemm_min_rows, 0);
    ck_assert(c.cuda.graphs && c.cuda.codec_graphs);
    cfg_close(&c);
    refused("{\"cuda\":{\"codec\":\"cpu\"}}", MS_ERR_ARG, "cuda.codec", NULL);
    refused("{\"cuda\":{\"gemm_min_rows\":-1}}", MS_ERR_RANGE, "cuda.gemm_min_rows", NULL);
    refused("{\"cuda\":{\"gemm_min_rows\":1026}}", MS_ERR_RANGE, "cuda.gemm_min_rows", "[0, 1025]");
    refused("{\"cuda\":{\"graphs\":0}}", MS_ERR_FORMAT, "cuda.graphs", "expected true or false");
    refused("{\"cuda\":{\"graph\":true}}", MS_ERR_NOTFOUND, "cuda.graph", "did you mean cuda.graphs?");
    ck_assert_int_eq(load(&c, "{\"cuda\":{\"codec\":\"host\",\"gemm_min_rows\":1025,\"codec_graphs\":false}}", &e),
                     MS_OK);
    ck_assert_int_eq(c.cuda.codec, 1);
    ck_assert_int_eq(c.cuda.gemm_min_rows, 1025);
    ck_assert(c.cuda.graphs && !c.cuda.codec_graphs);
    /* the dump shows them; --set takes them; a reload refuses them (restart) */
    char *txt = cfg_dump(&c);
    ck_assert_msg(strstr(txt, "\"cuda\":") && strstr(txt, "\"codec\":\t\"host\"") &&
                  strstr(txt, "\"gemm_min_rows\":\t1025") && strstr(txt, "\"codec_graphs\":\tfalse"), "%s", txt);
    free(txt);
    ck_assert_int_eq(cfg_set(&c, "cuda.graphs=false", &e), MS_OK);
    ck_assert(!c.cuda.graphs);
    ck_assert_int_ne(cfg_set(&c, "cuda.codec=gpu", &e), MS_OK);
    cfg next;
    cfg_init(&next);
    cfg_reload_report rep;
    ck_assert_int_eq(cfg_apply_reload(&c, &next, &rep), 4);
    ck_assert_msg(strstr(rep.refused, "cuda.codec: \"host\" -> \"device\" (needs a restart"), "%s", rep.refused);
    ck_assert_int_eq(c.cuda.codec, 1);
    cfg_close(&next);
    cfg_close(&c);
}
END_TEST

/* lm_gpu_opts_get: the environment over the options. */
START_TEST(test_cuda_env) {
    static const char *const vars[] = {"MOSHID_CU_MIMI", "MOSHID_CU_GRAPHS", "MOSHID_CU_MIMI_GRAPHS",
                                       "MOSHID_CU_GEMM_MIN_ROWS", "MOSHID_CU_DEP_CHAIN"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
    lm_gpu_opts in = {.codec_host = 1, .gemm_min_rows = 7, .graphs_off = 1, .codec_graphs_off = 0}, out;
    lm_gpu_opts_get(&in, &out);
    ck_assert(out.codec_host == 1 && out.gemm_min_rows == 7 && out.graphs_off == 1 && out.codec_graphs_off == 0);
    lm_gpu_opts_get(NULL, &out);
    ck_assert(out.codec_host == 0 && out.gemm_min_rows == 0 && out.graphs_off == 0 && out.codec_graphs_off == 0);
    setenv("MOSHID_CU_MIMI", "gpu", 1);
    setenv("MOSHID_CU_GRAPHS", "1", 1);
    setenv("MOSHID_CU_MIMI_GRAPHS", "0", 1);
    setenv("MOSHID_CU_GEMM_MIN_ROWS", "3", 1);
    lm_gpu_opts_get(&in, &out);
    ck_assert(out.codec_host == 0 && out.gemm_min_rows == 3 && out.graphs_off == 0 && out.codec_graphs_off == 1);
    setenv("MOSHID_CU_MIMI", "cpu", 1);
    setenv("MOSHID_CU_GRAPHS", "0", 1);
    lm_gpu_opts_get(NULL, &out);
    ck_assert(out.codec_host == 1 && out.graphs_off == 1);
    /* other values are ignored: the option stands */
    setenv("MOSHID_CU_MIMI", "yes", 1);
    setenv("MOSHID_CU_GRAPHS", "", 1);
    setenv("MOSHID_CU_GEMM_MIN_ROWS", "1026", 1);
    lm_gpu_opts_get(&in, &out);
    ck_assert(out.codec_host == 1 && out.graphs_off == 1 && out.gemm_min_rows == 7);
    setenv("MOSHID_CU_GEMM_MIN_ROWS", "2x", 1);
    lm_gpu_opts_get(&in, &out);
    ck_assert_int_eq(out.gemm_min_rows, 7);
    /* the depformer chain's test knob: 0 turns it off, 1 on, else the option */
    ck_assert_int_eq(out.dep_chain_off, 0);
    setenv("MOSHID_CU_DEP_CHAIN", "0", 1);
    lm_gpu_opts_get(&in, &out);
    ck_assert_int_eq(out.dep_chain_off, 1);
    in.dep_chain_off = 1;
    setenv("MOSHID_CU_DEP_CHAIN", "1", 1);
    lm_gpu_opts_get(&in, &out);
    ck_assert_int_eq(out.dep_chain_off, 0);
    setenv("MOSHID_CU_DEP_CHAIN", "off", 1);
    lm_gpu_opts_get(&in, &out);
    ck_assert_int_eq(out.dep_chain_off, 1);
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
}
END_TEST

START_TEST(test_reload) {
    cfg cur, next;
    ms_error e = {0};
    ck_assert_int_eq(load(&cur, "{}", &e), MS_OK);
    ck_assert_int_eq(load(&next, "{\"log\":{\"level\":\"debug\"},\"server\":{\"port\":9000,"
                                  "\"allowed_origins\":[\"https://x.example\"]},"
                                  "\"sampling\":{\"text_topk\":5},\"sessions\":{\"max\":2}}", &e), MS_OK);
    cfg_reload_report rep;
    ck_assert_int_eq(cfg_apply_reload(&cur, &next, &rep), 2);
    ck_assert_int_eq(rep.n_changed, 3);
    ck_assert_int_eq(rep.n_refused, 2);
    ck_assert_int_eq(cur.log.level, MS_LOG_DEBUG);
    ck_assert_int_eq(cur.sampling.text_topk, 5);
    /* the origin list is reloadable (access.h judges upgrades with it) */
    ck_assert_int_eq(cur.server.allowed_origins.n, 1);
    ck_assert_str_eq(cur.server.allowed_origins.v[0], "https://x.example");
    ck_assert_int_eq(cur.server.port, 8998);  /* needs a restart: kept */
    ck_assert_int_eq(cur.sessions.max, 8);
    ck_assert_msg(strstr(rep.changed, "log.level: \"info\" -> \"debug\"\n"), "%s", rep.changed);
    ck_assert_msg(strstr(rep.changed, "sampling.text_topk: 25 -> 5\n"), "%s", rep.changed);
    ck_assert_msg(strstr(rep.refused, "server.port: 8998 -> 9000 (needs a restart; keeping 8998)"), "%s",
                  rep.refused);
    ck_assert(strstr(rep.refused, "sessions.max"));
    /* applying the same again changes nothing */
    ck_assert_int_eq(cfg_apply_reload(&cur, &next, &rep), 2);
    ck_assert_int_eq(rep.n_changed, 0);
    ck_assert_str_eq(rep.changed, "");
    cfg_close(&next);

    /* from a file; a bad file changes nothing */
    char path[] = "/tmp/check_cfg_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    const char *bad = "{\"log\":{\"level\":\"warn\"},\"sampling\":{\"text_topk\":-1}}";
    ck_assert(write(fd, bad, strlen(bad)) == (ssize_t)strlen(bad));
    close(fd);
    ck_assert_int_eq(cfg_reload_file(&cur, path, &rep, &e), MS_ERR_RANGE);
    ck_assert(strstr(e.msg, path) && strstr(e.msg, "sampling.text_topk"));
    ck_assert_int_eq(cur.log.level, MS_LOG_DEBUG);
    ck_assert_int_eq(rep.n_changed, 0);
    fd = open(path, O_WRONLY | O_TRUNC);
    const char *good = "{\"log\":{\"level\":\"warn\"}}";
    ck_assert(write(fd, good, strlen(good)) == (ssize_t)strlen(good));
    close(fd);
    ck_assert_int_eq(cfg_reload_file(&cur, path, &rep, &e), MS_OK);
    ck_assert_int_eq(cur.log.level, MS_LOG_WARN);
    /* the file omits text_topk and allowed_origins: back to their defaults */
    ck_assert_int_eq(cur.sampling.text_topk, 25);
    ck_assert_int_eq(cur.server.allowed_origins.n, 2);
    ck_assert_int_eq(rep.n_changed, 3);
    ck_assert_int_eq(rep.n_refused, 0);
    unlink(path);
    cfg_close(&cur);
}
END_TEST

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

START_TEST(test_files) {
    char dir[] = "/tmp/check_cfg_dir_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char p[512], q[512];
    snprintf(p, sizeof p, "%s/lm", dir);
    ck_assert_int_eq(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/mimi.safetensors", dir);
    write_file(p, "x");
    snprintf(p, sizeof p, "%s/tok.model", dir);
    write_file(p, "x");
    snprintf(p, sizeof p, "%s/moshid.json", dir);
    write_file(p, "{\"model\":{\"lm_dir\":\"lm\",\"mimi\":\"mimi.safetensors\",\"tokenizer\":\"./tok.model\"}}");
    cfg c;
    ms_error e = {0};
    ck_assert_msg(cfg_load_file(&c, p, &e) == MS_OK, "%s", e.msg);
    snprintf(q, sizeof q, "%s/lm", dir);
    ck_assert_str_eq(c.model.lm_dir, q); /* relative to the file's directory */
    ck_assert_msg(cfg_check_files(&c, &e) == MS_OK, "%s", e.msg);
    cfg_close(&c);

    /* each kind of problem names the option */
    write_file(p, "{\"model\":{\"lm_dir\":\"lm\",\"mimi\":\"nope\",\"tokenizer\":\"tok.model\"}}");
    ck_assert_int_eq(cfg_load_file(&c, p, &e), MS_OK);
    ck_assert_int_eq(cfg_check_files(&c, &e), MS_ERR_IO);
    ck_assert_msg(strstr(e.msg, "model.mimi: ") && strstr(e.msg, "No such file"), "%s", e.msg);
    cfg_close(&c);
    write_file(p, "{\"model\":{\"lm_dir\":\"tok.model\",\"mimi\":\"lm\",\"tokenizer\":\"tok.model\"}}");
    ck_assert_int_eq(cfg_load_file(&c, p, &e), MS_OK);
    ck_assert_int_eq(cfg_check_files(&c, &e), MS_ERR_ARG);
    ck_assert_msg(strstr(e.msg, "model.lm_dir: ") && strstr(e.msg, "not a directory"), "%s", e.msg);
    cfg_close(&c);
    write_file(p, "{\"model\":{\"lm_dir\":\"lm\",\"mimi\":\"lm\",\"tokenizer\":\"tok.model\"}}");
    ck_assert_int_eq(cfg_load_file(&c, p, &e), MS_OK);
    ck_assert_int_eq(cfg_check_files(&c, &e), MS_ERR_ARG);
    ck_assert_msg(strstr(e.msg, "model.mimi: ") && strstr(e.msg, "not a regular file"), "%s", e.msg);
    cfg_close(&c);
    write_file(p, "{}");
    ck_assert_int_eq(cfg_load_file(&c, p, &e), MS_OK);
    ck_assert_int_eq(cfg_check_files(&c, &e), MS_ERR_ARG);
    ck_assert_msg(strstr(e.msg, "model.lm_dir: required"), "%s", e.msg);
    cfg_close(&c);

    /* the file itself: missing, a directory, too big */
    snprintf(q, sizeof q, "%s/missing.json", dir);
    ck_assert_int_eq(cfg_load_file(&c, q, &e), MS_ERR_IO);
    ck_assert(strstr(e.msg, q) && strstr(e.msg, "No such file"));
    ck_assert_int_eq(cfg_load_file(&c, dir, &e), MS_ERR_IO);
    ck_assert(strstr(e.msg, "not a regular file"));
    ck_assert_int_eq(truncate(p, CFG_MAX_FILE_BYTES + 1), 0);
    ck_assert_int_eq(cfg_load_file(&c, p, &e), MS_ERR_LIMIT);
    ck_assert(strstr(e.msg, "larger than the limit"));
    cfg_close(&c);

    unlink(p);
    snprintf(p, sizeof p, "%s/mimi.safetensors", dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/tok.model", dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/lm", dir);
    rmdir(p);
    rmdir(dir);
}
END_TEST

START_TEST(test_set) {
    cfg c;
    ms_error e = {0};
    cfg_init(&c);
    ck_assert_int_eq(cfg_set(&c, "server.port=9000", &e), MS_OK);
    ck_assert_int_eq(c.server.port, 9000);
    ck_assert_int_eq(cfg_set(&c, "log.level=debug", &e), MS_OK); /* enum: plain text */
    ck_assert_int_eq(c.log.level, MS_LOG_DEBUG);
    ck_assert_int_eq(cfg_set(&c, "model.mimi=123", &e), MS_OK);  /* string: text, not a number */
    ck_assert_str_eq(c.model.mimi + strlen(c.model.mimi) - 4, "/123"); /* relative: from the cwd */
    ck_assert_int_eq(c.model.mimi[0], '/');
    ck_assert_int_eq(cfg_set(&c, "model.tokenizer=\"/t \\\"q\\\"\"", &e), MS_OK); /* JSON string */
    ck_assert_str_eq(c.model.tokenizer, "/t \"q\"");
    ck_assert_int_eq(cfg_set(&c, "server.allowed_origins=[\"https://a.example\",\"*\"]", &e), MS_OK);
    ck_assert_int_eq(c.server.allowed_origins.n, 2);
    ck_assert_int_eq(cfg_set(&c, "server.listen=::1", &e), MS_OK); /* a list of one from plain text */
    ck_assert_int_eq(c.server.listen.n, 1);
    ck_assert_str_eq(c.server.listen.v[0], "::1");
    ck_assert_int_eq(cfg_set(&c, "server.listen=[\"127.0.0.1\",\"::1\"]", &e), MS_OK);
    ck_assert_int_eq(c.server.listen.n, 2);
    ck_assert_int_eq(cfg_set(&c, "server.metrics=false", &e), MS_OK);
    ck_assert(!c.server.metrics);
    ck_assert_int_eq(cfg_set(&c, "sampling.text_temperature=0.25", &e), MS_OK);
    ck_assert(c.sampling.text_temperature == 0.25);

    /* refusals leave c as it was */
    cfg before;
    cfg_copy(&before, &c);
    ck_assert_int_eq(cfg_set(&c, "server.port=70000", &e), MS_ERR_RANGE);
    ck_assert_msg(strstr(e.msg, "--set: server.port: 70000 is out of range"), "%s", e.msg);
    ck_assert_int_eq(cfg_set(&c, "server.port=x", &e), MS_ERR_FORMAT);
    ck_assert_int_eq(cfg_set(&c, "server.prot=1", &e), MS_ERR_NOTFOUND);
    ck_assert_msg(strstr(e.msg, "did you mean server.port?"), "%s", e.msg);
    ck_assert_int_eq(cfg_set(&c, "server.port", &e), MS_ERR_ARG);
    ck_assert_int_eq(cfg_set(&c, "engine.backend=gpu", &e), MS_ERR_ARG);
    ck_assert_int_eq(cfg_set(&c, "server.allowed_origins=[1]", &e), MS_ERR_FORMAT);
    ck_assert_int_eq(cfg_set(&c, "model.mimi=\"a\\u0000\"", &e), MS_ERR_FORMAT);
    ck_assert(cfg_equal(&c, &before));
    cfg_close(&before);

    /* the rules between options are checked by cfg_validate, after all sets */
    ck_assert_int_eq(cfg_set(&c, "server.tls_cert=/c.pem", &e), MS_OK);
    ck_assert_int_eq(cfg_validate(&c, &e), MS_ERR_ARG);
    ck_assert_int_eq(cfg_set(&c, "server.tls_key=/k.pem", &e), MS_OK);
    ck_assert_int_eq(cfg_validate(&c, &e), MS_OK);
    cfg_close(&c);
}
END_TEST

START_TEST(test_personas) {
    cfg c;
    ms_error e = {0};
    const char *good = "{\"personas\":{\"list\":[{\"name\":\"ada\",\"voice\":\"voices/ada.flac\",\"text\":\"Hi\","
                       "\"text_topk\":3},{\"name\":\"bob\",\"text_ids\":[4,5],\"description\":\"Bob\"}]}}";
    ck_assert_msg(cfg_load_buf(&c, good, strlen(good), "t.json", "/etc/moshid", &e) == MS_OK, "%s", e.msg);
    ck_assert_int_eq(c.personas.list.n, 2);
    ck_assert_str_eq(c.personas.list.v[0].voice, "/etc/moshid/voices/ada.flac"); /* relative to the file */
    ck_assert_int_eq(c.personas.list.v[0].text_topk, 3);
    ck_assert(c.personas.list.v[0].text_temperature < 0 && c.personas.list.v[0].audio_topk < 0); /* not set */
    ck_assert_int_eq(c.personas.list.v[1].n_text_ids, 2);
    ck_assert_int_eq(c.personas.list.v[1].text_ids[1], 5);
    ck_assert_str_eq(c.personas.list.v[1].voice, "");
    cfg d;
    cfg_copy(&d, &c);
    ck_assert(cfg_equal(&c, &d));
    d.personas.list.v[1].text_ids[0] = 9;
    ck_assert(!cfg_equal(&c, &d));
    cfg_close(&d);
    /* the defaults: no persona, on-demand priming on, a 1 GiB budget */
    cfg_close(&c);
    cfg_init(&c);
    ck_assert_int_eq(c.personas.list.n, 0);
    ck_assert(c.personas.on_demand);
    ck_assert_int_eq(c.personas.cache_bytes, 1LL << 30);
    ck_assert_int_eq(c.personas.max_concurrent_primes, 1);
    cfg_close(&c);

    /* errors name the key path */
    refused("{\"personas\":{\"list\":{}}}", MS_ERR_FORMAT, "personas.list: expected an array of persona objects", NULL);
    refused("{\"personas\":{\"list\":[7]}}", MS_ERR_FORMAT, "personas.list[0]: expected a persona object", NULL);
    refused("{\"personas\":{\"list\":[{\"name\":\"a\",\"voise\":\"x\"}]}}", MS_ERR_NOTFOUND,
            "personas.list[0].voise: unknown key", "did you mean voice?");
    refused("{\"personas\":{\"list\":[{\"name\":\"a\"},{\"name\":\"b\",\"qqqqqqqq\":1}]}}", MS_ERR_NOTFOUND,
            "personas.list[1].qqqqqqqq: unknown key", NULL);
    refused("{\"personas\":{\"list\":[{\"voice\":\"x\"}]}}", MS_ERR_ARG, "personas.list[0]: a persona needs a name", NULL);
    refused("{\"personas\":{\"list\":[{\"name\":\"a\",\"name\":\"b\"}]}}", MS_ERR_FORMAT, "personas.list[0].name: duplicate key",
            NULL);
    refused("{\"personas\":{\"list\":[{\"name\":\"a b\"}]}}", MS_ERR_ARG, "personas.list[0].name", "not a persona name");
    refused("{\"personas\":{\"list\":[{\"name\":\".hidden\"}]}}", MS_ERR_ARG, "personas.list[0].name", NULL);
    refused("{\"personas\":{\"list\":[{\"name\":\"a\"},{\"name\":\"a\"}]}}", MS_ERR_ARG, "personas.list[1].name",
            "already the name of personas.list[0]");
    refused("{\"personas\":{\"list\":[{\"name\":\"a\",\"text\":\"x\",\"text_ids\":[1]}]}}", MS_ERR_ARG,
            "give text or text_ids, not both", NULL);
    refused("{\"personas\":{\"list\":[{\"name\":\"a\",\"text_ids\":[1,-2]}]}}", MS_ERR_RANGE,
            "personas.list[0].text_ids[1]", "out of range");
    refused("{\"personas\":{\"list\":[{\"name\":\"a\",\"text_ids\":[1.5]}]}}", MS_ERR_FORMAT,
            "personas.list[0].text_ids[0]", "expected an integer");
    refused("{\"personas\":{\"list\":[{\"name\":\"a\",\"text_temperature\":6}]}}", MS_ERR_RANGE,
            "personas.list[0].text_temperature", "out of range");
    refused("{\"personas\":{\"list\":[{\"name\":\"a\",\"audio_topk\":\"5\"}]}}", MS_ERR_FORMAT,
            "personas.list[0].audio_topk", "expected an integer");
    refused("{\"personas\":{\"list\":[{\"name\":\"a\",\"description\":\"x\\u0001\"}]}}", MS_ERR_FORMAT,
            "personas.list[0].description", "control character");
    refused("{\"personas\":{\"list\":[{\"name\":\"a\",\"text\":\"\xff\"}]}}", MS_ERR_FORMAT,
            "personas.list[0].text", "invalid UTF-8");
    refused("{\"personas\":{\"voice_dir\":\"x\"}}", MS_ERR_NOTFOUND, "personas.voice_dir: unknown option",
            "did you mean personas.voices_dir?");
    refused("{\"personas\":{\"cache_bytes\":-1}}", MS_ERR_RANGE, "personas.cache_bytes", NULL);
    refused("{\"personas\":{\"max_concurrent_primes\":0}}", MS_ERR_RANGE, "personas.max_concurrent_primes", NULL);
    /* a role text may hold new lines and tabs */
    const char *nl = "{\"personas\":{\"list\":[{\"name\":\"a\",\"text\":\"line 1\\n\\tline 2\"}]}}";
    ck_assert_msg(load(&c, nl, &e) == MS_OK, "%s", e.msg);
    cfg_close(&c);
    /* limits: more than CFG_MAX_PERSONAS personas */
    char *many = malloc(32 * (CFG_MAX_PERSONAS + 2) + 64);
    int n = sprintf(many, "{\"personas\":{\"list\":[");
    for (int i = 0; i <= CFG_MAX_PERSONAS; i++) n += sprintf(many + n, "%s{\"name\":\"p%d\"}", i ? "," : "", i);
    strcpy(many + n, "]}}");
    refused(many, MS_ERR_LIMIT, "personas.list: 65 personas", "limit of 64");
    free(many);

    /* --set takes the list as JSON; a refused one changes nothing */
    cfg_init(&c);
    ck_assert_int_eq(cfg_set(&c, "personas.list=[{\"name\":\"x\",\"text\":\"t\"}]", &e), MS_OK);
    ck_assert_int_eq(c.personas.list.n, 1);
    ck_assert_int_eq(cfg_set(&c, "personas.list=[{\"name\":\"x\",\"tex\":\"t\"}]", &e), MS_ERR_NOTFOUND);
    ck_assert_msg(strstr(e.msg, "--set: personas.list[0].tex: unknown key"), "%s", e.msg);
    ck_assert_str_eq(c.personas.list.v[0].text, "t");
    cfg_close(&c);

    /* reload: the list is reloadable */
    cfg cur, next;
    cfg_reload_report rep;
    ck_assert_int_eq(load(&cur, "{}", &e), MS_OK);
    ck_assert_int_eq(load(&next, good, &e), MS_OK);
    ck_assert_int_eq(cfg_apply_reload(&cur, &next, &rep), 0);
    ck_assert_int_eq(rep.n_changed, 1);
    ck_assert_msg(strstr(rep.changed, "personas.list: [] -> [{\"name\":\"ada\""), "%s", rep.changed);
    ck_assert(cfg_equal(&cur, &next));
    cfg_close(&cur);
    cfg_close(&next);
}
END_TEST

START_TEST(test_persona_files) {
    char dir[] = "/tmp/check_cfg_pf_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char p[512], v[512];
    snprintf(v, sizeof v, "%s/ada.wav", dir);
    write_file(v, "RIFF");
    snprintf(p, sizeof p, "%s/m.json", dir);
    const char *req = "\"model\":{\"lm_dir\":\".\",\"mimi\":\"ada.wav\",\"tokenizer\":\"ada.wav\"}";
    char json[1024];
    snprintf(json, sizeof json, "{%s,\"personas\":{\"list\":[{\"name\":\"ada\",\"voice\":\"ada.wav\"}]}}", req);
    write_file(p, json);
    cfg c;
    ms_error e = {0};
    ck_assert_msg(cfg_load_file(&c, p, &e) == MS_OK, "%s", e.msg);
    ck_assert_str_eq(c.personas.list.v[0].voice, v);
    ck_assert_msg(cfg_check_files(&c, &e) == MS_OK, "%s", e.msg);
    cfg_close(&c);
    snprintf(json, sizeof json, "{%s,\"personas\":{\"list\":[{\"name\":\"ada\"},{\"name\":\"x\",\"voice\":\"nope.wav\"}]}}",
             req);
    write_file(p, json);
    ck_assert_msg(cfg_load_file(&c, p, &e) == MS_OK, "%s", e.msg);
    ck_assert_int_eq(cfg_check_files(&c, &e), MS_ERR_IO);
    ck_assert_msg(strstr(e.msg, "personas.list[1].voice: ") && strstr(e.msg, "No such file"), "%s", e.msg);
    cfg_close(&c);
    snprintf(json, sizeof json, "{%s,\"personas\":{\"list\":[{\"name\":\"x\",\"voice\":\".\"}]}}", req);
    write_file(p, json);
    ck_assert_msg(cfg_load_file(&c, p, &e) == MS_OK, "%s", e.msg);
    ck_assert_int_eq(cfg_check_files(&c, &e), MS_ERR_ARG);
    ck_assert_msg(strstr(e.msg, "not a regular file"), "%s", e.msg);
    cfg_close(&c);
    unlink(p);
    unlink(v);
    rmdir(dir);
}
END_TEST

START_TEST(test_doc) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cfg_write_doc(f);
    fclose(f);
    for (size_t i = 0; i < cfg_noptions; i++) {
        char want[128];
        snprintf(want, sizeof want, "| `%s` |", cfg_options[i].path);
        ck_assert_msg(strstr(buf, want), "doc lacks %s", cfg_options[i].path);
    }
    ck_assert(strstr(buf, "| `server.port` | integer | `8998` | 0 .. 65535 | restart |"));
    ck_assert(strstr(buf, "| `log.level` | string (one of) | `\"info\"` |"));
    free(buf);
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("cfg");
    TCase *tc = tcase_new("core");
    tcase_add_test(tc, test_table_coherent);
    tcase_add_test(tc, test_defaults);
    tcase_add_test(tc, test_every_type);
    tcase_add_test(tc, test_bad_types);
    tcase_add_test(tc, test_bounds);
    tcase_add_test(tc, test_unknown_and_duplicate);
    tcase_add_test(tc, test_bad_json);
    tcase_add_test(tc, test_cross_check);
    tcase_add_test(tc, test_dump_roundtrip);
    tcase_add_test(tc, test_to_app);
    tcase_add_test(tc, test_cuda_options);
    tcase_add_test(tc, test_cuda_env);
    tcase_add_test(tc, test_reload);
    tcase_add_test(tc, test_files);
    tcase_add_test(tc, test_set);
    tcase_add_test(tc, test_personas);
    tcase_add_test(tc, test_persona_files);
    tcase_add_test(tc, test_doc);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN
