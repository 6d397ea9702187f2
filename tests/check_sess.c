/* check_sess.c - a session's opening without a server: its query read
 * (sess_query_set_args, sess_query_finish, sess_max_steps), its sampling
 * (sess_samp_resolve) and its metadata message (sess_metadata_json), with
 * good and hostile inputs. The persona a query names is judged by the
 * persona manager (check_persona: unknown, not configured, refused). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "check_main.h"
#include "sess.h"

/* A model's cards as sess_query_finish sees them (Kyutai's sizes). */
static const lm_config *cards(void) {
    static lm_config c;
    c.text_card = 32000;
    c.card = 2048;
    c.dim = 64;
    c.num_layers = 2;
    c.dep_q = 8;
    c.context = 3000;
    return &c;
}

/* Read args (NULL-terminated) as sess_open does, then finish against the
 * cards and limits.max_steps = cap. */
static int read_args(proto_query *q, const char *const *args, int64_t cap, ms_error *e) {
    int n = 0;
    while (args[n]) n++;
    int rc = sess_query_set_args(q, args, n, e);
    return rc != MS_OK ? rc : sess_query_finish(q, cards(), cap, e);
}

START_TEST(test_query_good) {
    /* what the Kyutai web client sends, and PersonaPlex's prompts */
    const char *const kyutai[] = {"text_temperature=0.7", "text_topk=25",       "audio_temperature=0.8",
                                  "audio_topk=250",       "pad_mult=0",         "text_seed=1234",
                                  "audio_seed=99",        "repetition_penalty_context=64",
                                  "repetition_penalty=1", "worker_auth_id=x",   NULL};
    proto_query q;
    ms_error e = {0};
    ck_assert_msg(read_args(&q, kyutai, 0, &e) == MS_OK, "%s", e.msg);
    ck_assert(q.text_temperature == 0.7 && q.audio_temperature == 0.8);
    ck_assert_int_eq(q.text_topk, 25);
    ck_assert_int_eq(q.audio_topk, 250);
    ck_assert_int_eq(proto_query_text_seed(&q), 1234);
    ck_assert_int_eq(proto_query_audio_seed(&q), 99);
    ck_assert_int_eq(sess_max_steps(&q, 0), 0);   /* no limit */
    const char *const pp[] = {"voice_prompt=NATF0.pt", "text_prompt=You are a helpful teacher. Be kind.",
                              "persona=ada-2.x", NULL};
    ck_assert_msg(read_args(&q, pp, 0, &e) == MS_OK, "%s", e.msg);
    ck_assert_str_eq(q.voice_prompt, "NATF0.pt");
    ck_assert_str_eq(q.text_prompt, "You are a helpful teacher. Be kind.");
    ck_assert_str_eq(q.persona, "ada-2.x");
    /* the ends of the ranges: top-k up to the cards, temperature 0 and 5 */
    const char *const ends[] = {"text_topk=32000", "audio_topk=2048", "text_temperature=0", "audio_temperature=5",
                                NULL};
    ck_assert_msg(read_args(&q, ends, 0, &e) == MS_OK, "%s", e.msg);
    /* nothing at all; a key without '=' (ignored) */
    const char *const none[] = {NULL};
    ck_assert_int_eq(read_args(&q, none, 0, &e), MS_OK);
    ck_assert_uint_eq(q.present, 0);
    const char *const bare[] = {"flag", NULL};
    ck_assert_int_eq(read_args(&q, bare, 0, &e), MS_OK);
    ck_assert_uint_eq(q.present, 0);
}
END_TEST

/* One hostile query: refused with code, the message naming what. */
typedef struct bad_case {
    const char *arg;
    int code;
    const char *what;
} bad_case;

START_TEST(test_query_hostile) {
    static const bad_case cases[] = {
        {"text_temperature=abc", MS_ERR_FORMAT, "text_temperature"},
        {"text_temperature=", MS_ERR_FORMAT, "text_temperature"},
        {"text_temperature=0x1p1", MS_ERR_FORMAT, "text_temperature"},
        {"text_temperature=nan", MS_ERR_FORMAT, "text_temperature"},
        {"text_temperature=inf", MS_ERR_FORMAT, "text_temperature"},
        {"text_temperature=1e999", MS_ERR_FORMAT, "text_temperature"},
        {"text_temperature=5.0001", MS_ERR_RANGE, "text_temperature"},
        {"audio_temperature=-0.1", MS_ERR_RANGE, "audio_temperature"},
        {"text_topk=0", MS_ERR_RANGE, "text_topk"},
        {"text_topk=-5", MS_ERR_RANGE, "text_topk"},
        {"text_topk=2.5", MS_ERR_FORMAT, "text_topk"},
        {"text_topk=1e3", MS_ERR_FORMAT, "text_topk"},
        {"text_topk=99999999999999999999", MS_ERR_FORMAT, "text_topk"},
        {"text_topk=32001", MS_ERR_RANGE, "text_topk=32001 out of range [1, 32000]"},   /* past the card */
        {"audio_topk=2049", MS_ERR_RANGE, "audio_topk=2049 out of range [1, 2048]"},
        {"audio_topk=1048577", MS_ERR_RANGE, "audio_topk"},                              /* past PROTO_TOPK_MAX */
        {"text_seed=-2", MS_ERR_RANGE, "text_seed"},
        {"seed=12abc", MS_ERR_FORMAT, "seed"},
        {"max_steps=0", MS_ERR_RANGE, "max_steps"},
        {"persona=../etc", MS_ERR_FORMAT, "persona may hold only"},
        {"persona=a b", MS_ERR_FORMAT, "persona may hold only"},
        {"persona=", MS_ERR_FORMAT, "persona must hold 1 to 128"},
        {"voice_prompt=../../secret.wav", MS_ERR_FORMAT, "voice_prompt must be a plain file name"},
        {"voice_prompt=dir/voice.wav", MS_ERR_FORMAT, "voice_prompt must be a plain file name"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *const args[] = {cases[i].arg, NULL};
        proto_query q;
        ms_error e = {0};
        int rc = read_args(&q, args, 0, &e);
        ck_assert_msg(rc == cases[i].code, "'%s': want %s, got %s (%s)", cases[i].arg, ms_err_name(cases[i].code),
                      ms_err_name(rc), e.msg);
        ck_assert_msg(strstr(e.msg, cases[i].what), "'%s': message '%s' lacks '%s'", cases[i].arg, e.msg,
                      cases[i].what);
    }
    /* a parameter given twice */
    proto_query q;
    ms_error e = {0};
    const char *const twice[] = {"text_topk=5", "text_topk=6", NULL};
    ck_assert_int_eq(read_args(&q, twice, 0, &e), MS_ERR_FORMAT);
    ck_assert_msg(strstr(e.msg, "twice"), "%s", e.msg);
    /* over the query limits (srv hands -1) */
    ck_assert_int_eq(sess_query_set_args(&q, NULL, -1, &e), MS_ERR_LIMIT);
    ck_assert_msg(strstr(e.msg, "parameters"), "%s", e.msg);
    /* oversize values: a persona name, a voice file name, a role text */
    size_t big = PROTO_TEXT_PROMPT_MAX + 64;
    char *arg = malloc(big + 32);
    ck_assert_ptr_nonnull(arg);
    static const struct { const char *key; size_t over; } sizes[] = {
        {"persona", PROTO_NAME_MAX + 1},
        {"voice_prompt", PROTO_NAME_MAX + 1},
        {"text_prompt", PROTO_TEXT_PROMPT_MAX + 1},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        for (int fits = 1; fits >= 0; fits--) {
            size_t n = sizes[i].over - (size_t)fits;
            int kl = snprintf(arg, big + 32, "%s=", sizes[i].key);
            memset(arg + kl, 'a', n);
            arg[(size_t)kl + n] = '\0';
            const char *const args[] = {arg, NULL};
            int rc = read_args(&q, args, 0, &e);
            if (fits) ck_assert_msg(rc == MS_OK, "%s of %zu bytes: %s", sizes[i].key, n, e.msg);
            else ck_assert_msg(rc != MS_OK && strstr(e.msg, sizes[i].key), "%s of %zu bytes: %s", sizes[i].key, n,
                               e.msg);
        }
    }
    free(arg);
    /* a refused query leaves nothing half-set for the next read */
    const char *const good[] = {"text_topk=3", NULL};
    ck_assert_int_eq(read_args(&q, good, 0, &e), MS_OK);
    ck_assert_uint_eq(q.present, 1u << PROTO_Q_TEXT_TOPK);
}
END_TEST

START_TEST(test_max_steps) {
    proto_query q;
    ms_error e = {0};
    const char *const ask100[] = {"max_steps=100", NULL};
    /* no configured limit: the query's */
    ck_assert_int_eq(read_args(&q, ask100, 0, &e), MS_OK);
    ck_assert_int_eq(sess_max_steps(&q, 0), 100);
    ck_assert(!q.max_steps_capped);
    /* limits.max_steps lowers it, never the other way round */
    ck_assert_int_eq(read_args(&q, ask100, 40, &e), MS_OK);
    ck_assert_int_eq(sess_max_steps(&q, 40), 40);
    ck_assert(q.max_steps_capped);
    ck_assert_int_eq(read_args(&q, ask100, 500, &e), MS_OK);
    ck_assert_int_eq(sess_max_steps(&q, 500), 100);
    /* no query value: the configuration's */
    const char *const none[] = {NULL};
    ck_assert_int_eq(read_args(&q, none, 500, &e), MS_OK);
    ck_assert_int_eq(sess_max_steps(&q, 500), 500);
    const char *const huge[] = {"max_steps=1000000001", NULL};
    ck_assert_int_eq(read_args(&q, huge, 0, &e), MS_ERR_RANGE);
}
END_TEST

START_TEST(test_samp_resolve) {
    app_opts o;
    memset(&o, 0, sizeof o);
    o.text_temperature = 0.7;
    o.text_topk = 25;
    o.audio_temperature = 0.8;
    o.audio_topk = 250;
    pers_samp none = {-1, -1, -1, -1}, persona = {0.3, 0.4, 5, 6};
    proto_query q;
    ms_error e = {0};
    lm_samp s;
    /* the configuration's defaults */
    const char *const empty[] = {NULL};
    ck_assert_int_eq(read_args(&q, empty, 0, &e), MS_OK);
    sess_samp_resolve(&q, &none, &o, &s);
    ck_assert(fabsf(s.text_temp - 0.7f) < 1e-6f && fabsf(s.audio_temp - 0.8f) < 1e-6f);
    ck_assert(s.text_topk == 25 && s.audio_topk == 250);
    ck_assert(s.seed <= (uint64_t)INT64_MAX && s.audio_seed <= (uint64_t)INT64_MAX);   /* random, 63 bits */
    /* a persona's overrides over them */
    sess_samp_resolve(&q, &persona, &o, &s);
    ck_assert(fabsf(s.text_temp - 0.3f) < 1e-6f && fabsf(s.audio_temp - 0.4f) < 1e-6f);
    ck_assert(s.text_topk == 5 && s.audio_topk == 6);
    /* the query over both; greedy (0) is a value, not "unset"; one seed for both streams */
    const char *const args[] = {"text_temperature=0", "audio_topk=7", "seed=42", NULL};
    ck_assert_int_eq(read_args(&q, args, 0, &e), MS_OK);
    sess_samp_resolve(&q, &persona, &o, &s);
    ck_assert(s.text_temp == 0.0f && fabsf(s.audio_temp - 0.4f) < 1e-6f);
    ck_assert(s.text_topk == 5 && s.audio_topk == 7);
    ck_assert(s.seed == 42 && s.audio_seed == 42);
    const char *const seeds[] = {"seed=42", "audio_seed=0", NULL};
    ck_assert_int_eq(read_args(&q, seeds, 0, &e), MS_OK);
    sess_samp_resolve(&q, &none, &o, &s);
    ck_assert(s.seed == 42 && s.audio_seed == 0);
}
END_TEST

/* The metadata of a session s under o, parsed. */
static cJSON *metadata(const app_opts *o, const sess *s) {
    char json[SESS_METADATA_MAX];
    int n = sess_metadata_json(o, "personaplex", "cpu", cards(), s, json, sizeof json);
    ck_assert_int_gt(n, 0);
    ck_assert_uint_eq(strlen(json), (size_t)n);
    cJSON *j = cJSON_Parse(json);
    ck_assert_msg(j != NULL, "not JSON: %s", json);
    return j;
}

static const char *str(const cJSON *j, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, k);
    ck_assert_msg(cJSON_IsString(v), "%s is not a string", k);
    return v->valuestring;
}

static double num(const cJSON *j, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, k);
    ck_assert_msg(cJSON_IsNumber(v), "%s is not a number", k);
    return v->valuedouble;
}

START_TEST(test_metadata) {
    app_opts o;
    memset(&o, 0, sizeof o);
    o.build = "0.1.0-dev (abc)";
    o.model.lm_dir = "/models/personaplex-7b-v1/";
    o.srv.max_message_bytes = 1 << 20;
    o.input_buffer_s = 4;
    o.output_queue_s = 2;
    o.idle_timeout_s = 60;
    static sess s;   /* static: the session's buffers are large */
    memset(&s, 0, sizeof s);
    s.samp = (lm_samp){.text_temp = 0.7f, .text_topk = 25, .audio_temp = 0.8f, .audio_topk = 250};
    s.max_steps = 100;
    cJSON *j = metadata(&o, &s);
    ck_assert_str_eq(str(j, "server"), "moshid");
    ck_assert_str_eq(str(j, "build"), "0.1.0-dev (abc)");
    ck_assert_str_eq(str(j, "variant"), "personaplex");
    ck_assert_str_eq(str(j, "backend"), "cpu");
    ck_assert_int_eq((int)num(j, "max_steps"), 100);
    ck_assert_int_eq((int)num(j, "sample_rate"), 24000);
    const cJSON *samp = cJSON_GetObjectItemCaseSensitive(j, "sampling");
    ck_assert_int_eq((int)num(samp, "text_topk"), 25);
    ck_assert_int_eq((int)num(samp, "audio_topk"), 250);
    ck_assert(fabs(num(samp, "text_temperature") - 0.7) < 1e-6);
    const cJSON *lim = cJSON_GetObjectItemCaseSensitive(j, "limits");
    ck_assert_int_eq((int)num(lim, "max_message_bytes"), 1 << 20);
    ck_assert_int_eq((int)num(lim, "idle_timeout_s"), 60);
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(j, "model");
    ck_assert_int_eq((int)num(model, "context"), 3000);
    ck_assert_int_eq((int)num(model, "dep_q"), 8);
    /* the Kyutai web client's flat fields */
    ck_assert_str_eq(str(j, "lm_model_file"), "personaplex-7b-v1");
    ck_assert_int_eq((int)num(j, "text_topk"), 25);
    ck_assert_int_eq((int)num(j, "repetition_penalty"), 1);
    ck_assert_str_eq(str(cJSON_GetObjectItemCaseSensitive(j, "build_info"), "git_describe"), "0.1.0-dev (abc)");
    ck_assert_ptr_null(cJSON_GetObjectItemCaseSensitive(j, "persona"));   /* none */
    cJSON_Delete(j);

    /* a persona: configured (its name) or on demand (null), with its key */
    strcpy(s.pt.label, "ada");
    strcpy(s.pt.name, "ada");
    s.pt.key_hash = 0x0123456789abcdefull;
    j = metadata(&o, &s);
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "persona");
    ck_assert_str_eq(str(p, "name"), "ada");
    ck_assert_str_eq(str(p, "key"), "0123456789abcdef");
    cJSON_Delete(j);
    s.pt.name[0] = '\0';
    j = metadata(&o, &s);
    ck_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "persona"), "name")));
    cJSON_Delete(j);

    /* hostile directory names: quotes, back-slashes, control bytes and
     * non-ASCII become '_'; a long name is cut; the JSON stays valid */
    o.model.lm_dir = "/m/a\"b\\c\n\x01\xc3\xa9}";
    j = metadata(&o, &s);
    ck_assert_str_eq(str(j, "lm_model_file"), "a_b_c_____");
    cJSON_Delete(j);
    char longdir[400] = "/m/";
    memset(longdir + 3, 'x', 300);
    longdir[303] = '\0';
    o.model.lm_dir = longdir;
    j = metadata(&o, &s);
    ck_assert_uint_eq(strlen(str(j, "lm_model_file")), 63);
    cJSON_Delete(j);
    o.model.lm_dir = NULL;   /* none: "" */
    j = metadata(&o, &s);
    ck_assert_str_eq(str(j, "lm_model_file"), "");
    cJSON_Delete(j);
    o.model.lm_dir = "/";
    j = metadata(&o, &s);
    ck_assert_str_eq(str(j, "lm_model_file"), "");
    cJSON_Delete(j);

    /* a buffer too small: -1, never a cut message */
    char small[256];
    ck_assert_int_eq(sess_metadata_json(&o, "kyutai", "cpu", cards(), &s, small, sizeof small), -1);
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("sess");
    TCase *tc = tcase_new("core");
    tcase_add_test(tc, test_query_good);
    tcase_add_test(tc, test_query_hostile);
    tcase_add_test(tc, test_max_steps);
    tcase_add_test(tc, test_samp_resolve);
    tcase_add_test(tc, test_metadata);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN
