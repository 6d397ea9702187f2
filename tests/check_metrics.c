/* check_metrics.c - counters, labelled counters, histogram, rendering. */
#include <stdio.h>
#include <string.h>

#include "check_main.h"
#include "metrics.h"

START_TEST(test_render) {
    met_reset();
    met_add(MET_frames_stepped_total, 3);
    met_set(MET_capacity, 8);
    met_gauge_add(MET_sessions, 2);
    met_gauge_add(MET_sessions, -1);
    met_error(MET_ERR_bad_audio);
    met_ignored(MET_IGN_ping);
    met_ignored(MET_IGN_ping);
    met_auth_refused(MET_AUTH_unknown_token);
    met_endpoint_open(MET_EP_realtime);
    met_endpoint_open(MET_EP_realtime);
    met_endpoint_open(MET_EP_chat);
    met_endpoint_close(MET_EP_realtime);
    met_endpoint_open(-1);        /* not an endpoint: not counted */
    met_endpoint_close(MET__NEP);
    met_observe_step_ms(3.0);   /* bucket 5 ms */
    met_observe_step_ms(70.0);  /* bucket 80 ms */
    met_observe_step_ms(1000.0); /* +Inf only */
    char buf[16384];
    size_t n = met_render(buf, sizeof buf);
    ck_assert_uint_lt(n, sizeof buf);
    ck_assert_ptr_nonnull(strstr(buf, "\nmoshid_frames_stepped_total 3\n"));
    ck_assert_ptr_nonnull(strstr(buf, "\nmoshid_capacity 8\n"));
    ck_assert_ptr_nonnull(strstr(buf, "\nmoshid_sessions 1\n"));
    ck_assert_ptr_nonnull(strstr(buf, "moshid_errors_total{kind=\"bad_audio\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(buf, "moshid_ignored_messages_total{kind=\"ping\"} 2\n"));
    ck_assert_ptr_nonnull(strstr(buf, "moshid_auth_refused_total{reason=\"unknown_token\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(buf, "moshid_auth_refused_total{reason=\"origin\"} 0\n"));
    ck_assert_ptr_nonnull(strstr(buf, "moshid_endpoint_sessions_total{endpoint=\"realtime\"} 2\n"));
    ck_assert_ptr_nonnull(strstr(buf, "moshid_endpoint_sessions_total{endpoint=\"chat\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(buf, "moshid_endpoint_sessions{endpoint=\"realtime\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(buf, "moshid_endpoint_sessions{endpoint=\"chat\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(buf, "moshid_step_latency_seconds_bucket{le=\"0.005\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(buf, "moshid_step_latency_seconds_bucket{le=\"0.08\"} 2\n"));
    ck_assert_ptr_nonnull(strstr(buf, "moshid_step_latency_seconds_bucket{le=\"0.64\"} 2\n"));
    ck_assert_ptr_nonnull(strstr(buf, "moshid_step_latency_seconds_bucket{le=\"+Inf\"} 3\n"));
    ck_assert_ptr_nonnull(strstr(buf, "moshid_step_latency_seconds_count 3\n"));
    /* every line is a comment or "name[{labels}] value" */
    for (char *l = strtok(buf, "\n"); l; l = strtok(NULL, "\n"))
        ck_assert_msg(l[0] == '#' || strncmp(l, "moshid_", 7) == 0, "bad line %s", l);
}
END_TEST

/* Each labelled family: HELP and TYPE once, then one sample per key, all
 * zero after met_reset. */
START_TEST(test_labelled_families) {
    static const struct { const char *name, *type, *label; const char *keys[8]; } fam[] = {
        {"errors_total", "counter", "kind", {"bad_audio"}},
        {"ignored_messages_total", "counter", "kind", {"empty", "control", "ping", "text", "unknown"}},
        {"auth_refused_total", "counter", "reason", {"origin", "missing_token", "unknown_token", "token_limit"}},
        {"endpoint_sessions_total", "counter", "endpoint", {"chat", "realtime"}},
        {"endpoint_sessions", "gauge", "endpoint", {"chat", "realtime"}},
    };
    met_reset();
    char buf[16384], want[256];
    met_render(buf, sizeof buf);
    for (size_t f = 0; f < sizeof fam / sizeof fam[0]; f++) {
        snprintf(want, sizeof want, "# TYPE moshid_%s %s\n", fam[f].name, fam[f].type);
        const char *t = strstr(buf, want);
        ck_assert_msg(t && !strstr(t + 1, want), "%s: TYPE once", fam[f].name);
        snprintf(want, sizeof want, "# HELP moshid_%s ", fam[f].name);
        ck_assert_msg(strstr(buf, want), "%s: HELP", fam[f].name);
        for (int k = 0; k < 8 && fam[f].keys[k]; k++) {
            snprintf(want, sizeof want, "\nmoshid_%s{%s=\"%s\"} 0\n", fam[f].name, fam[f].label, fam[f].keys[k]);
            ck_assert_msg(strstr(buf, want), "missing %s", want + 1);
        }
    }
}
END_TEST

/* moshid_engine_info: absent before the model opens, then one sample with
 * the backend and its schemes; label values kept to plain characters. */
START_TEST(test_engine_info) {
    met_reset();
    char buf[16384];
    met_render(buf, sizeof buf);
    ck_assert_ptr_null(strstr(buf, "moshid_engine_info"));
    met_set_engine_info("cpu", "int8", "f32");
    met_render(buf, sizeof buf);
    ck_assert_msg(strstr(buf, "# TYPE moshid_engine_info gauge\n"
                              "moshid_engine_info{backend=\"cpu\",weights=\"int8\",kv=\"f32\"} 1\n"), "%s", buf);
    met_set_engine_info("cuda", NULL, "b\"f\n16");
    met_render(buf, sizeof buf);
    ck_assert_msg(strstr(buf, "moshid_engine_info{backend=\"cuda\",weights=\"unknown\",kv=\"b_f_16\"} 1\n"), "%s",
                  buf);
    met_reset();
    met_render(buf, sizeof buf);
    ck_assert_ptr_null(strstr(buf, "moshid_engine_info"));
}
END_TEST

START_TEST(test_small_buffer) {
    met_reset();
    char small[64];
    size_t need = met_render(small, sizeof small);
    ck_assert_uint_gt(need, sizeof small);
    ck_assert_uint_eq(strlen(small), sizeof small - 1);
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("metrics");
    TCase *tc = tcase_new("core");
    tcase_add_test(tc, test_render);
    tcase_add_test(tc, test_labelled_families);
    tcase_add_test(tc, test_engine_info);
    tcase_add_test(tc, test_small_buffer);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN
