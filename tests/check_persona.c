/* check_persona.c - the persona manager's answers to a session's query
 * (daemon/persona/persona.c, pers_request) that need no engine thread:
 * none asked, the refusals (a Kyutai checkpoint, persona with a prompt, an
 * unknown name, voice_prompt without a voice directory, on-demand primes
 * off, shutting down) with their close status, error kind and message, and
 * /api/personas. Model: the demo model (make demo-model), PersonaPlex-
 * and Kyutai-shaped. Primes and restores run in
 * tests/integration/test_personas.py. */
#include <stdio.h>
#include <string.h>

#include "check_main.h"
#include "metrics.h"
#include "model.h"
#include "msg.h"
#include "persona.h"
#include "query.h"

static model *open_model(const char *lm_rel) {
    const char *bd = check_build_dir();
    static char lm[512], mimi[512], mcfg[512], tok[512];
    snprintf(lm, sizeof lm, "%s/demo/%s", bd, lm_rel);
    snprintf(mimi, sizeof mimi, "%s/demo/mimi.safetensors", bd);
    snprintf(mcfg, sizeof mcfg, "%s/demo/mimi.json", bd);
    snprintf(tok, sizeof tok, "%s/demo/tokenizer.model", bd);
    model_opts o = {.lm_dir = lm, .mimi = mimi, .mimi_config = mcfg, .tokenizer = tok, .backend = "cpu",
                    .threads = 1, .slots = 1, .variant = LM_VARIANT_AUTO, .prime_slots = 1, .prime_chunk = 16};
    ms_error e = {0};
    model *m = model_open(&o, &e);
    ck_assert_msg(m != NULL, "%s (the demo model: make demo-model)", e.msg);
    return m;
}

static pers *new_pers(model *m, int on_demand, const char *voices_dir) {
    pers_opts o = {.list = NULL, .voices_dir = voices_dir, .on_demand = on_demand, .cache_bytes = 1 << 20,
                   .max_prompt_tokens = 256, .max_voice_s = 10, .max_concurrent_primes = 1};
    ms_error e = {0};
    pers *p = pers_create(NULL, m, NULL, &o, &e);
    ck_assert_msg(p != NULL, "%s", e.msg);
    return p;
}

/* pers_request on the raw query string qs; *f filled on PERS_FAIL. */
static pers_answer ask(pers *p, const char *qs, pers_fail *f) {
    proto_query q;
    ms_error e = {0};
    ck_assert_msg(proto_query_parse(&q, qs, strlen(qs), &e) == MS_OK, "%s: %s", qs, e.msg);
    pers_ticket t;
    memset(&t, 0, sizeof t);
    memset(f, 0, sizeof *f);
    pers_answer a = pers_request(p, &q, &t, f);
    pers_ticket_release(p, &t);
    return a;
}

static void refused(pers *p, const char *qs, int status, int kind, const char *needle) {
    pers_fail f;
    ck_assert_int_eq(ask(p, qs, &f), PERS_FAIL);
    ck_assert_int_eq(f.status, status);
    ck_assert_int_eq(f.kind, kind);
    ck_assert_msg(strstr(f.msg, needle) != NULL, "%s: \"%s\" lacks \"%s\"", qs, f.msg, needle);
}

START_TEST(test_none_asked) {
    model *m = open_model("lm");
    pers *p = new_pers(m, 1, NULL);
    pers_fail f;
    ck_assert_int_eq(ask(p, "", &f), PERS_NONE);
    ck_assert_int_eq(ask(p, "text_temperature=0.5&seed=3", &f), PERS_NONE);
    pers_free(p);
    model_close(m);
}
END_TEST

START_TEST(test_refusals) {
    model *m = open_model("lm");
    pers *p = new_pers(m, 1, NULL);
    refused(p, "persona=alice&text_prompt=hello", PROTO_CLOSE_POLICY, MET_ERR_bad_persona, "not both");
    refused(p, "persona=ghost", PROTO_CLOSE_POLICY, MET_ERR_bad_persona, "unknown persona \"ghost\"");
    refused(p, "voice_prompt=NATF0.pt", PROTO_CLOSE_POLICY, MET_ERR_bad_persona, "no voice directory");
    pers_stop(p);
    refused(p, "persona=ghost", PROTO_CLOSE_TRY_LATER, MET_ERR_busy, "shutting down");
    pers_free(p);
    model_close(m);
}
END_TEST

/* On-demand primes off: a prompt in the query is refused. */
START_TEST(test_on_demand_off) {
    model *m = open_model("lm");
    pers *p = new_pers(m, 0, NULL);
    refused(p, "text_prompt=hello", PROTO_CLOSE_POLICY, MET_ERR_bad_persona, "off on this server");
    char *js = pers_list_json(p);
    ck_assert_ptr_nonnull(js);
    ck_assert_str_eq(js, "{\"personas\":[],\"on_demand\":false,\"voice_prompt\":false}");
    free(js);
    pers_free(p);
    model_close(m);
}
END_TEST

/* A Kyutai checkpoint has no personas: any persona query is refused, and
 * /api/personas says so. */
START_TEST(test_kyutai) {
    model *m = open_model("kyutai/lm");
    pers *p = new_pers(m, 1, NULL);
    refused(p, "persona=alice", PROTO_CLOSE_POLICY, MET_ERR_bad_persona, "need a PersonaPlex");
    refused(p, "text_prompt=hi", PROTO_CLOSE_POLICY, MET_ERR_bad_persona, "need a PersonaPlex");
    char *js = pers_list_json(p);
    ck_assert_ptr_nonnull(js);
    ck_assert_str_eq(js, "{\"personas\":[],\"on_demand\":false,\"voice_prompt\":false}");
    free(js);
    pers_free(p);
    model_close(m);
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("persona");
    TCase *tc = tcase_create("request");
    tcase_add_test(tc, test_none_asked);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_on_demand_off);
    tcase_add_test(tc, test_kyutai);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN
